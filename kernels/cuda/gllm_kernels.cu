// The one translation unit behind kernels/prebuilt/gllm_kernels.fatbin: every kernel gllmd loads.
#include "attention_fwd.cu"
#include "paged_attention.cu"
