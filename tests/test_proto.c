/* Codec tests: round-trips, every malformed-input class, limits, tensor spans, fp16 conversions. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gllm/elem.h"
#include "info.h"
#include "proto.h"

static struct proto_buf buf;

static struct proto_tensor sample_tensor(uint32_t arena, gllm_dtype dt)
{
    struct proto_tensor t = {.arena = arena, .offset = 256, .dtype = dt, .rank = 4,
                             .shape = {2, 8, 100, 64}};
    proto_tensor_contiguous(&t);
    return t;
}

/* Field by field: struct padding is not part of the value. */
static void assert_tensor_equal(const struct proto_tensor *a, const struct proto_tensor *b)
{
    assert_int_equal(a->arena, b->arena);
    assert_int_equal(a->offset, b->offset);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->rank, b->rank);
    assert_memory_equal(a->shape, b->shape, a->rank * sizeof a->shape[0]);
    assert_memory_equal(a->strides, b->strides, a->rank * sizeof a->strides[0]);
}

static void test_request_round_trip(void **state)
{
    (void)state;
    struct proto_attention a = {.q = sample_tensor(1, GLLM_DTYPE_F16), .k = sample_tensor(2, GLLM_DTYPE_F16),
                                .v = sample_tensor(2, GLLM_DTYPE_F16), .out = sample_tensor(3, GLLM_DTYPE_F16),
                                .lse = sample_tensor(3, GLLM_DTYPE_F32), .has_lse = true,
                                .causal = true, .has_scale = true, .scale = 0.125, .repeat = 7};
    a.lse.rank = 3;
    a.k.strides[2] = 512;   /* a strided view survives the trip */
    proto_buf_init(&buf);
    proto_pack_request(&buf.pk, 77, "attention");
    proto_pack_attention(&buf.pk, &a);
    assert_false(buf.overflow);

    struct proto_msg m;
    int64_t id = -1;
    assert_int_equal(proto_decode(buf.data, buf.len, &m, &id), 0);
    assert_int_equal(m.kind, PROTO_REQUEST);
    assert_int_equal(id, 77);
    assert_string_equal(m.method, "attention");
    struct proto_attention b;
    assert_int_equal(proto_decode_attention(m.params, &b), 0);
    assert_tensor_equal(&a.q, &b.q);
    assert_tensor_equal(&a.k, &b.k);
    assert_tensor_equal(&a.v, &b.v);
    assert_tensor_equal(&a.out, &b.out);
    assert_tensor_equal(&a.lse, &b.lse);
    assert_int_equal(b.lse.rank, 3);
    assert_true(b.has_lse && b.causal && b.has_scale);
    assert_true(b.scale == 0.125);
    assert_int_equal(b.repeat, 7);
    proto_msg_free(&m);
    /* Once is the default and goes without the field. */
    a.repeat = 1;
    proto_buf_init(&buf);
    proto_pack_request(&buf.pk, 78, "attention");
    proto_pack_attention(&buf.pk, &a);
    assert_int_equal(proto_decode(buf.data, buf.len, &m, &id), 0);
    assert_null(proto_map_get(m.params, "repeat"));
    assert_int_equal(proto_decode_attention(m.params, &b), 0);
    assert_int_equal(b.repeat, 0);
    proto_msg_free(&m);
}

/* Packs p as a request, decodes it back as operation op. */
static int paged_trip(const struct proto_paged *p, enum proto_paged_op op, struct proto_paged *out)
{
    proto_buf_init(&buf);
    proto_pack_request(&buf.pk, 5, "x");
    proto_pack_paged(&buf.pk, p);
    assert_false(buf.overflow);
    struct proto_msg m;
    int64_t id;
    assert_int_equal(proto_decode(buf.data, buf.len, &m, &id), 0);
    int r = proto_decode_paged(m.params, op, out);
    proto_msg_free(&m);
    return r;
}

static void test_paged_round_trip(void **state)
{
    (void)state;
    struct proto_tensor idx = sample_tensor(4, GLLM_DTYPE_I32);
    idx.rank = 1;
    struct proto_paged a = {.op = PROTO_PREFILL, .k_cache = sample_tensor(1, GLLM_DTYPE_BF16),
                            .v_cache = sample_tensor(2, GLLM_DTYPE_BF16), .kv_indptr = idx,
                            .kv_indices = idx, .kv_last_page_len = idx, .qo_indptr = idx,
                            .q = sample_tensor(3, GLLM_DTYPE_BF16), .out = sample_tensor(3, GLLM_DTYPE_BF16),
                            .has_scale = true, .scale = 0.5};
    a.kv_indices.offset = 1024;
    a.v_cache.device = a.k_cache.device = true;
    struct proto_paged b;
    assert_int_equal(paged_trip(&a, PROTO_PREFILL, &b), 0);
    assert_tensor_equal(&a.k_cache, &b.k_cache);
    assert_true(b.k_cache.device && b.v_cache.device && !b.q.device);
    assert_tensor_equal(&a.kv_indices, &b.kv_indices);
    assert_tensor_equal(&a.qo_indptr, &b.qo_indptr);
    assert_int_equal(b.kv_indptr.dtype, GLLM_DTYPE_I32);
    assert_true(b.has_scale && b.scale == 0.5);
    /* Decode takes no qo_indptr: a field the operation does not take is refused. */
    assert_int_equal(paged_trip(&a, PROTO_DECODE, &b), GLLM_EPARAM);
    /* kv_append needs k, v and append_indptr. */
    assert_int_equal(paged_trip(&a, PROTO_KV_APPEND, &b), GLLM_EPARAM);
    struct proto_paged c = {.op = PROTO_KV_APPEND, .k_cache = a.k_cache, .v_cache = a.v_cache,
                            .kv_indptr = idx, .kv_indices = idx, .kv_last_page_len = idx,
                            .k = a.q, .v = a.q, .append_indptr = idx};
    assert_int_equal(paged_trip(&c, PROTO_KV_APPEND, &b), 0);
    assert_tensor_equal(&c.append_indptr, &b.append_indptr);
    assert_false(b.has_scale);
}

