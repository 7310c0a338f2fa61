/* dst_step: the destination's driver.  A step reaps finished
 * registrations, handles completions and the messages in them up to a
 * bound (drain_cq), then connection events and the data channels, then
 * the work the state asks for (step_timed).  Failing and pausing are here:
 * the files below only return an errno (dst_int.h). */
#include "dst_step.h"

#include <errno.h>
#include <inttypes.h>

#include "codec.h"
#include "dst_data.h"
#include "dst_int.h"
#include "dst_link.h"
#include "dst_map.h"
#include "dst_pc.h"
#include "dst_state.h"
#include "rdmig.h"

/* What one rdmig_dest_process() handles at most besides its time budget
 * (step_us): a ring's worth of messages at the default depth, and twice
 * that of completions (each message may cost a send).  The rest waits for
 * the next call, which the timeout (0) asks for at once; an event loop
 * serving other migrations, deadlines and signals gets its turn between.
 * See rdmig(3), "Bounded steps". */
#define DST_STEP_MSGS 32
#define DST_STEP_WCS 64

/* ---- watching and failing --------------------------------------------- */

/* The connection's fds join the caller's set once accepted, and leave it
 * once the migration ended, so a finished handle is quiet. */
int dst_watch(struct rdmig_dest *d)
{
	int rc = sess_watch(&d->ss, fab_cm_fd(d->ss.conn));

	if (!rc)
		rc = sess_watch(&d->ss, fab_cq_fd(d->ss.conn));
	if (!rc && d->chans)
		rc = sess_watch(&d->ss, chan_set_fd(d->chans));
	return rc;
}

static void unwatch(struct rdmig_dest *d)
{
	if (!d->ss.conn)
		return;
	sess_unwatch(&d->ss, fab_cm_fd(d->ss.conn));
	sess_unwatch(&d->ss, fab_cq_fd(d->ss.conn));
	if (d->chans)
		sess_unwatch(&d->ss, chan_set_fd(d->chans));
}

int dst_fail(struct rdmig_dest *d, int rc)
{
	if (d->state == DST_FAILED)
		return d->result;
	dst_set_state(d, DST_FAILED);
	d->result = sess_fail(&d->ss, rc);
	/* A registration in progress finishes on its own; nobody waits. */
	regq_stop(&d->rq);
	/* After a switch the guest's memory stays registered: a thread that
	 * touches a page not here waits, it never sees one that is not the
	 * source's. */
	dst_pc_stop(d);
	unwatch(d);
	if (d->resume_l)
		sess_unwatch(&d->ss, dst_link_listener_fd(d->resume_l));
	chan_set_disconnect(d->chans);
	pop_stop(&d->pop);
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.status = d->result == -ECANCELED ? RDMIG_STATUS_CANCELLED :
				RDMIG_STATUS_FAILED;
	pthread_mutex_unlock(&d->ss.stats.lock);
	return d->result;
}

/* ---- one step --------------------------------------------------------- */

