// Hopper prefill for gllmd's CUDA backend: D = 64 and 128, causal or not, wgmma (sm_90a only).
//
// The Ampere-style kernel (attention_fwd.cu) feeds the tensor cores through mma.sync from
// registers, and at D = 128 its 255 registers leave the tensor pipe idle most cycles. Here
// wgmma reads Q and K (for S = Q K^T) and V (for O += P V) from shared memory, so a
// warpgroup's registers hold only its scores, its output and P.
//
// A block (persistent since v20: one per SM, working through tiles of query rows) is
// consumer warpgroups of 64 query rows each (two at D = 128, three at D = 64)
// and a producer warpgroup that loads K and V tiles of 128 keys (wgmma's 128-byte swizzle)
// into three stages, each guarded by a pair of mbarriers (full: the tile is in; empty:
// every consumer is done with it). The producer loads with TMA where the daemon could
// encode tensor maps of Q, K and V (gllm_attn_fwd_hopper_tma_*), with cp.async otherwise
// (gllm_attn_fwd_hopper_*, the same kernel otherwise). Nothing else ties the consumers together,
// so while one does its softmax another's wgmma has the tensor cores. With a barrier across
// all threads every tile instead (v8) both consumers did their softmax at the same moment:
// 350 against 438 TFLOP/s. At D = 64 a tile has half the GEMM work and the same softmax,
// so two consumers could not cover each other (v11: 244 TFLOP/s); a third one can.
//
// Registers (v14): the block starts with the whole register file split evenly (168 per
// thread at D = 128, 128 at D = 64); the producer, which only computes addresses, hands
// all but 24 back with setmaxnreg and the consumers take them (240 at D = 128, 160 at
// D = 64). Alone this moves little (the v13 consumers fit in 166 and 125); it is what
// the pipelining below needs. Since v20 the producer keeps 32: its tile loop's state
// spilled the cp.async producer at 24 (8-20 bytes); the consumers get 232 at D = 128
// (they need at most 193) and still 160 at D = 64.
//
// Pipelining inside a warpgroup (v14 at D = 128, v14b at D = 64; FA3 section 3.2): tile
// j's S = Q K^T is issued, then tile j - 1's O += P V, and tile j's softmax runs while
// P V is still on the tensor cores; P is made from tile j's scores only after P V of
// j - 1 has landed. What is live across that softmax is O (64 registers at D = 128), P
// of j - 1 (32, still read by the wgmma) and S of j (64), not two float score tiles: at
// D = 128 the consumer needs 186 registers (193 causal) when ptxas is not capped, so it
// fits in 240 without spilling, and ptxas reports no serialised wgmma (its C7514 note,
// which it does print when a score register is read before its wait). The earlier
// attempt (docs/performance.md) kept two score tiles in 168 registers and spilled.
// Expected: FA3's ablation gives +14% for this step (582 -> 661 TFLOP/s with its
// ping-pong scheduling in place); here the two consumers' drift already hides part of
// each softmax under the other's GEMMs, so +8 to +15% at D = 128 (479 -> about 520-550
// TFLOP/s, 0.81-0.86x cuDNN), causal alike. D = 64 (v14b) is pipelined the same way on
// 160 registers: it needs 156 (163 causal) uncapped and fits 160 without spilling. Its
// tiles have half the GEMM work and the same softmax, so hiding softmax matters more
// there, but three consumers already overlap each other: +0 to +10% (B8 H16 S1024 D64
// f16: 286 -> up to about 315 TFLOP/s).
// Measured (H100, two runs each, kernel against kernel): v14 lost at D = 128 on every
// shape, 474/478 -> 463/465 (B4 H32 S2048 f16), 369/368 -> 363/364 (causal), 446/440 ->
// 428/427 (B2 H32 S4096 bf16 causal), and was level at D = 64, 289/282 -> 291/295. So
// Hp::PIPELINE is on at D = 64 only (v14c): at D = 128 the two consumers' drift already puts
// one's softmax under the other's GEMMs, and FA3's gain from this step comes with its
// ping-pong scheduling, which we do not have; what pipelining adds here (a second wgmma
// group in flight per warpgroup, the deferred rescale, 186 live registers) costs more than
// it hides. Measured again with the TMA producer (v16, H100, two runs): on at D = 128 too,
// non-causal 521/523 -> 555/556 TFLOP/s, but causal 412/408 -> 392/393 and B2 H32 S4096
// bf16 causal 491/489 -> 470/467 (its masked diagonal tiles keep the pipeline short). So
// the pipelined loop ran at D = 64 and for non-causal D = 128, until ping-pong (v18,
// below) made it pay for causal D = 128 as well.
//
// TMA producer (v15): one thread of the producer warpgroup issues the copies, 2 x D / 64
// boxes per tile (64 columns by 128 keys, K and V) plus D / 64 for Q with tile 0, and
// announces each stage's bytes on its full barrier (arrive.expect_tx); TMA zero-fills the
// rows past the tensor's end, writes through the async proxy wgmma reads (no fence) and
// swizzles as hp_offset lays tiles out (64-column blocks, 1024-byte-aligned stages). The
// rest of the warpgroup only hands its registers to the consumers and exits. With cp.async
// the producer warp of each SM sub-partition issued, per tile, 32 16-byte copies per lane
// (D = 128) with their address arithmetic, a wait and a fence, next to the consumers'
// softmax, and its copies went through the LSU pipe. Expected: D = 128 +3 to +8% on v13
// (479 -> about 495-515 TFLOP/s non-causal, 372 -> 385-400 causal, 446 -> 460-480 bf16
// causal S4096); D = 64, where three softmax-bound consumer warps share each scheduler
// with the producer warp, +4 to +10% (B8 H16 S1024 f16: 293 -> about 305-320). If TMA moves
// less than 2%, the producer's issue slots were not what held the consumers back, and the
// next step is ping-pong scheduling of the consumers (named barriers), not the producer.
//
// Ping-pong scheduling (v17, Hp::PINGPONG, D = 128 only; FA3 section 3.1): the two
// consumers take turns at the tensor cores on two named barriers (bar.sync / bar.arrive, ids
// 1 and 2, 256 threads), wg 0, wg 1, wg 0, ..., a turn being the wgmma issues that precede
// a softmax (Q K^T of tile j and P V of tile j - 1). So one warpgroup's softmax runs while
// the other's GEMMs run, by construction rather than by drift: in v16 nothing kept the two
// from falling into step, and when they did, both softmaxes left the tensor cores idle at
// once. A warpgroup with fewer tiles (causal: the lower 64 rows may have one tile fewer;
// rows past Sq: none) keeps taking empty turns (sync, arrive) up to the block's count, so
// the other never waits on a partner that has finished. Expected: FA3's ablation puts
// warp specialisation plus ping-pong at about +10% at D = 128 (570 -> 661 TFLOP/s with
// its pipelining); we have the specialisation and part of the overlap already (the drift),
// so +3 to +10%: B4 H32 S2048 D128 f16 546-550 -> about 565-600 TFLOP/s, causal 407-409
// -> 420-450 (the one-tile loop gains more: its softmax was exposed inside a warpgroup),
// B2 H32 S4096 bf16 causal 491 -> 505-540. D = 64 is untouched (three consumers, no
// ping-pong). If it moves less than 2% the drift was already doing the scheduling's work;
// if it loses, the turns' waits (a warpgroup idles until its partner has issued) cost more
// than the order gains, likely on short causal blocks where the turns are mostly empty.
// Measured (H100, two runs, against v16 in the same call): non-causal 548/551 -> 553/553,
// causal 404/403 -> 428/430, B2 H32 S4096 bf16 causal 487/485 -> 514/514, D = 64 level.
// With ping-pong the pipelined loop pays for causal D = 128 too (v18, PIPELINE on
// everywhere; against v16 on another H100): causal 409/409 -> 436/435, S4096 bf16 causal
// 496/490 -> 530/527, non-causal 551/555 -> 560/557, D = 64 level.
//
// Descriptors (v18c): an ncu profile of v18 (H100, B4 H32 S2048 D128 f16: tensor pipe
// active 62.6% of cycles, 0.37 instructions issued per cycle per scheduler) put the largest
// share of the consumers' stall samples on "wait" (fixed-latency dependencies, 32%), and
// about 23% of their samples on shifts, masks and register-to-uniform moves: each wgmma's
// two descriptors were built from a shared address (desc_*_major) right before it, about ten
// dependent instructions per wgmma, 16 wgmmas per tile, in every warp and inside the
// ping-pong turn. Now each warpgroup builds its Q descriptor and stage 0's K and V ones once
// and adds a constant per stage and k-step (desc_add), and its warpgroup index is broadcast
// from lane 0 so that ptxas keeps the descriptors in uniform registers: 2888 -> 2520 SASS
// instructions in the D = 128 kernel, 142 -> 7 R2UR. Expected: +5 to +15% on every shape
// (the issue phase of a turn shortens; the softmax is untouched). Measured (H100, two runs
// each against v18 in the same call): 552/553 -> 600/602 TFLOP/s, causal 435/432 ->
// 466/470, B2 H32 S4096 bf16 causal 527/525 -> 581/581, D = 64 309/302 -> 339/339: +8 to
// +11%. A tree for the row maxima and four partial row sums (v18b, measured alone before
// this) lost 25-35% on every shape, for reasons not found; not kept.
//
// Persistent blocks (v20): a block per SM (fewer when there are fewer tiles), each working
// through a sequence of tiles (m-tile, head), instead of a block per tile. Every block of the
// non-persistent kernel paid a prologue (barrier init, then Q and the first K/V tile from L2
// or HBM, 1-2 us before its first wgmma) and an epilogue (the O stores) with the tensor cores
// of its SM idle, 5-10% of a 16-key-tile block (about 54k cycles at B4 H32 S2048 D128) and
// 15-25% of a 4-key-tile one (S = 512). Here the producer runs on across tiles: the next
// tile's first K/V tile goes out as soon as a stage is free, while the consumers finish the
// current one, and its Q once every consumer has completed its last Q K^T of the current tile
// (q_empty; a second Q buffer, possible since v21, measured level), so Q lands during the last
// softmax, P V and the O stores; TMA prefetches it into
// L2 when the producer starts the tile's loads, one to three key tiles before that wait ends,
// so the copy after it is a trip to L2 only. Stages and barrier phases run on a block-wide
// load counter; the ping-pong turns run on across tiles. The schedule (gllm_cuda_hp_schedule,
// attention_params.h) is static, block x taking units x, x + grid, ...: non-causal tiles are all
// the same work (all but a head's part-filled last m-tile, which v23 found the stride kept on the
// same blocks; its rounds are rotated since), so a static stride is as even as the hardware's block
// scheduler (the same rounds), with the heads in order so that the tiles in flight share K/V in L2
// (132 blocks: about 8 heads at S = 2048). Causal tiles differ up to M-fold (M m-tiles per head),
// and a stride over them in a fixed order leaves some blocks with the heavy ones (simulated, heads
// in order: up to 1.7x the mean block); pairing tile M - 1 - q with tile q makes every unit
// about M + 1 key tiles, so the stride balances to within one unit. Simulated in key tiles,
// per-tile costs left out, the busiest block against the mean: causal B4 H32 S2048, B2 H32
// S4096 and B32 H16 S512 D128 1.03 (the non-persistent grid in the hardware's dynamic order:
// 1.06-1.07), B8 H16 S1024 D64 1.06 (1.16); but B1 H32 S8192 D64 1.16 (1.09) and B1 H32 S16k
// D128 1.03 (1.01), where a block gets only 5-8 units and rounding to whole units costs more
// than the pairing saves. What a static schedule cannot do is adapt: blocks that start late
// (another stream's kernel holding SMs) or run slow finish late; a dynamic one needs an atomic
// counter reset between jobs, the next step if long causal sequences lose.
// Expected (H100, against v18c; the profile above was of v18, and v18c's shorter blocks make
// the fixed cost a larger share): B4 H32 S2048 D128 f16 +3 to +8% (600 -> 620-650 TFLOP/s),
// causal +5 to +12% (the prologue and the balance: 468 -> 490-525), B2 H32 S4096 bf16 causal
// +3 to +8% (581 -> 600-625); short sequences most: B32 H16 S512 D128 +10 to +25%, causal
// more; D = 64 (B8 H16 S1024) +3 to +10%; long single sequences (S 8k-16k, causal) level or up
// to 5% lower (the rounding above). What would say it did not work: less than 2% at S2048
// non-causal and at S512 (then the prologue and epilogue cost less than the profile suggests,
// and the time goes elsewhere); a loss on causal shapes only (the static pairing against the
// hardware's dynamic order: try the atomic counter); a loss everywhere (the wait for Q at each
// tile's start is exposed: ncu would show the tensor pipe idle at tile boundaries; at D = 64
// there is room for a second Q buffer).
// Measured (H100, against v18c in the same call, two runs): 604/604 -> 634/633 TFLOP/s,
// causal 473/473 -> 521/523, B2 H32 S4096 bf16 causal 588/584 -> 631/632, B8 H16 S1024 D64
// 333/337 -> 351/348; the FA3-style sweep (16k tokens), D = 128: S512 371 -> 438 (+18%),
// causal 226 -> 262, S1024 +12-15%, S2048 +4% / +11% causal, S8k-16k level. D = 64 gained
// at S512 (+15%, causal +24%) and lost from S4096 on: 537 -> 487, 584 -> 531 at S16k
// (-9%), causal 560 -> 488 (-13%). Launched with a block per tile (the v20 code without
// persistence, grid = tiles) D = 64 lost the same at long S, so it is the v20 code at D = 64,
// not the schedule; its inner loop has the same instruction mix as v18c's (649 SASS
// instructions, 12 wgmma). Cause not found (docs/performance.md).
// Five stages at D = 64 (v20b): an ncu profile of B1 H32 S16k D64 put v20's loss on the
// consumers' wait for full stages inside the key loop (16x v18c's samples there) while the
// producer waited on empty ones, so K and V landed late; D = 64 has the shared memory for more
// stages (Q 24 KiB + 5 x 32 KiB), D = 128 does not. Expected: +2-8% at D = 64, more at long S.
// Measured (H100, two calls, against v20 in each): +2-4% on every D = 64 sweep shape (S16k
// 530 -> 539, causal 495 -> 511, S4096 490 -> 508, S512 344 -> 351), D = 128 unchanged. The
// rest of v20's D = 64 loss remains.
// The consumers' walk over a tile's keys was key_loop (hopper_common.cuh; key_first and key_rest
// since v25), shared with the Hopper paged prefill since v20c; Hp::PIPELINE and v13's
// one-tile-at-a-time loop, kept only to measure against, went with it. Same instruction count in
// both D = 128 and D = 64 dense kernels; measured level (H100, same call: 632/635 -> 632/632, 522
// -> 525/521, 631/627 -> 625/628, 350/355 -> 356/365; 38 of 38 float64 cases, paged 32 of 32).
// The epilogue (v20d). Two probes first, each a build that skipped one thing (H100, same
// call, S512-2048 of the sweep): a producer that did not wait for q_empty before loading the
// next Q (results wrong, timing the upper bound of hiding Q's load) was level everywhere; an
// epilogue that stored no O ran D = 128 S512 429 -> 530 TFLOP/s (+24%), causal 267 -> 349,
// S1k +13%, S2k +6%, D = 64 S512 +7%. So the end of a tile waits on the O stores, not on Q.
// Each lane stored 4 bytes per 8-column block, a quad half a 32-byte sector per instruction;
// now neighbours swap one block of each pair so each lane stores 8 bytes and a quad a whole
// sector (store_o_row, hopper_common.cuh; the paged prefill's epilogue too). Expected: part of
// the probe's gain, +5-15% at S512 D128, +2-6% at S1-2k, level from 8k. Measured (H100, two
// rounds, against v20c in the same call): D = 128 f16 S512 429/440 -> 463/464, S1k 556/550 ->
// 576/577, S2k 632/631 -> 649/647, S4k 678/677 -> 686/687; bf16 S512 442/439 -> 477/476;
// causal S512 +5-7%, S1k +4-5%, S2k +3-5%; GQA S2048 666/668 -> 685/685. D = 64: S512 +1%,
// S4k -2%, so D = 64 keeps its 4-byte stores. Then a second round of shuffles (v20e) so that
// each lane stores a whole 8-column block (16 bytes, the quad 64 contiguous bytes). Expected:
// +1-4% at S512-1k, level beyond. Measured (two rounds against v20d, same call): f16 S512
// 463/461 -> 478/470, bf16 467/468 -> 477/483, S1k +1-2.5%, S2k-4k level, causal S512
// -1% to +3%. The same at D = 64, against its 4-byte stores (two rounds, same call): S512
// 351/352 -> 357/355, S1k 411/409 -> 420/419, bf16 S2k 482/488 -> 494/495, S4k 503/501 ->
// 508/510, causal S512 +2-3%, S8k-16k level; so both head dims store 16-byte blocks. The
// rest of the probe's gain would need the stores off the consumers' path
// (shared memory and a TMA store), for which D = 128 has no shared memory left (Q 32 KiB + 3
// stages of 64 KiB).
// The consumers' setup (their place, the descriptors, the softmax's scale) is consumer_setup
// in hopper_common.cuh since v20f, shared with the paged prefill (which had repeated it): the
// same PTX instruction mix in every dense kernel; the GPU check level (H100: 659/545/643/367
// TFLOP/s on the bench shapes, 38 of 38 and 32 of 32 float64).
//
// K and V on barriers of their own (v21). A probe first: v20's D = 128 on two stages (the
// third's 64 KiB would hold O for a TMA store) lost 16-25% at S512-2k (H100, same call: S2k
// 662 -> 484 TFLOP/s): a stage, K and V together, came free only once both warpgroups' P V of
// it had landed, a turn after their Q K^T had finished with its K, so with two stages K had
// one turn of lead. Now each stage has full and empty barriers for K and for V (kv_bar); a
// consumer releases K of tile j once its Q K^T has completed and V once its P V has, and the
// producer issues tile j's K, then tile j - 1's V, so K comes free, and goes out again, a
// turn earlier. Expected: two stages level with v20's three, three a little ahead. Measured
// (same call, S512-2k of the sweep): split on three stages within -2/+5% of v20 (noise),
// split on two stages level with v20's three (S512 462 against 472, S2k 641 against 648,
// causal S512 293 against 277). D = 128 therefore runs on two stages and its third stage's
// shared memory holds O: each warpgroup writes its 64 x 128 tile with stmatrix in the
// 128-byte swizzle (write_o_tile), fences, and one thread sends it out as two TMA boxes in a
// bulk group (o_map, 64-row boxes; rows past Sq are outside the map and not written), waiting
// only before the next tile writes the buffer again (cp.async.bulk.wait_group.read). This
// takes the O stores off the consumers' path, which v20d's probe priced at up to 24% at S512.
// Expected: +5-12% at D = 128 S512, +2-6% at S1k, level from S2k. Measured against v20e in the
// same call (FA3's sweep, 56/56 float64): S512 472 -> 485, bf16 479 -> 498, causal 284 ->
// 308 and 287 -> 312 (+3-9%); S1k +1%, causal +4%; S2k level; S4k-16k -1 to -2% (the third
// stage's lead at long S). At D = 64 the same TMA store measured level to -3%, so D = 64
// keeps five stages and its register stores, and gains from the split alone: S8k-16k +5-9%
// (540 -> 580, 538 -> 588, causal 500 -> 532), which wins back most of v20's unexplained
// long-S loss there (the consumers waited on full stages: K now lands a turn earlier).
// v47: D = 64 on four stages, not five: loads issued ahead of need cost L2 requests or, evicted
// before use, DRAM bytes (v43-v45); the harness had four stages 0.4-1.4% faster on every D = 64
// shape from S512 to S16k, causal or not (bench/results/h100-prefill-load-order.json).
// The cp.async producer takes the split too: it announces each stage after the next K has
// gone out and before it waits for the next V's slot (with two stages that slot comes free
// only after the consumers have the announced K: the first version, announcing after V,
// deadlocked on gpu_compare's head-stride-0 case, and the watchdog reset the device).
// Tried on v21 and dropped (bench/results/h100-prefill-v21.json): a second Q buffer (shared
// memory allowed it now): level everywhere, so the wait for Q is not exposed; D = 64 on two
// consumer warpgroups of 64 rows (no idle warpgroup in a 512-row head's last tile): -7 to
// -15%; carrying a tile's last P V into the next tile's first turn, so that the tile
// boundary costs one turn instead of two half turns (the fitted per-tile cost is about 1.9
// key tiles' worth at D = 128): right results, -25 to -30% on every shape, long S too, with no
// spills and, after a fix, no serialised wgmma; cause not found.
//
// Rotated rounds (v23). A profile of the D = 64 bench shape (B8 H16 S1024, ncu's SASS source
// page, H100) put 63% of the warps' samples in the key loop's body, 28% in the once-a-tile code
// around it (the wait for a tile's first K and Q, its first Q K^T and softmax, the last P V, the
// epilogue) and 5% on the idle warpgroups of the heads' last m-tiles waiting out the stages
// (1024 = 5 x 192 + 64: one warpgroup of three works there). With 132 blocks and 6 m-tiles a
// head, the static stride gave block x the m-tile x mod 6 in every round, so 22 blocks held only
// those light tiles and 110 only full ones. Now round r's units (the same neighbours as before)
// go to the blocks rotated by r (gllm_cuda_hp_round_unit). Simulated, the busiest block against
// the mean (a tile with one working warpgroup taken as half a full one's time): B8 H16 S1024 D64
// and B32 H32 S512 D64 1.10-1.11 -> 1.03, S2k-4k D64 1.05 -> 1.03, D = 128 and causal unchanged
// (no part-filled tiles; causal units are paired or in weight order already). Expected: D = 64
// non-causal S512-1k +5-8%, S2k-4k +1-3%, the rest level. Measured (H100, FA3's sweep at f16,
// two rounds each against 4abe955 in the same call, 16/16 float64 each): D = 64 non-causal S512
// 348/345 -> 370/371 TFLOP/s (0.86-0.87 -> 0.92-0.93x cuDNN), S1k 410/412 -> 439/434 (0.92 ->
// 0.97-0.98), S2k 482/479 -> 501/497, S4k 510/512 -> 531/530 (+4%); causal S1k 286/281 ->
// 322/316 (+13%, 0.82 -> 0.91-0.93: its pairs of m-tiles, (5, 0), (4, 1), (3, 2), fell into the
// same trap, the light (5, 0) always on the same blocks), S4k +4%, S512 and S2k level; D = 128
// level (within 1%).
//
// The tile boundary (v25). A timeline of the kernel (kernels/tools/hp_trace.cu, the HP_TRACE
// probes) at D = 128 S512 put about 5800 cycles between a warpgroup's last P V and its next
// tile's second turn: the epilogue about 1200, the next tile's set-up about 700 (integer
// divisions in the tile walk), its first softmax about 1450, with the tensor cores idle about
// 2200 cycles at each boundary. Now the walk divides by launch constants (gllm_cuda_fastdiv),
// the epilogue's reciprocal is the approximate one, and at D = 128 a tile's first Q K^T goes
// out before the previous tile's epilogue, which runs under it (key_first; O written to
// shared memory there, sent after the wait, see put_o_tile). Expected +10-20% at S512 from
// the early Q K^T; it moved D = 128 under 1% (the epilogue and the first softmax stay in
// series on each warpgroup's path), the divisions and the reciprocal more. Measured against
// 62a056f in one call, H100 (H200 alike): D = 64 S512 369 -> 384 TFLOP/s, S1k 439 -> 455
// (0.99 -> 1.03x cuDNN), S2k-4k +3%; D = 128 S512 480 -> 495, S1k 584 -> 599, causal S1k
// 431 -> 452; long S level. The ptxas pitfalls met on the way are in key_cross's comment
// (v27 made a tile's final turn and the next tile's turn 0 one turn).
//
// Q as register fragments (A from registers) gave right scores on the first key tile and
// wrong ones from the second on; A from shared memory is right and needs 12 fewer
// registers.
//
// Built for every target of the fatbin, but its body exists only in the sm_90a image: the
// daemon launches it only on compute capability 9.0 with that image loaded.
//
// The building blocks (Hp, the swizzled layout, wgmma, mbarriers, TMA, the per-tile steps) live
// in hopper_common.cuh, shared with the paged prefill (paged_prefill_hopper.cu).
#include "hopper_consumer.cuh"

