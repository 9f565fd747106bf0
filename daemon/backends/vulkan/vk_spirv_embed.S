/* Embeds the prebuilt SPIR-V kernels in gllmd; the GLLM_SPV_* paths come from CMake. */
#define EMBED(sym, file)              \
    .section .rodata.gllm_spirv, "a"; \
    .balign 64;                       \
    .global sym;                      \
    .type sym, @object;               \
sym:                                  \
    .incbin file;                     \
    .global sym##_end;                \
sym##_end:                            \
    .byte 0

EMBED(gllm_spv_attn_f32, GLLM_SPV_ATTN_F32)
EMBED(gllm_spv_attn_f16, GLLM_SPV_ATTN_F16)
EMBED(gllm_spv_attn_bf16, GLLM_SPV_ATTN_BF16)
EMBED(gllm_spv_paged_f32, GLLM_SPV_PAGED_F32)
EMBED(gllm_spv_paged_f16, GLLM_SPV_PAGED_F16)
EMBED(gllm_spv_paged_bf16, GLLM_SPV_PAGED_BF16)
EMBED(gllm_spv_append, GLLM_SPV_APPEND)
    .section .note.GNU-stack, "", @progbits
