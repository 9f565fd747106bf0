/* gllmd.conf parsing (daemon/config.c): every key, bad values, limits, and --check-config's round trip. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"

static char path[] = "/tmp/gllm-config-XXXXXX";

static int setup(void **state)
{
    (void)state;
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static void write_file(const char *p, const char *text)
{
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* Loads text over the defaults into cfg; the return of config_load. */
static int load(const char *text, struct config *cfg, char *err, size_t errlen)
{
    write_file(path, text);
    config_defaults(cfg);
    err[0] = '\0';
    return config_load(cfg, path, true, err, errlen);
}

/* Field by field, so padding never decides. */
static void assert_config_equal(const struct config *a, const struct config *b)
{
    assert_string_equal(a->socket_path, b->socket_path);
    assert_string_equal(a->backend, b->backend);
    assert_int_equal(a->threads, b->threads);
    assert_int_equal(a->log_level, b->log_level);
    assert_int_equal(a->drain_timeout_s, b->drain_timeout_s);
    assert_int_equal(a->status_interval_s, b->status_interval_s);
    assert_int_equal(a->busy_poll, b->busy_poll);
    assert_int_equal(a->deterministic, b->deterministic);
    assert_int_equal(a->watchdog_ms, b->watchdog_ms);
    assert_int_equal(a->watchdog_gflops, b->watchdog_gflops);
    assert_int_equal(a->exit_on_reset_failure, b->exit_on_reset_failure);
    const struct limits *x = &a->limits, *y = &b->limits;
    assert_int_equal(x->max_connections, y->max_connections);
    assert_int_equal(x->max_prehello_bytes, y->max_prehello_bytes);
    assert_int_equal(x->max_arenas, y->max_arenas);
    assert_int_equal(x->max_arena_bytes, y->max_arena_bytes);
    assert_int_equal(x->max_device_bytes, y->max_device_bytes);
    assert_int_equal(x->max_device_bytes_total, y->max_device_bytes_total);
    assert_int_equal(x->max_inflight, y->max_inflight);
    assert_int_equal(x->max_inflight_total, y->max_inflight_total);
    assert_int_equal(x->max_elements, y->max_elements);
    assert_int_equal(x->max_outq_bytes, y->max_outq_bytes);
    assert_int_equal(x->max_page_entries, y->max_page_entries);
    assert_int_equal(a->policy.nuids, b->policy.nuids);
    assert_int_equal(a->policy.ngids, b->policy.ngids);
    for (int i = 0; i < a->policy.nuids; i++)
        assert_int_equal(a->policy.uids[i], b->policy.uids[i]);
    for (int i = 0; i < a->policy.ngids; i++)
        assert_int_equal(a->policy.gids[i], b->policy.gids[i]);
}

static void test_defaults(void **state)
{
    (void)state;
    struct config c;
    config_defaults(&c);
    assert_string_equal(c.backend, "auto");
    assert_string_equal(c.socket_path, "");
    assert_int_equal(c.threads, 0);
    assert_int_equal(c.log_level, LOG_INFO);
    assert_int_equal(c.drain_timeout_s, 60);
    assert_int_equal(c.status_interval_s, 5);
    assert_int_equal(c.busy_poll, -1);
    assert_false(c.deterministic);
    assert_int_equal(c.watchdog_ms, 20000);
    assert_true(c.exit_on_reset_failure);
    assert_int_equal(c.limits.max_page_entries, 1u << 22);
    assert_int_equal(c.policy.nuids + c.policy.ngids, 0);
}

/* Every key, with comments, blank lines, spacing and size suffixes. */
static const char every_key[] =
    "# gllmd.conf\n"
    "\n"
    "socket = /run/gllm/test.sock   # trailing comment\n"
    "backend=cpu\n"
    "   threads   =   3   \n"
    "log_level = debug\n"
    "max_connections = 17\n"
    "max_prehello_bytes = 2048\n"
    "max_arenas = 9\n"
    "max_arena_bytes = 2G\n"
    "max_device_bytes = 512M\n"
    "max_device_bytes_total = 1T\n"
    "max_inflight = 33\n"
    "max_inflight_total = 999\n"
    "max_elements = 4k\n"
    "max_outq_bytes = 65536\n"
    "max_page_entries = 1000\n"
    "drain_timeout_s = 0\n"
    "status_interval_s = 3600\n"
    "busy_poll = on\n"
    "deterministic = on\n"
    "watchdog_ms = 0\n"
    "watchdog_gflops = 1000\n"
    "exit_on_reset_failure = off\n"
    "allow_users = 0, 1234,root\n"
    "allow_groups = root 77\n";

