/* dst_int: the destination's private state, shared by the files of the
 * destination.
 *
 * dest.c is the destination's face (the API), over its driver, dst_step
 * (one step: completions and the messages in them, connection events,
 * then the work the state asks for).  Below them, each file is a concern
 * of its own that never calls back up:
 *   dst_link   listeners, accepting a connection, authentication
 *   dst_map    the blocks: adding, the block map and admission, pin-all
 *              pieces, dynamic registration
 *   dst_data   what fills the blocks after the map: zero ranges, PAGES,
 *              rounds, completion and its digests
 *   dst_state  the device-state stream: STATE messages and the ring
 *   dst_pc     post-copy: the keys and the page set as they come, the
 *              switch, and the post-copy engine (pcd.h) until every page
 *              is in
 * Each takes the handle and returns 0 or a negative errno with the message
 * in ss.err; failing (telling the peer, tearing down) is dst_step.c's
 * alone.  Types only (with the states' names and their one setter, which
 * every file uses); nothing outside the destination includes it. */
#ifndef RDMIG_DST_INT_H
#define RDMIG_DST_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "blocks.h"
#include "chan.h"
#include "cost.h"
#include "creg.h"
#include "pcset.h"
#include "populate.h"
#include "privdata.h"
#include "regq.h"
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
	DST_RUNNING,    /* rounds, state, until COMPLETE; pin-all pieces
			 * register one per step meanwhile; with POSTCOPY the
			 * keys and the page set may come (dst_pc) */
	/* Switched to post-copy: the guest runs here and the post-copy
	 * thread reads what it lacks; POSTCOPY_DONE goes once every page is
	 * in, then COMPLETE is the only message the source may send. */
	DST_POSTCOPY,
	/* POSTCOPY_RECOVER: the link broke after the switch.  The guest runs
	 * on; the engine places faults on pages that are here and queues the
	 * others (their threads wait); every registration stays.  Only the
	 * listener (rdmig_dest_keep_listener) is watched, for the source's
	 * RESUME with this migration's token; no deadline but a cancel. */
	DST_PC_PAUSED,
	/* A RESUME with the right token was accepted on a new connection: it
	 * authenticates (with AUTH), sends POSTCOPY_RESUME, is answered with
	 * POSTCOPY_RESUMED and opens the post-copy channels again; then the
	 * engine reads on (DST_POSTCOPY).  A failure here pauses again. */
	DST_PC_RESUMING,
	/* COMPLETE arrived with the right counts: with VERIFY the image is
	 * hashed a slice per step (keepalives go on meanwhile), then the
	 * commit callback runs and COMPLETE_ACK is posted. */
	DST_VERIFYING,
	DST_FLUSHING,   /* COMPLETE_ACK posted, waiting for its completion */
	DST_DONE,       /* the image is complete and the source knows it */
	DST_FAILED,     /* terminal; ss.err holds the reason; stays last:
			 * dst_state_names is checked against it */
};

/* For the debug log, so a migration that hangs says where it stands. */
static const char *const dst_state_names[] = {
	[DST_NEW] = "new", [DST_AUTH] = "auth", [DST_WAIT_MAP] = "wait-map",
	[DST_RUNNING] = "running", [DST_POSTCOPY] = "postcopy",
	[DST_PC_PAUSED] = "pc-paused", [DST_PC_RESUMING] = "pc-resuming",
	[DST_VERIFYING] = "verifying", [DST_FLUSHING] = "flushing",
	[DST_DONE] = "done", [DST_FAILED] = "failed",
};
_Static_assert(RD_ARRAY_SIZE(dst_state_names) == DST_FAILED + 1,
	       "dst_state_names must name every enum dst_state");

/* Why the last step asked to be called again at once: it stopped at its
 * bound with completions polled or still in the CQ (not re-armed: the fd
 * may stay quiet), or with a message in hand half worked off. */
enum dst_step_end { DSTEP_IDLE, DSTEP_CUT };

/* Completions polled at once; the ones a step could not handle wait in the
 * handle for the next. */
#define DST_WC_BATCH 16

