/* cuda_tma's tensor maps against a fake driver: the arguments cuTensorMapEncodeTiled gets for
 * the Hopper kernels' Q, K and V, the layouts left to cp.async, a refusal reported; and the
 * persistent Hopper kernels' grid and tile schedule (hopper_schedule.h); the paged prefill's maps. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_tma.h"
#include "hopper_schedule.h"

/* The arguments of the fake encoder's last call, and what it should answer. */
static struct {
    int calls;
    CUtensorMap *map;
    int dtype, interleave, swizzle, l2, oob;
    unsigned rank;
    void *base;
    unsigned long long dims[4], strides[3];
    unsigned box[4], elem[4];
    CUresult answer;
} fk;

static CUresult f_encode(CUtensorMap *map, int dtype, unsigned rank, void *base,
                         const unsigned long long *dims, const unsigned long long *strides,
                         const unsigned *box, const unsigned *elem, int interleave, int swizzle,
                         int l2, int oob)
{
    fk.calls++;
    fk.map = map, fk.dtype = dtype, fk.rank = rank, fk.base = base;
    memcpy(fk.dims, dims, sizeof fk.dims);
    memcpy(fk.strides, strides, sizeof fk.strides);
    memcpy(fk.box, box, sizeof fk.box);
    memcpy(fk.elem, elem, sizeof fk.elem);
    fk.interleave = interleave, fk.swizzle = swizzle, fk.l2 = l2, fk.oob = oob;
    map->opaque[0] = 0x7a000000u + (unsigned)fk.calls;   /* which call wrote this map */
    return fk.answer;
}

static struct cuda_driver drv;

static int setup(void **state)
{
    (void)state;
    memset(&fk, 0, sizeof fk);
    memset(&drv, 0, sizeof drv);
    drv.cuTensorMapEncodeTiled = f_encode;
    return 0;
}

#define BASE ((const void *)(uintptr_t)0x7f0000001000ull)

/* [B, H, S, D] row-major, f16, D = 128: the driver's order is D, S, H, B, strides in bytes. */
static void test_bhsd_f16(void **state)
{
    (void)state;
    gllm_cuda_tmap map;
    const int64_t dims[4] = {4, 32, 2048, 128};
    const int64_t st[4] = {32 * 2048 * 128, 2048 * 128, 128, 1};
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, dims, st, 128), 0);
    assert_int_equal(fk.calls, 1);
    assert_ptr_equal(fk.map, &map);
    assert_int_equal(fk.dtype, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
    assert_int_equal(fk.rank, 4);
    assert_ptr_equal(fk.base, BASE);
    const unsigned long long want_dims[4] = {128, 2048, 32, 4};
    const unsigned long long want_st[3] = {256, 2048ull * 256, 32ull * 2048 * 256};
    assert_memory_equal(fk.dims, want_dims, sizeof want_dims);
    assert_memory_equal(fk.strides, want_st, sizeof want_st);
    const unsigned want_box[4] = {64, 128, 1, 1}, ones[4] = {1, 1, 1, 1};
    assert_memory_equal(fk.box, want_box, sizeof want_box);
    assert_memory_equal(fk.elem, ones, sizeof ones);
    assert_int_equal(fk.interleave, CU_TENSOR_MAP_INTERLEAVE_NONE);
    assert_int_equal(fk.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
    assert_int_equal(fk.l2, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    assert_int_equal(fk.oob, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* [B, S, H, D] storage seen as [B, H, S, D] views, bf16, D = 64: strides out of order. */
static void test_bshd_bf16(void **state)
{
    (void)state;
    gllm_cuda_tmap map;
    const int64_t dims[4] = {8, 16, 1024, 64};
    const int64_t st[4] = {1024 * 16 * 64, 64, 16 * 64, 1};
    assert_int_equal(cuda_tma_map(&drv, &map, true, BASE, dims, st, 192), 0);
    assert_int_equal(fk.dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    const unsigned long long want_dims[4] = {64, 1024, 16, 8};
    const unsigned long long want_st[3] = {16 * 64 * 2, 64 * 2, 1024ull * 16 * 64 * 2};
    assert_memory_equal(fk.dims, want_dims, sizeof want_dims);
    assert_memory_equal(fk.strides, want_st, sizeof want_st);
    assert_int_equal(fk.box[1], 192);
}

/* A dimension of 1 is never stepped along: its stride, whatever it is, becomes one the
 * driver takes. */
static void test_unit_dimension(void **state)
{
    (void)state;
    gllm_cuda_tmap map;
    const int64_t dims[4] = {1, 8, 100, 128};
    const int64_t st[4] = {0, 100 * 128, 128, 1};
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, dims, st, 128), 0);
    assert_int_equal(fk.strides[2], 16);
    assert_int_equal(fk.strides[1], 100 * 128 * 2);
    assert_int_equal(fk.dims[3], 1);
}

/* What TMA cannot address goes back to cp.async without asking the driver. */
static void test_left_to_cp_async(void **state)
{
    (void)state;
    gllm_cuda_tmap map;
    const int64_t dims[4] = {2, 4, 256, 128};
    const int64_t good[4] = {4 * 256 * 128, 256 * 128, 128, 1};
    int64_t st[4];
    const void *odd = (const void *)((uintptr_t)BASE + 8);
    assert_int_equal(cuda_tma_map(&drv, &map, false, odd, dims, good, 128), -EOPNOTSUPP);
    memcpy(st, good, sizeof st);
    st[3] = 2;                                     /* D not contiguous */
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, dims, st, 128), -EOPNOTSUPP);
    memcpy(st, good, sizeof st);
    st[2] = 132;                                   /* 264-byte rows: not a multiple of 16 */
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, dims, st, 128), -EOPNOTSUPP);
    memcpy(st, good, sizeof st);
    st[1] = 0;                                     /* heads broadcast */
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, dims, st, 128), -EOPNOTSUPP);
    memcpy(st, good, sizeof st);
    st[0] = -st[0];                                /* batches backwards */
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, dims, st, 128), -EOPNOTSUPP);
    memcpy(st, good, sizeof st);
    st[0] = (int64_t)1 << 39;                      /* 2^40 bytes */
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, dims, st, 128), -EOPNOTSUPP);
    const int64_t d100[4] = {2, 4, 256, 100};      /* 200-byte rows: not 16-byte multiples */
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, d100, good, 128), -EOPNOTSUPP);
    const int64_t s_long[4] = {2, 4, (int64_t)1 << 33, 128};
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, s_long, good, 128), -EOPNOTSUPP);
    assert_int_equal(fk.calls, 0);
    drv.cuTensorMapEncodeTiled = NULL;             /* a driver without TMA */
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, dims, good, 128), -EOPNOTSUPP);
}