/* A request whose params are what fill packs (a map of n pairs), decoded into *m. */
static void job_params(struct proto_msg *m, uint32_t n, void (*fill)(msgpack_packer *pk))
{
    proto_buf_init(&buf);
    proto_pack_request(&buf.pk, 9, "attention");
    msgpack_pack_map(&buf.pk, n);
    fill(&buf.pk);
    int64_t id;
    assert_int_equal(proto_decode(buf.data, buf.len, m, &id), 0);
}

static void pack_counter_map(msgpack_packer *pk, const char *key, uint64_t arena, uint64_t offset,
                             uint64_t value, int64_t timeout_ms)
{
    proto_pack_str(pk, key);
    msgpack_pack_map(pk, 3 + (timeout_ms >= 0));
    proto_pack_kv_u64(pk, "arena", arena);
    proto_pack_kv_u64(pk, "offset", offset);
    proto_pack_kv_u64(pk, "value", value);
    if (timeout_ms >= 0)
        proto_pack_kv_u64(pk, "timeout_ms", (uint64_t)timeout_ms);
}

static void wait_not_map(msgpack_packer *pk) { proto_pack_kv_u64(pk, "wait", 1); }
static void wait_value_33(msgpack_packer *pk) { pack_counter_map(pk, "wait", 1, 0, 1ull << 32, -1); }
static void wait_arena_33(msgpack_packer *pk) { pack_counter_map(pk, "wait", 1ull << 32, 0, 1, -1); }
static void wait_timeout_0(msgpack_packer *pk) { pack_counter_map(pk, "wait", 1, 0, 1, 0); }
static void wait_timeout_past(msgpack_packer *pk)
{
    pack_counter_map(pk, "wait", 1, 0, 1, PROTO_WAIT_TIMEOUT_MS_MAX + 1);
}
static void wait_timeout_max(msgpack_packer *pk)
{
    pack_counter_map(pk, "wait", 1, 0, 1, PROTO_WAIT_TIMEOUT_MS_MAX);
}
static void signal_timeout_0(msgpack_packer *pk) { pack_counter_map(pk, "signal", 1, 4, 1, 0); }
static void signal_no_offset(msgpack_packer *pk)
{
    proto_pack_str(pk, "signal");
    msgpack_pack_map(pk, 2);
    proto_pack_kv_u64(pk, "arena", 1);
    proto_pack_kv_u64(pk, "value", 1);
}
static void device_str(msgpack_packer *pk) { proto_pack_kv_str(pk, "device", "0"); }
static void device_nil(msgpack_packer *pk) { proto_pack_str(pk, "device"), msgpack_pack_nil(pk); }
static void counters_nil(msgpack_packer *pk)
{
    proto_pack_str(pk, "wait"), msgpack_pack_nil(pk);
    proto_pack_str(pk, "signal"), msgpack_pack_nil(pk);
}
/* A bad wait, a good signal, a device that is no uint: what a refused job's signal reads. */
static void refused_mix(msgpack_packer *pk)
{
    wait_not_map(pk);
    pack_counter_map(pk, "signal", 3, 8, 9, -1);
    device_str(pk);
}

/* The keys every job takes: each rule broken gives its code and words, as the daemon read
 * them before the codec did. */
