// Tensors and the resource framework: GlobalTensor, LocalTensor, TPipe, TQue, TBuf.
//
// Each block has its own Unified Buffer (an arena of the target's usable UB bytes, owned by the
// TPipe and filled with 0xff so a lane nobody wrote reads as NaN). InitBuffer carves 32-byte
// rounded buffers out of it in call order and fails when the total passes the target's UB. Queue
// buffers walk Free -> AllocTensor -> EnQue -> DeQue -> FreeTensor; any other order, and any
// buffer not back to Free when the TPipe goes away, breaks the queue-balance rule.
#ifndef TWIN_TENSOR_H
#define TWIN_TENSOR_H

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "twin/core.h"

namespace AscendC {

enum class TPosition : uint8_t {
    GM,
    A1,
    A2,
    B1,
    B2,
    C1,
    C2,
    CO1,
    CO2,
    VECIN,
    VECOUT,
    VECCALC,
    LCM = VECCALC,
    SPM,
    SHM = SPM,
    TSCM,
    C2PIPE2GM,
    C2PIPE2LOCAL,
    MAX,
};

}  // namespace AscendC

namespace twin {

constexpr uint32_t UB_BLOCK = 32;
constexpr uint32_t MAX_PIPE_BUFFERS = 64;
constexpr uint32_t MAX_QUEUE_BUFFERS = 8;

enum class BufState : uint8_t { Free, Allocated, Queued, Dequeued, Scratch };

inline const char* StateName(BufState s)
{
    switch (s) {
        case BufState::Free: return "freed";
        case BufState::Allocated: return "allocated";
        case BufState::Queued: return "enqueued";
        case BufState::Dequeued: return "dequeued";
        default: return "scratch";
    }
}

inline const char* PositionName(AscendC::TPosition p)
{
    switch (p) {
        case AscendC::TPosition::VECIN: return "VECIN";
        case AscendC::TPosition::VECOUT: return "VECOUT";
        default: return "VECCALC";
    }
}

struct PipeState;

struct UbBuffer {
    PipeState* pipe;
    uint32_t offset;  // bytes from the start of the UB
    uint32_t bytes;
    BufState state;
    AscendC::TPosition position;
    uint16_t owner;  // InitBuffer call that made it (1-based), for messages
};

struct PipeState {
    uint8_t* arena;
    uint64_t capacity;
    uint64_t used;
    uint32_t calls;
    uint32_t count;
    UbBuffer buffers[MAX_PIPE_BUFFERS];
};

// One UB arena per thread, reused block after block (a fresh 248 KiB mapping per block costs
// more than the kernel); a second TPipe alive at the same time gets its own.
struct ArenaCache {
    uint8_t* data = nullptr;
    uint64_t bytes = 0;
    bool busy = false;
    ~ArenaCache() { std::free(data); }
};

inline thread_local ArenaCache tlsArena;

inline uint8_t* AcquireArena(uint64_t capacity)
{
    const uint64_t bytes = (capacity + 63) / 64 * 64 + 64;
    uint8_t* arena = nullptr;
    if (!tlsArena.busy && tlsArena.bytes >= bytes) {
        arena = tlsArena.data;
        tlsArena.busy = true;
    } else if (!tlsArena.busy) {
        std::free(tlsArena.data);
        tlsArena.data = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
        tlsArena.bytes = tlsArena.data ? bytes : 0;
        tlsArena.busy = tlsArena.data != nullptr;
        arena = tlsArena.data;
    } else {
        arena = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
    }
    if (arena == nullptr) {
        Fail("internal", "cannot allocate %llu bytes of UB", static_cast<unsigned long long>(capacity));
    }
    std::memset(arena, 0xff, bytes);  // lanes nobody wrote read as NaN
    return arena;
}

inline void ReleaseArena(uint8_t* arena)
{
    if (arena == tlsArena.data) {
        tlsArena.busy = false;
    } else {
        std::free(arena);
    }
}

inline uint32_t RoundUp32(uint64_t n) { return static_cast<uint32_t>((n + UB_BLOCK - 1) / UB_BLOCK * UB_BLOCK); }

// Carve `num` buffers of `len` bytes (rounded up to 32) out of the pipe's UB.
inline UbBuffer* Carve(PipeState& p, uint32_t num, uint64_t len, AscendC::TPosition pos, BufState state,
                       const char* what)
{
    const uint64_t each = RoundUp32(len);
    if (num == 0 || len == 0) {
        Fail("init-buffer", "InitBuffer(%s, num %u, len %llu): a buffer needs num >= 1 and len >= 1",
             what, num, static_cast<unsigned long long>(len));
    }
    if (p.count + num > MAX_PIPE_BUFFERS) {
        Fail("unsupported", "more than %u UB buffers in one TPipe", MAX_PIPE_BUFFERS);
    }
    const uint64_t total = p.used + each * num;
    if (total > p.capacity) {
        Fail("ub-overflow",
             "InitBuffer(%s, num %u, len %llu) brings the UB in use to %llu bytes, over the target's %llu",
             what, num, static_cast<unsigned long long>(len), static_cast<unsigned long long>(total),
             static_cast<unsigned long long>(p.capacity));
    }
    p.calls += 1;
    UbBuffer* first = &p.buffers[p.count];
    for (uint32_t i = 0; i < num; ++i) {
        p.buffers[p.count++] = UbBuffer{&p, static_cast<uint32_t>(p.used), static_cast<uint32_t>(each), state, pos,
                                        static_cast<uint16_t>(p.calls)};
        p.used += each;
    }
    return first;
}

}  // namespace twin

