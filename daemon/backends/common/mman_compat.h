/* madvise values newer than some C libraries' <sys/mman.h>, defined once for gllmd and its backends. */
#ifndef GLLM_MMAN_COMPAT_H
#define GLLM_MMAN_COMPAT_H

#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  /* Linux 5.14's value; older kernels answer EINVAL */
#endif

#endif
