/* Client call matching: the id-indexed table under growth, removal in any order and its
 * bound, and the routing of replies to jobs and to the synchronous call. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client_internal.h"

static struct proto_buf buf;

static uint64_t next_random(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 1;
}

/* ids[i] is found exactly when live[i] says so. */
static void assert_table(struct call_table *t, const uint64_t *ids, const bool *live, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        struct call_job *j = calls_find_job(t, ids[i]);
        if (live[i]) {
            assert_non_null(j);
            assert_int_equal(j->id, ids[i]);
            count++;
        } else {
            assert_null(j);
        }
    }
    assert_int_equal(t->count, count);
}

/* The table runs on sequential ids, which Fibonacci hashing spreads with hardly a
 * collision; random ids make long probe runs, so removal inside them is exercised. */
static void check_add_find_remove(bool sequential)
{
    enum { N = 3000 };
    struct call_table t = {0};
    uint64_t *ids = malloc(N * sizeof *ids);
    bool *live = calloc(N, sizeof *live);
    size_t *order = malloc(N * sizeof *order);
    assert_non_null(ids);
    assert_non_null(live);
    assert_non_null(order);
    uint64_t seed = 12345;
    for (size_t i = 0; i < N; i++) {
        ids[i] = sequential ? i + 1 : next_random(&seed) | 1;   /* odd, never 0 */
        if (calls_find_job(&t, ids[i]))
            ids[i] += 2;   /* (a repeat drawn at random) */
        assert_null(calls_find_job(&t, ids[i]));
        assert_int_equal(calls_add_job(&t, ids[i]), 0);
        live[i] = true;
        order[i] = i;
    }
    assert_table(&t, ids, live, N);
    assert_true(t.cap >= 2 * N);   /* never more than half full */
    for (size_t i = N - 1; i > 0; i--) {   /* removal in a shuffled order */
        size_t k = (size_t)(next_random(&seed) % (i + 1));
        size_t x = order[i];
        order[i] = order[k], order[k] = x;
    }
    for (size_t i = 0; i < N; i++) {
        struct call_job *j = calls_find_job(&t, ids[order[i]]);
        assert_non_null(j);
        calls_remove_job(&t, j);
        live[order[i]] = false;
        if (i % 29 == 0)
            assert_table(&t, ids, live, N);
        /* Ids keep coming while old ones wait: new ones (even, so unused) fill holes. */
        if (i % 3 == 0) {
            const uint64_t id = 2 * (i + 1);
            assert_int_equal(calls_add_job(&t, id), 0);
            struct call_job *n = calls_find_job(&t, id);
            assert_non_null(n);
            calls_remove_job(&t, n);
        }
    }
    assert_table(&t, ids, live, N);
    assert_int_equal(t.count, 0);
    assert_null(calls_find_job(&t, 0));
    calls_free(&t);
    free(ids);
    free(live);
    free(order);
}

static void test_add_find_remove_any_order(void **state)
{
    (void)state;
    check_add_find_remove(true);
    check_add_find_remove(false);
}

static void test_bound_on_pending_jobs(void **state)
{
    (void)state;
    struct call_table t = {0};
    for (uint64_t id = 1; id <= GLLM_MAX_PENDING_JOBS; id++)
        assert_int_equal(calls_add_job(&t, id), 0);
    assert_int_equal(calls_add_job(&t, GLLM_MAX_PENDING_JOBS + 1), GLLM_EBUSY);
    assert_null(calls_find_job(&t, GLLM_MAX_PENDING_JOBS + 1));
    calls_remove_job(&t, calls_find_job(&t, 77));
    assert_int_equal(calls_add_job(&t, GLLM_MAX_PENDING_JOBS + 1), 0);
    assert_non_null(calls_find_job(&t, GLLM_MAX_PENDING_JOBS + 1));
    calls_free(&t);
}

