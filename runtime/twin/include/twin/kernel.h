// Kernel-side system values and tiling access: GetBlockIdx/GetBlockNum, the tiling-data macros,
// TILING_KEY_IS and the kernel task type.
#ifndef TWIN_KERNEL_H
#define TWIN_KERNEL_H

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "twin/core.h"

enum KernelMetaType : uint8_t {
    KERNEL_TYPE_AIV_ONLY,
    KERNEL_TYPE_AIC_ONLY,
    KERNEL_TYPE_MIX_AIV_1_0,
    KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1,
    KERNEL_TYPE_MIX_AIC_1_2,
};

namespace AscendC {

__aicore__ inline int64_t GetBlockIdx() { return twin::Current().index; }

__aicore__ inline int64_t GetBlockNum() { return twin::Current().launch->blockDim; }

}  // namespace AscendC

namespace twin {

inline bool TilingKeyIs(uint64_t key)
{
    Block& b = Current();
    const bool hit = b.launch->tilingKey == key;
    b.keyBranches += hit ? 1 : 0;
    return hit;
}

// The tiling argument points at the tiling data in GM; read it whole, as the device does.
template <typename S>
inline void ReadTiling(S* out, const uint8_t* tiling)
{
    static_assert(std::is_trivially_copyable<S>::value, "tiling data must be a plain struct");
    Block& b = Current();
    const int32_t region = FindRegion(tiling);
    if (region < 0 || b.launch->regions[region].kind != GM_TILING) {
        Fail("tiling-size", "GET_TILING_DATA reads a tiling pointer that is not the launch's tiling data");
    }
    const GmRegion& r = b.launch->regions[region];
    if (r.bytes < sizeof(S) || tiling != r.base) {
        Fail("tiling-size", "the kernel reads %llu bytes of tiling data, the host wrote %llu",
             static_cast<unsigned long long>(sizeof(S)), static_cast<unsigned long long>(r.bytes));
    }
    std::memcpy(out, tiling, sizeof(S));
    b.tilingRead = true;
}

}  // namespace twin

#define REGISTER_TILING_DEFAULT(tilingStruct) \
    static_assert(::std::is_trivially_copyable<tilingStruct>::value, "tiling data must be a plain struct")

#define GET_TILING_DATA_WITH_STRUCT(tilingStruct, tilingData, tilingArg) \
    tilingStruct tilingData;                                             \
    ::twin::ReadTiling(&tilingData, reinterpret_cast<const uint8_t*>(tilingArg))

#define TILING_KEY_IS(key) (::twin::TilingKeyIs(static_cast<uint64_t>(key)))

#define KERNEL_TASK_TYPE_DEFAULT(type) static_assert((type) == KERNEL_TYPE_AIV_ONLY, "the twin runs vector-only kernels")

#endif  // TWIN_KERNEL_H