static int handle_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	if (h->type == CT_CREDIT || h->type == CT_KEEPALIVE)
		return 0;
	/* Resuming, the peer's ERROR ends this connection, not the migration
	 * (dst_pc_on_error). */
	if (h->type == CT_ERROR)
		return d->state == DST_PC_RESUMING ? dst_pc_on_error(d, (const Rdmig__Error *)m) :
		       sess_peer_error(&d->ss, (const Rdmig__Error *)m);
	switch (d->state) {
	case DST_AUTH:
		return dst_link_auth(d, h, m);
	case DST_WAIT_MAP:
		if (h->type != CT_BLOCK_MAP_REQ)
			return rd_err_set(&d->ss.err, -EPROTO, "expected BLOCK_MAP_REQ, got %s",
					  ctrl_type_name(h->type));
		return dst_map_on_block_map(d, (const Rdmig__BlockMapReq *)m);
	case DST_RUNNING:
		if (h->type == CT_REGISTER_REQ)
			return dst_map_register(d, (const Rdmig__RegisterReq *)m);
		if (h->type == CT_POSTCOPY_KEYS || h->type == CT_POSTCOPY_RANGES)
			return dst_pc_msg(d, h, m);
		return dst_data_msg(d, h, m);
	case DST_PC_RESUMING:
		/* Nothing before the key is proved, and then only the resume:
		 * a wrong answer or anything else drops this connection. */
		if (!d->pc.authed)
			return dst_link_auth(d, h, m);
		if (h->type == CT_POSTCOPY_RESUME && !d->pc.resumed_sent)
			return dst_pc_on_resume(d, m);
		return rd_err_set(&d->ss.err, -EPROTO, "unexpected %s while resuming post-copy",
				  ctrl_type_name(h->type));
	case DST_POSTCOPY:
		/* Nothing of the rounds or the stream: every page not here is
		 * ours to read now, and COMPLETE only once we said so. */
		if (h->type == CT_COMPLETE && dst_pc_done(d))
			return dst_data_msg(d, h, m);
		return rd_err_set(&d->ss.err, -EPROTO, "unexpected %s during post-copy%s",
				  ctrl_type_name(h->type), h->type == CT_COMPLETE ?
				  " (before POSTCOPY_DONE)" : "");
	default:
		return rd_err_set(&d->ss.err, -EPROTO, "unexpected %s after completion",
				  ctrl_type_name(h->type));
	}
}

/* One message or job slice over the step's budget, named (debug level):
 * the phase a long step's log line blames, broken down. */
static void log_slow(const struct rdmig_dest *d, const char *what, int64_t us)
{
	if (us > (int64_t)d->ss.cfg.step_us)
		cfg_log(&d->ss.cfg, RDMIG_LOG_DEBUG, "destination: %s took %lld us", what,
			(long long)us);
}

/* 1 when a message was delivered and handled, 0 for any other completion. */
static int handle_wc(struct rdmig_dest *d, const struct ibv_wc *wc)
{
	struct ctrl_hdr h;
	ProtobufCMessage *m;
	int64_t t0;
	int rc;

	if (!ctrl_owns(wc))
		return rd_err_set(&d->ss.err, -EPROTO, "completion for an unknown request");
	/* Once COMPLETE_ACK is posted the source may disconnect, flushing our
	 * idle receives; only the ACK's own completion still matters. */
	if (d->state == DST_FLUSHING && wc->status == IBV_WC_WR_FLUSH_ERR &&
	    fab_tag_of(wc)->kind == CTRL_TAG_RECV)
		return 0;
	rc = ctrl_complete(&d->ss.ch, wc, &h, &m);
	if (rc <= 0)
		return rc;
	t0 = rd_now_us();
	rc = handle_msg(d, &h, m);
	log_slow(d, ctrl_type_name(h.type), rd_now_us() - t0);
	/* A message worked off over several steps lives on until then. */
	if (rc == 0 && d->job.kind != JOB_NONE && !d->job.msg)
		d->job.msg = m;
	else
		ctrl_msg_done(&d->ss.ch, m);
	return rc < 0 ? rc : 1;
}

static int step_channels(struct rdmig_dest *d)
{
	char note[RD_ERRLEN] = "";
	int rc = chan_set_process(d->chans, note, sizeof(note), &d->ss.err);

	if (note[0])
		cfg_log(&d->ss.cfg, RDMIG_LOG_WARN, "%s", note);
	/* Once COMPLETE_ACK is out, the source closing its channels is normal. */
	return d->state == DST_FLUSHING ? 0 : rc;
}

/* The next completion: from the batch in hand, else polled.  0 once the CQ
 * is empty, and re-armed then, so its fd tells of the next one. */
