/* The gllm wire codec: bounded msgpack-rpc messages in, plain C structs out. No I/O. */
#ifndef GLLM_PROTO_H
#define GLLM_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "gllm/gllm.h"

/*
 * Limits every decoder enforces. A message's tree is one allocation of at most 24 bytes per
 * byte of a packet whose size was checked first: 1.5 MiB for a 64 KiB packet.
 */
#define PROTO_MAX_MESSAGE   65536u
#define PROTO_MAX_DEPTH     16u
#define PROTO_MAX_CONTAINER 256u
#define PROTO_MAX_STRING    4096u
#define PROTO_MAX_METHOD    32u
#define PROTO_MAX_ERRMSG    200u

/* The longest wait a job may ask for (hello's sync.timeout_ms_max): a counter held longer is
 * a client gone wrong, and its connection's later jobs wait behind it. */
#define PROTO_WAIT_TIMEOUT_MS_MAX 600000

/* The id of a response to a request whose own id was unreadable (nil on the wire). */
#define PROTO_NO_ID UINT64_MAX

enum proto_kind { PROTO_REQUEST = 0, PROTO_RESPONSE = 1, PROTO_NOTIFY = 2 };

/* A decoded message. Its objects live in `nodes` until proto_msg_free(); strings point into
 * the packet, which must outlive the message. */
struct proto_msg {
    enum proto_kind kind;
    uint64_t id;                       /* request, response; PROTO_NO_ID: nil */
    char method[PROTO_MAX_METHOD + 1]; /* request, notify */
    const msgpack_object *params;      /* request, notify: a map */
    int error_code;                    /* response: 0 when it carries a result */
    char error_message[PROTO_MAX_ERRMSG + 1];
    const msgpack_object *result;      /* response */
    msgpack_object root;
    void *nodes;
};

/* Checks the raw bytes against the limits above without allocating. */
int proto_scan(const void *buf, size_t len);
/* The same checks (the same code for the same packet) in the same walk that builds the
 * packet's tree: *nodes, one allocation of at most 24 bytes per packet byte, for free().
 * Our own builder instead of msgpack-c's unpacker: its second, general walk after our
 * bounds scan was most of a request's decoding time. */
int proto_tree_build(const void *buf, size_t len, msgpack_object *root, void **nodes);
/* proto_tree_build(), then the envelope into msg. On failure msg needs no freeing. When
 * the id could be read, *id_out gets it (so the error can be answered). */
int proto_decode(const void *buf, size_t len, struct proto_msg *msg, int64_t *id_out);
/* The id of a request from its first bytes alone ([0, id, ...] in any array and uint
 * encoding), whatever follows: a packet that breaks a limit, has a bad key, trailing bytes
 * or is cut short is answered under its id. 0 and *id, or GLLM_EMALFORMED. */
int proto_peek_id(const void *buf, size_t len, uint64_t *id);
void proto_msg_free(struct proto_msg *msg);

/* Typed field access on a params/result map. Missing optional fields leave
 * *out untouched and return 0; missing required ones return GLLM_EPARAM. */
const msgpack_object *proto_map_get(const msgpack_object *map, const char *key);
/* A field name and its length, for proto_map_find. */
struct proto_key {
    const char *name;
    uint32_t len;
};
#define PROTO_KEY(s) {s, sizeof s - 1}
/* One pass over a map for n names: found[i] is the value of the first pair named keys[i], or
 * NULL (all NULL when map is not a map). Hot messages are read this way, not one
 * proto_map_get per field: those walks over the map were a third of a request's decoding. */
void proto_map_find(const msgpack_object *map, const struct proto_key *keys, size_t n,
                    const msgpack_object **found);
int proto_get_u64(const msgpack_object *map, const char *key, bool required, uint64_t *out);
int proto_get_i64(const msgpack_object *map, const char *key, bool required, int64_t *out);
int proto_get_f64(const msgpack_object *map, const char *key, bool required, double *out);
int proto_get_bool(const msgpack_object *map, const char *key, bool required, bool *out);
/* Copies a string field, NUL-terminated; GLLM_EPARAM if it does not fit. */
int proto_get_str(const msgpack_object *map, const char *key, bool required, char *out, size_t cap);

/* A tensor reference as it travels: region id, byte offset, dtype, shape, strides. The
 * region is a shared-memory arena ("arena": id) or a device tensor ("dtensor": id). */
struct proto_tensor {
    uint32_t arena;
    bool device;
    uint64_t offset;
    gllm_dtype dtype;
    uint32_t rank;
    int64_t shape[GLLM_MAX_RANK];
    int64_t strides[GLLM_MAX_RANK];
};

