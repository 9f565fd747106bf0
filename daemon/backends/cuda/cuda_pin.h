/* Host memory pinned a piece at a time, and host copies split where a piece ends. */
#ifndef GLLM_CUDA_PIN_H
#define GLLM_CUDA_PIN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_driver.h"

/* cuMemHostRegister holds up every other CUDA call of the process while it runs (about 35 ms
 * a GiB on an H200 with the pages already made: docs/hardening.md), so an arena is
 * registered in pieces and jobs run between them. Pieces end at multiples of this in the
 * address space, so that a copy can tell where to split without a lookup: the driver refuses
 * a copy that spans two registrations (CUDA_ERROR_INVALID_VALUE). */
#define CUDA_PIN_PIECE ((size_t)256 << 20)

struct cuda_pin;

/* The ranges pinned, for unpinning them piece by piece (any thread). */
struct cuda_pins {
    pthread_mutex_t lock;
    struct cuda_pin *list;
};

/* The bytes from addr to the end of its piece, at most n. */
static inline size_t cuda_pin_piece(uintptr_t addr, size_t n)
{
    const size_t left = CUDA_PIN_PIECE - (size_t)(addr & (CUDA_PIN_PIECE - 1));
    return left < n ? left : n;
}

/* Registers [p, p + len) with flags in pieces (the caller has set the context); all or
 * nothing: after a failure no piece stays registered. CUDA_ERROR_OUT_OF_MEMORY when the
 * record cannot be kept. */
CUresult cuda_pin(const struct cuda_driver *d, struct cuda_pins *pins, void *p, size_t len,
                  unsigned flags);
/* Unregisters what cuda_pin(p) registered; nothing when p is not pinned. */
void cuda_unpin(const struct cuda_driver *d, struct cuda_pins *pins, void *p);
/* Frees the records (the context's teardown unregisters everything). */
void cuda_pins_clear(struct cuda_pins *pins);

/* cuMemcpyHtoDAsync and cuMemcpyDtoHAsync, split where the host side's pieces end. */
CUresult cuda_copy_htod(const struct cuda_driver *d, CUdeviceptr dst, const void *src, size_t n,
                        CUstream s);
CUresult cuda_copy_dtoh(const struct cuda_driver *d, void *dst, CUdeviceptr src, size_t n,
                        CUstream s);

#endif
