/* The CUDA backend's shared device memory: VMM allocations exported and imported as POSIX fds. */
#ifndef GLLM_CUDA_SHARE_H
#define GLLM_CUDA_SHARE_H

#include "cuda_device.h"

/* The largest allocation granularity of c's devices (0 when none answers): shared sizes are
 * multiples of it, so one size maps on every device. */
size_t cuda_share_granularity(const struct cuda_ctx *c);
int cuda_share_alloc(struct backend *be, int dev, size_t bytes, struct backend_shared *out,
                     int *fd);
int cuda_share_import(struct backend *be, int dev, int fd, size_t bytes,
                      struct backend_shared *out, char *why, size_t len);
void cuda_share_free(struct backend *be, int dev, const struct backend_shared *s);

#endif
