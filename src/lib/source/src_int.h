/* src_int: the source's private state, shared by the files of the source.
 *
 * source.c is the source's face (the API), over its driver, src_step (one
 * step: completions, CM events, then the state it is in), and src_stats
 * (the counters published after a step, read from any thread).  Below
 * them, each file is a concern of its own that never calls back up:
 *   src_link   connecting, authentication, the block map, data channels,
 *              pin-all pieces
 *   src_chan   the channels beyond the control connection, stepped to
 *              connected (src_link opens them, src_pc opens post-copy's again)
 *   src_iter   rounds: their machinery set up on the set-up thread
 *              (SRC_PREPARING, worker.h), the WRITE window, registration ahead,
 *              posting, completions, ITER_END
 *   src_sweep  one round's dirty pages planned into the window, zero
 *              ranges and PAGES messages
 *   src_end    completion: digests for VERIFY, COMPLETE, its answer
 *   src_state  the device-state stream
 *   src_mem    the blocks: adding, dirty marks, registering our memory
 *   src_conv   the convergence advice: the config's policy (conv.h) over
 *              the rounds' figures
 *   src_pc     post-copy: the memory the destination may read, the switch
 *              (keys and page set), waiting for the destination's pages
 * Each takes the handle and returns 0 or a negative errno with the
 * message in ss.err; failing (telling the peer, tearing down) is
 * src_step.c's alone.  This header holds types (with the states' names and
 * their one setter, which every file uses); nothing outside the source
 * includes it. */
#ifndef RDMIG_SRC_INT_H
#define RDMIG_SRC_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "blocks.h"
#include "conv.h"
#include "cost.h"
#include "dreg.h"
#include "pace.h"
#include "pack.h"
#include "pcset.h"
#include "privdata.h"
#include "plan.h"
#include "regq.h"
#include "session.h"
#include "wpipe.h"
#include "worker.h"
#include "wpost.h"
#include "zscan.h"

/* Each state says what the source waits for; rdmig_source_process() runs
 * the one it is in until nothing changes. */
enum src_state {
	SRC_NEW,        /* blocks may be added; nothing else exists */
	SRC_CONNECTING, /* rdma_cm resolves the address and route, then connects */
	SRC_AUTH,       /* our challenge and answer are out; the destination's
			 * answer must check out before anything else goes */
	SRC_MAP,        /* BLOCK_MAP_REQ sent; waiting for BLOCK_MAP_RESP */
	SRC_CHANNELS,   /* opening the extra data channels, in parallel */
	SRC_PREPARING,  /* the link is up; the rounds' machinery is set up on
			 * the set-up thread (enum src_prep) */
	SRC_READY,      /* connected, between operations: state may be sent;
			 * pin-all pieces may still be pinning */
	SRC_ITERATING,  /* a round's pages are being planned and written */
	SRC_DRAINING,   /* every page of the round planned: waiting for its
			 * WRITEs to complete and a credit for ITER_END */
	SRC_ITER_END,   /* ITER_END went; waiting for ITER_ACK */
	/* Switching to post-copy (the guest paused, its set frozen): waiting
	 * for every read piece to be registered, then the keys and the page
	 * set go as credits allow; the last POSTCOPY_RANGES starts the
	 * destination's guest. */
	SRC_PC_SWITCH,
	/* The destination runs the guest and reads what it lacks; waiting
	 * for POSTCOPY_DONE, our post-copy channels' QPs watched. */
	SRC_POSTCOPY,
	/* POSTCOPY_RECOVER: the link broke after the switch.  Everything the
	 * destination reads stays registered (on the first connection's PD,
	 * kept with it); a resume is tried every SRC_PC_RETRY_MS until one
	 * succeeds or the migration is cancelled: no deadline. */
	SRC_PC_PAUSED,
	/* Resuming on a new control connection (src_pc.resume says how far):
	 * a RESUME with the token, authentication, POSTCOPY_RESUME and its
	 * answer, the post-copy channels again; then SRC_POSTCOPY.  A failure
	 * pauses again. */
	SRC_PC_RESUMING,
	SRC_HASHING,    /* completing: the image hashed a slice per step for
			 * VERIFY (at once without), then COMPLETE waits for a
			 * credit */
	SRC_COMPLETING, /* COMPLETE sent; waiting for COMPLETE_ACK */
	SRC_COMPLETED,  /* the destination holds the whole image (terminal) */
	SRC_FAILED,     /* terminal; ss.err says why, the peer was told;
			 * stays last: src_state_names is checked against it */
};

