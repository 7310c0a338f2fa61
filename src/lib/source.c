/* source: the sending side of a migration, as an explicit state machine;
 * its API and its driver.
 *
 * rdmig_source_process() handles what is pending (completions, control
 * messages, up to a bound: drain_cq; then connection events), then
 * advances the state it is in within a bounded step, and returns 1 once
 * the operation the caller started (connect, iterate, complete) is done.
 * The blocking calls are that in a poll() loop.  What each state does is
 * in the files below this one (src_int.h lists them); failing and tearing
 * down are this file's alone. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "privdata.h"
#include "rdmig.h"
#include "src_conv.h"
#include "src_end.h"
#include "src_int.h"
#include "src_iter.h"
#include "src_link.h"
#include "src_mem.h"
#include "src_pc.h"
#include "src_state.h"

/* ---- lifetime ----------------------------------------------------------- */

int rdmig_source_create(struct rdmig_source **out, const struct rdmig_config *cfg)
{
	struct rdmig_source *s = calloc(1, sizeof(*s));
	int rc;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	src_mem_init(s);
	rc = sess_init(&s->ss, cfg, "destination");
	if (!rc && !s->ss.cfg.channels)
		s->ss.cfg.channels = 1;
	/* Here rather than in the first connection step, which must be short. */
	if (!rc)
		fab_warm_up();
	if (!rc)
		rc = src_state_init(s);
	pace_init(&s->pace, s->ss.cfg.max_bandwidth);
	src_conv_init(s);
	if (rc) {
		/* Report the configuration error through a half-made handle.
		 * Not through the setter: create calls nothing back. */
		s->state = SRC_FAILED;
		s->result = rc;
	}
	*out = s;
	return rc;
}

const char *rdmig_source_error(const struct rdmig_source *s)
{
	/* Creation reports its failure through the handle, except for ENOMEM. */
	return s ? s->ss.err.msg : "out of memory";
}

int rdmig_source_error_class(const struct rdmig_source *s)
{
	return s->state == SRC_FAILED ? sess_error_class(&s->ss, s->result) : RDMIG_ERROR_NONE;
}

int rdmig_source_fd(const struct rdmig_source *s)
{
	return s->ss.epfd;
}

void rdmig_source_destroy(struct rdmig_source *s)
{
	/* Kept for its PD after a post-copy pause: it goes last. */
	struct fab_conn *conn0 = s && s->conn0 != s->ss.conn ? s->conn0 : NULL;

	if (!s)
		return;
	/* The helper first: it may be registering, and what it registered and
	 * nobody reaped goes with it. */
	regq_fini(&s->rq);
	src_end_destroy(s);
	src_pc_destroy(s);
	src_state_destroy(s);
	src_iter_destroy(s);
	src_link_destroy(s);
	src_mem_destroy(s);
	sess_fini(&s->ss);
	fab_conn_destroy(conn0);
	free(s->dblocks);
	free(s);
}

/* ---- blocks and dirty pages ------------------------------------------------ */

int rdmig_source_add_block(struct rdmig_source *s, const char *name, void *host,
			   uint64_t length, uint32_t page_size)
{
	if (sess_reentered(&s->ss))
		return -EDEADLK;
	if (s->state != SRC_NEW)
		return rd_err_set(&s->ss.err, -EINVAL, "blocks must be added before connecting");
	return src_mem_add(s, name, host, length, page_size);
}

int rdmig_source_mark_dirty(struct rdmig_source *s, unsigned block, uint64_t offset,
			    uint64_t length)
{
	return src_mem_mark(s, block, offset, length);
}

int rdmig_source_mark_dirty_bitmap(struct rdmig_source *s, unsigned block,
				   const unsigned long *bitmap, uint64_t first_page,
				   uint64_t npages)
{
	return src_mem_mark_bitmap(s, block, bitmap, first_page, npages);
}

int rdmig_source_mark_all(struct rdmig_source *s)
{
	src_mem_mark_all(s);
	return 0;
}

/* ---- failing and finishing -------------------------------------------------- */