static void test_job_keys(void **state)
{
    (void)state;
    static const struct {
        uint32_t n;
        void (*fill)(msgpack_packer *pk);
        int code;
    } cases[] = {
        {1, wait_not_map, GLLM_EPARAM},      {1, wait_value_33, GLLM_EPARAM},
        {1, wait_arena_33, GLLM_ENOARENA},   {1, wait_timeout_0, GLLM_EPARAM},
        {1, wait_timeout_past, GLLM_EPARAM}, {1, wait_timeout_max, 0},
        {1, signal_timeout_0, 0},            {1, signal_no_offset, GLLM_EPARAM},
        {1, device_str, GLLM_EPARAM},        {1, device_nil, GLLM_EPARAM},
        {2, counters_nil, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct proto_msg m;
        job_params(&m, cases[i].n, cases[i].fill);
        struct proto_job j = {.device = 77};
        const char *why = NULL;
        int r = proto_decode_job(m.params, true, &j, &why);
        if (r != cases[i].code)
            fail_msg("case %zu: %d, wanted %d", i, r, cases[i].code);
        if (r < 0) {
            assert_non_null(why);
            assert_int_equal(j.device, 77);           /* untouched on failure */
            struct proto_attention a;                 /* read first by the job's decoder */
            assert_int_equal(proto_decode_attention(m.params, &a), r);
        } else {
            assert_false(j.signal.set && j.signal.timeout_ms);   /* a signal has none */
        }
        proto_msg_free(&m);
    }
    struct proto_msg m;
    job_params(&m, 1, wait_timeout_max);
    struct proto_job j;
    assert_int_equal(proto_decode_job(m.params, true, &j, NULL), 0);
    assert_true(j.wait.set && !j.signal.set);
    assert_int_equal(j.wait.timeout_ms, PROTO_WAIT_TIMEOUT_MS_MAX);
    proto_msg_free(&m);
    /* dtensor_copy takes no device: the key is not read. */
    job_params(&m, 1, device_str);
    assert_int_equal(proto_decode_job(m.params, false, &j, NULL), 0);
    proto_msg_free(&m);
    /* A refused job's signal is read alone. */
    job_params(&m, 3, refused_mix);
    uint64_t dev = 5;
    struct proto_counter sig;
    assert_int_equal(proto_decode_job_signal(m.params, &dev, &sig), 0);
    assert_int_equal(dev, 0);
    assert_true(sig.set);
    assert_int_equal(sig.arena, 3);
    assert_int_equal(sig.offset, 8);
    assert_int_equal(sig.value, 9);
    proto_msg_free(&m);
    job_params(&m, 1, signal_no_offset);
    assert_int_equal(proto_decode_job_signal(m.params, &dev, &sig), GLLM_EPARAM);
    proto_msg_free(&m);
}

static void assert_counter_equal(const struct proto_counter *a, const struct proto_counter *b)
{
    assert_int_equal(a->set, b->set);
    assert_int_equal(a->arena, b->arena);
    assert_int_equal(a->offset, b->offset);
    assert_int_equal(a->value, b->value);
    assert_int_equal(a->timeout_ms, b->timeout_ms);
}

/* Device, wait and signal travel with attention, the paged jobs and dtensor_copy. */
static void test_job_keys_round_trip(void **state)
{
    (void)state;
    const struct proto_counter wait = {.set = true, .arena = 4, .offset = 60000, .value = 7,
                                       .timeout_ms = 50},
                               signal = {.set = true, .arena = 4, .offset = 60004, .value = 8};
    struct proto_attention a = {.q = sample_tensor(1, GLLM_DTYPE_F16), .k = sample_tensor(2, GLLM_DTYPE_F16),
                                .v = sample_tensor(2, GLLM_DTYPE_F16), .out = sample_tensor(3, GLLM_DTYPE_F16),
                                .device = 3, .wait = wait, .signal = signal};
    proto_buf_init(&buf);
    proto_pack_request(&buf.pk, 1, "attention");
    proto_pack_attention(&buf.pk, &a);
    struct proto_msg m;
    int64_t id;
    assert_int_equal(proto_decode(buf.data, buf.len, &m, &id), 0);
    struct proto_attention b;
    assert_int_equal(proto_decode_attention(m.params, &b), 0);
    assert_int_equal(b.device, 3);
    assert_counter_equal(&b.wait, &wait);
    assert_counter_equal(&b.signal, &signal);
    proto_msg_free(&m);
    /* Device 0 goes without the key, as before there was one. */
    a.device = 0;
    proto_buf_init(&buf);
    proto_pack_request(&buf.pk, 2, "attention");
    proto_pack_attention(&buf.pk, &a);
    assert_int_equal(proto_decode(buf.data, buf.len, &m, &id), 0);
    assert_null(proto_map_get(m.params, "device"));
    proto_msg_free(&m);

    struct proto_tensor idx = sample_tensor(4, GLLM_DTYPE_I32);
    idx.rank = 1;
    struct proto_paged p = {.op = PROTO_DECODE, .k_cache = sample_tensor(1, GLLM_DTYPE_BF16),
                            .v_cache = sample_tensor(2, GLLM_DTYPE_BF16), .kv_indptr = idx,
                            .kv_indices = idx, .kv_last_page_len = idx,
                            .q = sample_tensor(3, GLLM_DTYPE_BF16), .out = sample_tensor(3, GLLM_DTYPE_BF16),
                            .device = 1, .signal = signal};
    struct proto_paged q;
    assert_int_equal(paged_trip(&p, PROTO_DECODE, &q), 0);
    assert_int_equal(q.device, 1);
    assert_false(q.wait.set);
    assert_counter_equal(&q.signal, &signal);

    const struct proto_copy c = {.dtensor = 2, .arena = 3, .offset = 16, .arena_offset = 32,
                                 .bytes = 4096, .to_device = true, .wait = wait};
    proto_buf_init(&buf);
    proto_pack_request(&buf.pk, 3, "dtensor_copy");
    proto_pack_copy(&buf.pk, &c);
    assert_int_equal(proto_decode(buf.data, buf.len, &m, &id), 0);
    struct proto_copy d;
    assert_int_equal(proto_decode_copy(m.params, &d), 0);
    assert_int_equal(d.dtensor, 2);
    assert_int_equal(d.arena, 3);
    assert_int_equal(d.offset, 16);
    assert_int_equal(d.arena_offset, 32);
    assert_int_equal(d.bytes, 4096);
    assert_true(d.to_device);
    assert_counter_equal(&d.wait, &wait);
    assert_false(d.signal.set);
    proto_msg_free(&m);
}

static void test_response_round_trip(void **state)
{
    (void)state;
    proto_buf_init(&buf);
    proto_pack_result(&buf.pk, 5);
    msgpack_pack_map(&buf.pk, 1);
    proto_pack_kv_u64(&buf.pk, "kernel_ns", 123456789);
    struct proto_msg m;
    assert_int_equal(proto_decode(buf.data, buf.len, &m, NULL), 0);
    assert_int_equal(m.kind, PROTO_RESPONSE);
    assert_int_equal(m.error_code, 0);
    uint64_t ns = 0;
    assert_int_equal(proto_get_u64(m.result, "kernel_ns", true, &ns), 0);
    assert_int_equal(ns, 123456789);
    proto_msg_free(&m);

    proto_buf_init(&buf);
    proto_pack_error(&buf.pk, 9, GLLM_EBOUNDS, "q: outside arena");
    assert_int_equal(proto_decode(buf.data, buf.len, &m, NULL), 0);
    assert_int_equal(m.error_code, GLLM_EBOUNDS);
    assert_string_equal(m.error_message, "q: outside arena");
    proto_msg_free(&m);

    proto_buf_init(&buf);
    proto_pack_error(&buf.pk, -1, GLLM_EMALFORMED, "x");   /* no id: nil */
    int64_t id = -1;
    assert_int_equal(proto_decode(buf.data, buf.len, &m, &id), 0);
    assert_int_equal(id, -1);
    assert_true(m.id == PROTO_NO_ID);
    assert_int_equal(m.error_code, GLLM_EMALFORMED);
    proto_msg_free(&m);
}

static int decode_bytes(const void *p, size_t n)
{
    struct proto_msg m;
    int r = proto_decode(p, n, &m, NULL);
    if (r == 0)
        proto_msg_free(&m);
    return r;
}

static void test_malformed(void **state)
{
    (void)state;
    /* Each is a class of garbage a hostile or buggy client might send. */
    assert_int_equal(decode_bytes("", 0), GLLM_EMALFORMED);
    assert_int_equal(decode_bytes("\xc1", 1), GLLM_EMALFORMED);             /* never-used byte */
    assert_int_equal(decode_bytes("\x94\x00\x01", 3), GLLM_EMALFORMED);     /* truncated array */
    assert_int_equal(decode_bytes("\xda\xff\xff" "ab", 5), GLLM_ELIMIT);    /* string over the limit */
    assert_int_equal(decode_bytes("\xd9\x05" "ab", 4), GLLM_EMALFORMED);    /* truncated string */
    assert_int_equal(decode_bytes("\x90\x90", 2), GLLM_EMALFORMED);         /* trailing bytes */
    assert_int_equal(decode_bytes("\x01", 1), GLLM_EMALFORMED);             /* not an array */
    assert_int_equal(decode_bytes("\x92\x00\x01", 3), GLLM_EMALFORMED);     /* too short envelope */
    assert_int_equal(decode_bytes("\x94\x07\x01\xa1x\x80", 6), GLLM_EMALFORMED); /* kind 7 */
    assert_int_equal(decode_bytes("\x94\x00\xff\xa1x\x80", 6), GLLM_EMALFORMED); /* negative id */
    assert_int_equal(decode_bytes("\x94\x00\x01\x05\x80", 5), GLLM_EMALFORMED);  /* method not str */
    assert_int_equal(decode_bytes("\x94\x00\x01\xa1x\x05", 6), GLLM_EPARAM);     /* params not map */
    assert_int_equal(decode_bytes("\x81\x01\x02", 3), GLLM_EMALFORMED);     /* non-string map key */
    assert_int_equal(decode_bytes("\xdd\xff\xff\xff\xff", 5), GLLM_ELIMIT); /* 4G-entry array */
    assert_int_equal(decode_bytes("\xdf\x00\x01\x00\x00", 5), GLLM_ELIMIT); /* 65536-entry map */
    assert_int_equal(decode_bytes("\x94\x00\x01\xa1x\x80", 6), 0);          /* and a good one */
}

static void test_depth_and_size_limits(void **state)
{
    (void)state;
    unsigned char deep[64];
    memset(deep, 0x91, sizeof deep);   /* [[[[...]]]] */
    deep[sizeof deep - 1] = 0x90;
    assert_int_equal(proto_scan(deep, sizeof deep), GLLM_ELIMIT);
    assert_int_equal(proto_scan(deep + sizeof deep - PROTO_MAX_DEPTH, PROTO_MAX_DEPTH), 0);

    size_t big = PROTO_MAX_MESSAGE + 1;
    unsigned char *p = calloc(1, big);
    assert_non_null(p);
    assert_int_equal(proto_scan(p, big), GLLM_ETOOBIG);
    free(p);

    /* The encoder refuses to produce what the decoder would refuse. */
    proto_buf_init(&buf);
    static char s[PROTO_MAX_MESSAGE];
    memset(s, 'a', sizeof s - 1);
    proto_pack_str(&buf.pk, s);
    assert_true(buf.overflow);
}

static void test_method_name_limits(void **state)
{
    (void)state;
    char name[PROTO_MAX_METHOD + 2];
    memset(name, 'm', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    proto_buf_init(&buf);
    proto_pack_request(&buf.pk, 3, name);
    msgpack_pack_map(&buf.pk, 0);
    struct proto_msg m;
    int64_t id = -1;
    assert_int_equal(proto_decode(buf.data, buf.len, &m, &id), GLLM_EMETHOD);
    assert_int_equal(id, 3);   /* still known, so the error can be answered */
}

static void test_field_types(void **state)
{
    (void)state;
    proto_buf_init(&buf);
    msgpack_pack_map(&buf.pk, 4);
    proto_pack_kv_str(&buf.pk, "s", "text");
    proto_pack_kv_i64(&buf.pk, "neg", -5);
    proto_pack_kv_bool(&buf.pk, "b", true);
    proto_pack_kv_f64(&buf.pk, "f", 2.5);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, buf.data, buf.len, NULL), MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *map = &u.data;
    uint64_t x;
    int64_t y;
    bool b;
    double f;
    char s[3];
    assert_int_equal(proto_get_u64(map, "neg", true, &x), GLLM_EPARAM);
    assert_int_equal(proto_get_i64(map, "neg", true, &y), 0);
    assert_int_equal(y, -5);
    assert_int_equal(proto_get_u64(map, "missing", true, &x), GLLM_EPARAM);
    assert_int_equal(proto_get_u64(map, "missing", false, &x), 0);
    assert_int_equal(proto_get_bool(map, "s", true, &b), GLLM_EPARAM);
    assert_int_equal(proto_get_f64(map, "f", true, &f), 0);
    assert_true(f == 2.5);
    assert_int_equal(proto_get_str(map, "s", true, s, sizeof s), GLLM_EPARAM); /* does not fit */
    msgpack_unpacked_destroy(&u);
}

/* Builds the packet's tree with proto_tree_build and with msgpack-c's unpacker: the two agree. */
static void assert_tree_matches_msgpack(const void *data, size_t len)
{
    assert_int_equal(proto_scan(data, len), 0);
    msgpack_object ours;
    void *nodes;
    assert_int_equal(proto_tree_build(data, len, &ours, &nodes), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, data, len, NULL), MSGPACK_UNPACK_SUCCESS);
    assert_true(msgpack_object_equal(ours, u.data));
    msgpack_unpacked_destroy(&u);
    free(nodes);
}