static void test_driver_refuses(void **state)
{
    (void)state;
    gllm_cuda_tmap map;
    const int64_t dims[4] = {2, 4, 256, 128};
    const int64_t st[4] = {4 * 256 * 128, 256 * 128, 128, 1};
    fk.answer = 1;                                 /* CUDA_ERROR_INVALID_VALUE */
    assert_int_equal(cuda_tma_map(&drv, &map, false, BASE, dims, st, 128), -EINVAL);
    assert_int_equal(fk.calls, 1);
}

/* hp zeroed, then a contiguous [B, H, S, D] prefill of these sizes at BASE: Q, then K, V and O
 * 1, 2 and 2.5 MiB on. */
static gllm_cuda_attn_params *hp_setup(gllm_cuda_hp_params *hp, int64_t B, int64_t Hq,
                                       int64_t Hkv, int64_t Sq, int64_t Skv, int64_t D)
{
    memset(hp, 0, sizeof *hp);
    gllm_cuda_attn_params *p = &hp->a;
    p->q = BASE, p->k = (const void *)((uintptr_t)BASE + 0x100000);
    p->v = (const void *)((uintptr_t)BASE + 0x200000);
    p->out = (void *)((uintptr_t)BASE + 0x280000);
    p->B = B, p->Hq = Hq, p->Hkv = Hkv, p->Sq = Sq, p->Skv = Skv, p->D = D;
    const int64_t q_st[4] = {Hq * Sq * D, Sq * D, D, 1}, kv_st[4] = {Hkv * Skv * D, Skv * D, D, 1};
    memcpy(p->q_st, q_st, sizeof q_st);
    memcpy(p->k_st, kv_st, sizeof kv_st);
    memcpy(p->v_st, kv_st, sizeof kv_st);
    memcpy(p->o_st, q_st, sizeof q_st);
    return p;
}

/* The maps of one call: Q's box as tall as the block's rows, K's and V's a key tile (K and V
 * over Hkv heads and Skv keys: GQA, Sq != Skv), and at D = 128 O's, a consumer warpgroup's
 * rows; D = 64 stores O from registers and needs no map of it. */