static int src_fail(struct rdmig_source *s, int rc)
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
		/* Resuming, it ends this try, not the migration (src_pc.h). */
		return s->state == SRC_PC_RESUMING ? src_pc_on_error(s, (const Rdmig__Error *)m) :
		       sess_peer_error(&s->ss, (const Rdmig__Error *)m);
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

static void publish(struct rdmig_source *s);
static void fill_stats(void *role, struct rdmig_stats *st);

/* A step, then what the caller is told about it: 1 once the operation it
 * started is done (latched until the caller's own process call sees it). */
static int step_and_report(struct rdmig_source *s, uint64_t max_bytes, unsigned max_us)
{
	if (step(s, max_bytes, max_us) < 0)
		return s->result;
	publish(s);
	sess_progress(&s->ss, &s->last_progress_ms, false, fill_stats, s);
	if (goal_reached(s))
		s->goal = GOAL_REACHED;
	return 0;
}

/* A step that leaves a finished operation for the caller to see. */
static int step_keep(struct rdmig_source *s)
{
	if (s->state == SRC_FAILED)
		return s->result;
	if (s->state == SRC_NEW)
		return 0;
	return step_and_report(s, s->ss.cfg.step_bytes, s->ss.cfg.step_us);
}

int rdmig_source_step(struct rdmig_source *s, uint64_t max_bytes, unsigned max_us)
{
	int rc;

	if (sess_reentered(&s->ss))
		return -EDEADLK;
	if (s->state == SRC_FAILED) {
		/* A late cancel must not leave the fd readable. */
		sess_woken(&s->ss);
		return s->result;
	}
	if (s->state == SRC_NEW) {
		sess_woken(&s->ss);
		return rd_err_set(&s->ss.err, -ENOTCONN, "not connected");
	}
	rc = step_and_report(s, max_bytes ? max_bytes : s->ss.cfg.step_bytes,
			     max_us ? max_us : s->ss.cfg.step_us);
	if (rc < 0 || s->goal != GOAL_REACHED)
		return rc;
	s->goal = GOAL_NONE;
	return 1;
}

int rdmig_source_process(struct rdmig_source *s)
{
	return rdmig_source_step(s, 0, 0);
}

/* How long the library can wait for its fd; internal loops (send_state)
 * ignore the latch of a finished operation, which is the caller's to see. */
static int wait_ms(const struct rdmig_source *s)
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

int rdmig_source_timeout(const struct rdmig_source *s)
{
	/* A finished operation the caller has not seen yet. */
	if (s->goal == GOAL_REACHED && s->state != SRC_FAILED)
		return 0;
	return wait_ms(s);
}

/* ---- starting operations, and the blocking calls over them ----------------- */

static int start(struct rdmig_source *s, enum src_goal goal, enum src_state need)
{
	if (s->state == SRC_FAILED)
		return s->result;
	if (s->goal != GOAL_NONE && s->goal != GOAL_REACHED)
		return rd_err_set(&s->ss.err, -EBUSY, "another operation is in progress");
	if (s->state != need)
		return rd_err_set(&s->ss.err, need == SRC_READY ? -ENOTCONN : -EISCONN,
				  need == SRC_READY ? "not connected, or busy" :
				  "already connected");
	s->goal = goal;
	/* Nothing may make the fd readable before a step begins the work:
	 * the timeout says to call at once. */
	s->step_end = STEP_KICK;
	return 0;
}

/* An operation that could not start: the migration fails, unless nothing
 * was started (the caller's mistake leaves the handle as it was). */
static int start_failed(struct rdmig_source *s, int rc)
{
	return rc < 0 && s->goal != GOAL_NONE && s->goal != GOAL_REACHED &&
	       s->state != SRC_FAILED ? src_fail(s, rc) : rc;
}