static int next_wc(struct rdmig_dest *d, const struct ibv_wc **wc)
{
	int n, rc;

	if (d->wc_next == d->wc_n) {
		n = fab_poll(d->ss.conn, d->wcs, (int)RD_ARRAY_SIZE(d->wcs));
		if (n == 0) {
			rc = fab_cq_rearm(d->ss.conn);
			if (rc)
				return rc;
			n = fab_poll(d->ss.conn, d->wcs, (int)RD_ARRAY_SIZE(d->wcs));
		}
		if (n <= 0)
			return n;
		d->wc_n = (unsigned)n;
		d->wc_next = 0;
	}
	*wc = &d->wcs[d->wc_next++];
	return 1;
}

/* The message in hand, worked on until it is done, the step's time is up
 * or it waits for the helper; its message is let go once it is done. */
static int finish_job(struct rdmig_dest *d, int64_t until)
{
	int64_t t0 = rd_now_us();
	const char *what;
	int rc;

	switch (d->job.kind) {
	case JOB_ZERO:
		what = "zero ranges";
		rc = dst_data_zero_step(d, until);
		break;
	case JOB_REGISTER:
		what = "registrations";
		rc = dst_map_register_step(d);
		break;
	case JOB_STATE:
	case JOB_RING:
		what = "device state";
		rc = dst_state_step(d, until);
		break;
	case JOB_PAGES:
		what = "PAGES";
		rc = dst_data_pages_step(d);
		break;
	case JOB_PC_BEGIN:
		what = "the switch to post-copy";
		rc = dst_pc_begin_step(d);
		break;
	default:
		return DST_JOB_DONE;
	}
	log_slow(d, what, rd_now_us() - t0);
	if (rc == DST_JOB_DONE) {
		ctrl_msg_done(&d->ss.ch, d->job.msg);
		d->job = (struct dst_job){ .kind = JOB_NONE };
	}
	return rc;
}

/* Registrations the helper finished, each to the part that asked. */
static int reap_registrations(struct rdmig_dest *d)
{
	struct regq_job j[16];
	unsigned n, i;
	int rc = 0;

	n = regq_reap(&d->rq, j, RD_ARRAY_SIZE(j));
	for (i = 0; i < n; i++) {
		if (!rc) {
			switch (DST_REG_KIND(j[i].cookie)) {
			case DREG_PIECE:
				rc = dst_map_piece_done(d, &j[i]);
				break;
			case DREG_CHUNK:
				rc = dst_map_chunk_done(d, &j[i]);
				break;
			case DREG_RING:
				rc = dst_state_ring_done(d, &j[i]);
				break;
			case DREG_FAULT:
				rc = dst_data_fault_done(d, &j[i]);
				break;
			case DREG_PC:
				rc = dst_pc_reg_done(d, &j[i]);
				break;
			default:
				rc = rd_err_set(&d->ss.err, -EPROTO, "a registration nobody asked "
						"for");
				break;
			}
			if (!rc)
				continue;
		}
		/* Not handed over: nobody else will deregister it. */
		if (!j[i].rc && j[i].mr)
			ibv_dereg_mr(j[i].mr);
	}
	return rc;
}

/* Completions until the CQ is empty or this step's share is used up:
 * DST_STEP_WCS completions, DST_STEP_MSGS messages, or its time, read after
 * each message and between slices of zero ranges.  A source can keep the
 * CQ from ever emptying (every ITER_ACK hands its credits back for more
 * ZERO_RANGES and ITER_END): draining to the end would never return.
 * 1 when work was left, 0 when the CQ is empty, or a negative errno. */
/* What drain_cq stopped at. */
enum { DRAIN_EMPTY = 0, DRAIN_CUT = 1, DRAIN_WAITING = 2 };

