/* The CUDA backend's portable variant: the kernels of kernels/portable/ (the HSA backend's,
 * compiled by nvcc) run on NVIDIA GPUs, so the AMD backend's kernel logic is checked on the
 * hardware this project has. A backend of its own, "cuda-portable", opened only by name. */
#ifndef GLLMD_CUDA_PORTABLE_H
#define GLLMD_CUDA_PORTABLE_H

#include "backend_api.h"

/* The entry point: gllmd --backend cuda-portable, or the conformance suite by name. The CUDA
 * backend can hand a whole open over to it (cuda_portable_backend_iface.open(cfg, out)) when
 * asked for portable kernels. */
extern const struct backend_iface cuda_portable_backend_iface;

/* Tests: the driver table the backend uses from now on (a fake); NULL: libcuda.so.1 again. */
struct cuda_driver;
void cuda_portable_set_driver(const struct cuda_driver *d);

/* The embedded portable NVIDIA fatbin (cuda_portable_embed.S). */
const void *cuda_portable_image(void);
size_t cuda_portable_image_size(void);

#endif
