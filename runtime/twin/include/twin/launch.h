// The C ABI of a twin library (one kernel per shared object), called from runtime/twin/library.py.
//
//   twin_host_tiling   run the emitted tiling function for given input shapes and dtypes, attributes
//                      and target
//   twin_launch_new    describe one launch: GM regions, tiling key, block dim, target UB rules
//   twin_run_blocks    run blocks [first, last) one after another (threads may run disjoint ranges)
//   twin_launch_finish first rule broken (lowest block), else check every output byte was written
//                      exactly once; sum the GM bytes moved
//   twin_launch_free
//
// The generated launcher includes the kernel and tiling sources, then this header, then
// TWIN_EXPORT(entry adapter, GM argument count, sizeof(tiling struct)).
#ifndef TWIN_LAUNCH_H
#define TWIN_LAUNCH_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "register/op_impl_registry.h"
#include "twin/core.h"

#define TWIN_API extern "C" __attribute__((visibility("default")))
#define TWIN_ABI_VERSION 2

namespace twin {

using EntryAdapter = void (*)(GM_ADDR* gm, GM_ADDR workspace, GM_ADDR tiling);

struct Report {
    char* rule;
    char* message;
    uint64_t capacity;
};

inline void Put(char* out, uint64_t cap, const char* text)
{
    if (out != nullptr && cap > 0) {
        std::snprintf(out, cap, "%s", text);
    }
}

inline int RunBlocks(Launch* l, uint32_t first, uint32_t last, uint32_t nGm, EntryAdapter entry)
{
    // GM arguments come first, then the workspace and the tiling data (see library.py).
    GM_ADDR gm[16];
    if (nGm > 16 || l->nRegions != nGm + 2) {
        return -1;
    }
    for (uint32_t i = 0; i < nGm; ++i) {
        gm[i] = l->regions[i].base;
    }
    for (uint32_t b = first; b < last && b < l->blockDim; ++b) {
        BlockRecord& rec = l->blocks[b];
        Block blk{l, b, &rec, 0, false};
        tlsBlock = &blk;
        try {
            entry(gm, l->regions[nGm].base, l->regions[nGm + 1].base);
            if (!rec.failed && blk.keyBranches == 0) {
                Fail("tiling-key", "tiling key %llu selects no TILING_KEY_IS branch, so the kernel did nothing",
                     static_cast<unsigned long long>(l->tilingKey));
            }
        } catch (const RuleError& e) {
            if (!rec.failed) {
                rec.error = e;
                rec.failed = 1;
            }
        } catch (...) {
            if (!rec.failed) {
                std::snprintf(rec.error.rule, sizeof rec.error.rule, "internal");
                std::snprintf(rec.error.message, sizeof rec.error.message, "an unexpected C++ exception");
                rec.failed = 1;
            }
        }
        tlsBlock = nullptr;
        if (rec.failed) {
            return 1;
        }
    }
    return 0;
}

struct Write {
    uint64_t begin;
    uint64_t end;
    uint32_t block;
};

inline int CompareWrites(const void* a, const void* b)
{
    const Write* x = static_cast<const Write*>(a);
    const Write* y = static_cast<const Write*>(b);
    return x->begin < y->begin ? -1 : (x->begin > y->begin ? 1 : 0);
}

// Every byte of every output region written by exactly one store.
inline bool CheckCoverage(const Launch* l, char* rule, char* message, uint64_t cap)
{
    for (uint32_t r = 0; r < l->nRegions; ++r) {
        const GmRegion& region = l->regions[r];
        if (region.kind != GM_OUTPUT) {
            continue;
        }
        uint64_t n = 0;
        for (uint32_t b = 0; b < l->blockDim; ++b) {
            for (uint64_t k = 0; k < l->blocks[b].nWrites; ++k) {
                n += l->blocks[b].writes[k].region == r ? 1 : 0;
            }
        }
        Write* all = static_cast<Write*>(std::malloc((n ? n : 1) * sizeof(Write)));
        if (all == nullptr) {
            Put(rule, cap, "internal");
            Put(message, cap, "out of memory checking output coverage");
            return false;
        }
        uint64_t k = 0;
        for (uint32_t b = 0; b < l->blockDim; ++b) {
            for (uint64_t i = 0; i < l->blocks[b].nWrites; ++i) {
                const Interval& w = l->blocks[b].writes[i];
                if (w.region == r) {
                    all[k++] = Write{w.begin, w.end, b};
                }
            }
        }
        std::qsort(all, n, sizeof(Write), CompareWrites);
        const uint64_t e = region.elemBytes ? region.elemBytes : 1;
        uint64_t covered = 0;
        uint32_t lastBlock = 0;
        char text[480] = {0};
        for (uint64_t i = 0; i < n && text[0] == 0; ++i) {
            if (all[i].begin > covered) {
                std::snprintf(text, sizeof text, "output %s: elements [%llu, %llu) are written by no block", region.name,
                              static_cast<unsigned long long>(covered / e),
                              static_cast<unsigned long long>(all[i].begin / e));
            } else if (all[i].begin < covered) {
                std::snprintf(text, sizeof text, "output %s: elements [%llu, %llu) are written twice (blocks %u and %u)",
                              region.name, static_cast<unsigned long long>(all[i].begin / e),
                              static_cast<unsigned long long>((covered < all[i].end ? covered : all[i].end) / e),
                              lastBlock, all[i].block);
            }
            if (all[i].end > covered) {
                covered = all[i].end;
                lastBlock = all[i].block;
            }
        }
        std::free(all);
        if (text[0] == 0 && covered != region.bytes) {
            std::snprintf(text, sizeof text, "output %s: elements [%llu, %llu) are written by no block", region.name,
                          static_cast<unsigned long long>(covered / e), static_cast<unsigned long long>(region.bytes / e));
        }
        if (text[0] != 0) {
            Put(rule, cap, "gm-coverage");
            Put(message, cap, text);
            return false;
        }
    }
    return true;
}

}  // namespace twin

