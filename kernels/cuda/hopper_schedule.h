/* The schedule of gllmd's persistent Hopper kernels, the same code on the host (the launch, the
 * tests) and in the kernels: which tiles a block takes in which round, the split by keys, the
 * grid. Plain C; the parameter structs are attention_params.h's. */
#ifndef GLLM_CUDA_HOPPER_SCHEDULE_H
#define GLLM_CUDA_HOPPER_SCHEDULE_H

#include <stdint.h>

#include "attention_params.h"

/* The Hopper kernels' work: tiles of GLLM_CUDA_HP_ROWS(D) query rows of one head (b * Hq + h),
 * grouped into units a block takes whole. Non-causal, or causal with no more tiles than
 * blocks: a unit is one tile, units head by head, m-tiles in order (causal: last first, the
 * heaviest). Causal with more tiles than blocks: a unit pairs m-tile M - 1 - q with m-tile q
 * (M tiles per head), so every unit reads about M + 1 key tiles and a static stride over
 * the units balances the blocks. Units go head by head, each head's pairs then (M odd) its
 * middle tile, about half a pair: a head's units are neighbours, run in the same round or the
 * next, so its K and V come from memory once and from L2 after (the middle tiles after every
 * head's pairs came seven rounds later at D = 64 causal S = 512, when L2 had long dropped the
 * head: 12% slower there, on an H100). */
#ifdef __CUDACC__
#define GLLM_CUDA_HP_FN static __host__ __device__ __forceinline__
#else
#define GLLM_CUDA_HP_FN static inline
#endif
/* n / d for 0 <= n < 2^31 by a multiply-high, an add and a shift (d >= 1, round-up method):
 * the kernels divide by values fixed for a launch at every tile, and an integer division
 * there is some twenty dependent instructions (about 600 cycles between two tiles). m is
 * 2^32 (2^s - d) / d + 1 rounded down, s the smallest with 2^s >= d. */
GLLM_CUDA_HP_FN gllm_cuda_fastdiv gllm_cuda_fastdiv_of(uint32_t d)
{
    gllm_cuda_fastdiv f;
    f.d = d;
    f.s = 0;
    while ((1ull << f.s) < d)
        f.s++;
    f.m = (uint32_t)(((1ull << 32) * ((1ull << f.s) - d)) / d + 1);
    return f;
}
GLLM_CUDA_HP_FN uint32_t gllm_cuda_fastdiv_div(gllm_cuda_fastdiv f, uint32_t n)
{
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(n, f.m);
#else
    const uint32_t hi = (uint32_t)(((uint64_t)n * f.m) >> 32);
#endif
    return (hi + n) >> f.s;
}

typedef struct gllm_cuda_hp_sched {
    int32_t m_blocks;     /* query tiles per head, M: ceil(Sq / ROWS) */
    int32_t heads;        /* B * Hq */
    int32_t per_head;     /* a head's units of one or two m-tiles: M, or M / 2 paired */
    int32_t stride;       /* a head's units: per_head, and its middle tile when paired, M odd */
    int32_t units;
    int32_t pair;
    int32_t grid;         /* the blocks launched */
    int32_t m_pad;        /* m-tile m holds rows [m * ROWS - m_pad, (m + 1) * ROWS - m_pad) */
    int32_t whole_units;  /* units taken whole, round by round: all, or fewer when split */
    gllm_cuda_fastdiv stride_div, grid_div;
} gllm_cuda_hp_sched;

