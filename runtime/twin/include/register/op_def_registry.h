// The CPU twin compiles only the emitted tiling function on the host side; it needs the
// registration and context types, which the real header also brings in.
#ifndef TWIN_REGISTER_OP_DEF_REGISTRY_H
#define TWIN_REGISTER_OP_DEF_REGISTRY_H

#include "register/op_impl_registry.h"

#endif  // TWIN_REGISTER_OP_DEF_REGISTRY_H