namespace AscendC {

template <typename T>
class LocalTensor {
public:
    __aicore__ inline LocalTensor() {}

    __aicore__ inline uint32_t GetSize() const
    {
        if (twinBuffer_ == nullptr || twinOffset_ >= twinBuffer_->bytes) {
            return 0;
        }
        return (twinBuffer_->bytes - twinOffset_) / sizeof(T);
    }

    // The tensor starting `offset` elements further into the same buffer.
    __aicore__ inline LocalTensor operator[](const uint32_t offset) const
    {
        LocalTensor t = *this;
        t.twinOffset_ += static_cast<uint32_t>(offset * sizeof(T));
        return t;
    }

    // One element written by the scalar unit (defined after the operand checks, twin/scalar.h).
    template <typename T1>
    __aicore__ inline void SetValue(const uint32_t index, const T1 value) const;

    twin::UbBuffer* twinBuffer_ = nullptr;
    uint32_t twinOffset_ = 0;  // bytes from the start of the buffer
};

template <typename T>
class GlobalTensor;

}  // namespace AscendC

namespace twin {

template <typename T>
inline AscendC::LocalTensor<T> TensorOf(UbBuffer* b)
{
    AscendC::LocalTensor<T> t;
    t.twinBuffer_ = b;
    t.twinOffset_ = 0;
    return t;
}

// The region holding address p; one that only ends there (p one past its last byte) counts when no
// region holds it, since buffers may lie back to back (an allocator's arena hands out adjacent
// tensors) and a pointer to the next one's first byte is that one's.
inline int32_t FindRegion(const void* p)
{
    Launch* l = Current().launch;
    const uint8_t* q = static_cast<const uint8_t*>(p);
    int32_t ending = -1;
    for (uint32_t i = 0; i < l->nRegions; ++i) {
        const GmRegion& r = l->regions[i];
        if (q >= r.base && q < r.base + r.bytes) {
            return static_cast<int32_t>(i);
        }
        if (q == r.base + r.bytes && ending < 0) {
            ending = static_cast<int32_t>(i);
        }
    }
    return ending;
}

inline void RecordWrite(BlockRecord& rec, uint32_t region, uint64_t begin, uint64_t end)
{
    if (rec.nWrites > 0) {
        Interval& last = rec.writes[rec.nWrites - 1];
        if (last.region == region && last.end == begin) {
            last.end = end;
            return;
        }
    }
    if (rec.nWrites == rec.capWrites) {
        const uint64_t cap = rec.capWrites ? rec.capWrites * 2 : 64;
        void* grown = std::realloc(rec.writes, cap * sizeof(Interval));
        if (grown == nullptr) {
            Fail("internal", "out of memory recording GM writes");
        }
        rec.writes = static_cast<Interval*>(grown);
        rec.capWrites = cap;
    }
    rec.writes[rec.nWrites++] = Interval{region, begin, end};
}

// Check one GM access of `bytes` at `p` through a tensor bound to `region`; count and record it.
inline void GmAccess(int32_t region, const void* p, uint64_t bytes, bool write, const char* api)
{
    Block& b = Current();
    if (region < 0) {
        Fail("gm-bounds", "%s through a GlobalTensor that SetGlobalBuffer never bound", api);
    }
    const GmRegion& r = b.launch->regions[region];
    const uint8_t* q = static_cast<const uint8_t*>(p);
    const long long off = static_cast<long long>(q - r.base);
    if (q < r.base || q + bytes > r.base + r.bytes) {
        Fail("gm-bounds", "%s %s %llu bytes at offset %lld of GM buffer %s, which holds %llu bytes", api,
             write ? "writes" : "reads", static_cast<unsigned long long>(bytes), off, r.name,
             static_cast<unsigned long long>(r.bytes));
    }
    if (!write) {
        b.record->readBytes += bytes;
        return;
    }
    if (r.kind != GM_OUTPUT && r.kind != GM_WORKSPACE) {
        Fail("gm-write", "%s writes into GM buffer %s, which is a kernel input", api, r.name);
    }
    b.record->writeBytes += bytes;
    if (r.kind == GM_OUTPUT && bytes > 0) {
        RecordWrite(*b.record, static_cast<uint32_t>(region), static_cast<uint64_t>(off),
                    static_cast<uint64_t>(off) + bytes);
    }
}

}  // namespace twin

