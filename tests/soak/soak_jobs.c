/* The soak's job kinds: dense attention over every kind of memory, paged decode and append,
 * copies and counter-ordered jobs, each checked against the float64 reference or byte for
 * byte, so that a wrong output or a reply meant for another job cannot pass. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ref64.h"
#include "soak_jobs.h"

#define NO_ROOM UINT64_MAX

static uint64_t pick(struct soak_conn *sc, uint64_t n)
{
    return soak_rng(&sc->rng) % n;
}

/* Bytes of the conn's arena for this batch, 256-aligned; NO_ROOM when it is full. */
static uint64_t take(struct soak_conn *sc, size_t bytes)
{
    const size_t at = (sc->used + 255) & ~(size_t)255;
    if (at + bytes > SOAK_ARENA_BYTES)
        return NO_ROOM;
    sc->used = at + bytes;
    return at;
}

static char *at(gllm_memory *m, uint64_t off)
{
    return (char *)gllm_memory_data(m) + off;
}

static size_t es_of(const struct soak_job *j)
{
    return gllm_dtype_size(j->dtype);
}

static size_t nq_of(const struct soak_job *j)
{
    return (size_t)(j->B * j->Hq * j->Sq * j->D);
}

static size_t nk_of(const struct soak_job *j)
{
    return (size_t)(j->B * j->Hkv * j->Skv * j->D);
}

static gllm_dtype pick_dtype(struct soak_conn *sc)
{
    static const gllm_dtype dts[] = {GLLM_DTYPE_F32, GLLM_DTYPE_F16, GLLM_DTYPE_BF16};
    return dts[pick(sc, 3)];
}

static void poison(void *p, size_t n)
{
    memset(p, 0xff, n);        /* NaN in every dtype: an unwritten element cannot pass */
}

/* Shapes of a dense job, q/k/v/out placed in mem (the conn's arena when mem is NULL). */
static int dense_setup(struct soak_conn *sc, struct soak_job *j, gllm_memory *mem)
{
    static const int64_t sq[] = {1, 16, 64}, skv[] = {16, 64, 128}, dh[] = {32, 64};
    j->B = 1 + (int64_t)pick(sc, 2);
    j->Hkv = 1 + (int64_t)pick(sc, 2);
    j->Hq = j->Hkv * (1 + (int64_t)pick(sc, 2));
    j->Sq = sq[pick(sc, 3)];
    j->Skv = skv[pick(sc, 3)];
    if (j->Sq > j->Skv)
        j->Sq = j->Skv;
    j->D = dh[pick(sc, 2)];
    j->dtype = pick_dtype(sc);
    j->causal = pick(sc, 2);
    const size_t es = es_of(j), nq = nq_of(j), nk = nk_of(j);
    j->mem = mem ? mem : sc->arena;
    if (mem) {
        j->q_off = 0;
        j->k_off = nq * es;
        j->v_off = (nq + nk) * es;
        j->out_off = (nq + 2 * nk) * es;
    } else {
        j->q_off = take(sc, nq * es);
        j->k_off = take(sc, nk * es);
        j->v_off = take(sc, nk * es);
        j->out_off = take(sc, nq * es);
        if (j->q_off == NO_ROOM || j->k_off == NO_ROOM || j->v_off == NO_ROOM ||
            j->out_off == NO_ROOM)
            return -ENOSPC;
    }
    uint64_t seed = soak_rng(&sc->rng);
    fill_random(at(j->mem, j->q_off), j->dtype, nq, &seed);
    fill_random(at(j->mem, j->k_off), j->dtype, nk, &seed);
    fill_random(at(j->mem, j->v_off), j->dtype, nk, &seed);
    poison(at(j->mem, j->out_off), nq * es);
    j->p = (gllm_attention_params){.size = sizeof j->p, .flags = j->causal ? GLLM_ATTN_CAUSAL : 0};
    int64_t qs[4] = {j->B, j->Hq, j->Sq, j->D}, ks[4] = {j->B, j->Hkv, j->Skv, j->D};
    gllm_tensor_init(j->mem, j->q_off, j->dtype, 4, qs, &j->p.q);
    gllm_tensor_init(j->mem, j->k_off, j->dtype, 4, ks, &j->p.k);
    gllm_tensor_init(j->mem, j->v_off, j->dtype, 4, ks, &j->p.v);
    gllm_tensor_init(j->mem, j->out_off, j->dtype, 4, qs, &j->p.out);
    return 0;
}

