/* The phase machine (send_phase.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <ev.h>

#include "cli.h"
#include "devstate.h"
#include "rdmig.h"
#include "send_dirty.h"
#include "send_end.h"
#include "send_events.h"
#include "send_fwd.h"
#include "send_int.h"
#include "send_loop.h"
#include "send_phase.h"
#include "send_policy.h"
#include "workload.h"

/* With --auto-converge, a guest's throttle from the switch-over decision
 * until QEMU pauses it: the policy's most (QEMU's max-cpu-throttle). */
#define SWITCH_THROTTLE 99

static void start_round(struct sender *x, enum phase ph);
static void await_stop(struct sender *x);
static void begin_state(struct sender *x);

/* The workload is stopped: its last pages go at the bandwidth granted to
 * the switch-over, the one the policy predicted them at (the library's
 * completion does the same for a VMM that completes without a round of
 * its own). */
static void start_last_round(struct sender *x)
{
	if (x->o.switch_bw)
		rdmig_source_set_max_bandwidth(x->s, x->o.switch_bw);
	start_round(x, PH_LAST_ROUND);
}

static void start_round(struct sender *x, enum phase ph)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	int rc;

	send_stats(x, &st);
	x->iter_base = st.normal_bytes;
	x->iter_planned = 0;
	x->iter_t0 = cli_now_ms();
	send_set_phase(x, ph);
	rc = rdmig_source_iterate_async(x->s);
	if (rc)
		send_lib_fail(x, rc, CLI_PHASE_TRANSFER);
	else
		send_kick(x);
}

/* A round's figures, for convergence and the events. */
static void round_ended(struct sender *x)
{
	struct rdmig_stats st = { .size = sizeof(st) };

	cli_bar_clear(&x->bar);
	send_stats(x, &st);
	x->last_bytes = st.normal_bytes - x->iter_base;
	x->last_ms = cli_now_ms() - x->iter_t0;
}

/* Converged, frozen, the last pages collected: the workload stops, either
 * right here (a frozen process stays frozen: the last round holds those
 * pages) or, after one more round while it runs when that pays, by the
 * device-state end's doing (QEMU stops its guest itself, inside its own
 * migration). */
static void converge(struct sender *x)
{
	uint64_t stop_ms;
	struct cli_err err;
	bool now;
	int rc = 0;

	/* QEMU pauses the guest only after its own pre-copy: what the guest
	 * writes until then is the downtime's last round.  A guest that
	 * needed the throttle to fit is held to the most meanwhile (it is
	 * about to pause anyway); one that fit unthrottled was predicted
	 * writing at its full rate and keeps it (the busy bench saw a 3 s
	 * migration cost a guest two thirds of its work for no shorter
	 * downtime). */
	if (x->o.auto_converge && x->o.qmp && x->sw_throttle &&
	    x->sw_throttle < SWITCH_THROTTLE) {
		rc = wl_throttle(x->e.wl, SWITCH_THROTTLE, &err);
		x->sw_throttle = SWITCH_THROTTLE;
	}
	if (!rc)
		rc = wl_begin_stop(x->e.wl, &now, &stop_ms, &err);
	if (rc) {
		send_local_fail(x, rc, err.msg);
		return;
	}
	if (!now) {
		x->t_clear = cli_now_ms();
		x->stop_deadline = cli_now_ms() + x->o.timeout_s * 1000;
		/* Held to the most, the guest writes little while one more
		 * round sends what is left: that round takes it out of the
		 * downtime (a tenth of it in the converge suite).  At its full
		 * rate it writes its working set again meanwhile (the policy
		 * switched because a round would not leave less; one cost the
		 * busy bench's guest 1.2 s of its 3 s for the same downtime):
		 * QEMU's own migration starts at once then. */
		if (x->sw_throttle)
			start_round(x, PH_CONVERGED);
		else
			await_stop(x);
		return;
	}
	rc = ds_start(x->e.ds, &err);
	if (rc) {
		send_local_fail(x, rc, err.msg);
		return;
	}
	send_watch_state(x);
	x->stop_ms = stop_ms;
	x->status = ST_DEVICE;
	x->dt_stop = cli_now_ms() - stop_ms;
	x->dt_track_us = x->collect_us;
	x->t_mark = cli_now_ms();
	start_last_round(x);
}

/* --postcopy: whether this round's end is the switch to post-copy: after
 * --postcopy-after rounds, or at a limit with --on-timeout postcopy (the
 * library's policy, told to cancel there, gave up).  A round that
 * converged completes by pre-copy, also the N-th: what is left fits
 * --max-downtime, and a pre-copy's end never splits the guest between the
 * hosts, as post-copy does until its last page. */
