/* gllm_soak: gllmd under many clients and every job kind while a seeded schedule of faults
 * arrives, with every invariant counted; "N passed, M failed" last, non-zero on a failure.
 * Usage: gllm_soak --gllmd PATH [--seconds 120] [--seed N] [--clients 32] [--json FILE]
 *                  [--schedule T:KIND:ARG,...] */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "soak.h"

struct soak_shared *soak;

const char *const soak_job_names[SOAK_NJOBS] = {
#define SOAK_NAME_(n, s) s,
    SOAK_JOB_KINDS(SOAK_NAME_)
#undef SOAK_NAME_
};
const char *const soak_fault_names[SOAK_NFAULTS] = {
#define SOAK_NAME_(n, s) s,
    SOAK_FAULT_KINDS(SOAK_NAME_)
#undef SOAK_NAME_
};

uint64_t soak_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t soak_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void soak_pass(void)
{
    atomic_fetch_add(&soak->passed, 1);
}

void soak_fail(const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const uint64_t t = soak_now_ms() - atomic_load(&soak->start_ms);
    uint64_t none = 0;
    atomic_compare_exchange_strong(&soak->first_fail_ms, &none, t ? t : 1);
    atomic_fetch_add(&soak->failed, 1);
    const uint32_t i = atomic_fetch_add(&soak->nmsgs, 1);
    if (i < SOAK_MAX_MSGS)
        snprintf(soak->msgs[i], sizeof soak->msgs[i], "%.3f s: %s", (double)t / 1000, msg);
    fprintf(stderr, "gllm_soak: FAIL at %.3f s (pid %d): %s\n", (double)t / 1000, (int)getpid(),
            msg);
}

/* What a job may answer while faults happen (docs/hardening.md): its device lost or hung
 * (the reset), gllmd draining or gone, a limit reached. */
bool soak_code_documented(int code)
{
    return code == GLLM_EDEVLOST || code == GLLM_EJOBTIMEOUT || code == GLLM_ESHUTDOWN ||
           code == GLLM_EDISCONNECTED || code == GLLM_EBUSY || code == GLLM_EQUOTA ||
           code == GLLM_EDEVMEM;
}

void soak_count_code(int code)
{
    const int i = code <= -1000 && code > -1064 ? -code - 1000 : 63;
    atomic_fetch_add(&soak->by_code[i], 1);
}

/* ---- gllmd measured while quiet ---- */

struct measure {
    int fds, threads;
    long rss_kib;
    uint64_t dev_used;
};
static struct measure baseline;

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

/* Polls status until nothing of any client is left (one connection: the asking one). */
static int wait_quiet(const char *sock, int ms, gllm_status *st, uint64_t *dev_used)
{
    int r = 0;
    for (int waited = 0; waited <= ms; waited += 20) {
        r = soak_status(sock, st, dev_used);
        if (r == 0 && st->clients <= 1 && !st->arenas && !st->dtensors && !st->jobs_inflight &&
            !st->bytes_mapped && !st->device_bytes)
            return 0;
        sleep_ms(20);
    }
    return r < 0 ? r : -EBUSY;
}

/* A job of every memory kind once, so that the pools and threads gllmd makes on first use
 * are there before the baseline is taken. */
static void warm_up(const char *sock)
{
    gllm_client *c;
    if (gllm_connect(sock, &c) < 0)
        return;
    gllm_memory *a = NULL, *d = NULL, *s = NULL;
    if (gllm_arena_create(c, 1 << 20, &a) == 0) {
        memset(gllm_memory_data(a), 0, 1 << 20);
        gllm_attention_params p = {.size = sizeof p};
        const int64_t shape[4] = {1, 1, 16, 32};
        gllm_tensor_init(a, 0, GLLM_DTYPE_F32, 4, shape, &p.q);
        gllm_tensor_init(a, 8192, GLLM_DTYPE_F32, 4, shape, &p.k);
        gllm_tensor_init(a, 16384, GLLM_DTYPE_F32, 4, shape, &p.v);
        gllm_tensor_init(a, 24576, GLLM_DTYPE_F32, 4, shape, &p.out);
        gllm_attention(c, &p, NULL);
        if (gllm_dtensor_create(c, 65536, 0, &d) == 0) {
            gllm_memory_copy(c, d, 0, a, 0, 65536);
            gllm_memory_release(d);
        }
        if (gllm_memory_create_shared(c, 65536, 0, &s) == 0)
            gllm_memory_release(s);
        gllm_memory_release(a);
    }
    gllm_disconnect(c);
}

