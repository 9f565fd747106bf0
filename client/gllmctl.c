/* gllmctl: the operator's tool (status, attn, bench), built only on libgllm-client. */
#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "gllm/elem.h"
#include "gllm/gllm.h"
#include "npy.h"

/* systemctl's convention for "the service is not running". */
#define EXIT_NOT_RUNNING 3

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: gllmctl [--socket PATH] COMMAND [ARGS]\n\n"
            "Commands:\n"
            "  status [--json]                    daemon, devices, clients and job counts\n"
            "  attn Q.npy K.npy V.npy -o OUT.npy  run one attention job on .npy files\n"
            "       [--causal] [--scale X] [--dtype f32|f16|bf16] [--lse LSE.npy]\n"
            "  bench [--json] [--iters N]         standard prefill shapes through the daemon\n"
            "  bench --decode [--json] [--iters N] paged decode, device-resident: added latency\n\n"
            "Exit status: 0 ok, 1 failure, 2 usage error, 3 daemon not running.\n");
}

int ctl_connect(const char *socket_path, gllm_client **c)
{
    int r = gllm_connect(socket_path, c);
    if (r == 0)
        return 0;
    char path[108] = "";
    if (socket_path)
        snprintf(path, sizeof path, "%s", socket_path);
    else
        gllm_default_socket_path(path, sizeof path);
    fprintf(stderr, "gllmctl: cannot reach gllmd at %s: %s\n", path[0] ? path : "(no default)",
            gllm_strerror(r));
    if (r == -ENOENT || r == -ECONNREFUSED)
        return EXIT_NOT_RUNNING;
    return 1;
}

void json_str(const char *s)
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

void ctl_json_open(const gllm_caps *caps, const char *list)
{
    printf("{\"backend\": ");
    json_str(caps->backend);
    printf(", \"device\": ");
    json_str(caps->ndevices ? caps->devices[0].name : "");
    printf(", \"%s\": [", list);
}

