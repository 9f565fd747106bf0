/* gllmctl attn: one attention job on Q, K and V from .npy files, the output written to .npy. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "gllm/elem.h"
#include "npy.h"

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

int ctl_cmd_attn(const struct ctl_globals *g, int argc, char **argv)
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
    opterr = 0;   /* our own messages, which say what to do */
    while ((ch = getopt_long(argc, argv, ":o:", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': out_path = optarg; break;
        case 'c': p.flags |= GLLM_ATTN_CAUSAL; break;
        case 's': {
            char *end;
            p.scale = strtof(optarg, &end);
            if (*end || end == optarg || !isfinite(p.scale)) {
                ctl_error("attn: --scale wants a finite number, not '%s'", optarg);
                return CTL_EXIT_USAGE;
            }
            p.flags |= GLLM_ATTN_SCALE;
            break;
        }
        case 'd':
            dtype_name = optarg;
            if (strcmp(optarg, "f32") && strcmp(optarg, "f16") && strcmp(optarg, "bf16")) {
                ctl_error("attn: --dtype wants f32, f16 or bf16, not '%s'", optarg);
                return CTL_EXIT_USAGE;
            }
            break;
        case 'l': lse_path = optarg; p.flags |= GLLM_ATTN_LSE; break;
        case ':':
            ctl_error("attn: %s needs a value", argv[optind - 1]);
            return CTL_EXIT_USAGE;
        default:
            ctl_error("attn: unknown option '%s'", argv[optind - 1]);
            return CTL_EXIT_USAGE;
        }
    }
    if (argc - optind != 3 || !out_path) {
        ctl_error("attn: needs Q.npy K.npy V.npy and -o OUT.npy");
        return CTL_EXIT_USAGE;
    }
    struct npy in[3] = {0};
    const char *names[3] = {"Q", "K", "V"};
    char err[256];
    int rc = 1;
    for (int i = 0; i < 3; i++) {
        if (npy_load(argv[optind + i], &in[i], err, sizeof err) < 0) {
            ctl_error("attn: %s (%s): %s", names[i], argv[optind + i], err);
            goto out_free;
        }
        if (in[i].rank != 4) {
            ctl_error("attn: %s has rank %d; want 4 dims [B, H, S, D]", names[i],
                    in[i].rank);
            goto out_free;
        }
        if (in[i].dtype != in[0].dtype) {
            ctl_error("attn: Q, K and V files must share one dtype");
            goto out_free;
        }
    }
    gllm_dtype file_dt = in[0].dtype, job_dt = file_dt;
    if (dtype_name) {
        if (strcmp(dtype_name, "f32") == 0)
            job_dt = GLLM_DTYPE_F32;
        else if (strcmp(dtype_name, "f16") == 0)
            job_dt = GLLM_DTYPE_F16;
        else
            job_dt = GLLM_DTYPE_BF16;
    }
    size_t es = gllm_dtype_size(job_dt);
    size_t lse_count = (size_t)(in[0].shape[0] * in[0].shape[1] * in[0].shape[2]);
    /* out is Q's shape with V's head dim (below Q's where the backend takes that). */
    int64_t out_shape[4] = {in[0].shape[0], in[0].shape[1], in[0].shape[2], in[2].shape[3]};
    const size_t out_count = lse_count * (size_t)(out_shape[3] > 0 ? out_shape[3] : 0);
    size_t off[5], total = 0;
    for (int i = 0; i < 4; i++) {
        off[i] = total;
        total += align64((i < 3 ? in[i].count : out_count) * es);
    }
    off[4] = total;
    total += align64(lse_count * sizeof(float));

    gllm_client *c;
    rc = ctl_connect(g->socket, &c);
    if (rc)
        goto out_free;
    rc = 1;
    gllm_memory *a;
    int r = gllm_arena_create(c, total, &a);
    if (r < 0) {
        ctl_error("attn: arena of %zu bytes: %s", total, gllm_strerror(r));
        goto out_disconnect;
    }
    char *base = gllm_memory_data(a);
    gllm_tensor *ts[4] = {&p.q, &p.k, &p.v, &p.out};
    for (int i = 0; i < 4; i++) {
        gllm_tensor_init(a, off[i], job_dt, 4, i < 3 ? in[i].shape : out_shape, ts[i]);
        if (i < 3)
            convert(base + off[i], job_dt, in[i].data, file_dt, in[i].count);
    }
    int64_t lse_shape[3] = {in[0].shape[0], in[0].shape[1], in[0].shape[2]};
    gllm_tensor_init(a, off[4], GLLM_DTYPE_F32, 3, lse_shape, &p.lse);
    /* Poison the output so an element the daemon failed to write shows as NaN. */
    memset(base + off[3], 0xff, out_count * es);

    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    r = gllm_attention(c, &p, &res);
    if (r < 0) {
        const char *why = gllm_client_last_error(c);
        ctl_error("attn: %s%s%s", gllm_strerror(r), why[0] ? ": " : "", why);
        goto out_release;
    }
    struct npy o = {.dtype = file_dt, .rank = 4, .count = out_count};
    memcpy(o.shape, out_shape, sizeof out_shape);
    o.data = malloc(o.count * gllm_dtype_size(file_dt) + 1);
    if (!o.data) {
        ctl_error("attn: out of memory");
        goto out_release;
    }
    convert(o.data, file_dt, base + off[3], job_dt, o.count);
    r = npy_save(out_path, &o, err, sizeof err);
    npy_free(&o);
    if (r < 0) {
        ctl_error("attn: %s: %s", out_path, err);
        goto out_release;
    }
    if (lse_path) {
        struct npy l = {.dtype = GLLM_DTYPE_F32, .rank = 3, .count = lse_count,
                        .data = base + off[4]};
        memcpy(l.shape, lse_shape, sizeof lse_shape);
        if (npy_save(lse_path, &l, err, sizeof err) < 0) {
            ctl_error("attn: %s: %s", lse_path, err);
            goto out_release;
        }
    }
    if (g->json) {
        printf("{\"schema_version\": 1, \"output\": ");
        ctl_json_str(out_path);
        printf(", \"dtype\": \"%s\", \"kernel_ms\": %.6f, \"queue_ms\": %.6f, "
               "\"job_ms\": %.6f}\n", gllm_dtype_name(job_dt), (double)res.kernel_ns / 1e6,
               (double)res.queue_ns / 1e6, (double)res.job_ns / 1e6);
    } else {
        fprintf(stderr, "gllmctl attn: %s in %.3f ms (queued %.3f ms)\n", out_path,
                (double)res.kernel_ns / 1e6, (double)res.queue_ns / 1e6);
    }
    rc = 0;
out_release:
    gllm_memory_release(a);
out_disconnect:
    gllm_disconnect(c);
out_free:
    for (int i = 0; i < 3; i++)
        npy_free(&in[i]);
    return rc;
}