static void test_route_replies(void **state)
{
    (void)state;
    struct call_table t = {0};
    char last_error[PROTO_MAX_ERRMSG + 1] = "";
    assert_int_equal(calls_add_job(&t, 5), 0);
    assert_int_equal(calls_add_job(&t, 6), 0);
    calls_expect(&t, 7);

    proto_buf_init(&buf);   /* job 6 succeeds */
    proto_pack_result(&buf.pk, 6);
    msgpack_pack_map(&buf.pk, 2);
    proto_pack_kv_u64(&buf.pk, "kernel_ns", 1234);
    proto_pack_kv_u64(&buf.pk, "queue_ns", 56);
    assert_int_equal(calls_route(&t, buf.data, buf.len, last_error), 0);
    struct call_job *j = calls_find_job(&t, 6);
    assert_true(j->done);
    assert_int_equal(j->res.status, 0);
    assert_int_equal(j->res.kernel_ns, 1234);
    assert_int_equal(j->res.queue_ns, 56);
    assert_null(j->message);
    assert_false(calls_find_job(&t, 5)->done);

    proto_buf_init(&buf);   /* job 5 fails, with a message */
    proto_pack_error(&buf.pk, 5, GLLM_EBOUNDS, "q: past the arena");
    assert_int_equal(calls_route(&t, buf.data, buf.len, last_error), 0);
    j = calls_find_job(&t, 5);
    assert_true(j->done);
    assert_int_equal(j->res.status, GLLM_EBOUNDS);
    assert_string_equal(j->message, "q: past the arena");
    assert_string_equal(last_error, "");   /* a job's message waits for its claim */

    proto_buf_init(&buf);   /* a second reply for job 5 changes nothing */
    proto_pack_error(&buf.pk, 5, GLLM_EPARAM, "again");
    assert_int_equal(calls_route(&t, buf.data, buf.len, last_error), 0);
    assert_int_equal(calls_find_job(&t, 5)->res.status, GLLM_EBOUNDS);

    proto_buf_init(&buf);   /* the synchronous call's reply is kept whole */
    proto_pack_result(&buf.pk, 7);
    msgpack_pack_map(&buf.pk, 1);
    proto_pack_kv_u64(&buf.pk, "arena", 3);
    assert_false(t.call_done);
    assert_int_equal(calls_route(&t, buf.data, buf.len, last_error), 0);
    assert_true(t.call_done);
    assert_true(t.call_msg_valid);
    uint64_t arena = 0;
    assert_int_equal(proto_get_u64(t.call_msg.result, "arena", true, &arena), 0);
    assert_int_equal(arena, 3);
    calls_end(&t);
    assert_false(t.call_msg_valid);

    calls_expect(&t, 8);   /* an error without an id is the call in flight's */
    proto_buf_init(&buf);
    proto_pack_error(&buf.pk, -1, GLLM_EMALFORMED, "unreadable");
    assert_int_equal(calls_route(&t, buf.data, buf.len, last_error), 0);
    assert_true(t.call_done);
    assert_int_equal(t.call_error, GLLM_EMALFORMED);
    assert_string_equal(last_error, "unreadable");

    assert_true(calls_route(&t, "\xc1", 1, last_error) < 0);   /* not msgpack: refused */
    calls_free(&t);
}

static void test_output_struct_sizes(void **state)
{
    (void)state;
    const gllm_job_result lib = {.size = sizeof lib, .status = -5, .kernel_ns = 9, .accept_ns = 4};
    gllm_job_result full = GLLM_JOB_RESULT_INIT;
    assert_int_equal(out_check(&full), 0);
    out_fill(&full, &lib, sizeof lib);
    assert_int_equal(full.status, -5);
    assert_int_equal(full.kernel_ns, 9);
    assert_int_equal(full.accept_ns, 4);
    /* An older caller whose struct ended after kernel_ns. */
    gllm_job_result old = {.size = offsetof(gllm_job_result, queue_ns), .queue_ns = 77,
                           .accept_ns = 78};
    out_fill(&old, &lib, sizeof lib);
    assert_int_equal(old.size, offsetof(gllm_job_result, queue_ns));
    assert_int_equal(old.status, -5);
    assert_int_equal(old.kernel_ns, 9);
    assert_int_equal(old.queue_ns, 77);
    assert_int_equal(old.accept_ns, 78);
    /* A newer caller: its fields past ours stay as it set them. */
    struct {
        gllm_job_result r;
        uint64_t later;
    } newer = {.r = {.size = sizeof newer}, .later = 99};
    out_fill(&newer, &lib, sizeof lib);
    assert_int_equal(newer.r.size, sizeof newer);
    assert_int_equal(newer.r.kernel_ns, 9);
    assert_int_equal(newer.later, 99);
    gllm_job_result none = {0};
    assert_int_equal(out_check(&none), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_find_remove_any_order),
        cmocka_unit_test(test_bound_on_pending_jobs),
        cmocka_unit_test(test_route_replies),
        cmocka_unit_test(test_output_struct_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
