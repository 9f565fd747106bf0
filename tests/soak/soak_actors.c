/* The soak's faults: a seeded schedule of them, and each one's injection, with what the
 * fault itself must show (a fault's reply codes, the ids of answers to bad packets, the
 * limits' codes, a drain that ends with status 0). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"
#include "soak.h"
#include "testutil.h"

/* ---- the schedule ---- */

static const int fault_weights[SOAK_NFAULTS] = {
    [SOAK_FAULT_KILL_CLIENT] = 3, [SOAK_FAULT_KILL_WAITING] = 2, [SOAK_FAULT_STALL] = 2,
    [SOAK_FAULT_KILL_DEVPROC] = 2, [SOAK_FAULT_TRAP] = 1, [SOAK_FAULT_OOB] = 1,
    [SOAK_FAULT_SPIN] = 1, [SOAK_FAULT_HUP] = 2, [SOAK_FAULT_HANDLES] = 2,
    [SOAK_FAULT_FLOOD] = 2, [SOAK_FAULT_PRESSURE] = 1, [SOAK_FAULT_RESTART] = 0,
};
/* Faults every 0.2-1.4 s; a drain and restart every 25-40 s, none in the first 8; the last
 * 4 s are quiet, so that the run ends on a settled gllmd. */
#define GAP_MIN_MS 200
#define GAP_SPAN_MS 1200
#define QUIET_END_MS 4000

int soak_schedule_make(uint64_t seed, int seconds, int clients, struct soak_event *ev, int max)
{
    (void)clients;
    uint64_t rng = seed ^ 0x5eed5eed5eedull;
    int total = 0;
    for (int k = 0; k < SOAK_NFAULTS; k++)
        total += fault_weights[k];
    const uint64_t end = (uint64_t)seconds * 1000 > QUIET_END_MS ? (uint64_t)seconds * 1000 - QUIET_END_MS : 0;
    uint64_t t = 1000, next_restart = 8000 + soak_rng(&rng) % 17000;
    int n = 0;
    while (n < max) {
        t += GAP_MIN_MS + soak_rng(&rng) % GAP_SPAN_MS;
        if (t >= end)
            break;
        int kind;
        if (t >= next_restart) {
            kind = SOAK_FAULT_RESTART;
            next_restart = t + 25000 + soak_rng(&rng) % 15000;
        } else {
            int x = (int)(soak_rng(&rng) % (uint64_t)total);
            for (kind = 0; kind < SOAK_NFAULTS && (x -= fault_weights[kind]) >= 0; kind++)
                ;
        }
        ev[n++] = (struct soak_event){.at_ms = (uint32_t)t, .kind = (uint8_t)kind,
                                      .arg = (uint32_t)soak_rng(&rng)};
    }
    return n;
}

int soak_schedule_parse(const char *text, struct soak_event *ev, int max)
{
    int n = 0;
    const char *s = text;
    while (*s && n < max) {
        char name[40];
        unsigned at, arg;
        int used = 0;
        if (sscanf(s, "%u:%39[a-z_]:%u%n", &at, name, &arg, &used) != 3)
            return -EINVAL;
        int kind = -1;
        for (int k = 0; k < SOAK_NFAULTS; k++)
            if (strcmp(name, soak_fault_names[k]) == 0)
                kind = k;
        if (kind < 0)
            return -EINVAL;
        ev[n++] = (struct soak_event){.at_ms = at, .kind = (uint8_t)kind, .arg = arg};
        s += used;
        if (*s == ',')
            s++;
    }
    return n;
}

void soak_schedule_print(const struct soak_event *ev, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%u:%s:%u", i ? "," : "", ev[i].at_ms,
                                 soak_fault_names[ev[i].kind], ev[i].arg);
}

/* ---- actors: short-lived processes for faults that talk to gllmd ---- */

#define MAX_ACTORS 64
static pid_t actors[MAX_ACTORS];

bool soak_actor_reaped(pid_t pid, int status)
{
    for (int i = 0; i < MAX_ACTORS; i++)
        if (actors[i] == pid) {
            actors[i] = 0;
            if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
                soak_fail("an actor (pid %d) ended with status %d", (int)pid, status);
            return true;
        }
    return false;
}

int soak_actors_running(void)
{
    int n = 0;
    for (int i = 0; i < MAX_ACTORS; i++)
        n += actors[i] > 0;
    return n;
}

void soak_actors_kill(void)
{
    for (int i = 0; i < MAX_ACTORS; i++)
        if (actors[i] > 0) {
            kill(actors[i], SIGKILL);
            waitpid(actors[i], NULL, 0);
            actors[i] = 0;
        }
}

