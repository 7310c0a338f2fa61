/* The destination's insides, shared by dest.c (the state machine, the
 * connection, authentication and the API) and dst_map.c (the block map and
 * what fills the blocks: registrations, zero ranges, iterations, state,
 * completion).  Nothing here is public. */
#ifndef RDMIG_DEST_H
#define RDMIG_DEST_H

#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "blocks.h"
#include "chan.h"
#include "creg.h"
#include "populate.h"
#include "regpool.h"
#include "session.h"

enum dst_state {
	DST_NEW,        /* blocks may be added; no connection yet */
	/* Accepted with AUTH: our challenge left inside the ACCEPT, so it
	 * existed before any frame could arrive; waiting for the source's
	 * challenge and answer.  Nothing is registered or revealed.  Frames
	 * are taken before the ESTABLISHED event: our QP is ready once
	 * rdma_accept returns, and a source need not send its RTU. */
	DST_AUTH,
	DST_WAIT_MAP,   /* authenticated (or no key): waiting for the block map */
	DST_RUNNING,    /* iterations, state, until COMPLETE; pin-all pieces
			 * register one per step meanwhile */
	/* COMPLETE arrived with the right counts: with VERIFY the image is
	 * hashed a slice per step (keepalives go on meanwhile), then the
	 * commit callback runs and COMPLETE_ACK is posted. */
	DST_VERIFYING,
	DST_FLUSHING,   /* COMPLETE_ACK posted, waiting for its completion */
	DST_DONE,       /* the image is complete and the source knows it */
	DST_FAILED,     /* terminal; ss.err holds the reason */
};

/* Completions polled at once; the ones a step could not handle wait in the
 * handle for the next (a step stops at its cap, see dest.c). */
#define DST_WC_BATCH 16

/* A ZERO_RANGES being worked off.  Its ranges were all checked on arrival;
 * they are checked for zero (and cleared) a slice at a time with the clock
 * read between slices, so one message of 1 GiB of ranges costs many steps,
 * not one long one.  The frames behind it wait, in order. */
struct dst_zero_job {
	const Rdmig__ZeroRanges *z; /* NULL: none in hand */
	size_t range;               /* the range being worked on */
	uint64_t off;               /* how far into it */
};

struct dst_block {
	struct blk_desc d;
	uint8_t *host;
	bool zeroed;
	bool announced;
	uint64_t nchunks;
	uint64_t first_slot;    /* dynamic: first chunk's slot */
	uint64_t npieces;       /* pin-all */
	struct ibv_mr **pieces; /* pin-all, registered in order */
	uint64_t pop_base;      /* where it starts in the populate order */
};

struct rdmig_dest {
	struct session ss;
	enum dst_state state;
	int result;

	struct dst_block *blocks;   /* configured or mapped on demand */
	unsigned nblocks;
	unsigned *map;              /* announced index -> blocks index */
	unsigned nmap;
	unsigned chunk_shift, piece_shift; /* the source's */

	struct chan_set *chans;     /* MULTI_CHANNEL: the source's data channels */
	unsigned req_channels;      /* channels the source asked for */

	struct creg creg;           /* dynamic registration */
	bool creg_ready;
	uint64_t nslots;
	uint32_t *rkeys;            /* one REGISTER_RESP's keys */
	size_t rkeys_max;

	/* pin-all: the next piece to take from the registration helpers (its
	 * block, its index there and over all blocks), and keys not yet sent */
	unsigned pin_block;
	uint64_t pin_piece, pin_g;
	struct regpool reg;
	uint32_t *pk_block, *pk_rkey;
	uint64_t *pk_piece;
	size_t pk_n, pk_max;

	struct populate pop;        /* pages made present ahead of registration */

	/* DST_VERIFYING: the source's digests and how far ours got */
	uint8_t *want_dig;
	struct auth_digest_state *vdig;
	unsigned vblock;
	uint64_t voff;

	uint32_t iteration;
	uint64_t state_bytes;

	/* Bounded steps (rdmig(3)): completions polled and not handled yet,
	 * the ZERO_RANGES in hand and the message it lives in (freed once the
	 * job is done), a connection event held back until the completions
	 * before it were handled, and whether the last step stopped with work
	 * left: the CQ not seen empty (so not re-armed either) or a job
	 * unfinished.  rdmig_dest_timeout() is 0 while it is. */
	struct ibv_wc wcs[DST_WC_BATCH];
	unsigned wc_next, wc_n;
	struct dst_zero_job zero;
	ProtobufCMessage *zero_msg;
	int cm_rc;
	bool more;

	uint8_t nonce[AUTH_NONCE_LEN]; /* our challenge, sent in the ACCEPT */
	struct auth_bind bind;      /* what the answers are bound to */
	bool have_peer_nonce;
	int64_t handshake_deadline; /* block map received by then, or fail */
	char peer[80];              /* the source's HOST:PORT, for logs */
};

/* dst_map.c */
int dst_on_block_map(struct rdmig_dest *d, const Rdmig__BlockMapReq *r);
int dst_running_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m);
/* Works on the ZERO_RANGES in hand (d->zero) a slice at a time until
 * rd_now_us() passes @until_us (one slice at least): 1 once none is left,
 * 0 while it goes on. */
int dst_zero_step(struct rdmig_dest *d, int64_t until_us);
/* pin-all: registers the next piece and sends keys; 1 while pieces remain. */
int dst_pin_step(struct rdmig_dest *d);
/* Whether dst_pin_step has something to do now: keys to send, or the next
 * piece registered (or failed) by its helper. */
bool dst_pin_ready(const struct rdmig_dest *d);
/* 0, or the failure of the thread making pages present, as ours. */
int dst_populate_check(struct rdmig_dest *d);
/* DST_VERIFYING: hashes until rd_now_us() passes @until_us, then commits
 * and posts COMPLETE_ACK once the image checked out. */
int dst_verify_step(struct rdmig_dest *d, int64_t until_us);
/* Whether dst_verify_step has work it can do now. */
bool dst_verify_ready(const struct rdmig_dest *d);
void dst_map_destroy(struct rdmig_dest *d);

/* dest.c */
int dst_send(struct rdmig_dest *d, unsigned type, const ProtobufCMessage *m,
	     const char *what);
int dst_add_block(struct rdmig_dest *d, const char *name, void *host, uint64_t length,
		  int zeroed);

#endif
