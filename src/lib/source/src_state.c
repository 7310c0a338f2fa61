#include "src_state.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>

#include "privdata.h"
#include "src_int.h"

static bool ring_ready(const struct src_sring *r)
{
	return r->mr != NULL;
}

static void count(struct rdmig_source *s, size_t n)
{
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.state_bytes += n;
	pthread_mutex_unlock(&s->ss.stats.lock);
}

/* Before the ring is there (or without one): in the message itself. */
static ssize_t inline_write(struct rdmig_source *s, const void *data, size_t len)
{
	Rdmig__State st = RDMIG__STATE__INIT;
	size_t max = ctrl_state_max(s->peer_msg_max);
	int rc;

	st.data.data = (uint8_t *)(uintptr_t)data;
	st.data.len = len < max ? len : max;
	rc = ctrl_send(&s->ss.ch, CT_STATE, &st.base);
	if (rc)
		return rc == -EAGAIN ? 0 : rc;
	count(s, st.data.len);
	return (ssize_t)st.data.len;
}

/* How much of @len one ring write may take now: no more than the space
 * the destination gave back, than what is left before the ring's end (a
 * write never wraps), than SRC_STATE_WRITE_MAX. */
static size_t ring_fit(const struct src_sring *r, size_t len)
{
	uint64_t off = r->written & (r->lsize - 1);
	uint64_t n = r->lsize - (r->written - r->taken);

	/* Our copy divides the destination's ring (both powers of two), so a
	 * write that does not wrap ours does not wrap theirs. */
	if (n > r->lsize - off)
		n = r->lsize - off;
	if (n > SRC_STATE_WRITE_MAX)
		n = SRC_STATE_WRITE_MAX;
	return len < n ? len : (size_t)n;
}