/* Runs fn in a child; false when there is no room (the fault is skipped, not counted). */
static bool spawn_actor(void (*fn)(const char *sock, uint32_t arg), const char *sock, uint32_t arg)
{
    int slot = -1;
    for (int i = 0; i < MAX_ACTORS && slot < 0; i++)
        if (actors[i] == 0)
            slot = i;
    if (slot < 0)
        return false;
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        fn(sock, arg);
        _exit(0);
    }
    actors[slot] = pid;
    return true;
}

/* ---- raw protocol ---- */

static int soak_raw_open(const char *sock)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    struct timeval limit = {.tv_sec = 30};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    return fd;
}

/* One reply: 1 and its code, id (-1: nil) and message; 0 when the connection closed
 * (gllmd draining or gone); -ETIMEDOUT when none came in 30 s. */
static uint64_t last_arena;      /* the "arena" of the last result read, if any */

static int soak_raw_read(int fd, int *code, int64_t *id, char *msg, size_t len)
{
    static char rx[PROTO_MAX_MESSAGE];
    ssize_t n = recv(fd, rx, sizeof rx, 0);
    if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE)))
        return 0;
    if (n < 0)
        return errno == EAGAIN ? -ETIMEDOUT : -errno;
    struct proto_msg m;
    if (proto_decode(rx, (size_t)n, &m, NULL) != 0 || m.kind != PROTO_RESPONSE) {
        soak_fail("gllmd sent a packet that is not a response");
        return -EPROTO;
    }
    *code = m.error_code;
    *id = m.id == PROTO_NO_ID ? -1 : (int64_t)m.id;
    last_arena = 0;
    if (*code == 0)
        proto_get_u64(m.result, "arena", false, &last_arena);
    if (msg)
        snprintf(msg, len, "%s", m.error_message);
    proto_msg_free(&m);
    return 1;
}

static bool raw_send_buf(int fd, const void *p, size_t n, int pass_fd)
{
    return send_packet_fd(fd, p, n, pass_fd, 0) == (ssize_t)n;
}

/* A request and its reply, which must carry its id: 1 and the code, or 0 when gone. */
static int soak_raw_call(int fd, struct proto_buf *b, uint64_t id, int pass_fd, int *code)
{
    if (!raw_send_buf(fd, b->data, b->len, pass_fd))
        return 0;
    int64_t got;
    char msg[256];
    int r = soak_raw_read(fd, code, &got, msg, sizeof msg);
    if (r == -ETIMEDOUT)
        soak_fail("a raw request (id %llu) was not answered in 30 s", (unsigned long long)id);
    if (r == 1 && got != (int64_t)id) {
        soak_fail("request id %llu answered under id %lld", (unsigned long long)id, (long long)got);
        return 0;
    }
    return r;
}

static int soak_raw_hello(int fd)
{
    struct proto_buf *b = malloc(sizeof *b);
    proto_buf_init(b);
    proto_pack_request(&b->pk, 1, "hello");
    msgpack_pack_map(&b->pk, 1);
    proto_pack_kv_u64(&b->pk, "version", GLLM_PROTOCOL_VERSION);
    int code = -1, r = soak_raw_call(fd, b, 1, -1, &code);
    free(b);
    return r == 1 ? code : GLLM_EDISCONNECTED;
}

/* ---- the device faults: A arms one, its next job meets it ---- */

