#include "ctrl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rdmig.pb-c.h"

/* The NIC (or rxe in the kernel) fills receive buffers behind valgrind's
 * back; tell it the bytes are defined so runs under valgrind stay quiet. */
#ifdef RDMIG_HAVE_VALGRIND
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MAKE_MEM_DEFINED(p, n) ((void)(p), (void)(n))
#endif

static int post_rx(struct ctrl *ch, uint32_t i)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(ch->rbuf + (size_t)i * ch->msg_max),
			       .length = ch->msg_max, .lkey = ch->rmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = fab_wr_id(&ch->rx[i].tag), .sg_list = &sge,
				  .num_sge = 1 };
	return fab_post_recv(ch->conn, &wr);
}

/* Faulted in here, so that registering the rings later pins present pages
 * (a fraction of a millisecond) instead of zeroing them, which under
 * emulation took 10-20 ms of the call that registered them.  Not beyond
 * CTRL_POPULATE_MAX: limits raised that far (up to 16 GiB a ring) would
 * have the memory come in here, with the OOM killer as the answer when
 * it is not there, where the registration would fail with an error. */
#define CTRL_POPULATE_MAX (64u << 20)

static void *ring_map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (len <= CTRL_POPULATE_MAX ? MAP_POPULATE : 0),
		       -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

int ctrl_alloc(struct ctrl *ch, uint32_t depth, uint32_t msg_max, struct rd_err *err)
{
	size_t rsize = (size_t)depth * msg_max;

	memset(ch, 0, sizeof(*ch));
	ch->depth = depth;
	ch->msg_max = msg_max;
	ch->err = err;
	ch->rx = calloc(depth, sizeof(*ch->rx));
	ch->rbuf = ring_map(rsize);
	ch->sbuf = ring_map(rsize);
	if (!ch->rx || !ch->rbuf || !ch->sbuf)
		return rd_err_set(err, -ENOMEM, "out of memory for the control rings (2 x %zu "
				  "bytes)", rsize);
	return arena_init(&ch->arena, ctrl_arena_size(msg_max), err);
}

int ctrl_prepare(struct ctrl *ch, struct fab_conn *conn, uint32_t depth,
		 uint32_t msg_max, struct rd_err *err)
{
	int rc = 0;

	/* A handle connects once, so the rings come to it unused. */
	if (!ch->rbuf || !ch->sbuf || !ch->rx || ch->depth != depth || ch->msg_max != msg_max) {
		ctrl_fini(ch);
		rc = ctrl_alloc(ch, depth, msg_max, err);
	}
	/* The connection's failures are this channel's owner's too. */
	fab_conn_set_err(conn, err);
	ch->conn = conn;
	ch->err = err;
	return rc;
}

size_t ctrl_ring_bytes(const struct ctrl *ch)
{
	return (size_t)ch->depth * ch->msg_max;
}

int ctrl_post_receives(struct ctrl *ch)
{
	uint32_t i;
	int rc;

	for (i = 0; i < ch->depth; i++) {
		ch->rx[i].tag.kind = CTRL_TAG_RECV;
		ch->rx[i].idx = i;
		rc = post_rx(ch, i);
		if (rc)
			return rc;
	}
	ch->last_recv_ms = ch->last_send_ms = rd_now_ms();
	return 0;
}

int ctrl_init(struct ctrl *ch, struct fab_conn *conn, uint32_t depth,
	      uint32_t msg_max, struct rd_err *err)
{
	int rc = ctrl_prepare(ch, conn, depth, msg_max, err);

	if (!rc)
		rc = fab_reg_mr(conn, ch->rbuf, ctrl_ring_bytes(ch), IBV_ACCESS_LOCAL_WRITE,
				&ch->rmr);
	return rc ? rc : ctrl_post_receives(ch);
}

int ctrl_rebind(struct ctrl *ch, struct fab_conn *conn)
{
	uint32_t i;

	if (!ch->rmr || !ch->rx)
		return rd_err_set(ch->err, -EINVAL, "the control channel has no rings to rebind");
	/* What went out on the old connection is gone with it; the send
	 * slots are cut again from the new peer's limits at the next send
	 * (the send ring was registered for the old ones, which the new must
	 * not exceed: ctrl_start() keeps them). */
	for (i = 0; ch->tx && i < ch->ntx; i++)
		ch->tx[i].busy = false;
	fab_conn_set_err(conn, ch->err);
	ch->conn = conn;
	ch->credits = 0;
	ch->to_return = 0;
	return ctrl_post_receives(ch);
}

