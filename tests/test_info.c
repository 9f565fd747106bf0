/* hello's and status's key tables: the bytes gllmd packed by hand, and replies it never sends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "info.h"

static struct proto_buf got, want;

static struct proto_device sample_device(int i)
{
    struct proto_device d = {.index = (uint64_t)i, .memory_bytes = 80ull << 30, .threads = 0,
                             .process_pid = 4242, .resets = 2, .reset_failed = i == 1,
                             .last_reset_ns = 123456789};
    strcpy(d.compute_capability, "9.0");
    strcpy(d.image, "sm_90a SASS");
    strcpy(d.name, i ? "NVIDIA H200 \xff" : "NVIDIA H200");   /* a byte that is no UTF-8 */
    strcpy(d.kind, "cuda");
    strcpy(d.last_reset_reason, i ? "sticky" : "");
    return d;
}

/* The devices as method_hello and method_status packed them by hand. */
static void pack_devices_by_hand(msgpack_packer *pk, const struct proto_device *d, int n)
{
    proto_pack_str(pk, "devices");
    msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < n; i++) {
        msgpack_pack_map(pk, 12);
        proto_pack_kv_str(pk, "compute_capability", d[i].compute_capability);
        proto_pack_kv_str(pk, "image", d[i].image);
        proto_pack_kv_u64(pk, "index", d[i].index);
        proto_pack_kv_str(pk, "name", d[i].name);
        proto_pack_kv_str(pk, "kind", d[i].kind);
        proto_pack_kv_u64(pk, "memory_bytes", d[i].memory_bytes);
        proto_pack_kv_u64(pk, "threads", d[i].threads);
        proto_pack_kv_u64(pk, "process_pid", d[i].process_pid);
        proto_pack_kv_u64(pk, "resets", d[i].resets);
        proto_pack_kv_bool(pk, "reset_failed", d[i].reset_failed);
        proto_pack_kv_str(pk, "last_reset_reason", d[i].last_reset_reason);
        proto_pack_kv_u64(pk, "last_reset_ns", d[i].last_reset_ns);
    }
}

static struct proto_hello sample_hello(bool sync, bool share, bool device_waits)
{
    struct proto_hello h = {
        .has_sync = sync, .sync = {.timeout_ms = 2000, .timeout_ms_max = 600000,
                                   .device_waits = device_waits},
        .has_share = share, .share = {.kind = "cuda_vmm_fd", .granularity = 2u << 20},
        .version = 1, .ring_bytes = 1u << 20, .daemon = "0.1.0", .backend = "cuda",
        .n_devices = 2, .dtypes = 7, .max_head_dim = 256,
        .limits = {.max_message_bytes = 65536, .max_device_bytes = 16ull << 30,
                   .max_device_bytes_total = 64ull << 30, .max_inflight_total = 4096,
                   .max_elements = 1ull << 36, .max_arenas = 64, .max_arena_bytes = 64ull << 30,
                   .max_inflight = 256, .max_rank = 8, .max_page_entries = 1u << 22},
    };
    h.devices[0] = sample_device(0);
    h.devices[1] = sample_device(1);
    return h;
}

