/* gllmctl's shared helpers: connecting (and saying why not), colour, errors, JSON output,
 * timing and sorting for the benchmarks. */
#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#define SYSTEM_SOCKET "/run/gllm/gllmd.sock"

static bool no_color;
static bool connect_quietly;

void ctl_connect_quiet(bool quiet)
{
    connect_quietly = quiet;
}

void ctl_color_disable(void)
{
    no_color = true;
}

bool ctl_color(FILE *stream)
{
    const char *nc = getenv("NO_COLOR"), *term = getenv("TERM");
    return !no_color && !(nc && nc[0]) && !(term && strcmp(term, "dumb") == 0) &&
           isatty(fileno(stream));
}

void ctl_error(const char *fmt, ...)
{
    const bool color = ctl_color(stderr);
    fprintf(stderr, "gllmctl: %serror:%s ", color ? "\033[1;31m" : "", color ? "\033[0m" : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int ctl_parse_int(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* The group that keeps us out of path: the socket's, or its directory's when we cannot
 * even look at the socket (gllm's /run/gllm is mode 0750). */
static void explain_permission(const char *path)
{
    struct stat st;
    char where[128];
    snprintf(where, sizeof where, "%s", path);
    int r = stat(where, &st);
    if (r < 0 && errno == EACCES) {
        char *slash = strrchr(where, '/');
        if (slash && slash != where)
            *slash = '\0';
        r = stat(where, &st);
    }
    const struct group *gr = r == 0 ? getgrgid(st.st_gid) : NULL;
    const mode_t group_needs = r == 0 && S_ISDIR(st.st_mode) ? 0050 : 0060;
    if (gr && (st.st_mode & group_needs) != group_needs) {
        fprintf(stderr, "gllmctl: %s (mode %04o) admits no group, only its owner: ask the "
                        "administrator, or run gllmctl as that user\n",
                where, (unsigned)(st.st_mode & 07777));
        return;
    }
    if (!gr) {
        fprintf(stderr, "gllmctl: ask the administrator for access to %s, or run gllmctl "
                        "as the user gllmd runs as\n", path);
        return;
    }
    /* Joining root's group would be bad advice: a gllmd started by hand as root. */
    if (st.st_gid == 0) {
        fprintf(stderr, "gllmctl: %s belongs to root (mode %04o): run gllmctl with sudo, or "
                        "run gllmd as a service\n  (systemctl start gllmd.socket: its socket "
                        "admits the group gllm)\n", where, (unsigned)(st.st_mode & 07777));
        return;
    }
    fprintf(stderr,
            "gllmctl: %s belongs to group '%s' (mode %04o), which you are not in: join it with\n"
            "  sudo usermod -aG %s $USER\n"
            "then log in again (or run 'newgrp %s' in this shell)\n",
            where, gr->gr_name, (unsigned)(st.st_mode & 07777), gr->gr_name, gr->gr_name);
}

int ctl_connect(const char *socket_path, gllm_client **c)
{
    /* Where to look: --socket or $GLLM_SOCKET alone; else the library's default and then the
     * system socket, which a user whose default is under XDG_RUNTIME_DIR would otherwise
     * never find when gllmd runs as a system service. */
    char paths[2][108] = {"", ""};
    int n = 0;
    const char *env = getenv("GLLM_SOCKET");
    if (socket_path) {
        snprintf(paths[n++], sizeof paths[0], "%s", socket_path);
    } else {
        if (gllm_default_socket_path(paths[0], sizeof paths[0]) > 0)
            n++;
        if (!(env && env[0]) && (n == 0 || strcmp(paths[0], SYSTEM_SOCKET) != 0))
            snprintf(paths[n++], sizeof paths[0], "%s", SYSTEM_SOCKET);
    }
    /* Permission matters more than absence: name it when any path refused us. */
    int denied = -1, other = -1, res[2] = {-ENOENT, -ENOENT};
    for (int i = 0; i < n; i++) {
        res[i] = gllm_connect(paths[i], c);
        if (res[i] == 0)
            return 0;
        if (res[i] == -EACCES || res[i] == -EPERM || res[i] == GLLM_EDENIED) {
            if (denied < 0)
                denied = i;
        } else if (res[i] != -ENOENT && res[i] != -ECONNREFUSED && res[i] != -ENOTDIR) {
            if (other < 0)
                other = i;
        }
    }
    if (connect_quietly)
        return denied >= 0 ? CTL_EXIT_NO_PERMISSION
               : other < 0 ? CTL_EXIT_NOT_RUNNING : CTL_EXIT_FAILURE;
    if (denied >= 0) {
        if (res[denied] == GLLM_EDENIED) {
            ctl_error("gllmd at %s refuses this user: its access policy (allow_users, "
                      "allow_groups in gllmd.conf) does not admit you", paths[denied]);
        } else {
            ctl_error("permission denied connecting to gllmd at %s", paths[denied]);
            explain_permission(paths[denied]);
        }
        return CTL_EXIT_NO_PERMISSION;
    }
    if (other < 0) {
        if (n == 0) {
            ctl_error("gllmd is not running: no socket path applies (not root, and neither "
                      "GLLM_SOCKET nor XDG_RUNTIME_DIR is set)");
        } else {
            fprintf(stderr, "gllmctl: %serror:%s gllmd is not running: tried ",
                    ctl_color(stderr) ? "\033[1;31m" : "", ctl_color(stderr) ? "\033[0m" : "");
            for (int i = 0; i < n; i++)
                fprintf(stderr, "%s%s", i ? " and " : "", paths[i]);
            fprintf(stderr, "%s\n", socket_path ? " (--socket)"
                                    : env && env[0] ? " (GLLM_SOCKET)" : "");
        }
        fprintf(stderr, "gllmctl: start it (systemctl start gllmd.socket, or gllmd), or name "
                        "another socket:\n  gllmctl -s PATH ...   or   "
                        "GLLM_SOCKET=PATH gllmctl ...\n");
        return CTL_EXIT_NOT_RUNNING;
    }
    ctl_error("cannot talk to gllmd at %s: %s", paths[other], gllm_strerror(res[other]));
    return CTL_EXIT_FAILURE;
}

uint64_t ctl_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void ctl_sort_u64(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
}

void ctl_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

const char *ctl_first_device_name(gllm_client *c, gllm_device_info *buf)
{
    *buf = (gllm_device_info)GLLM_DEVICE_INFO_INIT;
    return gllm_client_device(c, 0, buf) == 0 ? buf->name : "";
}

void ctl_json_open(gllm_client *c, const char *list)
{
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_device_info dev;
    gllm_client_caps(c, &caps);
    printf("{\"backend\": ");
    ctl_json_str(caps.backend);
    printf(", \"device\": ");
    ctl_json_str(ctl_first_device_name(c, &dev));
    printf(", \"%s\": [", list);
}

double ctl_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void ctl_progress(int done, int total, const char *what, double started)
{
    if (!isatty(STDERR_FILENO))
        return;
    if (done >= total) {
        fputs("\r\033[K", stderr);
        return;
    }
    double elapsed = ctl_now_s() - started;
    if (done == 0)
        fprintf(stderr, "\r\033[K[%d/%d] %.50s", done + 1, total, what);
    else
        fprintf(stderr, "\r\033[K[%d/%d] %.40s  %.0f s, about %.0f s left", done + 1, total, what,
                elapsed, elapsed / done * (total - done));
    fflush(stderr);
}

int ctl_bench_parse(int argc, char **argv, struct ctl_bench_opts *o)
{
    *o = (struct ctl_bench_opts){.iters = 5};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            o->json = true;
        } else if (strcmp(argv[i], "--decode") == 0) {
            o->decode = true;
        } else if (strcmp(argv[i], "--wide") == 0) {
            o->wide = true;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            o->iters = atoi(argv[++i]);
            if (o->iters < 1 || o->iters > 100000) {
                ctl_error("bench: --iters wants 1 to 100000");
                return 2;
            }
        } else {
            ctl_error("bench: unknown argument '%s'", argv[i]);
            return 2;
        }
    }
    return 0;
}

void ctl_csv_str(const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}
