/* src_iter: iterations, device state and completion, in bounded steps.
 *
 * An iteration freezes what was marked dirty (the sending bitmaps) and
 * sweeps it into the WRITE window: runs of data pages become WRITEs cut at
 * chunk boundaries, zero pages become ZERO_RANGES (or nothing, when the
 * destination holds them as zero already).  Each step plans while the
 * window has room, asks for registrations ahead (dynamic mode), posts what
 * is ready within the step's budget and the bandwidth limit, and once every
 * WRITE of the iteration completed sends ITER_END.  The sweep reads a
 * bounded amount per step, so a step's time stays bounded too. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "codec.h"
#include "privdata.h"
#include "source.h"

/* Zero runs are cut here so one plan call reads at most this much. */
/* Bytes hashed per step for VERIFY. */
#define DIGEST_STEP (1u << 20)

/* ---- registration: where an op goes ------------------------------------------- */

static int wp_target_cb(void *ctx, uint64_t pos, const struct wp_op *op, struct wp_target *t)
{
	struct rdmig_source *s = ctx;
	const struct src_block *b = &s->blocks[op->block];

	if (s->pieces) {
		const struct src_piece *p = &s->pieces[op->slot];

		if (!p->mr || !p->remote)
			return 0;
		t->lkey = p->mr->lkey;
		t->rkey = p->rkey;
	} else if (!dreg_ready(&s->dreg, pos, op, &t->lkey, &t->rkey)) {
		return 0;
	}
	t->local_addr = (uintptr_t)(b->host + op->offset);
	t->remote_addr = b->remote_base + op->offset;
	return 1;
}

static int wp_post_cb(void *ctx, unsigned chan, struct ibv_send_wr *wr)
{
	struct rdmig_source *s = ctx;
	struct fab_conn *c = s->chans[chan].conn;
	int rc;

	if (s->post_threads) {
		wpost_submit(&s->post, chan, wr);
		return 0;
	}
	rc = fab_post_send(c, wr);

	if (rc) {
		memcpy(s->ss.err.msg, c->err.msg, sizeof(s->ss.err.msg));
		if (chan)
			rd_err_prefix(&s->ss.err, rc, "data channel %u", chan);
	}
	return rc;
}

static bool wp_room_cb(void *ctx, unsigned chan)
{
	struct rdmig_source *s = ctx;

	return wpost_room(&s->post, chan);
}

static void wp_done_cb(void *ctx, const struct wp_op *op)
{
	struct rdmig_source *s = ctx;

	if (!s->pieces)
		dreg_op_done(&s->dreg, op);
}

static int dreg_reg_cb(void *ctx, unsigned block, uint64_t off, uint64_t len, void **mr,
		       uint32_t *lkey)
{
	struct rdmig_source *s = ctx;
	struct ibv_mr *m;
	int rc = src_reg_local(s, &s->blocks[block], off, len, &m);

	if (rc)
		return rc;
	*mr = m;
	*lkey = m->lkey;
	return 0;
}

static void dreg_dereg_cb(void *ctx, void *mr)
{
	(void)ctx;
	ibv_dereg_mr(mr);
}

static uint64_t effective_cap(const struct rdmig_source *s)
{
	uint64_t cap = s->ss.cfg.pinned_cap;

	if (s->dest_cap && (!cap || s->dest_cap < cap))
		cap = s->dest_cap;
	return cap;
}

