/* The CPU backend's shared memory: sealed memfds mapped by gllmd and by the client. */
#ifndef GLLM_CPU_SHARE_H
#define GLLM_CPU_SHARE_H

#include "backend_api.h"

size_t cpu_share_granularity(void);
int cpu_share_alloc(struct backend *be, int dev, size_t bytes, struct backend_shared *out,
                    int *fd);
int cpu_share_import(struct backend *be, int dev, int fd, size_t bytes,
                     struct backend_shared *out, char *why, size_t len);
void cpu_share_free(struct backend *be, int dev, const struct backend_shared *s);

#endif