static int drain_cq(struct rdmig_dest *d, int64_t until)
{
	const struct ibv_wc *wc = NULL;
	unsigned wcs = 0, msgs = 0;
	int rc;

	for (;;) {
		rc = finish_job(d, until);
		if (rc < 0)
			return rc;
		if (rc == DST_JOB_CUT)
			return DRAIN_CUT;
		/* Waiting for the helper, which wakes the fd when it is done.
		 * The completions behind wait in the CQ; its channel is
		 * re-armed for new ones, or its unread event would keep the
		 * fd readable all the while. */
		if (rc == DST_JOB_WAITING) {
			rc = fab_cq_rearm(d->ss.conn);
			return rc ? rc : DRAIN_WAITING;
		}
		if (wcs == DST_STEP_WCS || msgs == DST_STEP_MSGS || (msgs && rd_now_us() > until))
			return DRAIN_CUT;
		rc = next_wc(d, &wc);
		if (rc <= 0)
			return rc;
		wcs++;
		rc = handle_wc(d, wc);
		if (rc < 0)
			return rc;
		msgs += (unsigned)rc;
	}
}

/* Connection events, once the CQ was seen empty: the source's last
 * message (an ERROR saying why) is handled before its disconnect. */
static int cm_events(struct rdmig_dest *d)
{
	int rc = 0, i;

	/* The CM fd is level-triggered: a few events per step is enough. */
	for (i = 0; i < 4 && !rc; i++)
		rc = fab_cm_process(d->ss.conn);
	return d->state == DST_FLUSHING ? 0 : rc;
}

/* A step over twice its budget says where its time went (debug level). */
static int log_long_step(const struct rdmig_dest *d, const struct rd_laps *l, int rc)
{
	char parts[256];
	unsigned budget = d->ss.cfg.step_us;

	if (rd_laps_total(l) > 2 * (int64_t)budget) {
		rd_laps_format(l, parts, sizeof(parts));
		cfg_log(&d->ss.cfg, RDMIG_LOG_DEBUG, "destination step took %lld us (budget "
			"%u us): %s", (long long)rd_laps_total(l), budget, parts);
	}
	return rc;
}

static int step_timed(struct rdmig_dest *d, struct rd_laps *laps);

/* Paused: nothing but a cancel or the source's resume on the listener. */
static int step_paused(struct rdmig_dest *d)
{
	int rc;

	sess_woken(&d->ss);
	rc = sess_check_cancel(&d->ss);
	if (!rc)
		rc = dst_link_resume(d);
	if (rc <= 0)
		return rc;
	sess_unwatch(&d->ss, dst_link_listener_fd(d->resume_l));
	return dst_watch(d);
}

static int step(struct rdmig_dest *d)
{
	struct rd_laps laps;
	int rc;

	if (d->state == DST_PC_PAUSED)
		return step_paused(d);
	rd_laps_start(&laps);
	rc = step_timed(d, &laps);
	rd_laps_mark(&laps, "the rest");
	return log_long_step(d, &laps, rc);
}

static int step_timed(struct rdmig_dest *d, struct rd_laps *laps)
{
	int64_t until = rd_now_us() + d->ss.cfg.step_us;
	int rc;

	sess_woken(&d->ss);
	d->step_end = DSTEP_IDLE;
	/* Once COMPLETE_ACK is posted the outcome is the source's to learn:
	 * a cancel now would contradict a confirmation on its way. */
	rc = d->state < DST_FLUSHING ? sess_check_cancel(&d->ss) : 0;
	if (!rc)
		rc = reap_registrations(d);
	rd_laps_mark(laps, "registrations");
	if (rc)
		return rc;
	/* Even after a disconnect, drain the CQ first: the source's last
	 * message (an ERROR saying why) may be waiting there, possibly
	 * behind more than one step's worth. */
	rc = drain_cq(d, until);
	rd_laps_mark(laps, "messages");
	if (rc < 0)
		return rc;
	if (rc == DRAIN_CUT) {
		d->step_end = DSTEP_CUT;
		/* Ring space the callback freed goes back even in a step cut
		 * short (the rest of this one waits): the source's state
		 * writes wait for it. */
		if (!d->src_gone) {
			int r2 = dst_state_ring_step(d);

			if (r2)
				return r2;
		}
	}
	/* Gone: what it sent before is read to the end first. */
	if (d->src_gone)
		return rc == DRAIN_EMPTY ? -ECONNRESET : 0;
	if (rc != DRAIN_CUT) {
		bool regs = rc == DRAIN_WAITING && regq_pending(&d->rq);

		rc = cm_events(d);
		/* The source's ERROR may be in the CQ behind a message whose
		 * registrations the helpers are doing (a cancel during a
		 * REGISTER_REQ): its disconnect waits for them, which is not
		 * long, and a helper wakes the fd when they are done. */
		if (rc == -ECONNRESET && regs) {
			d->src_gone = true;
			return 0;
		}
	}
	if (rc)
		return rc;
	if (d->chans) {
		rc = step_channels(d);
		if (rc)
			return rc;
	}
	rd_laps_mark(laps, "events and channels");
	rc = dst_map_populate_check(d);
	if (!rc)
		rc = dst_map_pin_step(d);
	if (!rc)
		rc = dst_pc_reg_step(d);
	if (!rc)
		rc = dst_pc_step(d);
	if (!rc)
		rc = dst_state_ring_step(d);
	rd_laps_mark(laps, "pinning and state");
	if (rc >= 0)
		rc = dst_data_verify_step(d, until);
	rd_laps_mark(laps, "verify");
	if (rc < 0)
		return rc;
	return ctrl_return_credits(&d->ss.ch, false);
}