int src_iter_setup(struct rdmig_source *s)
{
	static const struct wp_callbacks wcb = { wp_target_cb, wp_post_cb, wp_done_cb, NULL };
	static const struct wp_callbacks threaded = { wp_target_cb, wp_post_cb, wp_done_cb,
						      wp_room_cb };
	static const struct dreg_callbacks dcb = { dreg_reg_cb, dreg_dereg_cb };
	struct ibv_qp *qps[PD_CHANNELS_MAX];
	uint64_t cap = effective_cap(s);
	unsigned k;
	int rc;

	/* One channel posts from the driving thread (nothing to overlap it
	 * with but the planning); several post from a thread each, so their
	 * sending work runs on as many cores. */
	if (s->nchans > 1) {
		for (k = 0; k < s->nchans; k++)
			qps[k] = fab_qp(s->chans[k].conn);
		rc = wpost_start(&s->post, qps, s->nchans, s->ss.cfg.max_writes, WP_BATCH,
				 s->ss.wake_fd, &s->ss.err);
		if (rc)
			return rc;
		s->post_threads = true;
	}
	rc = wp_init(&s->wp, s->nchans, s->ss.cfg.max_writes, SRC_TAG_WRITE,
		     s->post_threads ? &threaded : &wcb, s, &s->ss.err);
	if (rc)
		return rc;
	s->wp_ready = true;
	if ((s->ss.caps & PD_CAP_ZERO_PAGES) && zs_default_threads()) {
		s->zsb = calloc(s->nblocks, sizeof(*s->zsb));
		if (!s->zsb)
			return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
		rc = zs_start(&s->zs, zs_default_threads(), &s->ss.err);
		if (rc)
			return rc;
		s->zs_on = true;
	}
	if (!s->pieces) {
		if (cap && cap < 2ull << s->chunk_shift)
			return rd_err_set(&s->ss.err, -EINVAL, "the pinned-bytes cap (%" PRIu64
					  ") is smaller than two chunks", cap);
		rc = dreg_init(&s->dreg, s->dblocks, s->nblocks, s->chunk_shift, s->nslots, cap,
			       ctrl_register_max(s->peer_msg_max) / 2, &dcb, s, &s->ss.err);
		if (rc)
			return rc;
		s->dreg_ready = true;
	}
	if (s->dreg_ready && (s->ss.caps & PD_CAP_PAGES)) {
		rc = pack_init(&s->pk, s->peer_msg_max, &s->ss.err);
		if (rc)
			return rc;
	}
	s->zr_max = ctrl_zero_ranges_max(s->peer_msg_max);
	s->zr_block = calloc(s->zr_max, sizeof(*s->zr_block));
	s->zr_offset = calloc(s->zr_max, sizeof(*s->zr_offset));
	s->zr_length = calloc(s->zr_max, sizeof(*s->zr_length));
	if (!s->zr_block || !s->zr_offset || !s->zr_length)
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	return 0;
}

void src_iter_stop_threads(struct rdmig_source *s)
{
	wpost_stop(&s->post);
	zs_stop(&s->zs);
	s->zs_on = false;
}

void src_iter_destroy(struct rdmig_source *s)
{
	/* Before the pipeline they post from and the QPs they post on. */
	src_iter_stop_threads(s);
	if (s->dreg_ready)
		dreg_fini(&s->dreg);
	if (s->wp_ready)
		wp_fini(&s->wp);
	s->dreg_ready = s->wp_ready = false;
	free(s->zsb);
	s->zsb = NULL;
	if (s->dig) {
		uint8_t junk[DIGEST_LEN];

		auth_digest_end(s->dig, junk);
	}
	free(s->zr_block);
	free(s->zr_offset);
	free(s->zr_length);
	pack_fini(&s->pk);
	free(s->digests);
}

/* ---- pacing --------------------------------------------------------------- */

/* A token bucket refilled at the limit, holding at most 1/20 s of it (and
 * at least 64 KiB), so idle time does not buy a long burst. */
static double bucket_max(uint64_t rate)
{
	double b = (double)rate / 20.0;

	return b < 65536.0 ? 65536.0 : b;
}

uint64_t src_pacing_budget(struct rdmig_source *s)
{
	uint64_t rate = atomic_load(&s->max_bandwidth);
	int64_t now = rd_now_ms();

	if (!rate) {
		s->tok_ms = 0;
		return UINT64_MAX;
	}
	if (!s->tok_ms) {
		s->tok_ms = now;
		s->tokens = bucket_max(rate);
	}
	s->tokens += (double)rate * (double)(now - s->tok_ms) / 1000.0;
	if (s->tokens > bucket_max(rate))
		s->tokens = bucket_max(rate);
	s->tok_ms = now;
	return s->tokens > 0 ? (uint64_t)s->tokens : 0;
}

