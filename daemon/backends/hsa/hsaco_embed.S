/* Embeds the prebuilt AMDGPU code objects in gllmd; the GLLM_HSACO_* paths come from CMake. */
#define EMBED(sym, file)              \
    .section .rodata.gllm_hsaco, "a"; \
    .balign 64;                       \
    .global sym;                      \
    .type sym, @object;               \
sym:                                  \
    .incbin file;                     \
    .global sym##_end;                \
sym##_end:                            \
    .byte 0

EMBED(gllm_hsaco_gfx90a, GLLM_HSACO_GFX90A)
EMBED(gllm_hsaco_gfx942, GLLM_HSACO_GFX942)
EMBED(gllm_hsaco_gfx1100, GLLM_HSACO_GFX1100)
EMBED(gllm_hsaco_gfx1201, GLLM_HSACO_GFX1201)
    .section .note.GNU-stack, "", @progbits
