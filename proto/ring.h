/* The rings: requests and job replies through shared memory, the layout gllmd and clients share. */
#ifndef GLLM_PROTO_RING_H
#define GLLM_PROTO_RING_H

#include <stdatomic.h>
#include <stdint.h>

/*
 * A client may hand gllmd a sealed memfd of exactly GLLM_RING_BYTES (method "ring"). It
 * then holds two rings, each slot one packet exactly as the socket would carry it, so
 * that a client stepping a decode loop makes no system call per job on either side.
 *
 * Replies (gllmd -> client). gllmd writes each successful job reply into the next slot and
 * advances reply_head; the client reads slots up to it and advances reply_tail. gllmd also
 * sends the reply through the socket, as without a ring, unless the client has set
 * `polling` (it is spinning on reply_head at that moment). A client that stops polling
 * clears the flag, fences, and reads reply_head once more; gllmd fences between advancing
 * reply_head and reading the flag, so each reply is either seen in the ring or sent to the
 * socket. A reply may arrive both ways; the client completes a job once. A reply that does
 * not fit, or finds the ring full, goes by the socket alone; so do errors.
 *
 * Requests (client -> gllmd). Only while gllmd sets `gllmd_polling` (its loop is busy
 * polling) does a client put a request in the next slot and advance request_head; else it
 * uses the socket. After advancing, it fences and reads the flag again: if gllmd stopped
 * polling meanwhile, it sends a "ring_wake" notification through the socket (gllmd clears
 * the flag, fences, and reads every request_head once more before it sleeps). Each slot
 * records `after`, the number of packets the client had sent through the socket before
 * it; gllmd reads the socket up to that packet first, and takes the ring's earlier
 * requests before each socket packet, so the two ways keep one order.
 *
 * Every field the client writes (reply_tail, polling, request_head, request slots) is
 * untrusted: gllmd copies a request out of its slot before decoding it, and a bad counter
 * makes it use the socket or answer an error, nothing more.
 */
#define GLLM_RING_REPLY_SLOTS      64u
#define GLLM_RING_REPLY_SLOT_BYTES 256u    /* a job reply is about 120 bytes */
#define GLLM_RING_REQUEST_SLOTS    32u
#define GLLM_RING_REQUEST_SLOT_BYTES 1024u /* a decode request is about 700 */

struct gllm_ring_reply_slot {
    uint32_t len;                   /* bytes of data in use */
    unsigned char data[GLLM_RING_REPLY_SLOT_BYTES - 4];
};

struct gllm_ring_request_slot {
    uint32_t len;
    uint32_t after;                 /* socket packets the client sent before this request */
    unsigned char data[GLLM_RING_REQUEST_SLOT_BYTES - 8];
};

struct gllm_ring {
    _Atomic uint32_t reply_head;    /* gllmd: replies published */
    unsigned char pad0[60];         /* each writer's counters on their own cache line */
    _Atomic uint32_t reply_tail;    /* client: replies consumed */
    _Atomic uint32_t polling;       /* client: spinning on reply_head, spare the socket */
    unsigned char pad1[56];
    _Atomic uint32_t request_head;  /* client: requests published */
    unsigned char pad2[60];
    _Atomic uint32_t request_tail;  /* gllmd: requests taken */
    _Atomic uint32_t gllmd_polling; /* gllmd: its loop polls the rings, no wake needed */
    unsigned char pad3[56];
    struct gllm_ring_reply_slot reply[GLLM_RING_REPLY_SLOTS];
    struct gllm_ring_request_slot request[GLLM_RING_REQUEST_SLOTS];
};

#define GLLM_RING_BYTES ((uint64_t)sizeof(struct gllm_ring))

_Static_assert(sizeof(struct gllm_ring) == 256 + GLLM_RING_REPLY_SLOTS * GLLM_RING_REPLY_SLOT_BYTES +
                                               GLLM_RING_REQUEST_SLOTS * GLLM_RING_REQUEST_SLOT_BYTES,
               "ring layout is part of the protocol");

#endif
