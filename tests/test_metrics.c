/* gllm_status_metrics and gllm_status_device_memory: against a real gllmd (jobs counted by
 * method and result, histograms that add up, an older struct gets what fits), and the
 * decoder on histograms no gllmd sends. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client_internal.h"
#include "info.h"
#include "testutil.h"

/* ---- the decoder, on replies no gllmd sends ---- */

static struct proto_buf buf;

/* A status result holding only metrics: one histogram "queue_seconds" with nb bounds (nc
 * counts, each 1; descending: bounds that go down). */
static void pack_metrics(int nb, int nc, bool descending)
{
    proto_buf_init(&buf);
    msgpack_packer *pk = &buf.pk;
    msgpack_pack_map(pk, 2);
    proto_pack_str(pk, "metrics");
    msgpack_pack_map(pk, 2);
    proto_pack_str(pk, "jobs");
    msgpack_pack_array(pk, 2);
    msgpack_pack_map(pk, 3);
    proto_pack_kv_str(pk, "method", "attention");
    proto_pack_kv_u64(pk, "ok", 7);
    proto_pack_kv_u64(pk, "failed", 2);
    msgpack_pack_map(pk, 1);                 /* no method: skipped */
    proto_pack_kv_u64(pk, "ok", 1);
    proto_pack_str(pk, "queue_seconds");
    msgpack_pack_map(pk, 4);
    proto_pack_str(pk, "le");
    msgpack_pack_array(pk, (size_t)nb);
    for (int i = 0; i < nb; i++)
        msgpack_pack_double(pk, descending ? 1.0 / (i + 1) : 1e-6 * (i + 1));
    proto_pack_str(pk, "counts");
    msgpack_pack_array(pk, (size_t)nc);
    for (int i = 0; i < nc; i++)
        msgpack_pack_uint64(pk, 1);
    proto_pack_kv_f64(pk, "sum", 0.5);
    proto_pack_kv_u64(pk, "count", (uint64_t)nc);
    proto_pack_str(pk, "device_memory");
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 2);
    proto_pack_kv_u64(pk, "used", 3);
    proto_pack_kv_u64(pk, "total", 8);
}

static struct status_metrics decoded(void)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, buf.data, buf.len, NULL), MSGPACK_UNPACK_SUCCESS);
    struct proto_status *w = malloc(sizeof *w);
    assert_non_null(w);
    /* No devices: malformed as a status, read all the same. */
    assert_int_equal(proto_read_table(&u.data, &proto_status_table, w), GLLM_EMALFORMED);
    struct status_metrics m;
    metrics_from(w, &m);
    free(w);
    msgpack_unpacked_destroy(&u);
    return m;
}

static void test_decode_folds_extra_bounds(void **state)
{
    (void)state;
    pack_metrics(20, 21, false);
    struct status_metrics m = decoded();
    assert_true(m.have);
    assert_int_equal(m.m.nmethods, 1);
    assert_string_equal(m.m.jobs[0].method, "attention");
    assert_int_equal(m.m.jobs[0].ok, 7);
    assert_int_equal(m.m.jobs[0].failed, 2);
    const gllm_histogram *h = &m.m.queue_seconds;
    assert_int_equal(h->nbounds, GLLM_HISTOGRAM_BOUNDS);
    assert_int_equal(h->counts[GLLM_HISTOGRAM_BOUNDS], 21 - GLLM_HISTOGRAM_BOUNDS);
    assert_int_equal(h->count, 21);
    assert_true(h->le[GLLM_HISTOGRAM_BOUNDS - 1] > h->le[0]);
    /* The histograms it did not send are empty, not garbage. */
    assert_int_equal(m.m.kernel_seconds.count, 0);
    assert_int_equal(m.m.kernel_seconds.nbounds, 0);
    assert_true(m.have_devices);
    assert_int_equal(m.ndevices, 1);
    assert_int_equal(m.used[0], 3);
    assert_int_equal(m.total[0], 8);
}

static void test_decode_refuses_bad_histograms(void **state)
{
    (void)state;
    pack_metrics(4, 4, false);               /* counts not one longer than le */
    struct status_metrics m = decoded();
    assert_int_equal(m.m.queue_seconds.nbounds, 0);
    assert_int_equal(m.m.queue_seconds.counts[0], 4);
    pack_metrics(4, 5, true);                /* bounds going down */
    m = decoded();
    assert_int_equal(m.m.queue_seconds.nbounds, 0);
    assert_int_equal(m.m.queue_seconds.counts[0], 5);
    assert_int_equal(m.m.queue_seconds.count, 5);
}

static const gllm_method_jobs *method(const gllm_metrics *m, const char *name)
{
    for (int i = 0; i < m->nmethods; i++)
        if (strcmp(m->jobs[i].method, name) == 0)
            return &m->jobs[i];
    fail_msg("no method %s in the metrics", name);
    return NULL;
}