static ssize_t ring_write(struct rdmig_source *s, const void *data, size_t len)
{
	struct src_sring *r = &s->sring;
	Rdmig__StateWritten w = RDMIG__STATE_WRITTEN__INIT;
	uint64_t off = r->written & (r->lsize - 1);
	uint64_t roff = r->written & (r->size - 1);
	size_t n = ring_fit(r, len);
	int64_t t0 = rd_now_us();
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	int rc;

	if (!n || r->inflight == SRC_STATE_WRITES || !ctrl_can_send(&s->ss.ch))
		return 0;
	/* No less than a small write, whatever the estimate: the stream
	 * must move. */
	n = (size_t)cost_bytes(&r->cost, s->ss.cfg.step_us / 2, n);
	if (n < SRC_STATE_WRITE_MIN)
		n = ring_fit(r, len < SRC_STATE_WRITE_MIN ? len : SRC_STATE_WRITE_MIN);
	memcpy(r->buf + off, data, n);
	sge = (struct ibv_sge){ .addr = (uintptr_t)(r->buf + off), .length = (uint32_t)n,
				.lkey = r->mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = fab_wr_id(&r->tag), .sg_list = &sge,
				   .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = r->raddr + roff;
	wr.wr.rdma.rkey = r->rkey;
	/* The announcement follows the WRITE on the same queue pair: the
	 * destination sees it only once the bytes are in its ring. */
	rc = fab_post_send(s->ss.conn, &wr);
	if (rc)
		return rc;
	r->inflight++;
	w.length = (uint32_t)n;
	rc = ctrl_send(&s->ss.ch, CT_STATE_WRITTEN, &w.base);
	if (rc)
		return rc == -EAGAIN ? rd_err_set(&s->ss.err, -EPROTO, "no credit to announce "
						  "device state written") : rc;
	r->written += n;
	count(s, n);
	cost_learn(&r->cost, n, (rd_now_us() - t0) * 1000);
	return (ssize_t)n;
}

ssize_t src_state_write(struct rdmig_source *s, const void *data, size_t len)
{
	uint64_t max = s->ss.cfg.state_max, sent = s->ss.stats.st.state_bytes;

	if (s->state < SRC_READY || s->state > SRC_ITER_END)
		return rd_err_set(&s->ss.err, -ENOTCONN, "device state needs a connection "
				  "before completion");
	/* Only this thread writes the count. */
	if (max != RDMIG_STATE_UNSAID && len > max - sent)
		return rd_err_set(&s->ss.err, -EFBIG, "%zu more bytes of device state after %"
				  PRIu64 " would pass the %" PRIu64 " announced (state_max)", len,
				  sent, max);
	if (!len || !ctrl_can_send(&s->ss.ch))
		return 0;
	return ring_ready(&s->sring) ? ring_write(s, data, len) : inline_write(s, data, len);
}

bool src_state_room(const struct rdmig_source *s)
{
	const struct src_sring *r = &s->sring;

	if (!ctrl_can_send(&s->ss.ch))
		return false;
	return !ring_ready(r) || (r->inflight < SRC_STATE_WRITES && ring_fit(r, 1));
}

static int on_ring(struct rdmig_source *s, const Rdmig__StateRing *m)
{
	struct src_sring *r = &s->sring;

	if (!(s->ss.caps & PD_CAP_STATE_RING) || r->size)
		return rd_err_set(&s->ss.err, -EPROTO, "STATE_RING %s", r->size ? "a second time" :
				  "without the capability");
	/* An honest destination offers its ring once it runs, after its
	 * BLOCK_MAP_RESP: before that it has not proved the key, and nothing
	 * of ours is registered for a host that has not. */
	if (s->state < SRC_CHANNELS)
		return rd_err_set(&s->ss.err, -EPROTO, "STATE_RING before the block map's answer "
				  "(the destination has not proved the key yet)");
	r->raddr = m->addr;
	r->rkey = m->rkey;
	r->size = m->size;
	/* Completing or switched: no state will be written any more. */
	if (s->state > SRC_ITER_END)
		return 0;
	/* What we pin for it is ours to bound, whatever the destination
	 * offers. */
	r->lsize = m->size < SRC_STATE_RING_MAX ? m->size : SRC_STATE_RING_MAX;
	r->tag.kind = SRC_TAG_STATE;
	/* Soft-RoCE's post under emulation, as the page WRITEs start. */
	cost_init(&r->cost, 20.0);
	return src_state_step(s);
}

static int on_taken(struct rdmig_source *s, const Rdmig__StateTaken *m)
{
	struct src_sring *r = &s->sring;

	if (!r->size || m->taken < r->taken || m->taken > r->written)
		return rd_err_set(&s->ss.err, -EPROTO, "STATE_TAKEN %" PRIu64 " outside %" PRIu64
				  "..%" PRIu64 " (taken before .. written)", m->taken, r->taken,
				  r->written);
	r->taken = m->taken;
	return 0;
}

int src_state_msg(struct rdmig_source *s, const struct ctrl_hdr *h, const ProtobufCMessage *m)
{
	if (h->type == CT_STATE_RING)
		return on_ring(s, (const Rdmig__StateRing *)m);
	return on_taken(s, (const Rdmig__StateTaken *)m);
}

int src_state_write_done(struct rdmig_source *s, const struct ibv_wc *wc)
{
	if (wc->status != IBV_WC_SUCCESS)
		return fab_wc_error(s->ss.conn, wc, "RDMA WRITE of device state");
	if (!s->sring.inflight)
		return rd_err_set(&s->ss.err, -EPROTO, "a device-state WRITE completed twice");
	s->sring.inflight--;
	return 0;
}

int src_state_reg_done(struct rdmig_source *s, const struct regq_job *j)
{
	struct rd_err e;

	if (!j->rc) {
		s->sring.mr = j->mr;
		return 0;
	}
	/* Not fatal: the state goes in control messages, slower. */
	fab_reg_error(&e, j->rc, j->len);
	cfg_log(&s->ss.cfg, RDMIG_LOG_WARN, "device state goes in control messages: the "
		"ring could not be registered: %s", e.msg);
	s->sring.failed = true;
	return 0;
}

int src_state_step(struct rdmig_source *s)
{
	struct src_sring *r = &s->sring;
	int rc;

	if (!r->lsize || r->submitted || r->failed)
		return 0;
	/* For writing, though only read from: untouched private memory
	 * pinned read-only may pin the shared zero page on older kernels, and
	 * our copies would then land beside what the WRITEs send (src_mem.c,
	 * private_memory). */
	rc = regq_submit(&s->rq, r->buf, r->lsize, IBV_ACCESS_LOCAL_WRITE, -1,
			 SRC_REG_COOKIE(REG_STATE, 0), &s->ss.err);
	r->submitted = rc == 0;
	/* The helpers' queue is full of pin-all pieces: the next step. */
	return rc == -EAGAIN ? 0 : rc;
}

int src_state_init(struct rdmig_source *s)
{
	/* Address space only: its pages come when the helper registers the
	 * part the destination's ring needs (lsize). */
	void *p = mmap(NULL, SRC_STATE_RING_MAX, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return rd_err_set(&s->ss.err, -ENOMEM, "cannot map %u bytes for the "
				  "device-state ring", SRC_STATE_RING_MAX);
	s->sring.buf = p;
	return 0;
}

void src_state_destroy(struct rdmig_source *s)
{
	struct src_sring *r = &s->sring;

	if (r->mr)
		ibv_dereg_mr(r->mr);
	if (r->buf)
		munmap(r->buf, SRC_STATE_RING_MAX);
	*r = (struct src_sring){ 0 };
}
