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

// Round (q + rem / 2^shift) to an integer, ties to even.
inline uint32_t RoundHalfEven(uint32_t q, uint32_t rem, uint32_t half)
{
    return (rem > half || (rem == half && (q & 1u))) ? q + 1u : q;
}

inline uint16_t FloatToHalfBits(float value)
{
    const uint32_t f = FloatBits(value);
    const uint32_t sign = (f >> 16) & 0x8000u;
    const uint32_t a = f & 0x7fffffffu;
    if (a > 0x7f800000u) {  // NaN: top payload bits, never turning into inf
        uint32_t h = 0x7c00u + ((a & 0x007fffffu) >> 13);
        return static_cast<uint16_t>(sign | (h == 0x7c00u ? 0x7c01u : h));
    }
    if (a >= 0x477ff000u) {  // >= 65520 rounds to inf
        return static_cast<uint16_t>(sign | 0x7c00u);
    }
    if (a >= 0x38800000u) {  // normal half: rebias the exponent, round 13 bits away
        const uint32_t m = a - 0x38000000u;
        return static_cast<uint16_t>(sign | RoundHalfEven(m >> 13, m & 0x1fffu, 0x1000u));
    }
    // subnormal half: value / 2^-24 rounded to an integer
    const uint32_t exp = a >> 23;
    const uint32_t shift = 126u - exp;
    if (exp == 0 || shift >= 25u) {
        return static_cast<uint16_t>(sign);
    }
    const uint32_t sig = (a & 0x007fffffu) | 0x00800000u;
    const uint32_t q = RoundHalfEven(sig >> shift, sig & ((1u << shift) - 1u), 1u << (shift - 1u));
    return static_cast<uint16_t>(sign | q);
}

inline float HalfBitsToFloat(uint16_t h)
{
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x03ffu;
    if (exp == 0x1fu) {
        return BitsFloat(sign | 0x7f800000u | (mant << 13));
    }
    if (exp != 0) {
        return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
    }
    if (mant == 0) {
        return BitsFloat(sign);
    }
    uint32_t e = 113u;  // normalise the subnormal
    while ((mant & 0x0400u) == 0) {
        mant <<= 1;
        --e;
    }
    return BitsFloat(sign | (e << 23) | ((mant & 0x03ffu) << 13));
}

inline uint16_t FloatToBf16Bits(float value)
{
    const uint32_t f = FloatBits(value);
    if ((f & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<uint16_t>(((f >> 16) & 0x8000u) | 0x7fc0u);
    }
    return static_cast<uint16_t>(RoundHalfEven(f >> 16, f & 0xffffu, 0x8000u));
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