static void test_tree_every_type(void **state)
{
    (void)state;
    /* Every format msgpack has, each width of each, and signed encodings of values that are
     * not negative (which msgpack-c reads as positive integers). */
    static const unsigned char packet[] = {
        0xdc, 0x00, 24,                                    /* array 16 of 24 */
        0x05, 0xe0, 0xff, 0xc0, 0xc2, 0xc3,                /* fixints, nil, false, true */
        0xcc, 0xff, 0xcd, 0x12, 0x34, 0xce, 0x80, 0, 0, 1,
        0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xd0, 0x80, 0xd1, 0x7f, 0xff, 0xd2, 0xff, 0xff, 0xfe, 0x00, 0xd1, 0x00, 0x00,
        0xdc, 0x00, 0x03,                                   /* array 16 of 3 */
        0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0, 0xd3, 0, 0, 0, 0, 0, 0, 0, 9, 0xd0, 0x05,
        0xca, 0x40, 0x20, 0x00, 0x00,                       /* float32 2.5 */
        0xcb, 0xbf, 0xf0, 0, 0, 0, 0, 0, 0,                 /* float64 -1 */
        0xde, 0x00, 0x02,                                   /* map 16 of 2 */
        0xa1, 'a', 0xd9, 0x03, 'x', 'y', 'z',               /* fixstr, str8 */
        0xda, 0x00, 0x00, 0x80,                             /* str16, empty: key of {} */
        0xc4, 0x02, 1, 2, 0xc5, 0x00, 0x01, 7,              /* bin8, bin16 */
        0xd4, 0x01, 0xaa, 0xd5, 0xfe, 1, 2,                 /* fixext 1, 2 */
        0xc7, 0x03, 0x05, 1, 2, 3,                          /* ext8 */
        0xd8, 0x10, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, /* fixext 16 */
    };
    assert_tree_matches_msgpack(packet, sizeof packet);

    /* A request as the client sends it. */
    struct proto_paged p = {.op = PROTO_PREFILL, .has_scale = true, .scale = 0.125};
    struct proto_tensor *all[] = {&p.k_cache, &p.v_cache, &p.kv_indptr, &p.kv_indices,
                                  &p.kv_last_page_len, &p.q, &p.out, &p.qo_indptr};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        *all[i] = sample_tensor((uint32_t)i + 1, GLLM_DTYPE_BF16);
    p.kv_indices.device = true;
    proto_buf_init(&buf);
    proto_pack_request(&buf.pk, (uint64_t)1 << 40, "attention_prefill");
    proto_pack_paged(&buf.pk, &p);
    assert_tree_matches_msgpack(buf.data, buf.len);
}

