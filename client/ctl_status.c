/* gllmctl status: the daemon's counters, devices and clients, as text, JSON or CSV, once or
 * every few seconds (--watch). */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

/* Device i as hello announced it (the status reply carries the same). */
static gllm_device_info device(gllm_client *c, int i)
{
    gllm_device_info d = GLLM_DEVICE_INFO_INIT;
    gllm_client_device(c, i, &d);
    return d;
}

static gllm_client_info listed(gllm_client *c, int i)
{
    gllm_client_info ci = GLLM_CLIENT_INFO_INIT;
    gllm_status_client(c, i, &ci);
    return ci;
}

static void print_json(gllm_client *c, const gllm_status *st)
{
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_client_caps(c, &caps);
    printf("{\"schema_version\": 1, \"running\": true, \"daemon\": ");
    ctl_json_str(st->daemon_version);
    printf(", \"backend\": ");
    ctl_json_str(st->backend);
    printf(", \"uptime_s\": %.3f, \"clients\": %u, \"jobs_done\": %llu, \"jobs_failed\": %llu, "
           "\"jobs_inflight\": %llu, \"arenas\": %u, \"bytes_mapped\": %llu, \"dtensors\": %u, "
           "\"device_bytes\": %llu, \"exported_bytes\": %llu, \"imported_bytes\": %llu, "
           "\"requests\": %llu, \"ring_requests\": %llu, "
           "\"errors\": %llu, \"limit_violations\": %llu, \"devices\": [",
           st->uptime_s, st->clients, (unsigned long long)st->jobs_done,
           (unsigned long long)st->jobs_failed, (unsigned long long)st->jobs_inflight, st->arenas,
           (unsigned long long)st->bytes_mapped, st->dtensors,
           (unsigned long long)st->device_bytes, (unsigned long long)st->exported_bytes,
           (unsigned long long)st->imported_bytes, (unsigned long long)st->requests,
           (unsigned long long)st->ring_requests, (unsigned long long)st->errors,
           (unsigned long long)st->limit_violations);
    for (int i = 0; i < caps.ndevices; i++) {
        const gllm_device_info d = device(c, i);
        printf("%s{\"index\": %d, \"kind\": ", i ? ", " : "", d.index);
        ctl_json_str(d.kind);
        printf(", \"name\": ");
        ctl_json_str(d.name);
        char cc[16] = "";
        if (d.cc_major)
            snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
        printf(", \"memory_bytes\": %llu, \"threads\": %d, \"compute_capability\": \"%s\", "
               "\"process_pid\": %d, \"image\": ", (unsigned long long)d.memory_bytes, d.threads, cc,
               d.process_pid);
        ctl_json_str(d.image);
        uint64_t used = 0, total = 0;
        if (gllm_status_device_memory(c, i, &used, &total) == 0)
            printf(", \"memory_used\": %llu, \"memory_total\": %llu",
                   (unsigned long long)used, (unsigned long long)total);
        printf("}");
    }
    gllm_metrics m = GLLM_METRICS_INIT;
    printf("], \"jobs_by_method\": [");
    if (gllm_status_metrics(c, &m) == 0)
        for (int i = 0; i < m.nmethods; i++) {
            printf("%s{\"method\": ", i ? ", " : "");
            ctl_json_str(m.jobs[i].method);
            printf(", \"ok\": %llu, \"failed\": %llu}", (unsigned long long)m.jobs[i].ok,
                   (unsigned long long)m.jobs[i].failed);
        }
    printf("], \"device_resets\": %llu", (unsigned long long)m.device_resets);
    /* Of successful jobs, as the metrics' histograms: seconds in all and jobs counted. */
    const struct { const char *name; const gllm_histogram *h; } times[] = {
        {"queue", &m.queue_seconds}, {"kernel", &m.kernel_seconds}, {"added", &m.added_seconds}};
    printf(", \"job_seconds\": {");
    for (int i = 0; i < 3; i++)
        printf("%s\"%s\": {\"sum\": %.9f, \"count\": %llu}", i ? ", " : "", times[i].name,
               times[i].h->sum, (unsigned long long)times[i].h->count);
    printf("}");
    printf(", \"client_list\": [");
    for (int i = 0; i < st->nlisted; i++) {
        const gllm_client_info ci = listed(c, i);
        printf("%s{\"pid\": %d, \"uid\": %u, \"gid\": %u, \"comm\": ", i ? ", " : "",
               ci.pid, ci.uid, ci.gid);
        ctl_json_str(ci.comm);
        printf(", \"arenas\": %u, \"arena_bytes\": %llu, \"device_bytes\": %llu, "
               "\"exported_bytes\": %llu, \"imported_bytes\": %llu, \"inflight\": %u}",
               ci.arenas, (unsigned long long)ci.arena_bytes,
               (unsigned long long)ci.device_bytes, (unsigned long long)ci.exported_bytes,
               (unsigned long long)ci.imported_bytes, ci.inflight);
    }
    printf("]}\n");
}

