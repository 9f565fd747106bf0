/* Embeds the prebuilt CUDA fatbin in gllmd; GLLM_FATBIN_PATH comes from CMake. */
    .section .rodata.gllm_fatbin, "a"
    .balign 64
    .global gllm_cuda_fatbin
    .type gllm_cuda_fatbin, @object
gllm_cuda_fatbin:
    .incbin GLLM_FATBIN_PATH
    .global gllm_cuda_fatbin_end
gllm_cuda_fatbin_end:
    .byte 0
    .section .note.GNU-stack, "", @progbits