static void test_every_key(void **state)
{
    (void)state;
    struct config c;
    char err[256];
    assert_int_equal(load(every_key, &c, err, sizeof err), 0);
    assert_string_equal(c.socket_path, "/run/gllm/test.sock");
    assert_string_equal(c.backend, "cpu");
    assert_int_equal(c.threads, 3);
    assert_int_equal(c.log_level, LOG_DEBUG);
    assert_int_equal(c.limits.max_connections, 17);
    assert_int_equal(c.limits.max_prehello_bytes, 2048);
    assert_int_equal(c.limits.max_arenas, 9);
    assert_int_equal(c.limits.max_arena_bytes, 2ull << 30);
    assert_int_equal(c.limits.max_device_bytes, 512ull << 20);
    assert_int_equal(c.limits.max_device_bytes_total, 1ull << 40);
    assert_int_equal(c.limits.max_inflight, 33);
    assert_int_equal(c.limits.max_inflight_total, 999);
    assert_int_equal(c.limits.max_elements, 4096);
    assert_int_equal(c.limits.max_outq_bytes, 65536);
    assert_int_equal(c.limits.max_page_entries, 1000);
    assert_int_equal(c.drain_timeout_s, 0);
    assert_int_equal(c.status_interval_s, 3600);
    assert_int_equal(c.busy_poll, 1);
    assert_true(c.deterministic);
    assert_int_equal(c.watchdog_ms, 0);
    assert_int_equal(c.watchdog_gflops, 1000);
    assert_false(c.exit_on_reset_failure);
    assert_int_equal(c.policy.nuids, 3);
    assert_int_equal(c.policy.uids[0], 0);
    assert_int_equal(c.policy.uids[1], 1234);
    assert_int_equal(c.policy.uids[2], 0);            /* root, by name */
    assert_int_equal(c.policy.ngids, 2);
    assert_int_equal(c.policy.gids[0], 0);
    assert_int_equal(c.policy.gids[1], 77);

    /* The other spellings each key takes. */
    static const struct {
        const char *line;
        int level, busy;
        bool det;
    } alt[] = {
        {"log_level = error\nbusy_poll = off\ndeterministic = off\n", LOG_ERR, 0, false},
        {"log_level = warn\nbusy_poll = auto\n", LOG_WARNING, -1, false},
        {"log_level = emerg\n", LOG_EMERG, -1, false},
        {"log_level = notice\n", LOG_NOTICE, -1, false},
    };
    for (size_t i = 0; i < sizeof alt / sizeof *alt; i++) {
        assert_int_equal(load(alt[i].line, &c, err, sizeof err), 0);
        assert_int_equal(c.log_level, alt[i].level);
        assert_int_equal(c.busy_poll, alt[i].busy);
        assert_int_equal(c.deterministic, alt[i].det);
    }
    assert_int_equal(load("", &c, err, sizeof err), 0);   /* empty: the defaults */
    struct config d;
    config_defaults(&d);
    assert_config_equal(&c, &d);
}

/* Each bad line is refused with its code and "PATH:LINE: why", and nothing of the file is
 * applied, not even the good lines before it. */
