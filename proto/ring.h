/* The reply ring: job replies through shared memory, the layout gllmd and libgllm-client share. */
#ifndef GLLM_PROTO_RING_H
#define GLLM_PROTO_RING_H

#include <stdatomic.h>
#include <stdint.h>

/*
 * A client may hand gllmd a sealed memfd of exactly GLLM_RING_BYTES ("reply_ring"). gllmd
 * then writes each successful job reply (the same msgpack packet the socket would carry)
 * into the next slot and advances head; the client reads slots up to head and advances
 * tail. gllmd also sends the reply through the socket, as without a ring, unless the
 * client has set `polling`: it is spinning on the ring at that moment, and the socket's
 * two system calls are what the ring saves. So a client blocked on the socket, or one
 * that watches the fd from its own event loop, still sees every reply there. A client
 * that stops polling clears the flag, then reads the ring once more; gllmd fences between
 * advancing head and reading the flag, so each reply is either seen in the ring or sent
 * to the socket. A reply that does not fit, or finds the ring full, goes by the socket
 * alone. A reply may arrive both ways; the client completes a job once.
 *
 * Every field the client writes (tail, polling) is only advice to gllmd: a bad value
 * makes it use the socket, nothing more. head and the slots are written by gllmd alone.
 */
#define GLLM_RING_SLOTS      64u
#define GLLM_RING_SLOT_BYTES 256u   /* a job reply is about 120 bytes */

struct gllm_ring_slot {
    uint32_t len;                   /* bytes of data in use */
    unsigned char data[GLLM_RING_SLOT_BYTES - sizeof(uint32_t)];
};

struct gllm_reply_ring {
    _Atomic uint32_t head;          /* gllmd: replies published */
    unsigned char pad0[60];         /* the two sides' counters on separate cache lines */
    _Atomic uint32_t tail;          /* client: replies consumed */
    _Atomic uint32_t polling;       /* client: spinning on head; replies need not go by socket */
    unsigned char pad1[56];
    struct gllm_ring_slot slot[GLLM_RING_SLOTS];
};

#define GLLM_RING_BYTES ((uint64_t)sizeof(struct gllm_reply_ring))

_Static_assert(sizeof(struct gllm_reply_ring) == 128 + GLLM_RING_SLOTS * GLLM_RING_SLOT_BYTES,
               "ring layout is part of the protocol");

#endif
