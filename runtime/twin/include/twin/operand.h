// Operand checks shared by every UB-side API: a usable tensor state, a 32-byte-aligned UB
// address, enough bytes left in the tensor's buffer, and the address-overlap rules.
#ifndef TWIN_OPERAND_H
#define TWIN_OPERAND_H

#include <cstdint>

#include "twin/core.h"
#include "twin/tensor.h"

namespace twin {

template <typename T>
struct Span {
    T* data;
    uint64_t begin;  // UB byte address
    uint64_t bytes;
    const UbBuffer* buffer;
};

template <typename T>
inline Span<T> Operand(const AscendC::LocalTensor<T>& t, uint64_t bytes, const char* api, const char* role)
{
    const UbBuffer* b = t.twinBuffer_;
    if (b == nullptr) {
        Fail("tensor-state", "%s: %s is a LocalTensor that no queue or TBuf handed out", api, role);
    }
    if (b->state == BufState::Free || b->state == BufState::Queued) {
        Fail("tensor-state", "%s: %s is a %s queue tensor (use it between AllocTensor/DeQue and EnQue/FreeTensor)",
             api, role, StateName(b->state));
    }
    const uint64_t addr = static_cast<uint64_t>(b->offset) + t.twinOffset_;
    if (addr % UB_BLOCK != 0) {
        Fail("ub-alignment", "%s: %s starts at UB address 0x%llx, not 32-byte aligned", api, role,
             static_cast<unsigned long long>(addr));
    }
    const uint64_t left = t.twinOffset_ < b->bytes ? b->bytes - t.twinOffset_ : 0;
    if (bytes > left) {
        Fail("ub-bounds", "%s: %s needs %llu bytes but its buffer has %llu left from the tensor's start", api, role,
             static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(left));
    }
    return Span<T>{reinterpret_cast<T*>(b->pipe->arena + addr), addr, bytes, b};
}

inline bool Overlaps(uint64_t a, uint64_t an, uint64_t b, uint64_t bn)
{
    return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

// Basic APIs allow a destination to overlap a source only 100% (same start, same extent).
template <typename D, typename S>
inline void NoPartialOverlap(const Span<D>& dst, const Span<S>& src, const char* api, const char* role)
{
    if (Overlaps(dst.begin, dst.bytes, src.begin, src.bytes) && (dst.begin != src.begin || dst.bytes != src.bytes)) {
        Fail("overlap", "%s: dst [0x%llx, +%llu) partly overlaps %s [0x%llx, +%llu); only a 100%% overlap is allowed",
             api, static_cast<unsigned long long>(dst.begin), static_cast<unsigned long long>(dst.bytes), role,
             static_cast<unsigned long long>(src.begin), static_cast<unsigned long long>(src.bytes));
    }
}

template <typename D, typename S>
inline void NoOverlap(const Span<D>& dst, const Span<S>& src, const char* api, const char* what)
{
    if (Overlaps(dst.begin, dst.bytes, src.begin, src.bytes)) {
        Fail("overlap", "%s: %s overlap ([0x%llx, +%llu) and [0x%llx, +%llu)), which this API does not allow", api, what,
             static_cast<unsigned long long>(dst.begin), static_cast<unsigned long long>(dst.bytes),
             static_cast<unsigned long long>(src.begin), static_cast<unsigned long long>(src.bytes));
    }
}

inline uint64_t Count(int64_t count, const char* api)
{
    if (count < 0) {
        Fail("count", "%s with a negative count %lld", api, static_cast<long long>(count));
    }
    return static_cast<uint64_t>(count);
}

}  // namespace twin

#endif  // TWIN_OPERAND_H
