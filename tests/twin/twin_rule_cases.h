// Kernels for tests/twin/test_twin_rules.py, written against the twin headers as AscendC code.
// Case CLEAN keeps every rule (a CopyIn -> Compute -> CopyOut pipeline with DataCopyPad tails);
// every other case breaks exactly one rule. The tiling data picks the case.
#include "kernel_operator.h"

using namespace AscendC;

struct RuleCaseTiling {
    int32_t id;     // a CaseId
    int32_t n;      // elements of x and y
    int32_t bytes;  // a buffer size some cases need
};

enum CaseId : int32_t {
    CLEAN,
    UB_OVERFLOW,
    UB_ALIGNMENT,
    UB_BOUNDS,
    DATACOPY_LENGTH,
    DATACOPYPAD_LENGTH,
    COMPARE_COUNT,
    ALLOC_FULL,
    DEQUE_EMPTY,
    ENQUE_DEPTH,
    FREE_TWICE,
    LEFT_ALLOCATED,
    FREE_QUEUED,
    USE_QUEUED,
    USE_FREED,
    PARTIAL_OVERLAP,
    SIGN_OVERLAP,
    CAST_OVERLAP,
    SELECT_TEMP,
    SIGN_TMP,
    CAST_BF16_NONE,
    CAST_UP_RINT,
    CAST_SAME,
    GM_BOUNDS,
    GM_WRITE_INPUT,
    HALF_WRITTEN,
    WRITTEN_TWICE,
    NEGATIVE_COUNT,
    SELECT_MODE,
    BF16_COMPARE,
    INIT_TWICE,
};

constexpr uint32_t TILE = 256;

// y = 2 * f16(x >= 0 ? sign(x) : x), tile by tile; every rule kept.
__aicore__ inline void Clean(GlobalTensor<float>& xGm, GlobalTensor<float>& yGm, uint32_t n)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> inQ;
    TQue<TPosition::VECOUT, 1> outQ;
    TBuf<TPosition::VECCALC> maskBuf;
    TBuf<TPosition::VECCALC> signTmp;
    TBuf<TPosition::VECCALC> halfBuf;
    pipe.InitBuffer(inQ, 2, TILE * sizeof(float));
    pipe.InitBuffer(outQ, 2, TILE * sizeof(float));
    pipe.InitBuffer(maskBuf, TILE / 8);
    pipe.InitBuffer(signTmp, 768);
    pipe.InitBuffer(halfBuf, TILE * sizeof(half));
    for (uint32_t off = 0; off < n; off += TILE) {
        const uint32_t len = n - off < TILE ? n - off : TILE;
        const uint32_t count = (len + 63) / 64 * 64;
        LocalTensor<float> in = inQ.AllocTensor<float>();
        if (len == TILE) {
            DataCopy(in, xGm[off], TILE);
        } else {
            DataCopyExtParams params{1, static_cast<uint32_t>(len * sizeof(float)), 0, 0, 0};
            DataCopyPadExtParams<float> pad{false, 0, 0, 0};
            DataCopyPad(in, xGm[off], params, pad);
        }
        inQ.EnQue(in);
        LocalTensor<float> x = inQ.DeQue<float>();
        LocalTensor<float> y = outQ.AllocTensor<float>();
        LocalTensor<uint8_t> mask = maskBuf.Get<uint8_t>();
        LocalTensor<half> h = halfBuf.Get<half>();
        Sign(y, x, signTmp.Get<uint8_t>(), count);
        Compares(mask, x, 0.0f, CMPMODE::GE, count);
        Select(y, mask, y, x, SELMODE::VSEL_TENSOR_TENSOR_MODE, count);
        Cast(h, y, RoundMode::CAST_RINT, count);
        Cast(y, h, RoundMode::CAST_NONE, count);
        Muls(y, y, 2.0f, count);
        outQ.EnQue(y);
        inQ.FreeTensor(x);
        LocalTensor<float> out = outQ.DeQue<float>();
        if (len == TILE) {
            DataCopy(yGm[off], out, TILE);
        } else {
            DataCopyExtParams params{1, static_cast<uint32_t>(len * sizeof(float)), 0, 0, 0};
            DataCopyPad(yGm[off], out, params);
        }
        outQ.FreeTensor(out);
    }
}