namespace {

#ifdef GLLM_HAVE_WGMMA
// The producer warpgroup's copy of rows [row0, row0 + ROWS) of one head into a swizzled
// [ROWS][D] tile; rows >= nrows or below 0 (a causal head's first m-tile, m_pad) are zeros.
// Thread i copies 16-byte column i % (D / 8) of rows i / (D / 8) + (128 / (D / 8)) k: one
// swizzle offset for all its rows.
template <int D, int ROWS, typename T>
__device__ __forceinline__ void copy_tile(uint32_t tile, const T *base, int64_t row_stride, int row0,
                                          int nrows, int i)
{
    constexpr int CHUNKS = D / 8, STEP = 128 / CHUNKS;   // 16-byte columns, rows per pass
    const int r0 = i / CHUNKS, c = i % CHUNKS;
    const T *src = base + (int64_t)(row0 + r0) * row_stride + c * 8;
    const int64_t step = (int64_t)STEP * row_stride;
    const uint32_t soff = tile + hp_offset<ROWS>(r0, c * 8);
    // One pointer walked down the rows, hidden from the optimiser at each step: the
    // producer runs on Hp::PRODUCER registers, and the per-row offsets (it * step) that
    // the compiler would otherwise hoist out of the tile loop, 16 64-bit values per copy,
    // spill there.
    int rows_left = nrows - (row0 + r0);
#pragma unroll
    for (int it = 0; it < ROWS / STEP; it++) {
        const bool ok = rows_left > 0 && rows_left <= nrows;       // 0 <= row < nrows
        cp_async16(soff + it * STEP * 128, ok ? src : base, ok ? 16 : 0);
        src += step;
        asm volatile("" : "+l"(src));
        rows_left -= STEP;
    }
}

// The block's tiles in schedule order (see attention_params.h), one at a time: next() gives
// the head and m-tile of the next one, false when there is none; done() says whether the one
// just given was the block's last. Producer and consumers walk the same sequence: the whole
// units round by round, then (PARTS, a second walk) the block's parts of the split units,
// key tiles [k0, k0 + nk) of the tile given, its partial result in slot part.
template <bool CAUSAL, bool PARTS> struct TileWalk {
    const gllm_cuda_hp_sched &sc;
    const gllm_cuda_hp_split *sp;                    // PARTS: the launch's split units
    int r = 0, k = 0;                                // the round, the tile of unit u to do next
    int u = PARTS ? -1 : gllm_cuda_hp_round_unit(&sc, 0, (int)blockIdx.x);
    // PARTS: the split units, the block's split key tiles still to do, [a, e); the part given
    int a = PARTS ? gllm_cuda_hp_split_at(&sc, sp, (int)blockIdx.x) : 0;
    int e = PARTS ? gllm_cuda_hp_split_at(&sc, sp, (int)blockIdx.x + 1) : 0;
    int k0 = 0, nk = 0, part = -1;
    __device__ __forceinline__ bool next(int &bh, int &mb)
    {
        int m[2];
        if constexpr (PARTS) {
            if (a >= e)
                return false;
            const gllm_cuda_hp_piece pc =
                gllm_cuda_hp_split_piece(&sc, sp, (int)blockIdx.x, a, e);
            gllm_cuda_hp_unit(&sc, CAUSAL, pc.unit, &bh, m);
            mb = m[0];
            k0 = pc.k0, nk = pc.nk, part = pc.part;
            a += pc.nk;
            return true;
        }
        if (u < 0)
            return false;
        const int n = gllm_cuda_hp_unit(&sc, CAUSAL, u, &bh, m);
        mb = k == 0 ? m[0] : m[1];
        if (k == n - 1)
            u = gllm_cuda_hp_round_unit(&sc, ++r, (int)blockIdx.x), k = 0;
        else
            k++;
        return true;
    }
    __device__ __forceinline__ bool done() const { return PARTS ? a >= e : u < 0; }
    // Of the tile's n key tiles, those given (a part's; all of a whole one), from first().
    __device__ __forceinline__ int tiles_of(int n) const { return PARTS ? nk : n; }
    __device__ __forceinline__ int first() const { return PARTS ? k0 : 0; }
    __device__ __forceinline__ int slot() const { return PARTS ? part : -1; }
};

// f(bh, m_block, walk) for each of the block's tiles of walk TileWalk<CAUSAL, PARTS>,
// walk.done(): the walk's final one. One call site per walk, so the body is inlined: its
// arrays stay in registers.
template <bool CAUSAL, bool PARTS, typename F>
__device__ __forceinline__ void for_each_tile(const gllm_cuda_hp_sched &sc,
                                              const gllm_cuda_hp_split *sp, F &&f)
{
    TileWalk<CAUSAL, PARTS> walk{sc, sp};
    for (int bh, mb; walk.next(bh, mb);)
        f(bh, mb, walk);
}

// Key tiles that query rows [m0, m0 + ROWS) read: causal, those with a key <= the last row
// + shift (none when that is below 0).
template <bool CAUSAL, int ROWS>
__device__ __forceinline__ int key_tiles(int m0, int Skv, int shift)
{
    const int n_end = CAUSAL ? max(0, min(Skv, m0 + ROWS + shift)) : Skv;
    return (n_end + HP_KEYS - 1) / HP_KEYS;
}

template <bool B> struct Flag {
    static constexpr bool value = B;
};

// A split tile's part as consumer warpgroup wg holds it (o unscaled, row_max the reference
// maximum of each of the thread's two rows, row_sum the thread's share of their sums): into
// slot part of the workspace, then counted in on the cut's counter (part / 2). The part that
// counts in second reads the other's slot (part ^ 1), adds it to its own, clears the counter
// for the next launch and returns true: it writes the tile. The first returns false. As the
// paged decode's split (paged_attention.cu): every part writes, the last one merges, so no
// block ever waits for another. s_word: the warpgroup's shared word for the count's answer.
template <int D, int CONSUMERS>
__device__ __forceinline__ bool split_merge(const gllm_cuda_hp_params *hp, int part, int wg,
                                         float (&o)[D / 2], float (&row_max)[2],
                                         float (&row_sum)[2], uint32_t s_word)
{
    constexpr int V4 = GLLM_CUDA_HP_PART_FLOATS(D) / 4;       // float4s a thread
    const int i = threadIdx.x % 128;
    float4 *slot = reinterpret_cast<float4 *>(hp->split_parts) +
                   (int64_t)(part * CONSUMERS + wg) * V4 * 128 + i;
#pragma unroll
    for (int k = 0; k < D / 8; k++)
        __stcg(slot + k * 128, make_float4(o[4 * k], o[4 * k + 1], o[4 * k + 2], o[4 * k + 3]));
    __stcg(slot + (D / 8) * 128, make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]));
    __threadfence();
    wg_sync(wg);
    if (i == 0) {
        uint32_t *count = hp->split_counts + (part >> 1) * CONSUMERS + wg;
        const uint32_t second = atomicAdd(count, 1u) == 1u;
        if (second)
            *count = 0;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(s_word), "r"(second) : "memory");
    }
    wg_sync(wg);
    uint32_t second;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(second) : "r"(s_word) : "memory");
    if (!second)
        return false;
    __threadfence();
    // The sums are taken in slot order, the tile's first part (even slot) the fused one, so
    // they are the same whichever block counted in second: a * x + b * y left to the compiler
    // becomes one fused multiply-add whose rounding depends on which product is fused, and
    // with this block's part always first the result changed with the order the blocks
    // finished in (against deterministic = on's promise). __fmaf_rn and __fmul_rn pin the
    // rounding, so this block's part stays in its registers; only the other's is read.
    const float4 *other = reinterpret_cast<const float4 *>(hp->split_parts) +
                          (int64_t)((part ^ 1) * CONSUMERS + wg) * V4 * 128 + i;
    const bool mine_first = !(part & 1);
    auto merge = [mine_first](float mine, float f_mine, float theirs, float f_theirs) {
        return mine_first ? __fmaf_rn(mine, f_mine, __fmul_rn(theirs, f_theirs))
                          : __fmaf_rn(theirs, f_theirs, __fmul_rn(mine, f_mine));
    };
    const float4 ms = __ldcg(other + (D / 8) * 128);
    const float m_theirs[2] = {ms.x, ms.y}, l_theirs[2] = {ms.z, ms.w};
    float f_mine[2], f_theirs[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const float mx = fmaxf(row_max[hr], m_theirs[hr]);
        f_mine[hr] = row_max[hr] == -INFINITY ? 0.f : exp2f(row_max[hr] - mx);
        f_theirs[hr] = m_theirs[hr] == -INFINITY ? 0.f : exp2f(m_theirs[hr] - mx);
        row_sum[hr] = merge(row_sum[hr], f_mine[hr], l_theirs[hr], f_theirs[hr]);
        row_max[hr] = mx;
    }