/* For the debug log, so a migration that hangs says where it stands. */
static const char *const src_state_names[] = {
	[SRC_NEW] = "new", [SRC_CONNECTING] = "connecting", [SRC_AUTH] = "auth",
	[SRC_MAP] = "map", [SRC_CHANNELS] = "channels", [SRC_PREPARING] = "preparing",
	[SRC_READY] = "ready", [SRC_ITERATING] = "iterating", [SRC_DRAINING] = "draining",
	[SRC_ITER_END] = "iter-end", [SRC_PC_SWITCH] = "pc-switch",
	[SRC_POSTCOPY] = "postcopy", [SRC_PC_PAUSED] = "pc-paused",
	[SRC_PC_RESUMING] = "pc-resuming", [SRC_HASHING] = "hashing",
	[SRC_COMPLETING] = "completing", [SRC_COMPLETED] = "completed",
	[SRC_FAILED] = "failed",
};
_Static_assert(RD_ARRAY_SIZE(src_state_names) == SRC_FAILED + 1,
	       "src_state_names must name every enum src_state");

/* What SRC_PREPARING sets up, in this order, on the set-up thread
 * (worker.h): each part starts threads or allocates and first touches
 * memory, which waits for the address-space lock while other threads pin
 * (13-24 ms in a step, with 3 ms of CPU, in the trial). */
enum src_prep {
	PREP_POSTERS,    /* the posting threads (several channels) */
	PREP_PIPELINE,   /* the WRITE window */
	PREP_REGISTRY,   /* dynamic registration's bookkeeping */
	PREP_SCRATCH,    /* the sweep's ZERO_RANGES and PAGES scratch */
	PREP_ZERO_CHECK, /* the zero-check threads */
	PREP_DONE,
};

/* The operation the caller started; process() returns 1 once it is
 * reached, and GOAL_REACHED holds that until the caller's own process call
 * has seen it (a blocking send_state or poll inside must not swallow it). */
enum src_goal { GOAL_NONE, GOAL_CONNECTED, GOAL_ITERATED, GOAL_COMPLETED, GOAL_REACHED };

/* Why rdmig_source_timeout() is 0: the last step stopped at its bound with
 * completions left in the CQ (not re-armed: the fd may stay quiet), or
 * with work left it could do now; or an operation was started and no step
 * has begun it yet (nothing would make the fd readable); or device state
 * found no room and the step got it back (the credits came in the step:
 * the fd will not say so).  STEP_IDLE: wait for the fd and the deadlines. */
enum src_step_end { STEP_IDLE, STEP_CUT_CQ, STEP_CUT_WORK, STEP_KICK, STEP_ROOM };

enum { SRC_TAG_WRITE = 1, SRC_TAG_STATE = 2 };
/* enum rdmig_limit's figures a source holds (src_conv). */
#define SRC_LIMITS (RDMIG_LIMIT_SWITCHOVER_BANDWIDTH + 1)

/* pin-all: pieces of PIECE_SHIFT bytes (at least a chunk) registered on
 * both sides ahead of the writes, by the registration helpers of each
 * side. */
#define SRC_PIECE_SHIFT 24
/* Pieces submitted ahead of the one the driving thread waits for, per
 * registration helper (regq.h). */
#define SRC_PIECES_AHEAD 4
/* A paused post-copy tries to resume this often. */
#define SRC_PC_RETRY_MS 1000

/* What a registration the helper finished was for (regq_job.cookie: the
 * kind in the top byte, a slot or offset below). */
enum src_reg_kind { REG_PIECE = 1, REG_CHUNK = 2, REG_STATE = 3, REG_CTRL = 4,
		    REG_READ = 5 /* dynamic mode's post-copy read pieces */ };
#define SRC_REG_COOKIE(kind, n) ((uint64_t)(kind) << 56 | (n))
#define SRC_REG_KIND(c) ((unsigned)((c) >> 56))
#define SRC_REG_N(c) ((c) & ((UINT64_C(1) << 56) - 1))

struct src_piece {
	struct ibv_mr *mr;      /* ours */
	uint32_t rkey;          /* the destination's, from PIN_KEYS */
	bool remote;
};

struct src_block {
	struct blk_desc d;
	uint8_t *host;
	uint64_t npages, nslots;
	uint64_t *dirty;        /* marked for the next round */
	uint64_t *sending;      /* this round's, consumed by the sweep */
	uint64_t *written;      /* pages the destination holds non-zero data for */
	uint64_t first_slot;    /* dynamic: chunks; pin-all: pieces */
	uint64_t remote_base;
	bool dest_zeroed;
	bool cow;               /* private memory: pinned with write access */
	/* Post-copy: its read pieces (SRC_PIECE_SHIFT bytes in dynamic mode,
	 * pin-all's own pieces otherwise), from rp_first in src_pc's order. */
	uint64_t rp_first, rp_n;
};

