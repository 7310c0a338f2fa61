/* chan: the extra data channels of a multi-channel migration.
 *
 * Channel 0 is the control connection.  With MULTI_CHANNEL granted, the
 * destination listens beside it (same address, a port the kernel picks) and
 * names that port and a random token in BLOCK_MAP_RESP, which only an
 * authenticated source receives.  The source opens channels 1..n-1 carrying
 * the token as the session id of their connect private data.  Their QPs
 * share the control connection's PD, so every rkey is valid on every
 * channel, and its CQ, so one poll loop sees every completion.  Channels
 * carry only RDMA WRITEs: the destination posts nothing on them and learns
 * of their data through the control channel, which the source uses only
 * once every WRITE of the iteration has completed.
 *
 * With POSTCOPY the same listener takes the post-copy channels too: the
 * indexes after the data channels, two of them, on which the destination
 * RDMA READs the pages its guest lacks from the source's memory (one for
 * the faults, one for the background pass, so a fault never queues behind
 * bulk READs on a queue pair).  Their requests carry POSTCOPY instead of
 * MULTI_CHANNEL; on the destination they have a completion queue of their
 * own, the post-copy thread's, and each side offers READ resources on
 * them (fabric.h, reads). */
#ifndef RDMIG_CHAN_H
#define RDMIG_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fabric.h"

/* ---- destination ---- */

struct chan_set;

/* Listens beside @ctrl for up to @max data channels (1..PD_CHANNELS_MAX -
 * CHAN_PC_MAX, the control connection included) and the post-copy
 * channels.  The listener's fd stays the same until chan_set_destroy(). */
int chan_set_open(struct chan_set **out, struct fab_conn *ctrl, unsigned max,
		  struct rd_err *err);
int chan_set_fd(const struct chan_set *cs);
/* Fixes how many data channels the source may open (@n, at most max) and
 * returns that count, with the port and token BLOCK_MAP_RESP announces;
 * @pc post-copy channels (0 or CHAN_PC) follow them. */
unsigned chan_set_grant(struct chan_set *cs, unsigned n, unsigned pc, uint32_t *port,
			uint64_t *token);
/* The post-copy channels, as many as rdmig(7) has: one for faults, one
 * for the background pass. */
#define CHAN_PC 2
#define CHAN_PC_MAX CHAN_PC
/* Where the post-copy channels' completions go (the post-copy thread's
 * CQ), and how many READs each posts at most; before they are granted. */
void chan_set_pc_cq(struct chan_set *cs, struct ibv_cq *cq, uint32_t sq_depth);
/* Post-copy channel @i (0..@pc-1 of the grant), or NULL while it is not
 * accepted. */
struct fab_conn *chan_set_pc_conn(const struct chan_set *cs, unsigned i);
/* Handles pending events: accepts channels that present the token from the
 * control connection's peer, rejects anything else (with a reason for the
 * log in @note), stops listening once all granted channels are up.
 * Returns 0, or -errno when a connected channel broke (@err says which). */
int chan_set_process(struct chan_set *cs, char *note, size_t note_len,
		     struct rd_err *err);
void chan_set_disconnect(struct chan_set *cs);
/* The post-copy channels' QPs to the error state (the link broke): the
 * READs on them flush at once. */
void chan_set_break_pc(struct chan_set *cs);
/* Before the control connection: the channels share its PD and CQ. */
void chan_set_destroy(struct chan_set *cs);

/* The admission rule, apart from any connection so it can be fuzzed: which
 * channel a request with private data @priv may become (1..@granted-1), or
 * 0 with the reason in @note.  It must carry @token (never 0) as its
 * session id, come from the control connection's peer (@same_peer), name
 * @granted channels (data and post-copy together), ask for one not yet
 * open (bit i of @open), and carry POSTCOPY exactly when its index is
 * @pc_first or above (a post-copy channel). */
unsigned chan_admit(const void *priv, size_t priv_len, uint64_t token, unsigned granted,
		    unsigned pc_first, bool same_peer, uint64_t open, char *note, size_t len);

/* ---- source ---- */

/* Starts opening channel @idx of @n to @port on the address @ctrl is
 * connected to, sharing @ctrl's PD and CQ; drive it with fab_connect_step()
 * on *out (which is set even when this fails: destroy it), then
 * chan_connect_finish() with the step's final result: 0 once it is a
 * channel of this migration, or -errno with @err saying why (a refusal,
 * with the destination's reason).  @pc: a post-copy channel, which the
 * destination reads from (our READ resources offered). */
int chan_connect_start(struct fab_conn **out, struct fab_conn *ctrl, uint32_t port,
		       uint64_t token, unsigned idx, unsigned n, uint32_t sq_depth, bool pc,
		       int64_t deadline, struct rd_err *err);
int chan_connect_finish(struct fab_conn *c, unsigned idx, bool pc, int step_rc,
			struct rd_err *err);

#endif
