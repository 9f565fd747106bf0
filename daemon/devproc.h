/* Device processes: each device's backend runs in a process of its own, which gllmd starts,
 * talks to (devproc_wire.h) and, after a fault that poisons the device's context, replaces,
 * while every connection stays up (docs/hardening.md, "Device processes"). */
#ifndef GLLMD_DEVPROC_H
#define GLLMD_DEVPROC_H

#include <stdbool.h>
#include <stddef.h>

#include "backend_api.h"

/* Opens name ("auto" or a backend's) in one device process per device: the first picks the
 * backend and says how many devices there are, the rest open the same backend on the others.
 * The backend returned forwards every entry and has a reset entry that replaces a device's
 * process. log_level: the processes' (syslog priority). why: one line on failure. */
int devproc_open(const char *name, const struct backend_config *cfg, int log_level,
                 struct backend **out, char *why, size_t len);

/* main() of a device process (gllmd --device-process ...), started by devproc_open. */
int devproc_child_main(int argc, char **argv);
/* Set by fault-injection builds (tests only) before either main: a device process then
 * honours GLLM_TEST_SLOW_MAP_MS and GLLM_TEST_SLOW_UNMAP_MS, which make mapping and unmapping
 * an arena of GLLM_TEST_SLOW_MAP_BYTES or more take that much longer, as pinning and
 * unpinning a large one do on a GPU's host, and GLLM_TEST_SLOW_HELLO_MS, which delays its
 * hello (a slow start, to be killed in). */
extern bool devproc_test_hooks;

#endif