namespace AscendC {

template <typename T>
class GlobalTensor {
public:
    __aicore__ inline GlobalTensor() {}

    __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize)
    {
        twinRegion_ = twin::FindRegion(buffer);
        if (twinRegion_ < 0) {
            twin::Fail("gm-bounds", "SetGlobalBuffer on an address inside no GM buffer of the launch");
        }
        twinAddr_ = buffer;
        twinSize_ = bufferSize;
    }

    __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer)
    {
        SetGlobalBuffer(buffer, 0);
    }

    __aicore__ inline GlobalTensor operator[](const uint64_t offset) const
    {
        GlobalTensor t = *this;
        t.twinAddr_ = twinAddr_ + offset;
        t.twinSize_ = offset < twinSize_ ? twinSize_ - offset : 0;
        return t;
    }

    __aicore__ inline uint64_t GetSize() const { return twinSize_; }

    __aicore__ inline T GetValue(const uint64_t offset) const
    {
        twin::GmAccess(twinRegion_, twinAddr_ + offset, sizeof(T), false, "GlobalTensor::GetValue");
        T v;
        std::memcpy(&v, twinAddr_ + offset, sizeof(T));
        return v;
    }

    T* twinAddr_ = nullptr;
    uint64_t twinSize_ = 0;
    int32_t twinRegion_ = -1;
};

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue;
template <TPosition pos>
class TBuf;

class TPipe {
public:
    __aicore__ inline TPipe()
    {
        const uint64_t cap = twin::Current().launch->ubBytes;
        state_.arena = twin::AcquireArena(cap);
        state_.capacity = cap;
        state_.used = 0;
        state_.calls = 0;
        state_.count = 0;
    }

    __aicore__ inline ~TPipe()
    {
        uint32_t open = 0;
        const twin::UbBuffer* first = nullptr;
        for (uint32_t i = 0; i < state_.count; ++i) {
            const twin::UbBuffer& b = state_.buffers[i];
            if (b.state != twin::BufState::Free && b.state != twin::BufState::Scratch) {
                first = first ? first : &b;
                ++open;
            }
        }
        if (first != nullptr) {
            twin::Defer("queue-balance",
                        "the kernel ended with %u queue tensor(s) not freed; the first is %s in the %s queue of "
                        "InitBuffer call %u (every AllocTensor needs EnQue, DeQue and FreeTensor)",
                        open, twin::StateName(first->state), twin::PositionName(first->position), first->owner);
        }
        twin::ReleaseArena(state_.arena);
    }

    TPipe(const TPipe&) = delete;
    TPipe& operator=(const TPipe&) = delete;

    template <class Q>
    __aicore__ inline bool InitBuffer(Q& que, uint8_t num, uint32_t len)
    {
        if (que.twinNum_ != 0) {
            twin::Fail("init-buffer", "InitBuffer called twice on the same %s queue", twin::PositionName(Q::twinPosition));
        }
        if (num > twin::MAX_QUEUE_BUFFERS) {
            twin::Fail("unsupported", "a queue with %u buffers (the twin models up to %u)", num, twin::MAX_QUEUE_BUFFERS);
        }
        twin::UbBuffer* b = twin::Carve(state_, num, len, Q::twinPosition, twin::BufState::Free,
                                        twin::PositionName(Q::twinPosition));
        for (uint32_t i = 0; i < num; ++i) {
            que.twinBufs_[i] = b + i;
        }
        que.twinNum_ = num;
        return true;
    }

    template <TPosition pos>
    __aicore__ inline bool InitBuffer(TBuf<pos>& buf, uint32_t len)
    {
        if (buf.twinBuffer_ != nullptr) {
            twin::Fail("init-buffer", "InitBuffer called twice on the same TBuf");
        }
        buf.twinBuffer_ = twin::Carve(state_, 1, len, pos, twin::BufState::Scratch, "TBuf");
        return true;
    }

    twin::PipeState state_;
};

template <TPosition pos, int32_t depth, auto mask>
class TQue {
    static_assert(pos == TPosition::VECIN || pos == TPosition::VECOUT || pos == TPosition::VECCALC,
                  "the twin models Unified Buffer queues only (VECIN, VECOUT, VECCALC)");

public:
    static constexpr TPosition twinPosition = pos;

    __aicore__ inline TQue() {}
    TQue(const TQue&) = delete;
    TQue& operator=(const TQue&) = delete;

