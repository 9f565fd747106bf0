/* Message encoding into a fixed-capacity buffer: gllm's msgpack-rpc writers. */
#include <string.h>

#include "proto.h"

/* msgpack-c's packer hands over every header and value separately, mostly a few bytes each:
 * those are copied inline rather than through a call to memcpy. */
static int buf_write(void *data, const char *src, size_t len)
{
    struct proto_buf *b = data;
    if (b->overflow || len > sizeof b->data - b->len) {
        b->overflow = true;
        return -1;
    }
    char *dst = b->data + b->len;
    if (len <= 16)
        for (size_t i = 0; i < len; i++)
            dst[i] = src[i];
    else
        memcpy(dst, src, len);
    b->len += len;
    return 0;
}

void proto_buf_init(struct proto_buf *b)
{
    b->len = 0;
    b->overflow = false;
    msgpack_packer_init(&b->pk, b, buf_write);
}

void proto_pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    char fixed[PROTO_MAX_STRING];
    if (!proto_utf8_valid(s, n)) {
        n = proto_utf8_repair(s, n, fixed, sizeof fixed);
        s = fixed;
    }
    if (n < 32) {               /* a fixstr (every field name): header and body in one write */
        char one[32];
        one[0] = (char)(0xa0 | n);
        memcpy(one + 1, s, n);
        pk->callback(pk->data, one, n + 1);
        return;
    }
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

void proto_pack_kv_str(msgpack_packer *pk, const char *key, const char *val)
{
    proto_pack_str(pk, key);
    proto_pack_str(pk, val);
}

void proto_pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t val)
{
    proto_pack_str(pk, key);
    msgpack_pack_uint64(pk, val);
}

void proto_pack_kv_i64(msgpack_packer *pk, const char *key, int64_t val)
{
    proto_pack_str(pk, key);
    msgpack_pack_int64(pk, val);
}

void proto_pack_kv_f64(msgpack_packer *pk, const char *key, double val)
{
    proto_pack_str(pk, key);
    msgpack_pack_double(pk, val);
}

void proto_pack_kv_bool(msgpack_packer *pk, const char *key, bool val)
{
    proto_pack_str(pk, key);
    if (val)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
}

void proto_pack_request(msgpack_packer *pk, uint64_t id, const char *method)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint8(pk, PROTO_REQUEST);
    msgpack_pack_uint64(pk, id);
    proto_pack_str(pk, method);
}

void proto_pack_notify(msgpack_packer *pk, const char *method)
{
    msgpack_pack_array(pk, 3);
    msgpack_pack_uint8(pk, PROTO_NOTIFY);
    proto_pack_str(pk, method);
}

void proto_pack_result(msgpack_packer *pk, uint64_t id)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint8(pk, PROTO_RESPONSE);
    msgpack_pack_uint64(pk, id);
    msgpack_pack_nil(pk);
}

void proto_pack_error(msgpack_packer *pk, int64_t id, int code, const char *message)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint8(pk, PROTO_RESPONSE);
    if (id < 0)
        msgpack_pack_nil(pk);
    else
        msgpack_pack_uint64(pk, (uint64_t)id);
    msgpack_pack_map(pk, 2);
    proto_pack_kv_i64(pk, "code", code);
    char msg[PROTO_MAX_ERRMSG + 1];
    size_t n = strlen(message);
    if (n > PROTO_MAX_ERRMSG)
        n = PROTO_MAX_ERRMSG;
    memcpy(msg, message, n);
    msg[n] = '\0';
    proto_pack_kv_str(pk, "message", msg);
    msgpack_pack_nil(pk);
}

static void pack_dims(msgpack_packer *pk, const char *key, uint32_t rank, const int64_t *dims)
{
    proto_pack_str(pk, key);
    msgpack_pack_array(pk, rank);
    for (uint32_t i = 0; i < rank; i++)
        msgpack_pack_uint64(pk, (uint64_t)dims[i]);
}

void proto_pack_tensor(msgpack_packer *pk, const struct proto_tensor *t)
{
    msgpack_pack_map(pk, 5);
    proto_pack_kv_u64(pk, t->device ? "dtensor" : "arena", t->arena);
    proto_pack_kv_u64(pk, "offset", t->offset);
    proto_pack_kv_str(pk, "dtype", proto_dtype_name(t->dtype));
    pack_dims(pk, "shape", t->rank, t->shape);
    pack_dims(pk, "strides", t->rank, t->strides);
}