/* Prints one line, cut to 80 columns unless wide: the default output fits a terminal. */
static void line(bool wide, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(bool wide, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!wide && strlen(buf) > 80)
        memcpy(buf + 77, "...", 4);
    puts(buf);
}

/* A histogram's mean in microseconds, "-" when it holds nothing (no job has succeeded). */
static const char *mean_us(const gllm_histogram *h, char *buf, size_t len)
{
    if (!h->count)
        return "-";
    snprintf(buf, len, "%.1f us", h->sum / (double)h->count * 1e6);
    return buf;
}

static void print_text(gllm_client *c, const gllm_status *st, bool wide)
{
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_client_caps(c, &caps);
    const bool color = ctl_color(stdout);
    line(wide, "gllmd %s: %srunning%s, up %.0f s, backend %s", st->daemon_version,
         color ? "\033[1;32m" : "", color ? "\033[0m" : "", st->uptime_s, st->backend);
    for (int i = 0; i < caps.ndevices; i++) {
        const gllm_device_info d = device(c, i);
        uint64_t used = 0, total = 0;
        char mem[64];
        if (gllm_status_device_memory(c, i, &used, &total) == 0 && total)
            snprintf(mem, sizeof mem, "%.1f of %.1f GiB used", (double)used / (1ull << 30),
                     (double)total / (1ull << 30));
        else
            snprintf(mem, sizeof mem, "%.1f GiB", (double)d.memory_bytes / (1ull << 30));
        /* Its process first, where a long name cannot cut it off. */
        char dev[48];
        if (d.process_pid > 0)
            snprintf(dev, sizeof dev, "device %d (pid %d)", d.index, d.process_pid);
        else
            snprintf(dev, sizeof dev, "device %d", d.index);
        if (d.cc_major && wide)
            line(wide, "  %s: %s (%s %d.%d), %s, kernels: %s", dev, d.name, d.kind, d.cc_major,
                 d.cc_minor, mem, d.image);
        else if (d.cc_major)
            line(wide, "  %s: %s (%s %d.%d), %s", dev, d.name, d.kind, d.cc_major, d.cc_minor,
                 mem);
        else
            line(wide, "  %s: %s (%s), %s, %d threads", dev, d.name, d.kind, mem, d.threads);
    }
    line(wide, "clients: %u   arenas: %u (%.1f MiB)   device tensors: %u (%.1f MiB)",
         st->clients, st->arenas, (double)st->bytes_mapped / (1 << 20), st->dtensors,
         (double)st->device_bytes / (1 << 20));
    if (st->exported_bytes || st->imported_bytes)
        line(wide, "shared with clients: %.1f MiB exported, %.1f MiB imported",
             (double)st->exported_bytes / (1 << 20), (double)st->imported_bytes / (1 << 20));
    line(wide, "jobs: %llu done, %llu failed, %llu in flight", (unsigned long long)st->jobs_done,
         (unsigned long long)st->jobs_failed, (unsigned long long)st->jobs_inflight);
    line(wide, "requests: %llu (%llu by ring)   errors: %llu (%llu limits hit)",
         (unsigned long long)st->requests, (unsigned long long)st->ring_requests,
         (unsigned long long)st->errors, (unsigned long long)st->limit_violations);
    gllm_metrics m = GLLM_METRICS_INIT;
    if (wide && gllm_status_metrics(c, &m) == 0) {
        for (int i = 0; i < m.nmethods; i++)
            if (m.jobs[i].ok || m.jobs[i].failed)
                line(wide, "  %-18s %10llu ok %10llu failed", m.jobs[i].method,
                     (unsigned long long)m.jobs[i].ok, (unsigned long long)m.jobs[i].failed);
        char q[32], k[32], a[32];
        line(wide, "mean per job: queued %s, kernel %s, added by gllmd %s",
             mean_us(&m.queue_seconds, q, sizeof q), mean_us(&m.kernel_seconds, k, sizeof k),
             mean_us(&m.added_seconds, a, sizeof a));
        line(wide, "device resets: %llu", (unsigned long long)m.device_resets);
    }
    if (st->nlisted)
        line(wide, "\n  %7s %6s %-15s %6s %10s %10s %10s %5s", "PID", "UID", "COMMAND", "ARENAS",
             "MAPPED", "DEVICE", "SHARED", "JOBS");
    for (int i = 0; i < st->nlisted; i++) {
        const gllm_client_info ci = listed(c, i);
        /* SHARED: of DEVICE, the memory this client and gllmd both map (either's). */
        line(wide, "  %7d %6u %-15s %6u %8.1f M %8.1f M %8.1f M %5u", ci.pid, ci.uid, ci.comm,
             ci.arenas, (double)ci.arena_bytes / (1 << 20), (double)ci.device_bytes / (1 << 20),
             (double)(ci.exported_bytes + ci.imported_bytes) / (1 << 20), ci.inflight);
    }
}

