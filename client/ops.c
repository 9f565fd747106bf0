/* libgllm-client operations: attention, paged-cache jobs and copies, each a job request. */
#include <stddef.h>

#include "client_internal.h"

/* Sends the request in c->tx as job id; *job gets the id once it is on its way. */
static int submit(gllm_client *c, uint64_t id, uint64_t *job)
{
    int r = jobs_submit(c, id);
    if (r < 0)
        return r;
    *job = id;
    return 0;
}

/* A job's wait or signal counter: none without memory; else an arena of this client (or,
 * for a wait, memory it shares with gllmd: gllmd says whether its backend can wait there). */
static int counter_to_wire(gllm_client *c, const gllm_counter *g, struct proto_counter *w)
{
    if (!g->memory)
        return 0;
    if (g->memory->c != c || (g->memory->kind != GLLM_MEMORY_ARENA &&
                              g->memory->kind != GLLM_MEMORY_SHARED) ||
        g->offset % 4 != 0 || g->offset + 4 > g->memory->size)
        return -EINVAL;
    *w = (struct proto_counter){.set = true, .arena = g->memory->id, .offset = g->offset,
                                .value = g->value, .timeout_ms = g->timeout_ms};
    return 0;
}

/* Params structs grew their counters at the end: a caller built before them passes the
 * size it knows, and has none. */
#define HAS_COUNTERS(p) ((p)->size >= offsetof(__typeof__(*(p)), signal) + sizeof (p)->signal)
#define HAS_REPEAT(p) ((p)->size >= offsetof(gllm_attention_params, repeat) + sizeof (p)->repeat)
#define HAS_VARIANT(p) ((p)->size >= offsetof(__typeof__(*(p)), variant) + sizeof (p)->variant)

/* The job's variant on the wire, checked as gllmd would before anything is sent: a field the
 * daemon does not compute (or one an older gllmd does not know) fails here, with the reason
 * in last_error, instead of reaching a daemon that might ignore it. */
static int variant_out(gllm_client *c, gllm_mode mode, uint32_t flags,
                       const gllm_attention_variant *v, const gllm_tensor *q,
                       const gllm_tensor *kt, const gllm_tensor *vt, struct proto_variant *w)
{
    int r = variant_to_wire(c, flags, v, w);
    if (r < 0)
        return r;
    /* q is [B, Hq, Sq, D] (dense) or [N, Hq, D]; k (or k_cache) ends in D too, v (or
     * v_cache) in Dv. Shapes that do not fit are gllmd's to refuse, with its own words. */
    const int want = mode == GLLM_MODE_DENSE ? 4 : 3;
    if (q->rank != want || kt->rank < 1 || vt->rank < 1 ||
        kt->shape[kt->rank - 1] != q->shape[want - 1])
        return 0;
    return variant_check(c, mode, w, q->shape[1], q->shape[want - 1], vt->shape[vt->rank - 1]);
}

int gllm_attention_submit(gllm_client *c, const gllm_attention_params *p, uint64_t *job)
{
    if (!p || p->size < offsetof(gllm_attention_params, wait))
        return -EINVAL;
    struct proto_attention a = {0};
    int r;
    if (HAS_COUNTERS(p) && ((r = counter_to_wire(c, &p->wait, &a.wait)) < 0 ||
                            (r = counter_to_wire(c, &p->signal, &a.signal)) < 0))
        return r;
    if ((r = memory_tensor_to_wire(c, &p->q, &a.q)) < 0 ||
        (r = memory_tensor_to_wire(c, &p->k, &a.k)) < 0 ||
        (r = memory_tensor_to_wire(c, &p->v, &a.v)) < 0 ||
        (r = memory_tensor_to_wire(c, &p->out, &a.out)) < 0)
        return r;
    if (p->flags & GLLM_ATTN_LSE) {
        if ((r = memory_tensor_to_wire(c, &p->lse, &a.lse)) < 0)
            return r;
        a.has_lse = true;
    }
    a.causal = p->flags & GLLM_ATTN_CAUSAL;
    a.has_scale = p->flags & GLLM_ATTN_SCALE;
    a.scale = p->scale;
    a.repeat = HAS_REPEAT(p) ? p->repeat : 0;
    if ((r = variant_out(c, GLLM_MODE_DENSE, p->flags, HAS_VARIANT(p) ? &p->variant : NULL,
                         &p->q, &p->k, &p->v, &a.variant)) < 0)
        return r;
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "attention", &id);
    proto_pack_attention(pk, &a);
    return submit(c, id, job);
}

static int paged_kv_to_wire(gllm_client *c, const gllm_paged_kv *kv, struct proto_paged *w)
{
    int r;
    if ((r = memory_tensor_to_wire(c, &kv->k_cache, &w->k_cache)) < 0 ||
        (r = memory_tensor_to_wire(c, &kv->v_cache, &w->v_cache)) < 0 ||
        (r = memory_tensor_to_wire(c, &kv->indptr, &w->kv_indptr)) < 0 ||
        (r = memory_tensor_to_wire(c, &kv->indices, &w->kv_indices)) < 0)
        return r;
    return memory_tensor_to_wire(c, &kv->last_page_len, &w->kv_last_page_len);
}

