/* ctrl: the control channel over SEND/RECV.
 *
 * Receive buffers are pre-posted before the connection exists and re-posted
 * as soon as a message has been decoded, so a sender never waits for a READY
 * round trip.  Flow control is by credits: a SEND may only be posted while
 * the peer is known to have a free receive buffer.  Every frame returns the
 * buffers this side re-posted since its previous frame; the last credit is
 * kept for CREDIT (and ERROR) frames so neither side can starve the other
 * (see rdmig(7), "Flow control"). */
#ifndef RDMIG_CTRL_H
#define RDMIG_CTRL_H

#include <protobuf-c/protobuf-c.h>

#include "arena.h"
#include "codec.h"
#include "fabric.h"

enum { CTRL_TAG_RECV = 0x100, CTRL_TAG_SEND = 0x101 };

struct ctrl_slot {
	struct fab_tag tag; /* CTRL_TAG_RECV or CTRL_TAG_SEND */
	uint32_t idx;
	bool busy;          /* send slot posted and not yet completed */
};

struct ctrl {
	struct fab_conn *conn;
	uint32_t depth;       /* our receive buffers */
	uint32_t msg_max;     /* size of each of our receive buffers */
	uint32_t peer_depth;
	uint32_t peer_msg_max;
	uint8_t *rbuf, *sbuf;
	struct ibv_mr *rmr, *smr;
	struct ctrl_slot *rx, *tx;
	uint32_t ntx;
	uint32_t credits;     /* SENDs the peer can still receive */
	uint32_t to_return;   /* our buffers re-posted since our last frame */
	uint64_t sent, received, bytes_sent;
	int64_t last_send_ms, last_recv_ms;
	/* Received messages are unpacked here; allocated with the receive
	 * buffers so that the data path's messages cost no malloc. */
	struct arena arena;
	struct rd_err *err;
};

/* Ties the rings to @conn (allocating them if ctrl_alloc did not with
 * these limits), registers the receive ring and posts every receive (the send ring is registered at the first send, as far as the
 * peer's limits need).  Call after the QP exists and before the connection
 * is accepted/established. */
int ctrl_init(struct ctrl *ch, struct fab_conn *conn, uint32_t depth,
	      uint32_t msg_max, struct rd_err *err);
/* Allocates the receive and the send ring (depth * msg_max bytes each, the
 * send ring at our own limits since the peer's may only be lower), with
 * their pages present: a handle calls it at its creation, so that no step
 * later pays for faulting them in (10-20 ms under emulation for 2 MiB) or
 * waits to map them while other threads pin memory. */
int ctrl_alloc(struct ctrl *ch, uint32_t depth, uint32_t msg_max, struct rd_err *err);
/* ctrl_init in two parts, for a caller whose registrations run on a
 * helper thread: ctrl_prepare ties the rings ctrl_alloc made (or makes
 * them, when it was not called with these limits) to @conn; the caller
 * registers ch->rbuf for
 * local writing into ch->rmr and ch->sbuf (for local writing too: see
 * alloc_tx) into ch->smr, each
 * ctrl_ring_bytes() long; then ctrl_post_receives posts every receive,
 * still before the connection is established. */
int ctrl_prepare(struct ctrl *ch, struct fab_conn *conn, uint32_t depth,
		 uint32_t msg_max, struct rd_err *err);
size_t ctrl_ring_bytes(const struct ctrl *ch);
int ctrl_post_receives(struct ctrl *ch);
/* The same rings on a new connection @conn, whose QP shares the PD they
 * are registered on (a resumed post-copy): no send is in flight any more,
 * every receive is posted again, and there is no credit until
 * ctrl_start() with the new peer's limits.  0 or a negative errno. */
int ctrl_rebind(struct ctrl *ch, struct fab_conn *conn);
/* Deregisters and frees; the QP must be gone or idle. */
void ctrl_fini(struct ctrl *ch);
/* Starts flow control once the peer's depth and buffer size are known.
 * Frames sent are at most min(@peer_msg_max, our own msg_max) bytes: read
 * the result from ch->peer_msg_max. */
void ctrl_start(struct ctrl *ch, uint32_t peer_depth, uint32_t peer_msg_max);

/* True when a regular frame can be posted now. */
bool ctrl_can_send(const struct ctrl *ch);
/* How many regular frames could go now (credits and free send slots). */
uint32_t ctrl_room(const struct ctrl *ch);
/* Posts one frame; -EAGAIN when no credit or send slot is free (progress
 * completions and retry), -EMSGSIZE when it does not fit the peer. */
int ctrl_send(struct ctrl *ch, unsigned type, const ProtobufCMessage *msg);
/* Best effort: an ERROR frame using the reserved credit when needed, given
 * up to @wait_ms to leave before the caller tears the connection down
 * (a disconnect would flush it unsent).  Other completions are dropped.
 * @guest_never_ran: a destination's word that its guest has not run. */
void ctrl_send_error(struct ctrl *ch, int code, const char *message, bool guest_never_ran,
		     int wait_ms);
/* Sends a CREDIT frame when enough buffers were re-posted (or @force and
 * any were) and no regular traffic will carry them soon. */
int ctrl_return_credits(struct ctrl *ch, bool force);
int ctrl_keepalive(struct ctrl *ch);

/* Handles a completion whose tag is one of ours.  For a receive, decodes
 * the frame into *hdr and *msg (NULL for header-only frames), takes the
 * returned credits and re-posts the buffer; returns 1 when a message was
 * delivered, 0 for send completions, negative errno on failure.  The
 * message lives in the channel's arena: hand it back with ctrl_msg_done. */
int ctrl_complete(struct ctrl *ch, const struct ibv_wc *wc, struct ctrl_hdr *hdr,
		  ProtobufCMessage **msg);
/* Frees a message ctrl_complete delivered (NULL is fine). */
void ctrl_msg_done(struct ctrl *ch, ProtobufCMessage *msg);
bool ctrl_owns(const struct ibv_wc *wc);
/* Number of sends posted and not yet completed. */
uint32_t ctrl_sends_busy(const struct ctrl *ch);

#endif
