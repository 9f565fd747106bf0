/* Attention variants on the wire: their keys, their checks against a mode's capabilities, and
 * hello's "capabilities" map, shared by gllmd and libgllm-client. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"

/* The variant keys, in the order proto_decode_variant finds them. */
enum { VK_WL, VK_WR, VK_CHUNK, VK_CAP, VK_ALIBI, VK_SINKS, VK_COUNT };
static const struct proto_key variant_keys[VK_COUNT] = {
    PROTO_KEY("window_left"),     PROTO_KEY("window_right"), PROTO_KEY("attention_chunk"),
    PROTO_KEY("logits_soft_cap"), PROTO_KEY("alibi_slopes"), PROTO_KEY("sinks"),
};

/* GLLM_VARIANT_* bit by bit position, and the name hello and errors give it. */
const char *const proto_variant_names[PROTO_NVARIANTS] = {
    "window", "attention_chunk", "logits_soft_cap", "alibi_slopes", "sinks", "head_dim_v",
};
#define NVARIANTS PROTO_NVARIANTS
_Static_assert(GLLM_VARIANT_HEAD_DIM_V == 1u << (PROTO_NVARIANTS - 1), "a name per variant bit");

const char *proto_variant_name(uint32_t bit)
{
    for (unsigned i = 0; i < NVARIANTS; i++)
        if (bit == 1u << i)
            return proto_variant_names[i];
    return "?";
}

static const char *const mode_names[GLLM_MODE_COUNT] = {
    [GLLM_MODE_DENSE] = "dense", [GLLM_MODE_DECODE] = "decode", [GLLM_MODE_PREFILL] = "prefill",
};

const char *proto_mode_name(gllm_mode mode)
{
    return (unsigned)mode < GLLM_MODE_COUNT ? mode_names[mode] : "?";
}

static int get_int(const msgpack_object *o, int64_t *out)
{
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = o->via.i64;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        /* Past INT64_MAX is out of every range the checks allow: keep it out. */
        *out = o->via.u64 > INT64_MAX ? INT64_MAX : (int64_t)o->via.u64;
        return 0;
    }
    return GLLM_EPARAM;
}

static bool absent(const msgpack_object *o)
{
    return !o || o->type == MSGPACK_OBJECT_NIL;
}

int proto_decode_variant(const msgpack_object *params, struct proto_variant *out)
{
    struct proto_variant v = {.window_left = -1, .window_right = -1};
    const msgpack_object *f[VK_COUNT];
    proto_map_find(params, variant_keys, VK_COUNT, f);
    int r;
    v.window = !absent(f[VK_WL]) || !absent(f[VK_WR]);
    if ((!absent(f[VK_WL]) && (r = get_int(f[VK_WL], &v.window_left)) < 0) ||
        (!absent(f[VK_WR]) && (r = get_int(f[VK_WR], &v.window_right)) < 0) ||
        (!absent(f[VK_CHUNK]) && (r = get_int(f[VK_CHUNK], &v.attention_chunk)) < 0))
        return r;
    if (!absent(f[VK_CAP])) {
        const msgpack_object *o = f[VK_CAP];
        if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
            v.logits_soft_cap = o->via.f64;
        else if (get_int(o, &(int64_t){0}) == 0)
            v.logits_soft_cap = o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? (double)o->via.i64
                                                                           : (double)o->via.u64;
        else
            return GLLM_EPARAM;
    }
    if (!absent(f[VK_ALIBI])) {
        if ((r = proto_decode_tensor(f[VK_ALIBI], &v.alibi_slopes)) < 0)
            return r;
        v.has_alibi = true;
    }
    if (!absent(f[VK_SINKS])) {
        if ((r = proto_decode_tensor(f[VK_SINKS], &v.sinks)) < 0)
            return r;
        v.has_sinks = true;
    }
    *out = v;
    return 0;
}

