/* gllmctl metrics: the daemon's counters in the Prometheus text exposition format (or JSON),
 * on stdout or written atomically to a file for node_exporter's textfile collector. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                 /* mkostemp */
#endif
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"

/* HELP and TYPE of one metric family. */
static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value, escaped as the format wants: backslash, double quote and newline. */
static void label_value(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

/* The shortest decimal form that reads back as the same double (0.001, not 0.00100000002). */
static void number(FILE *f, double v)
{
    char buf[40];
    if (isinf(v)) {
        fputs(v > 0 ? "+Inf" : "-Inf", f);
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    fputs(buf, f);
}

static void gauge(FILE *f, const char *name, const char *help, double v)
{
    family(f, name, "gauge", help);
    fprintf(f, "%s ", name);
    number(f, v);
    fputc('\n', f);
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    family(f, name, "counter", help);
    fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

static void histogram(FILE *f, const char *name, const char *help, const gllm_histogram *h)
{
    family(f, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->nbounds; i++) {
        cum += h->counts[i];
        fprintf(f, "%s_bucket{le=\"", name);
        number(f, h->le[i]);
        fprintf(f, "\"} %llu\n", (unsigned long long)cum);
    }
    cum += h->counts[h->nbounds];
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum ", name, (unsigned long long)cum, name);
    number(f, h->sum);
    fprintf(f, "\n%s_count %llu\n", name, (unsigned long long)h->count);
}

static void exposition(FILE *f, gllm_client *c, const gllm_status *st)
{
    gauge(f, "gllm_up", "Whether gllmd answered the status request (1) or not (0).", c ? 1 : 0);
    if (!c)
        return;
    family(f, "gllm_info", "gauge", "gllmd's version and backend, as labels; always 1.");
    fputs("gllm_info{version=\"", f);
    label_value(f, st->daemon_version);
    fputs("\",backend=\"", f);
    label_value(f, st->backend);
    fputs("\"} 1\n", f);
    gauge(f, "gllm_uptime_seconds", "Seconds since gllmd started.", st->uptime_s);

    gllm_metrics m = GLLM_METRICS_INIT;
    if (gllm_status_metrics(c, &m) == 0) {
        family(f, "gllm_jobs_total", "counter",
               "Jobs settled since gllmd started, by wire method and result.");
        for (int i = 0; i < m.nmethods; i++)
            for (int ok = 1; ok >= 0; ok--) {
                fputs("gllm_jobs_total{method=\"", f);
                label_value(f, m.jobs[i].method);
                fprintf(f, "\",result=\"%s\"} %llu\n", ok ? "ok" : "failed",
                        (unsigned long long)(ok ? m.jobs[i].ok : m.jobs[i].failed));
            }
        histogram(f, "gllm_job_queue_seconds",
                  "Time successful jobs waited for their device.", &m.queue_seconds);
        histogram(f, "gllm_job_kernel_seconds",
                  "Kernel time of successful jobs, as their replies' kernel_ns: GPU events around the "
                  "kernel; on the CPU backend, the compute threads' time.",
                  &m.kernel_seconds);
        histogram(f, "gllm_job_added_seconds",
                  "Latency gllmd adds to successful jobs: from reading the request to the "
                  "job's end, minus the kernel.", &m.added_seconds);
        counter(f, "gllm_device_resets_total",
                "Device resets after a fault or a hung job, every device together.",
                m.device_resets);
    }
    gauge(f, "gllm_clients", "Clients connected.", st->clients);
    gauge(f, "gllm_jobs_in_flight", "Jobs queued or running.", (double)st->jobs_inflight);
    gauge(f, "gllm_arenas", "Shared-memory arenas mapped, all clients.", st->arenas);
    gauge(f, "gllm_arena_mapped_bytes", "Bytes of shared-memory arenas mapped, all clients.",
          (double)st->bytes_mapped);
    gauge(f, "gllm_device_tensors", "Device tensors held, all clients.", st->dtensors);
    gauge(f, "gllm_device_tensor_bytes", "Bytes of device tensors held, all clients.",
          (double)st->device_bytes);
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_client_caps(c, &caps);
    uint64_t used[GLLM_MAX_DEVICES], total[GLLM_MAX_DEVICES];
    int ndev = 0;
    while (ndev < caps.ndevices &&
           gllm_status_device_memory(c, ndev, &used[ndev], &total[ndev]) == 0)
        ndev++;
    if (ndev) {
        family(f, "gllm_device_memory_used_bytes", "gauge",
               "Device memory in use, by device (on the CPU backend: host memory gllmd holds "
               "for device tensors and shared memory).");
        for (int i = 0; i < ndev; i++)
            fprintf(f, "gllm_device_memory_used_bytes{device=\"%d\"} %llu\n", i,
                    (unsigned long long)used[i]);
        family(f, "gllm_device_memory_total_bytes", "gauge",
               "Device memory in all, by device (on the CPU backend: the host's physical "
               "memory).");
        for (int i = 0; i < ndev; i++)
            fprintf(f, "gllm_device_memory_total_bytes{device=\"%d\"} %llu\n", i,
                    (unsigned long long)total[i]);
    }
    counter(f, "gllm_requests_total", "Requests received, by socket or shared-memory ring.",
            st->requests);
    counter(f, "gllm_ring_requests_total", "Requests taken from shared-memory rings.",
            st->ring_requests);
    counter(f, "gllm_error_replies_total", "Error replies sent.", st->errors);
    counter(f, "gllm_limit_violations_total",
            "Requests refused for a size, nesting, quota or in-flight limit.",
            st->limit_violations);
}

static void json_histogram(FILE *f, const char *name, const gllm_histogram *h)
{
    fprintf(f, ", \"%s\": {\"le\": [", name);
    for (int i = 0; i < h->nbounds; i++) {
        fputs(i ? ", " : "", f);
        number(f, h->le[i]);
    }
    fputs("], \"counts\": [", f);
    for (int i = 0; i <= h->nbounds; i++)
        fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)h->counts[i]);
    fputs("], \"sum\": ", f);
    number(f, h->sum);
    fprintf(f, ", \"count\": %llu}", (unsigned long long)h->count);
}

static void json(FILE *f, gllm_client *c, const gllm_status *st)
{
    fprintf(f, "{\"schema_version\": 1, \"up\": %s", c ? "true" : "false");
    gllm_metrics m = GLLM_METRICS_INIT;
    if (c && gllm_status_metrics(c, &m) == 0) {
        fputs(", \"jobs\": [", f);
        for (int i = 0; i < m.nmethods; i++) {
            fprintf(f, "%s{\"method\": \"", i ? ", " : "");
            label_value(f, m.jobs[i].method);   /* a JSON string wants the same escapes */
            fprintf(f, "\", \"ok\": %llu, \"failed\": %llu}", (unsigned long long)m.jobs[i].ok,
                    (unsigned long long)m.jobs[i].failed);
        }
        fputs("]", f);
        json_histogram(f, "queue_seconds", &m.queue_seconds);
        json_histogram(f, "kernel_seconds", &m.kernel_seconds);
        json_histogram(f, "added_seconds", &m.added_seconds);
        fprintf(f, ", \"device_resets\": %llu", (unsigned long long)m.device_resets);
    }
    if (c) {
        fprintf(f, ", \"clients\": %u, \"jobs_in_flight\": %llu, \"requests\": %llu, "
                   "\"ring_requests\": %llu, \"error_replies\": %llu, \"limit_violations\": %llu",
                st->clients, (unsigned long long)st->jobs_inflight,
                (unsigned long long)st->requests, (unsigned long long)st->ring_requests,
                (unsigned long long)st->errors, (unsigned long long)st->limit_violations);
    }
    fputs("}\n", f);
}

/* The exposition's samples as CSV, one row each: metric,labels,value (labels as the
 * exposition writes them inside the braces, quoted). */
static void csv_of(FILE *f, const char *expo)
{
    fputs("metric,labels,value\n", f);
    for (const char *line = expo; *line;) {
        const char *end = strchr(line, '\n');
        const size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len && line[0] != '#') {
            const char *brace = memchr(line, '{', len), *space = NULL;
            const char *close = brace ? memchr(brace, '}', len - (size_t)(brace - line)) : NULL;
            const char *after = close ? close + 1 : line;
            space = memchr(after, ' ', len - (size_t)(after - line));
            if (space) {
                const char *name_end = brace && close ? brace : space;
                fprintf(f, "%.*s,\"", (int)(name_end - line), line);
                for (const char *p = brace && close ? brace + 1 : close; p && p < close; p++) {
                    if (*p == '"')
                        fputc('"', f);
                    fputc(*p, f);
                }
                fprintf(f, "\",%.*s\n", (int)(len - (size_t)(space + 1 - line)), space + 1);
            }
        }
        line += len + (end ? 1 : 0);
    }
}

