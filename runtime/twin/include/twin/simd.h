// Eight-lane helpers (GCC vector extensions, so any g++ target compiles them; with AVX the mask
// packing is one movmskps). Only bit-exact operations live here: IEEE compares and bitwise picks.
#ifndef TWIN_SIMD_H
#define TWIN_SIMD_H

#include <cstdint>
#include <cstring>

namespace twin {

typedef float V8F __attribute__((vector_size(32)));
typedef int32_t V8I __attribute__((vector_size(32)));
typedef uint32_t V8U __attribute__((vector_size(32)));

inline V8F Load8(const float* p)
{
    V8F v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline V8U Load8(const uint32_t* p)
{
    V8U v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline void Store8(void* p, V8U v) { std::memcpy(p, &v, sizeof v); }

// Lane k of a compare result (-1 or 0) becomes bit k.
inline uint8_t Pack8(V8I mask)
{
#if defined(__AVX__)
    return static_cast<uint8_t>(__builtin_ia32_movmskps256(reinterpret_cast<V8F>(mask)));
#else
    const V8I bit = {1, 2, 4, 8, 16, 32, 64, 128};
    const V8I m = mask & bit;
    return static_cast<uint8_t>(m[0] | m[1] | m[2] | m[3] | m[4] | m[5] | m[6] | m[7]);
#endif
}

// Bit k of `byte` as an all-ones or all-zeros lane k.
inline V8U Expand8(uint32_t byte)
{
    const V8U bit = {1, 2, 4, 8, 16, 32, 64, 128};
    const V8U b = V8U{} + byte;
    return reinterpret_cast<V8U>((b & bit) != 0);
}

}  // namespace twin

#endif  // TWIN_SIMD_H
