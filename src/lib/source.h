/* The source's insides, shared by source.c (the state machine and the
 * API), src_link.c (connecting, authenticating, the block map, data
 * channels, pin-all pieces) and src_iter.c (iterations, state, completion).
 * Nothing here is public. */
#ifndef RDMIG_SOURCE_H
#define RDMIG_SOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "blocks.h"
#include "dreg.h"
#include "pack.h"
#include "plan.h"
#include "regpool.h"
#include "session.h"
#include "wpipe.h"
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
	SRC_READY,      /* connected, between operations: state may be sent;
			 * pin-all pieces may still be pinning */
	SRC_ITERATING,  /* an iteration's pages are being planned and written */
	SRC_ITER_END,   /* every WRITE of it completed and ITER_END went; waiting
			 * for ITER_ACK */
	SRC_COMPLETING, /* COMPLETE sent; waiting for COMPLETE_ACK */
	SRC_COMPLETED,  /* the destination holds the whole image (terminal) */
	SRC_FAILED,     /* terminal; ss.err says why, the peer was told */
};

/* What the caller asked for; process() returns 1 when it is reached. */
enum src_goal { GOAL_NONE, GOAL_CONNECTED, GOAL_ITERATED, GOAL_COMPLETED };

enum { SRC_TAG_WRITE = 1 };

/* pin-all: pieces of PIECE_SHIFT bytes (at least a chunk) registered on
 * both sides ahead of the writes, one per step at most on each side. */
#define SRC_PIECE_SHIFT 24

struct src_piece {
	struct ibv_mr *mr;      /* ours */
	uint32_t rkey;          /* the destination's, from PIN_KEYS */
	bool remote;
};

struct src_block {
	struct blk_desc d;
	uint8_t *host;
	uint64_t npages, nslots;
	uint64_t *dirty;        /* marked for the next iteration */
	uint64_t *sending;      /* this iteration's, consumed by the sweep */
	uint64_t *written;      /* pages the destination holds non-zero data for */
	uint64_t first_slot;    /* dynamic: chunks; pin-all: pieces */
	uint64_t remote_base;
	bool dest_zeroed;
	bool cow;               /* private memory: pinned with write access */
};

/* The sweep of one iteration over the blocks' sending bitmaps. */
struct src_sweep {
	unsigned block;
	uint64_t cursor;        /* next page of that block */
	struct plan_op pending; /* a WRITE run still being cut into ops */
	bool have_pending;
	bool pending_packed;    /* ... or waiting for room in a PAGES message */
	bool done;              /* every block swept */
	uint64_t planned_bytes;
};

struct src_chan {
	struct fab_conn *conn;  /* chans[0] is ss.conn, not owned here */
	bool up;
};

struct rdmig_source {
	struct session ss;
	enum src_state state;
	enum src_goal goal;
	int result;             /* what process() returns once failed */
	unsigned chunk_shift, slot_shift;
	int epfd;               /* rdmig_source_fd() */
	char host[256], port[16];

	struct src_block *blocks;
	unsigned nblocks;
	uint64_t nslots;
	struct dreg_block *dblocks;

	/* setup */
	struct auth_bind bind;
	uint8_t challenge[AUTH_NONCE_LEN];
	bool auth_sent, map_sent;
	uint32_t peer_msg_max;
	uint64_t dest_cap;
	struct src_chan *chans;
	unsigned nchans, chans_up;
	uint32_t chan_port;
	uint64_t chan_token;

	/* pin-all */
	struct src_piece *pieces;
	uint64_t pieces_local;  /* registered in order: the next one to take */
	struct regpool reg;     /* the helpers that register them */

	/* iterations */
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
	uint32_t iteration;     /* iterations acknowledged */
	uint64_t iter_bytes;    /* this iteration's WRITEs */
	bool more;              /* the last step stopped with work left */
	/* The last step stopped at its cap with completions still in the CQ
	 * (not re-armed: the fd may stay quiet), and a connection event held
	 * back until the completions before it were handled. */
	bool cq_more;
	int cm_rc;
	bool goal_done;         /* the operation finished; process() not told */
	int64_t iter_start_ms;
	uint64_t last_iter_bytes, last_iter_ms;
	uint64_t dirty_bytes;   /* marked, not yet swept */
	uint64_t marked_since;  /* bytes marked since the last iteration began */
	int64_t marked_since_ms;
	uint64_t dirty_rate;
	uint32_t *zr_block;
	uint64_t *zr_offset, *zr_length;
	size_t zr_n, zr_max;
	uint64_t zr_bytes;      /* covered by the ranges gathered */
	struct pack pk;         /* PAGES: short runs in unregistered chunks */

	/* pacing */
	_Atomic uint64_t max_bandwidth;
	int64_t tok_ms;
	double tokens;

	/* completion: with VERIFY the image is hashed in steps first */
	uint8_t *digests;
	struct auth_digest_state *dig;
	unsigned dig_block;
	uint64_t dig_off;
	bool complete_sent;

	uint64_t ctrl_bytes_seen;
	int64_t last_progress_ms;
	int64_t last_wc_ms;
	int64_t first_write_ms;
};

/* src_link.c */
int src_link_start(struct rdmig_source *s, const char *host, const char *port);
int src_link_step(struct rdmig_source *s);
int src_pin_step(struct rdmig_source *s, int64_t until_us);
/* Whether src_pin_step has something to do now: helpers to start, or the
 * next piece registered (or failed). */
bool src_pin_ready(const struct rdmig_source *s);
int src_on_pin_keys(struct rdmig_source *s, const Rdmig__PinKeys *k);
int src_link_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m);
void src_link_destroy(struct rdmig_source *s);
int src_reg_local(struct rdmig_source *s, const struct src_block *b, uint64_t off,
		  uint64_t len, struct ibv_mr **mr);

/* src_iter.c */
int src_iter_setup(struct rdmig_source *s);
int src_iter_begin(struct rdmig_source *s);
/* The steps work until rd_now_us() passes @until_us, then finish the
 * operation in hand: see rdmig_source_step() in rdmig(3) for the bound. */
int src_iter_step(struct rdmig_source *s, uint64_t max_bytes, int64_t until_us);
int src_iter_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m);
int src_write_done(struct rdmig_source *s, const struct ibv_wc *wc);
int src_complete_begin(struct rdmig_source *s);
/* src_sweep.c: plans into the WRITE window until it is full, the sweep is
 * done, a message cannot go, rd_now_us() passed @until_us, or the page
 * data packed into PAGES used up *@budget (UINT64_MAX: none). */
int src_sweep_fill(struct rdmig_source *s, int64_t until_us, uint64_t *budget, bool *moved);
/* Page data that left, by WRITE or inside PAGES. */
void src_count_pages(struct rdmig_source *s, uint64_t pages, uint64_t bytes);
int src_complete_step(struct rdmig_source *s, int64_t until_us);
void src_iter_destroy(struct rdmig_source *s);
/* Stops the posting threads (the migration ended: completed or failed). */
void src_iter_stop_threads(struct rdmig_source *s);
/* Bytes the bandwidth limit lets go now (UINT64_MAX: no limit), and ms
 * until some may go again (0: now). */
uint64_t src_pacing_budget(struct rdmig_source *s);
int src_pacing_wait(const struct rdmig_source *s);
void src_paced(struct rdmig_source *s, uint64_t bytes);

/* source.c */
int src_fail(struct rdmig_source *s, int rc);
int src_watch(struct rdmig_source *s, int fd);
void src_unwatch(struct rdmig_source *s);
void src_fill_stats(void *role, struct rdmig_stats *st);
void src_publish(struct rdmig_source *s);

#endif