static void pack_counter(msgpack_packer *pk, const char *key, const struct proto_counter *c)
{
    proto_pack_str(pk, key);
    msgpack_pack_map(pk, 3 + (c->timeout_ms > 0));
    proto_pack_kv_u64(pk, "arena", c->arena);
    proto_pack_kv_u64(pk, "offset", c->offset);
    proto_pack_kv_u64(pk, "value", c->value);
    if (c->timeout_ms)
        proto_pack_kv_u64(pk, "timeout_ms", c->timeout_ms);
}

/* The keys every job takes (struct proto_job): device when not 0, counters when set. */
static void pack_job_keys(msgpack_packer *pk, uint64_t device, const struct proto_counter *wait,
                          const struct proto_counter *signal)
{
    if (wait->set)
        pack_counter(pk, "wait", wait);
    if (signal->set)
        pack_counter(pk, "signal", signal);
    if (device)
        proto_pack_kv_u64(pk, "device", device);
}

void proto_pack_attention(msgpack_packer *pk, const struct proto_attention *a)
{
    msgpack_pack_map(pk, 5 + a->has_lse + a->has_scale + (a->repeat > 1) + a->wait.set +
                             a->signal.set + (a->device > 0) + proto_variant_keys(&a->variant));
    pack_job_keys(pk, a->device, &a->wait, &a->signal);
    proto_pack_str(pk, "q");
    proto_pack_tensor(pk, &a->q);
    proto_pack_str(pk, "k");
    proto_pack_tensor(pk, &a->k);
    proto_pack_str(pk, "v");
    proto_pack_tensor(pk, &a->v);
    proto_pack_str(pk, "out");
    proto_pack_tensor(pk, &a->out);
    if (a->has_lse) {
        proto_pack_str(pk, "lse");
        proto_pack_tensor(pk, &a->lse);
    }
    proto_pack_kv_bool(pk, "causal", a->causal);
    if (a->has_scale)
        proto_pack_kv_f64(pk, "scale", a->scale);
    if (a->repeat > 1)
        proto_pack_kv_u64(pk, "repeat", a->repeat);
    proto_pack_variant(pk, &a->variant);
}

void proto_pack_paged(msgpack_packer *pk, const struct proto_paged *p)
{
    const bool append = p->op == PROTO_KV_APPEND, prefill = p->op == PROTO_PREFILL;
    msgpack_pack_map(pk, 5 + (append ? 3 : 2 + prefill + p->has_scale +
                                      proto_variant_keys(&p->variant)) +
                             p->wait.set + p->signal.set + (p->device > 0));
    pack_job_keys(pk, p->device, &p->wait, &p->signal);
    const struct { const char *key; const struct proto_tensor *t; bool on; } fields[] = {
        {"k_cache", &p->k_cache, true},
        {"v_cache", &p->v_cache, true},
        {"kv_indptr", &p->kv_indptr, true},
        {"kv_indices", &p->kv_indices, true},
        {"kv_last_page_len", &p->kv_last_page_len, true},
        {"q", &p->q, !append},
        {"out", &p->out, !append},
        {"qo_indptr", &p->qo_indptr, prefill},
        {"k", &p->k, append},
        {"v", &p->v, append},
        {"append_indptr", &p->append_indptr, append},
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (fields[i].on) {
            proto_pack_str(pk, fields[i].key);
            proto_pack_tensor(pk, fields[i].t);
        }
    if (!append && p->has_scale)
        proto_pack_kv_f64(pk, "scale", p->scale);
    if (!append)
        proto_pack_variant(pk, &p->variant);
}

void proto_pack_copy(msgpack_packer *pk, const struct proto_copy *c)
{
    msgpack_pack_map(pk, 6 + c->wait.set + c->signal.set);
    proto_pack_kv_u64(pk, "dtensor", c->dtensor);
    proto_pack_kv_u64(pk, "offset", c->offset);
    proto_pack_kv_u64(pk, "arena", c->arena);
    proto_pack_kv_u64(pk, "arena_offset", c->arena_offset);
    proto_pack_kv_u64(pk, "bytes", c->bytes);
    proto_pack_kv_bool(pk, "to_device", c->to_device);
    pack_job_keys(pk, 0, &c->wait, &c->signal);
}
