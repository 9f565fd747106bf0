/* The CUDA backend's paged KV cache entries (cuda_paged.c), for its device vtable. */
#ifndef GLLM_CUDA_PAGED_H
#define GLLM_CUDA_PAGED_H

#include "backend_api.h"

int cuda_paged_check(struct backend *be, const struct paged_args *p, char *why, size_t len);
int cuda_paged(struct backend *be, int dev, const struct paged_args *p);

#endif