static void test_hp_params(void **state)
{
    (void)state;
    gllm_cuda_hp_params hp;
    gllm_cuda_attn_params *p = hp_setup(&hp, 2, 8, 2, 100, 300, 64);
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, true, NULL), 0);
    assert_int_equal(fk.calls, 3);
    assert_ptr_equal(fk.base, p->v);
    assert_int_equal(fk.box[1], GLLM_CUDA_HP_KEYS);
    p->o_st[2] = 68;                               /* never looked at */
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, true, NULL), 0);
    assert_int_equal(fk.calls, 6);

    fk.calls = 0;
    p = hp_setup(&hp, 2, 8, 2, 100, 300, 128);
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, true, NULL), 0);
    assert_int_equal(fk.calls, 4);
    assert_int_equal(hp.q_map.opaque[0], 0x7a000001u);
    assert_int_equal(hp.k_map.opaque[0], 0x7a000002u);
    assert_int_equal(hp.v_map.opaque[0], 0x7a000003u);
    assert_int_equal(hp.o_map.opaque[0], 0x7a000004u);
    /* The last call, O's: Q's shape, 64-row boxes */
    assert_ptr_equal(fk.base, p->out);
    const unsigned long long want_o[4] = {128, 100, 8, 2};
    assert_memory_equal(fk.dims, want_o, sizeof want_o);
    assert_int_equal(fk.box[1], GLLM_CUDA_HP_O_ROWS);
    assert_int_equal(fk.dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    /* An O that TMA cannot take fails the call after the other three. */
    fk.calls = 0;
    p->o_st[2] = 68;
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, true, NULL), -EOPNOTSUPP);
    assert_int_equal(fk.calls, 3);
    p = hp_setup(&hp, 2, 8, 2, 100, 300, 64);

    /* Q's box: GLLM_CUDA_HP_ROWS(D) rows, 192 at D = 64, 128 at D = 128; a Q that TMA cannot
     * take stops there. */
    fk.calls = 0;
    p->q_st[2] = 68;
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, true, NULL), -EOPNOTSUPP);
    assert_int_equal(fk.calls, 0);
    p->q_st[2] = 64;
    fk.answer = 1;
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, true, NULL), -EINVAL);
    assert_int_equal(fk.calls, 1);
    assert_int_equal(fk.box[1], 192);
    assert_int_equal(fk.dims[1], 100);
}

/* A repeated call on the same tensors takes its maps from the cache; a moved tensor, or one
 * the driver refused, is encoded again. */
static void test_cache(void **state)
{
    (void)state;
    static struct cuda_tma_cache cache;
    memset(&cache, 0, sizeof cache);
    gllm_cuda_hp_params hp;
    gllm_cuda_attn_params *p = hp_setup(&hp, 1, 4, 4, 256, 256, 128);
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, false, &cache), 0);
    assert_int_equal(fk.calls, 4);
    memset(&hp.q_map, 0, 4 * sizeof hp.q_map);
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, false, &cache), 0);
    assert_int_equal(fk.calls, 4);                 /* all four from the cache */
    assert_int_equal(cache.hits, 4);
    assert_int_equal(hp.q_map.opaque[0], 0x7a000001u);
    assert_int_equal(hp.v_map.opaque[0], 0x7a000003u);
    assert_int_equal(hp.o_map.opaque[0], 0x7a000004u);
    p->v = (const void *)((uintptr_t)BASE + 0x300000);
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, false, &cache), 0);
    assert_int_equal(fk.calls, 5);                 /* V moved: only V encoded */
    assert_int_equal(hp.v_map.opaque[0], 0x7a000005u);
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, true, &cache), 0);
    assert_int_equal(fk.calls, 9);                 /* another element type: every map */
    fk.answer = 1;
    p->q = (const void *)((uintptr_t)BASE + 0x400000);
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, true, &cache), -EINVAL);
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, true, &cache), -EINVAL);
    assert_int_equal(fk.calls, 11);                /* a refusal is not remembered as a map */
    assert_int_equal(cache.encodes, 9);
}

/* Key tiles a Hopper tile of rows [m0, m0 + rows) reads, as the kernel counts them. */
static int64_t hp_key_tiles(int64_t m0, int64_t rows, int64_t Sq, int64_t Skv, bool causal)
{
    int64_t end = Skv;
    if (causal) {
        end = m0 + rows + Skv - Sq;
        end = end < 0 ? 0 : end > Skv ? Skv : end;
    }
    return (end + GLLM_CUDA_HP_KEYS - 1) / GLLM_CUDA_HP_KEYS;
}

/* The persistent Hopper launch: its grid, and the units its blocks walk as the kernel does
 * (block x takes units x, x + grid, ...): every tile of every head exactly once; causal, the
 * heaviest tile of a head first, and with more tiles than blocks, pairs of about equal work
 * (Sq = Skv: key tiles within 2 of the mean pair's), so the blocks' loads differ by about a
 * unit at most. */
