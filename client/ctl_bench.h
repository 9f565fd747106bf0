/* What gllmctl's two benchmarks share: the gllm-bench-run/1 document (bench/SCHEMA.md) and the slowdown test hook. */
#ifndef GLLM_CTL_BENCH_H
#define GLLM_CTL_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "gllm/gllm.h"

/* GLLM_BENCH_SLOWDOWN=F (a test hook for the regression gate, never read by gllmd): the
 * benchmarks report every time as (1 + F) times what they measured. Sets *factor to 1 + F
 * (1 when unset) and returns 0, or prints why and returns 2 (a usage error). */
int ctl_bench_slowdown(double *factor);
/* The slowdown hook read, then connected: 0, or the exit status either step gave. */
int ctl_bench_connect(const char *socket_path, double *slow, gllm_client **c);
/* A measured time scaled by the hook's factor. */
uint64_t ctl_bench_scaled(uint64_t ns, double factor);
/* Prints the document's opening: schema, meta (date, commit, gllmd version, backend,
 * device, driver and SM clock where nvidia-smi answers, the command) and "cases": [. */
void ctl_bench_json_open(gllm_client *c, const char *tool, int iters, double factor);
/* Prints a case's opening, {"suite": ..., "name": ..., "params": {...}, "figures": {,
 * preceded by a comma unless first; the caller prints the figures and then calls
 * ctl_bench_json_case_close with the figure the gate judges. */
void ctl_bench_json_case_open(bool first, const char *suite, const char *name, const char *params);
/* One figure with one value, "key": [value]; nothing when value is not finite. */
void ctl_bench_json_figure(const char *key, double value);
void ctl_bench_json_case_close(const char *const *gate, int ngate);
/* Closes the cases and the document. */
void ctl_bench_json_close(void);

#endif
