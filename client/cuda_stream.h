/* libgllm-client: counters in an arena written and awaited on the caller's CUDA stream. */
#ifndef GLLM_CLIENT_CUDA_STREAM_H
#define GLLM_CLIENT_CUDA_STREAM_H

#include <stddef.h>
#include <stdint.h>

struct cuda_stream_reg;

/* Registers host memory [base, base + size) with the caller's CUDA context so its streams can
 * write and wait on counters there; opens libcuda.so.1 (-ELIBACC without it). */
int cuda_stream_register(void *base, size_t size, struct cuda_stream_reg **out, char *why,
                         size_t len);
/* On stream (a CUstream, NULL: the legacy default stream): write value at base + offset, or
 * wait until (int32_t)(counter - value) >= 0 there. */
int cuda_stream_write(struct cuda_stream_reg *r, size_t offset, uint32_t value, void *stream,
                      char *why, size_t len);
int cuda_stream_wait(struct cuda_stream_reg *r, size_t offset, uint32_t value, void *stream,
                     char *why, size_t len);
/* The same for device memory mapped in the caller's context at dev (nothing to register). */
int cuda_stream_device(uint64_t dev, struct cuda_stream_reg **out, char *why, size_t len);
void cuda_stream_unregister(struct cuda_stream_reg *r);   /* accepts NULL */

#endif