static int finish(struct rdmig_dest *d)
{
	dst_set_state(d, DST_DONE);
	unwatch(d);
	pop_stop(&d->pop);
	chan_set_disconnect(d->chans);
	fab_disconnect(d->ss.conn);
	pthread_mutex_lock(&d->ss.stats.lock);
	stats_refresh(&d->ss.stats);
	d->ss.stats.st.status = RDMIG_STATUS_COMPLETED;
	pthread_mutex_unlock(&d->ss.stats.lock);
	cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "migration complete: %u iterations, %" PRIu64
		" state bytes", d->iteration, d->state_bytes);
	return 1;
}

static int check_deadlines(struct rdmig_dest *d)
{
	int64_t now = rd_now_ms();

	/* Paused, there is no link to time: the wait ends with a resume or a
	 * cancel. */
	if (d->state == DST_PC_PAUSED)
		return 0;
	if (d->state == DST_PC_RESUMING && !d->pc.resumed_sent && now > d->handshake_deadline)
		return rd_err_set(&d->ss.err, -ETIMEDOUT, "the source reconnected but did not %s "
				  "in time", d->pc.authed ? "resume the post-copy" :
				  "authenticate");
	if (d->state < DST_RUNNING && now > d->handshake_deadline)
		return rd_err_set(&d->ss.err, -ETIMEDOUT, "the source did not %s within "
				  "%" PRId64 " ms of connecting", d->state == DST_AUTH ?
				  "authenticate" : "send its block map",
				  d->handshake_deadline - d->ss.stats.start_ms);
	/* Paused, we do not read what the source sends: its silence is ours. */
	if (!atomic_load(&d->state_paused) && now - d->ss.ch.last_recv_ms > d->ss.cfg.timeout_ms)
		return rd_err_set(&d->ss.err, -ETIMEDOUT, "the source was silent for %d ms",
				  d->ss.cfg.timeout_ms);
	/* Keepalives once the peer is known, on a resumed link too. */
	if (d->state == DST_PC_RESUMING && !d->pc.authed)
		return 0;
	return d->state >= DST_WAIT_MAP ? sess_keepalive(&d->ss) : 0;
}

/* The link broke after the switch, with recovery: its connections go,
 * everything registered stays, the guest runs on with what is here, and
 * the listener is watched for the source's resume. */