#pragma unroll
    for (int k = 0; k < D / 8; k++) {
        const float4 b = __ldcg(other + k * 128);
        o[4 * k] = merge(o[4 * k], f_mine[0], b.x, f_theirs[0]);
        o[4 * k + 1] = merge(o[4 * k + 1], f_mine[0], b.y, f_theirs[0]);
        o[4 * k + 2] = merge(o[4 * k + 2], f_mine[1], b.z, f_theirs[1]);
        o[4 * k + 3] = merge(o[4 * k + 3], f_mine[1], b.w, f_theirs[1]);
    }
    return true;
}

// TMA: the producer loads through hp's tensor maps (hp->a is p); else with cp.async from p
// (hp is null).
template <typename T, bool CAUSAL, int D, bool TMA>
__device__ __forceinline__ void attention_fwd_hopper(const gllm_cuda_attn_params &p,
                                                     const gllm_cuda_hp_params *hp)
{
    using S = Hp<D>;
    // Units split by keys in the last rounds (gllm_cuda_hp_schedule) where the launch gave a
    // workspace: D = 128 not causal, the kernel the issue's 1.1x target is about (v34).
    constexpr bool SPLIT = TMA && !CAUSAL && D == 128;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    // Full K[s], full V[s]: stage s holds its K (V) tile (TMA: the elected producer thread
    // arrives and the bytes land; cp.async: the producer's 128 threads arrive); empty K[s],
    // empty V[s]: every consumer warpgroup is done with it (all their threads arrive), in
    // kv_bar's order; q_empty: every consumer thread has read the tile's Q for the last time
    // (its last Q K^T has completed), so the producer may load the next tile's.
    __shared__ __align__(8) uint64_t bars[4 * S::STAGES + 1];
    __shared__ uint32_t split_second[S::CONSUMERS];  // split_merge's answer to its warpgroup
    // Swizzle atoms must start on 1024-byte boundaries; the launch adds that much slack.
    const uint32_t s_q = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const uint32_t s_kv = s_q + S::ROWS * D * 2;     // stage s: K at s_kv + 2s tiles, V after it
    const uint32_t s_o = s_kv + S::STAGES * 2 * S::KV_TILE;    // O: 64 rows per warpgroup
    const uint32_t full0 = smem_addr(&bars[0]), empty0 = kv_bar<S::STAGES>(full0, 0, 2);
    const uint32_t q_empty = smem_addr(&bars[4 * S::STAGES]);

    const int warp = threadIdx.x / 32;
    const int Hq = (int)p.Hq, group = (int)(p.Hq / p.Hkv);
    const int Sq = (int)p.Sq, Skv = (int)p.Skv;
    const int shift = Skv - Sq;                      // causal: row r sees keys <= r + shift
    // The schedule, split as the launch's hp->split says (keys 0: no workspace, nothing split).
    const gllm_cuda_hp_sched sc = gllm_cuda_hp_schedule(Sq, S::ROWS, (int)(p.B * p.Hq), CAUSAL,
                                                        (int)gridDim.x, SPLIT ? hp->split.keys : 0);
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2 * S::STAGES; i++) {
            mbar_init(full0 + 8 * i, TMA ? 1 : 128);
            mbar_init(empty0 + 8 * i, S::CONSUMERS * 128);
        }
        mbar_init(q_empty, S::CONSUMERS * 128);
        if constexpr (TMA) {
            // The initialised barriers, visible to the async proxy that completes TMA's bytes.
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
            fence_proxy_async();
        }
    }
    __syncthreads();

    // Load g of the block (its K/V tiles counted across its work tiles) goes to stage
    // g % S::STAGES, in that stage's use g / S::STAGES: the full and empty barriers' phases
    // run on across tiles, and Q load n (the block's tiles with keys, counted) waits for
    // q_empty's phase n - 1. A tile with no keys loads nothing, not even Q, and nobody
    // arrives on q_empty for it.
    if (warp >= S::CONSUMERS * 4) {
        regs_dec<S::PRODUCER>();
        uint32_t ld = 0, nq = 0;                     // K/V tiles and Q tiles loaded
        if constexpr (TMA) {
            // Producer, TMA: one thread issues every copy; the rest of the warpgroup only
            // gave its registers back. V goes one load behind K (v21): load g's K as soon as
            // its K slot is free, then load g - 1's V, so K, which the consumers need a turn
            // before V and release a turn earlier, gets the lead. Q comes with a tile's first
            // K tile on its barrier, loaded after it and after the previous tile's last V:
            // those copies go out while the consumers still read the previous tile's Q. TMA
            // writes through the async proxy that wgmma reads, so no proxy fence.
            if (threadIdx.x != S::CONSUMERS * 128)
                return;
            // V_FIRST (v63, D = 128 without a causal mask): load g - 1's V before g's K. The
            // speculative walk (key_rest) holds K of a tile to its check, at the end of the
            // softmax, but gives V of the tile before back as soon as its P V has landed, so
            // there V's slot comes free first, and K, which goes out last, lands sooner after
            // the check than V did behind it.
            constexpr bool V_FIRST = D == 128 && !CAUSAL;
            constexpr int BLOCKS = D / GLLM_CUDA_HP_BOX_COLS;       // 64-column boxes per tile
            constexpr uint32_t Q_TILE = S::ROWS * D * 2;
            int v_row = -1, v_hk = 0, v_b = 0;       // the V tile owed (row -1: none), load v_ld
            uint32_t v_ld = 0;
            auto load_v = [&]() {
                if (v_row < 0)
                    return;
                const uint32_t st = v_ld % S::STAGES, bar = kv_bar<S::STAGES>(full0, st, 1);
                if (v_ld >= S::STAGES)
                    mbar_wait(kv_bar<S::STAGES>(empty0, st, 1), (v_ld / S::STAGES - 1) & 1);
                const uint32_t sv = s_kv + st * 2 * S::KV_TILE + S::KV_TILE;
                mbar_arrive_expect_tx(bar, S::KV_TILE);
#pragma unroll
                for (int c = 0; c < BLOCKS; c++)
                    tma_load_4d(sv + (uint32_t)c * HP_KEYS * 128, &hp->v_map, bar,
                                c * GLLM_CUDA_HP_BOX_COLS, v_row, v_hk, v_b);
                v_row = -1;
            };
            // The whole units, then (SPLIT) the block's parts of the split ones.
            auto produce = [&](int bh, int mb, const auto &walk) {
                const int b = bh / Hq, h = bh - b * Hq, hk = h / group;
                const int m0 = gllm_cuda_hp_row0(&sc, S::ROWS, mb);
                const int k0 = walk.first();
                const int n_tiles = walk.tiles_of(key_tiles<CAUSAL, S::ROWS>(m0, Skv, shift));
                // Q will wait for q_empty, near the end of the previous tile: until then it
                // comes into L2, so that the copy after the wait is not a trip to memory.
                if (nq > 0 && n_tiles > 0) {
#pragma unroll
                    for (int c = 0; c < BLOCKS; c++)
                        tma_prefetch_4d(&hp->q_map, c * GLLM_CUDA_HP_BOX_COLS, m0, h, b);
                }
                for (int j = 0; j < n_tiles; j++, ld++) {
                    const uint32_t st = ld % S::STAGES, bar = kv_bar<S::STAGES>(full0, st, 0);
                    if constexpr (V_FIRST)
                        load_v();
                    if (j == 0)
                        HP_TRACE(30, j);
                    if (ld >= S::STAGES)
                        mbar_wait(kv_bar<S::STAGES>(empty0, st, 0), (ld / S::STAGES - 1) & 1);
                    if (j == 0)
                        HP_TRACE(31, j);
                    const uint32_t sk = s_kv + st * 2 * S::KV_TILE;
                    mbar_arrive_expect_tx(bar, S::KV_TILE + (j == 0 ? Q_TILE : 0));
#pragma unroll
                    for (int c = 0; c < BLOCKS; c++)
                        tma_load_4d(sk + (uint32_t)c * HP_KEYS * 128, &hp->k_map, bar,
                                    c * GLLM_CUDA_HP_BOX_COLS, (k0 + j) * HP_KEYS, hk, b);
                    if constexpr (!V_FIRST)
                        load_v();
                    if (j == 0) {
                        if (nq > 0)
                            mbar_wait(q_empty, (nq - 1) & 1);
                        HP_TRACE(33, j);
#pragma unroll
                        for (int c = 0; c < BLOCKS; c++)
                            tma_load_4d(s_q + (uint32_t)c * S::ROWS * 128, &hp->q_map, bar,
                                        c * GLLM_CUDA_HP_BOX_COLS, m0, h, b);
                        nq++;
                    }
                    v_row = (k0 + j) * HP_KEYS, v_hk = hk, v_b = b, v_ld = ld;
                }
            };
            for_each_tile<CAUSAL, false>(sc, nullptr, produce);
            if constexpr (SPLIT) {
                if (sc.whole_units < sc.units)
                    for_each_tile<CAUSAL, true>(sc, &hp->split, produce);
            }
            load_v();
            return;
        } else {
            // Producer, cp.async: each K and V tile once its slot is free, then (a tile's
            // first) Q once q_empty allows, each its own commit group. A stage (K and V) is
            // announced when this lane's copies for it have landed (cp.async.wait_group) and
            // are fenced for wgmma's proxy, one load behind the newest, across tiles: after
            // the next K has gone out and before the wait for the next V's slot, which with
            // two stages is free only once the consumers have the announced K (their P V of
            // two loads back goes out with its Q K^T); so too the previous tile's last stage
            // is announced before the wait for q_empty, which its consumers need it for.
            const int i = threadIdx.x - S::CONSUMERS * 128;
            int pend = -1;                           // the stage loaded and not announced
            for_each_tile<CAUSAL, false>(sc, nullptr, [&](int bh, int mb, const auto &) {
                const int b = bh / Hq, h = bh - b * Hq, hk = h / group;
                const int m0 = gllm_cuda_hp_row0(&sc, S::ROWS, mb);
                const int n_tiles = key_tiles<CAUSAL, S::ROWS>(m0, Skv, shift);
                const T *K = reinterpret_cast<const T *>(p.k) + b * p.k_st[0] + hk * p.k_st[1];
                const T *V = reinterpret_cast<const T *>(p.v) + b * p.v_st[0] + hk * p.v_st[1];
                for (int j = 0; j < n_tiles; j++, ld++) {
                    const uint32_t st = ld % S::STAGES, phase = (ld / S::STAGES - 1) & 1;
                    const uint32_t sk = s_kv + st * 2 * S::KV_TILE;
                    if (ld >= S::STAGES)
                        mbar_wait(kv_bar<S::STAGES>(empty0, st, 0), phase);
                    copy_tile<D, HP_KEYS>(sk, K, p.k_st[2], j * HP_KEYS, Skv, i);
                    cp_async_commit();
                    if (pend >= 0) {
                        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
                        fence_proxy_async();
                        mbar_arrive(kv_bar<S::STAGES>(full0, pend, 0));
                        mbar_arrive(kv_bar<S::STAGES>(full0, pend, 1));
                    }
                    if (ld >= S::STAGES)
                        mbar_wait(kv_bar<S::STAGES>(empty0, st, 1), phase);
                    copy_tile<D, HP_KEYS>(sk + S::KV_TILE, V, p.v_st[2], j * HP_KEYS, Skv, i);
                    cp_async_commit();
                    pend = (int)st;
                    if (j == 0) {
                        if (nq > 0)
                            mbar_wait(q_empty, (nq - 1) & 1);
                        const T *Q = reinterpret_cast<const T *>(p.q) + b * p.q_st[0] +
                                     h * p.q_st[1];
                        copy_tile<D, S::ROWS>(s_q, Q, p.q_st[2], m0, Sq, i);
                        cp_async_commit();
                        nq++;
                    }
                }
            });
            if (pend >= 0) {
                cp_async_wait_all();
                fence_proxy_async();
                mbar_arrive(kv_bar<S::STAGES>(full0, pend, 0));
                mbar_arrive(kv_bar<S::STAGES>(full0, pend, 1));
            }
            return;
        }
    }

    // Consumers: warpgroup wg takes query rows [m0 + 64 wg, m0 + 64 wg + 64) of each tile.
    regs_inc<S::CONSUMER>();
    const Consumer c = consumer_setup<D, D == 64 || !CAUSAL>(p.scale, s_q, s_kv);
    const int wg = c.wg, wrow = c.wrow, g = c.g, t = c.t;
    const bool o_thread = threadIdx.x % 128 == 0;    // issues the warpgroup's O stores
    uint32_t base = 0;                               // K/V loads of the block's earlier tiles
    // Ping-pong (S::PINGPONG): each consumer takes n_tiles + 1 turns per tile, the block's
    // count, not its own n_mine, in the order wg 0 turn 0, wg 1 turn 0, wg 0 turn 1, ...,
    // continued from one tile to the next; turn t of a tile holds the wgmma issues that
    // come before S of key tile t is read (Q K^T of tile t and P V of tile t - 1, whichever
    // this warpgroup has), turn n_tiles the last P V, and a turn with nothing to issue (past
    // n_mine: fewer causal tiles, or rows past Sq; every turn of a tile with no keys) is only
    // its sync and arrive, so the partner never waits on a warpgroup that has finished.
    // PingPong (hopper_common.cuh): begin() waits until the partner has ended its previous turn
    // (for wg 0's first turn of the block, wg 1's one arrival when the turns are set up),
    // end() lets the partner start its turn. Per barrier, syncs and arrivals match one for one
    // (wg 1 skips the arrival after the block's last turn, which nobody waits for), so no phase
    // is left open at exit. The turns run on across tiles rather than restart: a restart would
    // let wg 0 arrive on barrier 2 for the next tile's turn 0 before wg 1 had synced on it for
    // this tile's last turn, two arrivals of the same warps in one phase.
    // The consumers' tiles in one or two phases, each a copy of the loop below: the whole
    // units, then (SPLIT, when the schedule splits) the block's parts of the split ones. Each
    // phase takes its ping-pong turns from 0, as at the kernel's start; the first ends with the
    // block-final turn, which leaves no barrier phase open, and both warpgroups meet at
    // walk_sync before the second (the restart above: without it the block could hang, and
    // v34 did once its softmax was slowed by a few percent). A second copy keeps the first one's
    // code v32's: with the parts in the one walk (v34's first form) every shape lost 2-3%, split
    // or not (the tile boundary is that sensitive, as v33 found).
    const gllm_cuda_fastdiv hq_div = gllm_cuda_fastdiv_of((uint32_t)Hq);
    auto consume = [&](auto parts) {
        constexpr bool PARTS = decltype(parts)::value;
        HP_TRACE(2, PARTS);
        // A tile as this warpgroup sees it. The key tiles it computes, [0, n_mine): none for rows
        // past the end (the last tile's spare warpgroups); causal, those with a key <= its last
        // row + shift. The rest, up to the tile's n_tiles, it only waits for and releases: the
        // other warpgroups still need the stage, and the empty barrier counts every consumer
        // thread. Each thread arrives on q_empty once per tile with keys: after its last Q K^T
        // has completed, or (n_mine = 0) once the first stage, and Q, are in: never before the
        // producer has loaded this tile's Q, so never within the phase of the previous one.
        struct Tile {
            int b, h, r_wg, n_tiles, n_mine;
            int k0, part;                                // PARTS: the part's first key tile, slot
            bool last;
        };
        TileWalk<CAUSAL, PARTS> tiles{sc, PARTS ? &hp->split : nullptr};
        auto next_tile = [&](Tile &x) {
            int bh, mb;
            if (!tiles.next(bh, mb))
                return false;
            x.b = (int)gllm_cuda_fastdiv_div(hq_div, (uint32_t)bh), x.h = bh - x.b * Hq;
            const int m0 = gllm_cuda_hp_row0(&sc, S::ROWS, mb);
            x.n_tiles = tiles.tiles_of(key_tiles<CAUSAL, S::ROWS>(m0, Skv, shift));
            x.k0 = tiles.first(), x.part = tiles.slot();
            x.r_wg = m0 + wg * 64;
            const int last_key = x.r_wg + 63 + shift;
            x.n_mine = x.r_wg >= Sq || x.r_wg < 0 ? 0           // rows past Sq, or before 0
                       : !CAUSAL    ? x.n_tiles
                       : last_key < 0 ? 0
                                      : min(x.n_tiles, last_key / HP_KEYS + 1);
            x.last = tiles.done();
            return true;
        };
        // At D = 64 the barriers' base is kept in a register: otherwise the compiler makes it
        // again from the CTA's id (S2R) at every key tile, just before the wait for K and V
        // that depends on it. 0.4-1.0% faster at D = 64 (v56); at D = 128, where it adds
        // spills outside the loop, 0.4% slower, so made as before there.
        uint32_t bars0 = full0;
        if constexpr (D == 64)
            asm volatile("mov.b32 %0, %0;" : "+r"(bars0));
        auto walk_of = [&](const Tile &x) {
            return key_walk(c, x.n_mine, x.n_tiles, bars0, base, Skv, x.r_wg, x.r_wg + wrow + g,
                            shift, PARTS ? x.k0 : 0);
        };
        // At D = 128 (S::CROSS) a tile's final turn and the next tile's turn 0 are one (v27,
        // key_cross): its last P V and the next tile's first Q K^T go out together, and the
        // epilogue runs while the Q K^T is on the tensor cores (v25 took the Q K^T alone in a
        // turn of its own before the epilogue, so the final turn and turn 0 were two, the
        // partner's final turn between them).
        float s[64], o[D / 2];
        Owed owed;
        Tile cur, nxt{};
        bool have = next_tile(cur);
        PingPong<S::PINGPONG> turns{wg, have};
        float row_max[2], row_sum[2];
        // A part of a split tile (PARTS) that this warpgroup computed: its epilogue waits until
        // the tile's turns are over, then the part is merged with the other (split_merge), and
        // only the part that counts in second writes the tile.
        auto split_part = [&]() { return PARTS && cur.part >= 0 && cur.n_mine > 0; };
        bool write_o = true;                             // this warpgroup wrote cur's rows
        // The epilogue of tile cur: while it stores, the producer is already loading the next one.
        // O goes to shared memory here and out (send_o_tile) once the next tile's first Q K^T,
        // which this runs under, has landed (S::CROSS).
        auto write_out = [&]() {
            const int b = cur.b, h = cur.h, r_wg = cur.r_wg;
            float inv[2];
    #pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                float sum = row_sum[hr];
                sum += __shfl_xor_sync(0xffffffff, sum, 1);
                sum += __shfl_xor_sync(0xffffffff, sum, 2);
                const int row = r_wg + wrow + g + 8 * hr;
                // A row with keys sums to at least 1 (its reference maximum's exp2(0)), so the
                // approximate reciprocal's 2 ulp lie far below the output's precision (v25: the
                // IEEE division's call sat between two tiles).
                inv[hr] = sum > 0.f ? __fdividef(1.f, sum) : 0.f;
                // lse likewise: the MUFU log2 (2 ulp for sums >= 1) times ln 2, where a division
                // by log2 e put its slow path's call in every copy of the epilogue (a tenth of
                // the D = 128 kernels' code; 0.7-4.7% of a job that asks for lse).
                if (row >= 0 && row < Sq && p.lse && t == 0)
                    p.lse[b * p.lse_st[0] + h * p.lse_st[1] + (int64_t)row * p.lse_st[2]] =
                        sum > 0.f ? (row_max[hr] + __log2f(sum)) * LN2 : -INFINITY;
            }
            HP_TRACE(25, 0);
            if constexpr (TMA && GLLM_CUDA_HP_O_TILE(D)) {
                // O through shared memory and a TMA store (v21; rows past Sq lie outside the map
                // and are not written).
                put_o_tile<T, D>(s_o + (uint32_t)wg * 64 * D * 2, o, inv, wrow, wg, o_thread);
            } else {
                T *O = reinterpret_cast<T *>(p.out) + b * p.o_st[0] + h * p.o_st[1];
    #pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int row = r_wg + wrow + g + 8 * hr;
                    store_o_row<T, D>(O + (int64_t)row * p.o_st[2], o, hr, inv[hr], t,
                                      row >= 0 && row < Sq);
                }
            }
        };
        auto epilogue = [&]() {
            HP_TRACE(20, 0);
            if (!split_part())
                write_out();
        };
        if (S::CROSS && have)
            key_first<T, D, S::STAGES, S::CROSS>(walk_of(cur), s, turns);
        while (have) {
            // The next tile's place (divisions) is worked out ahead where the registers allow.
            bool more = S::CROSS && next_tile(nxt);
            if (!S::CROSS)
                key_first<T, D, S::STAGES, S::CROSS>(walk_of(cur), s, turns);
            HP_TRACE(1, cur.n_mine);
            const KeyWalk wc = walk_of(cur);
            key_rest<T, D, CAUSAL, S::STAGES, S::CROSS>(wc, s, o, row_max, row_sum, owed, turns,
                                                        cur.last, q_empty);
            base += (uint32_t)cur.n_tiles;
            if (!S::CROSS)
                more = next_tile(nxt);
#ifdef GLLM_HP_TEST_SLOW_WG1_NS
            // Test hook (tests/gpu/gpu-check.sh's walk race, never in gllmd's image): warpgroup 1
            // late for the first walk's final turn, where walk_sync must hold warpgroup 0.
            if (SPLIT && !PARTS && !more && wg == 1)
                for (int i = 0; i < GLLM_HP_TEST_SLOW_WG1_NS / 1000; i++)
                    __nanosleep(1000);
#endif
            key_end<T, D, S::STAGES, S::CROSS>(wc, walk_of(nxt), more, s, o, owed, turns, epilogue);
            if constexpr (PARTS) {
                write_o = true;
                if (split_part()) {                      // o, row_max and row_sum are still cur's
                    write_o = split_merge<D, S::CONSUMERS>(hp, cur.part, wg, o, row_max, row_sum,
                                                           smem_addr(&split_second[wg]));
                    if (write_o)
                        write_out();
                }
            }
            if constexpr (TMA && GLLM_CUDA_HP_O_TILE(D))
                send_o_tile<D>(s_o + (uint32_t)wg * 64 * D * 2,
                               o_thread && cur.r_wg >= 0 && write_o,
                               &hp->o_map, cur.r_wg, cur.h, cur.b);
            HP_TRACE(21, 0);
            cur = nxt;
            have = more;
        }
    };
    consume(Flag<false>());
    if constexpr (SPLIT) {
        if (sc.whole_units < sc.units) {
            static_assert(S::CONSUMERS * 128 == PP_THREADS, "walk_sync counts both consumers");
            walk_sync();                             // both through the first walk's final turn
            consume(Flag<true>());
        }
    }
    if (TMA && GLLM_CUDA_HP_O_TILE(D) && o_thread)
        bulk_wait_all();                             // shared memory stays until the stores land
}
#endif // GLLM_HAVE_WGMMA

} // namespace