/* What a registration the helper finished was for (regq_job.cookie: the
 * kind in the top byte; a piece is its block's map index << 32 | piece, a
 * chunk its slot). */
enum dst_reg_kind { DREG_PIECE = 1, DREG_CHUNK = 2, DREG_RING = 3, DREG_FAULT = 4,
		    DREG_PC = 5 /* the post-copy engine's staging and second mappings */ };
#define DST_REG_COOKIE(kind, n) ((uint64_t)(kind) << 56 | (n))
#define DST_REG_KIND(c) ((unsigned)((c) >> 56))
#define DST_REG_N(c) ((c) & ((UINT64_C(1) << 56) - 1))

/* The message in hand: one that costs more than a step may take is worked
 * off over several, and the frames behind it wait, in order.  Its ranges
 * or chunks were all checked on arrival. */
enum dst_job_kind {
	JOB_NONE,
	JOB_ZERO,       /* ZERO_RANGES: checked for zero (and cleared) a slice
			 * at a time with the clock read between slices, so
			 * 1 GiB of ranges costs many steps, not one long one */
	JOB_STATE,      /* STATE while the application paused state
			 * (rdmig_dest_pause_state): it waits, and what came
			 * after it waits behind it */
	JOB_REGISTER,   /* REGISTER_REQ: its chunks go to the helper; the
			 * answer goes once every one is registered */
	JOB_RING,       /* STATE_WRITTEN: its ring bytes to the state
			 * callback, a slice at a time, waiting while paused */
	JOB_PAGES,      /* PAGES: copied run by run; a run whose memory is not
			 * present yet waits for a helper to fault it in */
	JOB_PC_BEGIN,   /* the last POSTCOPY_RANGES: the switch waits until no
			 * registration is in the helpers' hands (a pin still
			 * running would fault on the guest's memory) and the
			 * post-copy engine's own are done */
};

/* What working on the message in hand came to. */
enum { DST_JOB_CUT = 0, DST_JOB_DONE = 1, DST_JOB_WAITING = 2 };

struct dst_job {
	enum dst_job_kind kind;
	ProtobufCMessage *msg;      /* the message it lives in, let go once done */
	const Rdmig__ZeroRanges *zero;
	const Rdmig__RegisterReq *reg;
	const Rdmig__State *state;
	const Rdmig__Pages *pages;
	const uint8_t *src;         /* pages: the next run's bytes */
	size_t i;                   /* zero: the range; register: next chunk;
				     * pages: next run */
	uint64_t off;               /* zero: how far into the range */
	size_t waiting;             /* register: chunks with the helper;
				     * pages: runs being faulted in */
	bool faulted;               /* pages: fault-ins were asked for */
	uint64_t ring_left;         /* ring: bytes not handed over yet (from off) */
};

/* STATE_RING: the ring the source writes device state into.  Positions
 * count the bytes announced in STATE_WRITTEN since STATE_RING; a byte's
 * place in the ring is its position modulo the size. */
struct dst_sring {
	uint8_t *buf;               /* DST_STATE_RING mapped at create */
	struct ibv_mr *mr;          /* registered by the helper */
	bool submitted, announced;  /* to the helper; STATE_RING sent */
	bool failed;                /* not registered: never offered */
	uint64_t written;           /* the source said so (STATE_WRITTEN) */
	uint64_t taken;             /* handed to the state callback */
	uint64_t told;              /* the last STATE_TAKEN */
};

/* Post-copy (dst_pc): the engine, made at the block map, and what the
 * source says before the switch, checked as it comes; per announced
 * block, in map order. */
struct dst_pc {
	struct pcd *eng;
	struct pckeys keys;
	struct pcset_rx rx;
	uint64_t **set;             /* the pages each block lacks */
	uint64_t *npages, *length;
	unsigned reg_sub;           /* registrations handed to the helpers */
	bool switching;             /* the last range came: no pin starts */
	bool done_sent;
	/* POSTCOPY_RECOVER: the token the source resumes with (sent in
	 * BLOCK_MAP_RESP); the first control connection, whose PD holds every
	 * registration and whose QPs stay until the handle goes; while
	 * resuming, whether the new connection proved the key (or needs
	 * not) and whether POSTCOPY_RESUMED went. */
	uint8_t token[PD_TOKEN_LEN];
	struct fab_conn *conn0;
	bool authed, resumed_sent;
	unsigned pauses;
};

