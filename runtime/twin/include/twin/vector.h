// Vector instructions of the emitted subset, with the IR's numerics (codegen/ir.py docstring):
// float32 IEEE arithmetic (the twin is compiled with -ffp-contract=off, no fast-math), Cast in
// exact and out with round-half-even, Sign(+-0) = Sign(NaN) = +0, Compare as a packed
// little-endian bitmask with NaN comparing false (NE true), Select as a bitwise pick.
//
// Maxs/Mins with a NaN lane are undocumented on the hardware; the twin returns the NaN lane (and
// the scalar when the scalar is NaN, and the scalar on a +-0 tie), which is what numpy's
// maximum/minimum do for the CPU backend's default "propagate" policy.
#ifndef TWIN_VECTOR_H
#define TWIN_VECTOR_H

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "twin/core.h"
#include "twin/dtypes.h"
#include "twin/operand.h"
#include "twin/simd.h"
#include "twin/tensor.h"

namespace AscendC {

enum class RoundMode {
    CAST_NONE = 0,
    CAST_RINT,
    CAST_FLOOR,
    CAST_CEIL,
    CAST_ROUND,
    CAST_TRUNC,
    CAST_ODD,
    CAST_HYBRID,
};

enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };

enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };

}  // namespace AscendC

namespace twin {

constexpr uint32_t REPEAT_BYTES = 256;
constexpr uint32_t SIGN_MIN_TMP_BYTES = 3 * 256;  // GetSignMaxMinTmpSize minimum

template <typename T>
struct IsFloat : std::is_same<T, float> {};

inline const char* RoundName(AscendC::RoundMode m)
{
    static const char* const names[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL",
                                        "CAST_ROUND", "CAST_TRUNC", "CAST_ODD", "CAST_HYBRID"};
    const int i = static_cast<int>(m);
    return (i >= 0 && i < 8) ? names[i] : "unknown";
}

template <typename T>
inline const char* TypeName()
{
    if (std::is_same<T, float>::value) return "float";
    if (std::is_same<T, half>::value) return "half";
    if (std::is_same<T, bfloat16_t>::value) return "bfloat16_t";
    return "uint8_t";
}

inline float Widen(float v) { return v; }
inline float Widen(half v) { return HalfBitsToFloat(v.bits); }
inline float Widen(bfloat16_t v) { return Bf16BitsToFloat(v.bits); }

// Compare and Select take half and float everywhere, bfloat16_t only on the 950 (arch 3510).
template <typename T>
inline void CheckCompareType(const char* api)
{
    static_assert(std::is_same<T, float>::value || std::is_same<T, half>::value || std::is_same<T, bfloat16_t>::value,
                  "the twin implements Compare/Select on float, half and bfloat16_t only");
    if (std::is_same<T, bfloat16_t>::value && Current().launch->npuArch != 3510) {
        Fail("dtype", "%s on bfloat16_t needs __NPU_ARCH__ 3510 (ascend950); this target is %u", api,
             Current().launch->npuArch);
    }
}

template <typename F>
inline void BinaryOp(const char* api, const AscendC::LocalTensor<float>& dst, const AscendC::LocalTensor<float>& src0,
                     const AscendC::LocalTensor<float>& src1, int32_t count, F f)
{
    const uint64_t n = Count(count, api);
    Span<float> d = Operand(dst, n * 4, api, "dst");
    Span<float> a = Operand(src0, n * 4, api, "src0");
    Span<float> b = Operand(src1, n * 4, api, "src1");
    NoPartialOverlap(d, a, api, "src0");
    NoPartialOverlap(d, b, api, "src1");
    float* out = d.data;
    const float* x = a.data;
    const float* y = b.data;
    for (uint64_t i = 0; i < n; ++i) {
        out[i] = f(x[i], y[i]);
    }
}

template <typename F>
inline void ScalarOp(const char* api, const AscendC::LocalTensor<float>& dst, const AscendC::LocalTensor<float>& src,
                     float s, int32_t count, F f)
{
    const uint64_t n = Count(count, api);
    Span<float> d = Operand(dst, n * 4, api, "dst");
    Span<float> a = Operand(src, n * 4, api, "src");
    NoPartialOverlap(d, a, api, "src");
    float* out = d.data;
    const float* x = a.data;
    for (uint64_t i = 0; i < n; ++i) {
        out[i] = f(x[i], s);
    }
}

// Pack cmp(x[i], y(i)) little-endian: lane i is bit i % 8 of byte i / 8. Lanes are compared into
// a 0/1 word array first (a loop the compiler vectorises), then packed 8 to a byte.
template <typename T, typename Y, typename C>
inline void PackCompare(uint8_t* out, const T* x, Y y, uint64_t n, C cmp)
{
    constexpr uint64_t CHUNK = 256;
    uint32_t lanes[CHUNK];
    for (uint64_t base = 0; base < n; base += CHUNK) {
        const uint64_t m = n - base < CHUNK ? n - base : CHUNK;
        for (uint64_t i = 0; i < m; ++i) {
            lanes[i] = cmp(Widen(x[base + i]), y(base + i)) ? 1u : 0u;
        }
        for (uint64_t i = 0; i < m; i += 8) {
            out[(base + i) / 8] = static_cast<uint8_t>(lanes[i] | lanes[i + 1] << 1 | lanes[i + 2] << 2 |
                                                       lanes[i + 3] << 3 | lanes[i + 4] << 4 | lanes[i + 5] << 5 |
                                                       lanes[i + 6] << 6 | lanes[i + 7] << 7);
        }
    }
}

// float lanes against float lanes (tensor) or a broadcast scalar, eight at a time.
template <typename Y, typename C>
inline void PackCompare8(uint8_t* out, const float* x, Y y, uint64_t n, C cmp)
{
    for (uint64_t i = 0; i < n; i += 8) {
        out[i / 8] = Pack8(cmp(Load8(x + i), y(i)));
    }
}

template <typename Y>
inline void CompareFloat8(uint8_t* out, const float* x, Y y, uint64_t n, AscendC::CMPMODE mode)
{
    using AscendC::CMPMODE;
    switch (mode) {
        case CMPMODE::LT: PackCompare8(out, x, y, n, [](V8F a, V8F b) { return a < b; }); break;
        case CMPMODE::GT: PackCompare8(out, x, y, n, [](V8F a, V8F b) { return a > b; }); break;
        case CMPMODE::EQ: PackCompare8(out, x, y, n, [](V8F a, V8F b) { return a == b; }); break;
        case CMPMODE::LE: PackCompare8(out, x, y, n, [](V8F a, V8F b) { return a <= b; }); break;
        case CMPMODE::GE: PackCompare8(out, x, y, n, [](V8F a, V8F b) { return a >= b; }); break;
        case CMPMODE::NE: PackCompare8(out, x, y, n, [](V8F a, V8F b) { return a != b; }); break;
        default: Fail("unsupported", "Compare with CMPMODE %d", static_cast<int>(mode));
    }
}

template <typename T, typename Y>
inline void CompareLanes(uint8_t* out, const T* x, Y y, uint64_t n, AscendC::CMPMODE mode)
{
    using AscendC::CMPMODE;
    switch (mode) {
        case CMPMODE::LT: PackCompare(out, x, y, n, [](float a, float b) { return a < b; }); break;
        case CMPMODE::GT: PackCompare(out, x, y, n, [](float a, float b) { return a > b; }); break;
        case CMPMODE::EQ: PackCompare(out, x, y, n, [](float a, float b) { return a == b; }); break;
        case CMPMODE::LE: PackCompare(out, x, y, n, [](float a, float b) { return a <= b; }); break;
        case CMPMODE::GE: PackCompare(out, x, y, n, [](float a, float b) { return a >= b; }); break;
        case CMPMODE::NE: PackCompare(out, x, y, n, [](float a, float b) { return a != b; }); break;
        default: Fail("unsupported", "Compare with CMPMODE %d", static_cast<int>(mode));
    }
}

template <typename T>
inline uint64_t CompareCount(uint32_t count, const char* api)
{
    const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    if (bytes % REPEAT_BYTES != 0) {
        Fail("compare-count",
             "%s over %u %s elements = %llu bytes does not cover whole 256-byte repeats (the elements past the last "
             "full repeat would not be compared)",
             api, count, TypeName<T>(), static_cast<unsigned long long>(bytes));
    }
    return count;
}

template <typename T>
inline void CheckSelectTemp(const Span<T>& dst, AscendC::SELMODE mode)
{
    const Launch* l = Current().launch;
    const uint64_t used = dst.buffer->pipe->used;
    if (l->selectReserve > 0 && used + l->selectReserve > l->ubBytes) {
        Fail("select-temp",
             "Select in mode %d needs %llu bytes of UB left free as temp space on this target, but InitBuffer "
             "took %llu of the %llu bytes",
             static_cast<int>(mode), static_cast<unsigned long long>(l->selectReserve),
             static_cast<unsigned long long>(used), static_cast<unsigned long long>(l->ubBytes));
    }
}

template <typename T>
inline uint32_t LaneBits(const T& v)
{
    uint32_t u = 0;
    std::memcpy(&u, &v, sizeof(T));
    return u;
}

// Bitwise pick, lane i = x(i) where mask bit i is 1, else y(i); no arithmetic touches the lanes.
template <typename T, typename X, typename Y>
inline void SelectLanes(T* out, const uint8_t* bits, uint64_t n, X x, Y y)
{
    for (uint64_t i = 0; i < n; ++i) {
        const uint32_t m = 0u - ((static_cast<uint32_t>(bits[i / 8]) >> (i % 8)) & 1u);
        const uint32_t v = (x(i) & m) | (y(i) & ~m);
        std::memcpy(out + i, &v, sizeof(T));
    }
}

// The same for 4-byte lanes, eight per mask byte: y8(i) gives src1 lanes i..i+7, y1(i) lane i.
template <typename Y8, typename Y1>
inline void SelectWords(uint32_t* out, const uint8_t* bits, const uint32_t* x, uint64_t n, Y8 y8, Y1 y1)
{
    const uint64_t whole = n / 8 * 8;
    for (uint64_t i = 0; i < whole; i += 8) {
        const V8U m = Expand8(bits[i / 8]);
        Store8(out + i, (Load8(x + i) & m) | (y8(i) & ~m));
    }
    for (uint64_t i = whole; i < n; ++i) {
        const uint32_t m = 0u - ((static_cast<uint32_t>(bits[i / 8]) >> (i % 8)) & 1u);
        out[i] = (x[i] & m) | (y1(i) & ~m);
    }
}

}  // namespace twin

