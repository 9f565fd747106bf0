/* libFuzzer harness for the daemon's request path (transport, RPC channel, methods, jobs):
 * one client on a real server (CPU backend) fed arbitrary packets through a socketpair,
 * then disconnected.
 *
 * Input: a sequence of records [flags:1][len:2 little-endian][len bytes]. flags bit 0
 * attaches a sealed 64 KiB memfd to the packet, bit 1 an unsealed one, bit 2 a pipe, bit 3
 * a sealed memfd of the ring's size, which the harness keeps mapped as the client's side
 * of the ring (proto/ring.h). Bit 4: the record is not sent but put in that ring's next
 * request slot (its first 4 bytes are the slot's `after`), bit 5: its first 12 bytes
 * overwrite the client's ring counters (reply_tail, polling, request_head). Bit 6: the
 * record is not sent but written into the last sealed 64 KiB memfd (the client's arena),
 * at the offset in its first 2 bytes (little-endian), so tables and tensors hold what the
 * fuzzer chose. Unless the first record has flags bit 7, a valid hello goes first, so the
 * fuzzer spends its time past the handshake. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "ring.h"
#include "lifecycle.h"
#include "rpc.h"
#include "scheduler.h"
#include "testutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct server *srv;
static uv_loop_t loop;

static void setup(void)
{
    static struct backend *be;
    struct backend_config bcfg = {.threads = 1};
    char why[256];
    if (backend_select("cpu", &bcfg, &be, why, sizeof why) < 0)
        abort();
    log_init(LOG_CRIT);          /* the harness is about crashes, not log lines */
    uv_loop_init(&loop);
    srv = calloc(1, sizeof *srv);
    struct config cfg;
    config_defaults(&cfg);
    char path[64];
    snprintf(path, sizeof path, "/tmp/gllm-fuzz-%d.sock", (int)getpid());
    if (!srv || server_init(srv, &loop, be, &cfg, path, -1) < 0)
        abort();
    unlink(path);                /* never connected to: the pair below is the client */
}

static struct gllm_ring *ring;   /* the last ring-sized memfd offered, as the client maps it */
static uint32_t ring_head;
static uint8_t *arena;           /* the last sealed 64 KiB memfd offered, as the client maps it */

static void send_packet(int fd, const uint8_t *p, size_t n, int flags)
{
    int pass = -1;
    if (flags & 8) {
        pass = make_memfd(GLLM_RING_BYTES, F_SEAL_SHRINK);
        if (pass >= 0) {
            if (ring)
                munmap(ring, GLLM_RING_BYTES);
            ring = mmap(NULL, GLLM_RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, pass, 0);
            if (ring == MAP_FAILED)
                ring = NULL;
            ring_head = 0;
        }
    } else if (flags & 1 || flags & 2) {
        pass = make_memfd(65536, (flags & 1) ? F_SEAL_SHRINK : 0);
        if (pass >= 0 && (flags & 1)) {
            if (arena)
                munmap(arena, 65536);
            arena = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, pass, 0);
            if (arena == MAP_FAILED)
                arena = NULL;
        }
    } else if (flags & 4) {
        int pp[2];
        if (pipe2(pp, O_CLOEXEC) == 0) {
            pass = pp[0];
            close(pp[1]);
        }
    }
    send_packet_fd(fd, p, n, pass, MSG_DONTWAIT);
    if (pass >= 0)
        close(pass);
}

/* Turns the loop until the daemon has nothing left to do for this client. */
static void settle(int peer)
{
    char buf[65536];
    for (int i = 0; i < 10000; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        while (recv(peer, buf, sizeof buf, MSG_DONTWAIT) > 0)
            ;
        if (srv->stats.jobs_inflight == 0 && sched_unsettled(srv->sched) == 0 && i > 4)
            break;
        usleep(50);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv)
        setup();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
        return 0;
    if (rpc_accept(srv, sv[0]) < 0) {
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    if (!(size > 0 && (data[0] & 0x80))) {
        static const uint8_t hello[] = {0x94, 0x00, 0x00, 0xa5, 'h', 'e', 'l', 'l', 'o',
                                        0x81, 0xa7, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x01};
        send_packet(sv[1], hello, sizeof hello, 0);
    }
    size_t off = 0;
    int sent = 0;
    while (off + 3 <= size && sent < 64) {
        int flags = data[off];
        size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        off += 3;
        if (len > size - off)
            len = size - off;
        if ((flags & 16) && ring && len >= 4) {
            struct gllm_ring_request_slot *slot = &ring->request[ring_head % GLLM_RING_REQUEST_SLOTS];
            memcpy(&slot->after, data + off, 4);
            slot->len = (uint32_t)(len - 4 < sizeof slot->data ? len - 4 : sizeof slot->data);
            memcpy(slot->data, data + off + 4, slot->len);
            atomic_store(&ring->request_head, ++ring_head);
        } else if ((flags & 64) && arena && len >= 2) {
            size_t at = (size_t)data[off] | (size_t)data[off + 1] << 8, n = len - 2;
            memcpy(arena + at, data + off + 2, n < 65536 - at ? n : 65536 - at);
        } else if ((flags & 32) && ring && len >= 12) {
            uint32_t v[3];
            memcpy(v, data + off, sizeof v);
            atomic_store(&ring->reply_tail, v[0]);
            atomic_store(&ring->polling, v[1]);
            atomic_store(&ring->request_head, v[2]);
        } else if (len > 0) {
            send_packet(sv[1], data + off, len, flags);
        }
        off += len;
        sent++;
        if (sent % 8 == 0)
            settle(sv[1]);
    }
    settle(sv[1]);
    close(sv[1]);                /* the client goes away: everything it held must go */
    if (ring) {
        munmap(ring, GLLM_RING_BYTES);
        ring = NULL;
    }
    if (arena) {
        munmap(arena, 65536);
        arena = NULL;
    }
    settle(-1);
    for (int i = 0; i < 1000 && (srv->channels || sched_unsettled(srv->sched)); i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(50);
    }
    if (srv->stats.regions.arenas != 0 || srv->stats.regions.bytes_mapped != 0)
        __builtin_trap();        /* a disconnected client left memory mapped */
    return 0;
}
