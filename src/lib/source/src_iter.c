#include "src_iter.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "conv.h"
#include "privdata.h"
#include "src_int.h"
#include "src_mem.h"
#include "src_sweep.h"

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

	/* Several channels: the channel's own thread posts (wpost.h). */
	if (s->post_threads) {
		wpost_submit(&s->post, chan, wr);
		return 0;
	}
	rc = fab_post_send(c, wr);

	/* Every channel writes its failures into ours. */
	return rc && chan ? rd_err_prefix(&s->ss.err, rc, "data channel %u", chan) : rc;
}

static bool wp_room_cb(void *ctx, unsigned chan)
{
	struct rdmig_source *s = ctx;

	return wpost_room(&s->post, chan);
}

static void wp_done_cb(void *ctx, const struct wp_op *op)
{
	struct rdmig_source *s = ctx;
	uint32_t ps = s->blocks[op->block].d.page_size;

	s->landed_bytes += op->length;
	s->landed_pages += (op->length + ps - 1) / ps;
	if (!s->pieces)
		dreg_op_done(&s->dreg, op);
}

static int dreg_reg_cb(void *ctx, unsigned block, uint64_t slot, uint64_t off, uint64_t len)
{
	struct rdmig_source *s = ctx;

	return src_mem_submit(s, &s->blocks[block], off, len, 0, SRC_REG_COOKIE(REG_CHUNK, slot));
}

