/* Shared pieces of gllmctl's commands. */
#ifndef GLLM_CTL_H
#define GLLM_CTL_H

#include <stdbool.h>
#include <stdint.h>

#include "gllm/gllm.h"

/* Connects, printing why not; returns 0, 1 (error) or 3 (daemon not running). */
int ctl_connect(const char *socket_path, gllm_client **c);
int ctl_bench(const char *socket_path, int argc, char **argv);
/* CLOCK_MONOTONIC in ns, and an ascending sort, for the benchmarks. */
uint64_t ctl_mono_ns(void);
void ctl_sort_u64(uint64_t *v, int n);
/* The --decode half of bench: paged decode shapes, device-resident. */
int ctl_bench_decode(gllm_client *c, int iters, bool json);
/* Prints s as a JSON string literal, escaped. */
void json_str(const char *s);
/* Opens a benchmark's JSON object: backend, device, then the array named list. */
void ctl_json_open(const gllm_caps *caps, const char *list);

#endif