TWIN_API int twin_abi_version() { return TWIN_ABI_VERSION; }

// Runs the registered tiling function; returns 0, or 1 with `message` saying why.
TWIN_API int twin_host_tiling(const int64_t* dims, const int32_t* ranks, const int32_t* dtypes, int32_t nInputs,
                              const uint8_t* attrKinds, const float* attrFloats, const char* const* attrStrs,
                              int32_t nAttrs, uint32_t cores, uint64_t ubBytes, uint8_t* tilingOut, uint64_t tilingCapacity, uint64_t* tilingSize,
                              uint32_t* blockDim, uint64_t* tilingKey, uint64_t* workspace, char* message,
                              uint64_t capacity)
{
    const gert::TwinTilingRegistry& reg = gert::TwinRegistry();
    if (reg.tiling == nullptr) {
        twin::Put(message, capacity, "the library holds no host tiling function (IMPL_OP_OPTILING)");
        return 1;
    }
    if (nInputs < 0 || static_cast<size_t>(nInputs) > gert::TWIN_MAX_INPUTS) {
        twin::Put(message, capacity, "too many inputs for the twin's tiling context");
        return 1;
    }
    static thread_local gert::TilingContext ctx;
    ctx = gert::TilingContext();
    ctx.nInputs_ = static_cast<size_t>(nInputs);
    if (nAttrs < 0 || static_cast<size_t>(nAttrs) > gert::TWIN_MAX_ATTRS) {
        twin::Put(message, capacity, "too many attributes for the twin's tiling context");
        return 1;
    }
    ctx.attrs_.n_ = static_cast<size_t>(nAttrs);
    for (int32_t i = 0; i < nAttrs; ++i) {
        ctx.attrs_.kinds_[i] = static_cast<gert::RuntimeAttrs::Kind>(attrKinds[i]);
        ctx.attrs_.floats_[i] = attrFloats[i];
        ctx.attrs_.bools_[i] = attrFloats[i] != 0.0f;
        if (attrKinds[i] == gert::RuntimeAttrs::STRING) {
            if (std::strlen(attrStrs[i]) >= gert::TWIN_MAX_STR) {
                twin::Put(message, capacity, "a string attribute is longer than the twin holds");
                return 1;
            }
            std::snprintf(ctx.attrs_.strs_[i], gert::TWIN_MAX_STR, "%s", attrStrs[i]);
        }
    }
    const int64_t* d = dims;
    for (int32_t i = 0; i < nInputs; ++i) {
        ctx.descs_[i].dtype_ = static_cast<ge::DataType>(dtypes[i]);
        if (ranks[i] < 0 || static_cast<size_t>(ranks[i]) > gert::TWIN_MAX_RANK) {
            twin::Put(message, capacity, "input rank over 8");
            return 1;
        }
        ctx.inputs_[i].shape_.rank_ = static_cast<size_t>(ranks[i]);
        for (int32_t k = 0; k < ranks[i]; ++k) {
            ctx.inputs_[i].shape_.dims_[k] = *d++;
        }
    }
    ctx.platform_ = fe::PlatFormInfos{cores, ubBytes};
    gert::TilingParseContext parse;
    if (reg.parse != nullptr && reg.parse(&parse) != ge::GRAPH_SUCCESS) {
        twin::Put(message, capacity, "the TilingParse function failed");
        return 1;
    }
    if (reg.tiling(&ctx) != ge::GRAPH_SUCCESS) {
        twin::Put(message, capacity, "the tiling function returned GRAPH_FAILED");
        return 1;
    }
    if (!ctx.keySet_ || ctx.blockDim_ == 0 || ctx.tilingSize_ == 0) {
        twin::Put(message, capacity, "the tiling function set no tiling key, block dim or tiling data");
        return 1;
    }
    if (ctx.tilingSize_ > tilingCapacity) {
        twin::Put(message, capacity, "tiling data larger than the caller's buffer");
        return 1;
    }
    std::memcpy(tilingOut, ctx.tiling_, ctx.tilingSize_);
    *tilingSize = ctx.tilingSize_;
    *blockDim = ctx.blockDim_;
    *tilingKey = ctx.tilingKey_;
    *workspace = ctx.workspace_;
    return 0;
}

