/* Attention request validation: every tensor is resolved and bounds-checked before it is queued. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "job.h"

int job_resolve(struct resolved *r, const struct arena_table *arenas, uint64_t caps_max_elements,
                   char *err, size_t errlen)
{
    r->arena = arena_table_find(arenas, r->t->arena);
    if (!r->arena || r->arena->device != r->t->device) {
        snprintf(err, errlen, "%s: no %s %u in this session", r->name,
                 r->t->device ? "device tensor" : "arena", r->t->arena);
        return GLLM_ENOARENA;
    }
    size_t esize = proto_dtype_size(r->t->dtype);
    if (esize && r->t->offset % esize != 0) {
        snprintf(err, errlen, "%s: offset %llu not a multiple of the element size %zu", r->name,
                 (unsigned long long)r->t->offset, esize);
        return GLLM_EPARAM;
    }
    int rc = proto_tensor_span(r->t, &r->first, &r->end);
    if (rc == GLLM_EOVERFLOW) {
        snprintf(err, errlen, "%s: offset plus extent overflows 64 bits", r->name);
        return rc;
    }
    if (rc < 0) {
        snprintf(err, errlen, "%s: negative dimension or stride", r->name);
        return rc;
    }
    if (caps_max_elements) {
        uint64_t n = 1;
        for (uint32_t i = 0; i < r->t->rank; i++)
            if (__builtin_mul_overflow(n, (uint64_t)r->t->shape[i], &n))
                n = UINT64_MAX;
        if (n > caps_max_elements) {
            snprintf(err, errlen, "%s: %llu elements (limit %llu)", r->name, (unsigned long long)n,
                     (unsigned long long)caps_max_elements);
            return GLLM_ELIMIT;
        }
    }
    if (r->end > r->arena->size) {
        snprintf(err, errlen, "%s: bytes [%llu, %llu) outside arena %u of %llu bytes", r->name,
                 (unsigned long long)r->first, (unsigned long long)r->end, r->t->arena,
                 (unsigned long long)r->arena->size);
        return GLLM_EBOUNDS;
    }
    return 0;
}

bool job_overlaps(const struct resolved *a, const struct resolved *b)
{
    return a->arena == b->arena && a->first < b->end && b->first < a->end && a->first != a->end &&
           b->first != b->end;
}

/* True when no two index tuples of t address the same element, so parallel
 * writers never race: sorted by stride, each stride must clear the extent of
 * the dimensions inside it. */
bool job_injective(const struct proto_tensor *t)
{
    int idx[GLLM_MAX_RANK];
    int n = 0;
    for (uint32_t i = 0; i < t->rank; i++) {
        if (t->shape[i] == 0)
            return true;
        if (t->shape[i] > 1)
            idx[n++] = (int)i;
    }
    for (int i = 1; i < n; i++)           /* insertion sort by stride, n <= 8 */
        for (int j = i; j > 0 && t->strides[idx[j]] < t->strides[idx[j - 1]]; j--) {
            int tmp = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = tmp;
        }
    int64_t extent = 1;                   /* elements spanned by the inner dims */
    for (int i = 0; i < n; i++) {
        int64_t s = t->strides[idx[i]];
        if (s < extent)
            return false;
        extent = s * (t->shape[idx[i]] - 1) + extent; /* cannot overflow: span was checked */
    }
    return true;
}

int job_mode_dtype_check(const struct job_caps *caps, gllm_mode mode, gllm_dtype dtype,
                         char *err, size_t errlen)
{
    const uint32_t takes = caps->mode_dtypes[mode];
    if (!takes || (takes & (1u << dtype)))
        return 0;
    char names[32] = "";
    size_t used = 0;
    for (int d = 0; d < 32 && used < sizeof names; d++)
        if (takes & (1u << d))
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "",
                                     proto_dtype_name((gllm_dtype)d));
    snprintf(err, errlen, "dtype %s: the %s backend's %s takes %s", proto_dtype_name(dtype),
             caps->backend, proto_mode_name(mode), names);
    return GLLM_EDTYPE;
}

static void copy_strides(int64_t *dst, const struct proto_tensor *t)
{
    for (uint32_t i = 0; i < t->rank; i++)
        dst[i] = t->strides[i];
}

