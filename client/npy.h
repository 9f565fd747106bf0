/* Minimal NumPy .npy reader/writer for gllmctl: little-endian f32/f16, C order. */
#ifndef GLLM_NPY_H
#define GLLM_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "gllm/gllm.h"

#define NPY_MAX_RANK 8

struct npy {
    gllm_dtype dtype;             /* F32 or F16 */
    int rank;
    int64_t shape[NPY_MAX_RANK];
    size_t count;                 /* elements */
    void *data;                   /* count * element size bytes */
};

/* Returns 0, or -errno / GLLM_E* with a human-readable reason in err. */
int npy_load(const char *path, struct npy *out, char *err, size_t errlen);
int npy_save(const char *path, const struct npy *a, char *err, size_t errlen);
void npy_free(struct npy *a);

#endif
