// Cast kernels for tests/twin/test_twin_numerics.py: x -> y through UB with one AscendC Cast per
// 4096-element tile (n is a multiple of 4096), the conversion picked by the tiling data.
#include "kernel_operator.h"

using namespace AscendC;

struct CastTiling {
    int32_t mode;  // a CastMode
    int32_t n;
};

enum CastMode : int32_t { F32_TO_F16, F32_TO_BF16, F16_TO_F32, BF16_TO_F32 };

constexpr uint32_t CAST_TILE = 4096;

template <typename S, typename D>
__aicore__ inline void CastAll(GM_ADDR x, GM_ADDR y, uint32_t n, RoundMode mode)
{
    GlobalTensor<S> xGm;
    GlobalTensor<D> yGm;
    xGm.SetGlobalBuffer(reinterpret_cast<__gm__ S*>(x), n);
    yGm.SetGlobalBuffer(reinterpret_cast<__gm__ D*>(y), n);
    TPipe pipe;
    TQue<TPosition::VECIN, 1> inQ;
    TQue<TPosition::VECOUT, 1> outQ;
    pipe.InitBuffer(inQ, 1, CAST_TILE * sizeof(S));
    pipe.InitBuffer(outQ, 1, CAST_TILE * sizeof(D));
    for (uint32_t off = 0; off < n; off += CAST_TILE) {
        LocalTensor<S> in = inQ.AllocTensor<S>();
        DataCopy(in, xGm[off], CAST_TILE);
        inQ.EnQue(in);
        LocalTensor<S> src = inQ.DeQue<S>();
        LocalTensor<D> dst = outQ.AllocTensor<D>();
        Cast(dst, src, mode, CAST_TILE);
        outQ.EnQue(dst);
        inQ.FreeTensor(src);
        LocalTensor<D> out = outQ.DeQue<D>();
        DataCopy(yGm[off], out, CAST_TILE);
        outQ.FreeTensor(out);
    }
}

extern "C" __global__ __aicore__ void cast_cases(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(CastTiling);
    GET_TILING_DATA_WITH_STRUCT(CastTiling, t, tiling);
    if (TILING_KEY_IS(0)) {
        const uint32_t n = static_cast<uint32_t>(t.n);
        switch (t.mode) {
            case F32_TO_F16: CastAll<float, half>(x, y, n, RoundMode::CAST_RINT); break;
            case F32_TO_BF16: CastAll<float, bfloat16_t>(x, y, n, RoundMode::CAST_RINT); break;
            case F16_TO_F32: CastAll<half, float>(x, y, n, RoundMode::CAST_NONE); break;
            default: CastAll<bfloat16_t, float>(x, y, n, RoundMode::CAST_NONE); break;
        }
    }
}