void ctrl_start(struct ctrl *ch, uint32_t peer_depth, uint32_t peer_msg_max)
{
	ch->peer_depth = peer_depth;
	/* Our send ring is sized from this: never beyond our own limit, so a
	 * peer (authenticated or not) can only lower what we pin for it. */
	ch->peer_msg_max = peer_msg_max < ch->msg_max ? peer_msg_max : ch->msg_max;
	ch->credits = peer_depth;
}

/* Send slots are cut from the peer's limits, so they are made when those
 * are known (first send).  Registered here only the part of the send ring
 * they need, unless the caller registered all of it ahead (ctrl_prepare):
 * a destination pins no more for a source than it asked for. */
static int alloc_tx(struct ctrl *ch)
{
	uint32_t i;
	int rc;

	if (ch->tx)
		return 0;
	/* The send queue was sized for our own depth of control sends. */
	ch->ntx = ch->peer_depth < ch->depth ? ch->peer_depth : ch->depth;
	ch->tx = calloc(ch->ntx, sizeof(*ch->tx));
	if (!ch->tx)
		return rd_err_set(ch->err, -ENOMEM, "out of memory for control buffers");
	if (!ch->smr) {
		/* For writing, though the NIC only reads it: untouched memory
		 * pinned read-only may pin the shared zero page on older
		 * kernels, and our frames would land beside it. */
		rc = fab_reg_mr(ch->conn, ch->sbuf, (size_t)ch->ntx * ch->peer_msg_max,
				IBV_ACCESS_LOCAL_WRITE, &ch->smr);
		if (rc) {
			free(ch->tx);
			ch->tx = NULL;
			return rc;
		}
	}
	for (i = 0; i < ch->ntx; i++) {
		ch->tx[i].tag.kind = CTRL_TAG_SEND;
		ch->tx[i].idx = i;
	}
	return 0;
}

void ctrl_fini(struct ctrl *ch)
{
	if (ch->rmr)
		ibv_dereg_mr(ch->rmr);
	if (ch->smr)
		ibv_dereg_mr(ch->smr);
	if (ch->rbuf)
		munmap(ch->rbuf, ctrl_ring_bytes(ch));
	if (ch->sbuf)
		munmap(ch->sbuf, ctrl_ring_bytes(ch));
	free(ch->rx);
	free(ch->tx);
	arena_fini(&ch->arena);
	memset(ch, 0, sizeof(*ch));
}

static int free_slot(struct ctrl *ch)
{
	uint32_t i;

	for (i = 0; i < ch->ntx; i++)
		if (!ch->tx[i].busy)
			return (int)i;
	return -1;
}

uint32_t ctrl_room(const struct ctrl *ch)
{
	uint32_t i, free = 0;

	/* One credit stays in reserve for CREDIT and ERROR. */
	if (ch->credits < 2)
		return 0;
	if (!ch->tx)
		return ch->credits - 1;
	for (i = 0; i < ch->ntx; i++)
		free += !ch->tx[i].busy;
	return free < ch->credits - 1 ? free : ch->credits - 1;
}

bool ctrl_can_send(const struct ctrl *ch)
{
	return ctrl_room(ch) > 0;
}

/* Regular frames keep one credit in reserve; CREDIT and ERROR may use it. */
static int post_frame(struct ctrl *ch, unsigned type, const ProtobufCMessage *msg,
		      uint32_t min_credits)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	int slot, len, rc;

	if (!ch->peer_depth)
		return rd_err_set(ch->err, -ENOTCONN, "control channel not started");
	rc = alloc_tx(ch);
	if (rc)
		return rc;
	if (ch->credits < min_credits)
		return -EAGAIN;
	slot = free_slot(ch);
	if (slot < 0)
		return -EAGAIN;
	len = ctrl_encode(type, (uint16_t)(ch->to_return > UINT16_MAX ? UINT16_MAX : ch->to_return),
			  msg, ch->sbuf + (size_t)slot * ch->peer_msg_max, ch->peer_msg_max,
			  ch->err);
	if (len < 0)
		return len;
	sge = (struct ibv_sge){ .addr = (uintptr_t)(ch->sbuf + (size_t)slot * ch->peer_msg_max),
				.length = (uint32_t)len, .lkey = ch->smr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = fab_wr_id(&ch->tx[slot].tag), .sg_list = &sge,
				   .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	rc = fab_post_send(ch->conn, &wr);
	if (rc)
		return rc;
	ch->tx[slot].busy = true;
	ch->credits--;
	ch->to_return -= ch->to_return > UINT16_MAX ? UINT16_MAX : ch->to_return;
	ch->sent++;
	ch->bytes_sent += (uint64_t)len;
	ch->last_send_ms = rd_now_ms();
	return 0;
}

int ctrl_send(struct ctrl *ch, unsigned type, const ProtobufCMessage *msg)
{
	return post_frame(ch, type, msg, 2);
}