/* Building a tree fails where the scan fails, with the scan's code, and allocates nothing
 * it keeps: headers claiming more than the packet holds, limits, truncation, leftovers. */
static void test_tree_build_fails_as_scan(void **state)
{
    (void)state;
    unsigned char deep[PROTO_MAX_DEPTH + 2];    /* 17 arrays, one in another */
    memset(deep, 0x91, sizeof deep - 1);
    deep[sizeof deep - 1] = 0x01;
    static const unsigned char big_claim[] = {0xdd, 0, 0, 0x01, 0x2c, 0x01, 0x02}; /* 300 */
    static const unsigned char claim_then_deep[] = {0xdc, 0, 200, 0x91, 0x91, 0x91, 0x91, 0x91,
                                                    0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91,
                                                    0x91, 0x91, 0x91, 0x91, 0x91, 0x01};
    static const unsigned char map_claim[] = {0xde, 0, 100, 0xa1, 'k', 0x01};
    static const unsigned char long_string[] = {0xda, 0x20, 0x00, 'x'};
    static const unsigned char number_key[] = {0x81, 0x01, 0x02};
    static const unsigned char leftover[] = {0x01, 0x02};
    static const unsigned char never_used[] = {0xc1};
    const struct {
        const void *p;
        size_t n;
        int rc;
    } cases[] = {
        {deep, sizeof deep, GLLM_ELIMIT},
        {big_claim, sizeof big_claim, GLLM_ELIMIT},
        {claim_then_deep, sizeof claim_then_deep, GLLM_ELIMIT},
        {map_claim, sizeof map_claim, GLLM_EMALFORMED},
        {long_string, sizeof long_string, GLLM_ELIMIT},
        {number_key, sizeof number_key, GLLM_EMALFORMED},
        {leftover, sizeof leftover, GLLM_EMALFORMED},
        {never_used, sizeof never_used, GLLM_EMALFORMED},
        {"", 0, GLLM_EMALFORMED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        assert_int_equal(proto_scan(cases[i].p, cases[i].n), cases[i].rc);
        msgpack_object root;
        void *nodes = &root;
        assert_int_equal(proto_tree_build(cases[i].p, cases[i].n, &root, &nodes), cases[i].rc);
        assert_null(nodes);
    }
}

static int decode_tensor_map(void (*fill)(msgpack_packer *pk), struct proto_tensor *t)
{
    proto_buf_init(&buf);
    fill(&buf.pk);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    msgpack_unpack_next(&u, buf.data, buf.len, NULL);
    int r = proto_decode_tensor(&u.data, t);
    msgpack_unpacked_destroy(&u);
    return r;
}

static void tensor_bad_dtype(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 4);
    proto_pack_kv_u64(pk, "arena", 1);
    proto_pack_kv_u64(pk, "offset", 0);
    proto_pack_kv_str(pk, "dtype", "f64");
    proto_pack_str(pk, "shape");
    msgpack_pack_array(pk, 0);
}

static void tensor_rank_9(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 4);
    proto_pack_kv_u64(pk, "arena", 1);
    proto_pack_kv_u64(pk, "offset", 0);
    proto_pack_kv_str(pk, "dtype", "f32");
    proto_pack_str(pk, "shape");
    msgpack_pack_array(pk, 9);
    for (int i = 0; i < 9; i++)
        msgpack_pack_uint8(pk, 1);
}

static void tensor_stride_mismatch(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 5);
    proto_pack_kv_u64(pk, "arena", 1);
    proto_pack_kv_u64(pk, "offset", 0);
    proto_pack_kv_str(pk, "dtype", "bf16");
    proto_pack_str(pk, "shape");
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint8(pk, 2);
    msgpack_pack_uint8(pk, 2);
    proto_pack_str(pk, "strides");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint8(pk, 1);
}

