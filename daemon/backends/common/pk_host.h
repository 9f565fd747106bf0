/* The host half of the portable kernels: turns a backend's attention and paged jobs into
 * copies and launches of kernels/portable/pk_kernels.cpp through a small device interface,
 * so the HSA backend and the CUDA backend's portable variant share one job logic (job logic,
 * not kernel source: it lives with the backends). */
#ifndef GLLM_PK_HOST_H
#define GLLM_PK_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "backend_api.h"
#include "pk_params.h"

enum pk_kernel {
    PK_ATTN_F32, PK_ATTN_F16, PK_ATTN_BF16,
    PK_PAGED_F32, PK_PAGED_F16, PK_PAGED_BF16,
    PK_APPEND,
    PK_NKERNELS
};

/* Symbol names in the images, by enum pk_kernel. */
extern const char *const pk_kernel_names[PK_NKERNELS];

/* What a device gives the job logic. Copies and launches run in the order they are asked
 * for; finish waits for all of them. Every entry returns 0 or a gllm code / -errno. */
struct pk_device_ops {
    /* Device scratch of at least bytes (contents lost); its device address in *base. */
    int (*scratch)(void *dev, size_t bytes, uint64_t *base);
    int (*to_device)(void *dev, uint64_t dst, const void *src, size_t bytes);
    int (*to_host)(void *dev, void *dst, uint64_t src, size_t bytes);
    /* Kernel k on a gx x gy grid of workgroups of bx threads, its parameters size bytes. */
    int (*launch)(void *dev, enum pk_kernel k, unsigned gx, unsigned gy, unsigned bx,
                  const void *params, size_t size);
    int (*finish)(void *dev);
};

/* A device's view: its ops, itself, its wave size (32 or 64). */
struct pk_device {
    const struct pk_device_ops *ops;
    void *dev;
    int wave;
};

/* Largest grid dimension y the job logic asks for (CUDA's limit, kept on every vendor so
 * the two variants take the same jobs). */
#define PK_MAX_GRID_Y 65535

/* What the portable kernels compute, as both backends that run them declare it: f32, f16
 * and bf16, head dims 1..PK_MAX_D, every variant field in every mode, and v's head dim below
 * q's in dense attention (the paged kernel's caches take one head dim). */
void pk_declare(struct backend_caps *out);

/* Dense attention; GLLM_EHEADDIM past PK_MAX_D, -E2BIG past the grid's limits. */
int pk_attention(const struct pk_device *d, const struct attn_args *a);
/* Paged append or attention; GLLM_EBOUNDS (why filled) when a page number read on the
 * device is out of range. */
int pk_paged(const struct pk_device *d, const struct paged_args *p);
/* 0 when pk_paged can run p, else a code and a one-line reason. */
int pk_paged_check(const struct paged_args *p, char *why, size_t len);

#endif