/* method_hello's result as it was packed before the table, key by key. */
static void pack_hello_by_hand(msgpack_packer *pk, const struct proto_hello *h)
{
    msgpack_pack_map(pk, 8 + h->has_share + h->has_sync);
    if (h->has_sync) {
        proto_pack_str(pk, "sync");
        msgpack_pack_map(pk, 2 + h->sync.device_waits);
        proto_pack_kv_u64(pk, "timeout_ms", h->sync.timeout_ms);
        proto_pack_kv_u64(pk, "timeout_ms_max", h->sync.timeout_ms_max);
        if (h->sync.device_waits)
            proto_pack_kv_bool(pk, "device_waits", true);
    }
    if (h->has_share) {
        proto_pack_str(pk, "share");
        msgpack_pack_map(pk, 2);
        proto_pack_kv_str(pk, "kind", h->share.kind);
        proto_pack_kv_u64(pk, "granularity", h->share.granularity);
    }
    proto_pack_kv_u64(pk, "version", h->version);
    proto_pack_kv_u64(pk, "ring_bytes", h->ring_bytes);
    proto_pack_kv_str(pk, "daemon", h->daemon);
    proto_pack_kv_str(pk, "backend", h->backend);
    pack_devices_by_hand(pk, h->devices, (int)h->n_devices);
    proto_pack_str(pk, "dtypes");
    msgpack_pack_array(pk, 3);
    proto_pack_str(pk, "f32");
    proto_pack_str(pk, "f16");
    proto_pack_str(pk, "bf16");
    proto_pack_kv_u64(pk, "max_head_dim", h->max_head_dim);
    proto_pack_str(pk, "limits");
    msgpack_pack_map(pk, 10);
    const struct proto_hello_limits *l = &h->limits;
    proto_pack_kv_u64(pk, "max_message_bytes", l->max_message_bytes);
    proto_pack_kv_u64(pk, "max_device_bytes", l->max_device_bytes);
    proto_pack_kv_u64(pk, "max_device_bytes_total", l->max_device_bytes_total);
    proto_pack_kv_u64(pk, "max_inflight_total", l->max_inflight_total);
    proto_pack_kv_u64(pk, "max_elements", l->max_elements);
    proto_pack_kv_u64(pk, "max_arenas", l->max_arenas);
    proto_pack_kv_u64(pk, "max_arena_bytes", l->max_arena_bytes);
    proto_pack_kv_u64(pk, "max_inflight", l->max_inflight);
    proto_pack_kv_u64(pk, "max_rank", l->max_rank);
    proto_pack_kv_u64(pk, "max_page_entries", l->max_page_entries);
}

static void assert_same_bytes(void)
{
    assert_false(got.overflow || want.overflow);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.data, want.data, got.len);
}

/* Reads buf's one object into *u (to destroy) and returns it. */
static const msgpack_object *unpack(msgpack_unpacked *u, const struct proto_buf *b)
{
    msgpack_unpacked_init(u);
    assert_int_equal(msgpack_unpack_next(u, b->data, b->len, NULL), MSGPACK_UNPACK_SUCCESS);
    return &u->data;
}

static void test_hello_bytes_and_back(void **state)
{
    (void)state;
    const bool cases[][3] = {{true, true, true}, {true, true, false}, {false, true, false},
                             {true, false, false}, {false, false, false}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const struct proto_hello h = sample_hello(cases[i][0], cases[i][1], cases[i][2]);
        proto_buf_init(&got);
        proto_pack_table(&got.pk, &proto_hello_table, &h);
        proto_buf_init(&want);
        pack_hello_by_hand(&want.pk, &h);
        assert_same_bytes();

        msgpack_unpacked u;
        struct proto_hello back;
        assert_int_equal(proto_read_table(unpack(&u, &got), &proto_hello_table, &back), 0);
        msgpack_unpacked_destroy(&u);
        assert_int_equal(back.has_sync, h.has_sync);
        assert_int_equal(back.has_share, h.has_share);
        assert_int_equal(back.sync.device_waits, h.has_sync && h.sync.device_waits);
        if (h.has_sync)
            assert_int_equal(back.sync.timeout_ms_max, 600000);
        if (h.has_share) {
            assert_string_equal(back.share.kind, "cuda_vmm_fd");
            assert_int_equal(back.share.granularity, 2u << 20);
        }
        assert_int_equal(back.n_devices, 2);
        assert_string_equal(back.devices[0].name, "NVIDIA H200");
        assert_string_equal(back.devices[1].name, "NVIDIA H200 \xef\xbf\xbd");   /* U+FFFD */
        assert_string_equal(back.devices[1].last_reset_reason, "sticky");
        assert_true(back.devices[1].reset_failed && !back.devices[0].reset_failed);
        assert_int_equal(back.devices[0].process_pid, 4242);
        assert_int_equal(back.dtypes, 7);
        assert_int_equal(back.limits.max_page_entries, 1u << 22);
        assert_int_equal(back.limits.max_arena_bytes, 64ull << 30);
        assert_string_equal(back.daemon, "0.1.0");
    }
}

