/* libgllm-client's private header: the client handle, memory handles and the modules' calls. */
#ifndef GLLM_CLIENT_INTERNAL_H
#define GLLM_CLIENT_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto.h"
#include "ring.h"

/*
 * Who calls whom (never back): client.c -> info.c, memory.c, rpc.c, conn.c, calls.c;
 * ops.c -> jobs.c, memory.c, rpc.c; shared.c -> memory.c, cuda_map.c, rpc.c;
 * memory.c -> cuda_map.c, rpc.c; info.c -> memory.c, rpc.c; jobs.c -> conn.c, calls.c;
 * rpc.c -> conn.c, calls.c; conn.c -> calls.c; calls.c -> proto only.
 */

/* calls.c: a job submitted and not yet claimed. */
struct call_job {
    uint64_t id;                 /* 0: the slot is empty (ids start at 1) */
    bool done;
    gllm_job_result res;
    char *message;               /* the daemon's error message, when it sent one */
};

/* calls.c: the replies still owed to this client, found by request id. */
struct call_table {
    struct call_job *slots;      /* open addressing, linear probing, at most half full */
    size_t cap;                  /* a power of two, or 0 */
    size_t count;
    /* The reply to the synchronous call in progress (one at a time). */
    uint64_t call_id;
    bool call_done;
    int call_error;              /* an error reply the daemon could not tie to an id */
    struct proto_msg call_msg;
    bool call_msg_valid;
    /* The fd the call's reply carried (SCM_RIGHTS), kept only when the call wants one. */
    bool call_wants_fd;
    bool call_has_fd;
    int call_fd;
};

/* info.c: the client list of the last status reply. */
struct status_list {
    int n;
    gllm_client_info entries[GLLM_MAX_LISTED_CLIENTS];
};

/* metrics.c: status's job metrics and device memory, from the last status reply. */
struct status_metrics {
    bool have;                   /* a status reply carried metrics */
    bool have_devices;           /* ... and device_memory */
    gllm_metrics m;
    int ndevices;
    uint64_t used[GLLM_MAX_DEVICES], total[GLLM_MAX_DEVICES];
};
/* "metrics" and "device_memory" of a status result, read (proto_status_table), into *out:
 * what is missing or malformed reads as absent. */
struct proto_status;
void metrics_from(const struct proto_status *w, struct status_metrics *out);

/* How shared memory reaches this process: hello's share kind. */
enum share_kind {
    SHARE_NONE = 0,
    SHARE_MEMFD,                 /* a sealed memfd we mmap */
    SHARE_CUDA_VMM,              /* a cuMemCreate allocation's POSIX fd we import (cuda_map.c) */
};

/* info.c: what hello announced. */
struct hello_info {
    gllm_caps caps;
    enum share_kind share;       /* caps.share, parsed */
    bool device_waits;           /* sync.device_waits: a wait's counter may be shared memory */
    gllm_limits limits;
    gllm_device_info devices[GLLM_MAX_DEVICES];
    struct proto_mode_caps modes[GLLM_MODE_COUNT];  /* hello's capabilities (variant.c) */
};

struct gllm_client {
    int fd;
    uint64_t next_id;
    struct hello_info hello;
    struct status_list listed;
    struct status_metrics metrics;
    struct call_table calls;
    struct gllm_memory *memory;  /* live memory handles, detached on disconnect */
    char last_error[PROTO_MAX_ERRMSG + 1];
    uint64_t wait_spin_ns;       /* gllm_job_wait polls this long before it sleeps */
    struct gllm_ring *ring;      /* requests and job replies by shared memory; NULL: socket */
    uint32_t reply_tail, request_head;
    uint64_t packets_sent;       /* through the socket: a ring request records it (`after`) */
    struct gllm_memory *sync;    /* gllm_attention_enqueue's counters, made on first use */
    uint32_t sync_ready, sync_done;   /* the last values written to them */
    struct gllm_memory *sync_dev[GLLM_MAX_DEVICES];   /* gllm_stream_order_on's "ready"
                                                        * counters in shared device memory */
    char rx[PROTO_MAX_MESSAGE];
    struct proto_buf tx;
};

struct cuda_mapping;
struct cuda_stream_reg;

/* One handle for every kind of memory; kinds differ in how they are made and mapped. */
struct gllm_memory {
    gllm_client *c;              /* NULL once the client is gone */
    struct gllm_memory *prev, *next;
    gllm_memory_kind kind;
    uint32_t id;                 /* the daemon's arena or dtensor id */
    size_t size;
    void *data;                  /* arenas, memfd shared memory: our mapping; else NULL */
    int device;                  /* device memory: its device; -1 otherwise */
    /* GLLM_MEMORY_SHARED only: */
    enum share_kind share;
    bool imported;               /* the client's own memory: its mapping is the caller's */
    int fd;                      /* a CUDA export not yet mapped here; -1 otherwise */
    struct cuda_mapping *cuda;   /* its mapping once gllm_memory_map made it; else NULL */
    struct cuda_stream_reg *stream_reg;   /* arenas: registered with a CUDA context for
                                           * counters on its streams; else NULL */
};