namespace AscendC {

template <typename T, typename U>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                            const uint32_t count)
{
    constexpr bool up = std::is_same<T, float>::value && (std::is_same<U, half>::value || std::is_same<U, bfloat16_t>::value);
    constexpr bool down = std::is_same<U, float>::value && (std::is_same<T, half>::value || std::is_same<T, bfloat16_t>::value);
    constexpr bool same = std::is_same<T, U>::value;
    static_assert(up || down || same, "the twin implements Cast between float and half/bfloat16_t only");
    const char* api = "Cast";
    if (same) {
        twin::Fail("cast-same-type",
                   "Cast %s->%s is not a copy: on the hardware a same-type Cast rounds every element to an integer",
                   twin::TypeName<U>(), twin::TypeName<T>());
    }
    if (up && roundMode != RoundMode::CAST_NONE) {
        twin::Fail("cast-mode", "Cast %s->float allows only CAST_NONE (exact), got %s", twin::TypeName<U>(),
                   twin::RoundName(roundMode));
    }
    if (down && std::is_same<T, bfloat16_t>::value && roundMode == RoundMode::CAST_NONE) {
        twin::Fail("cast-mode", "Cast float->bfloat16_t does not allow CAST_NONE; name the rounding (CAST_RINT)");
    }
    if (down && roundMode != RoundMode::CAST_RINT && roundMode != RoundMode::CAST_NONE) {
        twin::Fail("unsupported", "Cast float->%s with %s (the twin implements CAST_RINT and CAST_NONE)",
                   twin::TypeName<T>(), twin::RoundName(roundMode));
    }
    twin::Span<T> d = twin::Operand(dst, static_cast<uint64_t>(count) * sizeof(T), api, "dst");
    twin::Span<U> s = twin::Operand(src, static_cast<uint64_t>(count) * sizeof(U), api, "src");
    twin::NoOverlap(d, s, api, "dst and src of a widening or narrowing Cast");
    T* out = d.data;
    const U* in = s.data;
    for (uint32_t i = 0; i < count; ++i) {
        if constexpr (up) {
            out[i] = twin::Widen(in[i]);
        } else if constexpr (std::is_same<T, half>::value) {
            twin::u16a* o = reinterpret_cast<twin::u16a*>(out);
            o[i] = twin::FloatToHalfBits(in[i]);
        } else if constexpr (std::is_same<T, bfloat16_t>::value) {
            twin::u16a* o = reinterpret_cast<twin::u16a*>(out);
            o[i] = twin::FloatToBf16Bits(in[i]);
        }
    }
}

