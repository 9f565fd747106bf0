/* The request handlers: one per method of the wire protocol (docs/PROTOCOL.md). Each answers
 * its call exactly once, now or, for a job, when the job is settled. rpc.c's table maps
 * names to them; methods_info.c, methods_memory.c and methods_jobs.c define them. */
#ifndef GLLMD_METHODS_H
#define GLLMD_METHODS_H

#include "channel.h"

void method_hello(struct rpc_call *c, const struct proto_msg *m);
void method_status(struct rpc_call *c, const struct proto_msg *m);
void method_arena_register(struct rpc_call *c, const struct proto_msg *m);
/* The server's arena_reaper (ctx: the server): a registered arena's or a device tensor's
 * teardown on the thread pool. */
struct arena;
void methods_reap_arena(void *ctx, struct arena *a);
void method_arena_release(struct rpc_call *c, const struct proto_msg *m);
void method_ring(struct rpc_call *c, const struct proto_msg *m);
void method_attention(struct rpc_call *c, const struct proto_msg *m);
void method_dtensor_create(struct rpc_call *c, const struct proto_msg *m);
/* A client's exported memory (one fd) as a device tensor. */
void method_dtensor_import(struct rpc_call *c, const struct proto_msg *m);
void method_dtensor_free(struct rpc_call *c, const struct proto_msg *m);
void method_dtensor_copy(struct rpc_call *c, const struct proto_msg *m);
void method_kv_append(struct rpc_call *c, const struct proto_msg *m);
void method_attention_decode(struct rpc_call *c, const struct proto_msg *m);
void method_attention_prefill(struct rpc_call *c, const struct proto_msg *m);
/* After a job request was refused (answered with c->refused): a valid signal it named is
 * still written, after the connection's earlier jobs on that device. */
void method_job_refused(struct rpc_call *c, const struct proto_msg *m);
/* Test-only (debug_fault.c): the caller's next job on a device meets a fault. Answered as
 * an unknown method unless debug_fault_enabled, which only a gllmd built with
 * GLLM_FAULT_INJECTION (never a release) sets. */
extern bool debug_fault_enabled;
void method_debug_fault(struct rpc_call *c, const struct proto_msg *m);

/* For administrators only (methods_admin.c): others are answered DENIED. */
void method_drain(struct rpc_call *c, const struct proto_msg *m);
void method_reload(struct rpc_call *c, const struct proto_msg *m);
void method_clients(struct rpc_call *c, const struct proto_msg *m);
void method_client_disconnect(struct rpc_call *c, const struct proto_msg *m);

/* Between the method files. The wire name of the kind of memory the backend shares ("memfd",
 * "cuda_vmm_fd"), or NULL when it shares none: hello announces it, dtensor_create exports it
 * (methods_memory.c). */
struct backend;
const char *methods_share_kind(const struct backend *be);
/* Room for one more job, or an error reply and false (methods_jobs.c). */
bool methods_admit(struct rpc_call *c, const char *method);
/* Queues a prepared job on dev with its counters, or answers c with why not; takes job. */
struct job;
void methods_submit(struct rpc_call *c, struct job *job, int dev, const struct proto_counter *wait,
                    const struct proto_counter *signal, const char *method);
/* After a job's decode failed: what its device, wait or signal broke, in words (their code was
 * the one returned: decoders read them first), or NULL when the failure was elsewhere. */
const char *methods_job_why(const struct proto_msg *m, bool takes_device);

#endif
