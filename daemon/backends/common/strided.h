/* Extents of strided tensors (strided.c): what the GPU backends stage on a device. */
#ifndef GLLM_STRIDED_H
#define GLLM_STRIDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes from a tensor's first element to one past its last (strides >= 0, validated by
 * the daemon); 0 for an empty tensor. */
size_t strided_span_bytes(int rank, const int64_t *shape, const int64_t *strides, size_t esize);
/* Whether the strides are the row-major ones of shape (dimensions of 1 ignored). */
bool strided_contiguous(int rank, const int64_t *shape, const int64_t *strides);

#endif