int src_pacing_wait(const struct rdmig_source *s)
{
	uint64_t rate = atomic_load(&s->max_bandwidth);
	double need;

	if (!rate || !s->tok_ms || s->tokens >= 4096)
		return 0;
	need = 4096 - s->tokens;
	/* Deep in debt (a burst of PAGES): look again in a second. */
	return need * 1000.0 / (double)rate >= 1000.0 ? 1000 :
	       (int)(need * 1000.0 / (double)rate) + 1;
}

void src_paced(struct rdmig_source *s, uint64_t bytes)
{
	if (atomic_load(&s->max_bandwidth))
		s->tokens -= (double)bytes;
}

/* ---- one iteration -------------------------------------------------------------- */

int src_iter_begin(struct rdmig_source *s)
{
	int64_t now = rd_now_ms();
	unsigned i;

	/* What is marked from now on goes to the next iteration. */
	for (i = 0; i < s->nblocks; i++) {
		uint64_t *t = s->blocks[i].sending;

		s->blocks[i].sending = s->blocks[i].dirty;
		s->blocks[i].dirty = t;
	}
	memset(&s->sweep, 0, sizeof(s->sweep));
	if (s->zs_on) {
		for (i = 0; i < s->nblocks; i++)
			s->zsb[i] = (struct zs_block){ .host = s->blocks[i].host,
				.length = s->blocks[i].d.length, .npages = s->blocks[i].npages,
				.page_size = s->blocks[i].d.page_size,
				.sending = s->blocks[i].sending };
		zs_begin(&s->zs, s->zsb, s->nblocks);
	}
	s->sweep.planned_bytes = s->dirty_bytes;
	s->dirty_bytes = 0;
	if (s->marked_since_ms && now > s->marked_since_ms)
		s->dirty_rate = s->marked_since * 1000 / (uint64_t)(now - s->marked_since_ms);
	s->marked_since = 0;
	s->marked_since_ms = now;
	s->iter_bytes = 0;
	s->iter_start_ms = now;
	if (s->dreg_ready)
		dreg_restart(&s->dreg);
	s->state = SRC_ITERATING;
	return 0;
}

static int request_registrations(struct rdmig_source *s, int64_t until, bool *moved)
{
	Rdmig__RegisterReq req;
	int rc;

	if (!s->dreg_ready)
		return 0;
	while (ctrl_can_send(&s->ss.ch) && dreg_build(&s->dreg, &s->wp, &req)) {
		rc = ctrl_send(&s->ss.ch, CT_REGISTER_REQ, &req.base);
		if (rc == -EAGAIN)
			break;
		if (rc)
			return rc;
		dreg_sent(&s->dreg, &req);
		*moved = true;
	}
	/* Our side registers while the destination does its part, chunk by
	 * chunk until the step's time is up. */
	rc = dreg_reg_local(&s->dreg, until);
	if (rc > 0)
		*moved = true;
	return rc < 0 ? rc : 0;
}

static void count_writes(struct rdmig_source *s, uint64_t from, uint64_t to, uint64_t bytes)
{
	uint64_t pages = 0, pos;

	for (pos = from; pos < to; pos++) {
		const struct wp_op *op = wp_at(&s->wp, pos);
		uint32_t ps = s->blocks[op->block].d.page_size;

		pages += (op->length + ps - 1) / ps;
	}
	src_count_pages(s, pages, bytes);
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.writes += to - from;
	pthread_mutex_unlock(&s->ss.stats.lock);
}

static int post_writes(struct rdmig_source *s, uint64_t *budget, int64_t until, bool *moved)
{
	uint64_t pace = src_pacing_budget(s), allow = *budget < pace ? *budget : pace;
	uint64_t from = s->wp.posted, nops;
	int64_t got;

	if (!allow)
		return 0;
	got = wp_post(&s->wp, allow == UINT64_MAX ? 0 : allow, until, &nops);
	if (got < 0)
		return (int)got;
	if (!nops)
		return 0;
	count_writes(s, from, s->wp.posted, (uint64_t)got);
	src_paced(s, (uint64_t)got);
	if (*budget != UINT64_MAX)
		*budget = (uint64_t)got < *budget ? *budget - (uint64_t)got : 0;
	*moved = true;
	return 0;
}