static struct measure measure_now(const struct soak_daemon *d, uint64_t dev_used)
{
    return (struct measure){soak_proc_fds(d->pid), soak_proc_threads(d->pid),
                            soak_proc_rss_kib(d->pid), dev_used};
}

int soak_daemon_ready(struct soak_daemon *d)
{
    warm_up(d->socket);
    gllm_status st;
    uint64_t used = 0;
    if (wait_quiet(d->socket, 10000, &st, &used) < 0)
        return -EBUSY;
    sleep_ms(50);               /* the status connection's close reaches gllmd's loop */
    baseline = measure_now(d, used);
    return 0;
}

/* ---- clients ---- */

static uint64_t spawns[SOAK_MAX_CLIENTS];

static void spawn_client(int i, uint64_t seed, const char *sock)
{
    const uint64_t s = seed ^ ((uint64_t)(i + 1) << 40) ^ (spawns[i]++ * 0x9e3779b97f4a7c15ull);
    atomic_store(&soak->slot[i].killed, 0);
    atomic_store(&soak->slot[i].state, SOAK_IDLE);
    pid_t pid = fork();
    if (pid == 0)
        soak_worker_main(i, s, sock);
    atomic_store(&soak->slot[i].pid, pid > 0 ? pid : 0);
}

static int slot_of(pid_t pid, int clients)
{
    for (int i = 0; i < clients; i++)
        if (atomic_load(&soak->slot[i].pid) == pid)
            return i;
    return -1;
}

/* Children that ended: clients (killed ones started again), actors, and gllmd itself. */
static void reap(struct soak_daemon *d, const char *gllmd, int clients, uint64_t seed, bool respawn)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        if (pid == d->pid) {
            d->pid = 0;
            soak_fail("gllmd died untold: status %d", WIFEXITED(st) ? WEXITSTATUS(st)
                                                                    : 128 + WTERMSIG(st));
            atomic_store(&soak->hold, 1);
            if (soak_daemon_start(d, gllmd) < 0 || soak_daemon_ready(d) < 0)
                soak_fail("gllmd could not be started again");
            atomic_store(&soak->hold, 0);
            continue;
        }
        int i = slot_of(pid, clients);
        if (i >= 0) {
            const bool killed = atomic_load(&soak->slot[i].killed);
            atomic_store(&soak->slot[i].pid, 0);
            if (!killed && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
                soak_fail("client %d ended by itself with status %d", i, st);
            if (respawn && !atomic_load(&soak->stop))
                spawn_client(i, seed, d->socket);
            continue;
        }
        soak_actor_reaped(pid, st);
    }
}

/* ---- the end ---- */

/* What gllmd's RSS may grow by over the run: as test_abuse's bound, or, when this build is
 * sanitized (and so its gllmd-fault), what AddressSanitizer's quarantine of freed memory
 * holds on top (256 MiB by default). */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_GROWTH_KIB (512 * 1024)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSS_GROWTH_KIB (512 * 1024)
#endif
#endif
#ifndef RSS_GROWTH_KIB
#define RSS_GROWTH_KIB (64 * 1024)
#endif