template <typename T>
__aicore__ inline void Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count)
{
    static_assert(twin::IsFloat<T>::value, "the twin implements vector arithmetic on float only");
    twin::BinaryOp("Add", dst, src0, src1, count, [](float a, float b) { return a + b; });
}

template <typename T>
__aicore__ inline void Sub(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count)
{
    static_assert(twin::IsFloat<T>::value, "the twin implements vector arithmetic on float only");
    twin::BinaryOp("Sub", dst, src0, src1, count, [](float a, float b) { return a - b; });
}

template <typename T>
__aicore__ inline void Mul(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count)
{
    static_assert(twin::IsFloat<T>::value, "the twin implements vector arithmetic on float only");
    twin::BinaryOp("Mul", dst, src0, src1, count, [](float a, float b) { return a * b; });
}

template <typename T>
__aicore__ inline void Div(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count)
{
    static_assert(twin::IsFloat<T>::value, "the twin implements vector arithmetic on float only");
    twin::BinaryOp("Div", dst, src0, src1, count, [](float a, float b) { return a / b; });
}

template <typename T>
__aicore__ inline void Abs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count)
{
    static_assert(twin::IsFloat<T>::value, "the twin implements vector arithmetic on float only");
    const char* api = "Abs";
    const uint64_t n = twin::Count(count, api);
    twin::Span<float> d = twin::Operand(dst, n * 4, api, "dst");
    twin::Span<float> s = twin::Operand(src, n * 4, api, "src");
    twin::NoPartialOverlap(d, s, api, "src");
    twin::u32a* out = reinterpret_cast<twin::u32a*>(d.data);
    const twin::u32a* in = reinterpret_cast<const twin::u32a*>(s.data);
    for (uint64_t i = 0; i < n; ++i) {
        out[i] = in[i] & 0x7fffffffu;
    }
}

