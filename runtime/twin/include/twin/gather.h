// What the broadcast loads use besides DataCopyPad (codegen/broadcast.py): LocalTensor::SetValue
// (the scalar unit writing one UB element), PipeBarrier (the twin runs every pipe in program
// order, so a barrier has nothing to wait for) and Gather, level 2: dst[i] = the element of src
// at byte srcBaseAddr + srcOffset[i], for i < count.
#ifndef TWIN_GATHER_H
#define TWIN_GATHER_H

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "twin/core.h"
#include "twin/dtypes.h"
#include "twin/operand.h"
#include "twin/tensor.h"

enum pipe_t : uint8_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL };

namespace AscendC {

template <typename T>
template <typename T1>
__aicore__ inline void LocalTensor<T>::SetValue(const uint32_t index, const T1 value) const
{
    const char* api = "LocalTensor::SetValue";
    const twin::UbBuffer* b = twinBuffer_;
    if (b == nullptr || b->state == twin::BufState::Free || b->state == twin::BufState::Queued) {
        twin::Fail("tensor-state", "%s on a tensor that is not usable now", api);
    }
    const uint64_t at = static_cast<uint64_t>(twinOffset_) + static_cast<uint64_t>(index) * sizeof(T);
    if (at + sizeof(T) > b->bytes) {
        twin::Fail("ub-bounds", "%s: element %u is past the end of its %u-byte buffer", api, index, b->bytes);
    }
    const T v = static_cast<T>(value);
    std::memcpy(b->pipe->arena + b->offset + at, &v, sizeof(T));
}

template <pipe_t pipe>
__aicore__ inline void PipeBarrier()
{
}

template <typename T>
__aicore__ inline void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                              const LocalTensor<uint32_t>& srcOffset, const uint32_t srcBaseAddr,
                              const uint32_t count)
{
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "Gather takes 2- and 4-byte elements");
    const char* api = "Gather";
    // count may not exceed src's elements (the API's documented limit), and its repeats of 256
    // bytes go in a uint8 (8.1.RC1 splits the count form so)
    const uint64_t repeats = static_cast<uint64_t>(count) * sizeof(T) / 256;
    if (repeats > 255) {
        twin::Fail("gather-count", "%s of %u elements takes %llu repeats, over the 255 a uint8 holds", api, count,
                   static_cast<unsigned long long>(repeats));
    }
    if (src.twinBuffer_ != nullptr && static_cast<uint64_t>(count) * sizeof(T) > src.twinBuffer_->bytes - src.twinOffset_) {
        twin::Fail("gather-count", "%s of %u elements from a source of %llu bytes (count may not exceed its elements)",
                   api, count, static_cast<unsigned long long>(src.twinBuffer_->bytes - src.twinOffset_));
    }
    twin::Span<T> d = twin::Operand(dst, static_cast<uint64_t>(count) * sizeof(T), api, "dst");
    twin::Span<uint32_t> o = twin::Operand(srcOffset, static_cast<uint64_t>(count) * 4, api, "srcOffset");
    // the source reaches to the end of its buffer: the offsets say which of its bytes are read
    const uint64_t srcBytes = src.twinBuffer_ == nullptr ? 0 : src.twinBuffer_->bytes - src.twinOffset_;
    twin::Span<T> s = twin::Operand(src, srcBytes, api, "src");
    twin::NoOverlap(d, s, api, "dst and src");
    twin::NoOverlap(d, o, api, "dst and srcOffset");
    if (srcBaseAddr % sizeof(T) != 0) {
        twin::Fail("gather-offset", "%s: srcBaseAddr %u is not a multiple of the %u-byte element", api, srcBaseAddr,
                   static_cast<uint32_t>(sizeof(T)));
    }
    const uint8_t* from = reinterpret_cast<const uint8_t*>(s.data);
    T* out = d.data;
    for (uint32_t i = 0; i < count; ++i) {
        const uint64_t at = static_cast<uint64_t>(srcBaseAddr) + o.data[i];
        if (at % sizeof(T) != 0 || at + sizeof(T) > srcBytes) {
            twin::Fail(at % sizeof(T) ? "gather-offset" : "ub-bounds",
                       "%s: lane %u reads byte %llu of a %llu-byte source (offsets must be whole elements inside it)",
                       api, i, static_cast<unsigned long long>(at), static_cast<unsigned long long>(srcBytes));
        }
        std::memcpy(&out[i], from + at, sizeof(T));
    }
}

}  // namespace AscendC

#endif  // TWIN_GATHER_H