struct dst_block {
	struct blk_desc d;
	uint8_t *host;
	/* rdmig_dest_postcopy_view(): where the guest sees this block in the
	 * userfaultfd's process (host is then our mapping of the same shared
	 * memory); 0 when the guest's view is host itself. */
	uint64_t view;
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
	enum dst_step_end step_end;
	/* The source disconnected while a message waited for our
	 * registrations: what it sent before (an ERROR saying why) is read
	 * first, then this fails the migration. */
	bool src_gone;
	int result;

	struct dst_block *blocks;   /* configured or mapped on demand */
	unsigned nblocks;
	unsigned *map;              /* announced index -> blocks index */
	unsigned nmap;
	unsigned chunk_shift, piece_shift; /* the source's */

	struct chan_set *chans;     /* MULTI_CHANNEL: the source's data channels */
	/* rdmig_dest_keep_listener(): where a paused post-copy takes the
	 * source's RESUME (borrowed; offers POSTCOPY_RECOVER). */
	struct rdmig_listener *resume_l;
	unsigned req_channels;      /* channels the source asked for */

	struct regq rq;             /* our registrations, by a helper thread */

	struct creg creg;           /* dynamic registration */
	bool creg_ready;
	uint64_t nslots;
	uint32_t *rkeys;            /* one REGISTER_RESP's keys */
	size_t rkeys_max;

	/* pin-all: the next piece to submit, how many the helper holds, and
	 * keys not yet sent */
	unsigned pin_block;
	uint64_t pin_piece;
	size_t pin_sub;
	uint32_t *pk_block, *pk_rkey;
	uint64_t *pk_piece;
	size_t pk_n, pk_max;

	struct populate pop;        /* pages made present ahead of registration */
	struct dst_pc pc;

	/* What hashing and clearing cost per byte: slices fit the step. */
	struct cost hash_cost, zero_cost;

	/* DST_VERIFYING: the source's digests and how far ours got */
	uint8_t *want_dig;
	struct auth_digest_state *vdig;
	unsigned vblock;
	uint64_t voff;

	uint32_t iteration;
	uint64_t state_bytes;
	uint64_t state_max;     /* the source's announced bound (STATE_BOUND), or
				 * RDMIG_STATE_UNSAID */
	struct dst_sring sring;
	atomic_bool state_paused;   /* rdmig_dest_pause_state(), any thread */

	/* What landed as the source told it: the sum of its ITER_ENDs, and
	 * with PROGRESS what it last said (pages, bytes, zero pages it did
	 * not send); the zero pages of the ZERO_RANGES that came. */
	uint64_t iter_bytes, told_bytes, told_pages, told_skipped, zero_pages;
	/* Where the current round began (the block map or the last ITER_END),
	 * and the zero pages counted by then. */
	int64_t round_start_ms;
	uint64_t round_zero_base;

	/* Bounded steps (rdmig(3)): completions polled and not handled yet,
	 * and the message in hand. */
	struct ibv_wc wcs[DST_WC_BATCH];
	unsigned wc_next, wc_n;
	struct dst_job job;
	bool no_fault_in;           /* the kernel cannot fault in ahead */

	uint8_t nonce[AUTH_NONCE_LEN]; /* our challenge, sent in the ACCEPT */
	struct auth_bind bind;      /* what the answers are bound to */
	bool have_peer_nonce;
	int64_t handshake_deadline; /* block map received by then, or fail */
	char peer[80];              /* the source's HOST:PORT, for logs */
};

/* Every change of d->state goes through here, so the debug log has each
 * transition: a stuck migration then says where it stands. */
static inline void dst_set_state(struct rdmig_dest *d, enum dst_state to)
{
	if (d->state != to)
		cfg_log(&d->ss.cfg, RDMIG_LOG_DEBUG, "destination state: %s -> %s",
			dst_state_names[d->state], dst_state_names[to]);
	d->state = to;
}

#endif