int job_prepare_attention(struct job *job, const struct proto_attention *pa,
                          const struct arena_table *arenas, const struct job_caps *caps,
                          char *err, size_t errlen)
{
    /* r[0..n): q, k, v, out, then lse when wanted, then the variant's slopes and sinks. */
    struct resolved r[7] = {
        {"q", &pa->q, NULL, 0, 0}, {"k", &pa->k, NULL, 0, 0}, {"v", &pa->v, NULL, 0, 0},
        {"out", &pa->out, NULL, 0, 0}, {"lse", &pa->lse, NULL, 0, 0},
    };
    const int nout = pa->has_lse ? 5 : 4;     /* out and lse are the job's writes */
    int rc;
    for (int i = 0; i < nout; i++)
        if ((rc = job_resolve(&r[i], arenas, caps->max_elements, err, errlen)) < 0)
            return rc;

    const struct proto_tensor *q = &pa->q, *k = &pa->k, *v = &pa->v, *o = &pa->out;
    for (int i = 0; i < 4; i++)
        if (r[i].t->rank != 4) {
            snprintf(err, errlen, "%s: rank %u, expected 4 [B, H, S, D]", r[i].name, r[i].t->rank);
            return GLLM_ESHAPE;
        }
    if (k->dtype != q->dtype || v->dtype != q->dtype || o->dtype != q->dtype) {
        snprintf(err, errlen, "q, k, v and out must share one dtype (got %s, %s, %s, %s)",
                 proto_dtype_name(q->dtype), proto_dtype_name(k->dtype),
                 proto_dtype_name(v->dtype), proto_dtype_name(o->dtype));
        return GLLM_EDTYPE;
    }
    if (!(caps->dtypes & (1u << q->dtype))) {
        snprintf(err, errlen, "dtype %s not supported by this backend", proto_dtype_name(q->dtype));
        return GLLM_EDTYPE;
    }
    if ((rc = job_mode_dtype_check(caps, GLLM_MODE_DENSE, q->dtype, err, errlen)) < 0)
        return rc;
    int64_t B = q->shape[0], Hq = q->shape[1], Sq = q->shape[2], D = q->shape[3];
    int64_t Hkv = k->shape[1], Skv = k->shape[2], Dv = v->shape[3];
    if (k->shape[0] != B || k->shape[3] != D || v->shape[0] != B || v->shape[1] != Hkv ||
        v->shape[2] != Skv) {
        snprintf(err, errlen, "k must be [B=%lld, Hkv, Skv, D=%lld] and v [B, Hkv, Skv, Dv]",
                 (long long)B, (long long)D);
        return GLLM_ESHAPE;
    }
    if (o->shape[0] != B || o->shape[1] != Hq || o->shape[2] != Sq || o->shape[3] != Dv) {
        snprintf(err, errlen, "out must be [B, Hq, Sq, Dv]: q's shape with v's head dim");
        return GLLM_ESHAPE;
    }
    if (Hkv == 0 ? Hq != 0 : Hq % Hkv != 0) {
        snprintf(err, errlen, "Hq (%lld) must be a multiple of Hkv (%lld)", (long long)Hq,
                 (long long)Hkv);
        return GLLM_ESHAPE;
    }
    if (D < 1 || D > caps->max_head_dim) {
        snprintf(err, errlen, "head dim %lld not in [1, %d]", (long long)D, caps->max_head_dim);
        return GLLM_EHEADDIM;
    }
    struct job_variant jv;
    if ((rc = job_variant_prepare(&jv, &pa->variant, GLLM_MODE_DENSE, caps, arenas, Hq, D, Dv,
                                  err, errlen)) < 0)
        return rc;
    for (int i = 0; i < jv.n; i++)
        r[nout + i] = jv.r[i];
    const int n = nout + jv.n;
    if (pa->has_lse) {
        const struct proto_tensor *l = &pa->lse;
        if (l->dtype != GLLM_DTYPE_F32) {
            snprintf(err, errlen, "lse must be f32");
            return GLLM_EDTYPE;
        }
        if (l->rank != 3 || l->shape[0] != B || l->shape[1] != Hq || l->shape[2] != Sq) {
            snprintf(err, errlen, "lse must be [B, Hq, Sq]");
            return GLLM_ESHAPE;
        }
    }
    for (int w = 3; w < nout; w++) {
        if (!job_injective(r[w].t)) {
            snprintf(err, errlen, "%s: strides make elements overlap", r[w].name);
            return GLLM_EALIAS;
        }
        for (int i = 0; i < n; i++)
            if (i != w && job_overlaps(&r[w], &r[i])) {
                snprintf(err, errlen, "%s overlaps %s", r[w].name, r[i].name);
                return GLLM_EALIAS;
            }
    }

    if (pa->repeat > GLLM_MAX_REPEAT) {
        snprintf(err, errlen, "repeat %llu: at most %d runs", (unsigned long long)pa->repeat,
                 GLLM_MAX_REPEAT);
        return GLLM_EPARAM;
    }

    job->kind = JOB_ATTENTION;
    struct attn_args *a = &job->args;
    memset(a, 0, sizeof *a);
    a->dtype = q->dtype;
    a->B = B, a->Hq = Hq, a->Hkv = Hkv, a->Sq = Sq, a->Skv = Skv, a->D = D, a->Dv = Dv;
    a->q = (const char *)r[0].arena->base + q->offset;
    a->k = (const char *)r[1].arena->base + k->offset;
    a->v = (const char *)r[2].arena->base + v->offset;
    a->out = (char *)r[3].arena->base + o->offset;
    copy_strides(a->q_st, q);
    copy_strides(a->k_st, k);
    copy_strides(a->v_st, v);
    copy_strides(a->o_st, o);
    if (pa->has_lse) {
        a->lse = (float *)(void *)((char *)r[4].arena->base + pa->lse.offset);
        copy_strides(a->lse_st, &pa->lse);
    }
    for (int i = 0; i < nout; i++)
        if (r[i].arena->device)
            a->device_mask |= 1u << i;
    a->device_mask |= jv.device << 5;        /* bits 5, 6: slopes, sinks */
    a->variant = jv.v;
    a->causal = pa->causal;
    a->repeat = pa->repeat ? (uint32_t)pa->repeat : 1;
    a->scale = job_scale(pa->has_scale, pa->scale, D);

    job_hold(job, r, n);
    return 0;
}

