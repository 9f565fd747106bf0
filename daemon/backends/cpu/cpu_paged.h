/* CPU paged KV cache operations: kv_append, and decode/prefill attention over pages. */
#ifndef GLLMD_CPU_PAGED_H
#define GLLMD_CPU_PAGED_H

#include "backend_api.h"
#include "cpu_attention.h"

/* Blocking; a validated job (job_prepare_paged) in. Attention runs on dense's pool. */
int cpu_paged_run(struct cpu_attention *dense, const struct paged_args *p);

#endif
