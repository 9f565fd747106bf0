/* One soak client, a process of its own: batches of seeded random jobs, each answered once
 * within its deadline and checked; it reconnects when gllmd restarts and stops reading when
 * the schedule says so. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "soak_jobs.h"

#define BATCH_MAX 8
/* A job of a live client is answered within this, whatever other clients or the faults do:
 * a watchdog (1 s in the soak's configuration), a reset (milliseconds on the CPU), a drain
 * (2 s) and a restart are each far below it. */
#define JOB_DEADLINE_MS 30000
#define CONNECT_FOR_MS 60000

static const int weights[SOAK_NJOBS] = {
    [SOAK_JOB_DENSE] = 4, [SOAK_JOB_DEVICE] = 2, [SOAK_JOB_SHARED] = 1, [SOAK_JOB_IMPORT] = 1,
    [SOAK_JOB_FRESH] = 1, [SOAK_JOB_DECODE] = 2, [SOAK_JOB_APPEND] = 1, [SOAK_JOB_COPY] = 1,
    [SOAK_JOB_ORDERED] = 1, [SOAK_JOB_UNMET] = 1,
};

static int pick_kind(uint64_t *rng)
{
    int total = 0;
    for (int k = 0; k < SOAK_NJOBS; k++)
        total += weights[k];
    int x = (int)(soak_rng(rng) % (uint64_t)total);
    for (int k = 0; k < SOAK_NJOBS; k++)
        if ((x -= weights[k]) < 0)
            return k;
    return SOAK_JOB_DENSE;
}

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

static void conn_drop(struct soak_conn *sc)
{
    if (sc->arena)
        gllm_memory_release(sc->arena);
    sc->arena = NULL;
    if (sc->c)
        gllm_disconnect(sc->c);
    sc->c = NULL;
}

/* Codes of a connection that is gone or going: connect again. */
static bool conn_lost(int code)
{
    return code == GLLM_EDISCONNECTED || code == GLLM_ESHUTDOWN;
}

static int conn_open(struct soak_conn *sc, const char *sock)
{
    const uint64_t until = soak_now_ms() + CONNECT_FOR_MS;
    int r = 0;
    while (!atomic_load(&soak->stop)) {
        if (atomic_load(&soak->hold)) {       /* a new gllmd being measured */
            sleep_ms(10);
            continue;
        }
        r = gllm_connect(sock, &sc->c);
        if (r == 0) {
            gllm_caps caps = GLLM_CAPS_INIT;
            gllm_client_caps(sc->c, &caps);
            sc->share_gran = strcmp(caps.share, "memfd") == 0 ? caps.share_granularity : 0;
            r = gllm_arena_create(sc->c, SOAK_ARENA_BYTES, &sc->arena);
            if (r == 0)
                return 0;
            conn_drop(sc);
        }
        /* Refused, gone or draining while gllmd restarts: documented, try again. */
        if (r != -ENOENT && r != -ECONNREFUSED && !conn_lost(r) && r != GLLM_EQUOTA) {
            soak_fail("connect: undocumented %s (%d)", gllm_error_name(r), r);
            return r;
        }
        if (soak_now_ms() > until) {
            soak_fail("a client could not connect for %d s (last: %s)", CONNECT_FOR_MS / 1000,
                      gllm_error_name(r));
            return r;
        }
        sleep_ms(20);
    }
    return -ECANCELED;
}

/* The job's reply within ms: its status, or 1 when none came. */
static int wait_for(struct soak_conn *sc, uint64_t id, int ms)
{
    const uint64_t until = soak_now_ms() + (uint64_t)ms;
    for (;;) {
        int r = gllm_job_poll(sc->c, id, NULL);
        if (r != -EAGAIN)
            return r;
        const uint64_t now = soak_now_ms();
        if (now >= until)
            return 1;
        struct pollfd p = {.fd = gllm_client_fd(sc->c), .events = POLLIN};
        poll(&p, 1, (int)(until - now < 100 ? until - now : 100));
    }
}

/* A failure of set-up or submission: documented ones are counted, the rest fail. */
static bool judge_call(struct soak_conn *sc, int kind, const char *what, int r)
{
    if (r == -ENOSPC || r == -EOPNOTSUPP)
        return true;
    if (soak_code_documented(r)) {
        soak_count_code(r);
        soak_pass();
        return true;
    }
    soak_fail("%s of a %s job: undocumented %s (%d): %s", what, soak_job_names[kind],
              gllm_error_name(r), r, gllm_client_last_error(sc->c));
    return false;
}