static void test_hp_schedule(void **state)
{
    (void)state;
    static unsigned char seen[64 * 1024];
    static const struct { int64_t B, H, Sq, Skv, D, sms; } shape[] = {
        {4, 32, 2048, 2048, 128, 132}, {32, 16, 512, 512, 128, 132}, {2, 32, 4096, 4096, 128, 132},
        {8, 16, 1024, 1024, 64, 132},  {1, 32, 8192, 8192, 64, 132},  {2, 8, 1024, 1024, 128, 132},
        {1, 1, 100, 300, 128, 132},    {3, 5, 1000, 700, 64, 7},      {2, 3, 777, 1500, 128, 1},
        {1, 2, 1, 1, 64, 132},          {32, 32, 512, 512, 64, 132},
    };
    assert_int_equal(gllm_cuda_hp_grid(0, 128, 4, 132), 1);
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        const int64_t D = shape[i].D, rows = GLLM_CUDA_HP_ROWS(D), heads = shape[i].B * shape[i].H;
        const int64_t Sq = shape[i].Sq, Skv = shape[i].Skv, M = (Sq + rows - 1) / rows;
        const int64_t grid = gllm_cuda_hp_grid(Sq, D, heads, shape[i].sms);
        assert_int_equal(grid, M * heads < shape[i].sms ? M * heads : shape[i].sms);
        assert_true((size_t)(M * heads) <= sizeof seen);
        for (int causal = 0; causal < 2; causal++) {
            const gllm_cuda_hp_sched sc = gllm_cuda_hp_schedule(
                (int32_t)Sq, (int32_t)rows, (int32_t)heads, causal, (int32_t)grid, 0);
            assert_int_equal(sc.whole_units, sc.units);      /* nothing split unless asked */
            assert_int_equal(sc.m_blocks, M);
            assert_int_equal(sc.pair, causal && M > 1 && M * heads > grid);
            /* Causal, the part-filled m-tile is a head's first: m_pad rows before row 0, whole
             * 64-row warpgroups, and the tiles still cover every row. The block's time goes
             * with a tile's key tiles however many of its warpgroups work, so a head's key
             * tiles summed over its tiles are no more than with the tiles from row 0. */
            const int64_t pad = sc.m_pad;
            assert_int_equal(pad, causal ? (M * rows - Sq) / 64 * 64 : 0);
            assert_true(pad % 64 == 0 && pad < rows && M * rows - pad >= Sq);
            int64_t head_keys = 0, head_keys_from_0 = 0;
            for (int64_t m = 0; m < M; m++) {
                head_keys += hp_key_tiles(gllm_cuda_hp_row0(&sc, (int32_t)rows, (int32_t)m), rows, Sq,
                                          Skv, causal);
                head_keys_from_0 += hp_key_tiles(m * rows, rows, Sq, Skv, causal);
            }
            assert_true(head_keys <= head_keys_from_0);
            if (causal && Sq == 1024 && D == 64)
                assert_true(head_keys == 27 && head_keys_from_0 == 32);
            /* The key tiles of one head's pairs (the middle tile of an odd M is alone). */
            int64_t pair_keys = 0;
            for (int64_t m = 0; m < M; m++)
                if (M % 2 == 0 || m != M / 2)
                    pair_keys += hp_key_tiles(gllm_cuda_hp_row0(&sc, (int32_t)rows, (int32_t)m), rows,
                                              Sq, Skv, causal);
            const int64_t pairs = M / 2;
            memset(seen, 0, sizeof seen);
            int64_t most = 0, most_rows = 0, total_rows = 0, total = 0;
            for (int32_t blk = 0; blk < grid; blk++) {
                int64_t work = 0, rows_work = 0;
                int32_t u, r = 0;
                while ((u = gllm_cuda_hp_round_unit(&sc, r++, blk)) >= 0) {
                    assert_true(u / grid == r - 1);          /* round r - 1's units */
                    int32_t bh, m[2];
                    const int32_t n = gllm_cuda_hp_unit(&sc, causal, u, &bh, m);
                    assert_true(n == 1 || (n == 2 && sc.pair));
                    assert_true(bh >= 0 && bh < heads);
                    int64_t keys = 0;
                    for (int32_t k = 0; k < n; k++) {
                        assert_true(m[k] >= 0 && m[k] < M);
                        assert_int_equal(seen[bh * M + m[k]]++, 0);
                        const int64_t m0 = gllm_cuda_hp_row0(&sc, (int32_t)rows, m[k]);
                        keys += hp_key_tiles(m0, rows, Sq, Skv, causal);
                        /* the 64-row warpgroups with rows in [0, Sq), times its key tiles */
                        const int64_t lo = m0 < 0 ? 0 : m0, hi = Sq < m0 + rows ? Sq : m0 + rows;
                        rows_work += ((hi - m0 + 63) / 64 - (lo - m0) / 64) *
                                     hp_key_tiles(m0, rows, Sq, Skv, causal);
                    }
                    if (causal && n == 2)
                        assert_true(m[0] > m[1]);                  /* the heavier first */
                    if (causal && !sc.pair)
                        assert_int_equal(m[0], M - 1 - (u - bh * sc.per_head));
                    if (sc.pair && n == 1)   /* the middle tile right after its head's pairs */
                        assert_true(M % 2 == 1 && m[0] == M / 2 &&
                                    u == bh * sc.stride + sc.per_head);
                    if (sc.pair)                            /* a head's units neighbours */
                        assert_true(u / sc.stride == bh && sc.stride == M / 2 + M % 2);
                    if (n == 2 && Sq == Skv)
                        assert_true(keys * pairs >= pair_keys - 2 * pairs &&
                                    keys * pairs <= pair_keys + 2 * pairs);
                    work += keys + n;                  /* a tile's fixed cost: about a key tile */
                }
                total += work;
                most = work > most ? work : most;
                most_rows = rows_work > most_rows ? rows_work : most_rows;
                total_rows += rows_work;
            }
            /* Non-causal, the warpgroups' work (a part-filled last m-tile has idle ones) is
             * spread evenly: the busiest block within 3/4 of a unit of the mean, where a plain
             * stride over 132 blocks gave the blocks holding the last m-tile (grid a multiple
             * of M) that tile every round (B8 H16 S1024 D64: 0.83 of a unit over the mean,
             * B32 H32 S512 D64 3.3; rotated 0.16 and 0.65). */
            if (!causal && Sq == Skv && M * heads >= 4 * grid) {
                const int64_t unit = (rows / 64) * hp_key_tiles(0, rows, Sq, Skv, 0);
                assert_true(most_rows * grid <= total_rows + 3 * unit * grid / 4);
            }
            /* Paired: the busiest block within about one pair and the pairs' spread of the
             * mean. (Not of the least busy: with a head's middle tile among its pairs (M odd),
             * a block may get a middle tile more than another, half a pair less work, which
             * leaves the kernel's time alone: B1 H32 S8192 D64, 43 m-tiles, busiest 405, mean
             * 351, least 303, against 406, 351 and 336 with the middle tiles last.) */
            const int64_t per_block = (sc.units + grid - 1) / grid;
            if (sc.pair && Sq == Skv)
                assert_true(most - total / grid <= pair_keys / pairs + 4 + 4 * per_block);
            for (int64_t t = 0; t < M * heads; t++)
                assert_int_equal(seen[t], 1);
        }
    }
}