static void tensor_negative_dim(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 4);
    proto_pack_kv_u64(pk, "arena", 1);
    proto_pack_kv_u64(pk, "offset", 0);
    proto_pack_kv_str(pk, "dtype", "f16");
    proto_pack_str(pk, "shape");
    msgpack_pack_array(pk, 1);
    msgpack_pack_int8(pk, -3);
}

static void test_tensor_decoding(void **state)
{
    (void)state;
    struct proto_tensor t;
    assert_int_equal(decode_tensor_map(tensor_bad_dtype, &t), GLLM_EDTYPE);
    assert_int_equal(decode_tensor_map(tensor_rank_9, &t), GLLM_ELIMIT);
    assert_int_equal(decode_tensor_map(tensor_stride_mismatch, &t), GLLM_EPARAM);
    assert_int_equal(decode_tensor_map(tensor_negative_dim, &t), GLLM_EPARAM);
}

static void test_tensor_span(void **state)
{
    (void)state;
    struct proto_tensor t = {.offset = 100, .dtype = GLLM_DTYPE_F16, .rank = 2, .shape = {3, 4}};
    proto_tensor_contiguous(&t);
    uint64_t first, end;
    assert_int_equal(proto_tensor_span(&t, &first, &end), 0);
    assert_int_equal(first, 100);
    assert_int_equal(end, 100 + 12 * 2);

    t.strides[0] = 10;   /* padded rows: the last row ends at 2*10 + 3 + 1 elements */
    assert_int_equal(proto_tensor_span(&t, &first, &end), 0);
    assert_int_equal(end, 100 + 24 * 2);

    t.shape[0] = 0;      /* empty: touches nothing */
    assert_int_equal(proto_tensor_span(&t, &first, &end), 0);
    assert_int_equal(end, first);

    struct proto_tensor big = {.dtype = GLLM_DTYPE_F32, .rank = 4,
                               .shape = {1 << 20, 1 << 20, 1 << 20, 1 << 20}};
    proto_tensor_contiguous(&big);
    assert_int_equal(proto_tensor_span(&big, &first, &end), GLLM_EOVERFLOW);
    struct proto_tensor off = {.offset = UINT64_MAX - 2, .dtype = GLLM_DTYPE_F32, .rank = 1,
                               .shape = {1}, .strides = {1}};
    assert_int_equal(proto_tensor_span(&off, &first, &end), GLLM_EOVERFLOW);
    struct proto_tensor huge_stride = {.dtype = GLLM_DTYPE_F32, .rank = 1, .shape = {3},
                                       .strides = {INT64_MAX}};
    assert_int_equal(proto_tensor_span(&huge_stride, &first, &end), GLLM_EOVERFLOW);
}