static int paged_submit(gllm_client *c, const char *method, const struct proto_paged *w,
                        uint64_t *job)
{
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, method, &id);
    proto_pack_paged(pk, w);
    return submit(c, id, job);
}

int gllm_kv_append_submit(gllm_client *c, const gllm_kv_append_params *p, uint64_t *job)
{
    if (!p || p->size < offsetof(gllm_kv_append_params, wait))
        return -EINVAL;
    struct proto_paged w = {.op = PROTO_KV_APPEND};
    int r;
    if (HAS_COUNTERS(p) && ((r = counter_to_wire(c, &p->wait, &w.wait)) < 0 ||
                            (r = counter_to_wire(c, &p->signal, &w.signal)) < 0))
        return r;
    if ((r = paged_kv_to_wire(c, &p->kv, &w)) < 0 ||
        (r = memory_tensor_to_wire(c, &p->k, &w.k)) < 0 ||
        (r = memory_tensor_to_wire(c, &p->v, &w.v)) < 0 ||
        (r = memory_tensor_to_wire(c, &p->append_indptr, &w.append_indptr)) < 0)
        return r;
    return paged_submit(c, "kv_append", &w, job);
}

static int paged_attention_submit(gllm_client *c, const gllm_paged_attention_params *p,
                                  enum proto_paged_op op, uint64_t *job)
{
    if (!p || p->size < offsetof(gllm_paged_attention_params, wait) ||
        (p->flags & ~(GLLM_ATTN_SCALE | GLLM_ATTN_WINDOW)))
        return -EINVAL;
    struct proto_paged w = {.op = op};
    int r;
    if (HAS_COUNTERS(p) && ((r = counter_to_wire(c, &p->wait, &w.wait)) < 0 ||
                            (r = counter_to_wire(c, &p->signal, &w.signal)) < 0))
        return r;
    if ((r = paged_kv_to_wire(c, &p->kv, &w)) < 0 ||
        (r = memory_tensor_to_wire(c, &p->q, &w.q)) < 0 ||
        (r = memory_tensor_to_wire(c, &p->out, &w.out)) < 0)
        return r;
    if (op == PROTO_PREFILL && (r = memory_tensor_to_wire(c, &p->qo_indptr, &w.qo_indptr)) < 0)
        return r;
    w.has_scale = p->flags & GLLM_ATTN_SCALE;
    w.scale = p->scale;
    if ((r = variant_out(c, op == PROTO_DECODE ? GLLM_MODE_DECODE : GLLM_MODE_PREFILL, p->flags,
                         HAS_VARIANT(p) ? &p->variant : NULL, &p->q, &p->kv.k_cache,
                         &p->kv.v_cache, &w.variant)) < 0)
        return r;
    return paged_submit(c, op == PROTO_DECODE ? "attention_decode" : "attention_prefill", &w, job);
}

int gllm_attention_decode_submit(gllm_client *c, const gllm_paged_attention_params *p,
                                 uint64_t *job)
{
    return paged_attention_submit(c, p, PROTO_DECODE, job);
}

int gllm_attention_prefill_submit(gllm_client *c, const gllm_paged_attention_params *p,
                                  uint64_t *job)
{
    return paged_attention_submit(c, p, PROTO_PREFILL, job);
}

int gllm_memory_copy(gllm_client *c, gllm_memory *dst, uint64_t dst_offset, gllm_memory *src,
                     uint64_t src_offset, uint64_t bytes)
{
    if (!dst || !src || dst->c != c || src->c != c)
        return -EINVAL;
    /* The wire's copy runs between an arena and a device tensor (shared memory is one too),
     * either way. */
    const bool to_device = dst->kind != GLLM_MEMORY_ARENA;
    gllm_memory *dev = to_device ? dst : src, *arena = to_device ? src : dst;
    if (dev->kind == GLLM_MEMORY_ARENA || arena->kind != GLLM_MEMORY_ARENA)
        return -EINVAL;
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "dtensor_copy", &id);
    proto_pack_copy(pk, &(struct proto_copy){
                            .dtensor = dev->id, .offset = to_device ? dst_offset : src_offset,
                            .arena = arena->id, .arena_offset = to_device ? src_offset : dst_offset,
                            .bytes = bytes, .to_device = to_device});
    /* A copy is a job: its reply comes in order with the connection's other jobs. */
    int r = jobs_submit(c, id);
    return r < 0 ? r : gllm_job_wait(c, id, NULL);
}

/* The synchronous forms: submit, then wait. The result struct is checked first, so that a
 * bad one fails before the job runs rather than after. */
#define GLLM_SYNC_(name, ptype)                                                          \
    int name(gllm_client *c, const ptype *p, gllm_job_result *res)                       \
    {                                                                                    \
        if (res && out_check(res) < 0)                                                   \
            return -EINVAL;                                                              \
        uint64_t job;                                                                    \
        int r = name##_submit(c, p, &job);                                               \
        return r < 0 ? r : gllm_job_wait(c, job, res);                                   \
    }
GLLM_SYNC_(gllm_attention, gllm_attention_params)
GLLM_SYNC_(gllm_kv_append, gllm_kv_append_params)
GLLM_SYNC_(gllm_attention_decode, gllm_paged_attention_params)
GLLM_SYNC_(gllm_attention_prefill, gllm_paged_attention_params)