/* The caller's output struct starts with its size: too small to hold that is -EINVAL. */
static inline int out_check(const void *out)
{
    size_t have;
    memcpy(&have, out, sizeof have);
    return have < sizeof(size_t) ? -EINVAL : 0;
}

/* Copies what fits of the library's struct src (lib_size bytes, size first) into the
 * caller's out, leaving out's size and anything past the library's struct alone. */
static inline void out_fill(void *out, const void *src, size_t lib_size)
{
    size_t have;
    memcpy(&have, out, sizeof have);
    const size_t n = have < lib_size ? have : lib_size;
    memcpy((char *)out + sizeof have, (const char *)src + sizeof have, n - sizeof have);
}

/* calls.c */
void calls_free(struct call_table *t);
/* Registers job id before its request is sent: the reply may come while we send. */
int calls_add_job(struct call_table *t, uint64_t id);
struct call_job *calls_find_job(struct call_table *t, uint64_t id);
/* Removes the job (its message pointer goes with the caller's copy). */
void calls_remove_job(struct call_table *t, struct call_job *j);
/* Expects the reply of synchronous call id. */
void calls_expect(struct call_table *t, uint64_t id);
/* Frees the synchronous call's reply, if any. */
void calls_end(struct call_table *t);
/* Routes one received packet to its job or to the synchronous call; errors the daemon
 * could not tie to an id also copy their message into last_error. */
int calls_route(struct call_table *t, const char *packet, size_t len, char *last_error);
/* The same for a packet that carried fd (-1: none): it goes to the synchronous call when
 * that call wants one and this is its reply; otherwise it is closed. Consumed either way. */
int calls_route_fd(struct call_table *t, const char *packet, size_t len, char *last_error,
                   int fd);

/* conn.c */
int conn_open(const char *path, int *fd);
/* Sends one packet (with fd over SCM_RIGHTS when fd >= 0), reading replies meanwhile. */
int conn_send(gllm_client *c, const void *data, size_t len, int fd);
/* Reads packets until none is waiting (nonblocking) or one arrives (blocking). */
int conn_receive(gllm_client *c, bool block);
/* Sends the request in c->tx by the ring when it can: 1 when the socket must carry it. */
int conn_ring_send(gllm_client *c);
/* Routes the replies gllmd left in the ring since the last look. */
int conn_ring_drain(gllm_client *c);
/* The ring's polling flag: set while a waiter spins on the ring. */
void conn_ring_set_polling(gllm_client *c, bool on);
/* Makes a ring for gllmd: its memfd in *fd and its mapping, or NULL. */
struct gllm_ring *conn_ring_create(int *fd);
void conn_ring_unmap(struct gllm_ring *rg);

/* rpc.c */
msgpack_packer *rpc_begin(gllm_client *c, const char *method, uint64_t *id);
/* Sends the request in c->tx and waits for its reply, in c->calls.call_msg on success
 * (rpc_end frees it). */
int rpc_call(gllm_client *c, uint64_t id, int fd);
/* The same for a call whose reply carries one fd: on success *fd_out is it (the caller's to
 * close) or -1 when the reply came without one. */
int rpc_call_fd(gllm_client *c, uint64_t id, int fd, int *fd_out);
void rpc_end(gllm_client *c);

/* info.c */
/* Decodes hello's result into c->hello; *ring_bytes: the ring layout gllmd reads (left
 * alone when it offers none). */
int info_hello(gllm_client *c, uint64_t *ring_bytes);

/* memory.c */
/* The wire form of t, whose memory must belong to c. */
int memory_tensor_to_wire(gllm_client *c, const gllm_tensor *t, struct proto_tensor *w);

/* Variants (variant.c). hello's capabilities into h. */
struct proto_hello;
void variant_from_hello(const struct proto_hello *w, struct hello_info *h);
/* v (NULL: none) as it travels; flags: the job's, for GLLM_ATTN_WINDOW. */
int variant_to_wire(gllm_client *c, uint32_t flags, const gllm_attention_variant *v,
                    struct proto_variant *w);
/* w against hello's mode, as gllmd will check it: 0, or a code with last_error set. */
int variant_check(gllm_client *c, gllm_mode mode, const struct proto_variant *w, int64_t Hq,
                  int64_t D, int64_t Dv);
/* Detaches every handle: the daemon gives back its side when the connection closes. */
void memory_detach_all(gllm_client *c);
/* Links a handle the daemon has accepted into its client's list. */
void memory_attach(gllm_client *c, gllm_memory *m);
/* The share kind named s (n bytes), SHARE_NONE for any other. */
enum share_kind memory_share_parse(const char *s, size_t n);

/* cuda_map.c: a CUDA export mapped into the calling thread's current context. */
/* Imports fd (not consumed) and maps bytes of it read-write for the context's device;
 * *ptr: the CUdeviceptr. why gets the driver's reason on failure. */
int cuda_map_fd(int fd, size_t bytes, struct cuda_mapping **out, uint64_t *ptr, char *why,
                size_t len);
uint64_t cuda_mapping_ptr(const struct cuda_mapping *m);
/* Unmaps, releases the handle and closes the driver library (NULL: nothing). */
void cuda_unmap(struct cuda_mapping *m);

/* jobs.c */
/* Sends the job request in c->tx, registered first in the call table. */
int jobs_submit(gllm_client *c, uint64_t id);

#endif
