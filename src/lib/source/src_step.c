/* src_step: the source's driver.  A step handles the completions and the
 * destination's messages in them up to a bound (drain_cq), then connection
 * events and finished registrations, then advances the state the source is
 * in (advance).  Failing and pausing are here: the files below only return
 * an errno (src_int.h). */
#include "src_step.h"

#include <errno.h>

#include "codec.h"
#include "rdmig.h"
#include "src_end.h"
#include "src_int.h"
#include "src_iter.h"
#include "src_link.h"
#include "src_mem.h"
#include "src_pc.h"
#include "src_state.h"
#include "src_stats.h"

/* ---- failing and finishing -------------------------------------------------- */

int src_fail(struct rdmig_source *s, int rc)
{
	if (s->state == SRC_FAILED)
		return s->result;
	src_set_state(s, SRC_FAILED);
	if (s->goal == GOAL_REACHED)
		s->goal = GOAL_NONE;
	s->result = sess_fail(&s->ss, rc);
	/* No thread may post on the channels from here on, nor register; a
	 * registration in progress finishes on its own, nobody waits. */
	src_iter_stop_threads(s);
	regq_stop(&s->rq);
	src_link_disconnect(s);
	/* Nothing more needs the connections' events: a caller still
	 * watching the fd until it destroys the handle must not spin. */
	src_link_unwatch(s);
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.status = s->result == -ECANCELED ? RDMIG_STATUS_CANCELLED :
				RDMIG_STATUS_FAILED;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return s->result;
}

/* The link is up: the rounds' machinery is set up over the next steps,
 * not in this one (it starts threads; advance() sees to that). */
static void link_up(struct rdmig_source *s)
{
	src_set_state(s, SRC_PREPARING);
}

/* Everything set up: ready for rounds. */
static void become_ready(struct rdmig_source *s)
{
	src_set_state(s, SRC_READY);
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.setup_time_ms = (uint64_t)(rd_now_ms() - s->ss.stats.start_ms);
	s->ss.stats.st.status = RDMIG_STATUS_ACTIVE;
	pthread_mutex_unlock(&s->ss.stats.lock);
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "connected: %u blocks, %s registration",
		s->nblocks, s->ss.cfg.pin_all ? "pin-all" : "dynamic");
}

/* A link call's result: more setup to do at once (1: the step was cut
 * with work left), or a wait. */
static int link_result(struct rdmig_source *s, int rc)
{
	if (rc == SRC_LINK_UP) {
		link_up(s);
		return 1;
	}
	return rc == SRC_LINK_AGAIN ? 1 : rc;
}

/* 0 while the set-up is out: the set-up thread wakes the fd. */
static int prepare(struct rdmig_source *s)
{
	int rc = src_iter_prepare(s);

	if (rc == 1)
		become_ready(s);
	return rc < 0 ? rc : 0;
}

/* ---- one step ------------------------------------------------------------ */

static int handle_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	int rc;

	switch (h->type) {
	case CT_CREDIT:
	case CT_KEEPALIVE:
		return 0;
	case CT_ERROR:
		return src_pc_peer_error(s, (const Rdmig__Error *)m);
	case CT_PIN_KEYS:
		return src_on_pin_keys(s, (const Rdmig__PinKeys *)m);
	case CT_AUTH_RESPONSE:
	case CT_BLOCK_MAP_RESP:
		rc = src_link_msg(s, h, m);
		if (rc != SRC_LINK_UP)
			return rc;
		link_up(s);
		return 0;
	case CT_REGISTER_RESP:
	case CT_ITER_ACK:
		return src_iter_msg(s, h, m);
	case CT_COMPLETE_ACK:
		return src_end_msg(s, h, m);
	case CT_POSTCOPY_RESUMED:
		return src_pc_on_resumed(s, m);
	case CT_POSTCOPY_DONE:
		/* Every page is in: completion as after a final round. */
		rc = src_pc_msg(s, h, m);
		return rc == 1 ? src_end_final_done(s) : rc;
	case CT_STATE_RING:
	case CT_STATE_TAKEN:
		return src_state_msg(s, h, m);
	default:
		return rd_err_set(&s->ss.err, -EPROTO, "unexpected %s from the destination",
				  ctrl_type_name(h->type));
	}
}