static void test_fp16_conversions(void **state)
{
    (void)state;
    /* Every f16 value survives f16 -> f32 -> f16 (NaNs stay NaN). */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gllm_f16_to_f32((uint16_t)h);
        uint16_t back = gllm_f32_to_f16(f);
        if (isnan(f))
            assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
        else
            assert_int_equal(back, h);
    }
    assert_true(gllm_f16_to_f32(0x3c00) == 1.0f);
    assert_true(gllm_f16_to_f32(0x0001) == ldexpf(1.0f, -24));      /* smallest subnormal */
    assert_true(gllm_f16_to_f32(0xfbff) == -65504.0f);
    assert_int_equal(gllm_f32_to_f16(65520.0f), 0x7c00);              /* rounds to Inf */
    assert_int_equal(gllm_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(gllm_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00); /* tie to even */
    assert_int_equal(gllm_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
    assert_int_equal(gllm_f32_to_f16(ldexpf(1.0f, -25)), 0);          /* tie to even: zero */
    assert_int_equal(gllm_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(gllm_f32_to_bf16(gllm_f32_from_bits(0x3f808000)), 0x3f80); /* tie to even */
    assert_int_equal(gllm_f32_to_bf16(gllm_f32_from_bits(0x3f818000)), 0x3f82);
    assert_true(isnan(gllm_bf16_to_f32(gllm_f32_to_bf16(NAN))));
}

static void test_dtypes_and_errors(void **state)
{
    (void)state;
    gllm_dtype d;
    assert_int_equal(proto_dtype_parse("bf16", &d), 0);
    assert_int_equal(d, GLLM_DTYPE_BF16);
    assert_int_equal(proto_dtype_parse("F16", &d), GLLM_EDTYPE);
    assert_int_equal(proto_dtype_parse("i32", &d), 0);
    assert_int_equal(d, GLLM_DTYPE_I32);
    assert_int_equal(proto_dtype_size(GLLM_DTYPE_I32), 4);
    assert_string_equal(gllm_strerror(GLLM_EBOUNDS), "tensor lies outside its arena");
    assert_string_equal(gllm_error_name(GLLM_EUNSEALED), "GLLM_EUNSEALED");
    assert_string_equal(gllm_error_name(-ENOMEM), "ENOMEM");
    assert_string_equal(gllm_strerror(-1999), "unknown error");
}

/* A request that breaks a limit or the envelope past its id is still answered under its id;
 * anything that is not a request, or whose id is itself unreadable, is not. */
static void test_id_read_past_errors(void **state)
{
    (void)state;
    /* [0, 77, "m", {"k": <17 nested arrays>}]: too deep */
    unsigned char deep[64] = {0x94, 0x00, 77, 0xa1, 'm', 0x81, 0xa1, 'k'};
    size_t n = 8;
    for (unsigned i = 0; i < PROTO_MAX_DEPTH; i++)
        deep[n++] = 0x91;
    deep[n++] = 0x01;
    /* [0, 2^40, "m", {1: 2}]: a non-string key, the id spelled as uint64 */
    static const unsigned char number_key[] = {0x94, 0x00, 0xcf, 0, 0, 0x01, 0, 0, 0, 0, 0,
                                               0xa1, 'm', 0x81, 0x01, 0x02};
    /* [0, 300, "m", {}] and one byte more */
    static const unsigned char trailing[] = {0x94, 0x00, 0xcd, 0x01, 0x2c, 0xa1, 'm', 0x80, 0x00};
    /* array 16 spelling of four elements, a string over the limit */
    static const unsigned char long_string[] = {0xdc, 0, 4, 0x00, 0x05, 0xda, 0x20, 0x00, 'x'};
    static const unsigned char response[] = {0x94, 0x01, 0x05, 0xc0, 0x80, 0x00};
    static const unsigned char id_too_big[] = {0x94, 0x00, 0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0, 0xc0};
    static const unsigned char id_cut[] = {0x94, 0x00, 0xcd, 0x01};
    static const unsigned char negative_id[] = {0x94, 0x00, 0xff, 0xa1, 'm', 0x80, 0x00};
    /* kind and id in signed encodings of non-negative values, then a trailing byte */
    static const unsigned char signed_id[] = {0x94, 0xd0, 0x00, 0xd1, 0x01, 0x00, 0xa1, 'm',
                                              0x80, 0x00};
    static const unsigned char negative_long[] = {0x94, 0x00, 0xd1, 0xff, 0x00, 0xa1, 'm',
                                                  0x80, 0x00};
    const struct {
        const void *p;
        size_t n;
        int rc;
        int64_t id;            /* -1: not readable */
    } cases[] = {
        {deep, n, GLLM_ELIMIT, 77},
        {number_key, sizeof number_key, GLLM_EMALFORMED, (int64_t)1 << 40},
        {trailing, sizeof trailing, GLLM_EMALFORMED, 300},
        {long_string, sizeof long_string, GLLM_ELIMIT, 5},
        {response, sizeof response, GLLM_EMALFORMED, -1},
        {id_too_big, sizeof id_too_big, GLLM_EMALFORMED, -1},
        {id_cut, sizeof id_cut, GLLM_EMALFORMED, -1},
        {negative_id, sizeof negative_id, GLLM_EMALFORMED, -1},
        {signed_id, sizeof signed_id, GLLM_EMALFORMED, 256},
        {negative_long, sizeof negative_long, GLLM_EMALFORMED, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct proto_msg m;
        int64_t id = -1;
        print_message("case %zu\n", i);
        assert_int_equal(proto_decode(cases[i].p, cases[i].n, &m, &id), cases[i].rc);
        assert_int_equal(id, cases[i].id);
        uint64_t peeked = 0;
        assert_int_equal(proto_peek_id(cases[i].p, cases[i].n, &peeked),
                         cases[i].id < 0 ? GLLM_EMALFORMED : 0);
        if (cases[i].id >= 0)
            assert_int_equal(peeked, (uint64_t)cases[i].id);
    }
}

/* Strings gllm sends are valid UTF-8: well-formed sequences pass, everything else becomes
 * U+FFFD on the wire. */
static void test_utf8(void **state)
{
    (void)state;
    const struct {
        const char *s;
        size_t len;            /* of the sequence at s; 0: none */
    } seqs[] = {
        {"a", 1}, {"\xc3\xa9", 2}, {"\xe2\x82\xac", 3}, {"\xf0\x9f\x98\x80", 4},
        {"\xf4\x8f\xbf\xbf", 4},                 /* U+10FFFF, the last code point */
        {"\xc0\x80", 0}, {"\xc1\xbf", 0},          /* overlong */
        {"\xe0\x80\x80", 0}, {"\xf0\x80\x80\x80", 0},
        {"\xed\xa0\x80", 0},                     /* a surrogate */
        {"\xf4\x90\x80\x80", 0}, {"\xf5\x80\x80\x80", 0}, /* past U+10FFFF */
        {"\xe2\x82", 0}, {"\x80", 0}, {"\xff", 0}, /* cut short, a continuation, never used */
    };
    for (size_t i = 0; i < sizeof seqs / sizeof *seqs; i++)
        assert_int_equal(proto_utf8_seq(seqs[i].s, strlen(seqs[i].s)), seqs[i].len);

    static const char bad[] = "\xff\xfename\n\xe2\x82 \xc3\xa9";
    static const char want[] = "\xef\xbf\xbd\xef\xbf\xbdname\n\xef\xbf\xbd\xef\xbf\xbd \xc3\xa9";
    proto_buf_init(&buf);
    msgpack_pack_array(&buf.pk, 2);
    proto_pack_str(&buf.pk, bad);
    proto_pack_str(&buf.pk, "plain ascii stays as it is");
    assert_false(buf.overflow);
    msgpack_object root;
    void *nodes = NULL;
    assert_int_equal(proto_tree_build(buf.data, buf.len, &root, &nodes), 0);
    const msgpack_object_str *got = &root.via.array.ptr[0].via.str;
    assert_int_equal(got->size, sizeof want - 1);
    assert_memory_equal(got->ptr, want, sizeof want - 1);
    assert_true(proto_utf8_valid(got->ptr, got->size));
    got = &root.via.array.ptr[1].via.str;
    assert_int_equal(got->size, strlen("plain ascii stays as it is"));
    free(nodes);
}

/* A notification takes an empty array for "no params", as a request does. */
static void test_notify_empty_params(void **state)
{
    (void)state;
    static const unsigned char wake[] = {0x93, 0x02, 0xa9, 'r', 'i', 'n', 'g', '_', 'w', 'a', 'k', 'e',
                                         0x90};
    static const unsigned char bad[] = {0x93, 0x02, 0xa9, 'r', 'i', 'n', 'g', '_', 'w', 'a', 'k', 'e',
                                        0x05};
    struct proto_msg m;
    int64_t id = -1;
    assert_int_equal(proto_decode(wake, sizeof wake, &m, &id), 0);
    assert_int_equal(m.kind, PROTO_NOTIFY);
    assert_null(m.params);
    proto_msg_free(&m);
    assert_int_equal(proto_decode(bad, sizeof bad, &m, &id), GLLM_EPARAM);
}

/* The variant keys round trip; hello's capabilities round trip, names this library does not
 * know passed over; a key no job method reads is refused by name. */
static void test_variants_round_trip(void **state)
{
    (void)state;
    struct proto_attention a = {0}, back;
    struct proto_tensor *t[4] = {&a.q, &a.k, &a.v, &a.out};
    for (int i = 0; i < 4; i++) {
        *t[i] = (struct proto_tensor){.arena = 1, .dtype = GLLM_DTYPE_F16, .rank = 4,
                                      .shape = {1, 2, 8, 64}};
        proto_tensor_contiguous(t[i]);
    }
    a.variant = (struct proto_variant){.window = true, .window_left = 128, .window_right = -1,
                                       .attention_chunk = 8192, .logits_soft_cap = 50.0,
                                       .has_sinks = true, .sinks = a.q};
    a.variant.sinks.rank = 1, a.variant.sinks.shape[0] = 2, a.variant.sinks.dtype = GLLM_DTYPE_F32;
    proto_tensor_contiguous(&a.variant.sinks);
    proto_buf_init(&buf);
    proto_pack_request(&buf.pk, 9, "attention");
    proto_pack_attention(&buf.pk, &a);
    struct proto_msg m;
    assert_int_equal(proto_decode(buf.data, buf.len, &m, NULL), 0);
    char err[PROTO_MAX_ERRMSG];
    assert_int_equal(proto_job_keys_check(m.params, err, sizeof err), 0);
    assert_int_equal(proto_decode_attention(m.params, &back), 0);
    assert_true(back.variant.window && back.variant.window_left == 128 &&
                back.variant.window_right == -1 && back.variant.attention_chunk == 8192 &&
                back.variant.logits_soft_cap == 50.0 && back.variant.has_sinks &&
                !back.variant.has_alibi && back.variant.sinks.shape[0] == 2);
    assert_int_equal(proto_variant_fields(&back.variant, 64, 64),
                     GLLM_VARIANT_WINDOW | GLLM_VARIANT_CHUNK | GLLM_VARIANT_SOFT_CAP |
                         GLLM_VARIANT_SINKS);
    proto_msg_free(&m);

    /* An unknown key, named in the refusal. */
    proto_buf_init(&buf);
    msgpack_pack_map(&buf.pk, 2);
    proto_pack_kv_u64(&buf.pk, "q", 1);
    proto_pack_kv_u64(&buf.pk, "sliding_window", 4096);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, buf.data, buf.len, NULL), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(proto_job_keys_check(&u.data, err, sizeof err), GLLM_EPARAM);
    assert_non_null(strstr(err, "'sliding_window'"));
    msgpack_unpacked_destroy(&u);

    struct proto_hello_capabilities modes = {
        {.variants = GLLM_VARIANT_WINDOW | GLLM_VARIANT_SINKS, .max_head_dim = 256},
        {.variants = 0, .max_head_dim = 128, .has_head_dims = true, .n_head_dims = 2,
         .head_dims = {64, 128}},
        {.variants = GLLM_VARIANT_HEAD_DIM_V, .max_head_dim = 576},
    }, got;
    proto_buf_init(&buf);
    proto_pack_table(&buf.pk, &proto_capabilities_table, &modes);
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, buf.data, buf.len, NULL), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(proto_read_table(&u.data, &proto_capabilities_table, &got), 0);
    assert_memory_equal(&got, &modes, sizeof modes);
    /* On the wire: names, and head_dims only where the mode lists them. */
    const msgpack_object *dense = proto_map_get(&u.data, "dense");
    const msgpack_object *vs = proto_map_get(dense, "variants");
    assert_non_null(vs);
    assert_int_equal(vs->via.array.size, 2);
    assert_int_equal(vs->via.array.ptr[1].via.str.size, 5);
    assert_memory_equal(vs->via.array.ptr[1].via.str.ptr, "sinks", 5);
    assert_null(proto_map_get(dense, "head_dims"));
    assert_non_null(proto_map_get(proto_map_get(&u.data, "decode"), "head_dims"));
    msgpack_unpacked_destroy(&u);
    /* A variant named by a newer daemon is one this library cannot ask for: passed over. */
    proto_buf_init(&buf);
    msgpack_pack_map(&buf.pk, GLLM_MODE_COUNT);
    for (int i = 0; i < GLLM_MODE_COUNT; i++) {
        proto_pack_str(&buf.pk, proto_mode_name((gllm_mode)i));
        msgpack_pack_map(&buf.pk, 2);
        proto_pack_str(&buf.pk, "variants");
        msgpack_pack_array(&buf.pk, 2);
        proto_pack_str(&buf.pk, "sinks");
        proto_pack_str(&buf.pk, "fp8_kv");
        proto_pack_kv_u64(&buf.pk, "max_head_dim", 64);
    }
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, buf.data, buf.len, NULL), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(proto_read_table(&u.data, &proto_capabilities_table, &got), 0);
    assert_int_equal(got.prefill.variants, GLLM_VARIANT_SINKS);
    assert_int_equal(got.decode.max_head_dim, 64);
    assert_false(got.decode.has_head_dims);
    msgpack_unpacked_destroy(&u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_round_trip),
        cmocka_unit_test(test_variants_round_trip),
        cmocka_unit_test(test_paged_round_trip),
        cmocka_unit_test(test_job_keys),
        cmocka_unit_test(test_job_keys_round_trip),
        cmocka_unit_test(test_response_round_trip),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_depth_and_size_limits),
        cmocka_unit_test(test_method_name_limits),
        cmocka_unit_test(test_field_types),
        cmocka_unit_test(test_tree_every_type),
        cmocka_unit_test(test_tree_build_fails_as_scan),
        cmocka_unit_test(test_tensor_decoding),
        cmocka_unit_test(test_tensor_span),
        cmocka_unit_test(test_fp16_conversions),
        cmocka_unit_test(test_dtypes_and_errors),
        cmocka_unit_test(test_id_read_past_errors),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_notify_empty_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