static struct proto_status *sample_status(void)
{
    struct proto_status *s = calloc(1, sizeof *s);
    assert_non_null(s);
    strcpy(s->daemon, "0.1.0");
    s->uptime_s = 12.5;
    strcpy(s->backend, "cpu");
    s->n_devices = 1;
    s->devices[0] = sample_device(0);
    s->clients = 2, s->jobs_done = 10, s->jobs_failed = 1, s->jobs_inflight = 3;
    s->bytes_mapped = 1 << 20, s->arenas = 1, s->device_bytes = 4096, s->dtensors = 1;
    s->exported_bytes = 0, s->imported_bytes = 0, s->draining = false;
    s->requests = 40, s->errors = 2, s->limit_violations = 1, s->ring_requests = 5;
    s->has_metrics = true;
    s->metrics.device_resets = 3;
    s->metrics.n_jobs = 2;
    strcpy(s->metrics.jobs[0].method, "attention");
    s->metrics.jobs[0].ok = 9, s->metrics.jobs[0].failed = 1;
    strcpy(s->metrics.jobs[1].method, "dtensor_copy");
    s->metrics.jobs[1].ok = 1;
    struct proto_histogram *hs[] = {&s->metrics.queue_seconds, &s->metrics.kernel_seconds,
                                    &s->metrics.added_seconds};
    for (int k = 0; k < 3; k++) {
        hs[k]->n_le = 16;
        hs[k]->n_counts = 17;
        for (int i = 0; i < 16; i++)
            hs[k]->le[i] = 5e-6 * (i + 1);
        hs[k]->counts[k] = 10;
        hs[k]->sum = 0.25;
        hs[k]->count = 10;
    }
    s->has_device_memory = true;
    s->n_device_memory = 1;
    s->device_memory[0] = (struct proto_status_memory){.used = 7, .total = 9};
    s->n_client_list = 2;
    for (int i = 0; i < 2; i++) {
        s->client_list[i] = (struct proto_status_client){
            .pid = 100u + (uint64_t)i, .uid = 1000, .gid = 1000, .arenas = 1,
            .arena_bytes = 1 << 20, .device_bytes = 4096, .inflight = (uint64_t)i};
        strcpy(s->client_list[i].comm, i ? "python3" : "gllmctl");
    }
    return s;
}

static void pack_histogram_by_hand(msgpack_packer *pk, const char *name,
                                   const struct proto_histogram *h)
{
    proto_pack_str(pk, name);
    msgpack_pack_map(pk, 4);
    proto_pack_str(pk, "le");
    msgpack_pack_array(pk, h->n_le);
    for (uint32_t i = 0; i < h->n_le; i++)
        msgpack_pack_double(pk, h->le[i]);
    proto_pack_str(pk, "counts");
    msgpack_pack_array(pk, h->n_counts);
    for (uint32_t i = 0; i < h->n_counts; i++)
        msgpack_pack_uint64(pk, h->counts[i]);
    proto_pack_kv_f64(pk, "sum", h->sum);
    proto_pack_kv_u64(pk, "count", h->count);
}

