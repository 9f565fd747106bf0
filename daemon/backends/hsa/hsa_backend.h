/* The HSA backend's hooks for tests: where it looks for the kernel driver, how long it
 * waits for a copy or kernel. */
#ifndef GLLMD_HSA_BACKEND_H
#define GLLMD_HSA_BACKEND_H

#include <stdint.h>

/* The device node the probe requires ("/dev/kfd"); tests point it elsewhere. */
void hsa_backend_set_kfd_path(const char *path);
/* How long devices opened from now on wait for one copy or kernel (0: the default). */
void hsa_backend_set_wait_ns(uint64_t ns);

#endif