/* The daemon's parameter block is the kernel's: maps first, each on its own 128 bytes. */
/* The kernels' division by a launch constant (gllm_cuda_fastdiv) against the operator, for
 * every divisor up to 5000 and the larger ones a launch can have, numerators across [0, 2^31)
 * with both ends and the multiples of d and their neighbours, where a wrong m or s shows. */
static void test_fastdiv(void **state)
{
    (void)state;
    static const uint32_t big[] = {65535, 65536, 65537, 1000003, (1u << 20) + 1, 0x7fffffffu};
    uint64_t seed = 1;
    for (uint32_t i = 0; i < 5000 + sizeof big / sizeof big[0]; i++) {
        const uint32_t d = i < 5000 ? i + 1 : big[i - 5000];
        const gllm_cuda_fastdiv f = gllm_cuda_fastdiv_of(d);
        const uint32_t edge[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 0x7fffffffu, 0x7ffffffeu,
                                 0x7fffffffu / d * d, 0x7fffffffu / d * d - 1};
        for (size_t k = 0; k < sizeof edge / sizeof edge[0]; k++)
            if (edge[k] <= 0x7fffffffu)
                assert_int_equal(gllm_cuda_fastdiv_div(f, edge[k]), edge[k] / d);
        for (int k = 0; k < 200; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const uint32_t n = (uint32_t)(seed >> 33);        /* below 2^31 */
            assert_int_equal(gllm_cuda_fastdiv_div(f, n), n / d);
        }
    }
}

static void test_param_layout(void **state)
{
    (void)state;
    assert_int_equal(offsetof(gllm_cuda_hp_params, q_map), 0);
    assert_int_equal(offsetof(gllm_cuda_hp_params, k_map), 128);
    assert_int_equal(offsetof(gllm_cuda_hp_params, v_map), 256);
    assert_int_equal(offsetof(gllm_cuda_hp_params, o_map), 384);
    assert_int_equal(offsetof(gllm_cuda_hp_params, a), 512);
    assert_int_equal(_Alignof(gllm_cuda_hp_params), 128);
    assert_true(sizeof(gllm_cuda_hp_params) <= 4096);       /* the kernel parameter limit */
}

/* The paged prefill's maps: q [N, Hq, D] as (D, N, Hq, 1) with ROWS-token boxes, the pools
 * [num_pages, page_size, Hkv, D] as (D, page_size, Hkv, num_pages) with one-page boxes, and at
 * D = 128 out as q with O_ROWS-token boxes. */