static bool postcopy_now(const struct sender *x)
{
	if (!x->o.postcopy)
		return false;
	if (x->adv.decision == RDMIG_SWITCH_OVER && x->adv.reason == RDMIG_REASON_CONVERGED)
		return false;
	if (x->o.have_pc_after && x->iterations >= x->o.postcopy_after)
		return true;
	return x->o.on_timeout_postcopy && x->adv.decision == RDMIG_GIVE_UP;
}

static void say_postcopy(struct sender *x)
{
	const char *why = x->pc_reason;

	cli_bar_clear(&x->bar);
	if (x->o.json) {
		struct json_object *o = cli_event("postcopy-started");

		cli_json_str(o, "reason", why);
		cli_json_u64(o, "iterations", x->iterations);
		cli_emit(o);
	} else {
		cli_err("switching to post-copy after %" PRIu64 " round%s (%s)", x->iterations,
			x->iterations == 1 ? "" : "s", why);
	}
}

/* The switch to post-copy, with the workload frozen and what it wrote
 * collected: it stops here for good, its device state goes, and then,
 * instead of a last round, the destination's guest starts and reads the
 * pages it lacks (state_done). */
static void switch_postcopy(struct sender *x)
{
	uint64_t stop_ms;
	struct cli_err err;
	bool now;
	int rc;

	x->pc_switch = true;
	x->pc_reason = x->o.on_timeout_postcopy && x->adv.decision == RDMIG_GIVE_UP ?
		       cli_reason_name(x->adv.reason) : "postcopy-after";
	/* What the switch was decided on, as for a switch-over: the report
	 * (send_report.c) holds the pause to the --max-downtime of then. */
	x->sw_reason = (enum rdmig_reason)x->adv.reason;
	x->sw_expected = x->adv.expected_downtime_ms;
	x->sw_promised = x->downtime_promised;
	x->sw_throttle = x->adv.throttle_pct;
	say_postcopy(x);
	rc = wl_begin_stop(x->e.wl, &now, &stop_ms, &err);
	if (!rc && !now)
		rc = cli_err_set(&err, -ENOTSUP, "post-copy needs a workload that migrate-send "
				 "stops itself (--pid)");
	if (!rc)
		rc = ds_start(x->e.ds, &err);
	if (rc) {
		send_local_fail(x, rc, err.msg);
		return;
	}
	x->stop_ms = stop_ms;
	x->status = ST_DEVICE;
	x->dt_stop = cli_now_ms() - stop_ms;
	x->dt_track_us = x->collect_us;
	x->t_mark = cli_now_ms();
	begin_state(x);
}

static void round_done(struct sender *x)
{
	uint64_t dirty, t_freeze;

	round_ended(x);
	x->iterations++;
	t_freeze = cli_now_ms();
	if (send_freeze(x))
		return;
	send_note_freeze(x, cli_now_ms() - t_freeze);
	if (send_collect(x, &dirty) || send_advise(x))
		return;
	send_emit_iteration(x, dirty, t_freeze - x->t_clear, &x->adv);
	if (postcopy_now(x)) {
		switch_postcopy(x);
		return;
	}
	switch (x->adv.decision) {
	case RDMIG_SWITCH_OVER:
		/* Converged, or a limit with --on-timeout switchover. */
		x->sw_reason = (enum rdmig_reason)x->adv.reason;
		x->sw_expected = x->adv.expected_downtime_ms;
		/* Judged against the limit the decision was taken by: a set
		 * later cannot change what the switch-over aimed at. */
		x->sw_promised = x->downtime_promised;
		x->sw_throttle = x->adv.throttle_pct;
		converge(x);
		return;
	case RDMIG_GIVE_UP:
		send_give_up(x);
		return;
	default:
		break;
	}
	if (!send_clear_and_thaw(x))
		start_round(x, PH_ROUND);
}

/* The workload stops by the device-state end's doing: asked every
 * STOP_POLL_S, for at most the timeout. */
static void stopped(struct sender *x);

/* Waiting for the workload to stop.  The first time, the device-state
 * end is asked to stop it now (QEMU's own migration starts: it copies its
 * own RAM, then stops the guest and waits).  Then it is asked every
 * STOP_POLL_S; one that takes longer than a round gets another round, so
 * the pages written meanwhile do not pile up for the downtime. */
static void await_stop(struct sender *x)
{
	struct cli_err err;
	int rc;

	send_set_phase(x, PH_STOPPING);
	if (!x->ds_started) {
		rc = ds_start(x->e.ds, &err);
		if (rc) {
			send_local_fail(x, rc, err.msg);
			return;
		}
		x->ds_started = true;
		send_watch_state(x);
	}
	if (x->stopped) {
		stopped(x);
		return;
	}
	x->next_round_at = cli_now_ms() + (x->last_ms > 50 ? x->last_ms : 50);
	ev_timer_set(&x->stop_timer, 0.0, STOP_POLL_S);
	ev_timer_again(x->loop, &x->stop_timer);
}