static uint64_t round_up(uint64_t n, uint64_t g)
{
    return g ? (n + g - 1) / g * g : n;
}

/* k and v moved into memory of the job's kind; the host copies stay for the reference. */
static int place_kv(struct soak_conn *sc, struct soak_job *j)
{
    const size_t bytes = nk_of(j) * es_of(j);
    int64_t ks[4] = {j->B, j->Hkv, j->Skv, j->D};
    int r = 0;
    if (j->kind == SOAK_JOB_DEVICE) {
        if ((r = gllm_dtensor_create(sc->c, bytes, 0, &j->kd)) < 0 ||
            (r = gllm_dtensor_create(sc->c, bytes, 0, &j->vd)) < 0 ||
            (r = gllm_memory_copy(sc->c, j->kd, 0, sc->arena, j->k_off, bytes)) < 0 ||
            (r = gllm_memory_copy(sc->c, j->vd, 0, sc->arena, j->v_off, bytes)) < 0)
            return r;
    } else if (j->kind == SOAK_JOB_SHARED) {
        if ((r = gllm_memory_create_shared(sc->c, bytes, 0, &j->kd)) < 0 ||
            (r = gllm_memory_create_shared(sc->c, bytes, 0, &j->vd)) < 0)
            return r;
        memcpy(gllm_memory_data(j->kd), at(sc->arena, j->k_off), bytes);
        memcpy(gllm_memory_data(j->vd), at(sc->arena, j->v_off), bytes);
    } else {   /* IMPORT: k and v side by side in one sealed memfd of the client's */
        const uint64_t half = round_up(bytes, sc->share_gran), size = 2 * half;
        j->import_fd = memfd_create("soak-import", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (j->import_fd < 0)
            return -errno;
        if (ftruncate(j->import_fd, (off_t)size) < 0 ||
            pwrite(j->import_fd, at(sc->arena, j->k_off), bytes, 0) != (ssize_t)bytes ||
            pwrite(j->import_fd, at(sc->arena, j->v_off), bytes, (off_t)half) != (ssize_t)bytes ||
            fcntl(j->import_fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0)
            return -errno;
        if ((r = gllm_memory_import(sc->c, j->import_fd, size, 0, &j->kd)) < 0)
            return r;
        gllm_tensor_init(j->kd, 0, j->dtype, 4, ks, &j->p.k);
        gllm_tensor_init(j->kd, half, j->dtype, 4, ks, &j->p.v);
        return 0;
    }
    gllm_tensor_init(j->kd, 0, j->dtype, 4, ks, &j->p.k);
    gllm_tensor_init(j->vd, 0, j->dtype, 4, ks, &j->p.v);
    return 0;
}

static bool dense_ok(struct soak_job *j, double *err_out)
{
    const size_t es = es_of(j), nq = nq_of(j);
    const char *kv_base = j->mem == NULL ? NULL : gllm_memory_data(j->mem);
    double *want = malloc(nq * sizeof *want), *got = malloc(nq * sizeof *got);
    if (!want || !got || !kv_base) {
        free(want);
        free(got);
        *err_out = INFINITY;
        return false;
    }
    struct ref_view q = {at(j->mem, j->q_off), j->dtype,
                         {j->Hq * j->Sq * j->D, j->Sq * j->D, j->D, 1}};
    struct ref_view k = {at(j->mem, j->k_off), j->dtype,
                         {j->Hkv * j->Skv * j->D, j->Skv * j->D, j->D, 1}};
    struct ref_view v = k;
    v.data = at(j->mem, j->v_off);
    ref64_attention(j->B, j->Hq, j->Hkv, j->Sq, j->Skv, j->D, q, k, v, j->causal,
                    1.0 / sqrt((double)j->D), want, NULL);
    for (size_t i = 0; i < nq; i++)
        got[i] = elem_get(at(j->mem, j->out_off), j->dtype, (int64_t)i);
    const double err = ref64_rel_error(got, want, nq);
    free(want);
    free(got);
    *err_out = err;
    (void)es;
    return err <= ref64_tolerance(j->dtype).out;
}

/* ---- paged ---- */

#define PAGE_SIZE_TOKENS 16
#define POOL_PAGES 12

struct paged_ctx {
    const struct soak_job *j;
    const char *kc, *vc;
    const int32_t *indptr, *indices;
};

static double paged_get(const void *ctx, int64_t b, int64_t hk, int64_t t, int64_t d, bool value)
{
    const struct paged_ctx *x = ctx;
    const struct soak_job *j = x->j;
    const int32_t page = x->indices[x->indptr[b] + t / j->ps];
    const int64_t idx = (((int64_t)page * j->ps + t % j->ps) * j->Hkv + hk) * j->D + d;
    return elem_get(value ? x->vc : x->kc, j->dtype, idx);
}

static int32_t *i32(struct soak_conn *sc, uint64_t off)
{
    return (int32_t *)(void *)at(sc->arena, off);
}

static gllm_tensor tensor(struct soak_conn *sc, uint64_t off, gllm_dtype dt, int rank,
                          const int64_t *shape)
{
    gllm_tensor t;
    gllm_tensor_init(sc->arena, off, dt, rank, shape, &t);
    return t;
}

/* A pool of shuffled pages holding B sequences (their tokens random), with its tables. */
static int paged_setup(struct soak_conn *sc, struct soak_job *j)
{
    j->mem = sc->arena;
    j->ps = PAGE_SIZE_TOKENS;
    j->P = POOL_PAGES;
    j->B = 1 + (int64_t)pick(sc, 3);
    j->Hkv = 1 + (int64_t)pick(sc, 2);
    j->Hq = j->Hkv * (1 + (int64_t)pick(sc, 2));
    j->D = 64;
    j->dtype = pick_dtype(sc);
    const size_t es = es_of(j), row = (size_t)(j->Hkv * j->D) * es;
    const size_t pool = (size_t)j->P * (size_t)j->ps * row;
    int npages = 0;
    for (int b = 0; b < j->B; b++) {
        j->len[b] = 1 + (int)pick(sc, 3 * (uint64_t)j->ps);
        j->nnew[b] = 1 + (int)pick(sc, (uint64_t)(j->len[b] < 4 ? j->len[b] : 4));
        npages += (j->len[b] + j->ps - 1) / j->ps;
    }
    int total_new = 0;
    for (int b = 0; b < j->B; b++)
        total_new += j->nnew[b];
    j->kc_off = take(sc, pool);
    j->vc_off = take(sc, pool);
    j->indptr_off = take(sc, 4 * (size_t)(j->B + 1));
    j->indices_off = take(sc, 4 * (size_t)npages);
    j->last_off = take(sc, 4 * (size_t)j->B);
    j->q_off = take(sc, (size_t)(j->B * j->Hq * j->D) * es);
    j->out_off = take(sc, (size_t)(j->B * j->Hq * j->D) * es);
    j->knew_off = take(sc, (size_t)total_new * row);
    j->vnew_off = take(sc, (size_t)total_new * row);
    j->aind_off = take(sc, 4 * (size_t)(j->B + 1));
    if (j->aind_off == NO_ROOM || j->vnew_off == NO_ROOM || j->knew_off == NO_ROOM ||
        j->out_off == NO_ROOM || j->q_off == NO_ROOM || j->kc_off == NO_ROOM ||
        j->vc_off == NO_ROOM || j->indptr_off == NO_ROOM || j->indices_off == NO_ROOM ||
        j->last_off == NO_ROOM)
        return -ENOSPC;
    uint64_t seed = soak_rng(&sc->rng);
    fill_random(at(sc->arena, j->kc_off), j->dtype, pool / es, &seed);
    fill_random(at(sc->arena, j->vc_off), j->dtype, pool / es, &seed);
    fill_random(at(sc->arena, j->q_off), j->dtype, (size_t)(j->B * j->Hq * j->D), &seed);
    fill_random(at(sc->arena, j->knew_off), j->dtype, (size_t)total_new * row / es, &seed);
    fill_random(at(sc->arena, j->vnew_off), j->dtype, (size_t)total_new * row / es, &seed);
    poison(at(sc->arena, j->out_off), (size_t)(j->B * j->Hq * j->D) * es);
    int order[POOL_PAGES];
    for (int i = 0; i < j->P; i++)
        order[i] = i;
    for (int i = j->P - 1; i > 0; i--) {
        int k = (int)pick(sc, (uint64_t)i + 1), t = order[i];
        order[i] = order[k];
        order[k] = t;
    }
    int32_t *indptr = i32(sc, j->indptr_off), *indices = i32(sc, j->indices_off),
            *last = i32(sc, j->last_off), *aind = i32(sc, j->aind_off);
    indptr[0] = aind[0] = 0;
    for (int b = 0, n = 0; b < j->B; b++) {
        const int pages = (j->len[b] + j->ps - 1) / j->ps;
        for (int i = 0; i < pages; i++, n++)
            indices[n] = order[n];
        indptr[b + 1] = indptr[b] + pages;
        last[b] = j->len[b] - (pages - 1) * j->ps;
        aind[b + 1] = aind[b] + j->nnew[b];
    }
    const int64_t pool_shape[4] = {j->P, j->ps, j->Hkv, j->D};
    const int64_t nb1 = j->B + 1, nb = j->B, ni = npages;
    gllm_paged_kv kv = {
        .k_cache = tensor(sc, j->kc_off, j->dtype, 4, pool_shape),
        .v_cache = tensor(sc, j->vc_off, j->dtype, 4, pool_shape),
        .indptr = tensor(sc, j->indptr_off, GLLM_DTYPE_I32, 1, &nb1),
        .indices = tensor(sc, j->indices_off, GLLM_DTYPE_I32, 1, &ni),
        .last_page_len = tensor(sc, j->last_off, GLLM_DTYPE_I32, 1, &nb),
    };
    if (j->kind == SOAK_JOB_DECODE) {
        const int64_t qs[3] = {j->B, j->Hq, j->D};
        j->pp = (gllm_paged_attention_params){.size = sizeof j->pp, .kv = kv,
                                              .q = tensor(sc, j->q_off, j->dtype, 3, qs),
                                              .out = tensor(sc, j->out_off, j->dtype, 3, qs)};
    } else {
        const int64_t ns[3] = {total_new, j->Hkv, j->D};
        j->ap = (gllm_kv_append_params){.size = sizeof j->ap, .kv = kv,
                                        .k = tensor(sc, j->knew_off, j->dtype, 3, ns),
                                        .v = tensor(sc, j->vnew_off, j->dtype, 3, ns),
                                        .append_indptr = tensor(sc, j->aind_off,
                                                                GLLM_DTYPE_I32, 1, &nb1)};
    }
    return 0;
}

static bool decode_ok(struct soak_conn *sc, struct soak_job *j, double *err_out)
{
    const size_t n = (size_t)(j->B * j->Hq * j->D);
    double *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    double *q = malloc((size_t)j->D * sizeof *q);
    if (!want || !got || !q) {
        free(want);
        free(got);
        free(q);
        *err_out = INFINITY;
        return false;
    }
    struct paged_ctx x = {j, at(sc->arena, j->kc_off), at(sc->arena, j->vc_off),
                          i32(sc, j->indptr_off), i32(sc, j->indices_off)};
    struct ref64_kv kv = {paged_get, &x};
    const int64_t group = j->Hq / j->Hkv;
    for (int64_t b = 0; b < j->B; b++)
        for (int64_t h = 0; h < j->Hq; h++) {
            const int64_t row = (b * j->Hq + h) * j->D;
            for (int64_t d = 0; d < j->D; d++)
                q[d] = elem_get(at(sc->arena, j->q_off), j->dtype, row + d);
            ref64_row(q, j->D, &kv, b, h / group, j->len[b], 1.0 / sqrt((double)j->D),
                      want + row, NULL);
        }
    for (size_t i = 0; i < n; i++)
        got[i] = elem_get(at(sc->arena, j->out_off), j->dtype, (int64_t)i);
    *err_out = ref64_rel_error(got, want, n);
    free(want);
    free(got);
    free(q);
    return *err_out <= ref64_tolerance(j->dtype).out;
}

/* Every new token's K and V where its sequence's table puts it, byte for byte. */
static bool append_ok(struct soak_conn *sc, struct soak_job *j, int *bad_b)
{
    const size_t row = (size_t)(j->Hkv * j->D) * es_of(j);
    const int32_t *indptr = i32(sc, j->indptr_off), *indices = i32(sc, j->indices_off);
    for (int b = 0, n = 0; b < j->B; b++)
        for (int t = j->len[b] - j->nnew[b]; t < j->len[b]; t++, n++) {
            const int32_t page = indices[indptr[b] + t / j->ps];
            const size_t slot = ((size_t)page * (size_t)j->ps + (size_t)(t % j->ps)) * row;
            if (memcmp(at(sc->arena, j->kc_off) + slot, at(sc->arena, j->knew_off) + n * row, row) ||
                memcmp(at(sc->arena, j->vc_off) + slot, at(sc->arena, j->vnew_off) + n * row, row)) {
                *bad_b = b;
                return false;
            }
        }
    return true;
}

/* ---- copies and counters ---- */

static void copy_run(struct soak_conn *sc, struct soak_job *j)
{
    const size_t bytes = 4096 * (1 + pick(sc, 64));
    const uint64_t src = take(sc, bytes), dst = take(sc, bytes);
    j->sync_done = true;
    if (src == NO_ROOM || dst == NO_ROOM) {
        j->sync_status = -ENOSPC;
        return;
    }
    uint64_t seed = soak_rng(&sc->rng);
    fill_random(at(sc->arena, src), GLLM_DTYPE_F32, bytes / 4, &seed);
    poison(at(sc->arena, dst), bytes);
    int r;
    if ((r = gllm_dtensor_create(sc->c, bytes, 0, &j->kd)) < 0 ||
        (r = gllm_memory_copy(sc->c, j->kd, 0, sc->arena, src, bytes)) < 0 ||
        (r = gllm_memory_copy(sc->c, sc->arena, dst, j->kd, 0, bytes)) < 0) {
        j->sync_status = r;
        return;
    }
    j->sync_status = 0;
    if (memcmp(at(sc->arena, src), at(sc->arena, dst), bytes) != 0)
        soak_fail("copy of %zu bytes through a device tensor came back different", bytes);
    else
        soak_pass();
}

static _Atomic uint32_t *counter_at(struct soak_conn *sc, uint64_t off)
{
    return (_Atomic uint32_t *)(void *)at(sc->arena, off);
}

#define SIGNAL_VALUE 7u

static int counters_setup(struct soak_conn *sc, struct soak_job *j)
{
    j->wait_off = take(sc, 4);
    j->sig_off = take(sc, 4);
    if (j->wait_off == NO_ROOM || j->sig_off == NO_ROOM)
        return -ENOSPC;
    atomic_store(counter_at(sc, j->wait_off), 0);
    atomic_store(counter_at(sc, j->sig_off), 0);
    j->p.wait = (gllm_counter){.memory = sc->arena, .offset = j->wait_off, .value = 1,
                               .timeout_ms = j->kind == SOAK_JOB_UNMET
                                                 ? 50 + (uint32_t)pick(sc, 200) : 0};
    j->p.signal = (gllm_counter){.memory = sc->arena, .offset = j->sig_off, .value = SIGNAL_VALUE};
    return 0;
}

/* ---- the entries ---- */

int soak_job_prepare(struct soak_conn *sc, struct soak_job *j, int kind)
{
    *j = (struct soak_job){.kind = kind, .import_fd = -1};
    int r;
    switch (kind) {
    case SOAK_JOB_DENSE:
        return dense_setup(sc, j, NULL);
    case SOAK_JOB_DEVICE:
    case SOAK_JOB_SHARED:
    case SOAK_JOB_IMPORT:
        if ((kind != SOAK_JOB_DEVICE && !sc->share_gran) || (r = dense_setup(sc, j, NULL)) < 0)
            return kind != SOAK_JOB_DEVICE && !sc->share_gran ? -EOPNOTSUPP : r;
        return place_kv(sc, j);
    case SOAK_JOB_FRESH: {
        gllm_memory *m;
        /* Shapes first, in a scratch job, to size the arena. */
        struct soak_job shape = {0};
        uint64_t save = sc->rng;
        if ((r = dense_setup(sc, &shape, NULL)) < 0)
            return r;
        sc->rng = save;
        const size_t bytes = (2 * nq_of(&shape) + 2 * nk_of(&shape)) * es_of(&shape);
        if ((r = gllm_arena_create(sc->c, bytes, &m)) < 0)
            return r;
        return dense_setup(sc, j, m);
    }
    case SOAK_JOB_DECODE:
    case SOAK_JOB_APPEND:
        return paged_setup(sc, j);
    case SOAK_JOB_COPY:
        copy_run(sc, j);
        return j->sync_status;
    case SOAK_JOB_ORDERED:
    case SOAK_JOB_UNMET:
        if ((r = dense_setup(sc, j, NULL)) < 0)
            return r;
        return counters_setup(sc, j);
    }
    return -EINVAL;
}

int soak_job_submit(struct soak_conn *sc, struct soak_job *j)
{
    int r;
    if (j->kind == SOAK_JOB_DECODE)
        r = gllm_attention_decode_submit(sc->c, &j->pp, &j->id);
    else if (j->kind == SOAK_JOB_APPEND)
        r = gllm_kv_append_submit(sc->c, &j->ap, &j->id);
    else
        r = gllm_attention_submit(sc->c, &j->p, &j->id);
    j->submitted = r == 0;
    return r;
}

void soak_job_after_submit(struct soak_conn *sc, struct soak_job *j)
{
    (void)sc;
    if (j->kind == SOAK_JOB_ORDERED)
        gllm_counter_write(&j->p.wait);
}

static bool signal_written(struct soak_conn *sc, struct soak_job *j)
{
    return atomic_load(counter_at(sc, j->sig_off)) == SIGNAL_VALUE;
}

void soak_job_check(struct soak_conn *sc, struct soak_job *j, int status)
{
    const char *name = soak_job_names[j->kind];
    const bool waits = j->kind == SOAK_JOB_ORDERED || j->kind == SOAK_JOB_UNMET;
    if (status != 0) {
        if (soak_code_documented(status) || (waits && status == GLLM_EWAITTIMEOUT) ||
            (j->unchecked && status <= -1000 && status >= -1999)) {
            soak_count_code(status);
            atomic_fetch_add(&soak->failed_ok[j->kind], 1);
            if (waits && (status == GLLM_EWAITTIMEOUT) && !signal_written(sc, j))
                soak_fail("%s job failed with WAITTIMEOUT but its signal was not written", name);
            else
                soak_pass();
        } else {
            soak_fail("%s job: undocumented failure %s (%d): %s", name, gllm_error_name(status),
                      status, gllm_client_last_error(sc->c));
        }
        return;
    }
    atomic_fetch_add(&soak->ok[j->kind], 1);
    if (j->kind == SOAK_JOB_UNMET) {
        soak_fail("a job whose wait nobody raised succeeded (id %llu)", (unsigned long long)j->id);
        return;
    }
    if (j->unchecked) {
        soak_pass();
        return;
    }
    double err = 0;
    int bad_b = -1;
    bool ok;
    if (j->kind == SOAK_JOB_DECODE)
        ok = decode_ok(sc, j, &err);
    else if (j->kind == SOAK_JOB_APPEND)
        ok = append_ok(sc, j, &bad_b);
    else
        ok = dense_ok(j, &err);
    if (!ok)
        soak_fail("%s job id %llu: wrong output (B%lld Hq%lld Hkv%lld Sq%lld Skv%lld D%lld %s%s; "
                  "error %.3g, sequence %d)", name, (unsigned long long)j->id, (long long)j->B,
                  (long long)j->Hq, (long long)j->Hkv, (long long)j->Sq, (long long)j->Skv,
                  (long long)j->D, gllm_dtype_name(j->dtype), j->causal ? " causal" : "", err,
                  bad_b);
    else if (j->kind == SOAK_JOB_ORDERED && !signal_written(sc, j))
        soak_fail("ordered job id %llu succeeded but its signal was not written",
                  (unsigned long long)j->id);
    else
        soak_pass();
}

void soak_job_release(struct soak_job *j)
{
    if (j->kd)
        gllm_memory_release(j->kd);
    if (j->vd)
        gllm_memory_release(j->vd);
    j->kd = j->vd = NULL;
    if (j->kind == SOAK_JOB_FRESH && j->mem)
        gllm_memory_release(j->mem);
    j->mem = NULL;
    if (j->import_fd >= 0)
        close(j->import_fd);
    j->import_fd = -1;
}

void soak_job_sabotage(struct soak_job *j)
{
    if (j->import_fd >= 0) {
        /* The seal must refuse the shrink; growing is harmless (gllmd maps the stated size). */
        const off_t size = lseek(j->import_fd, 0, SEEK_END);
        if (ftruncate(j->import_fd, size / 2) == 0)
            soak_fail("a sealed imported memfd could be shrunk while a job used it");
        else
            soak_pass();
        if (ftruncate(j->import_fd, size * 2) < 0)
            soak_fail("growing a sealed memfd failed: %s", strerror(errno));
    }
    if (j->kd || j->vd || j->kind == SOAK_JOB_FRESH) {
        j->unchecked = true;
        soak_job_release(j);
    }
}