/* heads: B * Hq; grid: the blocks launched (gllm_cuda_hp_grid or gllm_cuda_hp_grid_even);
 * split_keys: a unit's key tiles where the kernel can split units by keys (not causal, the
 * workspace there), else 0.
 *
 * Split by keys (stream-K's hybrid): with U units of one tile and U a little past a
 * multiple of the grid G, the last round holds U mod G tiles and the other blocks idle through
 * it (D = 128, 16k tokens, 16 heads: 2048 tiles on 132 blocks are 15.5 rounds, so 16 rounds'
 * time, 3% lost). When U > G and U mod G != 0 the units of every round but the last two go
 * whole; the key tiles of the rest, between G and 2G units, W of them, are dealt out in G
 * ranges of equal length (to within one), block x taking [x W / G, (x + 1) W / G) in unit
 * order. A range is at least a unit's key tiles long, so a unit is cut at most once, into two
 * parts done by neighbouring blocks; each part's partial result goes to a slot
 * (gllm_cuda_hp_piece) and the part that counts in second adds the other to its own and writes
 * the tile. Units of GLLM_CUDA_HP_SPLIT_MIN_KEYS key tiles or more are split: below, the
 * parts' extra tile boundaries, the merge and the switch between the two walks cost more than
 * the idle blocks (measured on an H100: S = 512 +8% time, 1k +2.5%, 2k level, 4k -1.2%, 8k -2%)
 * unless the last round is nearly empty, since what the split saves is the last round's idle
 * time. So units of half as many key tiles (S = 2k-4k) are split too where the last round is
 * at most a quarter full (H200: 16 key tiles, last round 3% full -0.5 to -1.8%, 12% -4.1%,
 * 24% -2.1%, 24 key tiles 18% full -3.5%; split always, 16 key tiles lost 0.4-0.5% at 52% full
 * and 2.2% at 48%; there gllm_cuda_hp_grid_even fills the last round instead). Only
 * whole_units says so here: the kernels take the rest (gllm_cuda_hp_split) from the launch when
 * they come to the split units, so that it is not held through the whole ones. */
#define GLLM_CUDA_HP_SPLIT_MIN_KEYS 32
GLLM_CUDA_HP_FN gllm_cuda_hp_sched gllm_cuda_hp_schedule(int32_t Sq, int32_t rows, int32_t heads,
                                                         int32_t causal, int32_t grid,
                                                         int32_t split_keys)
{
    gllm_cuda_hp_sched s;
    s.m_blocks = (Sq + rows - 1) / rows;
    s.heads = heads;
    s.pair = causal && s.m_blocks >= 2 && (int64_t)s.m_blocks * heads > grid;
    s.per_head = s.pair ? s.m_blocks / 2 : s.m_blocks;
    s.stride = s.per_head + (s.pair && s.m_blocks % 2);
    s.units = s.stride * heads;
    s.grid = grid;
    /* Causal, the part-filled m-tile is a head's first (its rows before row 0, whole 64-row
     * warpgroups of them, are idle), not its last: the first tile's rows see the fewest keys,
     * the last's the most, so the idle warpgroups wait out the fewest key tiles (D = 64
     * causal S = 1024, M = 6 tiles of 192 rows: 27 key tiles a head against 32; S = 512: 8
     * against 9). */
    s.m_pad = causal ? (s.m_blocks * rows - Sq) / 64 * 64 : 0;
    s.whole_units = s.units;
    const int32_t last_round = s.units % grid;   /* units in a part-filled last round */
    if (!causal && s.units > grid && last_round != 0 &&
        (split_keys >= GLLM_CUDA_HP_SPLIT_MIN_KEYS ||
         (split_keys >= GLLM_CUDA_HP_SPLIT_MIN_KEYS / 2 && 4 * last_round <= grid)) &&
        (int64_t)(last_round + grid) * split_keys * grid < ((int64_t)1 << 31))
        s.whole_units = (s.units / grid - 1) * grid;
    s.stride_div = gllm_cuda_fastdiv_of((uint32_t)(s.stride > 0 ? s.stride : 1));
    s.grid_div = gllm_cuda_fastdiv_of((uint32_t)grid);
    return s;
}

/* The split units of schedule s (split_keys as given to it): their key tiles each (0: none
 * split), all of them, and a divider by the first. W G < 2^31 (the schedule splits only then),
 * so x W below is 32-bit and its division by G a multiply (fastdiv). The launch works this out
 * (gllm_cuda_hp_params.split): the kernel then never makes a divider, whose 64-bit division is a
 * call, around which ptxas put the schedule's fields in local memory. */
GLLM_CUDA_HP_FN gllm_cuda_hp_split gllm_cuda_hp_split_of(const gllm_cuda_hp_sched *s,
                                                         int32_t split_keys)
{
    gllm_cuda_hp_split p;
    p.keys = s->whole_units < s->units ? split_keys : 0;
    p.work = (s->units - s->whole_units) * p.keys;
    p.div = gllm_cuda_fastdiv_of((uint32_t)(p.keys > 0 ? p.keys : 1));
    return p;
}

/* Where block x's range of the split key tiles starts (x = grid: where they end). */
GLLM_CUDA_HP_FN int32_t gllm_cuda_hp_split_at(const gllm_cuda_hp_sched *s,
                                              const gllm_cuda_hp_split *p, int32_t x)
{
    return (int32_t)gllm_cuda_fastdiv_div(s->grid_div, (uint32_t)(x * p->work));
}