int job_prepare_copy(struct job *job, const struct arena_table *regions, uint32_t dtensor,
                     uint64_t dt_offset, uint32_t arena, uint64_t arena_offset, uint64_t bytes,
                     bool to_device, char *err, size_t errlen)
{
    struct arena *d = arena_table_find(regions, dtensor), *h = arena_table_find(regions, arena);
    if (!d || !d->device) {
        snprintf(err, errlen, "no device tensor %u in this session", dtensor);
        return GLLM_ENOARENA;
    }
    if (!h || h->device) {
        snprintf(err, errlen, "no arena %u in this session", arena);
        return GLLM_ENOARENA;
    }
    uint64_t dend, hend;
    if (__builtin_add_overflow(dt_offset, bytes, &dend) ||
        __builtin_add_overflow(arena_offset, bytes, &hend)) {
        snprintf(err, errlen, "offset plus bytes overflows 64 bits");
        return GLLM_EOVERFLOW;
    }
    if (dend > d->size || hend > h->size) {
        snprintf(err, errlen, "%llu bytes at %llu/%llu pass the end of device tensor %u (%llu bytes) "
                 "or arena %u (%llu bytes)", (unsigned long long)bytes,
                 (unsigned long long)dt_offset, (unsigned long long)arena_offset, dtensor,
                 (unsigned long long)d->size, arena, (unsigned long long)h->size);
        return GLLM_EBOUNDS;
    }
    job->kind = JOB_COPY;
    char *dp = (char *)d->base + dt_offset, *hp = (char *)h->base + arena_offset;
    job->copy = (struct copy_args){.dst = to_device ? dp : hp, .src = to_device ? hp : dp,
                                   .bytes = (size_t)bytes, .to_device = to_device};
    job->arenas[0] = arena_ref(d);
    job->arenas[1] = arena_ref(h);
    job->narenas = 2;
    return 0;
}

int job_check_device(const struct job *job, int dev, char *err, size_t errlen)
{
    for (int i = 0; i < job->narenas; i++) {
        const struct arena *a = job->arenas[i];
        if (a->device && a->dev != dev) {
            snprintf(err, errlen, "device tensor %u lives on device %d, the job runs on device %d",
                     a->id, a->dev, dev);
            return GLLM_EPARAM;
        }
    }
    return 0;
}

void job_release_arenas(struct job *job)
{
    for (int i = 0; i < job->narenas; i++)
        arena_unref(job->arenas[i]);
    job->narenas = 0;
    free(job->tables);
    job->tables = NULL;
}

/* Takes one reference per distinct region among r[0..n). */
void job_hold(struct job *job, const struct resolved *r, int n)
{
    job->narenas = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int j = 0; j < job->narenas; j++)
            seen |= job->arenas[j] == r[i].arena;
        if (!seen)
            job->arenas[job->narenas++] = arena_ref(r[i].arena);
    }
}
