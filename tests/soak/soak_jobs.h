/* The soak's jobs: one of each kind set up, submitted, checked against the float64
 * reference (or byte for byte) and released, on one client connection. */
#ifndef GLLM_SOAK_JOBS_H
#define GLLM_SOAK_JOBS_H

#include "soak.h"

/* A client's connection and the arena its batches are carved from. */
struct soak_conn {
    gllm_client *c;
    gllm_memory *arena;
    size_t used;                  /* bump allocator, reset per batch */
    uint64_t share_gran;          /* 0: gllmd shares no memory */
    uint64_t rng;
};

#define SOAK_ARENA_BYTES (6u << 20)

struct soak_job {
    int kind;                     /* enum soak_job */
    uint64_t id;
    bool submitted, sync_done;    /* sync_done: ran in prepare (copy), checked there */
    bool unchecked;               /* its memory was released while it ran: status only */
    int sync_status;
    /* dense shapes (and the paged cache's) */
    int64_t B, Hq, Hkv, Sq, Skv, D;
    gllm_dtype dtype;
    bool causal;
    gllm_memory *mem;             /* q, k, v, out (the conn's arena, or a fresh one) */
    uint64_t q_off, k_off, v_off, out_off;
    gllm_memory *kd, *vd;         /* k and v elsewhere (device, shared, imported) */
    int import_fd;
    gllm_attention_params p;
    /* counters, in the conn's arena */
    uint64_t wait_off, sig_off;
    /* paged: pages per sequence, lengths, where the tables and new tokens are */
    int P, ps, len[4], nnew[4];
    uint64_t kc_off, vc_off, indptr_off, indices_off, last_off, knew_off, vnew_off, aind_off;
    gllm_paged_attention_params pp;
    gllm_kv_append_params ap;
};

/* Sets j up as a job of kind: 0, or the code of a call that failed (documented or not: the
 * caller judges). A copy (synchronous) runs and is checked here. */
int soak_job_prepare(struct soak_conn *sc, struct soak_job *j, int kind);
/* Submits it: 0 or the code. */
int soak_job_submit(struct soak_conn *sc, struct soak_job *j);
/* What the client does once it is submitted (raises an ordered job's wait). */
void soak_job_after_submit(struct soak_conn *sc, struct soak_job *j);
/* Its reply's status: judged, the output checked against the reference on success. */
void soak_job_check(struct soak_conn *sc, struct soak_job *j, int status);
/* Releases what it holds apart from the conn's arena (release memory early: HANDLES). */
void soak_job_release(struct soak_job *j);
/* The HANDLES fault on a job in flight: its memory released, an imported fd closed after a
 * shrink that the seal must refuse and a harmless grow. */
void soak_job_sabotage(struct soak_job *j);

#endif