template <typename T, bool isSetMask = true>
__aicore__ inline void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                            const int32_t& count)
{
    static_assert(twin::IsFloat<T>::value, "the twin implements vector arithmetic on float only");
    twin::ScalarOp("Muls", dst, src, scalarValue, count, [](float a, float s) { return a * s; });
}

template <typename T, bool isSetMask = true>
__aicore__ inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                            const int32_t& count)
{
    static_assert(twin::IsFloat<T>::value, "the twin implements vector arithmetic on float only");
    twin::ScalarOp("Adds", dst, src, scalarValue, count, [](float a, float s) { return a + s; });
}

template <typename T, bool isSetMask = true>
__aicore__ inline void Maxs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                            const int32_t& count)
{
    static_assert(twin::IsFloat<T>::value, "the twin implements vector arithmetic on float only");
    twin::ScalarOp("Maxs", dst, src, scalarValue, count, [](float a, float s) { return a != a ? a : (a > s ? a : s); });
}

template <typename T, bool isSetMask = true>
__aicore__ inline void Mins(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                            const int32_t& count)
{
    static_assert(twin::IsFloat<T>::value, "the twin implements vector arithmetic on float only");
    twin::ScalarOp("Mins", dst, src, scalarValue, count, [](float a, float s) { return a != a ? a : (a < s ? a : s); });
}

template <typename T>
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count)
{
    static_assert(std::is_same<T, float>::value || std::is_same<T, half>::value || std::is_same<T, bfloat16_t>::value,
                  "the twin implements Duplicate on float, half and bfloat16_t only");
    const char* api = "Duplicate";
    const uint64_t n = twin::Count(count, api);
    twin::Span<T> d = twin::Operand(dst, n * sizeof(T), api, "dst");
    T* out = d.data;
    for (uint64_t i = 0; i < n; ++i) {
        out[i] = scalarValue;
    }
}