/* One completion's handling over the step's budget, named (debug level):
 * the phase a long step's log line blames, broken down. */
static void log_slow(const struct rdmig_source *s, const char *what, int64_t us)
{
	if (us > (int64_t)s->step_budget_us)
		cfg_log(&s->ss.cfg, RDMIG_LOG_DEBUG, "source: %s took %lld us", what,
			(long long)us);
}

static int handle_wc(struct rdmig_source *s, const struct ibv_wc *wc)
{
	struct ctrl_hdr h;
	ProtobufCMessage *m;
	int64_t t0 = rd_now_us();
	int rc;

	/* Confirmed: our disconnect flushes what was still posted. */
	if (s->state == SRC_COMPLETED)
		return 0;
	if (!ctrl_owns(wc)) {
		bool state = fab_tag_of(wc)->kind == SRC_TAG_STATE;

		rc = state ? src_state_write_done(s, wc) : src_write_done(s, wc);
		log_slow(s, state ? "a device-state WRITE's completion" :
			 "a WRITE's completion", rd_now_us() - t0);
		return rc;
	}
	rc = ctrl_complete(&s->ss.ch, wc, &h, &m);
	if (rc <= 0)
		return rc;
	rc = handle_msg(s, &h, m);
	ctrl_msg_done(&s->ss.ch, m);
	log_slow(s, ctrl_type_name(h.type), rd_now_us() - t0);
	return rc;
}

/* Completions one step handles at most: a ring's worth of the
 * destination's messages and the WRITE completions of several windows.  A
 * destination that keeps the CQ from emptying must not keep the caller's
 * loop; the rest waits for the next step, at once (the timeout is 0).  See
 * rdmig(3), "Bounded steps". */
#define SRC_STEP_WCS 256

/* Completions until the CQ is empty (then re-armed for the fd: 0), or
 * SRC_STEP_WCS of them, or the step's time is up after a batch (1: cut
 * with completions left). */
static int drain_cq(struct rdmig_source *s, int64_t until)
{
	struct ibv_wc wc[32];
	unsigned done = 0, want;
	int n, i, rc;

	if (!s->ss.conn || !s->ss.conn->cq)
		return 0;
	for (;;) {
		if (done == SRC_STEP_WCS || (done && rd_now_us() > until))
			return 1;
		/* Never more than the cap leaves room for: what is polled is
		 * handled now. */
		want = SRC_STEP_WCS - done < RD_ARRAY_SIZE(wc) ? SRC_STEP_WCS - done :
		       (unsigned)RD_ARRAY_SIZE(wc);
		n = fab_poll(s->ss.conn, wc, (int)want);
		if (n == 0) {
			rc = fab_cq_rearm(s->ss.conn);
			if (rc)
				return rc;
			n = fab_poll(s->ss.conn, wc, (int)want);
			if (n == 0)
				return 0;
		}
		if (n < 0)
			return n;
		for (i = 0; i < n; i++) {
			rc = handle_wc(s, &wc[i]);
			if (rc < 0)
				return rc;
		}
		done += (unsigned)n;
	}
}

/* One finished registration, to the part that asked for it. */
static int reg_done(struct rdmig_source *s, const struct regq_job *j)
{
	switch (SRC_REG_KIND(j->cookie)) {
	case REG_PIECE:
		return j->rc ? src_mem_reg_failed(s, j) : src_pin_done(s, j);
	case REG_CHUNK:
		return j->rc ? src_mem_reg_failed(s, j) : src_iter_reg_done(s, j);
	case REG_STATE:
		return src_state_reg_done(s, j);
	case REG_CTRL:
		return src_link_ctrl_reg_done(s, j);
	case REG_READ:
		return src_pc_reg_done(s, j);
	default:
		return rd_err_set(&s->ss.err, -EPROTO, "a registration nobody asked for");
	}
}