/* What one run the sweep found still waits for. */
enum src_run {
	RUN_NONE,               /* nothing pending */
	RUN_WRITE,              /* a WRITE run still being cut into ops */
	RUN_PACK,               /* a short run waiting for room in a PAGES message */
};

/* The sweep of one round over the blocks' sending bitmaps. */
struct src_sweep {
	unsigned block;         /* == nblocks: every block swept */
	uint64_t cursor;        /* next page of that block */
	struct plan_op pending;
	enum src_run run;
	uint64_t planned_bytes;
};

/* STATE_RING: device state goes by RDMA WRITE into the destination's
 * ring, from a registered copy here of lsize bytes (the ring's size or
 * less).  Positions count the bytes announced in STATE_WRITTEN since
 * STATE_RING; byte n is at n modulo each side's size. */
struct src_sring {
	uint8_t *buf;           /* SRC_STATE_RING_MAX mapped at create */
	struct ibv_mr *mr;      /* ours, registered by the helper */
	bool submitted;
	bool failed;            /* not registered: state stays in messages */
	uint64_t raddr;         /* the destination's, from STATE_RING */
	uint32_t rkey, size;    /* size 0: no ring (yet) */
	uint32_t lsize;         /* our copy's */
	uint64_t written;       /* written and announced in STATE_WRITTEN */
	uint64_t taken;         /* the destination's STATE_TAKEN */
	unsigned inflight;      /* WRITEs posted, not completed */
	struct fab_tag tag;     /* SRC_TAG_STATE */
	/* What a write costs the caller's thread (the copy, and on
	 * Soft-RoCE the post, which sends): one write_state call stays
	 * within half a step. */
	struct cost cost;
};

struct src_chan {
	struct fab_conn *conn;  /* chans[0] is ss.conn, not owned here */
	bool up;
};

/* Post-copy (src_pc).  The destination reads pieces of rp_shift bytes of
 * each block: pin-all's pieces, whose registration grows remote read
 * access, or (dynamic mode) pieces of our own, registered in order by the
 * helpers from the block map on.  The switch cuts keys and ranges into
 * scratch arrays sized at the block map to what fits a frame. */
struct src_pc {
	unsigned rp_shift;
	uint64_t n;             /* read pieces in all blocks */
	struct ibv_mr **mr;     /* dynamic mode's, n of them */
	uint64_t sub, got;      /* submitted to the helpers, registered */
	uint64_t pinned;        /* bytes of them registered now */
	unsigned key_block;     /* the next key to send: block, piece */
	uint64_t key_piece;
	struct pcset_cursor cur; /* the next range to cut */
	const uint64_t **set;   /* per block: the set (its sending bitmap) */
	uint64_t *npages;
	uint32_t *a32, *b32;
	uint64_t *a64, *b64;
	size_t keys_max, ranges_max;
	uint64_t pages;         /* in the set */
	int64_t start_ms;       /* when the last range went */
	int64_t qp_check_ms;
	/* POSTCOPY_RECOVER: the destination's resume token; how far a resume
	 * got; when the next one is tried; the data channels are gone for
	 * good after a pause (only post-copy's come back). */
	uint8_t token[PD_TOKEN_LEN];
	enum src_resume { RS_CONNECTING, RS_AUTH, RS_RESUME, RS_CHANNELS } resume;
	uint64_t left_at_resume;        /* as the destination's RESUMED said */
	int64_t next_try_ms;
	unsigned pauses;
	bool data_gone;
	/* The destination's ERROR, on the connection it proved the key on,
	 * said its guest never ran (rdmig_source_guest_never_ran()). */
	bool peer_never_ran;
};

struct rdmig_source {
	struct session ss;
	enum src_state state;
	enum src_prep prep;         /* the set-up thread's, while prep_out */
	/* The rounds' set-up is out on the set-up thread: until it is
	 * reaped the driving thread touches nothing it writes (the WRITE
	 * window wp, dreg, the sweep's pk and zr_* scratch, zsb, the posting
	 * and zero-check threads post and zs, post_cost, op_max, the flags
	 * saying they exist, prep, prep_us, prep_err) and writes nothing it
	 * reads (nchans, chans, ss.cfg, ss.caps, pieces, dblocks, nblocks,
	 * nslots, chunk_shift, peer_msg_max, dest_cap). */
	bool prep_out;
	atomic_bool prep_abandon;   /* the migration failed: skip the rest */
	struct worker setup;
	struct rd_err prep_err;     /* the set-up thread's own */
	int64_t prep_us[PREP_DONE]; /* what each part took */
	enum src_goal goal;
	enum src_step_end step_end;
	unsigned step_budget_us;    /* the step in progress's max_us */
	bool state_blocked;     /* the last write_state found no room */
	struct src_sring sring;
	int result;             /* what process() returns once failed */
	unsigned chunk_shift, slot_shift;
	char host[256], port[16];