// High-level Sign: -1 / +1 by sign, +0 for +-0 and NaN; needs >= 768 bytes of temp that overlaps
// neither operand, and src and dst must not overlap.
template <typename T, bool isReuseSource = false>
__aicore__ inline void Sign(const LocalTensor<T>& dstTensor, const LocalTensor<T>& srcTensor,
                            const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t calCount)
{
    static_assert(twin::IsFloat<T>::value, "the twin implements Sign on float only");
    const char* api = "Sign";
    if (sharedTmpBuffer.GetSize() < twin::SIGN_MIN_TMP_BYTES) {
        twin::Fail("sign-tmp", "Sign's sharedTmpBuffer has %u bytes; GetSignMaxMinTmpSize's minimum is %u",
                   sharedTmpBuffer.GetSize(), twin::SIGN_MIN_TMP_BYTES);
    }
    twin::Span<float> d = twin::Operand(dstTensor, static_cast<uint64_t>(calCount) * 4, api, "dst");
    twin::Span<float> s = twin::Operand(srcTensor, static_cast<uint64_t>(calCount) * 4, api, "src");
    twin::Span<uint8_t> tmp = twin::Operand(sharedTmpBuffer, twin::SIGN_MIN_TMP_BYTES, api, "sharedTmpBuffer");
    twin::NoOverlap(d, s, api, "dst and src");
    twin::NoOverlap(tmp, s, api, "sharedTmpBuffer and src");
    twin::NoOverlap(tmp, d, api, "sharedTmpBuffer and dst");
    twin::u32a* out = reinterpret_cast<twin::u32a*>(d.data);
    const float* in = s.data;
    for (uint32_t i = 0; i < calCount; ++i) {
        const uint32_t pos = 0u - static_cast<uint32_t>(in[i] > 0.0f);
        const uint32_t neg = 0u - static_cast<uint32_t>(in[i] < 0.0f);
        out[i] = (pos & 0x3f800000u) | (neg & 0xbf800000u);  // +1.0f, -1.0f, else +0.0f
    }
}

template <typename T, typename U>
__aicore__ inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                               CMPMODE cmpMode, uint32_t count)
{
    static_assert(std::is_same<U, uint8_t>::value, "Compare writes a uint8_t bitmask");
    const char* api = "Compare";
    twin::CheckCompareType<T>(api);
    const uint64_t n = twin::CompareCount<T>(count, api);
    twin::Span<uint8_t> d = twin::Operand(dst, n / 8, api, "dst");
    twin::Span<T> a = twin::Operand(src0, n * sizeof(T), api, "src0");
    twin::Span<T> b = twin::Operand(src1, n * sizeof(T), api, "src1");
    twin::NoOverlap(d, a, api, "the mask dst and src0");
    twin::NoOverlap(d, b, api, "the mask dst and src1");
    const T* y = b.data;
    if constexpr (std::is_same<T, float>::value) {
        twin::CompareFloat8(d.data, a.data, [y](uint64_t i) { return twin::Load8(y + i); }, n, cmpMode);
    } else {
        twin::CompareLanes(d.data, a.data, [y](uint64_t i) { return twin::Widen(y[i]); }, n, cmpMode);
    }
}

// CompareScalar is the spelling 8.1-class toolkits declare (and newer ones keep, deprecated);
// Compares is the newer name. Both run the same check and compare.
template <typename T, typename U>
__aicore__ inline void CompareScalarAs(const char* api, const LocalTensor<U>& dst, const LocalTensor<T>& src0,
                                       const T src1Scalar, CMPMODE cmpMode, uint32_t count)
{
    static_assert(std::is_same<U, uint8_t>::value, "CompareScalar writes a uint8_t bitmask");
    twin::CheckCompareType<T>(api);
    const uint64_t n = twin::CompareCount<T>(count, api);
    twin::Span<uint8_t> d = twin::Operand(dst, n / 8, api, "dst");
    twin::Span<T> a = twin::Operand(src0, n * sizeof(T), api, "src0");
    twin::NoOverlap(d, a, api, "the mask dst and src0");
    const float s = twin::Widen(src1Scalar);
    if constexpr (std::is_same<T, float>::value) {
        const twin::V8F s8 = twin::V8F{} + s;
        twin::CompareFloat8(d.data, a.data, [s8](uint64_t) { return s8; }, n, cmpMode);
    } else {
        twin::CompareLanes(d.data, a.data, [s](uint64_t) { return s; }, n, cmpMode);
    }
}

template <typename T, typename U>
__aicore__ inline void CompareScalar(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar,
                                     CMPMODE cmpMode, uint32_t count)
{
    CompareScalarAs("CompareScalar", dst, src0, src1Scalar, cmpMode, count);
}