__aicore__ inline void Broken(int32_t id, GlobalTensor<float>& xGm, GlobalTensor<float>& yGm, uint32_t n,
                              uint32_t bytes)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> inQ;
    TBuf<TPosition::VECCALC> calc;
    TBuf<TPosition::VECCALC> small;
    switch (id) {
        case UB_OVERFLOW:
            pipe.InitBuffer(inQ, 2, 130000);
            break;
        case UB_ALIGNMENT: {
            pipe.InitBuffer(calc, 1024);
            LocalTensor<float> t = calc.Get<float>();
            Abs(t[1], t[1], 64);
            break;
        }
        case UB_BOUNDS: {
            pipe.InitBuffer(calc, 256);
            LocalTensor<float> t = calc.Get<float>();
            Abs(t, t, 128);
            break;
        }
        case DATACOPY_LENGTH: {
            pipe.InitBuffer(inQ, 1, 1024);
            LocalTensor<float> t = inQ.AllocTensor<float>();
            DataCopy(t, xGm, 10);
            break;
        }
        case DATACOPYPAD_LENGTH: {
            pipe.InitBuffer(inQ, 1, 1024);
            LocalTensor<float> t = inQ.AllocTensor<float>();
            DataCopyExtParams params{1, 6, 0, 0, 0};
            DataCopyPadExtParams<float> pad{false, 0, 0, 0};
            DataCopyPad(t, xGm, params, pad);
            break;
        }
        case COMPARE_COUNT: {
            pipe.InitBuffer(calc, 1024);
            pipe.InitBuffer(small, 32);
            LocalTensor<uint8_t> m = small.Get<uint8_t>();
            Compares(m, calc.Get<float>(), 0.0f, CMPMODE::LT, 32);
            break;
        }
        case ALLOC_FULL: {
            pipe.InitBuffer(inQ, 1, 1024);
            LocalTensor<float> a = inQ.AllocTensor<float>();
            LocalTensor<float> b = inQ.AllocTensor<float>();
            break;
        }
        case DEQUE_EMPTY:
            pipe.InitBuffer(inQ, 1, 1024);
            inQ.DeQue<float>();
            break;
        case ENQUE_DEPTH: {
            pipe.InitBuffer(inQ, 2, 1024);
            LocalTensor<float> a = inQ.AllocTensor<float>();
            LocalTensor<float> b = inQ.AllocTensor<float>();
            inQ.EnQue(a);
            inQ.EnQue(b);
            break;
        }
        case FREE_TWICE: {
            pipe.InitBuffer(inQ, 1, 1024);
            LocalTensor<float> a = inQ.AllocTensor<float>();
            inQ.FreeTensor(a);
            inQ.FreeTensor(a);
            break;
        }
        case LEFT_ALLOCATED:
            pipe.InitBuffer(inQ, 1, 1024);
            inQ.AllocTensor<float>();
            break;
        case FREE_QUEUED: {
            pipe.InitBuffer(inQ, 1, 1024);
            LocalTensor<float> a = inQ.AllocTensor<float>();
            inQ.EnQue(a);
            inQ.FreeTensor(a);
            break;
        }
        case USE_QUEUED: {
            pipe.InitBuffer(inQ, 1, 1024);
            LocalTensor<float> a = inQ.AllocTensor<float>();
            inQ.EnQue(a);
            Abs(a, a, 64);
            break;
        }
        case USE_FREED: {
            pipe.InitBuffer(inQ, 1, 1024);
            LocalTensor<float> a = inQ.AllocTensor<float>();
            inQ.FreeTensor(a);
            Abs(a, a, 64);
            break;
        }
        case PARTIAL_OVERLAP: {
            pipe.InitBuffer(calc, 2048);
            LocalTensor<float> t = calc.Get<float>();
            Add(t[64], t, t, 128);
            break;
        }
        case SIGN_OVERLAP: {
            pipe.InitBuffer(calc, 1024);
            pipe.InitBuffer(small, 768);
            LocalTensor<float> t = calc.Get<float>();
            Sign(t, t, small.Get<uint8_t>(), 64);
            break;
        }
        case CAST_OVERLAP: {
            pipe.InitBuffer(calc, 1024);
            Cast(calc.Get<half>(), calc.Get<float>(), RoundMode::CAST_RINT, 64);
            break;
        }
        case SELECT_TEMP: {
            pipe.InitBuffer(calc, bytes);
            pipe.InitBuffer(small, 32);
            LocalTensor<float> t = calc.Get<float>();
            Select(t, small.Get<uint8_t>(), t, t, SELMODE::VSEL_TENSOR_TENSOR_MODE, 64);
            break;
        }
        case SIGN_TMP: {
            pipe.InitBuffer(calc, 1024);
            pipe.InitBuffer(inQ, 1, 1024);
            pipe.InitBuffer(small, 256);
            LocalTensor<float> a = inQ.AllocTensor<float>();
            Sign(calc.Get<float>(), a, small.Get<uint8_t>(), 64);
            inQ.FreeTensor(a);
            break;
        }
        case CAST_BF16_NONE: {
            pipe.InitBuffer(calc, 1024);
            pipe.InitBuffer(small, 256);
            Cast(small.Get<bfloat16_t>(), calc.Get<float>(), RoundMode::CAST_NONE, 64);
            break;
        }
        case CAST_UP_RINT: {
            pipe.InitBuffer(calc, 1024);
            pipe.InitBuffer(small, 256);
            Cast(calc.Get<float>(), small.Get<half>(), RoundMode::CAST_RINT, 64);
            break;
        }
        case CAST_SAME: {
            pipe.InitBuffer(calc, 1024);
            pipe.InitBuffer(small, 1024);
            Cast(small.Get<float>(), calc.Get<float>(), RoundMode::CAST_RINT, 64);
            break;
        }
        case GM_BOUNDS: {
            pipe.InitBuffer(inQ, 1, 1024);
            LocalTensor<float> t = inQ.AllocTensor<float>();
            DataCopy(t, xGm[n - 8], 64);
            inQ.FreeTensor(t);
            break;
        }
        case GM_WRITE_INPUT: {
            pipe.InitBuffer(calc, 1024);
            DataCopy(xGm, calc.Get<float>(), 64);
            break;
        }
        case NEGATIVE_COUNT: {
            pipe.InitBuffer(calc, 1024);
            LocalTensor<float> t = calc.Get<float>();
            Abs(t, t, -1);
            break;
        }
        case SELECT_MODE: {
            pipe.InitBuffer(calc, 1024);
            pipe.InitBuffer(small, 32);
            LocalTensor<float> t = calc.Get<float>();
            Select(t, small.Get<uint8_t>(), t, t, SELMODE::VSEL_TENSOR_SCALAR_MODE, 64);
            break;
        }
        case BF16_COMPARE: {
            pipe.InitBuffer(calc, 1024);
            pipe.InitBuffer(small, 32);
            Compares(small.Get<uint8_t>(), calc.Get<bfloat16_t>(), bfloat16_t(0.5f), CMPMODE::LT, 128);
            break;
        }
        case INIT_TWICE:
            pipe.InitBuffer(inQ, 1, 1024);
            pipe.InitBuffer(inQ, 1, 1024);
            break;
        default:
            break;
    }
}

// The coverage cases: every block writes the first 64 elements of y and nothing else.
__aicore__ inline void PartialStore(GlobalTensor<float>& yGm)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> calc;
    pipe.InitBuffer(calc, 1024);
    LocalTensor<float> t = calc.Get<float>();
    Duplicate(t, 1.0f, 64);
    DataCopy(yGm, t, 64);
}

extern "C" __global__ __aicore__ void rule_cases(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(RuleCaseTiling);
    GET_TILING_DATA_WITH_STRUCT(RuleCaseTiling, t, tiling);
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (TILING_KEY_IS(0)) {
        GlobalTensor<float> xGm;
        GlobalTensor<float> yGm;
        xGm.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), t.n);
        yGm.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(y), t.n);
        if (t.id == CLEAN) {
            Clean(xGm, yGm, static_cast<uint32_t>(t.n));
        } else if (t.id == HALF_WRITTEN || t.id == WRITTEN_TWICE) {
            PartialStore(yGm);
        } else {
            Broken(t.id, xGm, yGm, static_cast<uint32_t>(t.n), static_cast<uint32_t>(t.bytes));
        }
    }
}
