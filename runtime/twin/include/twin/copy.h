// Data movement between GM and UB: DataCopy (whole 32-byte blocks only) and DataCopyPad.
#ifndef TWIN_COPY_H
#define TWIN_COPY_H

#include <cstdint>
#include <cstring>

#include "twin/core.h"
#include "twin/operand.h"
#include "twin/tensor.h"

namespace AscendC {

struct DataCopyExtParams {
    __aicore__ DataCopyExtParams() {}
    __aicore__ DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn,
                                 const uint32_t dstStrideIn, const uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn)
    {
    }
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;  // bytes
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    __aicore__ DataCopyPadExtParams() {}
    __aicore__ DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                                    T padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue)
    {
    }
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue = T(0);
};

}  // namespace AscendC

namespace twin {

constexpr uint32_t MAX_BLOCK_COUNT = 4095;
constexpr uint32_t MAX_BLOCK_LEN = 2097151;

inline uint64_t CopyBytes(uint32_t count, uint32_t elem, const char* api)
{
    const uint64_t bytes = static_cast<uint64_t>(count) * elem;
    if (bytes % UB_BLOCK != 0) {
        Fail("datacopy-length",
             "%s of %u elements = %llu bytes is not whole 32-byte blocks (the hardware would silently copy only "
             "%llu); move a tail with DataCopyPad",
             api, count, static_cast<unsigned long long>(bytes),
             static_cast<unsigned long long>(bytes / UB_BLOCK * UB_BLOCK));
    }
    return bytes;
}

inline void CheckPadParams(const AscendC::DataCopyExtParams& p, uint32_t elem, const char* api)
{
    if (p.blockCount < 1 || p.blockCount > MAX_BLOCK_COUNT) {
        Fail("datacopypad-params", "%s: blockCount %u is outside [1, %u]", api, p.blockCount, MAX_BLOCK_COUNT);
    }
    if (p.blockLen > MAX_BLOCK_LEN) {
        Fail("datacopypad-params", "%s: blockLen %u bytes is over the %u-byte limit", api, p.blockLen, MAX_BLOCK_LEN);
    }
    if (p.blockLen % elem != 0) {
        Fail("datacopypad-params", "%s: blockLen %u bytes is not a multiple of the %u-byte element", api, p.blockLen,
             elem);
    }
}

}  // namespace twin

namespace AscendC {

template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count)
{
    const char* api = "DataCopy GM->UB";
    const uint64_t bytes = twin::CopyBytes(count, sizeof(T), api);
    twin::Span<T> d = twin::Operand(dst, bytes, api, "dst");
    twin::GmAccess(src.twinRegion_, src.twinAddr_, bytes, false, api);
    std::memcpy(d.data, src.twinAddr_, bytes);
}

template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count)
{
    const char* api = "DataCopy UB->GM";
    const uint64_t bytes = twin::CopyBytes(count, sizeof(T), api);
    twin::Span<T> s = twin::Operand(src, bytes, api, "src");
    twin::GmAccess(dst.twinRegion_, dst.twinAddr_, bytes, true, api);
    std::memcpy(dst.twinAddr_, s.data, bytes);
}

// GM -> UB for any byte length: each block lands 32-byte aligned in UB, its pad up to the next
// 32-byte boundary holds paddingValue with isPad, else dummy data (the block's first element).
template <typename T>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                   const DataCopyExtParams& dataCopyParams, const DataCopyPadExtParams<T>& padParams)
{
    const char* api = "DataCopyPad GM->UB";
    twin::CheckPadParams(dataCopyParams, sizeof(T), api);
    if (padParams.leftPadding != 0 || padParams.rightPadding != 0) {
        twin::Fail("unsupported", "%s with left/right padding (not in the emitted subset)", api);
    }
    const uint32_t len = dataCopyParams.blockLen;
    const uint64_t ubBlock = twin::RoundUp32(len);
    const uint64_t ubStep = ubBlock + static_cast<uint64_t>(dataCopyParams.dstStride) * twin::UB_BLOCK;
    const uint64_t gmStep = static_cast<uint64_t>(len) + dataCopyParams.srcStride;
    const uint32_t blocks = dataCopyParams.blockCount;
    twin::Span<T> d = twin::Operand(dst, ubStep * (blocks - 1) + ubBlock, api, "dst");
    uint8_t* ub = reinterpret_cast<uint8_t*>(d.data);
    const uint8_t* gm = reinterpret_cast<const uint8_t*>(src.twinAddr_);
    for (uint32_t k = 0; k < blocks; ++k) {
        twin::GmAccess(src.twinRegion_, gm + k * gmStep, len, false, api);
        uint8_t* out = ub + k * ubStep;
        std::memcpy(out, gm + k * gmStep, len);
        T fill = padParams.paddingValue;
        if (!padParams.isPad && len >= sizeof(T)) {
            std::memcpy(&fill, out, sizeof(T));
        }
        for (uint64_t pos = len; pos + sizeof(T) <= ubBlock; pos += sizeof(T)) {
            std::memcpy(out + pos, &fill, sizeof(T));
        }
    }
}

// UB -> GM: exactly blockLen bytes per block reach GM.
template <typename T>
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src,
                                   const DataCopyExtParams& dataCopyParams)
{
    const char* api = "DataCopyPad UB->GM";
    twin::CheckPadParams(dataCopyParams, sizeof(T), api);
    const uint32_t len = dataCopyParams.blockLen;
    const uint64_t ubBlock = twin::RoundUp32(len);
    const uint64_t ubStep = ubBlock + static_cast<uint64_t>(dataCopyParams.srcStride) * twin::UB_BLOCK;
    const uint64_t gmStep = static_cast<uint64_t>(len) + dataCopyParams.dstStride;
    const uint32_t blocks = dataCopyParams.blockCount;
    twin::Span<T> s = twin::Operand(src, ubStep * (blocks - 1) + ubBlock, api, "src");
    const uint8_t* ub = reinterpret_cast<const uint8_t*>(s.data);
    uint8_t* gm = reinterpret_cast<uint8_t*>(dst.twinAddr_);
    for (uint32_t k = 0; k < blocks; ++k) {
        twin::GmAccess(dst.twinRegion_, gm + k * gmStep, len, true, api);
        std::memcpy(gm + k * gmStep, ub + k * ubStep, len);
    }
}

}  // namespace AscendC

#endif  // TWIN_COPY_H