/* Replaces path with data in one step, as the textfile collector needs: it must never read a
 * half-written file. A temporary file in the same directory (not named *.prom, which the
 * collector would read), fsync, rename over path, fsync the directory. */
static int write_atomically(const char *path, const char *data, size_t len)
{
    char *dup = strdup(path), *base_dup = strdup(path);
    if (!dup || !base_dup) {
        free(dup);
        free(base_dup);
        return -ENOMEM;
    }
    const char *dir = dirname(dup), *base = basename(base_dup);
    char tmp[4096];
    int r = 0;
    if (snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, base) >= (int)sizeof tmp) {
        r = -ENAMETOOLONG;
        goto out;
    }
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    for (size_t done = 0; done < len && r == 0;) {
        ssize_t n = write(fd, data + done, len - done);
        if (n < 0 && errno != EINTR)
            r = -errno;
        else if (n > 0)
            done += (size_t)n;
    }
    /* Readable by node_exporter, which runs as its own user. */
    if (r == 0 && (fchmod(fd, 0644) < 0 || fsync(fd) < 0))
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && rename(tmp, path) < 0)
        r = -errno;
    if (r < 0) {
        unlink(tmp);
        goto out;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
out:
    free(dup);
    free(base_dup);
    return r;
}

int ctl_cmd_metrics(const struct ctl_globals *g, int argc, char **argv)
{
    const char *textfile = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--textfile") == 0 || strncmp(argv[i], "--textfile=", 11) == 0) {
            textfile = argv[i][10] == '=' ? argv[i] + 11 : i + 1 < argc ? argv[++i] : NULL;
            if (!textfile || !textfile[0]) {
                ctl_error("metrics: --textfile needs a path, as in --textfile "
                          "/var/lib/prometheus/node-exporter/gllm.prom");
                return CTL_EXIT_USAGE;
            }
        } else {
            ctl_error("metrics: unknown argument '%s'", argv[i]);
            return CTL_EXIT_USAGE;
        }
    }
    /* A daemon that is down is still a sample: gllm_up 0, so an alert can fire on it. */
    gllm_client *c = NULL;
    gllm_status st = GLLM_STATUS_INIT;
    int rc = ctl_connect(g->socket, &c);
    if (rc == 0) {
        int r = gllm_status_get(c, &st);
        if (r < 0) {
            ctl_error("metrics: status: %s", gllm_strerror(r));
            gllm_disconnect(c);
            c = NULL;
            rc = CTL_EXIT_FAILURE;
        }
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        ctl_error("metrics: out of memory");
        if (c)
            gllm_disconnect(c);
        return CTL_EXIT_FAILURE;
    }
    if (g->json) {
        json(f, c, &st);
    } else if (g->format == CTL_FORMAT_CSV) {
        char *expo = NULL;
        size_t elen = 0;
        FILE *e = open_memstream(&expo, &elen);
        if (e) {
            exposition(e, c, &st);
            fclose(e);
            csv_of(f, expo);
            free(expo);
        }
    } else {
        exposition(f, c, &st);
    }
    fclose(f);
    if (c)
        gllm_disconnect(c);
    if (textfile) {
        int r = write_atomically(textfile, buf, len);
        if (r < 0) {
            ctl_error("metrics: cannot write %s: %s", textfile, strerror(-r));
            rc = CTL_EXIT_FAILURE;
        }
    } else if (fwrite(buf, 1, len, stdout) != len || fflush(stdout) != 0) {
        rc = CTL_EXIT_FAILURE;
    }
    free(buf);
    return rc;
}
