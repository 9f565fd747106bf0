/* Parser for gllmd.conf: one "key = value" per line, '#' comments, strict about the rest. */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "backend.h"
#include "config.h"

void config_defaults(struct config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->backend, sizeof cfg->backend, "auto");
    cfg->limits = (struct limits)LIMITS_DEFAULT;
    cfg->log_level = LOG_INFO;
    cfg->drain_timeout_s = 60;     /* below the unit's TimeoutStopSec=90 */
    cfg->status_interval_s = 5;
    cfg->busy_poll = -1;
    /* Generous: the longest prefill measured takes well under a second; a kernel still
     * running after this has hung, not slowed down. */
    cfg->watchdog_ms = 20000;
    cfg->watchdog_gflops = 10;
    cfg->exit_on_reset_failure = true;
    cfg->device_processes = true;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static int parse_u64(const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*v))
        return -EINVAL;
    unsigned long long x = strtoull(v, &end, 10);
    uint64_t mult = 1;
    /* Byte sizes may carry a binary suffix: 64G, 512M, 4K. */
    if (*end == 'K' || *end == 'k')
        mult = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm')
        mult = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g')
        mult = 1ull << 30, end++;
    else if (*end == 'T' || *end == 't')
        mult = 1ull << 40, end++;
    if (errno || *end != '\0' || x > max / mult || x * mult < min || x * mult > max)
        return -ERANGE;
    *out = x * mult;
    return 0;
}

static const char *const level_names[] = {"emerg", "alert", "crit", "err", "warning", "notice",
                                          "info", "debug"};

const char *config_level_name(int level)
{
    return level_names[level & 7];
}

static int parse_level(const char *v, int *out)
{
    const char *const *names = level_names;
    for (int i = 0; i < 8; i++)
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return 0;
        }
    if (strcmp(v, "error") == 0 || strcmp(v, "warn") == 0) {
        *out = v[0] == 'e' ? LOG_ERR : LOG_WARNING;
        return 0;
    }
    return -EINVAL;
}

/* A comma-separated list of names or numeric ids. */
static int parse_ids(char *v, bool users, uint32_t *ids, int *n, char *bad, size_t badlen)
{
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(v, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (*n == CONFIG_MAX_IDS) {
            snprintf(bad, badlen, "more than %d entries", CONFIG_MAX_IDS);
            return -E2BIG;
        }
        uint64_t id;
        if (parse_u64(tok, 0, UINT32_MAX - 1, &id) == 0) {
            ids[(*n)++] = (uint32_t)id;
            continue;
        }
        if (users) {
            struct passwd *pw = getpwnam(tok);
            if (pw) {
                ids[(*n)++] = pw->pw_uid;
                continue;
            }
        } else {
            struct group *gr = getgrnam(tok);
            if (gr) {
                ids[(*n)++] = gr->gr_gid;
                continue;
            }
        }
        snprintf(bad, badlen, "no %s named '%s'", users ? "user" : "group", tok);
        return -ENOENT;
    }
    return 0;
}