/* One batch; false when the connection must be made again. */
static bool run_batch(struct soak_conn *sc, struct soak_slot *slot)
{
    struct soak_job jobs[BATCH_MAX];
    int n = 1 + (int)(soak_rng(&sc->rng) % BATCH_MAX), made = 0;
    bool lost = false, draining = false;
    sc->used = 0;
    atomic_store(&slot->state, SOAK_BUSY);
    for (int i = 0; i < n && !lost; i++) {
        struct soak_job *j = &jobs[made++];
        const int kind = pick_kind(&sc->rng);
        int r = soak_job_prepare(sc, j, kind);
        if (kind == SOAK_JOB_COPY && j->sync_done) {
            atomic_fetch_add(&soak->submitted[kind], 1);
            if (r == 0)
                atomic_fetch_add(&soak->ok[kind], 1);
            else if (soak_code_documented(r))
                atomic_fetch_add(&soak->failed_ok[kind], 1);
        }
        if (r == 0 && kind != SOAK_JOB_COPY) {
            r = soak_job_submit(sc, j);
            if (r == 0) {
                atomic_fetch_add(&soak->submitted[kind], 1);
                soak_job_after_submit(sc, j);
            } else if (!judge_call(sc, kind, "submission", r)) {
                lost = true;
            }
        } else if (r < 0 && !judge_call(sc, kind, "set-up", r)) {
            lost = true;
        }
        if (r == -ENOSPC)
            n = i;                 /* the batch's arena is full */
        if (r == GLLM_EDISCONNECTED)
            lost = true;
        draining |= r == GLLM_ESHUTDOWN;
    }
    uint32_t stall = atomic_exchange(&slot->stall_ms, 0);
    if (stall) {
        /* Not reading: gllmd's replies wait in its queue and the socket meanwhile. */
        atomic_store(&slot->state, SOAK_STALLED);
        sleep_ms((int)stall);
    }
    if (atomic_exchange(&slot->handles, 0)) {
        for (int i = 0; i < made; i++)
            if (jobs[i].submitted)
                soak_job_sabotage(&jobs[i]);
    }
    atomic_store(&slot->state, SOAK_WAITING);
    for (int i = 0; i < made; i++) {
        struct soak_job *j = &jobs[i];
        if (j->submitted && !lost) {
            const int st = wait_for(sc, j->id, JOB_DEADLINE_MS);
            if (st == 1) {
                soak_fail("client %d: %s job id %llu not answered within %d s",
                          (int)(slot - soak->slot), soak_job_names[j->kind],
                          (unsigned long long)j->id, JOB_DEADLINE_MS / 1000);
                atomic_fetch_add(&soak->abandoned, 1);
                lost = true;
            } else {
                soak_job_check(sc, j, st);
                /* Exactly once: a claimed job is forgotten. (A job of a connection that
                 * ended stays DISCONNECTED, unclaimed.) */
                const int again = st == GLLM_EDISCONNECTED ? GLLM_ENOJOB
                                                           : gllm_job_poll(sc->c, j->id, NULL);
                if (again != GLLM_ENOJOB)
                    soak_fail("job id %llu answered again after its claim (%s)",
                              (unsigned long long)j->id, gllm_error_name(again));
                if (st == GLLM_EDISCONNECTED)
                    lost = true;
            }
        }
        soak_job_release(j);
    }
    atomic_store(&slot->state, SOAK_IDLE);
    atomic_store(&slot->heartbeat_ms, soak_now_ms());
    /* A draining gllmd answered what it had accepted: connect again (to its successor). */
    return !lost && !draining;
}

void soak_worker_main(int index, uint64_t seed, const char *sock)
{
    struct soak_slot *slot = &soak->slot[index];
    struct soak_conn sc = {.rng = seed};
    while (!atomic_load(&soak->stop)) {
        if (!sc.c) {
            if (conn_open(&sc, sock) < 0)
                break;
            if (soak_now_ms() > atomic_load(&soak->start_ms) + 1000)
                atomic_fetch_add(&soak->reconnects, 1);
        }
        if (!run_batch(&sc, slot))
            conn_drop(&sc);
    }
    conn_drop(&sc);
    _exit(0);
}