/* Registrations the helpers finished, in the order they were asked for. */
static int reap_registrations(struct rdmig_source *s)
{
	struct regq_job j[16];
	unsigned n, i;
	int rc = 0;

	n = regq_reap(&s->rq, j, RD_ARRAY_SIZE(j));
	for (i = 0; i < n; i++) {
		if (!rc) {
			rc = reg_done(s, &j[i]);
			if (!rc)
				continue;
		}
		/* Not handed over: nobody else will deregister it. */
		if (!j[i].rc && j[i].mr)
			ibv_dereg_mr(j[i].mr);
	}
	return rc;
}

/* Only the destination's own messages prove it alive: the NIC (or rxe in
 * the kernel) completes WRITEs into a process that is frozen or hung, and
 * the destination sends keepalives while it has nothing else to say. */
static int check_silence(struct rdmig_source *s)
{
	if (s->state < SRC_AUTH || s->state >= SRC_COMPLETED)
		return 0;
	if (rd_now_ms() - s->ss.ch.last_recv_ms <= s->ss.cfg.timeout_ms)
		return 0;
	return rd_err_set(&s->ss.err, -ETIMEDOUT, "the destination did not respond within "
			  "%d ms", s->ss.cfg.timeout_ms);
}

static bool goal_reached(const struct rdmig_source *s)
{
	switch (s->goal) {
	case GOAL_CONNECTED:
	case GOAL_ITERATED:
		return s->state == SRC_READY;
	case GOAL_COMPLETED:
		return s->state == SRC_COMPLETED;
	default:
		return false;
	}
}

/* A round was acknowledged in this step.  Where the VMM pulls its log,
 * it is pulled now, so what the round's time dirtied is counted at once
 * (remaining, expected_downtime_ms) rather than at the start of the next
 * round: QEMU syncs its bitmap before it decides, too. */
static int round_end(struct rdmig_source *s)
{
	int rc;

	s->round_ended = s->iteration;
	rc = src_mem_sync(s);
	s->round_end_ms = rd_now_ms();
	/* Completing: that was the final round. */
	if (!rc && s->goal == GOAL_COMPLETED)
		rc = src_end_final_done(s);
	return rc;
}

/* 1 when the state's work was cut short with more to do now.  @begun is
 * the state the step began in: the setup parts start in a step of their
 * own, not in the one that brought the link up. */
static int advance(struct rdmig_source *s, uint64_t max_bytes, int64_t until,
		   enum src_state begun)
{
	switch (s->state) {
	case SRC_CONNECTING:
	case SRC_AUTH:
	case SRC_MAP:
	case SRC_CHANNELS:
		return link_result(s, src_link_step(s));
	case SRC_PREPARING:
		return begun == SRC_PREPARING ? prepare(s) : 1;
	case SRC_ITERATING:
	case SRC_DRAINING:
		return src_iter_step(s, max_bytes, until);
	case SRC_HASHING:
		return src_end_step(s, until);
	case SRC_PC_SWITCH:
	case SRC_POSTCOPY:
	case SRC_PC_RESUMING:
		return src_pc_step(s, until);
	default:
		return 0;
	}
}

/* POSTCOPY_RECOVER: the link broke after the switch.  Its connections go
 * (the first control connection stays, for its PD), every registration
 * stays, and a resume is tried every SRC_PC_RETRY_MS from now on. */
static int pause_link(struct rdmig_source *s)
{
	if (s->state == SRC_PC_RESUMING)
		cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "post-copy: resuming failed: %s; trying again "
			"in %d ms", s->ss.err.msg, SRC_PC_RETRY_MS);
	else
		cfg_log(&s->ss.cfg, RDMIG_LOG_WARN, "post-copy paused: %s; this side keeps the "
			"memory the destination reads and tries to resume every %d ms until it "
			"can (or the migration is cancelled)", s->ss.err.msg, SRC_PC_RETRY_MS);
	src_link_unwatch(s);
	src_link_disconnect(s);
	if (!s->conn0)
		s->conn0 = s->ss.conn;
	s->ss.ctrl_ready = false;
	s->pc.data_gone = true;
	s->pc.pauses++;
	s->pc.next_try_ms = rd_now_ms() + SRC_PC_RETRY_MS;
	s->step_end = STEP_IDLE;
	src_set_state(s, SRC_PC_PAUSED);
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.status = RDMIG_STATUS_POSTCOPY_PAUSED;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return 0;
}