static int set_key(struct config *c, const char *key, char *val, char *why, size_t whylen)
{
    uint64_t x;
    int r = 0;
#define UINT_KEY(name, field, min, max)                                                      \
    if (strcmp(key, name) == 0) {                                                            \
        if ((r = parse_u64(val, min, max, &x)) < 0)                                          \
            snprintf(why, whylen, "%s wants a number from %llu to %llu", name,               \
                     (unsigned long long)(min), (unsigned long long)(max));                  \
        else                                                                                 \
            field = x;                                                                       \
        return r;                                                                            \
    }
    UINT_KEY("threads", c->threads, 0, 1024)
    UINT_KEY("max_connections", c->limits.max_connections, 1, 65536)
    UINT_KEY("max_arenas", c->limits.max_arenas, 1, 256)
    UINT_KEY("max_arena_bytes", c->limits.max_arena_bytes, 4096, 1ull << 50)
    UINT_KEY("max_device_bytes", c->limits.max_device_bytes, 4096, 1ull << 50)
    UINT_KEY("max_device_bytes_total", c->limits.max_device_bytes_total, 4096, 1ull << 50)
    UINT_KEY("max_inflight", c->limits.max_inflight, 1, 1 << 20)
    UINT_KEY("max_inflight_total", c->limits.max_inflight_total, 1, 1 << 24)
    UINT_KEY("max_prehello_bytes", c->limits.max_prehello_bytes, 64, 65536)
    UINT_KEY("max_elements", c->limits.max_elements, 1, 1ull << 50)
    UINT_KEY("max_outq_bytes", c->limits.max_outq_bytes, 65536, 1u << 30)
    UINT_KEY("max_page_entries", c->limits.max_page_entries, 1, 1u << 28)
    UINT_KEY("wait_timeout_ms", c->limits.wait_timeout_ms, 1, GLLM_WAIT_TIMEOUT_MS_MAX)
    UINT_KEY("drain_timeout_s", c->drain_timeout_s, 0, 3600)
    UINT_KEY("status_interval_s", c->status_interval_s, 1, 3600)
    UINT_KEY("watchdog_ms", c->watchdog_ms, 0, 86400000)
    UINT_KEY("watchdog_gflops", c->watchdog_gflops, 1, 1000000000)
#undef UINT_KEY
    if (strcmp(key, "busy_poll") == 0) {
        static const char *const names[3] = {"auto", "off", "on"};
        for (int i = 0; i < 3; i++)
            if (strcmp(val, names[i]) == 0) {
                c->busy_poll = i - 1;
                return 0;
            }
        snprintf(why, whylen, "busy_poll wants auto, on or off");
        return -EINVAL;
    }
    if (strcmp(key, "exit_on_reset_failure") == 0) {
        if (strcmp(val, "on") != 0 && strcmp(val, "off") != 0) {
            snprintf(why, whylen, "exit_on_reset_failure wants on or off");
            return -EINVAL;
        }
        c->exit_on_reset_failure = val[1] == 'n';
        return 0;
    }
    if (strcmp(key, "device_processes") == 0) {
        if (strcmp(val, "on") != 0 && strcmp(val, "off") != 0) {
            snprintf(why, whylen, "device_processes wants on or off");
            return -EINVAL;
        }
        c->device_processes = val[1] == 'n';
        return 0;
    }
    if (strcmp(key, "deterministic") == 0) {
        if (strcmp(val, "on") != 0 && strcmp(val, "off") != 0) {
            snprintf(why, whylen, "deterministic wants on or off");
            return -EINVAL;
        }
        c->deterministic = val[1] == 'n';
        return 0;
    }
    if (strcmp(key, "socket") == 0) {
        if (val[0] != '/' || strlen(val) >= sizeof c->socket_path) {
            snprintf(why, whylen, "socket wants an absolute path under %zu bytes",
                     sizeof c->socket_path);
            return -EINVAL;
        }
        snprintf(c->socket_path, sizeof c->socket_path, "%s", val);
        return 0;
    }
    if (strcmp(key, "backend") == 0) {
        if (!backend_known(val)) {
            snprintf(why, whylen, "backend wants auto or one of %s", backend_names());
            return -EINVAL;
        }
        snprintf(c->backend, sizeof c->backend, "%s", val);
        return 0;
    }
    if (strcmp(key, "log_level") == 0) {
        if ((r = parse_level(val, &c->log_level)) < 0)
            snprintf(why, whylen, "log_level wants err, warning, notice, info or debug");
        return r;
    }
    if (strcmp(key, "allow_users") == 0) {
        char bad[96];
        r = parse_ids(val, true, c->policy.uids, &c->policy.nuids, bad, sizeof bad);
        if (r < 0)
            snprintf(why, whylen, "allow_users: %s", bad);
        return r;
    }
    if (strcmp(key, "admin_users") == 0 || strcmp(key, "admin_groups") == 0) {
        char bad[96];
        const bool users = key[6] == 'u';
        r = users ? parse_ids(val, true, c->admin.uids, &c->admin.nuids, bad, sizeof bad)
                  : parse_ids(val, false, c->admin.gids, &c->admin.ngids, bad, sizeof bad);
        if (r < 0)
            snprintf(why, whylen, "%s: %s", key, bad);
        return r;
    }
    if (strcmp(key, "allow_groups") == 0) {
        char bad[96];
        r = parse_ids(val, false, c->policy.gids, &c->policy.ngids, bad, sizeof bad);
        if (r < 0)
            snprintf(why, whylen, "allow_groups: %s", bad);
        return r;
    }
    snprintf(why, whylen, "unknown key '%s'", key);
    return -EINVAL;
}

int config_load(struct config *cfg, const char *path, bool required, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT && !required)
            return 0;
        int e = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(-e));
        return e;
    }
    struct config c = *cfg;
    char line[1024];
    int lineno = 0, r = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, errlen, "%s:%d: line longer than %zu bytes", path, lineno, sizeof line - 2);
            r = -E2BIG;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected 'key = value'", path, lineno);
            r = -EINVAL;
            break;
        }
        *eq = '\0';
        char why[160];
        if ((r = set_key(&c, trim(s), trim(eq + 1), why, sizeof why)) < 0) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
            break;
        }
    }
    fclose(f);
    if (r == 0)
        *cfg = c;
    return r;
}

void config_apply_overrides(struct config *cfg, const struct config_overrides *o)
{
    if (o->socket_path)
        snprintf(cfg->socket_path, sizeof cfg->socket_path, "%s", o->values.socket_path);
    if (o->backend)
        snprintf(cfg->backend, sizeof cfg->backend, "%s", o->values.backend);
    if (o->threads)
        cfg->threads = o->values.threads;
    if (o->max_inflight)
        cfg->limits.max_inflight = o->values.limits.max_inflight;
    if (o->log_level)
        cfg->log_level = o->values.log_level;
}

bool config_policy_allows(const struct access_policy *p, uid_t uid, gid_t gid, const gid_t *groups,
                          int ngroups)
{
    if (p->nuids == 0 && p->ngids == 0)
        return true;
    for (int i = 0; i < p->nuids; i++)
        if (p->uids[i] == uid)
            return true;
    for (int i = 0; i < p->ngids; i++) {
        if (p->gids[i] == gid)
            return true;
        for (int j = 0; j < ngroups; j++)
            if (p->gids[i] == groups[j])
                return true;
    }
    return false;
}

bool config_is_admin(const struct access_policy *p, uid_t uid, gid_t gid, const gid_t *groups,
                     int ngroups)
{
    if (uid == 0 || uid == geteuid())
        return true;
    /* Empty lists name nobody here, where for allow_ they admit everyone. */
    return (p->nuids || p->ngids) && config_policy_allows(p, uid, gid, groups, ngroups);
}