/* A histogram's mean in microseconds for CSV, "" when it holds nothing. */
static void csv_mean_us(const gllm_histogram *h)
{
    if (h->count)
        printf("%.3f", h->sum / (double)h->count * 1e6);
}

static const char csv_header[] =
    "time,running,daemon,backend,uptime_s,clients,jobs_done,jobs_failed,jobs_inflight,"
    "requests,errors,limit_violations,device_resets,queue_mean_us,kernel_mean_us,"
    "added_mean_us,memory_used_bytes,memory_total_bytes\n";

/* One CSV row; c NULL: gllmd not running (running "no", or "unknown" for no permission). */
static void print_csv(gllm_client *c, const gllm_status *st, int down_rc)
{
    char when[32];
    const time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    if (!c) {
        printf("%s,%s,,,,,,,,,,,,,,,,\n", when, down_rc == CTL_EXIT_NOT_RUNNING ? "no" : "unknown");
        return;
    }
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_client_caps(c, &caps);
    gllm_metrics m = GLLM_METRICS_INIT;
    gllm_status_metrics(c, &m);
    uint64_t used_all = 0, total_all = 0;
    for (int i = 0; i < caps.ndevices; i++) {
        uint64_t used = 0, total = 0;
        if (gllm_status_device_memory(c, i, &used, &total) == 0) {
            used_all += used;
            total_all += total;
        }
    }
    printf("%s,yes,", when);
    ctl_csv_str(st->daemon_version);
    putchar(',');
    ctl_csv_str(st->backend);
    printf(",%.3f,%u,%llu,%llu,%llu,%llu,%llu,%llu,%llu,", st->uptime_s, st->clients,
           (unsigned long long)st->jobs_done, (unsigned long long)st->jobs_failed,
           (unsigned long long)st->jobs_inflight, (unsigned long long)st->requests,
           (unsigned long long)st->errors, (unsigned long long)st->limit_violations,
           (unsigned long long)m.device_resets);
    csv_mean_us(&m.queue_seconds);
    putchar(',');
    csv_mean_us(&m.kernel_seconds);
    putchar(',');
    csv_mean_us(&m.added_seconds);
    printf(",%llu,%llu\n", (unsigned long long)used_all, (unsigned long long)total_all);
}

/* gllmd's state when it could not be asked, on stdout as systemctl prints one. */
static void print_down(const struct ctl_globals *g, int rc)
{
    if (g->format == CTL_FORMAT_JSON)
        printf("{\"schema_version\": 1, \"running\": %s}\n",
               rc == CTL_EXIT_NOT_RUNNING ? "false" : "null");
    else if (g->format == CTL_FORMAT_CSV)
        print_csv(NULL, NULL, rc);
    else
        printf("gllmd: %s\n", rc == CTL_EXIT_NOT_RUNNING ? "not running"
                              : rc == CTL_EXIT_NO_PERMISSION ? "unknown (permission denied)"
                              : "unknown");
}