int src_iter_reg_done(struct rdmig_source *s, const struct regq_job *j)
{
	if (s->prep_out || !s->dreg_ready)
		return rd_err_set(&s->ss.err, -EPROTO, "a chunk registered without a request");
	return dreg_local_done(&s->dreg, SRC_REG_N(j->cookie), j->mr,
			       ((struct ibv_mr *)j->mr)->lkey, &s->ss.err);
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

/* The parts below run on the set-up thread (worker.h), in order: they
 * write only what they make, and failures into @err (s->prep_err). */

/* PREP_POSTERS: one channel posts from the driving thread (nothing to
 * overlap it with but the planning); several post from a thread each, so
 * their sending work runs on as many cores. */
static int prep_posters(struct rdmig_source *s, struct rd_err *err)
{
	struct ibv_qp *qps[PD_CHANNELS_MAX];
	unsigned k;
	int rc;

	/* Until posts were measured, assume the emulated link's price (about
	 * 20 ns a byte): a NIC brings it down within a few dozen posts.  With
	 * posting threads, what the driving thread pays is the hand-over. */
	cost_init(&s->post_cost, 20.0);
	s->op_max = s->ss.cfg.merge_max;
	if (s->nchans < 2)
		return 0;
	for (k = 0; k < s->nchans; k++)
		qps[k] = fab_qp(s->chans[k].conn);
	rc = wpost_start(&s->post, qps, s->nchans, s->ss.cfg.max_writes, WP_BATCH,
			 s->ss.wake_fd, err);
	if (!rc)
		s->post_threads = true;
	return rc;
}

static int prep_pipeline(struct rdmig_source *s, struct rd_err *err)
{
	static const struct wp_callbacks wcb = { wp_target_cb, wp_post_cb, wp_done_cb, NULL };
	static const struct wp_callbacks threaded = { wp_target_cb, wp_post_cb, wp_done_cb,
						      wp_room_cb };
	int rc;

	rc = wp_init(&s->wp, s->nchans, s->ss.cfg.max_writes, SRC_TAG_WRITE,
		     s->post_threads ? &threaded : &wcb, s, err);
	if (!rc)
		s->wp_ready = true;
	return rc;
}

/* PREP_REGISTRY: nothing with pin-all, whose pieces register on their own. */
static int prep_registry(struct rdmig_source *s, struct rd_err *err)
{
	static const struct dreg_callbacks dcb = { dreg_reg_cb, dreg_dereg_cb };
	uint64_t cap = effective_cap(s);
	int rc;

	if (s->pieces)
		return 0;
	if (cap && cap < 2ull << s->chunk_shift)
		return rd_err_set(err, -EINVAL, "the pinned-bytes cap (%" PRIu64 ", the "
				  "smaller of both sides') is smaller than two chunks of %" PRIu64
				  " bytes", cap, (uint64_t)1 << s->chunk_shift);
	rc = dreg_init(&s->dreg, s->dblocks, s->nblocks, s->chunk_shift, s->nslots, cap,
		       ctrl_register_max(s->peer_msg_max) / 2, &dcb, s, err);
	if (!rc)
		s->dreg_ready = true;
	return rc;
}

static int prep_part(struct rdmig_source *s, struct rd_err *err)
{
	switch (s->prep) {
	case PREP_POSTERS:
		return prep_posters(s, err);
	case PREP_PIPELINE:
		return prep_pipeline(s, err);
	case PREP_REGISTRY:
		return prep_registry(s, err);
	case PREP_SCRATCH:
		return src_sweep_setup(s, s->peer_msg_max,
				       s->dreg_ready && (s->ss.caps & PD_CAP_PAGES), err);
	case PREP_ZERO_CHECK:
		return src_sweep_start_helpers(s, err);
	default:
		return 0;
	}
}

/* The set-up thread's job: every part, unless the migration failed. */
static int prep_job(void *arg)
{
	struct rdmig_source *s = arg;
	int64_t t0;
	int rc;

	for (s->prep = PREP_POSTERS; s->prep != PREP_DONE; s->prep++) {
		if (atomic_load(&s->prep_abandon))
			return rd_err_set(&s->prep_err, -ECANCELED, "abandoned");
		t0 = rd_now_us();
		rc = prep_part(s, &s->prep_err);
		s->prep_us[s->prep] = rd_now_us() - t0;
		if (rc)
			return rc;
	}
	return 0;
}

static const char *const prep_names[] = { "the posting threads", "the WRITE window",
					   "dynamic registration", "the sweep's scratch",
					   "the zero-check threads" };

int src_iter_setup_start(struct rdmig_source *s)
{
	if (s->setup.started)
		return 0;
	return worker_start(&s->setup, s->ss.wake_fd, &s->ss.err);
}

int src_iter_prepare(struct rdmig_source *s)
{
	unsigned p;
	int rc, job;

	if (!s->prep_out) {
		rc = worker_hand(&s->setup, prep_job, s);
		if (rc)
			return rd_err_set(&s->ss.err, rc, "cannot hand the rounds' set-up to its "
					  "thread: %s", strerror(-rc));
		s->prep_out = true;
		return 0;
	}
	rc = worker_reap(&s->setup, &job);
	if (rc < 0)
		return rd_err_set(&s->ss.err, rc, "the set-up thread is gone with the rounds' "
				  "set-up not done");
	if (!rc)
		return 0;
	s->prep_out = false;
	for (p = PREP_POSTERS; p < PREP_DONE && p <= s->prep; p++)
		if (s->prep_us[p] > (int64_t)s->step_budget_us)
			cfg_log(&s->ss.cfg, RDMIG_LOG_DEBUG, "source: setting up %s took %lld us "
				"(on the set-up thread)", prep_names[p], (long long)s->prep_us[p]);
	if (job)
		return rd_err_set(&s->ss.err, job, "setting up %s: %s", prep_names[s->prep],
				  s->prep_err.msg);
	return 1;
}

void src_iter_stop_threads(struct rdmig_source *s)
{
	/* The set-up thread first: it may be starting the others.  A part
	 * in progress ends (tens of milliseconds at most); the rest is
	 * skipped. */
	atomic_store(&s->prep_abandon, true);
	worker_stop(&s->setup);
	s->prep_out = false;
	wpost_stop(&s->post);
	src_sweep_stop(s);
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
	src_sweep_destroy(s);
}

/* ---- one iteration -------------------------------------------------------------- */

int src_iter_begin(struct rdmig_source *s)
{
	int64_t now = rd_now_ms();

	/* What is marked from now on goes to the next round. */
	src_sweep_begin(s, src_mem_freeze(s, now));
	s->iter_bytes = 0;
	s->iter_start_ms = now;
	pthread_mutex_lock(&s->ss.stats.lock);
	s->iter_zero_base = s->ss.stats.st.zero_pages;
	pthread_mutex_unlock(&s->ss.stats.lock);
	if (s->dreg_ready)
		dreg_restart(&s->dreg);
	src_set_state(s, SRC_ITERATING);
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
	/* Our side registers (by the helper) while the destination does its
	 * part. */
	(void)until;
	rc = dreg_reg_local(&s->dreg);
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

/* Posts what the step's time left, its byte budget and the bandwidth limit
 * allow: the first post of a step goes whatever it costs (every step
 * moves), later ones only while they fit half the time left at the
 * learned price.  Half: the price of a post on Soft-RoCE under emulation
 * swings by twice from one post to the next (the CPU the kernel copies on
 * is shared), and the loop above posts again with what is left. */
static int post_writes(struct rdmig_source *s, uint64_t *budget, int64_t until, bool *posted,
		       bool *moved)
{
	uint64_t pace = pace_budget(&s->pace, rd_now_ms()), allow = *budget < pace ? *budget : pace;
	uint64_t from = s->wp.posted, nops, fit;
	int64_t got, t0 = rd_now_us();

	fit = cost_bytes(&s->post_cost, (until - t0) / 2, UINT64_MAX);
	if (!*posted && fit < 1)
		fit = 1;
	if (fit < allow)
		allow = fit;
	if (!allow)
		return 0;
	got = wp_post(&s->wp, allow == UINT64_MAX ? 0 : allow, until, &nops);
	if (got < 0)
		return (int)got;
	if (!nops)
		return 0;
	cost_learn(&s->post_cost, (uint64_t)got, (rd_now_us() - t0) * 1000);
	*posted = true;
	count_writes(s, from, s->wp.posted, (uint64_t)got);
	pace_spent(&s->pace, (uint64_t)got);
	if (*budget != UINT64_MAX)
		*budget = (uint64_t)got < *budget ? *budget - (uint64_t)got : 0;
	*moved = true;
	return 0;
}

/* How often the destination hears what landed while pages move. */
#define PROGRESS_MS 100

/* PROGRESS granted: what landed, when it changed and PROGRESS_MS passed
 * (@now: whatever the time), and when a credit is free. */
static int tell_progress(struct rdmig_source *s, bool now)
{
	Rdmig__Progress p = RDMIG__PROGRESS__INIT;
	uint64_t skipped;
	int64_t ms = rd_now_ms();
	int rc;

	if (!(s->ss.caps & PD_CAP_PROGRESS) || (!now && ms - s->told_ms < PROGRESS_MS))
		return 0;
	pthread_mutex_lock(&s->ss.stats.lock);
	skipped = s->ss.stats.st.zero_pages_skipped;
	pthread_mutex_unlock(&s->ss.stats.lock);
	if (s->landed_bytes == s->told_bytes && skipped == s->told_skipped)
		return 0;
	/* ITER_END needs the credit more. */
	if (!ctrl_can_send(&s->ss.ch))
		return 0;
	p.normal_bytes = s->landed_bytes;
	p.normal_pages = s->landed_pages;
	p.zero_pages_skipped = skipped;
	rc = ctrl_send(&s->ss.ch, CT_PROGRESS, &p.base);
	if (rc)
		return rc == -EAGAIN ? 0 : rc;
	s->told_bytes = s->landed_bytes;
	s->told_skipped = skipped;
	s->told_ms = ms;
	return 0;
}

static int end_iteration(struct rdmig_source *s)
{
	Rdmig__IterEnd end = RDMIG__ITER_END__INIT;
	int rc;

	/* The destination's counters are whole at the end of an iteration
	 * (when a credit is left for it; ITER_END carries the bytes too). */
	rc = tell_progress(s, true);
	if (rc)
		return rc;
	end.iteration = s->iteration + 1;
	end.bytes = s->iter_bytes;
	rc = ctrl_send(&s->ss.ch, CT_ITER_END, &end.base);
	if (rc == -EAGAIN)
		return 0;
	if (!rc)
		src_set_state(s, SRC_ITER_END);
	return rc;
}

int src_iter_step(struct rdmig_source *s, uint64_t max_bytes, int64_t until)
{
	uint64_t budget = max_bytes ? max_bytes : UINT64_MAX;
	bool moved, posted = false;
	int rc;

	/* A posting thread's failure is the migration's. */
	if (s->post_threads) {
		rc = wpost_error(&s->post, &s->ss.err);
		if (rc)
			return rc;
	}
	/* A WRITE is cut to what posts in a quarter of a step at the learned
	 * price (at least a page): the first post of a step goes whatever the
	 * time left, so one op must not hold a step much beyond its time. */
	s->op_max = cost_bytes(&s->post_cost, (until - rd_now_us()) / 4,
			       s->ss.cfg.merge_max) & ~(uint64_t)4095;
	if (s->op_max < 4096)
		s->op_max = 4096;
	rc = tell_progress(s, false);
	if (rc)
		return rc;
	do {
		moved = false;
		rc = src_sweep_fill(s, until, &budget, &moved);
		if (!rc)
			rc = request_registrations(s, until, &moved);
		if (!rc)
			rc = post_writes(s, &budget, until, &posted, &moved);
		if (rc)
			return rc;
		if (src_sweep_done(s))
			src_set_state(s, SRC_DRAINING);
		/* ITER_END only once every WRITE of the round completed: on
		 * other channels a SEND is not ordered after them.  With
		 * pin-all the image is wholly registered by then (rdmig(3)):
		 * a round of zero pages must not end before the helper
		 * registered the pieces the next rounds write from. */
		if (s->state == SRC_DRAINING && wp_idle(&s->wp) &&
		    (!s->pieces || s->pieces_local == s->nslots))
			return end_iteration(s);
	} while (moved && budget && rd_now_us() <= until);
	/* Stopped by the budget or the clock, not for want of anything to
	 * do: the caller should come back at once. */
	return moved;
}

int src_iter_wait_ms(const struct rdmig_source *s)
{
	/* Planned WRITEs may still wait for the limit once the sweep is done. */
	return s->state == SRC_ITERATING || s->state == SRC_DRAINING ? pace_wait_ms(&s->pace) : 0;
}

int src_write_done(struct rdmig_source *s, const struct ibv_wc *wc)
{
	const struct fab_tag *tag = fab_tag_of(wc);
	unsigned k;

	if (tag->kind != SRC_TAG_WRITE || s->prep_out || !s->wp_ready)
		return rd_err_set(&s->ss.err, -EPROTO, "completion for an unknown request");
	k = wp_chan_index(&s->wp, tag);
	if (wc->status != IBV_WC_SUCCESS) {
		/* The channel writes its message into ours. */
		int rc = fab_wc_error(s->chans[k].conn, wc, "RDMA WRITE");

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
	s->bw = conv_learn_bw(s->bw, s->last_iter_bytes, s->last_iter_ms);
	s->sweep.planned_bytes = s->iter_bytes = 0;
	src_set_state(s, SRC_READY);
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.iterations = s->iteration;
	s->ss.stats.st.data_time_ms += s->last_iter_ms;
	s->ss.stats.st.last_iter_bytes = s->last_iter_bytes;
	s->ss.stats.st.last_iter_ms = s->last_iter_ms;
	s->ss.stats.st.last_iter_zero_pages = s->ss.stats.st.zero_pages - s->iter_zero_base;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return 0;
}

int src_iter_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	switch (h->type) {
	case CT_REGISTER_RESP:
		if (s->prep_out || !s->dreg_ready)
			return rd_err_set(&s->ss.err, -EPROTO, "REGISTER_RESP without a request");
		return dreg_on_resp(&s->dreg, (const Rdmig__RegisterResp *)m, &s->ss.err);
	case CT_ITER_ACK:
		return on_iter_ack(s, (const Rdmig__IterAck *)m);
	default:
		return rd_err_set(&s->ss.err, -EPROTO, "unexpected %s from the destination",
				  ctrl_type_name(h->type));
	}
}
