/* Element formats of gllm tensors: bit-exact conversions between f32 and the 16-bit formats
 * (IEEE binary16 "f16" and bfloat16 "bf16"), header-only, for clients, tools and backends. */
#ifndef GLLM_ELEM_H
#define GLLM_ELEM_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The bits of an f32, and the f32 of some bits (no aliasing: memcpy compiles to a move). */
static inline uint32_t gllm_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float gllm_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* f16 -> f32: exact for every input, subnormals, infinities and NaNs included. */
static inline float gllm_f16_to_f32(uint16_t h)
{
    const uint32_t exp_mask = 0x7c00u << 13;
    uint32_t u = (uint32_t)(h & 0x7fff) << 13;
    uint32_t exp = u & exp_mask;
    u += (uint32_t)(127 - 15) << 23;               /* rebias the exponent */
    if (exp == exp_mask) {
        u += (uint32_t)(128 - 16) << 23;           /* Inf/NaN keep an all-ones exponent */
    } else if (exp == 0) {
        /* Subnormal: let the FPU normalise by subtracting the implicit bit back out. */
        u += 1u << 23;
        u = gllm_f32_bits(gllm_f32_from_bits(u) - gllm_f32_from_bits(113u << 23));
    }
    return gllm_f32_from_bits(u | (uint32_t)(h & 0x8000) << 16);
}

/* f32 -> f16: round to nearest even; too large becomes infinity; a NaN stays a NaN. */
static inline uint16_t gllm_f32_to_f16(float f)
{
    uint32_t x = gllm_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u)
        return sign | (x > 0x7f800000u ? 0x7e00 : 0x7c00);
    if (x >= 0x477ff000u)                          /* rounds to >= 65520: Inf */
        return sign | 0x7c00;
    if (x < 0x38800000u) {
        /* Below 2^-14: adding 0.5 makes the FPU round |f| to a multiple of 2^-24,
         * the f16 subnormal step, and leaves that multiple in the low bits. */
        float t = gllm_f32_from_bits(x) + 0.5f;
        return sign | (uint16_t)(gllm_f32_bits(t) - 0x3f000000u);
    }
    uint32_t odd = (x >> 13) & 1;
    x += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
    return sign | (uint16_t)(x >> 13);
}

/* bf16 -> f32: exact (bf16 is the top half of an f32). */
static inline float gllm_bf16_to_f32(uint16_t h)
{
    return gllm_f32_from_bits((uint32_t)h << 16);
}

/* f32 -> bf16: round to nearest even; a NaN stays a (quiet) NaN with its sign. */
static inline uint16_t gllm_f32_to_bf16(float f)
{
    uint32_t x = gllm_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);       /* quiet NaN, sign kept */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

#ifdef __cplusplus
}
#endif

#endif