static void fault_actor(const char *sock, uint32_t arg)
{
    static const char *const kinds[] = {"trap", "oob", "spin"};
    const char *kind = kinds[arg % 3];
    int fd = soak_raw_open(sock);
    if (fd < 0 || soak_raw_hello(fd) != 0)
        _exit(0);                /* gllmd restarting: no fault this time */
    const size_t size = 4 * 2 * 64 * 64 * 4;
    int memfd = make_memfd(size, F_SEAL_SHRINK);
    struct proto_buf *b = malloc(sizeof *b);
    proto_buf_init(b);
    proto_pack_request(&b->pk, 2, "arena_register");
    msgpack_pack_map(&b->pk, 1);
    proto_pack_kv_u64(&b->pk, "size", size);
    int code = -1;
    if (soak_raw_call(fd, b, 2, memfd, &code) != 1 || code != 0)
        goto out;                /* refused while draining, or gone */
    const uint64_t arena = last_arena;
    const uint64_t resets_before = soak_resets(sock);
    proto_buf_init(b);
    proto_pack_request(&b->pk, 3, "debug_fault");
    msgpack_pack_map(&b->pk, 2);
    proto_pack_kv_str(&b->pk, "kind", kind);
    proto_pack_kv_u64(&b->pk, "device", 0);
    if (soak_raw_call(fd, b, 3, -1, &code) != 1)
        goto out;
    if (code != 0) {
        if (code != GLLM_ESHUTDOWN && code != GLLM_EDEVLOST)
            soak_fail("debug_fault %s: %s", kind, gllm_error_name(code));
        goto out;
    }
    struct proto_attention job = {0};
    struct proto_tensor *t[4] = {&job.q, &job.k, &job.v, &job.out};
    for (int i = 0; i < 4; i++) {
        *t[i] = (struct proto_tensor){.arena = (uint32_t)arena,
                                      .offset = (uint64_t)(i * 2 * 64 * 64 * 4),
                                      .dtype = GLLM_DTYPE_F32, .rank = 4, .shape = {1, 2, 64, 64}};
        proto_tensor_contiguous(t[i]);
    }
    proto_buf_init(b);
    proto_pack_request(&b->pk, 4, "attention");
    proto_pack_attention(&b->pk, &job);
    if (soak_raw_call(fd, b, 4, -1, &code) != 1)
        goto out;
    /* The faulting job fails with the fault's code; a drain may refuse it, and a device
     * lost to another fault first answers DEVLOST. */
    const int want = strcmp(kind, "spin") == 0 ? GLLM_EJOBTIMEOUT : GLLM_EDEVLOST;
    if (code == want || code == GLLM_ESHUTDOWN || code == GLLM_EDEVLOST)
        soak_pass();
    else if (code == 0 && soak_resets(sock) > resets_before)
        soak_pass();             /* another fault's reset came first and took the armed one */
    else
        soak_fail("a job meeting a %s fault answered %s, not %s", kind, gllm_error_name(code),
                  gllm_error_name(want));
out:
    free(b);
    close(memfd);
    close(fd);
}

/* ---- bad packets: each answered under the id gllmd could read, the connection kept ---- */

static size_t bad_packet(uint64_t *rng, uint64_t id, char *out, size_t cap)
{
    static const char *const methods[] = {"attention", "kv_append", "arena_release",
                                          "dtensor_free", "no_such_method", "status"};
    struct proto_buf *b = malloc(sizeof *b);
    proto_buf_init(b);
    const int how = (int)(soak_rng(rng) % 3);
    size_t n;
    if (how == 0) {              /* garbage that is no request's array */
        n = 1 + soak_rng(rng) % 200;
        for (size_t i = 0; i < n; i++)
            out[i] = (char)soak_rng(rng);
        if ((unsigned char)out[0] == 0x94)
            out[0] = 0x00;
        free(b);
        return n;
    }
    proto_pack_request(&b->pk, id, methods[soak_rng(rng) % 6]);
    const int keys = (int)(soak_rng(rng) % 5);
    msgpack_pack_map(&b->pk, (size_t)keys);
    static const char *const names[] = {"q", "k", "arena", "dtensor", "shape", "zz"};
    for (int i = 0; i < keys; i++) {
        if (soak_rng(rng) % 2)
            proto_pack_kv_u64(&b->pk, names[soak_rng(rng) % 6], soak_rng(rng) % 1000);
        else
            proto_pack_kv_str(&b->pk, names[soak_rng(rng) % 6], "x");
    }
    n = b->len < cap ? b->len : cap;
    memcpy(out, b->data, n);
    if (how == 2 && n > 1)       /* cut short */
        n = 1 + soak_rng(rng) % (n - 1);
    free(b);
    return n;
}