/* A round while the guest runs on its way to the stop is done: wait on. */
static void converged_done(struct sender *x)
{
	round_ended(x);
	send_emit_iteration(x, 0, 0, NULL);
	await_stop(x);
}

/* The workload stopped: what it wrote since the last clear is the last
 * round. */
static void stopped(struct sender *x)
{
	uint64_t more;

	ev_timer_stop(x->loop, &x->stop_timer);
	x->status = ST_DEVICE;
	if (send_collect(x, &more))
		return;
	x->t_mark = cli_now_ms();
	x->dt_stop = x->t_mark - x->stop_ms;
	x->dt_track_us = x->collect_us;
	start_last_round(x);
}

/* While waiting: one more round of what was written since the last. */
static void keep_up(struct sender *x)
{
	uint64_t dirty, t_freeze = cli_now_ms();

	if (send_freeze(x) || send_collect(x, &dirty))
		return;
	send_emit_iteration(x, dirty, t_freeze - x->t_clear, NULL);
	if (!send_clear_and_thaw(x))
		start_round(x, PH_CONVERGED);
}

void send_check_stopped(struct sender *x)
{
	uint64_t stop_ms = 0;
	struct cli_err err;
	int rc;

	if (x->cancelled) {
		send_local_fail(x, -ECANCELED, "cancelled");
		return;
	}
	rc = ds_stopped(x->e.ds, &stop_ms, &err);
	if (rc < 0) {
		send_local_fail(x, rc, err.msg);
		return;
	}
	if (rc == 1 && !x->stopped) {
		x->stopped = true;
		x->stop_ms = stop_ms;
		/* Paused, the guest needs no throttle; QEMU's device save must
		 * not wait for a throttled vCPU thread. */
		wl_throttle_aside(x->e.wl);
	}
	/* A round under way finishes first (converged_done). */
	if (x->ph != PH_STOPPING)
		return;
	if (x->stopped) {
		stopped(x);
		return;
	}
	if (cli_now_ms() >= x->next_round_at) {
		ev_timer_stop(x->loop, &x->stop_timer);
		keep_up(x);
		if (x->ph != PH_DONE)
			ev_timer_again(x->loop, &x->stop_timer);
		return;
	}
	if (cli_now_ms() > x->stop_deadline) {
		cli_err_set(&err, -ETIMEDOUT, "the %s was not stopped for the switch-over within %"
			    PRIu64 " s (--timeout)", wl_kind(x->e.wl), x->o.timeout_s);
		send_local_fail(x, -ETIMEDOUT, err.msg);
	}
}

static void state_done(struct sender *x);

/* Forwards what the device-state end has; in PH_STATE, the end of what it
 * has is the end of the state. */
void send_pump_state(struct sender *x)
{
	if (send_fwd_state(x) == 1 && x->ph == PH_STATE) {
		ev_timer_stop(x->loop, &x->stop_timer);
		state_done(x);
	}
}

/* The last round is in: the rest of the device state follows it. */
static void last_round_done(struct sender *x)
{
	round_ended(x);
	if (!x->o.live)
		send_emit_iteration(x, 0, 0, NULL);
	x->dt_round = cli_now_ms() - x->t_mark;
	x->t_mark = cli_now_ms();
	begin_state(x);
}

/* The workload is stopped: the rest of its device state goes. */
static void begin_state(struct sender *x)
{
	struct cli_err err;
	int rc;

	send_set_phase(x, PH_STATE);
	rc = ds_release(x->e.ds, &err);
	if (rc) {
		send_local_fail(x, rc, err.msg);
		return;
	}
	/* The device state must keep coming, or the workload would wait,
	 * stopped, for ever. */
	x->state_deadline = cli_now_ms() + x->o.timeout_s * 1000;
	ev_timer_set(&x->stop_timer, 0.0, 0.1);
	ev_timer_again(x->loop, &x->stop_timer);
	send_watch_state(x);
	send_pump_state(x);
}

static void state_done(struct sender *x)
{
	struct cli_err err;
	int rc = ds_commit(x->e.ds, &err);

	if (rc) {
		send_local_fail(x, rc, err.msg);
		return;
	}
	x->dt_state = cli_now_ms() - x->t_mark;
	x->t_mark = cli_now_ms();
	ev_io_stop(x->loop, &x->ds_io);
	if (x->pc_switch) {
		send_set_phase(x, PH_POSTCOPY);
		rc = rdmig_source_postcopy_async(x->s);
		/* From here the guest is the destination's (rdmig(3)), even
		 * should the switch fail half-way. */
		x->pc_handed = rc == 0;
		if (rc)
			send_lib_fail(x, rc, CLI_PHASE_TRANSFER);
		else
			send_kick(x);
		return;
	}
	send_set_phase(x, PH_COMPLETE);
	rc = rdmig_source_complete_async(x->s);
	if (rc)
		send_lib_fail(x, rc, CLI_PHASE_TRANSFER);
	else
		send_kick(x);
}