unsigned proto_variant_keys(const struct proto_variant *v)
{
    return 2 * v->window + (v->attention_chunk != 0) +
           (v->logits_soft_cap != 0.0) + v->has_alibi + v->has_sinks;
}

void proto_pack_variant(msgpack_packer *pk, const struct proto_variant *v)
{
    if (v->window) {
        proto_pack_kv_i64(pk, "window_left", v->window_left);
        proto_pack_kv_i64(pk, "window_right", v->window_right);
    }
    if (v->attention_chunk != 0)
        proto_pack_kv_i64(pk, "attention_chunk", v->attention_chunk);
    if (v->logits_soft_cap != 0.0)
        proto_pack_kv_f64(pk, "logits_soft_cap", v->logits_soft_cap);
    if (v->has_alibi) {
        proto_pack_str(pk, "alibi_slopes");
        proto_pack_tensor(pk, &v->alibi_slopes);
    }
    if (v->has_sinks) {
        proto_pack_str(pk, "sinks");
        proto_pack_tensor(pk, &v->sinks);
    }
}

uint32_t proto_variant_fields(const struct proto_variant *v, int64_t D, int64_t Dv)
{
    return (v->window && (v->window_left != -1 || v->window_right != -1) ? GLLM_VARIANT_WINDOW
                                                                          : 0) |
           (v->attention_chunk != 0 ? GLLM_VARIANT_CHUNK : 0) |
           (v->logits_soft_cap != 0.0 ? GLLM_VARIANT_SOFT_CAP : 0) |
           (v->has_alibi ? GLLM_VARIANT_ALIBI : 0) | (v->has_sinks ? GLLM_VARIANT_SINKS : 0) |
           (Dv != D ? GLLM_VARIANT_HEAD_DIM_V : 0);
}

static int per_head(const char *name, const struct proto_tensor *t, int64_t Hq, char *err,
                    size_t len)
{
    if (t->dtype != GLLM_DTYPE_F32) {
        snprintf(err, len, "%s is %s: it must be f32 [Hq]", name, proto_dtype_name(t->dtype));
        return GLLM_EDTYPE;
    }
    if (t->rank != 1 || t->shape[0] != Hq) {
        snprintf(err, len, "%s must be f32 [Hq = %lld], one value per query head", name,
                 (long long)Hq);
        return GLLM_ESHAPE;
    }
    return 0;
}

bool proto_head_dim_ok(const struct proto_mode_caps *m, int64_t D)
{
    if (m->n_head_dims == 0)
        return D >= 1 && (uint64_t)D <= m->max_head_dim;
    for (uint32_t i = 0; i < m->n_head_dims && i < GLLM_MAX_MODE_HEAD_DIMS; i++)
        if ((int64_t)m->head_dims[i] == D)
            return true;
    return false;
}

/* "64, 128" or "1 to 256". */
static void head_dims_text(const struct proto_mode_caps *m, char *buf, size_t len)
{
    if (m->n_head_dims == 0) {
        snprintf(buf, len, "1 to %llu", (unsigned long long)m->max_head_dim);
        return;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < m->n_head_dims && i < GLLM_MAX_MODE_HEAD_DIMS && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%llu", i ? ", " : "",
                                 (unsigned long long)m->head_dims[i]);
}

