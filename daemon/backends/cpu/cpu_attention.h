/* CPU attention: dense and paged jobs planned into tasks for one ISA level's kernel. */
#ifndef GLLMD_CPU_ATTENTION_H
#define GLLMD_CPU_ATTENTION_H

#include "backend_api.h"
#include "cpu_isa.h"
#include "cpu_pool.h"

#define CPU_MAX_HEAD_DIM 256

struct cpu_attention;

/* Allocates per-thread scratch tiles for every thread of pool; jobs run isa's kernel (one
 * cpu_isa_runs says this CPU executes). */
int cpu_attention_create(struct cpu_pool *pool, enum cpu_isa isa, struct cpu_attention **out);
void cpu_attention_destroy(struct cpu_attention *c);
enum cpu_isa cpu_attention_isa(const struct cpu_attention *c);
/* Blocking; a validated job (see session/job validation) in, output written. */
int cpu_attention_run(struct cpu_attention *c, const struct attn_args *a);
/* Blocking; a validated paged attend job (job_prepare_paged), its pages read in place. */
int cpu_attention_paged(struct cpu_attention *c, const struct paged_args *p);

#endif
