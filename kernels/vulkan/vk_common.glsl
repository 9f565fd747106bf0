// What every Vulkan kernel shares: tensors as 64-bit device addresses (buffer references),
// element loads and stores per storage type (T_F32, T_F16 or T_BF16 at compile time), and the
// parameter blocks, laid out as kernels/portable/pk_params.h so one host job logic fills both.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Ref { float v; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Ref { uint v; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32Ref { int v; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16Ref { uint16_t v; };

// pk_attn_params: five addresses, five stride arrays, then the 32-bit fields.
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer AttnParams {
    uint64_t q, k, v, o, lse;
    int64_t q_st[4], k_st[4], v_st[4], o_st[4], lse_st[3];
    int B, Hq, Hkv, Sq, Skv, D;
    float scale_log2;
    int causal;
};

// pk_paged_params.
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer PagedParams {
    uint64_t k_cache, v_cache, q, o, k_new, v_new;
    uint64_t kv_indptr, kv_indices, kv_len, q_indptr;
    uint64_t bad;
    int64_t num_pages;
    int B, Hq, Hkv, D, page_size, nnew;
    float scale_log2;
    int elem_bytes;
};

// The attention variant (daemon/backends/common/backend_api.h, struct attn_variant), VARIANT_AT
// bytes after either parameter block: ALiBi slopes and sinks as addresses of [Hq] f32 (0:
// none), window edges (-1: none on that side), the chunk (0: none), the soft cap (0: none).
#define VARIANT_AT 320
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer VariantParams {
    uint64_t alibi, sinks;
    int window_left, window_right;
    int chunk;
    float soft_cap;
};

// The host hands each dispatch the address of its parameter block.
layout(push_constant) uniform Push { uint64_t params; } pc;

int ld_i32(uint64_t base, int64_t i) { return I32Ref(base + uint64_t(i) * 4ul).v; }

// IEEE half to float is exact; float to half rounds to nearest even by hand, so results do
// not depend on a driver's conversion rounding (as the CPU backend and the emulation round).
float half_bits_to_float(uint h) { return unpackHalf2x16(h).x; }
uint float_to_half_bits(float x)
{
    uint u = floatBitsToUint(x), a = u & 0x7fffffffu, h;
    if (a > 0x7f800000u)
        h = 0x7e00u;                                     // NaN
    else if (a >= 0x477ff000u)
        h = 0x7c00u;                                     // rounds past 65504: infinity
    else if (a < 0x38800000u)
        h = uint(roundEven(abs(x) * 16777216.0));        // subnormal: units of 2^-24
    else
        h = (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;
    return h | ((u >> 16) & 0x8000u);
}
// bfloat16 is the top half of a float; stores round to nearest even and keep NaNs quiet.
uint float_to_bf16_bits(float x)
{
    uint u = floatBitsToUint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (u >> 16) | 0x40u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

#if defined(T_F32)
float ld(uint64_t base, int64_t i) { return F32Ref(base + uint64_t(i) * 4ul).v; }
void st(uint64_t base, int64_t i, float x) { F32Ref(base + uint64_t(i) * 4ul).v = x; }
#elif defined(T_F16)
float ld(uint64_t base, int64_t i) { return half_bits_to_float(uint(U16Ref(base + uint64_t(i) * 2ul).v)); }
void st(uint64_t base, int64_t i, float x) { U16Ref(base + uint64_t(i) * 2ul).v = uint16_t(float_to_half_bits(x)); }
#elif defined(T_BF16)
float ld(uint64_t base, int64_t i) { return uintBitsToFloat(uint(U16Ref(base + uint64_t(i) * 2ul).v) << 16); }
void st(uint64_t base, int64_t i, float x) { U16Ref(base + uint64_t(i) * 2ul).v = uint16_t(float_to_bf16_bits(x)); }
#endif
