// PlatformAscendC for the CPU twin: the target's AIV core count and usable UB, as the launcher
// puts them into the tiling context (codegen/targets.py values).
#ifndef TWIN_TILING_PLATFORM_PLATFORM_ASCENDC_H
#define TWIN_TILING_PLATFORM_PLATFORM_ASCENDC_H

#include <cstdint>

#include "register/op_impl_registry.h"

namespace platform_ascendc {

enum class CoreMemType { L0_A = 0, L0_B = 1, L0_C = 2, L1 = 3, L2 = 4, UB = 5, HBM = 6, FB = 7, BT = 8, RESERVED };

class PlatformAscendC {
public:
    explicit PlatformAscendC(fe::PlatFormInfos* platformInfo) : info_(platformInfo) {}

    uint32_t GetCoreNumAiv() const { return info_ ? info_->coreNumAiv : 0; }

    void GetCoreMemSize(const CoreMemType& memType, uint64_t& size) const
    {
        size = (info_ != nullptr && memType == CoreMemType::UB) ? info_->ubBytes : 0;
    }

    // No API of the emitted subset needs library workspace.
    uint32_t GetLibApiWorkSpaceSize() const { return 0; }

private:
    fe::PlatFormInfos* info_;
};

}  // namespace platform_ascendc

#endif  // TWIN_TILING_PLATFORM_PLATFORM_ASCENDC_H