int proto_variant_check(const struct proto_variant *v, gllm_mode mode,
                        const struct proto_mode_caps *m, const char *backend, int64_t Hq,
                        int64_t D, int64_t Dv, char *err, size_t len)
{
    if (v->window && (v->window_left < -1 || v->window_right < -1 ||
                      v->window_left > INT32_MAX || v->window_right > INT32_MAX)) {
        snprintf(err, len, "window_left %lld, window_right %lld: each -1 (no edge) or 0 to %d",
                 (long long)v->window_left, (long long)v->window_right, INT32_MAX);
        return GLLM_EPARAM;
    }
    if (v->attention_chunk < 0 || v->attention_chunk > INT32_MAX) {
        snprintf(err, len, "attention_chunk %lld: 0 (none) or 1 to %d",
                 (long long)v->attention_chunk, INT32_MAX);
        return GLLM_EPARAM;
    }
    /* The kernels divide by it in f32: a cap that is not a positive finite f32 is refused. */
    if (!isfinite(v->logits_soft_cap) || v->logits_soft_cap < 0.0 ||
        !isfinite((float)v->logits_soft_cap) ||
        (v->logits_soft_cap != 0.0 && (float)v->logits_soft_cap == 0.0f)) {
        snprintf(err, len, "logits_soft_cap %g: 0 (none) or a positive finite f32",
                 v->logits_soft_cap);
        return GLLM_EPARAM;
    }
    int r;
    if ((v->has_alibi && (r = per_head("alibi_slopes", &v->alibi_slopes, Hq, err, len)) < 0) ||
        (v->has_sinks && (r = per_head("sinks", &v->sinks, Hq, err, len)) < 0))
        return r;
    if (Dv > D || Dv < 1) {
        snprintf(err, len, "v's head dim %lld: 1 to q's and k's (%lld)", (long long)Dv,
                 (long long)D);
        return Dv < 1 ? GLLM_ESHAPE : GLLM_EHEADDIM;
    }
    if (!proto_head_dim_ok(m, D)) {
        char dims[96];
        head_dims_text(m, dims, sizeof dims);
        snprintf(err, len, "head dim %lld: the %s backend's %s attention takes %s", (long long)D,
                 backend, proto_mode_name(mode), dims);
        return GLLM_EHEADDIM;
    }
    const uint32_t missing = proto_variant_fields(v, D, Dv) & ~m->variants;
    if (missing) {
        const uint32_t bit = missing & -missing;
        snprintf(err, len, "%s: the %s backend does not compute it in %s attention (hello's "
                 "capabilities list what it does)", proto_variant_name(bit), backend,
                 proto_mode_name(mode));
        return GLLM_EVARIANT;
    }
    return 0;
}

/* ---- Keys of the job methods: a key a job method does not know is refused ---- */

/* Every key some job method reads (or, for the paged methods, reads as "not taken"); what
 * each takes is its decoder's business. A job's keys can all change its result, so one this
 * gllmd does not know is refused rather than ignored (docs/PROTOCOL.md, "Versions"). */
static const char *const job_keys[] = {
    "q", "k", "v", "out", "lse", "causal", "scale", "repeat", "device", "wait", "signal",
    "k_cache", "v_cache", "kv_indptr", "kv_indices", "kv_last_page_len", "qo_indptr",
    "append_indptr", "window_left", "window_right", "attention_chunk", "logits_soft_cap",
    "alibi_slopes", "sinks",
};

int proto_job_keys_check(const msgpack_object *params, char *err, size_t len)
{
    if (!params || params->type != MSGPACK_OBJECT_MAP)
        return 0;
    for (uint32_t i = 0; i < params->via.map.size; i++) {
        const msgpack_object *k = &params->via.map.ptr[i].key;
        bool known = false;
        for (size_t j = 0; j < sizeof job_keys / sizeof *job_keys && !known; j++)
            known = k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(job_keys[j]) &&
                    memcmp(k->via.str.ptr, job_keys[j], k->via.str.size) == 0;
        if (!known) {
            char name[48] = "(not a string)";
            if (k->type == MSGPACK_OBJECT_STR) {
                size_t n = k->via.str.size < sizeof name - 1 ? k->via.str.size : sizeof name - 1;
                n = proto_utf8_repair(k->via.str.ptr, n, name, sizeof name - 1);
                name[n] = '\0';
            }
            snprintf(err, len, "unknown key '%s': a job's keys may change its result, so this "
                     "gllmd refuses a key it does not know", name);
            return GLLM_EPARAM;
        }
    }
    return 0;
}
