// kernel_operator.h of the CPU twin: the AscendC subset the codegen emitter uses, for g++ -std=c++17.
// See runtime/twin/__init__.py for what it implements and which hardware rules it enforces.
#ifndef TWIN_KERNEL_OPERATOR_H
#define TWIN_KERNEL_OPERATOR_H

#include "twin/core.h"
#include "twin/dtypes.h"
#include "twin/tensor.h"
#include "twin/operand.h"
#include "twin/copy.h"
#include "twin/vector.h"
#include "twin/gather.h"
#include "twin/kernel.h"

#endif  // TWIN_KERNEL_OPERATOR_H