    template <typename T>
    __aicore__ inline LocalTensor<T> AllocTensor()
    {
        Ready("AllocTensor");
        for (uint32_t i = 0; i < twinNum_; ++i) {
            const uint32_t k = (twinNext_ + i) % twinNum_;
            if (twinBufs_[k]->state == twin::BufState::Free) {
                twinBufs_[k]->state = twin::BufState::Allocated;
                twinNext_ = static_cast<uint8_t>((k + 1) % twinNum_);
                return twin::TensorOf<T>(twinBufs_[k]);
            }
        }
        twin::Fail("queue-balance", "AllocTensor on a %s queue whose %u buffer(s) are all in use: a FreeTensor is missing",
                   twin::PositionName(pos), twinNum_);
    }

    template <typename T>
    __aicore__ inline bool EnQue(const LocalTensor<T>& tensor)
    {
        twin::UbBuffer* b = Own(tensor.twinBuffer_, tensor.twinOffset_, "EnQue");
        if (b->state != twin::BufState::Allocated) {
            twin::Fail("queue-balance", "EnQue of a %s tensor on a %s queue: only an AllocTensor result can be enqueued",
                       twin::StateName(b->state), twin::PositionName(pos));
        }
        const int32_t limit = depth > 0 ? depth : 1;
        if (twinCount_ >= limit) {
            twin::Fail("queue-balance", "EnQue beyond the depth %d of a %s queue: DeQue the tensor already queued first",
                       static_cast<int>(depth), twin::PositionName(pos));
        }
        twinFifo_[(twinHead_ + twinCount_) % twin::MAX_QUEUE_BUFFERS] = b;
        ++twinCount_;
        b->state = twin::BufState::Queued;
        return true;
    }

    template <typename T>
    __aicore__ inline LocalTensor<T> DeQue()
    {
        Ready("DeQue");
        if (twinCount_ == 0) {
            twin::Fail("queue-balance", "DeQue on an empty %s queue: nothing was enqueued", twin::PositionName(pos));
        }
        twin::UbBuffer* b = twinFifo_[twinHead_];
        twinHead_ = static_cast<uint8_t>((twinHead_ + 1) % twin::MAX_QUEUE_BUFFERS);
        --twinCount_;
        b->state = twin::BufState::Dequeued;
        return twin::TensorOf<T>(b);
    }

    template <typename T>
    __aicore__ inline void FreeTensor(LocalTensor<T>& tensor)
    {
        twin::UbBuffer* b = Own(tensor.twinBuffer_, tensor.twinOffset_, "FreeTensor");
        if (b->state == twin::BufState::Free) {
            twin::Fail("queue-balance", "FreeTensor twice on the same buffer of a %s queue", twin::PositionName(pos));
        }
        if (b->state == twin::BufState::Queued) {
            twin::Fail("queue-balance", "FreeTensor of a tensor still in a %s queue: DeQue it first",
                       twin::PositionName(pos));
        }
        b->state = twin::BufState::Free;
    }

    twin::UbBuffer* twinBufs_[twin::MAX_QUEUE_BUFFERS] = {};
    twin::UbBuffer* twinFifo_[twin::MAX_QUEUE_BUFFERS] = {};
    uint8_t twinNum_ = 0;
    uint8_t twinNext_ = 0;
    uint8_t twinHead_ = 0;
    uint8_t twinCount_ = 0;

private:
    void Ready(const char* api) const
    {
        if (twinNum_ == 0) {
            twin::Fail("tensor-state", "%s on a %s queue that InitBuffer never set up", api, twin::PositionName(pos));
        }
    }

    twin::UbBuffer* Own(twin::UbBuffer* b, uint32_t offset, const char* api) const
    {
        Ready(api);
        for (uint32_t i = 0; i < twinNum_; ++i) {
            if (twinBufs_[i] == b) {
                if (offset != 0) {
                    twin::Fail("queue-balance", "%s of a tensor that does not start at its queue buffer", api);
                }
                return b;
            }
        }
        twin::Fail("queue-balance", "%s of a tensor that this %s queue did not allocate", api, twin::PositionName(pos));
    }
};

template <TPosition pos = TPosition::VECCALC>
class TBuf {
    static_assert(pos == TPosition::VECIN || pos == TPosition::VECOUT || pos == TPosition::VECCALC,
                  "the twin models Unified Buffer buffers only (VECIN, VECOUT, VECCALC)");

public:
    __aicore__ inline TBuf() {}
    TBuf(const TBuf&) = delete;
    TBuf& operator=(const TBuf&) = delete;

    template <typename T>
    __aicore__ inline LocalTensor<T> Get()
    {
        if (twinBuffer_ == nullptr) {
            twin::Fail("tensor-state", "TBuf::Get before InitBuffer");
        }
        return twin::TensorOf<T>(twinBuffer_);
    }

    twin::UbBuffer* twinBuffer_ = nullptr;
};

}  // namespace AscendC

#endif  // TWIN_TENSOR_H