/* method_status's result (and metrics_pack's part) as packed before the table. */
static void pack_status_by_hand(msgpack_packer *pk, const struct proto_status *s)
{
    msgpack_pack_map(pk, 22);
    proto_pack_kv_str(pk, "daemon", s->daemon);
    proto_pack_kv_f64(pk, "uptime_s", s->uptime_s);
    proto_pack_kv_str(pk, "backend", s->backend);
    pack_devices_by_hand(pk, s->devices, (int)s->n_devices);
    proto_pack_kv_u64(pk, "clients", s->clients);
    proto_pack_kv_u64(pk, "jobs_done", s->jobs_done);
    proto_pack_kv_u64(pk, "jobs_failed", s->jobs_failed);
    proto_pack_kv_u64(pk, "jobs_inflight", s->jobs_inflight);
    proto_pack_kv_u64(pk, "bytes_mapped", s->bytes_mapped);
    proto_pack_kv_u64(pk, "arenas", s->arenas);
    proto_pack_kv_u64(pk, "device_bytes", s->device_bytes);
    proto_pack_kv_u64(pk, "dtensors", s->dtensors);
    proto_pack_kv_u64(pk, "exported_bytes", s->exported_bytes);
    proto_pack_kv_u64(pk, "imported_bytes", s->imported_bytes);
    proto_pack_kv_bool(pk, "draining", s->draining);
    proto_pack_kv_u64(pk, "requests", s->requests);
    proto_pack_kv_u64(pk, "errors", s->errors);
    proto_pack_kv_u64(pk, "limit_violations", s->limit_violations);
    proto_pack_kv_u64(pk, "ring_requests", s->ring_requests);
    proto_pack_str(pk, "metrics");
    msgpack_pack_map(pk, 5);
    proto_pack_kv_u64(pk, "device_resets", s->metrics.device_resets);
    proto_pack_str(pk, "jobs");
    msgpack_pack_array(pk, s->metrics.n_jobs);
    for (uint32_t i = 0; i < s->metrics.n_jobs; i++) {
        msgpack_pack_map(pk, 3);
        proto_pack_kv_str(pk, "method", s->metrics.jobs[i].method);
        proto_pack_kv_u64(pk, "ok", s->metrics.jobs[i].ok);
        proto_pack_kv_u64(pk, "failed", s->metrics.jobs[i].failed);
    }
    pack_histogram_by_hand(pk, "queue_seconds", &s->metrics.queue_seconds);
    pack_histogram_by_hand(pk, "kernel_seconds", &s->metrics.kernel_seconds);
    pack_histogram_by_hand(pk, "added_seconds", &s->metrics.added_seconds);
    proto_pack_str(pk, "device_memory");
    msgpack_pack_array(pk, s->n_device_memory);
    for (uint32_t i = 0; i < s->n_device_memory; i++) {
        msgpack_pack_map(pk, 2);
        proto_pack_kv_u64(pk, "used", s->device_memory[i].used);
        proto_pack_kv_u64(pk, "total", s->device_memory[i].total);
    }
    proto_pack_str(pk, "client_list");
    msgpack_pack_array(pk, s->n_client_list);
    for (uint32_t i = 0; i < s->n_client_list; i++) {
        const struct proto_status_client *e = &s->client_list[i];
        msgpack_pack_map(pk, 10);
        proto_pack_kv_u64(pk, "pid", e->pid);
        proto_pack_kv_u64(pk, "uid", e->uid);
        proto_pack_kv_u64(pk, "gid", e->gid);
        proto_pack_kv_str(pk, "comm", e->comm);
        proto_pack_kv_u64(pk, "arenas", e->arenas);
        proto_pack_kv_u64(pk, "arena_bytes", e->arena_bytes);
        proto_pack_kv_u64(pk, "device_bytes", e->device_bytes);
        proto_pack_kv_u64(pk, "exported_bytes", e->exported_bytes);
        proto_pack_kv_u64(pk, "imported_bytes", e->imported_bytes);
        proto_pack_kv_u64(pk, "inflight", e->inflight);
    }
}