static void check_end(struct soak_daemon *d, struct measure *end)
{
    gllm_status st;
    uint64_t used = 0;
    int r = wait_quiet(d->socket, 30000, &st, &used);
    if (r < 0)
        soak_fail("after the clients left gllmd still held %u clients, %u arenas, %u device "
                  "tensors, %llu jobs, %llu bytes mapped (%s)", st.clients - 1, st.arenas,
                  st.dtensors, (unsigned long long)st.jobs_inflight,
                  (unsigned long long)st.bytes_mapped, gllm_error_name(r));
    else
        soak_pass();
    /* The fds of the status connections close on gllmd's loop a moment later. */
    for (int i = 0; i < 500 && soak_proc_fds(d->pid) > baseline.fds; i++)
        sleep_ms(20);
    *end = measure_now(d, used);
    if (end->fds > baseline.fds)
        soak_fail("gllmd holds %d fds, %d when it started", end->fds, baseline.fds);
    else
        soak_pass();
    if (end->threads > baseline.threads)
        soak_fail("gllmd runs %d threads, %d when it started", end->threads, baseline.threads);
    else
        soak_pass();
    if (end->rss_kib > baseline.rss_kib + RSS_GROWTH_KIB)
        soak_fail("gllmd's RSS grew from %ld to %ld KiB", baseline.rss_kib, end->rss_kib);
    else
        soak_pass();
    if (end->dev_used > baseline.dev_used)
        soak_fail("device 0 has %llu bytes in use, %llu when gllmd started",
                  (unsigned long long)end->dev_used, (unsigned long long)baseline.dev_used);
    else
        soak_pass();
}

static uint64_t sum(const _Atomic uint64_t *a, int n)
{
    uint64_t s = 0;
    for (int i = 0; i < n; i++)
        s += atomic_load(&a[i]);
    return s;
}

static void write_json(const char *path, const struct soak_opts *o, const struct measure *end,
                       double wall_s)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gllm_soak: %s: %s\n", path, strerror(errno));
        return;
    }
    struct utsname u;
    uname(&u);
    fprintf(f, "{\n  \"seed\": %llu,\n  \"seconds\": %d,\n  \"wall_s\": %.1f,\n  \"clients\": %d,\n"
               "  \"kernel\": \"%s %s\",\n  \"cpus\": %ld,\n  \"jobs\": {",
            (unsigned long long)o->seed, o->seconds, wall_s, o->clients, u.sysname, u.release,
            sysconf(_SC_NPROCESSORS_ONLN));
    for (int k = 0; k < SOAK_NJOBS; k++)
        fprintf(f, "%s\n    \"%s\": {\"submitted\": %llu, \"ok\": %llu, \"documented_failures\": %llu}",
                k ? "," : "", soak_job_names[k], (unsigned long long)atomic_load(&soak->submitted[k]),
                (unsigned long long)atomic_load(&soak->ok[k]),
                (unsigned long long)atomic_load(&soak->failed_ok[k]));
    fprintf(f, "\n  },\n  \"documented_codes\": {");
    bool first = true;
    for (int i = 0; i < 64; i++)
        if (atomic_load(&soak->by_code[i])) {
            fprintf(f, "%s\n    \"%s\": %llu", first ? "" : ",", i == 63 ? "other" : gllm_error_name(-1000 - i),
                    (unsigned long long)atomic_load(&soak->by_code[i]));
            first = false;
        }
    fprintf(f, "\n  },\n  \"faults\": {");
    for (int k = 0; k < SOAK_NFAULTS; k++)
        fprintf(f, "%s\n    \"%s\": %llu", k ? "," : "", soak_fault_names[k],
                (unsigned long long)atomic_load(&soak->faults[k]));
    fprintf(f, "\n  },\n  \"reconnects\": %llu,\n  \"gllmd_end_vs_start\": {\"fds\": [%d, %d], "
               "\"threads\": [%d, %d], \"rss_kib\": [%ld, %ld], \"device_bytes\": [%llu, %llu]},\n"
               "  \"invariants_passed\": %llu,\n  \"invariants_failed\": %llu\n}\n",
            (unsigned long long)atomic_load(&soak->reconnects), baseline.fds, end->fds,
            baseline.threads, end->threads, baseline.rss_kib, end->rss_kib,
            (unsigned long long)baseline.dev_used, (unsigned long long)end->dev_used,
            (unsigned long long)atomic_load(&soak->passed),
            (unsigned long long)atomic_load(&soak->failed));
    fclose(f);
}