static int fail_or_pause(struct rdmig_source *s, int rc)
{
	return src_pc_may_pause(s, rc) ? pause_link(s) : src_fail(s, rc);
}

/* Paused, or resuming before the new connection is up: a cancel, the next
 * try, the connection's events.  Nothing else runs. */
static int step_paused(struct rdmig_source *s)
{
	int rc;

	sess_woken(&s->ss);
	s->step_end = STEP_IDLE;
	rc = sess_check_cancel(&s->ss);
	if (!rc && s->state == SRC_PC_PAUSED) {
		if (rd_now_ms() < s->pc.next_try_ms)
			return 0;
		src_set_state(s, SRC_PC_RESUMING);
		rc = src_link_resume_start(s);
	}
	if (!rc)
		rc = src_link_resume_step(s);
	if (rc == SRC_LINK_AGAIN) {
		s->step_end = STEP_CUT_WORK;
		rc = 0;
	}
	return rc < 0 ? fail_or_pause(s, rc) : 0;
}

/* The destination confirmed: the connections go, and with them their
 * events. */
static void finish(struct rdmig_source *s)
{
	src_link_disconnect(s);
	src_link_unwatch(s);
}

/* A step over twice its budget says where its time went (debug level). */
static void log_long_step(const struct rdmig_source *s, const struct rd_laps *l,
			  unsigned max_us)
{
	char parts[256];

	if (rd_laps_total(l) <= 2 * (int64_t)max_us)
		return;
	rd_laps_format(l, parts, sizeof(parts));
	cfg_log(&s->ss.cfg, RDMIG_LOG_DEBUG, "source step took %lld us (budget %u us): %s",
		(long long)rd_laps_total(l), max_us, parts);
}

static int step(struct rdmig_source *s, uint64_t max_bytes, unsigned max_us)
{
	int64_t until = rd_now_us() + max_us;
	enum src_state begun = s->state;
	struct rd_laps laps;
	int rc, cut;

	rd_laps_start(&laps);
	s->step_budget_us = max_us;
	sess_woken(&s->ss);
	s->step_end = STEP_IDLE;
	if (s->state == SRC_COMPLETED)
		return 0;
	if (s->state == SRC_PC_PAUSED ||
	    (s->state == SRC_PC_RESUMING && s->pc.resume == RS_CONNECTING))
		return step_paused(s);
	/* Completions first: a COMPLETE_ACK already here decides the outcome,
	 * whatever a cancel says.  Once COMPLETE went, the destination may be
	 * running the guest already: the cancel waits for its answer (bounded
	 * by the silence timeout) instead of contradicting it. */
	rc = drain_cq(s, until);
	rd_laps_mark(&laps, "completions");
	if (rc > 0) {
		s->step_end = STEP_CUT_CQ;
		rc = 0;
	}
	if (!rc && s->state == SRC_COMPLETED) {
		s->step_end = STEP_IDLE;
		finish(s);
		return 0;
	}
	/* From the last range of a switch to post-copy on, the guest runs on
	 * the destination: a cancel here would only lose it, so the
	 * destination's word decides, as after COMPLETE. */
	if (!rc && s->state != SRC_COMPLETING && (!s->pc.start_ms || s->state == SRC_PC_RESUMING))
		rc = sess_check_cancel(&s->ss);
	/* The destination disconnects once its confirmation went out: the
	 * completions before the event are handled first, over as many
	 * steps as that takes. */
	if (!rc && s->step_end != STEP_CUT_CQ && s->state > SRC_CONNECTING) {
		rc = src_link_events(s);
		/* The destination's last frame (ERROR with its reason, or
		 * COMPLETE_ACK) may have landed after the completions above were
		 * read and before its disconnect was: it decides the outcome,
		 * not the disconnect. */
		if (rc == -ECONNRESET) {
			int last = drain_cq(s, until);

			/* Flushed work requests say only what we know. */
			if (last == -ECONNRESET)
				rd_err_set(&s->ss.err, rc, "the destination disconnected");
			else if (last < 0)
				rc = last;
			if (s->state == SRC_COMPLETED) {
				s->step_end = STEP_IDLE;
				finish(s);
				return 0;
			}
		}
	}
	if (!rc)
		rc = reap_registrations(s);
	if (!rc && s->state == SRC_READY && s->round_ended != s->iteration)
		rc = round_end(s);
	rd_laps_mark(&laps, "events and registrations");
	if (!rc) {
		cut = advance(s, max_bytes, until, begun);
		if (cut < 0)
			rc = cut;
		else if (cut && s->step_end == STEP_IDLE)
			s->step_end = STEP_CUT_WORK;
	}
	rd_laps_mark(&laps, "operation");
	if (!rc && s->state > SRC_CONNECTING)
		rc = src_pin_step(s);
	/* Once the block map is agreed (the destination proved the key). */
	if (!rc && s->state > SRC_MAP)
		rc = src_pc_reg_step(s);
	if (!rc && s->state > SRC_CONNECTING)
		rc = src_state_step(s);
	rd_laps_mark(&laps, "pinning and state");
	if (!rc && s->ss.ctrl_ready && s->state > SRC_CONNECTING)
		rc = ctrl_return_credits(&s->ss.ch, false);
	if (!rc && s->state > SRC_CONNECTING)
		rc = sess_keepalive(&s->ss);
	if (!rc)
		rc = check_silence(s);
	/* Device state waits for room the step just got back: once, the
	 * caller is told to come again at once. */
	if (!rc && s->state_blocked && src_state_room(s)) {
		s->state_blocked = false;
		if (s->step_end == STEP_IDLE)
			s->step_end = STEP_ROOM;
	}
	rd_laps_mark(&laps, "credits and keepalive");
	log_long_step(s, &laps, max_us);
	return rc < 0 ? fail_or_pause(s, rc) : 0;
}