static void test_bad_values(void **state)
{
    (void)state;
    char long_socket[160] = "socket = /";
    memset(long_socket + 10, 'a', 120);
    long_socket[130] = '\n';
    long_socket[131] = '\0';
    char many_users[400] = "allow_users = ";
    for (int i = 0; i < CONFIG_MAX_IDS + 1; i++)
        snprintf(many_users + strlen(many_users), sizeof many_users - strlen(many_users), "%d,", i);
    strcat(many_users, "\n");
    const struct {
        const char *line;
        int code;
        const char *why;
    } bad[] = {
        {"threads = -1\n", -EINVAL, "threads wants a number from 0 to 1024"},
        {"threads = 1025\n", -ERANGE, "threads wants"},
        {"threads = 12x\n", -ERANGE, "threads wants"},
        {"threads =\n", -EINVAL, "threads wants"},
        {"max_arenas = 0\n", -ERANGE, "max_arenas wants a number from 1 to 256"},
        {"max_arena_bytes = 4095\n", -ERANGE, "max_arena_bytes"},
        {"max_arena_bytes = 2P\n", -ERANGE, "max_arena_bytes"},
        {"max_arena_bytes = 2048T\n", -ERANGE, "max_arena_bytes"},
        {"max_elements = 99999999999999999999999\n", -ERANGE, "max_elements"},
        {"busy_poll = yes\n", -EINVAL, "busy_poll wants auto, on or off"},
        {"deterministic = true\n", -EINVAL, "deterministic wants on or off"},
        {"socket = relative/gllmd.sock\n", -EINVAL, "socket wants an absolute path"},
        {long_socket, -EINVAL, "socket wants an absolute path"},
        {"backend = rocm\n", -EINVAL, "backend wants auto or one of cuda"},
        {"log_level = loud\n", -EINVAL, "log_level wants"},
        {"allow_users = no-such-user-gllm\n", -ENOENT, "allow_users: no user named 'no-such-user-gllm'"},
        {"allow_groups = no-such-group-gllm\n", -ENOENT, "allow_groups: no group named"},
        {many_users, -E2BIG, "allow_users: more than 32 entries"},
        {"just words\n", -EINVAL, "expected 'key = value'"},
        {"color = blue\n", -EINVAL, "unknown key 'color'"},
        {"Threads = 2\n", -EINVAL, "unknown key 'Threads'"},     /* keys are case-sensitive */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[600], err[300], want[64];
        snprintf(text, sizeof text, "# first\nthreads = 7\n%s", bad[i].line);
        struct config c;
        int r = load(text, &c, err, sizeof err);
        if (r != bad[i].code || !strstr(err, bad[i].why))
            fail_msg("'%.40s': got %d '%s', want %d '%s'", bad[i].line, r, err, bad[i].code,
                     bad[i].why);
        snprintf(want, sizeof want, "%s:3: ", path);
        assert_true(strncmp(err, want, strlen(want)) == 0);
        assert_int_equal(c.threads, 0);                  /* line 2 not applied either */
    }
}

/* A line longer than the parser's buffer is refused, not split into two lines. */
static void test_long_line(void **state)
{
    (void)state;
    char *text = malloc(3000);
    assert_non_null(text);
    memset(text, ' ', 2990);
    memcpy(text, "threads = 1", 11);
    text[2990] = '\n';
    text[2991] = '\0';
    struct config c;
    char err[256];
    assert_int_equal(load(text, &c, err, sizeof err), -E2BIG);
    assert_non_null(strstr(err, ":1: line longer than"));
    free(text);
}

/* Every numeric key takes its minimum and maximum and refuses one past either. */
static void test_limits(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        unsigned long long min, max;
    } keys[] = {
        {"threads", 0, 1024},
        {"max_connections", 1, 65536},
        {"max_arenas", 1, 256},
        {"max_arena_bytes", 4096, 1ull << 50},
        {"max_device_bytes", 4096, 1ull << 50},
        {"max_device_bytes_total", 4096, 1ull << 50},
        {"max_inflight", 1, 1 << 20},
        {"max_inflight_total", 1, 1 << 24},
        {"max_prehello_bytes", 64, 65536},
        {"max_elements", 1, 1ull << 50},
        {"max_outq_bytes", 65536, 1u << 30},
        {"max_page_entries", 1, 1u << 28},
        {"drain_timeout_s", 0, 3600},
        {"status_interval_s", 1, 3600},
    };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const unsigned long long v[4] = {keys[i].min, keys[i].max, keys[i].min - 1, keys[i].max + 1};
        for (int j = 0; j < 4; j++) {
            if (j == 2 && keys[i].min == 0)
                continue;                              /* no number below 0 to write */
            char text[128], err[256];
            snprintf(text, sizeof text, "%s = %llu\n", keys[i].key, v[j]);
            struct config c;
            int r = load(text, &c, err, sizeof err);
            if (r != (j < 2 ? 0 : -ERANGE))
                fail_msg("%s", text);
        }
    }
    /* The limits land in their own fields: the maximum of each, read back. */
    struct config c;
    char err[256];
    assert_int_equal(load("max_connections = 65536\nmax_page_entries = 268435456\n"
                          "max_elements = 1125899906842624\n", &c, err, sizeof err), 0);
    assert_int_equal(c.limits.max_connections, 65536);
    assert_int_equal(c.limits.max_page_entries, 1u << 28);
    assert_int_equal(c.limits.max_elements, 1ull << 50);
}

