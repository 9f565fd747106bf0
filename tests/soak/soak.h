/* The chaos soak (gllm_soak): what its processes share, and the parts' entries. */
#ifndef GLLM_SOAK_H
#define GLLM_SOAK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gllm/gllm.h"

#define SOAK_MAX_CLIENTS 64
#define SOAK_MAX_FAULTS 4096
#define SOAK_MAX_MSGS 32

/* The job kinds a client mixes (soak_jobs.c). */
#define SOAK_JOB_KINDS(X)                                                                  \
    X(DENSE, "dense")          /* q, k, v, out in an arena */                              \
    X(DEVICE, "device")        /* k and v copied into device tensors */                    \
    X(SHARED, "shared")        /* k and v in memory gllmd exports (memfd on the CPU) */    \
    X(IMPORT, "import")        /* k and v in the client's own sealed memfd, imported */    \
    X(FRESH, "fresh_arena")    /* in an arena registered for this batch alone */           \
    X(DECODE, "paged_decode")  /* decode over a paged cache in an arena */                 \
    X(APPEND, "kv_append")     /* new tokens into a paged cache, read back */              \
    X(COPY, "copy")            /* arena -> device tensor -> arena */                       \
    X(ORDERED, "ordered")      /* a wait the client raises, and a signal */                \
    X(UNMET, "unmet_wait")     /* a wait nobody raises: WAITTIMEOUT */
enum soak_job_kind {
#define SOAK_ENUM_(n, s) SOAK_JOB_##n,
    SOAK_JOB_KINDS(SOAK_ENUM_)
#undef SOAK_ENUM_
    SOAK_NJOBS
};

/* The faults the schedule injects (soak_actors.c). */
#define SOAK_FAULT_KINDS(X)                                                                \
    X(KILL_CLIENT, "kill_client")          /* SIGKILL a client mid-job */                  \
    X(KILL_WAITING, "kill_waiting")        /* SIGKILL a client blocked in a wait */        \
    X(STALL, "stall_client")               /* a client stops reading for a while */        \
    X(KILL_DEVPROC, "kill_device_process") /* SIGKILL gllmd's device process */            \
    X(TRAP, "fault_trap")                  /* debug_fault trap: DEVLOST, a reset */        \
    X(OOB, "fault_oob")                    /* debug_fault oob */                           \
    X(SPIN, "fault_spin")                  /* a hung job: the watchdog */                  \
    X(HUP, "sighup")                       /* reload */                                    \
    X(HANDLES, "handles")                  /* memory released, fds closed, truncation */   \
    X(FLOOD, "bad_packets")                /* garbage and bad requests, ids checked */     \
    X(PRESSURE, "limits")                  /* quotas and in-flight limits hit */           \
    X(RESTART, "sigterm_restart")          /* drain, exit 0, start again */
enum soak_fault_kind {
#define SOAK_ENUM_(n, s) SOAK_FAULT_##n,
    SOAK_FAULT_KINDS(SOAK_ENUM_)
#undef SOAK_ENUM_
    SOAK_NFAULTS
};

struct soak_event {
    uint32_t at_ms;            /* from the start */
    uint8_t kind;              /* enum soak_fault */
    uint32_t arg;              /* which client, how long, ... (from the seed) */
};

/* A client's slot: its process and what the actors may ask of it. */
enum soak_state { SOAK_IDLE, SOAK_BUSY, SOAK_WAITING, SOAK_STALLED };
struct soak_slot {
    _Atomic pid_t pid;
    _Atomic int state;
    _Atomic uint32_t stall_ms;       /* asked: stop reading this long */
    _Atomic uint32_t handles;        /* asked: release memory jobs use (soak_fault HANDLES) */
    _Atomic uint64_t heartbeat_ms;   /* last time it made progress */
    _Atomic int killed;              /* the parent SIGKILLed it: its end is expected */
};