static void flood_actor(const char *sock, uint32_t arg)
{
    uint64_t rng = arg;
    int fd = soak_raw_open(sock);
    if (fd < 0 || soak_raw_hello(fd) != 0)
        _exit(0);
    const int count = 50 + (int)(arg % 250);
    char pkt[512];
    int answered = 0;
    for (int i = 0; i < count; i++) {
        const uint64_t id = 100 + (uint64_t)i;
        const size_t n = bad_packet(&rng, id, pkt, sizeof pkt);
        uint64_t readable;
        const int64_t want = proto_peek_id(pkt, n, &readable) == 0 ? (int64_t)readable : -1;
        if (!raw_send_buf(fd, pkt, n, -1))
            break;
        int code;
        int64_t got;
        int r = soak_raw_read(fd, &code, &got, NULL, 0);
        if (r == 0)
            break;               /* a drain closed it */
        if (r < 0) {
            soak_fail("bad packet %d of a flood: no answer (%s)", i, strerror(-r));
            break;
        }
        if (got != want) {
            soak_fail("a bad packet with id %lld was answered under id %lld", (long long)want,
                      (long long)got);
            break;
        }
        answered++;
    }
    /* Still served. */
    struct proto_buf *b = malloc(sizeof *b);
    proto_buf_init(b);
    proto_pack_request(&b->pk, 99999, "status");
    msgpack_pack_map(&b->pk, 0);
    int code = -1;
    if (soak_raw_call(fd, b, 99999, -1, &code) == 1) {
        if (code == 0)
            soak_pass();
        else if (code != GLLM_ESHUTDOWN)
            soak_fail("status after %d bad packets: %s", answered, gllm_error_name(code));
    }
    free(b);
    close(fd);
}

/* ---- a client that sends without ever reading, and holds on ---- */

static void deaf_actor(const char *sock, uint32_t arg)
{
    int fd = soak_raw_open(sock);
    if (fd < 0 || soak_raw_hello(fd) != 0)
        _exit(0);
    struct proto_buf *b = malloc(sizeof *b);
    for (uint64_t id = 10; id < 20000; id++) {
        proto_buf_init(b);
        proto_pack_request(&b->pk, id, "status");
        msgpack_pack_map(&b->pk, 0);
        if (send_packet_fd(fd, b->data, b->len, -1, MSG_DONTWAIT) != (ssize_t)b->len)
            break;               /* gllmd stopped reading us: its queue is full */
    }
    free(b);
    /* Longer than a drain may take, at times: the drain must close it. */
    const int hold_ms = 1000 + (int)(arg % 30000);
    for (int t = 0; t < hold_ms && !atomic_load(&soak->stop); t += 100)
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
    close(fd);
}

/* ---- limits: quotas and the in-flight bound hit, every job still answered ---- */

static void pressure_actor(const char *sock, uint32_t arg)
{
    (void)arg;
    gllm_client *c;
    if (gllm_connect(sock, &c) < 0)
        _exit(0);
    gllm_memory *big = NULL, *arenas[16] = {0};
    int r = gllm_dtensor_create(c, 32u << 20, 0, &big);
    if (r == GLLM_EQUOTA || r == GLLM_EDEVLOST || r == GLLM_ESHUTDOWN || r == GLLM_EDISCONNECTED)
        soak_pass();
    else
        soak_fail("32 MiB of device memory past a 16 MiB quota: %s", gllm_error_name(r));
    if (r == 0)
        gllm_memory_release(big);
    int made = 0;
    for (; made < 16; made++)
        if ((r = gllm_arena_create(c, 1u << 20, &arenas[made])) < 0)
            break;
    if (made == 8 && r == GLLM_EQUOTA)
        soak_pass();
    else if (r != GLLM_ESHUTDOWN && r != GLLM_EDISCONNECTED)
        soak_fail("arenas past max_arenas 8: %d made, then %s", made, gllm_error_name(r));
    /* Jobs past max_inflight (256): BUSY, or all taken; every taken one answered. */
    uint64_t ids[300];
    int taken = 0, busy = 0;
    if (made > 0) {
        gllm_attention_params p = {.size = sizeof p};
        const int64_t s[4] = {1, 1, 16, 32};
        gllm_tensor_init(arenas[0], 0, GLLM_DTYPE_F32, 4, s, &p.q);
        gllm_tensor_init(arenas[0], 8192, GLLM_DTYPE_F32, 4, s, &p.k);
        gllm_tensor_init(arenas[0], 16384, GLLM_DTYPE_F32, 4, s, &p.v);
        gllm_tensor_init(arenas[0], 24576, GLLM_DTYPE_F32, 4, s, &p.out);
        for (int i = 0; i < 300; i++) {
            r = gllm_attention_submit(c, &p, &ids[taken]);
            if (r == 0)
                taken++;
            else if (r == GLLM_EBUSY)
                busy++;
            else if (r == GLLM_ESHUTDOWN || r == GLLM_EDISCONNECTED)
                break;
            else {
                soak_fail("job %d of a burst: %s", i, gllm_error_name(r));
                break;
            }
        }
        for (int i = 0; i < taken; i++) {
            r = gllm_job_wait(c, ids[i], NULL);
            if (r != 0 && !soak_code_documented(r))
                soak_fail("a burst's job: %s", gllm_error_name(r));
        }
        soak_pass();
        for (int i = 0; i < busy; i++)
            soak_count_code(GLLM_EBUSY);
    }
    for (int i = 0; i < made; i++)
        gllm_memory_release(arenas[i]);
    gllm_disconnect(c);
}