/* A job's "wait" or "signal": a 32-bit counter in one of the connection's arenas. */
struct proto_counter {
    bool set;
    uint32_t arena;
    uint64_t offset;
    uint32_t value;
    uint32_t timeout_ms;          /* wait only; 0: the daemon's default */
};

/* An attention job's variant fields (docs/PROTOCOL.md, "Variants"); zeroed: none. The values
 * are as read: proto_variant_check says whether they are in range. */
struct proto_variant {
    bool window;                         /* window_left or window_right given */
    int64_t window_left, window_right;   /* with window: -1 is no edge on that side */
    int64_t attention_chunk;             /* 0: none */
    double logits_soft_cap;              /* 0: none */
    bool has_alibi, has_sinks;
    struct proto_tensor alibi_slopes, sinks;
};

struct proto_attention {
    struct proto_tensor q, k, v, out, lse;
    bool has_lse;
    bool causal;
    bool has_scale;
    double scale;
    uint64_t repeat;                     /* 0: absent (once); packed when above 1 */
    uint64_t device;                     /* 0: absent; packed when above 0 */
    struct proto_counter wait, signal;   /* packed when set */
    struct proto_variant variant;
};

/* The paged KV cache operations; fields that an operation does not take must be absent. */
enum proto_paged_op { PROTO_KV_APPEND, PROTO_DECODE, PROTO_PREFILL };
struct proto_paged {
    enum proto_paged_op op;
    struct proto_tensor k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len;
    struct proto_tensor q, out, qo_indptr;      /* decode, prefill (qo_indptr: prefill) */
    struct proto_tensor k, v, append_indptr;    /* kv_append */
    uint64_t device;                            /* 0: absent; packed when above 0 */
    bool has_scale;
    double scale;
    struct proto_counter wait, signal;   /* packed when set */
    struct proto_variant variant;        /* decode, prefill */
};

int proto_dtype_parse(const char *name, gllm_dtype *out);
size_t proto_dtype_size(gllm_dtype dtype);
const char *proto_dtype_name(gllm_dtype dtype);

/* dtensor_copy: bytes between an arena and a device tensor, on that tensor's device (the
 * method takes no "device"). */
struct proto_copy {
    uint32_t dtensor, arena;
    uint64_t offset, arena_offset;       /* 0: absent; always packed */
    uint64_t bytes;
    bool to_device;                      /* true: arena -> device tensor */
    struct proto_counter wait, signal;   /* packed when set */
};

/* The keys every job method takes beside its own (docs/PROTOCOL.md): "device" (not
 * dtensor_copy's) and the counters "wait" and "signal". Each job's decoder reads them first,
 * so that a broken one's code is what it returns; the daemon checks the rest (the device
 * below its count, the counter's arena, slot and kind). A wait's timeout_ms is 0 when absent
 * (the daemon's default); 0 on the wire is refused. */
struct proto_job {
    uint64_t device;
    struct proto_counter wait, signal;
};
/* why, when not NULL: on failure, the rule broken in words, for an error message. */
int proto_decode_job(const msgpack_object *params, bool takes_device, struct proto_job *j,
                     const char **why);
/* A refused job's "device" and "signal" alone, whatever else its params hold (its signal is
 * still written, in order): device 0 when absent or not a uint, signal->set false when
 * absent or nil; a broken signal fails. */
int proto_decode_job_signal(const msgpack_object *params, uint64_t *device,
                            struct proto_counter *signal);

int proto_decode_tensor(const msgpack_object *obj, struct proto_tensor *t);
int proto_decode_attention(const msgpack_object *params, struct proto_attention *a);
int proto_decode_paged(const msgpack_object *params, enum proto_paged_op op, struct proto_paged *p);
int proto_decode_copy(const msgpack_object *params, struct proto_copy *c);
/* Byte range [*first, *end) that the tensor touches, overflow-checked; an
 * empty tensor gives first == end == offset. Strides must be non-negative. */
int proto_tensor_span(const struct proto_tensor *t, uint64_t *first, uint64_t *end);
/* Fills strides for a row-major layout. */
void proto_tensor_contiguous(struct proto_tensor *t);

/* A fixed-capacity output buffer behind a msgpack_packer: encoding never
 * allocates and fails cleanly (overflow set) past PROTO_MAX_MESSAGE. */
struct proto_buf {
    size_t len;
    bool overflow;
    msgpack_packer pk;
    char data[PROTO_MAX_MESSAGE];
};
void proto_buf_init(struct proto_buf *b);

