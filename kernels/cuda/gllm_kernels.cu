// The one translation unit behind kernels/prebuilt/gllm_kernels.fatbin: every kernel gllmd loads.
#include "attention_fwd.cu"
#include "attention_fwd_hopper.cu"
#include "paged_attention.cu"
#include "paged_prefill_hopper.cu"
#include "pad_rows.cu"
#include "attention_fwd_hopper_wide.cu"