int rdmig_source_connect_async(struct rdmig_source *s, const char *host, const char *port)
{
	int rc;

	/* From a callback: refused, and the migration goes on as it was. */
	if (sess_reentered(&s->ss))
		return -EDEADLK;
	rc = start(s, GOAL_CONNECTED, SRC_NEW);
	/* Whoever connects drives the handle from now on. */
	if (!rc)
		src_mem_set_driver(s);
	if (!rc && !s->nblocks)
		rc = rd_err_set(&s->ss.err, -EINVAL, "no RAM blocks were added");
	if (!rc)
		rc = src_link_prepare(s, host, port);
	/* Before anything pins (the rounds' set-up is its job). */
	if (!rc)
		rc = src_iter_setup_start(s);
	return start_failed(s, rc);
}

int rdmig_source_iterate_async(struct rdmig_source *s)
{
	int rc;

	if (sess_reentered(&s->ss))
		return -EDEADLK;
	rc = start(s, GOAL_ITERATED, SRC_READY);
	/* What was dirtied since the last round ended (the VMM sent device
	 * state meanwhile, say) goes into this one. */
	if (!rc)
		rc = src_mem_sync(s);
	if (!rc)
		rc = src_iter_begin(s);
	return start_failed(s, rc);
}

/* The last operation, with the guest paused: its log, once more, holds its
 * last pages; @begin completes or switches to post-copy with them. */
static int start_last(struct rdmig_source *s, int (*begin)(struct rdmig_source *s))
{
	int rc;

	if (sess_reentered(&s->ss))
		return -EDEADLK;
	rc = start(s, GOAL_COMPLETED, SRC_READY);
	if (!rc)
		rc = src_mem_sync(s);
	if (!rc)
		rc = begin(s);
	return rc;
}

int rdmig_source_complete_async(struct rdmig_source *s)
{
	int rc = start_last(s, src_end_begin);

	return rc == -EDEADLK ? rc : start_failed(s, rc);
}

int rdmig_source_postcopy_async(struct rdmig_source *s)
{
	int rc = start_last(s, src_pc_begin);

	/* A switch that cannot be made leaves the migration as it was: the
	 * VMM may complete instead, or resume its guest. */
	if ((rc == -ENOTSUP || rc == -EINVAL) && s->goal == GOAL_COMPLETED &&
	    s->state == SRC_READY) {
		s->goal = GOAL_NONE;
		s->step_end = STEP_IDLE;
		return rc;
	}
	return rc == -EDEADLK ? rc : start_failed(s, rc);
}

static int run(struct rdmig_source *s, int rc)
{
	struct pollfd pfd = { .fd = s->ss.epfd, .events = POLLIN };

	while (!rc) {
		rc = rdmig_source_process(s);
		if (!rc)
			poll(&pfd, 1, rdmig_source_timeout(s));
	}
	return rc > 0 ? 0 : rc;
}

int rdmig_source_connect(struct rdmig_source *s, const char *host, const char *port)
{
	return run(s, rdmig_source_connect_async(s, host, port));
}

int rdmig_source_iterate(struct rdmig_source *s)
{
	return run(s, rdmig_source_iterate_async(s));
}

int rdmig_source_complete(struct rdmig_source *s)
{
	return run(s, rdmig_source_complete_async(s));
}

int rdmig_source_postcopy(struct rdmig_source *s)
{
	return run(s, rdmig_source_postcopy_async(s));
}

ssize_t rdmig_source_write_state(struct rdmig_source *s, const void *data, size_t len)
{
	ssize_t n;

	if (sess_reentered(&s->ss))
		return -EDEADLK;
	if (s->state == SRC_FAILED)
		return s->result;
	n = src_state_write(s, data, len);
	s->state_blocked = n == 0 && len;
	/* A send that failed fails the migration; not being connected does
	 * not. */
	return n < 0 && n != -ENOTCONN ? src_fail(s, (int)n) : n;
}

int rdmig_source_send_state(struct rdmig_source *s, const void *data, size_t len)
{
	struct pollfd pfd = { .fd = s->ss.epfd, .events = POLLIN };
	ssize_t n;
	int rc;

	while (len) {
		n = rdmig_source_write_state(s, data, len);
		if (n < 0)
			return (int)n;
		data = (const uint8_t *)data + n;
		len -= (size_t)n;
		if (!n) {
			rc = step_keep(s);
			if (rc < 0)
				return rc;
			poll(&pfd, 1, wait_ms(s));
		}
	}
	return 0;
}

