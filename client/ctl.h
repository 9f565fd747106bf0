/* gllmctl's shared helpers and its commands' entry points (which never call each other). */
#ifndef GLLM_CTL_H
#define GLLM_CTL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gllm/gllm.h"

/* Exit statuses, after LSB's init-script actions and systemctl: usage errors 2, "not
 * running" 3, no permission (or, for status, unknown) 4. */
#define CTL_EXIT_FAILURE 1
#define CTL_EXIT_USAGE 2
#define CTL_EXIT_NOT_RUNNING 3
#define CTL_EXIT_NO_PERMISSION 4

enum ctl_format { CTL_FORMAT_TEXT, CTL_FORMAT_JSON, CTL_FORMAT_CSV };

/* Options every command takes, before or after its name. */
struct ctl_globals {
    const char *socket;          /* -s, --socket; NULL: the default paths */
    bool json;                   /* --json, --format json */
    enum ctl_format format;      /* --format */
};

/* gllmctl's usage text: the commands and what they do. */
void ctl_usage(FILE *f);
/* Connects, printing why not and what to do about it; returns 0, 1 (error), 3 (daemon not
 * running) or 4 (no permission). Without socket_path it tries the default path, then the
 * system socket /run/gllm/gllmd.sock. */
int ctl_connect(const char *socket_path, gllm_client **c);
/* quiet: ctl_connect says nothing (a watch that already said it once). */
void ctl_connect_quiet(bool quiet);
/* Whether to colour stream: a terminal, NO_COLOR unset or empty, TERM not "dumb", and no
 * --no-color (ctl_color_disable). */
bool ctl_color(FILE *stream);
void ctl_color_disable(void);
/* Prints "gllmctl: " (red "error: " on a colour terminal) and the message on stderr. */
void ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parses a whole decimal number in [min, max]: 0, or -1 when s is not one. */
int ctl_parse_int(const char *s, long min, long max, long *out);
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
    bool json, decode, wide;
    int iters;
};
/* One line of progress on stderr, rewritten in place, when stderr is a terminal: done of
 * total steps, the one under way, and an estimate of what is left from the pace so far
 * (started: ctl_now_s() when the first began). done == total clears the line. */
void ctl_progress(int done, int total, const char *what, double started);
double ctl_now_s(void);
/* Parses bench's arguments (argv[0] is "bench"): 0, or 2 for a usage error. */
int ctl_bench_parse(int argc, char **argv, struct ctl_bench_opts *o);

/* The commands: each returns gllmctl's exit status. argv[0] is the command's name; the
 * global options are already taken out. */
int ctl_cmd_status(const struct ctl_globals *g, int argc, char **argv);
int ctl_cmd_attn(const struct ctl_globals *g, int argc, char **argv);
int ctl_cmd_metrics(const struct ctl_globals *g, int argc, char **argv);
int ctl_cmd_version(const struct ctl_globals *g, int argc, char **argv);
/* gllmctl --version: this program's and its library's versions, asking no daemon. */
int ctl_print_own_version(const struct ctl_globals *g);
int ctl_cmd_drain(const struct ctl_globals *g, int argc, char **argv);
int ctl_cmd_reload(const struct ctl_globals *g, int argc, char **argv);
int ctl_cmd_client(const struct ctl_globals *g, int argc, char **argv);
/* Prints s as one CSV field (quoted when it holds a comma, quote or line break). */
void ctl_csv_str(const char *s);
/* bench: standard prefill shapes; bench --decode: paged decode, device-resident. */
int ctl_cmd_bench(const char *socket_path, const struct ctl_bench_opts *o);
int ctl_cmd_bench_decode(const char *socket_path, const struct ctl_bench_opts *o);

#endif