static void flush_sends(struct ctrl *ch, int wait_ms)
{
	int64_t deadline = rd_deadline(wait_ms);
	struct ibv_wc wc;
	struct ctrl_slot *slot;

	while (ctrl_sends_busy(ch) && fab_poll_wait(ch->conn, &wc, 1, deadline, -1) > 0) {
		if (!ctrl_owns(&wc))
			continue;
		slot = rd_container_of(fab_tag_of(&wc), struct ctrl_slot, tag);
		if (slot->tag.kind == CTRL_TAG_SEND)
			slot->busy = false;
	}
}

void ctrl_send_error(struct ctrl *ch, int code, const char *message, bool guest_never_ran,
		     int wait_ms)
{
	Rdmig__Error e = RDMIG__ERROR__INIT;
	char buf[1024];
	struct rd_err scratch, *saved = ch->err, *saved_conn = ch->conn ? ch->conn->err : NULL;

	/* An accepted QP can send before the ESTABLISHED event is seen. */
	if (!ch->peer_depth || !ch->conn ||
	    (ch->conn->state != FAB_CONNECTED && ch->conn->state != FAB_ACCEPTING))
		return;
	snprintf(buf, sizeof(buf), "%s", message);
	e.code = code;
	e.message = buf;
	e.guest_never_ran = guest_never_ran;
	/* Failure to tell the peer must not overwrite the error being reported
	 * (the message itself may be that error's text). */
	ch->err = &scratch;
	fab_conn_set_err(ch->conn, &scratch);
	if (post_frame(ch, CT_ERROR, &e.base, 1) == 0)
		flush_sends(ch, wait_ms);
	ch->err = saved;
	fab_conn_set_err(ch->conn, saved_conn);
}

int ctrl_return_credits(struct ctrl *ch, bool force)
{
	int rc;

	if (!ch->peer_depth || ch->to_return == 0)
		return 0;
	if (!force && ch->to_return < ch->depth / 2)
		return 0;
	rc = post_frame(ch, CT_CREDIT, NULL, 1);
	return rc == -EAGAIN ? 0 : rc;
}

int ctrl_keepalive(struct ctrl *ch)
{
	int rc = post_frame(ch, CT_KEEPALIVE, NULL, 2);

	return rc == -EAGAIN ? 0 : rc;
}

bool ctrl_owns(const struct ibv_wc *wc)
{
	uint32_t k = fab_tag_of(wc)->kind;

	return k == CTRL_TAG_RECV || k == CTRL_TAG_SEND;
}

uint32_t ctrl_sends_busy(const struct ctrl *ch)
{
	uint32_t i, n = 0;

	for (i = 0; i < ch->ntx; i++)
		n += ch->tx[i].busy;
	return n;
}

int ctrl_complete(struct ctrl *ch, const struct ibv_wc *wc, struct ctrl_hdr *hdr,
		  ProtobufCMessage **msg)
{
	struct ctrl_slot *slot = rd_container_of(fab_tag_of(wc), struct ctrl_slot, tag);
	int rc;

	*msg = NULL;
	if (slot->tag.kind == CTRL_TAG_SEND)
		slot->busy = false;
	if (wc->status != IBV_WC_SUCCESS)
		return fab_wc_error(ch->conn, wc, slot->tag.kind == CTRL_TAG_SEND ?
				    "control SEND" : "control RECV");
	if (slot->tag.kind == CTRL_TAG_SEND)
		return 0;
	if (wc->byte_len <= ch->msg_max)
		VALGRIND_MAKE_MEM_DEFINED(ch->rbuf + (size_t)slot->idx * ch->msg_max, wc->byte_len);
	rc = ctrl_decode(ch->rbuf + (size_t)slot->idx * ch->msg_max, wc->byte_len,
			 ch->msg_max, &ch->arena, hdr, msg, ch->err);
	if (rc)
		return rc;
	/* A peer returning more credits than it could ever owe is lying. */
	if ((uint64_t)ch->credits + hdr->credits > ch->peer_depth) {
		ctrl_msg_done(ch, *msg);
		*msg = NULL;
		return rd_err_set(ch->err, -EPROTO,
				  "peer returned %u credits, more than its %u receive buffers allow",
				  hdr->credits, ch->peer_depth);
	}
	ch->credits += hdr->credits;
	ch->received++;
	ch->last_recv_ms = rd_now_ms();
	rc = post_rx(ch, slot->idx);
	if (rc) {
		ctrl_msg_done(ch, *msg);
		*msg = NULL;
		return rc;
	}
	ch->to_return++;
	return 1;
}

void ctrl_msg_done(struct ctrl *ch, ProtobufCMessage *msg)
{
	ctrl_msg_free(&ch->arena, msg);
}