int rdmig_source_poll(struct rdmig_source *s)
{
	if (sess_reentered(&s->ss))
		return -EDEADLK;
	return step_keep(s);
}

int rdmig_source_advice(struct rdmig_source *s, struct rdmig_advice *a)
{
	if (sess_reentered(&s->ss))
		return -EDEADLK;
	if (s->state == SRC_FAILED)
		return s->result;
	if (s->state < SRC_READY)
		return rd_err_set(&s->ss.err, -ENOTCONN, "not connected");
	if (s->state != SRC_READY || (s->goal != GOAL_NONE && s->goal != GOAL_REACHED))
		return rd_err_set(&s->ss.err, -EBUSY, "advice comes between operations, after an "
				  "iteration");
	return src_conv_advice(s, a);
}

void rdmig_source_set_max_bandwidth(struct rdmig_source *s, uint64_t bytes_per_s)
{
	pace_set(&s->pace, bytes_per_s);
	/* A loop asleep for the old limit looks again. */
	sess_wake(&s->ss);
}

int rdmig_source_set_limit(struct rdmig_source *s, enum rdmig_limit limit, uint64_t value)
{
	int rc = src_conv_set_limit(s, (unsigned)limit, value);

	/* The statistics' expected downtime reads it at the next step. */
	if (!rc)
		sess_wake(&s->ss);
	return rc;
}

void rdmig_source_cancel(struct rdmig_source *s)
{
	sess_cancel(&s->ss, NULL);
}

/* ---- statistics ------------------------------------------------------------- */

/* The driving thread's counters, into the box other threads read. */
static void publish(struct rdmig_source *s)
{
	struct stats_box *b = &s->ss.stats;
	uint64_t dirty = src_mem_dirty_bytes(s);
	struct conv_policy p;

	pthread_mutex_lock(&b->lock);
	if (!s->prep_out && s->dreg_ready) {
		/* Post-copy's read pieces beside the chunks. */
		b->st.pinned_bytes = s->dreg.creg.pinned_bytes + src_pc_pinned(s);
		if (b->st.pinned_peak < s->dreg.creg.peak_bytes + src_pc_pinned(s))
			b->st.pinned_peak = s->dreg.creg.peak_bytes + src_pc_pinned(s);
		b->st.register_requests = s->dreg.requests;
		b->st.chunks_registered = s->dreg.chunks;
	}
	b->st.ctrl_sent = s->ss.ch.sent;
	b->st.ctrl_received = s->ss.ch.received;
	b->st.remaining = dirty + (s->sweep.planned_bytes > s->iter_bytes ?
					    s->sweep.planned_bytes - s->iter_bytes : 0);
	/* The advice's prediction: at the limit when there is one (the last
	 * pages are paced too), plus the VMM's switch-over cost. */
	src_conv_policy(s, &p);
	b->st.expected_downtime_ms = conv_downtime_ms(&p, b->st.remaining, s->bw);
	b->st.dirty_rate = s->dirty_rate;
	b->st.first_write_ms = s->first_write_ms > 0 && b->start_ms ?
			       (uint64_t)(s->first_write_ms - b->start_ms) : 0;
	b->ctrl_bytes = s->ss.ch.bytes_sent;
	pthread_mutex_unlock(&b->lock);
}

static void fill_stats(void *role, struct rdmig_stats *st)
{
	struct rdmig_source *s = role;
	struct stats_box *b = &s->ss.stats;

	pthread_mutex_lock(&b->lock);
	if (b->st.status != RDMIG_STATUS_COMPLETED)
		stats_refresh(b);
	*st = b->st;
	st->transferred += b->ctrl_bytes;
	pthread_mutex_unlock(&b->lock);
}

void rdmig_source_stats(struct rdmig_source *s, struct rdmig_stats *st)
{
	struct rdmig_stats all;

	fill_stats(s, &all);
	sess_stats_out(&all, st);
}