#ifdef GLLM_HAVE_WGMMA
#define HP_BODY(T, CAUSAL, D) attention_fwd_hopper<T, CAUSAL, D, false>(p, nullptr)
#define HP_TMA_BODY(T, CAUSAL, D) attention_fwd_hopper<T, CAUSAL, D, true>(hp.a, &hp)
#else
#define HP_BODY(T, CAUSAL, D) __trap()  // never launched off sm_90a (see the header comment)
#define HP_TMA_BODY(T, CAUSAL, D) __trap()
#endif
// GLLM_CUDA_ENTRY_HOPPER: the producer copies with cp.async (any layout tc_eligible admits);
// GLLM_CUDA_ENTRY_HOPPER_TMA: with TMA, through the tensor maps of its parameter.
#define GLLM_CUDA_ENTRY_HOPPER(T, D, FLAGS, symbol)                                            \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_HP_THREADS(D), 1)                   \
        symbol(const gllm_cuda_attn_params p)                                                  \
    {                                                                                          \
        HP_BODY(T, GLLM_CUDA_KF_HAS(FLAGS, CAUSAL), D);                                        \
    }
#define GLLM_CUDA_ENTRY_HOPPER_TMA(T, D, FLAGS, symbol)                                        \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_HP_THREADS(D), 1)                   \
        symbol(const __grid_constant__ gllm_cuda_hp_params hp)                                 \
    {                                                                                          \
        HP_TMA_BODY(T, GLLM_CUDA_KF_HAS(FLAGS, CAUSAL), D);                                    \
    }
GLLM_CUDA_HOPPER_KERNELS(GLLM_CUDA_ENTRY)
