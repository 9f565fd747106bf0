/* gllmctl's shared helpers and its commands' entry points (which never call each other). */
#ifndef GLLM_CTL_H
#define GLLM_CTL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gllm/gllm.h"

/* systemctl's convention for "the service is not running". */
#define CTL_EXIT_NOT_RUNNING 3

/* gllmctl's usage text. */
void ctl_usage(FILE *f);
/* Connects, printing why not; returns 0, 1 (error) or 3 (daemon not running). */
int ctl_connect(const char *socket_path, gllm_client **c);
/* CLOCK_MONOTONIC in ns, and an ascending sort, for the benchmarks. */
uint64_t ctl_mono_ns(void);
void ctl_sort_u64(uint64_t *v, int n);
/* Prints s as a JSON string literal, escaped. */
void ctl_json_str(const char *s);
/* Opens a benchmark's JSON object: backend, device, then the array named list. */
void ctl_json_open(gllm_client *c, const char *list);
/* The name of device 0, "" when there is none. */
const char *ctl_first_device_name(gllm_client *c, gllm_device_info *buf);

/* What `bench` was asked for. */
struct ctl_bench_opts {
    bool json, decode;
    int iters;
};
/* Parses bench's arguments (argv[0] is "bench"): 0, or 2 for a usage error. */
int ctl_bench_parse(int argc, char **argv, struct ctl_bench_opts *o);

/* The commands: each returns gllmctl's exit status. */
int ctl_cmd_status(const char *socket_path, int argc, char **argv);
int ctl_cmd_attn(const char *socket_path, int argc, char **argv);
/* bench: standard prefill shapes; bench --decode: paged decode, device-resident. */
int ctl_cmd_bench(const char *socket_path, const struct ctl_bench_opts *o);
int ctl_cmd_bench_decode(const char *socket_path, const struct ctl_bench_opts *o);

#endif