static int cmd_status(const char *sock, int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else {
            fprintf(stderr, "gllmctl status: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    gllm_client *c;
    int r = ctl_connect(sock, &c);
    if (r)
        return r;
    gllm_status st;
    r = gllm_status_get(c, &st);
    gllm_disconnect(c);
    if (r < 0) {
        fprintf(stderr, "gllmctl: status: %s\n", gllm_strerror(r));
        return 1;
    }
    if (json) {
        printf("{\"daemon\": ");
        json_str(st.daemon_version);
        printf(", \"backend\": ");
        json_str(st.backend);
        printf(", \"uptime_s\": %.3f, \"clients\": %u, \"jobs_done\": %llu, \"jobs_failed\": %llu, "
               "\"jobs_inflight\": %llu, \"arenas\": %u, \"bytes_mapped\": %llu, \"dtensors\": %u, "
               "\"device_bytes\": %llu, \"requests\": %llu, \"ring_requests\": %llu, "
               "\"errors\": %llu, \"limit_violations\": %llu, \"devices\": [",
               st.uptime_s, st.clients, (unsigned long long)st.jobs_done,
               (unsigned long long)st.jobs_failed, (unsigned long long)st.jobs_inflight, st.arenas,
               (unsigned long long)st.bytes_mapped, st.dtensors,
               (unsigned long long)st.device_bytes, (unsigned long long)st.requests,
               (unsigned long long)st.ring_requests, (unsigned long long)st.errors,
               (unsigned long long)st.limit_violations);
        for (int i = 0; i < st.ndevices; i++) {
            printf("%s{\"index\": %d, \"kind\": ", i ? ", " : "", st.devices[i].index);
            json_str(st.devices[i].kind);
            printf(", \"name\": ");
            json_str(st.devices[i].name);
            char cc[16] = "";
            if (st.devices[i].cc_major)
                snprintf(cc, sizeof cc, "%d.%d", st.devices[i].cc_major, st.devices[i].cc_minor);
            printf(", \"memory_bytes\": %llu, \"threads\": %d, \"compute_capability\": \"%s\", "
                   "\"image\": ", (unsigned long long)st.devices[i].memory_bytes,
                   st.devices[i].threads, cc);
            json_str(st.devices[i].image);
            printf("}");
        }
        printf("], \"client_list\": [");
        for (int i = 0; i < st.nlisted; i++) {
            const gllm_client_info *ci = &st.client_list[i];
            printf("%s{\"pid\": %d, \"uid\": %u, \"gid\": %u, \"comm\": ", i ? ", " : "",
                   ci->pid, ci->uid, ci->gid);
            json_str(ci->comm);
            printf(", \"arenas\": %u, \"arena_bytes\": %llu, \"device_bytes\": %llu, "
                   "\"inflight\": %u}", ci->arenas, (unsigned long long)ci->arena_bytes,
                   (unsigned long long)ci->device_bytes, ci->inflight);
        }
        printf("]}\n");
        return 0;
    }
    printf("gllmd %s, up %.0f s, backend %s\n", st.daemon_version, st.uptime_s, st.backend);
    for (int i = 0; i < st.ndevices; i++) {
        const gllm_device_info *d = &st.devices[i];
        if (d->cc_major)
            printf("  device %d: %s (%s), compute capability %d.%d, %.1f GiB, kernels: %s\n",
                   d->index, d->name, d->kind, d->cc_major, d->cc_minor,
                   (double)d->memory_bytes / (1ull << 30), d->image);
        else
            printf("  device %d: %s (%s), %.1f GiB, %d threads\n", d->index, d->name, d->kind,
                   (double)d->memory_bytes / (1ull << 30), d->threads);
    }
    printf("clients: %u   arenas: %u (%.1f MiB mapped)   device tensors: %u (%.1f MiB)\n",
           st.clients, st.arenas, (double)st.bytes_mapped / (1 << 20), st.dtensors,
           (double)st.device_bytes / (1 << 20));
    printf("jobs: %llu done, %llu failed, %llu in flight\n", (unsigned long long)st.jobs_done,
           (unsigned long long)st.jobs_failed, (unsigned long long)st.jobs_inflight);
    printf("requests: %llu (%llu by shared-memory ring), error replies: %llu (limits hit: %llu)\n",
           (unsigned long long)st.requests, (unsigned long long)st.ring_requests,
           (unsigned long long)st.errors, (unsigned long long)st.limit_violations);
    if (st.nlisted)
        printf("\n  %8s %6s %-16s %7s %12s %12s %8s\n", "PID", "UID", "COMMAND", "ARENAS",
               "MAPPED", "DEVICE", "IN FLIGHT");
    for (int i = 0; i < st.nlisted; i++) {
        const gllm_client_info *ci = &st.client_list[i];
        printf("  %8d %6u %-16s %7u %10.1f M %10.1f M %8u\n", ci->pid, ci->uid, ci->comm,
               ci->arenas, (double)ci->arena_bytes / (1 << 20),
               (double)ci->device_bytes / (1 << 20), ci->inflight);
    }
    return 0;
}

/* Converts n elements between the file's dtype and the job's. */
static void convert(void *dst, gllm_dtype dt, const void *src, gllm_dtype st, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x;
        switch (st) {
        case GLLM_DTYPE_F16: x = gllm_f16_to_f32(((const uint16_t *)src)[i]); break;
        case GLLM_DTYPE_BF16: x = gllm_bf16_to_f32(((const uint16_t *)src)[i]); break;
        default: x = ((const float *)src)[i]; break;
        }
        switch (dt) {
        case GLLM_DTYPE_F16: ((uint16_t *)dst)[i] = gllm_f32_to_f16(x); break;
        case GLLM_DTYPE_BF16: ((uint16_t *)dst)[i] = gllm_f32_to_bf16(x); break;
        default: ((float *)dst)[i] = x; break;
        }
    }
}

static size_t align64(size_t x)
{
    return (x + 63) & ~(size_t)63;
}

static int cmd_attn(const char *sock, int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'}, {"causal", no_argument, NULL, 'c'},
        {"scale", required_argument, NULL, 's'},  {"dtype", required_argument, NULL, 'd'},
        {"lse", required_argument, NULL, 'l'},    {0},
    };
    const char *out_path = NULL, *lse_path = NULL, *dtype_name = NULL;
    gllm_attention_params p = {.size = sizeof p};
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': out_path = optarg; break;
        case 'c': p.flags |= GLLM_ATTN_CAUSAL; break;
        case 's': {
            char *end;
            p.scale = strtof(optarg, &end);
            if (*end || end == optarg || !isfinite(p.scale)) {
                fprintf(stderr, "gllmctl attn: --scale wants a finite number\n");
                return 2;
            }
            p.flags |= GLLM_ATTN_SCALE;
            break;
        }
        case 'd': dtype_name = optarg; break;
        case 'l': lse_path = optarg; p.flags |= GLLM_ATTN_LSE; break;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 3 || !out_path) {
        fprintf(stderr, "gllmctl attn: need Q.npy K.npy V.npy and -o OUT.npy\n");
        return 2;
    }
    struct npy in[3] = {0};
    const char *names[3] = {"Q", "K", "V"};
    char err[256];
    int rc = 1;
    for (int i = 0; i < 3; i++) {
        if (npy_load(argv[optind + i], &in[i], err, sizeof err) < 0) {
            fprintf(stderr, "gllmctl attn: %s (%s): %s\n", names[i], argv[optind + i], err);
            goto out_free;
        }
        if (in[i].rank != 4) {
            fprintf(stderr, "gllmctl attn: %s has rank %d; want 4 dims [B, H, S, D]\n", names[i],
                    in[i].rank);
            goto out_free;
        }
        if (in[i].dtype != in[0].dtype) {
            fprintf(stderr, "gllmctl attn: Q, K and V files must share one dtype\n");
            goto out_free;
        }
    }
    gllm_dtype file_dt = in[0].dtype, job_dt = file_dt;
    if (dtype_name) {
        if (strcmp(dtype_name, "f32") == 0)
            job_dt = GLLM_DTYPE_F32;
        else if (strcmp(dtype_name, "f16") == 0)
            job_dt = GLLM_DTYPE_F16;
        else if (strcmp(dtype_name, "bf16") == 0)
            job_dt = GLLM_DTYPE_BF16;
        else {
            fprintf(stderr, "gllmctl attn: --dtype must be f32, f16 or bf16\n");
            goto out_free;
        }
    }
    size_t es = gllm_dtype_size(job_dt);
    size_t lse_count = (size_t)(in[0].shape[0] * in[0].shape[1] * in[0].shape[2]);
    size_t off[5], total = 0;
    for (int i = 0; i < 4; i++) {
        off[i] = total;
        total += align64(in[i < 3 ? i : 0].count * es);
    }
    off[4] = total;
    total += align64(lse_count * sizeof(float));

    gllm_client *c;
    rc = ctl_connect(sock, &c);
    if (rc)
        goto out_free;
    rc = 1;
    gllm_arena *a;
    int r = gllm_arena_create(c, total, &a);
    if (r < 0) {
        fprintf(stderr, "gllmctl attn: arena of %zu bytes: %s\n", total, gllm_strerror(r));
        goto out_disconnect;
    }
    char *base = gllm_arena_data(a);
    gllm_tensor *ts[4] = {&p.q, &p.k, &p.v, &p.out};
    for (int i = 0; i < 4; i++) {
        const struct npy *src = &in[i < 3 ? i : 0];
        gllm_tensor_init(ts[i], a, off[i], job_dt, 4, src->shape);
        if (i < 3)
            convert(base + off[i], job_dt, src->data, file_dt, src->count);
    }
    int64_t lse_shape[3] = {in[0].shape[0], in[0].shape[1], in[0].shape[2]};
    gllm_tensor_init(&p.lse, a, off[4], GLLM_DTYPE_F32, 3, lse_shape);
    /* Poison the output so an element the daemon failed to write shows as NaN. */
    memset(base + off[3], 0xff, in[0].count * es);

    gllm_job_result res;
    r = gllm_attention(c, &p, &res);
    if (r < 0) {
        const char *why = gllm_client_last_error(c);
        fprintf(stderr, "gllmctl attn: %s%s%s\n", gllm_strerror(r), why[0] ? ": " : "", why);
        goto out_release;
    }
    struct npy o = {.dtype = file_dt, .rank = 4, .count = in[0].count};
    memcpy(o.shape, in[0].shape, sizeof o.shape);
    o.data = malloc(o.count * gllm_dtype_size(file_dt) + 1);
    if (!o.data) {
        fprintf(stderr, "gllmctl attn: out of memory\n");
        goto out_release;
    }
    convert(o.data, file_dt, base + off[3], job_dt, o.count);
    r = npy_save(out_path, &o, err, sizeof err);
    npy_free(&o);
    if (r < 0) {
        fprintf(stderr, "gllmctl attn: %s: %s\n", out_path, err);
        goto out_release;
    }
    if (lse_path) {
        struct npy l = {.dtype = GLLM_DTYPE_F32, .rank = 3, .count = lse_count,
                        .data = base + off[4]};
        memcpy(l.shape, lse_shape, sizeof lse_shape);
        if (npy_save(lse_path, &l, err, sizeof err) < 0) {
            fprintf(stderr, "gllmctl attn: %s: %s\n", lse_path, err);
            goto out_release;
        }
    }
    fprintf(stderr, "gllmctl attn: %s in %.3f ms (queued %.3f ms)\n", out_path,
            (double)res.kernel_ns / 1e6, (double)res.queue_ns / 1e6);
    rc = 0;
out_release:
    gllm_arena_release(a);
out_disconnect:
    gllm_disconnect(c);
out_free:
    for (int i = 0; i < 3; i++)
        npy_free(&in[i]);
    return rc;
}

int main(int argc, char **argv)
{
    const char *sock = NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
            sock = argv[++i];
        } else if (strncmp(argv[i], "--socket=", 9) == 0) {
            sock = argv[i] + 9;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("gllmctl %s\n", gllm_version());
            return 0;
        } else {
            fprintf(stderr, "gllmctl: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[i];
    if (strcmp(cmd, "status") == 0)
        return cmd_status(sock, argc - i, argv + i);
    if (strcmp(cmd, "attn") == 0)
        return cmd_attn(sock, argc - i, argv + i);
    if (strcmp(cmd, "bench") == 0)
        return ctl_bench(sock, argc - i, argv + i);
    fprintf(stderr, "gllmctl: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