static void test_pp_params(void **state)
{
    (void)state;
    static gllm_cuda_pp_params pp;
    const void *q = BASE, *k = (const void *)((uintptr_t)BASE + 0x1000000),
               *v = (const void *)((uintptr_t)BASE + 0x2000000),
               *out = (const void *)((uintptr_t)BASE + 0x3000000);
    /* K misaligned: Q is encoded, then the call stops at K, so fk holds Q's arguments. */
    assert_int_equal(cuda_tma_pp_params(&drv, &pp, true, q, out, 3000, 32, (const char *)k + 8, v,
                                        500, 16, 8, 128, 128, NULL),
                     -EOPNOTSUPP);
    assert_int_equal(fk.calls, 1);
    assert_ptr_equal(fk.base, q);
    const unsigned long long want_q[4] = {128, 3000, 32, 1};
    const unsigned long long want_qs[3] = {32 * 128 * 2, 128 * 2, 3000ull * 32 * 128 * 2};
    assert_memory_equal(fk.dims, want_q, sizeof want_q);
    assert_memory_equal(fk.strides, want_qs, sizeof want_qs);
    const unsigned want_qbox[4] = {64, GLLM_CUDA_HP_ROWS(128), 1, 1};
    assert_memory_equal(fk.box, want_qbox, sizeof want_qbox);

    fk.calls = 0;
    assert_int_equal(cuda_tma_pp_params(&drv, &pp, true, q, out, 3000, 32, k, v, 500, 16, 8, 64,
                                        64, NULL),
                     0);
    assert_int_equal(fk.calls, 3);                 /* D = 64: no O map */
    assert_int_equal(pp.k_map.opaque[0], 0x7a000002u);
    assert_ptr_equal(fk.base, v);                  /* the last call, V's */
    const unsigned long long want_kv[4] = {64, 16, 8, 500};
    const unsigned long long want_kvs[3] = {8 * 64 * 2, 64 * 2, 16ull * 8 * 64 * 2};
    assert_memory_equal(fk.dims, want_kv, sizeof want_kv);
    assert_memory_equal(fk.strides, want_kvs, sizeof want_kvs);
    const unsigned want_kvbox[4] = {64, 16, 1, 1};
    assert_memory_equal(fk.box, want_kvbox, sizeof want_kvbox);
    assert_int_equal(fk.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
    assert_int_equal(fk.dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);

    /* D = 128: a fourth map, O's, over out with q's shape and strides and 64-token boxes. */
    fk.calls = 0;
    assert_int_equal(cuda_tma_pp_params(&drv, &pp, false, q, out, 3000, 32, k, v, 500, 16, 8, 128,
                                        128, NULL),
                     0);
    assert_int_equal(fk.calls, 4);
    assert_ptr_equal(fk.base, out);
    assert_memory_equal(fk.dims, want_q, sizeof want_q);
    assert_memory_equal(fk.strides, want_qs, sizeof want_qs);
    const unsigned want_obox[4] = {64, GLLM_CUDA_HP_O_ROWS, 1, 1};
    assert_memory_equal(fk.box, want_obox, sizeof want_obox);
    assert_int_equal(fk.dtype, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
    assert_int_equal(offsetof(gllm_cuda_pp_params, o_map), 384);
    assert_true(sizeof(gllm_cuda_pp_params) <= 4096);       /* the kernel parameter limit */

    /* D = 96 on the D = 128 kernel: the maps over 96 columns (the boxes past them read zeros),
     * Q's boxes and O's map as the kernel's. */
    fk.calls = 0;
    assert_int_equal(cuda_tma_pp_params(&drv, &pp, true, q, out, 3000, 32, k, v, 500, 16, 8, 96,
                                        128, NULL),
                     0);
    assert_int_equal(fk.calls, 4);
    const unsigned long long want_q96[4] = {96, 3000, 32, 1};
    assert_memory_equal(fk.dims, want_q96, sizeof want_q96);
    assert_memory_equal(fk.box, want_obox, sizeof want_obox);
    /* The dense kernels' maps still take whole boxes only. */
    static gllm_cuda_hp_params hp;
    hp.a = (gllm_cuda_attn_params){.q = BASE, .k = BASE, .v = BASE,
                                   .out = (void *)(uintptr_t)BASE, .B = 1, .Hq = 1, .Hkv = 1,
                                   .Sq = 128, .Skv = 128, .D = 96,
                                   .q_st = {128 * 96, 128 * 96, 96, 1},
                                   .k_st = {128 * 96, 128 * 96, 96, 1},
                                   .v_st = {128 * 96, 128 * 96, 96, 1},
                                   .o_st = {128 * 96, 128 * 96, 96, 1}};
    assert_int_equal(cuda_tma_hp_params(&drv, &hp, true, NULL), -EOPNOTSUPP);
}

/* Units split by keys (D = 128, not causal, units of at least GLLM_CUDA_HP_SPLIT_MIN_KEYS key
 * tiles, 16k-token shapes from S = 4096, or of half that where the last round is at most a
 * quarter full, S = 2048 with 32 heads): the whole units go round by round, every round
 * full; the key tiles of the rest are dealt out in ranges one key tile apart at most, each
 * unit's key tiles done exactly once, a unit cut at most once, its two parts in slots 2x and
 * 2x + 1 (the first part, keys from 0, in the even slot, done by block x - 1; the second by
 * block x), every slot used once, within the workspace GLLM_CUDA_HP_SPLIT_COUNTS sizes. */
static void test_hp_split(void **state)
{
    (void)state;
    static unsigned char seen[1 << 20];
    static int32_t part_of[4096][2], slot_used[2048];
    static const struct { int64_t B, H, Sq, Skv, sms; int split; } shape[] = {
        {4, 16, 4096, 4096, 132, 1},  {2, 16, 8192, 8192, 132, 1}, {1, 16, 16384, 16384, 132, 1},
        {2, 32, 2048, 8192, 132, 1},  {3, 5, 1000, 4100, 7, 1},    {2, 8, 1000, 5000, 5, 1},
        {4, 31, 640, 4000, 132, 1},   {8, 16, 2048, 2048, 132, 0}, {32, 16, 512, 512, 132, 0},
        {1, 1, 100, 300, 132, 0},     {2, 3, 777, 1500, 1, 0},     {8, 17, 1024, 128, 132, 0},
        {16, 33, 128, 5000, 132, 0},  {8, 32, 2048, 2048, 132, 1}, {1, 34, 2048, 2048, 132, 1},
        {1, 35, 2048, 2048, 132, 1},  {1, 37, 2048, 2048, 132, 0}, {1, 34, 3072, 3072, 132, 1},
        {1, 34, 2048, 1920, 132, 0},  {2, 8, 1000, 2500, 9, 1},    {2, 8, 1000, 2500, 3, 0},
    };
    const int64_t rows = GLLM_CUDA_HP_ROWS(128);
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        const int64_t heads = shape[i].B * shape[i].H, Sq = shape[i].Sq, Skv = shape[i].Skv;
        const int64_t M = (Sq + rows - 1) / rows, units = M * heads;
        const int32_t grid = (int32_t)gllm_cuda_hp_grid(Sq, 128, heads, shape[i].sms);
        const int32_t keys = (int32_t)hp_key_tiles(0, rows, Sq, Skv, false);
        const gllm_cuda_hp_sched causal =
            gllm_cuda_hp_schedule((int32_t)Sq, (int32_t)rows, (int32_t)heads, 1, grid, keys);
        assert_int_equal(causal.whole_units, causal.units);                /* causal: never */
        const gllm_cuda_hp_sched sc =
            gllm_cuda_hp_schedule((int32_t)Sq, (int32_t)rows, (int32_t)heads, 0, grid, keys);
        const gllm_cuda_hp_split sp = gllm_cuda_hp_split_of(&sc, keys);
        assert_int_equal(sp.keys > 0, shape[i].split);
        const int64_t last = units % grid;
        assert_int_equal(sp.keys > 0, units > grid && last != 0 &&
                                          (keys >= GLLM_CUDA_HP_SPLIT_MIN_KEYS ||
                                           (2 * keys >= GLLM_CUDA_HP_SPLIT_MIN_KEYS &&
                                            last * 4 <= grid)));
        assert_int_equal(sp.keys > 0, sc.whole_units < sc.units);
        if (!sp.keys) {
            assert_int_equal(sc.whole_units, units);
            continue;
        }
        assert_int_equal(sp.keys, keys);
        assert_int_equal(sc.whole_units % grid, 0);
        assert_true(units - sc.whole_units > grid && units - sc.whole_units < 2 * grid);
        assert_int_equal(sp.work, (units - sc.whole_units) * keys);
        assert_true((size_t)(units * keys) <= sizeof seen && units <= 4096 && grid <= 1024);
        memset(seen, 0, sizeof seen);
        memset(slot_used, 0, sizeof slot_used);
        for (int64_t u = 0; u < units; u++)
            part_of[u][0] = part_of[u][1] = -2;
        int64_t least = INT64_MAX, most = 0;
        for (int32_t x = 0; x < grid; x++) {
            int64_t work = 0;
            int32_t u, r = 0;
            while ((u = gllm_cuda_hp_round_unit(&sc, r++, x)) >= 0) {
                assert_true(u < sc.whole_units);
                for (int32_t k = 0; k < keys; k++)
                    assert_int_equal(seen[u * keys + k]++, 0);
                work += keys;
            }
            assert_int_equal(r - 1, sc.whole_units / grid);      /* every round full */
            const int32_t a0 = gllm_cuda_hp_split_at(&sc, &sp, x);
            const int32_t e = gllm_cuda_hp_split_at(&sc, &sp, x + 1);
            assert_true(e - a0 >= keys);                           /* a unit cut once at most */
            for (int32_t a = a0; a < e;) {
                const gllm_cuda_hp_piece pc = gllm_cuda_hp_split_piece(&sc, &sp, x, a, e);
                assert_true(pc.unit >= sc.whole_units && pc.unit < units);
                assert_true(pc.k0 >= 0 && pc.nk >= 1 && pc.k0 + pc.nk <= keys);
                for (int32_t k = pc.k0; k < pc.k0 + pc.nk; k++)
                    assert_int_equal(seen[pc.unit * keys + k]++, 0);
                if (pc.k0 == 0 && pc.nk == keys) {
                    assert_int_equal(pc.part, -1);
                } else {
                    assert_true(pc.part >= 0 && pc.part < 2 * grid);
                    assert_true(pc.part / 2 < GLLM_CUDA_HP_SPLIT_COUNTS(128, grid) / (rows / 64));
                    assert_int_equal(slot_used[pc.part]++, 0);
                    /* the first part in the even slot, by block x - 1; the second by x */
                    assert_int_equal(pc.part % 2, pc.k0 > 0);
                    assert_int_equal(pc.part / 2, pc.k0 > 0 ? x : x + 1);
                    int32_t *pair = part_of[pc.unit];
                    assert_int_equal(pair[pc.k0 > 0], -2);
                    pair[pc.k0 > 0] = pc.part;
                }
                work += pc.nk;
                a += pc.nk;
            }
            least = work < least ? work : least;
            most = work > most ? work : most;
        }
        assert_true(most - least <= 1);                           /* even to a key tile */
        for (int64_t t = 0; t < units * keys; t++)
            assert_int_equal(seen[t], 1);
        for (int64_t u = sc.whole_units; u < units; u++)          /* cut units: both parts */
            if (part_of[u][0] != -2 || part_of[u][1] != -2)
                assert_true(part_of[u][0] >= 0 && part_of[u][1] == (part_of[u][0] ^ 1));
    }
}

/* gllm_cuda_hp_grid_even: D = 128 not causal, as few blocks as gllm_cuda_hp_grid's rounds
 * need where that schedule splits nothing and leaves a part-filled last round; otherwise
 * gllm_cuda_hp_grid's. Never more blocks or rounds, and never a split the other did not make. */
static void test_hp_grid_even(void **state)
{
    (void)state;
    static const struct { int64_t B, H, Sq, Skv, sms, even; } shape[] = {
        {8, 16, 2048, 2048, 132, 128},  /* 2048 units: 16 rounds on 128 blocks, not 15.5 on 132 */
        {32, 16, 512, 512, 132, 128},   {16, 16, 1024, 1024, 132, 128},
        {1, 37, 1536, 1536, 132, 111},  /* 444 units: 4 rounds of 111 */
        {8, 32, 2048, 2048, 132, 132},  /* 4096 units, last round 4 units: split (v58) */
        {4, 16, 4096, 4096, 132, 132},  /* 32 key tiles, last round part-filled: split */
        {1, 8, 512, 512, 132, 32},      /* fewer units than SMs: one each */
        {4, 33, 512, 512, 132, 132},    /* 528 units, 4 whole rounds */
        {1, 1, 1, 1, 132, 1},           {3, 5, 1000, 700, 7, 7},
    };
    const int64_t rows = GLLM_CUDA_HP_ROWS(128);
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        const int64_t heads = shape[i].B * shape[i].H, Sq = shape[i].Sq;
        const int64_t units = (Sq + rows - 1) / rows * heads;
        const int32_t keys = (int32_t)hp_key_tiles(0, rows, Sq, shape[i].Skv, false);
        const int64_t grid = gllm_cuda_hp_grid(Sq, 128, heads, shape[i].sms);
        const int64_t even = gllm_cuda_hp_grid_even(Sq, 128, heads, 0, shape[i].sms, keys);
        assert_int_equal(even, shape[i].even);
        /* Causal, and D = 64, keep one block per SM. */
        assert_int_equal(gllm_cuda_hp_grid_even(Sq, 128, heads, 1, shape[i].sms, keys), grid);
        assert_int_equal(gllm_cuda_hp_grid_even(Sq, 64, heads, 0, shape[i].sms, keys),
                         gllm_cuda_hp_grid(Sq, 64, heads, shape[i].sms));
        assert_true(even >= 1 && even <= grid);
        assert_int_equal((units + even - 1) / even, (units + grid - 1) / grid);   /* rounds */
        const gllm_cuda_hp_sched sg = gllm_cuda_hp_schedule((int32_t)Sq, (int32_t)rows,
                                                            (int32_t)heads, 0, (int32_t)grid, keys);
        const gllm_cuda_hp_sched se = gllm_cuda_hp_schedule((int32_t)Sq, (int32_t)rows,
                                                            (int32_t)heads, 0, (int32_t)even, keys);
        if (sg.whole_units < sg.units)
            assert_int_equal(even, grid);
        assert_true(se.whole_units == se.units || even == grid);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_bhsd_f16, setup),
        cmocka_unit_test_setup(test_bshd_bf16, setup),
        cmocka_unit_test_setup(test_unit_dimension, setup),
        cmocka_unit_test_setup(test_left_to_cp_async, setup),
        cmocka_unit_test_setup(test_driver_refuses, setup),
        cmocka_unit_test_setup(test_hp_params, setup),
        cmocka_unit_test_setup(test_pp_params, setup),
        cmocka_unit_test_setup(test_cache, setup),
        cmocka_unit_test_setup(test_param_layout, setup),
        cmocka_unit_test(test_hp_schedule),
        cmocka_unit_test(test_hp_split),
        cmocka_unit_test(test_hp_grid_even),
        cmocka_unit_test(test_fastdiv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