static int pause_link(struct rdmig_dest *d, int rc)
{
	cfg_log(&d->ss.cfg, RDMIG_LOG_WARN, "post-copy paused: %s; the guest runs on, a "
		"thread that touches a page not here yet waits until the source resumes the "
		"migration (or it is cancelled)", d->ss.err.msg);
	/* A resume that failed its own checks hears why. */
	if (d->state == DST_PC_RESUMING && rc != -ECONNRESET && d->ss.ctrl_ready)
		ctrl_send_error(&d->ss.ch, rc, d->ss.err.msg, d->ss.guest_never_ran, 200);
	unwatch(d);
	chan_set_disconnect(d->chans);
	/* The engine's READs on them come back flushed, whatever the CM
	 * did: only then may a resume replace them (pcd_quiet). */
	chan_set_break_pc(d->chans);
	fab_disconnect(d->ss.conn);
	if (!d->pc.conn0)
		d->pc.conn0 = d->ss.conn;
	/* Completions of the broken link are not read any more. */
	d->wc_next = d->wc_n = 0;
	d->step_end = DSTEP_IDLE;
	dst_pc_pause(d);
	dst_set_state(d, DST_PC_PAUSED);
	rc = sess_watch(&d->ss, dst_link_listener_fd(d->resume_l));
	return rc ? dst_fail(d, rc) : 0;
}

/* ---- what the caller is told ------------------------------------------ */

/* A step, then what the caller is told about it: 1 once the migration is
 * complete and the source knows it, 0, or the failure. */
int dst_step_report(struct rdmig_dest *d)
{
	int rc = step(d);

	/* What other threads may read goes through the lock. */
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.ctrl_sent = d->ss.ch.sent;
	d->ss.stats.st.ctrl_received = d->ss.ch.received;
	pthread_mutex_unlock(&d->ss.stats.lock);
	if (rc < 0 && dst_pc_may_pause(d, rc))
		return pause_link(d, rc);
	if (rc < 0) {
		if (rc == -ECONNRESET && d->state != DST_FLUSHING)
			rd_err_set(&d->ss.err, rc, "the source disconnected before completing the "
				   "migration: the image is incomplete");
		return dst_fail(d, rc);
	}
	/* The ACK's send completed: the source holds the confirmation. */
	if (d->state == DST_FLUSHING && !ctrl_sends_busy(&d->ss.ch))
		return finish(d);
	rc = check_deadlines(d);
	if (rc && dst_pc_may_pause(d, rc))
		return pause_link(d, rc);
	return rc ? dst_fail(d, rc) : 0;
}

/* How long the caller may wait for the fd: the deadlines, a step cut at its
 * cap, work that goes on at once. */
int dst_step_wait_ms(const struct rdmig_dest *d)
{
	int64_t now = rd_now_ms();
	/* Paused state: the source's silence is not timed (check_deadlines). */
	int64_t t1 = atomic_load(&d->state_paused) ? 1000 :
		     d->ss.ch.last_recv_ms + d->ss.cfg.timeout_ms - now;
	int64_t t2 = d->ss.ch.last_send_ms + d->ss.cfg.keepalive_ms - now;
	int64_t t = t1 < t2 ? t1 : t2;

	/* Nothing happens before a connection is accepted, nor after the end:
	 * process() then only says so. */
	if (d->state == DST_NEW || d->state == DST_DONE || d->state == DST_FAILED)
		return -1;
	/* Paused: the listener's fd says when the source is back. */
	if (d->state == DST_PC_PAUSED)
		return 1000;
	/* The last step stopped at its cap: the CQ was not emptied (nor
	 * re-armed), so its fd may never become readable for what waits. */
	if (d->step_end == DSTEP_CUT)
		return 0;
	if ((d->state < DST_RUNNING || (d->state == DST_PC_RESUMING && !d->pc.resumed_sent)) &&
	    d->handshake_deadline - now < t)
		t = d->handshake_deadline - now;
	if (d->state == DST_FLUSHING)
		return 10;
	/* Hashing goes on at once, unless the ACK waits for a credit. */
	if (dst_data_verify_ready(d))
		return 0;
	/* A keepalive that is due but has no credit waits for the fd. */
	if (t2 <= 0 && !ctrl_can_send(&d->ss.ch))
		t = t1;
	return t < 0 ? 0 : (int)(t > 1000 ? 1000 : t);
}
