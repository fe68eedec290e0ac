// CPU twin of the AscendC kernel runtime: rule errors, the launch and the running block.
//
// A broken hardware rule throws twin::RuleError from the API call that breaks it; the launcher
// (twin/launch.h) catches it and reports "<rule>: <message>" for the block. Destructors cannot
// throw, so checks that run there (queue balance) record the error on the block instead.
#ifndef TWIN_CORE_H
#define TWIN_CORE_H

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#define __global__
#define __aicore__
#define __gm__
#define GM_ADDR __gm__ uint8_t*

namespace twin {

struct RuleError {
    char rule[32];
    char message[480];
};

inline RuleError MakeError(const char* rule, const char* fmt, va_list ap)
{
    RuleError e;
    std::snprintf(e.rule, sizeof e.rule, "%s", rule);
    std::vsnprintf(e.message, sizeof e.message, fmt, ap);
    return e;
}

[[noreturn]] __attribute__((format(printf, 2, 3))) inline void Fail(const char* rule, const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    RuleError e = MakeError(rule, fmt, ap);
    va_end(ap);
    throw e;
}

// Region kinds of global memory; writes are allowed to outputs and the workspace only, and
// every output byte must be written by exactly one store (see launch.h).
enum GmKind : uint8_t { GM_INPUT = 0, GM_OUTPUT = 1, GM_WORKSPACE = 2, GM_TILING = 3 };

struct GmRegion {
    uint8_t* base;
    uint64_t bytes;
    uint32_t elemBytes;
    uint8_t kind;
    char name[48];
};

struct Interval {
    uint32_t region;
    uint64_t begin;
    uint64_t end;
};

struct BlockRecord {
    Interval* writes;
    uint64_t nWrites;
    uint64_t capWrites;
    uint64_t readBytes;
    uint64_t writeBytes;
    int failed;
    RuleError error;
};

struct Launch {
    GmRegion* regions;
    uint32_t nRegions;
    uint64_t tilingKey;
    uint32_t blockDim;
    uint64_t ubBytes;        // kernel-usable UB of the target (InitBuffer total may not exceed it)
    uint64_t selectReserve;  // UB the Select tensor modes need left free on this target
    uint32_t npuArch;        // __NPU_ARCH__: 2201 (A2/A3) or 3510 (950)
    BlockRecord* blocks;
};

struct Block {
    Launch* launch;
    uint32_t index;
    BlockRecord* record;
    int keyBranches;  // TILING_KEY_IS evaluations that matched
    bool tilingRead;
};

inline thread_local Block* tlsBlock = nullptr;

inline Block& Current()
{
    if (tlsBlock == nullptr) {
        Fail("launch", "an AscendC call ran outside a kernel launch");
    }
    return *tlsBlock;
}

// Record a rule broken where throwing is impossible (a destructor); the first error wins and
// nothing is recorded while an exception is already unwinding the kernel.
__attribute__((format(printf, 2, 3))) inline void Defer(const char* rule, const char* fmt, ...)
{
    Block* b = tlsBlock;
    if (b == nullptr || b->record->failed || std::uncaught_exceptions() > 0) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    b->record->error = MakeError(rule, fmt, ap);
    va_end(ap);
    b->record->failed = 1;
}

}  // namespace twin

#endif  // TWIN_CORE_H
