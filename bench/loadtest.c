/* Load test: many client processes, pipelined mixed jobs, every reply matched and checked. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gllm/elem.h"
#include "gllm/gllm.h"

/*
 * Each client owns NSETS input sets of different shapes, dtypes and masks. The first time
 * a set runs, its output is checked against a float64 reference computed here and its
 * bytes hashed; every later run must reproduce that hash exactly (the backends are
 * deterministic), so every reply is checked at the cost of a hash. Up to --depth jobs are
 * in flight per client; status requests and arena churn are mixed in.
 */
#define NSETS 6

struct shape {
    int64_t B, Hq, Hkv, S, D;
    gllm_dtype dt;
    bool causal;
};

static const struct shape shapes[NSETS] = {
    {1, 2, 2, 32, 64, GLLM_DTYPE_F32, false}, {1, 4, 2, 64, 64, GLLM_DTYPE_F16, true},
    {2, 2, 1, 16, 128, GLLM_DTYPE_BF16, true}, {1, 2, 2, 64, 128, GLLM_DTYPE_F16, false},
    {1, 8, 2, 32, 64, GLLM_DTYPE_BF16, false}, {1, 2, 2, 48, 64, GLLM_DTYPE_F32, true},
};

struct client_result {
    uint64_t jobs, status_calls, mismatches, failures, arenas_made;
    double wall_s;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double get(const void *p, gllm_dtype dt, size_t i)
{
    switch (dt) {
    case GLLM_DTYPE_F16: return gllm_f16_to_f32(((const uint16_t *)p)[i]);
    case GLLM_DTYPE_BF16: return gllm_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void put(void *p, gllm_dtype dt, size_t i, float x)
{
    switch (dt) {
    case GLLM_DTYPE_F16: ((uint16_t *)p)[i] = gllm_f32_to_f16(x); break;
    case GLLM_DTYPE_BF16: ((uint16_t *)p)[i] = gllm_f32_to_bf16(x); break;
    default: ((float *)p)[i] = x; break;
    }
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Max relative error of out against a float64 reference (contiguous [B,H,S,D]). */
static double check_reference(const struct shape *s, const char *q, const char *k, const char *v,
                              const char *o)
{
    double num = 0, den = 0, *sc = malloc((size_t)s->S * sizeof *sc);
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->Hq; h++) {
            int64_t hk = h / (s->Hq / s->Hkv);
            for (int64_t i = 0; i < s->S; i++) {
                int64_t vis = s->causal ? i + 1 : s->S;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < vis; j++) {
                    double acc = 0;
                    for (int64_t d = 0; d < s->D; d++)
                        acc += get(q, s->dt, (size_t)(((b * s->Hq + h) * s->S + i) * s->D + d)) *
                               get(k, s->dt, (size_t)(((b * s->Hkv + hk) * s->S + j) * s->D + d));
                    sc[j] = acc / sqrt((double)s->D);
                    mx = fmax(mx, sc[j]);
                }
                for (int64_t j = 0; j < vis; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int64_t d = 0; d < s->D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < vis; j++)
                        acc += sc[j] * get(v, s->dt, (size_t)(((b * s->Hkv + hk) * s->S + j) * s->D + d));
                    double want = acc / sum;
                    double got = get(o, s->dt, (size_t)(((b * s->Hq + h) * s->S + i) * s->D + d));
                    num = fmax(num, fabs(got - want));
                    den = fmax(den, fabs(want));
                }
            }
        }
    free(sc);
    return num / den;
}

struct set {
    const struct shape *s;
    size_t in_bytes, out_bytes;
    uint64_t hash;            /* of the checked output; 0 until the first run */
};

struct slot {
    uint64_t job;
    int set;
    uint64_t t0;
    bool busy;
};

static int run_client(const char *sock, int index, int njobs, int depth, float *lat,
                      struct client_result *res)
{
    gllm_client *c;
    int r = gllm_connect(sock, &c);
    if (r < 0) {
        fprintf(stderr, "client %d: connect: %s\n", index, gllm_strerror(r));
        return 1;
    }
    uint64_t rng = 1000 + (uint64_t)index;
    struct set sets[NSETS];
    size_t in_total = 0, out_max = 0;
    for (int i = 0; i < NSETS; i++) {
        const struct shape *s = &shapes[i];
        size_t es = gllm_dtype_size(s->dt);
        size_t nq = (size_t)(s->B * s->Hq * s->S * s->D), nk = (size_t)(s->B * s->Hkv * s->S * s->D);
        sets[i] = (struct set){.s = s, .in_bytes = (nq + 2 * nk) * es, .out_bytes = nq * es};
        in_total += (sets[i].in_bytes + 255) & ~(size_t)255;
        if (sets[i].out_bytes > out_max)
            out_max = sets[i].out_bytes;
    }
    out_max = (out_max + 255) & ~(size_t)255;
    size_t arena_bytes = in_total + (size_t)depth * out_max;
    char *inputs = malloc(in_total);   /* kept here so a fresh arena can be refilled */
    size_t in_off[NSETS], off = 0;
    for (int i = 0; i < NSETS; i++) {
        in_off[i] = off;
        size_t n = sets[i].in_bytes / gllm_dtype_size(sets[i].s->dt);
        for (size_t e = 0; e < n; e++)
            put(inputs + off, sets[i].s->dt, e,
                (float)((double)(splitmix(&rng) >> 11) / 4503599627370496.0 * 2 - 1));
        off += (sets[i].in_bytes + 255) & ~(size_t)255;
    }
    gllm_memory *a = NULL;
    struct slot *slots = calloc((size_t)depth, sizeof *slots);
    uint64_t start = mono_ns();
    int submitted = 0, done = 0, churn_at = 500;
    while (done < njobs) {
        /* Churn: every 500 jobs, let the pipeline empty and swap in a new arena. */
        bool churn = submitted >= churn_at;
        if (!a || (churn && submitted == done)) {
            churn_at = submitted + 500;
            churn = false;
            if (a)
                gllm_memory_release(a);
            if ((r = gllm_arena_create(c, arena_bytes, &a)) < 0) {
                fprintf(stderr, "client %d: arena: %s\n", index, gllm_strerror(r));
                return 1;
            }
            memcpy(gllm_memory_data(a), inputs, in_total);
            res->arenas_made++;
        }
        for (int d = 0; d < depth && submitted < njobs && !churn; d++) {
            if (slots[d].busy)
                continue;
            int si = (int)(splitmix(&rng) % NSETS);
            const struct shape *s = sets[si].s;
            int64_t qs[4] = {s->B, s->Hq, s->S, s->D}, ks[4] = {s->B, s->Hkv, s->S, s->D};
            size_t es = gllm_dtype_size(s->dt), nq = sets[si].out_bytes / es;
            size_t nk = (sets[si].in_bytes / es - nq) / 2;
            gllm_attention_params p = {.size = sizeof p, .flags = s->causal ? GLLM_ATTN_CAUSAL : 0};
            gllm_tensor_init(a, in_off[si], s->dt, 4, qs, &p.q);
            gllm_tensor_init(a, in_off[si] + nq * es, s->dt, 4, ks, &p.k);
            gllm_tensor_init(a, in_off[si] + (nq + nk) * es, s->dt, 4, ks, &p.v);
            gllm_tensor_init(a, in_total + (size_t)d * out_max, s->dt, 4, qs, &p.out);
            memset((char *)gllm_memory_data(a) + in_total + (size_t)d * out_max, 0xff, nq * es);
            slots[d] = (struct slot){.set = si, .t0 = mono_ns(), .busy = true};
            if ((r = gllm_attention_submit(c, &p, &slots[d].job)) < 0) {
                fprintf(stderr, "client %d: submit: %s\n", index, gllm_strerror(r));
                return 1;
            }
            submitted++;
        }
        /* Wait for the oldest-submitted slot's job (order of completion is per connection). */
        int oldest = -1;
        for (int d = 0; d < depth; d++)
            if (slots[d].busy && (oldest < 0 || slots[d].job < slots[oldest].job))
                oldest = d;
        gllm_job_result jr = GLLM_JOB_RESULT_INIT;
        r = gllm_job_wait(c, slots[oldest].job, &jr);
        uint64_t t1 = mono_ns();
        struct slot *sl = &slots[oldest];
        sl->busy = false;
        if (r < 0) {
            res->failures++;
        } else {
            struct set *st = &sets[sl->set];
            const char *out = (const char *)gllm_memory_data(a) + in_total + (size_t)oldest * out_max;
            uint64_t h = fnv1a(out, st->out_bytes);
            if (st->hash == 0) {
                const struct shape *s = st->s;
                size_t es = gllm_dtype_size(s->dt), nq = st->out_bytes / es;
                size_t nk = (st->in_bytes / es - nq) / 2;
                const char *base = (const char *)gllm_memory_data(a) + in_off[sl->set];
                double err = check_reference(s, base, base + nq * es, base + (nq + nk) * es, out);
                double tol = s->dt == GLLM_DTYPE_F32 ? 1e-5 : s->dt == GLLM_DTYPE_F16 ? 3e-3 : 2e-2;
                if (!(err <= tol)) {
                    fprintf(stderr, "client %d: set %d: rel err %.3g > %.3g\n", index, sl->set, err, tol);
                    res->mismatches++;
                }
                st->hash = h;
            } else if (h != st->hash) {
                res->mismatches++;
            }
        }
        lat[done] = (float)((double)(t1 - sl->t0) / 1e3);   /* microseconds */
        done++;
        res->jobs++;
        if (done % 50 == 0) {
            gllm_status s = GLLM_STATUS_INIT;
            if (gllm_status_get(c, &s) == 0)
                res->status_calls++;
            else
                res->failures++;
        }
    }
    res->wall_s = (double)(mono_ns() - start) / 1e9;
    gllm_memory_release(a);
    gllm_disconnect(c);
    free(slots);
    free(inputs);
    return 0;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *sock = NULL;
    int clients = 64, jobs = 1000, depth = 8;
    bool json = false;
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'}, {"clients", required_argument, NULL, 'c'},
        {"jobs", required_argument, NULL, 'j'},   {"depth", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'J'},         {0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "s:c:j:d:", opts, NULL)) != -1) {
        switch (ch) {
        case 's': sock = optarg; break;
        case 'c': clients = atoi(optarg); break;
        case 'j': jobs = atoi(optarg); break;
        case 'd': depth = atoi(optarg); break;
        case 'J': json = true; break;
        default:
            fprintf(stderr, "usage: gllm_loadtest [--socket PATH] [--clients N] [--jobs N] "
                            "[--depth N] [--json]\n");
            return 2;
        }
    }
    if (clients < 1 || clients > 1024 || jobs < 1 || jobs > 1000000 || depth < 1 || depth > 64) {
        fprintf(stderr, "gllm_loadtest: clients 1-1024, jobs 1-1000000, depth 1-64\n");
        return 2;
    }
    size_t nlat = (size_t)clients * (size_t)jobs;
    float *lat = mmap(NULL, nlat * sizeof(float), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct client_result *res = mmap(NULL, (size_t)clients * sizeof *res, PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (lat == MAP_FAILED || res == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(res, 0, (size_t)clients * sizeof *res);
    uint64_t t0 = mono_ns();
    pid_t *pids = calloc((size_t)clients, sizeof *pids);
    for (int i = 0; i < clients; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(run_client(sock, i, jobs, depth, lat + (size_t)i * (size_t)jobs, &res[i]));
    }
    int bad_exits = 0;
    for (int i = 0; i < clients; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        bad_exits += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    double wall = (double)(mono_ns() - t0) / 1e9;
    struct client_result tot = {0};
    for (int i = 0; i < clients; i++) {
        tot.jobs += res[i].jobs;
        tot.status_calls += res[i].status_calls;
        tot.mismatches += res[i].mismatches;
        tot.failures += res[i].failures;
        tot.arenas_made += res[i].arenas_made;
    }
    uint64_t lost = nlat - tot.jobs;
    size_t n = 0;
    for (int i = 0; i < clients; i++)
        for (uint64_t k = 0; k < res[i].jobs; k++)
            lat[n++] = lat[(size_t)i * (size_t)jobs + k];
    qsort(lat, n, sizeof *lat, cmp_float);
    double p50 = n ? lat[n / 2] : 0, p99 = n ? lat[(size_t)((double)n * 0.99)] : 0;
    gllm_client *c;
    char backend[16] = "?";
    if (gllm_connect(sock, &c) == 0) {
        gllm_caps caps = GLLM_CAPS_INIT;
        if (gllm_client_caps(c, &caps) == 0)
            snprintf(backend, sizeof backend, "%s", caps.backend);
        gllm_disconnect(c);
    }
    if (json)
        printf("{\"backend\": \"%s\", \"clients\": %d, \"jobs_per_client\": %d, \"depth\": %d, "
               "\"jobs\": %llu, \"jobs_per_s\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, "
               "\"lost\": %llu, \"mismatched\": %llu, \"failed\": %llu, \"status_calls\": %llu, "
               "\"arenas\": %llu, \"bad_exits\": %d}\n",
               backend, clients, jobs, depth, (unsigned long long)tot.jobs, (double)tot.jobs / wall,
               p50, p99, (unsigned long long)lost, (unsigned long long)tot.mismatches,
               (unsigned long long)tot.failures, (unsigned long long)tot.status_calls,
               (unsigned long long)tot.arenas_made, bad_exits);
    else
        printf("backend %s: %d clients x %d jobs, depth %d: %llu jobs in %.2f s = %.0f jobs/s; "
               "latency p50 %.0f us, p99 %.0f us; lost %llu, mismatched %llu, failed %llu; "
               "%llu status calls, %llu arenas\n",
               backend, clients, jobs, depth, (unsigned long long)tot.jobs, wall,
               (double)tot.jobs / wall, p50, p99, (unsigned long long)lost,
               (unsigned long long)tot.mismatches, (unsigned long long)tot.failures,
               (unsigned long long)tot.status_calls, (unsigned long long)tot.arenas_made);
    return lost || tot.mismatches || tot.failures || bad_exits ? 1 : 0;
}
