/* Embeds the portable kernels' NVIDIA fatbin in gllmd; GLLM_PORTABLE_FATBIN comes from CMake. */
    .section .rodata.gllm_portable_fatbin, "a"
    .balign 64
    .global gllm_cuda_portable_fatbin
    .type gllm_cuda_portable_fatbin, @object
gllm_cuda_portable_fatbin:
    .incbin GLLM_PORTABLE_FATBIN
    .global gllm_cuda_portable_fatbin_end
gllm_cuda_portable_fatbin_end:
    .byte 0
    .section .note.GNU-stack, "", @progbits