static void test_status_bytes_and_back(void **state)
{
    (void)state;
    struct proto_status *s = sample_status(), *back = malloc(sizeof *back);
    assert_non_null(back);
    proto_buf_init(&got);
    proto_pack_table(&got.pk, &proto_status_table, s);
    proto_buf_init(&want);
    pack_status_by_hand(&want.pk, s);
    assert_same_bytes();
    msgpack_unpacked u;
    assert_int_equal(proto_read_table(unpack(&u, &got), &proto_status_table, back), 0);
    msgpack_unpacked_destroy(&u);
    assert_true(back->uptime_s == 12.5);
    assert_int_equal(back->ring_requests, 5);
    assert_true(back->has_metrics && back->has_device_memory);
    assert_int_equal(back->metrics.n_jobs, 2);
    assert_string_equal(back->metrics.jobs[1].method, "dtensor_copy");
    assert_int_equal(back->metrics.kernel_seconds.n_le, 16);
    assert_int_equal(back->metrics.kernel_seconds.n_counts, 17);
    assert_int_equal(back->metrics.kernel_seconds.counts[1], 10);
    assert_true(back->metrics.added_seconds.le[15] == s->metrics.added_seconds.le[15]);
    assert_int_equal(back->device_memory[0].total, 9);
    assert_int_equal(back->n_client_list, 2);
    assert_string_equal(back->client_list[1].comm, "python3");
    assert_int_equal(back->client_list[1].inflight, 1);
    free(s);
    free(back);
}

/* A reply gllmd never sends: keys it does not know, a key twice, values of other types. */
static void test_reader_is_lenient(void **state)
{
    (void)state;
    proto_buf_init(&got);
    msgpack_packer *pk = &got.pk;
    msgpack_pack_map(pk, 8);
    proto_pack_kv_str(pk, "version", "one");               /* wrong type: absent */
    proto_pack_kv_u64(pk, "max_head_dim", 128);
    proto_pack_kv_u64(pk, "max_head_dim", 64);             /* the first counts */
    proto_pack_kv_str(pk, "backend", "a-backend-name-too-long-for-sixteen");
    proto_pack_kv_u64(pk, "capabilities", 1);              /* a newer daemon's: skipped */
    proto_pack_str(pk, "dtypes");
    msgpack_pack_array(pk, 3);
    proto_pack_str(pk, "bf16");
    proto_pack_str(pk, "f8");
    msgpack_pack_uint64(pk, 0);
    proto_pack_str(pk, "sync");
    msgpack_pack_map(pk, 1);
    proto_pack_kv_bool(pk, "device_waits", false);
    proto_pack_str(pk, "devices");
    msgpack_pack_array(pk, 2);
    msgpack_pack_nil(pk);                                  /* no map: a zeroed device */
    msgpack_pack_map(pk, 1);
    proto_pack_kv_u64(pk, "index", 1);
    msgpack_unpacked u;
    struct proto_hello h;
    assert_int_equal(proto_read_table(unpack(&u, &got), &proto_hello_table, &h), 0);
    msgpack_unpacked_destroy(&u);
    assert_int_equal(h.version, 0);
    assert_int_equal(h.max_head_dim, 128);
    assert_string_equal(h.backend, "a-backend-name-");     /* cut to fit */
    assert_int_equal(h.dtypes, 1u << GLLM_DTYPE_BF16);
    assert_true(h.has_sync && !h.sync.device_waits);
    assert_false(h.has_share);
    assert_int_equal(h.n_devices, 2);
    assert_int_equal(h.devices[1].index, 1);

    /* devices is required; a histogram array with a non-number reads as absent. */
    proto_buf_init(&got);
    msgpack_pack_map(pk, 1);
    proto_pack_str(pk, "metrics");
    msgpack_pack_map(pk, 1);
    proto_pack_str(pk, "queue_seconds");
    msgpack_pack_map(pk, 2);
    proto_pack_str(pk, "le");
    msgpack_pack_array(pk, 2);
    msgpack_pack_double(pk, 1.0);
    proto_pack_str(pk, "x");
    proto_pack_str(pk, "counts");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, 4);
    struct proto_status *s = malloc(sizeof *s);
    assert_non_null(s);
    assert_int_equal(proto_read_table(unpack(&u, &got), &proto_status_table, s), GLLM_EMALFORMED);
    msgpack_unpacked_destroy(&u);
    assert_true(s->has_metrics);
    assert_int_equal(s->metrics.queue_seconds.n_le, 0);
    assert_int_equal(s->metrics.queue_seconds.n_counts, 1);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_bytes_and_back),
        cmocka_unit_test(test_status_bytes_and_back),
        cmocka_unit_test(test_reader_is_lenient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