static void test_missing_file(void **state)
{
    (void)state;
    struct config c, d;
    char err[256] = "";
    config_defaults(&c);
    config_defaults(&d);
    assert_int_equal(config_load(&c, "/nonexistent/gllmd.conf", false, err, sizeof err), 0);
    assert_config_equal(&c, &d);
    assert_int_equal(config_load(&c, "/nonexistent/gllmd.conf", true, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "/nonexistent/gllmd.conf"));
}

/* Flags win over the file only for the fields they set. */
static void test_overrides(void **state)
{
    (void)state;
    struct config c;
    char err[256];
    assert_int_equal(load(every_key, &c, err, sizeof err), 0);
    struct config_overrides o = {.threads = true, .log_level = true};
    o.values.threads = 11, o.values.log_level = LOG_ERR;
    snprintf(o.values.backend, sizeof o.values.backend, "cuda");   /* not flagged: ignored */
    config_apply_overrides(&c, &o);
    assert_int_equal(c.threads, 11);
    assert_int_equal(c.log_level, LOG_ERR);
    assert_string_equal(c.backend, "cpu");
    assert_int_equal(c.limits.max_inflight, 33);
    o.max_inflight = o.backend = o.socket_path = true;
    o.values.limits.max_inflight = 5;
    snprintf(o.values.socket_path, sizeof o.values.socket_path, "/tmp/x.sock");
    config_apply_overrides(&c, &o);
    assert_int_equal(c.limits.max_inflight, 5);
    assert_string_equal(c.backend, "cuda");
    assert_string_equal(c.socket_path, "/tmp/x.sock");
}

static void test_policy(void **state)
{
    (void)state;
    struct access_policy p = {0};
    assert_true(config_policy_allows(&p, 1000, 1000, NULL, 0));      /* no lists: everyone */
    p.uids[p.nuids++] = 1000;
    assert_true(config_policy_allows(&p, 1000, 5, NULL, 0));
    assert_false(config_policy_allows(&p, 1001, 5, NULL, 0));
    p.gids[p.ngids++] = 44;
    assert_true(config_policy_allows(&p, 1001, 44, NULL, 0));        /* primary group */
    const gid_t groups[] = {3, 44};
    assert_true(config_policy_allows(&p, 1001, 5, groups, 2));       /* supplementary */
    assert_false(config_policy_allows(&p, 1001, 5, groups, 1));
}

/* What gllmd --check-config prints is a configuration file that loads back to the same
 * configuration (log_level was once printed as a number the parser refuses). */
static void test_check_config_round_trip(void **state)
{
    (void)state;
    const char *gllmd = getenv("GLLMD_PATH") ? getenv("GLLMD_PATH") : GLLMD_PATH;
    write_file(path, every_key);
    char out[] = "/tmp/gllm-config-out-XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --check-config --config '%s' > '%s'", gllmd, path, out);
    assert_int_equal(system(cmd), 0);
    struct config want, got;
    char err[256] = "";
    config_defaults(&want);
    assert_int_equal(config_load(&want, path, true, err, sizeof err), 0);
    config_defaults(&got);
    int r = config_load(&got, out, true, err, sizeof err);
    unlink(out);
    if (r != 0)
        fail_msg("--check-config's output does not load back: %s", err);
    assert_config_equal(&got, &want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_key),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_check_config_round_trip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