static int end_iteration(struct rdmig_source *s)
{
	Rdmig__IterEnd end = RDMIG__ITER_END__INIT;
	int rc;

	end.iteration = s->iteration + 1;
	end.bytes = s->iter_bytes;
	rc = ctrl_send(&s->ss.ch, CT_ITER_END, &end.base);
	if (rc == -EAGAIN)
		return 0;
	if (!rc)
		s->state = SRC_ITER_END;
	return rc;
}

int src_iter_step(struct rdmig_source *s, uint64_t max_bytes, int64_t until)
{
	uint64_t budget = max_bytes ? max_bytes : UINT64_MAX;
	bool moved;
	int rc;

	if (s->post_threads) {
		rc = wpost_error(&s->post, &s->ss.err);
		if (rc)
			return rc;
	}
	do {
		moved = false;
		rc = src_sweep_fill(s, until, &budget, &moved);
		if (!rc)
			rc = request_registrations(s, until, &moved);
		if (!rc)
			rc = post_writes(s, &budget, until, &moved);
		if (rc)
			return rc;
		/* ITER_END only once every WRITE of the iteration completed:
		 * on other channels a SEND is not ordered after them. */
		if (s->sweep.done && !s->sweep.have_pending && !s->zr_n && !s->pk.n &&
		    wp_idle(&s->wp)) {
			s->more = false;
			return end_iteration(s);
		}
	} while (moved && budget && rd_now_us() <= until);
	/* Stopped by the budget or the clock, not for want of anything to
	 * do: the caller should come back at once. */
	s->more = moved;
	return 0;
}

int src_write_done(struct rdmig_source *s, const struct ibv_wc *wc)
{
	const struct fab_tag *tag = fab_tag_of(wc);
	unsigned k;

	if (tag->kind != SRC_TAG_WRITE || !s->wp_ready)
		return rd_err_set(&s->ss.err, -EPROTO, "completion for an unknown request");
	k = wp_chan_index(&s->wp, tag);
	if (wc->status != IBV_WC_SUCCESS) {
		int rc = fab_wc_error(s->chans[k].conn, wc, "RDMA WRITE");

		memcpy(s->ss.err.msg, s->chans[k].conn->err.msg, sizeof(s->ss.err.msg));
		return k ? rd_err_prefix(&s->ss.err, rc, "data channel %u", k) : rc;
	}
	return wp_complete(&s->wp, tag, &s->ss.err);
}

static int on_iter_ack(struct rdmig_source *s, const Rdmig__IterAck *a)
{
	int64_t now = rd_now_ms();

	if (s->state != SRC_ITER_END || a->iteration != s->iteration + 1)
		return rd_err_set(&s->ss.err, -EPROTO, "ITER_ACK for iteration %u, expected %u",
				  a->iteration, s->iteration + 1);
	s->iteration++;
	s->last_iter_bytes = s->iter_bytes;
	s->last_iter_ms = (uint64_t)(now - s->iter_start_ms);
	s->sweep.planned_bytes = s->iter_bytes = 0;
	s->state = SRC_READY;
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.iterations = s->iteration;
	s->ss.stats.st.data_time_ms += s->last_iter_ms;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return 0;
}

/* ---- state and completion ------------------------------------------------------- */

ssize_t rdmig_source_write_state(struct rdmig_source *s, const void *data, size_t len)
{
	Rdmig__State st = RDMIG__STATE__INIT;
	size_t max;
	int rc;

	if (s->state == SRC_FAILED)
		return s->result;
	if (s->state < SRC_READY || s->state > SRC_ITER_END)
		return rd_err_set(&s->ss.err, -ENOTCONN, "device state needs a connection "
				  "before completion");
	if (!len || !ctrl_can_send(&s->ss.ch))
		return 0;
	max = ctrl_state_max(s->peer_msg_max);
	st.data.data = (uint8_t *)(uintptr_t)data;
	st.data.len = len < max ? len : max;
	rc = ctrl_send(&s->ss.ch, CT_STATE, &st.base);
	if (rc == -EAGAIN)
		return 0;
	if (rc)
		return src_fail(s, rc);
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.state_bytes += st.data.len;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return (ssize_t)st.data.len;
}

/* VERIFY: one digest per block of the final image, DIGEST_STEP bytes per
 * call; 1 once all are done. */