	struct src_block *blocks;
	unsigned nblocks;
	uint64_t nslots;
	struct dreg_block *dblocks;

	/* setup */
	struct auth_bind bind;
	uint8_t challenge[AUTH_NONCE_LEN];
	uint32_t peer_msg_max;
	uint64_t dest_cap;
	/* The data channels (0..nchans-1, 0 being the control connection),
	 * then post-copy's (npc of them). */
	struct src_chan *chans;
	unsigned nchans, npc, chans_up;
	/* The first control connection after a post-copy pause: its PD holds
	 * every registration, so it stays until the handle goes. */
	struct fab_conn *conn0;
	uint32_t chan_port;
	uint64_t chan_token;

	/* Our registrations, done by a helper thread (regq.h), the control
	 * rings' first (REG_CTRL: 0 receive, 1 send). */
	struct regq rq;
	bool ctrl_submitted;
	/* pin-all: pieces are submitted in order; the next to submit, and how
	 * many came back registered */
	struct src_piece *pieces;
	uint64_t pieces_sub, pieces_local;

	/* rounds */
	struct dreg dreg;
	bool dreg_ready;
	struct wpipe wp;
	bool wp_ready;
	/* With several channels, each posts from a thread of its own. */
	struct wpost post;
	bool post_threads;
	/* With zero detection on a machine of several cores, helpers check
	 * pages for zeros ahead of the sweep. */
	struct zscan zs;
	struct zs_block *zsb;
	bool zs_on;
	struct src_sweep sweep;
	uint32_t iteration;     /* rounds acknowledged */
	uint64_t iter_bytes;    /* this round's page data */
	int64_t iter_start_ms;
	uint64_t last_iter_bytes, last_iter_ms;
	uint64_t iter_zero_base; /* zero pages found before this round */
	/* The last round whose end was handled (the log pulled), and when;
	 * the page bandwidth learned over the rounds (conv_learn_bw). */
	uint32_t round_ended;
	int64_t round_end_ms;
	uint64_t bw;
	/* The convergence advice (src_conv): the policy's memory of past
	 * rounds, the advice for the round it last decided on, and the
	 * throttle it advised (which the VMM applies). */
	struct conv conv;
	struct rdmig_advice advice;
	uint32_t advised;
	unsigned throttle;
	/* The policy's figures that may change while it runs, from any thread
	 * (rdmig_source_set_limit()), by enum rdmig_limit; the config's until
	 * then. */
	_Atomic uint64_t limits[SRC_LIMITS];
	/* Marking may come from any thread: the dirty bitmaps' swap and these
	 * counters are under mark_lock, and so is who drives the handle (whose
	 * marks may write the handle's error text). */
	pthread_mutex_t mark_lock;
	pthread_t driver;
	uint64_t dirty_bytes;   /* marked, not yet swept */
	uint64_t marked_since;  /* bytes marked since the last round began */
	int64_t marked_since_ms;
	uint64_t dirty_rate;
	uint32_t *zr_block;
	uint64_t *zr_offset, *zr_length;
	size_t zr_n, zr_max;
	uint64_t zr_bytes;      /* covered by the ranges gathered */
	struct pack pk;         /* PAGES: short runs in unregistered chunks */
	struct pace pace;       /* the bandwidth limit */
	/* What a step may start: posting costs time per byte (on Soft-RoCE
	 * the post sends the data), so WRITEs are cut to op_max and a step
	 * posts what fits in its time left; hashing likewise. */
	struct cost post_cost, hash_cost;
	uint64_t op_max;

	/* What landed (WRITEs completed, PAGES sent), for PROGRESS; and what
	 * the last PROGRESS said, and when. */
	uint64_t landed_bytes, landed_pages;
	uint64_t pk_pages;      /* in the PAGES being gathered */
	uint64_t told_bytes, told_skipped;
	int64_t told_ms;

	struct src_pc pc;

	/* completion: with VERIFY the image is hashed in steps first */
	uint8_t *digests;
	struct auth_digest_state *dig;
	unsigned dig_block;
	uint64_t dig_off;

	int64_t last_progress_ms;
	int64_t first_write_ms;
};

/* Every change of s->state goes through here, so the debug log has each
 * transition: a stuck migration then says where it stands. */
static inline void src_set_state(struct rdmig_source *s, enum src_state to)
{
	if (s->state != to)
		cfg_log(&s->ss.cfg, RDMIG_LOG_DEBUG, "source state: %s -> %s",
			src_state_names[s->state], src_state_names[to]);
	s->state = to;
}

#endif