/* ---- injection ---- */

static int pick_slot(int clients, uint32_t arg, int state)
{
    for (int k = 0; k < clients; k++) {
        int i = (int)((arg + (uint32_t)k) % (uint32_t)clients);
        if (atomic_load(&soak->slot[i].pid) > 0 && !atomic_load(&soak->slot[i].killed) &&
            (state < 0 || atomic_load(&soak->slot[i].state) == state))
            return i;
    }
    return -1;
}

static bool kill_slot(int i)
{
    if (i < 0)
        return false;
    const pid_t pid = atomic_load(&soak->slot[i].pid);
    atomic_store(&soak->slot[i].killed, 1);
    return kill(pid, SIGKILL) == 0;
}

void soak_inject(const struct soak_event *ev, struct soak_daemon *d, const char *gllmd,
                 int clients)
{
    bool done = false;
    switch (ev->kind) {
    case SOAK_FAULT_KILL_CLIENT:
        done = kill_slot(pick_slot(clients, ev->arg, -1));
        break;
    case SOAK_FAULT_KILL_WAITING:
        done = kill_slot(pick_slot(clients, ev->arg, SOAK_WAITING));
        break;
    case SOAK_FAULT_STALL:
        if (ev->arg % 2) {
            int i = pick_slot(clients, ev->arg, -1);
            if ((done = i >= 0))
                atomic_store(&soak->slot[i].stall_ms, 500 + ev->arg % 3000);
        } else {
            done = spawn_actor(deaf_actor, d->socket, ev->arg);
        }
        break;
    case SOAK_FAULT_KILL_DEVPROC: {
        pid_t child = soak_proc_child(d->pid);
        done = child > 0 && kill(child, SIGKILL) == 0;
        break;
    }
    case SOAK_FAULT_TRAP:
    case SOAK_FAULT_OOB:
    case SOAK_FAULT_SPIN:
        done = spawn_actor(fault_actor, d->socket,
                           (uint32_t)(ev->kind - SOAK_FAULT_TRAP) + 3 * (ev->arg / 3));
        break;
    case SOAK_FAULT_HUP:
        done = kill(d->pid, SIGHUP) == 0;
        break;
    case SOAK_FAULT_HANDLES: {
        int i = pick_slot(clients, ev->arg, -1);
        if ((done = i >= 0))
            atomic_store(&soak->slot[i].handles, 1);
        break;
    }
    case SOAK_FAULT_FLOOD:
        done = spawn_actor(flood_actor, d->socket, ev->arg);
        break;
    case SOAK_FAULT_PRESSURE:
        done = spawn_actor(pressure_actor, d->socket, ev->arg);
        break;
    case SOAK_FAULT_RESTART: {
        /* The drain answers what was accepted, closes the rest at its deadline (2 s), and
         * exits 0; clients that stopped reading must not hold it up. */
        const uint64_t t0 = soak_now_ms();
        const pid_t old = d->pid;
        atomic_store(&soak->hold, 1);
        int st = soak_daemon_stop(d, 20000);
        if (st == 0) {
            soak_pass();
        } else if (st == -ETIMEDOUT) {
            soak_fail("gllmd (pid %d) did not exit within 20 s of SIGTERM", (int)old);
            if (getenv("SOAK_GDB")) {
                char cmd[160];
                snprintf(cmd, sizeof cmd, "gdb -p %d -batch -ex 'thread apply all bt' >&2",
                         (int)old);
                if (system(cmd) != 0)
                    fprintf(stderr, "gllm_soak: gdb failed\n");
            }
            kill(old, SIGKILL);
            waitpid(old, NULL, 0);
            d->pid = 0;
        } else {
            soak_fail("gllmd's drain after SIGTERM ended with status %d", st);
        }
        if (soak_daemon_start(d, gllmd) < 0 || soak_daemon_ready(d) < 0) {
            soak_fail("gllmd could not be started again");
            break;
        }
        atomic_fetch_add(&soak->daemon_gen, 1);
        atomic_store(&soak->hold, 0);
        if (getenv("SOAK_VERBOSE"))
            fprintf(stderr, "gllm_soak: restart took %llu ms\n",
                    (unsigned long long)(soak_now_ms() - t0));
        done = true;
        break;
    }
    }
    if (done)
        atomic_fetch_add(&soak->faults[ev->kind], 1);
}