static int digest_step(struct rdmig_source *s)
{
	const struct src_block *b;
	uint64_t n;

	if (!(s->ss.caps & PD_CAP_VERIFY) || s->dig_block == s->nblocks)
		return 1;
	if (!s->digests && !(s->digests = calloc(s->nblocks, DIGEST_LEN)))
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	if (!s->dig && !(s->dig = auth_digest_begin()))
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	b = &s->blocks[s->dig_block];
	n = b->d.length - s->dig_off < DIGEST_STEP ? b->d.length - s->dig_off : DIGEST_STEP;
	auth_digest_more(s->dig, b->host + s->dig_off, n);
	s->dig_off += n;
	if (s->dig_off == b->d.length) {
		auth_digest_end(s->dig, s->digests + (size_t)s->dig_block * DIGEST_LEN);
		s->dig = NULL;
		s->dig_block++;
		s->dig_off = 0;
	}
	return s->dig_block == s->nblocks;
}

static int send_complete(struct rdmig_source *s)
{
	Rdmig__Complete c = RDMIG__COMPLETE__INIT;
	ProtobufCBinaryData *d = NULL;
	unsigned i;
	int rc;

	if (!ctrl_can_send(&s->ss.ch))
		return 0;
	c.state_bytes = s->ss.stats.st.state_bytes;
	c.iteration = s->iteration;
	if (s->digests) {
		d = calloc(s->nblocks, sizeof(*d));
		if (!d)
			return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
		for (i = 0; i < s->nblocks; i++)
			d[i] = (ProtobufCBinaryData){ DIGEST_LEN, s->digests + i * DIGEST_LEN };
		c.digests = d;
		c.n_digests = s->nblocks;
	}
	rc = ctrl_send(&s->ss.ch, CT_COMPLETE, &c.base);
	free(d);
	if (rc == -EAGAIN)
		return 0;
	s->complete_sent = rc == 0;
	return rc;
}

int src_complete_begin(struct rdmig_source *s)
{
	/* Every WRITE went and completed with the last iteration. */
	src_iter_stop_threads(s);
	s->state = SRC_COMPLETING;
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.status = RDMIG_STATUS_COMPLETING;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return 0;
}

int src_complete_step(struct rdmig_source *s, int64_t until)
{
	int rc;

	if (s->complete_sent)
		return 0;
	do
		rc = digest_step(s);
	while (!rc && rd_now_us() <= until);
	/* Out of time with digests left: come back at once. */
	s->more = rc == 0;
	return rc == 1 ? send_complete(s) : rc;
}

static int on_complete_ack(struct rdmig_source *s, const Rdmig__CompleteAck *a)
{
	unsigned k;

	if (s->state != SRC_COMPLETING || !s->complete_sent)
		return rd_err_set(&s->ss.err, -EPROTO, "unexpected COMPLETE_ACK");
	if (!a->ok)
		return rd_err_set(&s->ss.err, -EIO, "the destination did not accept the image");
	s->state = SRC_COMPLETED;
	/* Its confirmation arrived: whatever we still had queued cannot change
	 * the outcome. */
	for (k = 1; k < s->nchans; k++)
		fab_disconnect(s->chans[k].conn);
	fab_disconnect(s->ss.conn);
	src_unwatch(s);
	pthread_mutex_lock(&s->ss.stats.lock);
	stats_refresh(&s->ss.stats);
	s->ss.stats.st.status = RDMIG_STATUS_COMPLETED;
	pthread_mutex_unlock(&s->ss.stats.lock);
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "migration completed after %u iterations",
		s->iteration);
	return 0;
}

int src_iter_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	switch (h->type) {
	case CT_REGISTER_RESP:
		if (!s->dreg_ready)
			return rd_err_set(&s->ss.err, -EPROTO, "REGISTER_RESP without a request");
		return dreg_on_resp(&s->dreg, (const Rdmig__RegisterResp *)m, &s->ss.err);
	case CT_ITER_ACK:
		return on_iter_ack(s, (const Rdmig__IterAck *)m);
	case CT_COMPLETE_ACK:
		return on_complete_ack(s, (const Rdmig__CompleteAck *)m);
	default:
		return rd_err_set(&s->ss.err, -EPROTO, "unexpected %s from the destination",
				  ctrl_type_name(h->type));
	}
}