TWIN_API void* twin_launch_new(uint8_t* const* bases, const uint64_t* bytes, const uint32_t* elemBytes,
                               const uint8_t* kinds, const char* const* names, uint32_t nRegions, uint64_t tilingKey,
                               uint32_t blockDim, uint64_t ubBytes, uint64_t selectReserve, uint32_t npuArch)
{
    twin::Launch* l = static_cast<twin::Launch*>(std::calloc(1, sizeof(twin::Launch)));
    if (l == nullptr) {
        return nullptr;
    }
    l->regions = static_cast<twin::GmRegion*>(std::calloc(nRegions ? nRegions : 1, sizeof(twin::GmRegion)));
    l->blocks = static_cast<twin::BlockRecord*>(std::calloc(blockDim ? blockDim : 1, sizeof(twin::BlockRecord)));
    if (l->regions == nullptr || l->blocks == nullptr) {
        std::free(l->regions);
        std::free(l->blocks);
        std::free(l);
        return nullptr;
    }
    for (uint32_t i = 0; i < nRegions; ++i) {
        twin::GmRegion& r = l->regions[i];
        r.base = bases[i];
        r.bytes = bytes[i];
        r.elemBytes = elemBytes[i];
        r.kind = kinds[i];
        std::snprintf(r.name, sizeof r.name, "%s", names[i]);
    }
    l->nRegions = nRegions;
    l->tilingKey = tilingKey;
    l->blockDim = blockDim;
    l->ubBytes = ubBytes;
    l->selectReserve = selectReserve;
    l->npuArch = npuArch;
    return l;
}

// 0: all blocks ran and every output byte was written once. 1: a rule broke; `rule`, `message`
// and `block` (-1 for the coverage check) say which. stats = {GM bytes read, GM bytes written}.
TWIN_API int twin_launch_finish(void* launch, uint64_t* stats, char* rule, char* message, uint64_t capacity,
                                int32_t* block)
{
    const twin::Launch* l = static_cast<const twin::Launch*>(launch);
    stats[0] = stats[1] = 0;
    for (uint32_t b = 0; b < l->blockDim; ++b) {
        stats[0] += l->blocks[b].readBytes;
        stats[1] += l->blocks[b].writeBytes;
    }
    for (uint32_t b = 0; b < l->blockDim; ++b) {
        if (l->blocks[b].failed) {
            twin::Put(rule, capacity, l->blocks[b].error.rule);
            twin::Put(message, capacity, l->blocks[b].error.message);
            *block = static_cast<int32_t>(b);
            return 1;
        }
    }
    *block = -1;
    return twin::CheckCoverage(l, rule, message, capacity) ? 0 : 1;
}

TWIN_API void twin_launch_free(void* launch)
{
    twin::Launch* l = static_cast<twin::Launch*>(launch);
    if (l == nullptr) {
        return;
    }
    for (uint32_t b = 0; b < l->blockDim; ++b) {
        std::free(l->blocks[b].writes);
    }
    std::free(l->blocks);
    std::free(l->regions);
    std::free(l);
}

#define TWIN_EXPORT(entryAdapter, gmCount, tilingBytes)                                         \
    TWIN_API uint32_t twin_gm_count() { return (gmCount); }                                     \
    TWIN_API uint64_t twin_tiling_size() { return (tilingBytes); }                              \
    TWIN_API int twin_run_blocks(void* launch, uint32_t first, uint32_t last)                   \
    {                                                                                           \
        return ::twin::RunBlocks(static_cast<::twin::Launch*>(launch), first, last, (gmCount), \
                                 (entryAdapter));                                               \
    }

#endif  // TWIN_LAUNCH_H