/* Packs s as a msgpack string, valid UTF-8 whatever s holds: bytes that are not are replaced
 * with U+FFFD (a string that needs repair is cut at PROTO_MAX_STRING bytes). */
void proto_pack_str(msgpack_packer *pk, const char *s);

/* UTF-8 (utf8.c). seq: the length of the well-formed sequence at s (1..4: no overlongs,
 * surrogates or code points past U+10FFFF), 0 if there is none. repair: s into out with
 * U+FFFD for each byte that starts no sequence, whole sequences only, at most cap bytes;
 * returns the bytes written. */
size_t proto_utf8_seq(const char *s, size_t n);
bool proto_utf8_valid(const char *s, size_t n);
size_t proto_utf8_repair(const char *s, size_t n, char *out, size_t cap);
void proto_pack_kv_str(msgpack_packer *pk, const char *key, const char *val);
void proto_pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t val);
void proto_pack_kv_i64(msgpack_packer *pk, const char *key, int64_t val);
void proto_pack_kv_f64(msgpack_packer *pk, const char *key, double val);
void proto_pack_kv_bool(msgpack_packer *pk, const char *key, bool val);

/* Headers: the caller packs the params/result object that completes the message. */
void proto_pack_request(msgpack_packer *pk, uint64_t id, const char *method);
void proto_pack_result(msgpack_packer *pk, uint64_t id);
/* [2, method, ...]: the params map follows. */
void proto_pack_notify(msgpack_packer *pk, const char *method);
/* A complete error response; id -1 packs nil (the request's id was unreadable). */
void proto_pack_error(msgpack_packer *pk, int64_t id, int code, const char *message);

void proto_pack_tensor(msgpack_packer *pk, const struct proto_tensor *t);

/* ---- Variants (variant.c) ---- */

/* What a mode computes, as hello's "capabilities" carries it (gllm.h's gllm_mode_caps; its
 * key table is in info.c). */
struct proto_mode_caps {
    uint32_t variants;                   /* GLLM_VARIANT_*: names on the wire */
    uint64_t max_head_dim;
    bool has_head_dims;                  /* packed when set: only head_dims[0 .. n_head_dims) */
    uint32_t n_head_dims;                /* 0: any head dim 1..max_head_dim */
    uint64_t head_dims[GLLM_MAX_MODE_HEAD_DIMS];
};
/* The variant fields' wire names, by GLLM_VARIANT_* bit position. */
#define PROTO_NVARIANTS 6
extern const char *const proto_variant_names[PROTO_NVARIANTS];
/* The variant keys of a job's params; absent ones are none. GLLM_EPARAM for a mistyped one. */
int proto_decode_variant(const msgpack_object *params, struct proto_variant *v);
/* Packs v's keys that are not none, proto_variant_keys(v) of them. */
void proto_pack_variant(msgpack_packer *pk, const struct proto_variant *v);
unsigned proto_variant_keys(const struct proto_variant *v);
/* The GLLM_VARIANT_* bits v asks for, with head dims D (q, k) and Dv (v, out). */
uint32_t proto_variant_fields(const struct proto_variant *v, int64_t D, int64_t Dv);
/* The one check of a job's variant, in the daemon and before sending in the library: values
 * in range (PARAM), slopes and sinks f32 [Hq] (DTYPE, SHAPE), Dv in [1, D] (SHAPE, HEADDIM),
 * D among the mode's head dims (HEADDIM), every field asked for computed by the mode
 * (VARIANT, naming the field and backend). 0, or a code and err. */
int proto_variant_check(const struct proto_variant *v, gllm_mode mode,
                        const struct proto_mode_caps *m, const char *backend, int64_t Hq,
                        int64_t D, int64_t Dv, char *err, size_t len);
bool proto_head_dim_ok(const struct proto_mode_caps *m, int64_t D);
/* "window", "attention_chunk", ... for one GLLM_VARIANT_* bit; "dense", "decode", "prefill". */
const char *proto_variant_name(uint32_t bit);
const char *proto_mode_name(gllm_mode mode);
/* GLLM_EPARAM, naming it in err, when params holds a key no job method reads. */
int proto_job_keys_check(const msgpack_object *params, char *err, size_t len);
void proto_pack_attention(msgpack_packer *pk, const struct proto_attention *a);
void proto_pack_paged(msgpack_packer *pk, const struct proto_paged *p);
void proto_pack_copy(msgpack_packer *pk, const struct proto_copy *c);

#endif