static void check_histogram(const gllm_histogram *h)
{
    assert_int_equal(h->nbounds, GLLM_HISTOGRAM_BOUNDS);
    uint64_t total = 0;
    for (int i = 0; i <= h->nbounds; i++)
        total += h->counts[i];
    assert_int_equal(total, h->count);
    for (int i = 1; i < h->nbounds; i++)
        assert_true(h->le[i] > h->le[i - 1]);
    assert_true(h->le[0] > 0);
    assert_true(h->sum >= 0);
}

static gllm_metrics metrics_now(gllm_client *c)
{
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), 0);
    gllm_metrics m = GLLM_METRICS_INIT;
    assert_int_equal(gllm_status_metrics(c, &m), 0);
    return m;
}

static void test_jobs_counted(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    /* Nothing to read before the first status. */
    gllm_metrics m = GLLM_METRICS_INIT;
    assert_int_equal(gllm_status_metrics(c, &m), -ENODATA);
    uint64_t used, total;
    assert_int_equal(gllm_status_device_memory(c, 0, &used, &total), -ENODATA);

    const gllm_metrics before = metrics_now(c);
    check_histogram(&before.queue_seconds);
    check_histogram(&before.kernel_seconds);
    check_histogram(&before.added_seconds);
    const struct job_spec s = {1, 2, 2, 32, 32, 64, GLLM_DTYPE_F32, true};
    struct live_job j;
    assert_int_equal(job_setup(c, &j, &s, 7), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(gllm_attention(c, &j.p, NULL), 0);
    /* One refused at run time: out overlapping q fails the job (GLLM_EALIAS). */
    gllm_attention_params bad = j.p;
    bad.out = bad.q;
    assert_true(gllm_attention(c, &bad, NULL) < 0);
    gllm_memory_release(j.arena);

    /* A reply can come through the shared-memory ring before the loop thread settles the
     * job and counts it: poll for the count, for at most 10 s. */
    gllm_metrics after = metrics_now(c);
    for (int tries = 0; tries < 1000 &&
                        method(&after, "attention")->ok - method(&before, "attention")->ok < 4;
         tries++) {
        sleep_ms(10);
        after = metrics_now(c);
    }
    assert_int_equal(method(&after, "attention")->ok - method(&before, "attention")->ok, 4);
    assert_int_equal(method(&after, "kv_append")->ok, method(&before, "kv_append")->ok);
    check_histogram(&after.queue_seconds);
    check_histogram(&after.added_seconds);
    assert_int_equal(after.added_seconds.count - before.added_seconds.count, 4);
    assert_int_equal(after.queue_seconds.count - before.queue_seconds.count, 4);
    assert_true(after.added_seconds.sum > before.added_seconds.sum);

    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_client_caps(c, &caps);
    for (int d = 0; d < caps.ndevices; d++) {
        used = total = 99;
        assert_int_equal(gllm_status_device_memory(c, d, &used, &total), 0);
        assert_true(used <= total);
    }
    assert_int_equal(gllm_status_device_memory(c, caps.ndevices, &used, &total), -EINVAL);
    assert_int_equal(gllm_status_device_memory(c, -1, &used, &total), -EINVAL);
    gllm_disconnect(c);
}

static void test_older_struct(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    const gllm_metrics full = metrics_now(c);

    /* A caller compiled when the struct ended after the job counters: it gets those, and the
     * bytes past its size stay as they were. */
    gllm_metrics old;
    memset(&old, 0x5a, sizeof old);
    old.size = offsetof(gllm_metrics, queue_seconds);
    assert_int_equal(gllm_status_metrics(c, &old), 0);
    assert_int_equal(old.size, offsetof(gllm_metrics, queue_seconds));
    assert_int_equal(old.nmethods, full.nmethods);
    assert_memory_equal(old.jobs, full.jobs, sizeof old.jobs);
    const unsigned char *tail = (const unsigned char *)&old.queue_seconds;
    for (size_t i = 0; i < sizeof old - offsetof(gllm_metrics, queue_seconds); i++)
        assert_int_equal(tail[i], 0x5a);

    /* Too small to hold its size: refused, untouched. */
    gllm_metrics zero;
    memset(&zero, 0, sizeof zero);
    assert_int_equal(gllm_status_metrics(c, &zero), -EINVAL);
    assert_int_equal(zero.nmethods, 0);
    gllm_disconnect(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobs_counted),
        cmocka_unit_test(test_older_struct),
        cmocka_unit_test(test_decode_folds_extra_bounds),
        cmocka_unit_test(test_decode_refuses_bad_histograms),
    };
    return cmocka_run_group_tests(tests, group_daemon_start, group_daemon_stop);
}