static void completed(struct sender *x)
{
	/* After post-copy the workload's pause ended when the destination's
	 * guest started, at the switch (t_mark), not when its last page came:
	 * the time since is the post-copy's, no part of the downtime. */
	if (x->pc_switch)
		x->dt_postcopy = cli_now_ms() - x->t_mark;
	else
		x->dt_confirm = cli_now_ms() - x->t_mark;
	if (x->o.live)
		x->downtime_ms = (x->pc_switch ? x->t_mark : cli_now_ms()) - x->stop_ms;
	x->status = ST_COMPLETED;
	send_finish(x);
}

/* The device-state end gets ready (for QEMU, reading its settings and the
 * pipe: also a measure of how fast its monitor answers, which the
 * switch-over pays a few times).  Live, this waits until the first round's
 * first writes are out: its QMP round trips would only delay the first
 * byte. */
int send_prepare_state(struct sender *x)
{
	uint64_t t0 = cli_now_ms();
	struct cli_err err;
	int rc;

	x->need_prepare = false;
	rc = ds_prepare(x->e.ds, &err);
	if (rc)
		return send_local_fail(x, rc, err.msg);
	send_note_prepare(x, cli_now_ms() - t0);
	return 0;
}

/* The first round, or the only one of a cold migration. */
void send_begin(struct sender *x)
{
	struct cli_err err;

	x->begun = true;
	x->status = ST_ACTIVE;
	send_set_time_limits(x);
	/* Its manager may have paused, resumed or shut it down meanwhile. */
	if (x->o.defer && x->e.wl && wl_recheck(x->e.wl, &err)) {
		send_local_fail(x, -EINVAL, err.msg);
		return;
	}
	rdmig_source_mark_all(x->s);
	if (!x->o.live) {
		if (send_prepare_state(x))
			return;
		x->t_mark = cli_now_ms();
		start_round(x, PH_LAST_ROUND);
		return;
	}
	/* --postcopy-after 0: no round at all, every page is read by the
	 * destination. */
	if (x->o.postcopy && x->o.have_pc_after && !x->o.postcopy_after) {
		if (!send_prepare_state(x) && !send_freeze(x))
			switch_postcopy(x);
		return;
	}
	/* The first clear happens with the workload frozen too, so its first
	 * round starts from a known point. */
	x->need_prepare = true;
	if (!send_freeze(x) && !send_clear_and_thaw(x))
		start_round(x, PH_ROUND);
}

/* --defer: "prepared" once the source's own registration (--pin-all) is
 * done as well, so that start's clock holds none of it. */
void send_say_prepared(struct sender *x)
{
	struct rdmig_stats st = { .size = sizeof(st) };

	if (x->said_prepared)
		return;
	if (x->o.pin_all) {
		rdmig_source_stats(x->s, &st);
		if (st.pinned_bytes < st.total)
			return;
	}
	x->said_prepared = true;
	x->status = ST_PREPARED;
	x->prepared_ms = cli_now_ms();
	if (x->o.json)
		cli_emit(cli_event("prepared"));
	else
		cli_err("connected to %s:%s and prepared: waiting for start on %s", x->o.host,
			x->o.port, x->o.control);
}

/* The first phase: the library connects, authenticates and asks for the
 * block map, stepped by the loop from here on. */
void send_connect(struct sender *x)
{
	int rc;

	send_set_phase(x, PH_CONNECT);
	rc = rdmig_source_connect_async(x->s, x->o.host, x->o.port);
	if (rc)
		send_lib_fail(x, rc, CLI_PHASE_CONNECT);
	else
		send_kick(x);
}

/* Connected and admitted.  With --defer the workload is not touched until
 * the start command: the connection, the block map and any pinning are
 * done by then, so the migration starts with its first write.  The
 * library keeps the connection alive with keepalives meanwhile. */
static void connected(struct sender *x)
{
	send_emit_setup(x);
	if (x->o.defer && !x->start_asked) {
		send_set_phase(x, PH_PREPARED);
		send_say_prepared(x);
		return;
	}
	send_begin(x);
}

/* The operation in hand finished. */
void send_op_done(struct sender *x)
{
	if (x->need_prepare && send_prepare_state(x))
		return;
	switch (x->ph) {
	case PH_CONNECT: connected(x); break;
	case PH_ROUND: round_done(x); break;
	case PH_CONVERGED: converged_done(x); break;
	case PH_LAST_ROUND: last_round_done(x); break;
	case PH_COMPLETE: case PH_POSTCOPY: completed(x); break;
	case PH_PREPARED: case PH_STOPPING: case PH_STATE: case PH_DONE: break;
	}
}