/* Split: the part of a unit that block x does from split key tile a, its range ending at e
 * (a < e): unit, first key tile k0 and key tiles nk within it. A unit cut at the start of block
 * x's range has two parts, in slots 2x (the first, block x - 1's) and 2x + 1 (block x's), on
 * arrival counter x; part is the slot, -1 for a unit done whole by one block. */
typedef struct gllm_cuda_hp_piece {
    int32_t unit, k0, nk, part;
} gllm_cuda_hp_piece;
GLLM_CUDA_HP_FN gllm_cuda_hp_piece gllm_cuda_hp_split_piece(const gllm_cuda_hp_sched *s,
                                                            const gllm_cuda_hp_split *sp,
                                                            int32_t x, int32_t a, int32_t e)
{
    gllm_cuda_hp_piece p;
    const int32_t i = (int32_t)gllm_cuda_fastdiv_div(sp->div, (uint32_t)a);
    p.unit = s->whole_units + i;
    p.k0 = a - i * sp->keys;
    p.nk = sp->keys - p.k0 < e - a ? sp->keys - p.k0 : e - a;
    p.part = p.k0 > 0 ? 2 * x + 1 : p.nk < sp->keys ? 2 * (x + 1) : -1;
    return p;
}

/* The split workspace of a dense Hopper launch of grid blocks (gllm_cuda_hp_params): an arrival
 * counter per (cut, consumer warpgroup), zero between launches (the part counting in second
 * clears it), then the partial results, a slot per (part, warpgroup) of GLLM_CUDA_HP_PART_FLOATS
 * floats for each of its 128 threads: O's D / 2 accumulators, its rows' maxima and sums. */
#define GLLM_CUDA_HP_PART_FLOATS(D) ((D) / 2 + 4)
#define GLLM_CUDA_HP_SPLIT_COUNTS(D, grid) ((int64_t)(grid) * (GLLM_CUDA_HP_ROWS(D) / 64))
#define GLLM_CUDA_HP_SPLIT_BYTES(D, grid)                                                     \
    (GLLM_CUDA_HP_SPLIT_COUNTS(D, grid) * 4 + 256 +                                          \
     2 * GLLM_CUDA_HP_SPLIT_COUNTS(D, grid) * 128 * GLLM_CUDA_HP_PART_FLOATS(D) * 4)
/* The partial results' offset in the workspace (16-byte aligned past the counters). */
#define GLLM_CUDA_HP_SPLIT_PARTS_AT(D, grid)                                                  \
    ((GLLM_CUDA_HP_SPLIT_COUNTS(D, grid) * 4 + 255) / 256 * 256)

/* The first row of m-tile m (rows per tile: rows), below 0 for a causal head's first. */
GLLM_CUDA_HP_FN int32_t gllm_cuda_hp_row0(const gllm_cuda_hp_sched *s, int32_t rows, int32_t m)
{
    return m * rows - s->m_pad;
}

/* Unit u: its head in *bh, its m-tiles in m[0] (and m[1]); returns how many (1 or 2). */
GLLM_CUDA_HP_FN int32_t gllm_cuda_hp_unit(const gllm_cuda_hp_sched *s, int32_t causal, int32_t u,
                                          int32_t *bh, int32_t m[2])
{
    const int32_t head = (int32_t)gllm_cuda_fastdiv_div(s->stride_div, (uint32_t)u);
    const int32_t q = u - head * s->stride;
    *bh = head;
    if (q == s->per_head) {                      /* paired, M odd: the head's middle tile */
        m[0] = m[1] = s->m_blocks / 2;
        return 1;
    }
    m[0] = causal ? s->m_blocks - 1 - q : q;
    m[1] = q;
    return s->pair ? 2 : 1;
}

/* The unit block x of s->grid blocks takes in round r, or -1 when it has none (then
 * none in any later round): round r is units [r * grid, (r + 1) * grid), so the units in
 * flight stay neighbours (the same heads, sharing K/V in L2), and block x takes the
 * ((x + r) mod grid)-th of them. A plain stride (block x taking units x, x + grid, ...) gives
 * block x the m-tile (x + r * grid) mod M of a head in every round, the same one whenever grid
 * is a multiple of M (132 SMs and M = 3, 4 or 6): then the blocks holding the last m-tile,
 * lighter where Sq leaves it part-filled (D = 64: a 64-row tail of 192 at S = 1024, one
 * consumer warpgroup of three working), kept it every round while the others kept full ones
 * (simulated, the busiest block against the mean: B8 H16 S1024 D64 1.11 -> 1.03, B32 H32
 * S512 D64 1.10 -> 1.03). Rotating moves every block through the m-tiles. */
