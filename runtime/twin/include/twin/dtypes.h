// half and bfloat16_t as the AI Core stores them, with the conversions the IR's numerics fix
// (codegen/ir.py): float16/bfloat16 -> float32 exact; float32 -> float16/bfloat16 round half to
// even with overflow to +-inf (ACL_RT_OVERFLOW_MODE_INFNAN). NaN keeps its sign; a float16 NaN
// keeps the top 10 payload bits (and stays a NaN), a bfloat16 NaN becomes the quiet 0x7fc0, which
// is what numpy and ml_dtypes produce, so the CPU backend and the twin agree bit for bit.
#ifndef TWIN_DTYPES_H
#define TWIN_DTYPES_H

#include <cstdint>
#include <cstring>

#include "twin/core.h"

namespace twin {

using u32a = uint32_t __attribute__((may_alias));
using u16a = uint16_t __attribute__((may_alias));

inline uint32_t FloatBits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

inline float BitsFloat(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// The conversions are written without branches (every case computed, one selected) so that the
// compiler vectorises a Cast over a tile.

inline uint16_t FloatToHalfBits(float value)
{
    const uint32_t f = FloatBits(value);
    const uint32_t sign = (f >> 16) & 0x8000u;
    const uint32_t a = f & 0x7fffffffu;
    // normal half: rebias the exponent, round the 13 dropped bits half to even (the carry may
    // step into the exponent, which is right)
    const uint32_t m = a - 0x38000000u;
    const uint32_t normal = (m + 0x0fffu + ((m >> 13) & 1u)) >> 13;
    // subnormal half: |x| / 2^-24 rounded half to even by adding 2^23 in float32 (exact scaling)
    const uint32_t subnormal = FloatBits(BitsFloat(a) * 0x1p24f + 0x1p23f) - 0x4b000000u;
    // NaN keeps the top 10 payload bits and never becomes inf
    const uint32_t payload = 0x7c00u + ((a & 0x007fffffu) >> 13);
    const uint32_t nan = payload | static_cast<uint32_t>(payload == 0x7c00u);
    const uint32_t r = a > 0x7f800000u ? nan
                       : a >= 0x477ff000u ? 0x7c00u  // >= 65520 rounds to inf
                       : a >= 0x38800000u ? normal
                                          : subnormal;
    return static_cast<uint16_t>(sign | r);
}

inline float HalfBitsToFloat(uint16_t h)
{
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x03ffu;
    const uint32_t normal = ((exp + 112u) << 23) | (mant << 13);
    const uint32_t special = 0x7f800000u | (mant << 13);
    const uint32_t subnormal = FloatBits(static_cast<float>(mant) * 0x1p-24f);  // exact
    return BitsFloat(sign | (exp == 0x1fu ? special : exp == 0 ? subnormal : normal));
}

inline uint16_t FloatToBf16Bits(float value)
{
    const uint32_t f = FloatBits(value);
    const uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;  // half to even
    const uint32_t nan = ((f >> 16) & 0x8000u) | 0x7fc0u;
    return static_cast<uint16_t>((f & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

inline float Bf16BitsToFloat(uint16_t b)
{
    return BitsFloat(static_cast<uint32_t>(b) << 16);
}

}  // namespace twin

// The device's half converts implicitly to and from float.
struct half {
    uint16_t bits;
    half() = default;
    half(float v) : bits(twin::FloatToHalfBits(v)) {}
    half(double v) : bits(twin::FloatToHalfBits(static_cast<float>(v))) {}
    half(int v) : bits(twin::FloatToHalfBits(static_cast<float>(v))) {}
    operator float() const { return twin::HalfBitsToFloat(bits); }
};

// bfloat16_t is built from a number but read back only through AscendC::ToFloat.
struct bfloat16_t {
    uint16_t bits;
    bfloat16_t() = default;
    bfloat16_t(float v) : bits(twin::FloatToBf16Bits(v)) {}
    bfloat16_t(double v) : bits(twin::FloatToBf16Bits(static_cast<float>(v))) {}
    bfloat16_t(int v) : bits(twin::FloatToBf16Bits(static_cast<float>(v))) {}
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16_t) == 2, "16-bit storage types");

namespace AscendC {
__aicore__ inline float ToFloat(const bfloat16_t& v) { return twin::Bf16BitsToFloat(v.bits); }
}  // namespace AscendC

#endif  // TWIN_DTYPES_H