/* A step, then what the caller is told about it: 1 once the operation it
 * started is done (latched until the caller's own process call sees it). */
int src_step_report(struct rdmig_source *s, uint64_t max_bytes, unsigned max_us)
{
	if (step(s, max_bytes, max_us) < 0)
		return s->result;
	src_stats_publish(s);
	sess_progress(&s->ss, &s->last_progress_ms, false, src_stats_fill, s);
	if (goal_reached(s))
		s->goal = GOAL_REACHED;
	return 0;
}

/* How long the library can wait for its fd; internal loops (send_state)
 * ignore the latch of a finished operation, which is the caller's to see. */
int src_step_wait_ms(const struct rdmig_source *s)
{
	int64_t now = rd_now_ms(), t = 1000;
	int wait;

	if (s->state == SRC_NEW || s->state >= SRC_COMPLETED)
		return -1;
	/* Paused: the next try to resume. */
	if (s->state == SRC_PC_PAUSED)
		return s->pc.next_try_ms > now ? (int)(s->pc.next_try_ms - now) : 0;
	/* Completions left in the CQ by a step at its cap, or an operation
	 * no step has begun. */
	if (s->step_end == STEP_CUT_CQ || s->step_end == STEP_KICK || s->step_end == STEP_ROOM)
		return 0;
	/* The last step ran out of budget with work left, unless the
	 * bandwidth limit holds it. */
	wait = src_iter_wait_ms(s);
	if (wait <= 0 && s->step_end == STEP_CUT_WORK)
		return 0;
	if (wait > 0 && wait < t)
		t = wait;
	/* The post-copy channels are looked at while the destination reads. */
	wait = src_pc_wait_ms(s);
	if (wait >= 0 && wait < t)
		t = wait;
	/* Keepalives start once connected, and one that has no credit to go
	 * waits for the fd (credits come back as completions). */
	if (s->ss.ctrl_ready && s->state > SRC_CONNECTING && ctrl_can_send(&s->ss.ch) &&
	    s->ss.ch.last_send_ms + s->ss.cfg.keepalive_ms - now < t)
		t = s->ss.ch.last_send_ms + s->ss.cfg.keepalive_ms - now;
	return t < 0 ? 0 : (int)t;
}