static void usage(void)
{
    fprintf(stderr, "usage: gllm_soak --gllmd PATH [--seconds N] [--seed N] [--clients N] "
                    "[--json FILE] [--schedule T:KIND:ARG,...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct soak_opts o = {.seconds = 120, .clients = 32, .seed = 1};
    static const struct option longs[] = {
        {"gllmd", required_argument, NULL, 'g'},   {"seconds", required_argument, NULL, 's'},
        {"seed", required_argument, NULL, 'r'},    {"clients", required_argument, NULL, 'c'},
        {"json", required_argument, NULL, 'j'},    {"schedule", required_argument, NULL, 'S'},
        {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
        switch (ch) {
        case 'g': o.gllmd = optarg; break;
        case 's': o.seconds = atoi(optarg); break;
        case 'r': o.seed = strtoull(optarg, NULL, 0); break;
        case 'c': o.clients = atoi(optarg); break;
        case 'j': o.json = optarg; break;
        case 'S': o.schedule = optarg; break;
        default: usage();
        }
    }
    if (!o.gllmd || o.seconds < 5 || o.clients < 1 || o.clients > SOAK_MAX_CLIENTS)
        usage();
    signal(SIGPIPE, SIG_IGN);
    soak = mmap(NULL, sizeof *soak, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (soak == MAP_FAILED)
        return 1;
    static struct soak_event ev[SOAK_MAX_FAULTS];
    const int nev = o.schedule ? soak_schedule_parse(o.schedule, ev, SOAK_MAX_FAULTS)
                               : soak_schedule_make(o.seed, o.seconds, o.clients, ev, SOAK_MAX_FAULTS);
    if (nev < 0) {
        fprintf(stderr, "gllm_soak: cannot read the schedule\n");
        return 2;
    }
    printf("gllm_soak: seed %llu, %d s, %d clients, %d faults scheduled\n",
           (unsigned long long)o.seed, o.seconds, o.clients, nev);
    fflush(stdout);
    struct soak_daemon d = {0};
    atomic_store(&soak->start_ms, soak_now_ms());
    if (soak_daemon_start(&d, o.gllmd) < 0 || soak_daemon_ready(&d) < 0) {
        fprintf(stderr, "gllm_soak: cannot start %s\n", o.gllmd);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    const uint64_t t0 = soak_now_ms();
    atomic_store(&soak->start_ms, t0);
    for (int i = 0; i < o.clients; i++)
        spawn_client(i, o.seed, d.socket);
    int next = 0;
    while (soak_now_ms() - t0 < (uint64_t)o.seconds * 1000) {
        const uint64_t now = soak_now_ms() - t0;
        while (next < nev && ev[next].at_ms <= now) {
            if (d.pid > 0)
                soak_inject(&ev[next], &d, o.gllmd, o.clients);
            next++;
        }
        reap(&d, o.gllmd, o.clients, o.seed, true);
        sleep_ms(5);
    }
    /* The end: every client finishes its batch and leaves, the actors end. */
    atomic_store(&soak->stop, 1);
    atomic_store(&soak->hold, 0);
    const uint64_t stop_at = soak_now_ms();
    for (;;) {
        reap(&d, o.gllmd, o.clients, o.seed, false);
        int alive = soak_actors_running();
        for (int i = 0; i < o.clients; i++)
            alive += atomic_load(&soak->slot[i].pid) > 0;
        if (!alive)
            break;
        if (soak_now_ms() - stop_at > 60000) {
            for (int i = 0; i < o.clients; i++) {
                pid_t pid = atomic_load(&soak->slot[i].pid);
                if (pid > 0) {
                    soak_fail("client %d (pid %d) did not finish within 60 s of the end", i, (int)pid);
                    kill(pid, SIGKILL);
                    waitpid(pid, NULL, 0);
                    atomic_store(&soak->slot[i].pid, 0);
                }
            }
            soak_actors_kill();
            break;
        }
        sleep_ms(10);
    }
    struct measure end = baseline;
    if (d.pid > 0)
        check_end(&d, &end);
    const int st = soak_daemon_stop(&d, 20000);
    if (st != 0)
        soak_fail("gllmd's last SIGTERM: %s %d", st == -ETIMEDOUT ? "no exit in 20 s" : "status", st);
    else
        soak_pass();
    if (d.pid > 0) {
        kill(d.pid, SIGKILL);
        waitpid(d.pid, NULL, 0);
    }
    char log[128];
    snprintf(log, sizeof log, "%s/gllmd.log", d.dir);
    if (atomic_load(&soak->failed)) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "tail -n 40 %s >&2", log);
        fprintf(stderr, "gllm_soak: the end of gllmd's log:\n");
        if (system(cmd) != 0)
            fprintf(stderr, "gllm_soak: no log\n");
    }
    if (atomic_load(&soak->failed)) {
        fprintf(stderr, "gllm_soak: gllmd's whole log: %s\n", log);
    } else {
        unlink(log);
        unlink(d.conf);
        rmdir(d.dir);
    }
    const double wall = (double)(soak_now_ms() - t0) / 1000;

    printf("jobs (submitted / ok / documented failures):\n");
    for (int k = 0; k < SOAK_NJOBS; k++)
        printf("  %-14s %8llu %8llu %8llu\n", soak_job_names[k],
               (unsigned long long)atomic_load(&soak->submitted[k]),
               (unsigned long long)atomic_load(&soak->ok[k]),
               (unsigned long long)atomic_load(&soak->failed_ok[k]));
    printf("  %-14s %8llu %8llu\n", "all", (unsigned long long)sum(soak->submitted, SOAK_NJOBS),
           (unsigned long long)sum(soak->ok, SOAK_NJOBS));
    printf("documented failures by code:");
    for (int i = 0; i < 64; i++)
        if (atomic_load(&soak->by_code[i]))
            printf(" %s %llu", i == 63 ? "other" : gllm_error_name(-1000 - i),
                   (unsigned long long)atomic_load(&soak->by_code[i]));
    printf("\nfaults injected:");
    for (int k = 0; k < SOAK_NFAULTS; k++)
        printf(" %s %llu", soak_fault_names[k], (unsigned long long)atomic_load(&soak->faults[k]));
    printf("\nclients reconnected %llu times; gllmd at the end against its start: %d/%d fds, "
           "%d/%d threads, %ld/%ld KiB RSS, %llu/%llu device bytes; %.1f s\n",
           (unsigned long long)atomic_load(&soak->reconnects), end.fds, baseline.fds, end.threads,
           baseline.threads, end.rss_kib, baseline.rss_kib, (unsigned long long)end.dev_used,
           (unsigned long long)baseline.dev_used, wall);
    if (o.json)
        write_json(o.json, &o, &end, wall);
    const uint64_t failed = atomic_load(&soak->failed);
    if (failed) {
        const uint32_t n = atomic_load(&soak->nmsgs);
        printf("failures (the first %u):\n", n < SOAK_MAX_MSGS ? n : SOAK_MAX_MSGS);
        for (uint32_t i = 0; i < n && i < SOAK_MAX_MSGS; i++)
            printf("  %s\n", soak->msgs[i]);
        /* The faults up to the first failure (and a second after): the schedule to replay. */
        const uint64_t upto = atomic_load(&soak->first_fail_ms) + 1000;
        int k = 0;
        while (k < nev && ev[k].at_ms <= upto)
            k++;
        static char sched[SOAK_MAX_FAULTS * 32];
        soak_schedule_print(ev, k, sched, sizeof sched);
        printf("replay: gllm_soak --gllmd %s --seed %llu --clients %d --seconds %d --schedule '%s'\n",
               o.gllmd, (unsigned long long)o.seed, o.clients,
               (int)(upto / 1000) + 5 > o.seconds ? o.seconds : (int)(upto / 1000) + 5, sched);
    }
    printf("%llu passed, %llu failed\n", (unsigned long long)atomic_load(&soak->passed),
           (unsigned long long)failed);
    return failed ? 1 : 0;
}