GLLM_CUDA_HP_FN int32_t gllm_cuda_hp_round_unit(const gllm_cuda_hp_sched *s, int32_t r, int32_t x)
{
    const uint32_t v = (uint32_t)(x + r), q = gllm_cuda_fastdiv_div(s->grid_div, v);
    const int64_t u = (int64_t)r * s->grid + (int64_t)(v - q * (uint32_t)s->grid);
    return u < s->whole_units ? (int32_t)u : -1;
}

/* Blocks to launch for a persistent Hopper kernel (dense or paged): one per SM, fewer when
 * there are fewer units of work (at least 1). */
GLLM_CUDA_HP_FN int64_t gllm_cuda_persistent_grid(int64_t units, int64_t sm_count)
{
    const int64_t g = units < sm_count ? units : sm_count;
    return g > 0 ? g : 1;
}

/* The dense kernels' blocks: gllm_cuda_persistent_grid over their tiles. */
GLLM_CUDA_HP_FN int64_t gllm_cuda_hp_grid(int64_t Sq, int64_t D, int64_t heads, int64_t sm_count)
{
    return gllm_cuda_persistent_grid((Sq + GLLM_CUDA_HP_ROWS(D) - 1) / GLLM_CUDA_HP_ROWS(D) * heads,
                                     sm_count);
}

/* The dense kernels' blocks as gllmd launches them: gllm_cuda_hp_grid's, but at D = 128 without
 * a causal mask, whose units all cost the same key tiles (schedule with split_keys as
 * gllm_cuda_hp_schedule takes it), where the schedule on those blocks keeps every unit whole
 * and leaves its last round part-filled, as few blocks as the same number of rounds needs
 * (2048 units on 132 SMs: 128 blocks, 16 rounds either way). The idle blocks are then 4
 * through every round rather than 64 through the last, and the rest run faster for it (they
 * contend): H200, -0.5 to -0.9% at S512-S2k with 16k tokens, -3.5% with 444 units on 111
 * blocks, level with 1024 or 1536. At D = 64 (light m-tiles, which the rounds' rotation over
 * 128 blocks brings back to the same blocks) the same cost 6-7%, and causal pairs gained
 * nothing, so it is kept to D = 128 not causal. */
GLLM_CUDA_HP_FN int64_t gllm_cuda_hp_grid_even(int64_t Sq, int64_t D, int64_t heads, int causal,
                                               int64_t sm_count, int32_t split_keys)
{
    const int64_t grid = gllm_cuda_hp_grid(Sq, D, heads, sm_count);
    if (D != 128 || causal)
        return grid;
    const int64_t units = (Sq + GLLM_CUDA_HP_ROWS(128) - 1) / GLLM_CUDA_HP_ROWS(128) * heads;
    if (units <= grid || units % grid == 0 || units > INT32_MAX)
        return grid;
    const gllm_cuda_hp_sched s = gllm_cuda_hp_schedule((int32_t)Sq, GLLM_CUDA_HP_ROWS(128),
                                                      (int32_t)heads, 0, (int32_t)grid, split_keys);
    if (s.whole_units < s.units)
        return grid;                                /* split: its last rounds are even already */
    const int64_t rounds = (units + grid - 1) / grid, even = (units + rounds - 1) / rounds;
    const gllm_cuda_hp_sched e = gllm_cuda_hp_schedule((int32_t)Sq, GLLM_CUDA_HP_ROWS(128),
                                                      (int32_t)heads, 0, (int32_t)even, split_keys);
    return e.whole_units < e.units ? grid : even;
}

/* The unit block x of a grid takes in round r, or -1 when it has none (then none in any later
 * round). Rounds go through the units grid at a time in the plan's order (heaviest items
 * first, heads fastest, so that the units in flight share K/V in L2), alternating direction:
 * block x takes the x-th unit of an even round and the x-th from the end of an odd one, since
 * the weights fall from round to round and a fixed direction would give the first blocks the
 * heaviest unit of every round. */
GLLM_CUDA_HP_FN int32_t gllm_cuda_pp_unit(int32_t r, int32_t x, int32_t grid, int32_t units)
{
    const int64_t u = (int64_t)r * grid + (r & 1 ? grid - 1 - x : x);
    return u < units ? (int32_t)u : -1;
}

#endif
