/* Extents of strided tensors, shared by the backends that stage tensors on a device. */
#include "strided.h"

size_t strided_span_bytes(int rank, const int64_t *shape, const int64_t *strides, size_t esize)
{
    int64_t last = 0;
    for (int i = 0; i < rank; i++) {
        if (shape[i] == 0)
            return 0;
        last += (shape[i] - 1) * strides[i];
    }
    return (size_t)(last + 1) * esize;
}

bool strided_contiguous(int rank, const int64_t *shape, const int64_t *strides)
{
    int64_t expect = 1;
    for (int i = rank - 1; i >= 0; i--) {
        if (shape[i] != 1 && strides[i] != expect)
            return false;
        expect *= shape[i];
    }
    return true;
}