struct status_opts {
    bool wide, watch;
    double interval_s;
    long count;                  /* --count; 0: until interrupted */
};

/* One report, connecting first when *c is NULL (and leaving the connection in *c for the
 * next). The exit status it stands for. */
static int report(const struct ctl_globals *g, const struct status_opts *o, gllm_client **c)
{
    int r = *c ? 0 : ctl_connect(g->socket, c);
    /* systemctl status: 3 not running, 4 for anything else it could not find out. */
    if (r) {
        *c = NULL;
        r = r == CTL_EXIT_NOT_RUNNING ? r : CTL_EXIT_NO_PERMISSION;
        print_down(g, r);
        return r;
    }
    gllm_status st = GLLM_STATUS_INIT;
    r = gllm_status_get(*c, &st);
    if (r < 0) {
        /* Gone between two reports: not running, until it is back. */
        const bool gone = r == -EPIPE || r == -ECONNRESET || r == GLLM_EDISCONNECTED;
        if (!gone)
            ctl_error("status: %s", gllm_strerror(r));
        gllm_disconnect(*c);
        *c = NULL;
        print_down(g, gone ? CTL_EXIT_NOT_RUNNING : CTL_EXIT_NO_PERMISSION);
        return gone ? CTL_EXIT_NOT_RUNNING : CTL_EXIT_NO_PERMISSION;
    }
    if (g->format == CTL_FORMAT_JSON)
        print_json(*c, &st);
    else if (g->format == CTL_FORMAT_CSV)
        print_csv(*c, &st, 0);
    else
        print_text(*c, &st, o->wide);
    return 0;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

int ctl_cmd_status(const struct ctl_globals *g, int argc, char **argv)
{
    struct status_opts o = {.interval_s = 2};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--wide") == 0 || strcmp(argv[i], "-l") == 0) {
            o.wide = true;
        } else if (strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "-w") == 0) {
            o.watch = true;
            /* SECS is optional: the next word when it is a number. */
            char *end;
            double v = i + 1 < argc ? strtod(argv[i + 1], &end) : 0;
            if (i + 1 < argc && end != argv[i + 1] && !*end) {
                if (!(v >= 0.1 && v <= 3600)) {
                    ctl_error("status: --watch wants 0.1 to 3600 seconds, not '%s'", argv[i + 1]);
                    return CTL_EXIT_USAGE;
                }
                o.interval_s = v;
                i++;
            }
        } else if (strcmp(argv[i], "--count") == 0) {
            if (i + 1 >= argc || ctl_parse_int(argv[i + 1], 1, 1000000000, &o.count) < 0) {
                ctl_error("status: --count wants a number of reports, 1 or more");
                return CTL_EXIT_USAGE;
            }
            i++;
        } else {
            ctl_error("status: unknown argument '%s'", argv[i]);
            return CTL_EXIT_USAGE;
        }
    }
    if (o.count && !o.watch) {
        ctl_error("status: --count goes with --watch");
        return CTL_EXIT_USAGE;
    }
    gllm_client *c = NULL;
    if (g->format == CTL_FORMAT_CSV)
        fputs(csv_header, stdout);
    if (!o.watch) {
        int r = report(g, &o, &c);
        if (c)
            gllm_disconnect(c);
        return r;
    }
    /* watch(1) on a terminal: the screen redrawn; otherwise one report after another, for
     * a log (a CSV row or a JSON line each, text reports apart by a blank line). */
    const bool redraw = g->format == CTL_FORMAT_TEXT && isatty(STDOUT_FILENO);
    int r = 0;
    for (long n = 0; !o.count || n < o.count; n++) {
        if (n)
            sleep_s(o.interval_s);
        if (redraw)
            printf("\033[H\033[2JEvery %.1fs: gllmctl status%s\n\n", o.interval_s,
                   o.wide ? " --wide" : "");
        else if (g->format == CTL_FORMAT_TEXT && n)
            putchar('\n');
        r = report(g, &o, &c);
        fflush(stdout);
        ctl_connect_quiet(r != 0);    /* the advice once, not every interval */
    }
    if (c)
        gllm_disconnect(c);
    return r;
}
