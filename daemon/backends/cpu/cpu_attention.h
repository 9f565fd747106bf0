/* CPU attention kernel: runs an attn_args job across a cpu_pool. */
#ifndef GLLMD_CPU_ATTENTION_H
#define GLLMD_CPU_ATTENTION_H

#include "backend_api.h"
#include "cpu_pool.h"

#define CPU_MAX_HEAD_DIM 256

struct cpu_attention;

/* Allocates per-thread scratch tiles for every thread of pool. */
int cpu_attention_create(struct cpu_pool *pool, struct cpu_attention **out);
void cpu_attention_destroy(struct cpu_attention *c);
/* Blocking; a validated job (see session/job validation) in, output written. */
int cpu_attention_run(struct cpu_attention *c, const struct attn_args *a);

#endif