template <typename T, typename U>
__aicore__ inline void Compares(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar,
                                CMPMODE cmpMode, uint32_t count)
{
    CompareScalarAs("Compares", dst, src0, src1Scalar, cmpMode, count);
}

// VSEL_TENSOR_TENSOR_MODE: lane i = src0[i] where mask bit i is 1, else src1[i].
template <typename T, typename U>
__aicore__ inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                              const LocalTensor<T>& src1, SELMODE selMode, uint32_t count)
{
    static_assert(std::is_same<U, uint8_t>::value, "the twin implements Select with a uint8_t mask only");
    const char* api = "Select";
    twin::CheckCompareType<T>(api);
    if (selMode == SELMODE::VSEL_TENSOR_SCALAR_MODE) {
        twin::Fail("select-mode", "Select with two tensors in VSEL_TENSOR_SCALAR_MODE (that mode takes a scalar src1)");
    }
    if (selMode != SELMODE::VSEL_TENSOR_TENSOR_MODE) {
        twin::Fail("unsupported", "Select in VSEL_CMPMASK_SPR mode (the twin implements the continuous-mask modes)");
    }
    const uint64_t n = count;
    twin::Span<T> d = twin::Operand(dst, n * sizeof(T), api, "dst");
    twin::Span<uint8_t> m = twin::Operand(selMask, (n + 7) / 8, api, "selMask");
    twin::Span<T> a = twin::Operand(src0, n * sizeof(T), api, "src0");
    twin::Span<T> b = twin::Operand(src1, n * sizeof(T), api, "src1");
    twin::NoPartialOverlap(d, a, api, "src0");
    twin::NoPartialOverlap(d, b, api, "src1");
    twin::NoOverlap(d, m, api, "dst and selMask");
    twin::CheckSelectTemp(d, selMode);
    if constexpr (sizeof(T) == 4) {
        const uint32_t* y = reinterpret_cast<const uint32_t*>(b.data);
        twin::SelectWords(reinterpret_cast<uint32_t*>(d.data), m.data, reinterpret_cast<const uint32_t*>(a.data), n,
                          [y](uint64_t i) { return twin::Load8(y + i); }, [y](uint64_t i) { return y[i]; });
    } else {
        twin::SelectLanes(d.data, m.data, n, [&](uint64_t i) { return twin::LaneBits(a.data[i]); },
                          [&](uint64_t i) { return twin::LaneBits(b.data[i]); });
    }
}

// VSEL_TENSOR_SCALAR_MODE: lane i = src0[i] where mask bit i is 1, else the scalar src1.
template <typename T, typename U>
__aicore__ inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                              T src1, SELMODE selMode, uint32_t count)
{
    static_assert(std::is_same<U, uint8_t>::value, "the twin implements Select with a uint8_t mask only");
    const char* api = "Select";
    twin::CheckCompareType<T>(api);
    if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE) {
        twin::Fail("select-mode", "Select with a scalar src1 needs VSEL_TENSOR_SCALAR_MODE, got mode %d",
                   static_cast<int>(selMode));
    }
    const uint64_t n = count;
    twin::Span<T> d = twin::Operand(dst, n * sizeof(T), api, "dst");
    twin::Span<uint8_t> m = twin::Operand(selMask, (n + 7) / 8, api, "selMask");
    twin::Span<T> a = twin::Operand(src0, n * sizeof(T), api, "src0");
    twin::NoPartialOverlap(d, a, api, "src0");
    twin::NoOverlap(d, m, api, "dst and selMask");
    twin::CheckSelectTemp(d, selMode);
    const uint32_t scalar = twin::LaneBits(src1);
    if constexpr (sizeof(T) == 4) {
        const twin::V8U s8 = twin::V8U{} + scalar;
        twin::SelectWords(reinterpret_cast<uint32_t*>(d.data), m.data, reinterpret_cast<const uint32_t*>(a.data), n,
                          [s8](uint64_t) { return s8; }, [scalar](uint64_t) { return scalar; });
    } else {
        twin::SelectLanes(d.data, m.data, n, [&](uint64_t i) { return twin::LaneBits(a.data[i]); },
                          [scalar](uint64_t) { return scalar; });
    }
}

}  // namespace AscendC

#endif  // TWIN_VECTOR_H
