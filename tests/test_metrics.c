/* gllm_status_metrics and gllm_status_device_memory against a real gllmd: jobs counted by
 * method and result, histograms that add up, and an older, smaller struct that gets what fits. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

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

    const gllm_metrics after = metrics_now(c);
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
    };
    return cmocka_run_group_tests(tests, group_daemon_start, group_daemon_stop);
}