/* In a shared mapping, written by every process of the run. */
struct soak_shared {
    _Atomic int stop;                /* clients: finish the batch, leave */
    _Atomic int hold;                /* clients: do not connect yet (gllmd being measured) */
    _Atomic uint64_t start_ms;
    _Atomic uint32_t daemon_gen;     /* bumped by each restart */
    struct soak_slot slot[SOAK_MAX_CLIENTS];
    _Atomic uint64_t submitted[SOAK_NJOBS], ok[SOAK_NJOBS], failed_ok[SOAK_NJOBS];
    _Atomic uint64_t by_code[64];    /* documented failures, by -code - 1000 (0: other) */
    _Atomic uint64_t faults[SOAK_NFAULTS];
    _Atomic uint64_t reconnects, abandoned;
    _Atomic uint64_t passed, failed; /* invariant checks */
    _Atomic uint32_t nmsgs;
    char msgs[SOAK_MAX_MSGS][256];
    _Atomic uint64_t first_fail_ms;
};

struct soak_opts {
    int seconds, clients;
    uint64_t seed;
    const char *gllmd;               /* gllmd-fault */
    const char *json;                /* figures written here (NULL: not) */
    const char *schedule;            /* replay these events instead of the seed's */
    bool verbose;
};

extern struct soak_shared *soak;
extern const char *const soak_job_names[SOAK_NJOBS];
extern const char *const soak_fault_names[SOAK_NFAULTS];

uint64_t soak_now_ms(void);          /* monotonic */
uint64_t soak_rng(uint64_t *s);      /* splitmix64 */
/* An invariant held (counted) or did not: counted, and the first lines kept for the end. */
void soak_pass(void);
void soak_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A job's failure code that the documented behaviour allows while faults happen. */
bool soak_code_documented(int code);
void soak_count_code(int code);

/* ---- gllmd (soak_daemon.c) ---- */
struct soak_daemon {
    pid_t pid;
    char dir[64], socket[108], conf[128];
};
int soak_daemon_start(struct soak_daemon *d, const char *gllmd);
/* SIGTERM and wait at most timeout_ms: its exit status, 128 + signal, or -ETIMEDOUT. */
int soak_daemon_stop(struct soak_daemon *d, int timeout_ms);
/* Whether it ended on its own (its status in *status). */
bool soak_daemon_died(struct soak_daemon *d, int *status);
int soak_proc_fds(pid_t pid);
int soak_proc_threads(pid_t pid);
long soak_proc_rss_kib(pid_t pid);
pid_t soak_proc_child(pid_t pid);    /* a device process, or -1 */
/* One status call on a fresh connection: 0 or the error. */
int soak_status(const char *sock, gllm_status *st, uint64_t *dev_used);
/* The device resets gllmd has made since it started (0 when it cannot be asked). */
uint64_t soak_resets(const char *sock);

/* ---- a client process (soak_worker.c) ---- */
void soak_worker_main(int index, uint64_t seed, const char *sock);

/* ---- the faults (soak_actors.c) ---- */
int soak_schedule_make(uint64_t seed, int seconds, int clients, struct soak_event *ev, int max);
int soak_schedule_parse(const char *text, struct soak_event *ev, int max);
void soak_schedule_print(const struct soak_event *ev, int n, char *buf, size_t len);
/* Injects ev from the parent's loop; a restart also measures the new gllmd (soak_main.c's
 * soak_daemon_ready). Actors that need a connection run in processes of their own. */
void soak_inject(const struct soak_event *ev, struct soak_daemon *d, const char *gllmd,
                 int clients);
/* Whether pid was an actor's (reaped by the parent's loop); the actors still running. */
bool soak_actor_reaped(pid_t pid, int status);
int soak_actors_running(void);
void soak_actors_kill(void);
/* soak_main.c: a new gllmd warmed up and measured while the clients wait (hold). */
int soak_daemon_ready(struct soak_daemon *d);

#endif
