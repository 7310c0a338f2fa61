/* The final report (send_report.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "cli.h"
#include "rdmig.h"
#include "send_events.h"
#include "send_int.h"
#include "send_report.h"
#include "workload.h"

void send_limit_said(const struct sender *x, char *buf, size_t len)
{
	const struct rdmig_advice *a = &x->adv;

	switch (a->reason) {
	case RDMIG_REASON_MAX_TIME:
		snprintf(buf, len, "%.1f s since the start reached the time limit of %.1f s (%s)",
			 (double)a->elapsed_ms / 1000.0, (double)a->max_time_ms / 1000.0,
			 x->max_time_s && x->max_time_gib_s ? "--max-time, --max-time-per-gib" :
			 x->max_time_s ? "--max-time" : "--max-time-per-gib");
		break;
	case RDMIG_REASON_MAX_ITERATIONS:
		snprintf(buf, len, "%" PRIu64 " rounds reached --max-iterations", a->iteration);
		break;
	case RDMIG_REASON_STALL:
		snprintf(buf, len, "the rounds stopped shrinking what is left%s",
			 x->o.auto_converge ? " at the most throttle" : " (no --auto-converge)");
		break;
	default:
		snprintf(buf, len, "%s", a->text);
		break;
	}
}

void send_left_said(const struct rdmig_advice *a, char *buf, size_t len)
{
	char b[32];

	if (a->bandwidth)
		snprintf(buf, len, "%s left would take %" PRIu64 " ms at %.1f MB/s",
			 cli_fmt_bytes(a->remaining, b, sizeof(b)), a->expected_downtime_ms,
			 (double)a->bandwidth / 1e6);
	else
		snprintf(buf, len, "%s left, the link not measured yet",
			 cli_fmt_bytes(a->remaining, b, sizeof(b)));
}

/* Switched over at a limit with --on-timeout switchover: the pause was
 * known to go over --max-downtime.  A switch to post-copy at a limit
 * (--on-timeout postcopy) is not: its pause is the stop and the device
 * state, and only the pause is what --max-downtime promises. */
static bool at_limit(const struct sender *x)
{
	return !x->pc_switch && x->sw_reason != RDMIG_REASON_CONVERGED;
}

/* Switched over at a limit, or the downtime measured longer than
 * --max-downtime although the prediction fit. */
static bool over_limit(const struct sender *x)
{
	return at_limit(x) || x->downtime_ms > x->adv.max_downtime_ms;
}

bool send_promise_broken(const struct sender *x)
{
	return at_limit(x) || (x->sw_promised && x->downtime_ms > x->adv.max_downtime_ms);
}

/* The completed event's account of it: which limit, and by how much. */
static struct json_object *limit_exceeded(const struct sender *x)
{
	struct json_object *o = json_object_new_object();
	uint64_t lim = x->adv.max_downtime_ms;
	char why[600], left[128];

	if (at_limit(x)) {
		send_limit_said(x, why, sizeof(why));
		send_left_said(&x->adv, left, sizeof(left));
		snprintf(why + strlen(why), sizeof(why) - strlen(why), "; %s: switched over anyway "
			 "(--on-timeout switchover)", left);
		cli_json_str(o, "limit", cli_reason_name(x->sw_reason));
	} else if (x->pc_switch) {
		snprintf(why, sizeof(why), "the pause before post-copy (the stop and the device "
			 "state) took longer");
		cli_json_str(o, "limit", "max-downtime");
	} else {
		snprintf(why, sizeof(why), "the downtime predicted, %" PRIu64 " ms, fit; the "
			 "switch-over took longer", x->sw_expected);
		cli_json_str(o, "limit", "max-downtime");
	}
	/* false: the default, reported but not kept by the exit status */
	json_object_object_add(o, "given", json_object_new_boolean(send_promise_broken(x)));
	cli_json_str(o, "why", why);
	cli_json_u64(o, "expected-downtime", x->sw_expected);
	cli_json_u64(o, "downtime", x->downtime_ms);
	cli_json_u64(o, "max-downtime", lim);
	cli_json_u64(o, "exceeded-by", x->downtime_ms > lim ? x->downtime_ms - lim : 0);
	return o;
}

/* On standard error whatever the output: a limit was not kept. */
static void say_over_limit(const struct sender *x)
{
	uint64_t lim = x->adv.max_downtime_ms;
	char why[600];

	if (!over_limit(x))
		return;
	if (x->pc_switch) {
		cli_err("%sMigration to %s:%s: the pause before post-copy (%s) was %" PRIu64
			" ms, over %s--max-downtime %" PRIu64 " ms by %" PRIu64 " ms%s",
			x->sw_promised ? "" : "warning: ", x->o.host, x->o.port, x->pc_reason,
			x->downtime_ms,
			x->sw_promised ? "" : "the default ", lim, x->downtime_ms - lim,
			x->sw_promised ? "" : "; give --max-downtime to have the exit status "
			"keep it");
	} else if (at_limit(x)) {
		send_limit_said(x, why, sizeof(why));
		cli_err("Migration to %s:%s completed over its limits: %s, and it switched over "
			"anyway (--on-timeout switchover): downtime %" PRIu64 " ms against "
			"--max-downtime %" PRIu64 " ms (predicted %" PRIu64 " ms)", x->o.host,
			x->o.port, why, x->downtime_ms, lim, x->sw_expected);
	} else if (x->sw_promised) {
		cli_err("Migration to %s:%s completed over --max-downtime: downtime %" PRIu64
			" ms, over %" PRIu64 " ms by %" PRIu64 " ms (predicted %" PRIu64 " ms at the "
			"switch-over: the stop, the last round or the device state took longer)",
			x->o.host, x->o.port, x->downtime_ms, lim, x->downtime_ms - lim,
			x->sw_expected);
	} else {
		cli_err("warning: downtime %" PRIu64 " ms, over the default --max-downtime %" PRIu64
			" ms by %" PRIu64 " ms (predicted %" PRIu64 " ms at the switch-over); give "
			"--max-downtime to have the exit status keep it", x->downtime_ms, lim,
			x->downtime_ms - lim, x->sw_expected);
	}
}

/* The completed event's account of the downtime (live): its parts, and
 * what the switch-over was predicted and held to. */
static void json_downtime(struct sender *x, struct json_object *o)
{
	struct json_object *parts = json_object_new_object();

	cli_json_u64(o, "downtime", x->downtime_ms);
	/* For a manager on this host lining up its own events (rdmig-libvirt's
	 * guest downtime): the event itself comes after the teardown, later by
	 * a varying amount. */
	cli_json_u64(o, "stopped-at", x->stop_ms);
	cli_json_u64(parts, "stop", x->dt_stop);
	cli_json_u64(parts, "stop-tracking-us", x->dt_track_us);
	cli_json_u64(parts, "last-round", x->dt_round);
	cli_json_u64(parts, "device-state", x->dt_state);
	cli_json_u64(parts, "confirm", x->dt_confirm);
	json_object_object_add(o, "downtime-parts", parts);
	/* The parts add up to the downtime; the post-copy that follows the
	 * pause is reported beside them. */
	cli_json_str(o, "switchover", x->pc_switch ? "postcopy" : "precopy");
	if (x->pc_switch)
		cli_json_u64(o, "postcopy-time", x->dt_postcopy);
	cli_json_u64(o, "max-downtime", x->adv.max_downtime_ms);
	cli_json_u64(o, "expected-downtime", x->sw_expected);
	cli_json_u64(o, "switchover-cost", x->switch_ms);
	if (x->o.switch_bw)
		cli_json_u64(o, "switchover-bandwidth", x->o.switch_bw);
	cli_json_str(o, "switchover-reason", x->pc_switch ? x->pc_reason :
		     cli_reason_name(x->sw_reason));
	send_json_throttle(x, o, false);
	if (over_limit(x))
		json_object_object_add(o, "limit-exceeded", limit_exceeded(x));
}

static void completed_event(struct sender *x, const struct rdmig_stats *st)
{
	struct json_object *o = cli_event("completed");

	cli_json_str(o, "status", "completed");
	cli_json_stats(o, st);
	if (x->o.defer)
		cli_json_u64(o, "prepared-time", x->waited_ms);
	if (x->o.live)
		json_downtime(x, o);
	cli_emit(o);
}

/* Without --json: the summary, on standard error. */
static void summary(struct sender *x, const struct rdmig_stats *st)
{
	char a[32], b[32], c[32], left[200];
	double secs, rate;

	secs = (double)st->total_time_ms / 1000.0;
	rate = st->data_time_ms ? (double)st->normal_bytes * 1000.0 / (double)st->data_time_ms : 0;
	cli_err("migration to %s:%s completed in %.2f s: %s in %" PRIu64 " iteration%s",
		x->o.host, x->o.port, secs, cli_fmt_bytes(st->total, a, sizeof(a)), st->iterations,
		st->iterations == 1 ? "" : "s");
	fprintf(stderr, "  sent %s at %s/s; %" PRIu64 " zero pages (%s) not sent as data; "
		"state %" PRIu64 " bytes\n", cli_fmt_bytes(st->normal_bytes, b, sizeof(b)),
		cli_fmt_bytes((uint64_t)rate, c, sizeof(c)), st->zero_pages,
		cli_fmt_bytes(st->zero_pages * PAGE, a, sizeof(a)), st->state_bytes);
	fprintf(stderr, "  setup %" PRIu64 " ms", st->setup_time_ms);
	if (x->e.wl) {
		wl_left(x->e.wl, left, sizeof(left));
		fprintf(stderr, ", downtime %" PRIu64 " ms; %s", x->downtime_ms, left);
		if (x->pc_switch)
			fprintf(stderr, "; post-copy (%s) %" PRIu64 " ms after the pause",
				x->pc_reason, x->dt_postcopy);
	}
	fputc('\n', stderr);
}

void send_report_success(struct sender *x)
{
	struct rdmig_stats st = { .size = sizeof(st) };

	send_stats(x, &st);
	if (x->o.live)
		say_over_limit(x);
	if (x->o.json)
		completed_event(x, &st);
	else
		summary(x, &st);
}

/* What became of the workload after a failure, for the one line. */
static const char *workload_fate(struct sender *x, struct cli_err *fate)
{
	fate->msg[0] = '\0';
	if (!x->e.wl)
		return fate->msg;
	if (!x->resumed || x->untouched)
		cli_err_set(fate, 0, "; %s", x->resume_err.msg);
	else if (x->pc_never_ran)
		cli_err_set(fate, 0, "; the destination's guest never ran: resumed after the "
			    "switch to post-copy, %s", wl_runs_again(x->e.wl));
	else
		cli_err_set(fate, 0, "; %s", wl_runs_again(x->e.wl));
	return fate->msg;
}

/* The exit status: the failure's, but the command's own faults are
 * internal ones, and a cancel or giving up says so whatever failed. */
static int failure_code(const struct sender *x)
{
	const struct failure *f = &x->f;
	int code = cli_exit_code(f->rc, f->phase, f->msg);

	if (f->local && code == CLI_EX_TRANSFER)
		code = CLI_EX_INTERNAL;
	if (f->rc == -ECANCELED || x->cancelled)
		code = CLI_EX_CANCELLED;
	if (x->gave_up)
		code = CLI_EX_GAVE_UP;
	return code;
}

/* The one line, for standard error and the failed event's "error". */
static void failure_line(struct sender *x, int code, char *line, size_t len)
{
	const struct failure *f = &x->f;
	struct cli_err fate_buf;
	const char *fate = workload_fate(x, &fate_buf);
	if (code == CLI_EX_GAVE_UP)
		snprintf(line, len, "Migration to %s:%s %s%s%s", x->o.host, x->o.port,
			 x->gave_up_msg, fate, x->o.auto_converge && x->resumed ? ", unthrottled" : "");
	else if (code == CLI_EX_CANCELLED)
		snprintf(line, len, "Migration to %s:%s cancelled%s", x->o.host, x->o.port,
			 fate);
	else if (f->phase == CLI_PHASE_CONNECT && code != CLI_EX_TRANSFER)
		snprintf(line, len, "Unable to connect to %s:%s: %s", x->o.host, x->o.port,
			 f->msg);
	else
		snprintf(line, len, "Migration to %s:%s failed: %s%s", x->o.host, x->o.port,
			 f->msg, fate);
}

static void failed_event(struct sender *x, const char *line, int code)
{
	struct json_object *o = cli_event("failed");

	/* Whether the workload runs here again, for a script to act on. */
	if (x->e.wl)
		json_object_object_add(o, wl_running_key(x->e.wl),
				       json_object_new_boolean(x->resumed));
	if (x->o.defer)
		json_object_object_add(o, "started", json_object_new_boolean(x->begun));
	/* After a switch: whether the destination said its guest never ran,
	 * the one case the workload is resumed then. */
	if (x->pc_handed)
		json_object_object_add(o, "destination-guest-never-ran",
				       json_object_new_boolean(x->pc_never_ran));
	if (x->e.wl)
		send_json_throttle(x, o, true);
	if (x->gave_up) {
		cli_json_str(o, "limit", cli_reason_name(x->adv.reason));
		cli_json_u64(o, "expected-downtime", x->adv.expected_downtime_ms);
		cli_json_u64(o, "max-downtime", x->adv.max_downtime_ms);
	}
	cli_emit_failed(line, code, o);
}

int send_report_failure(struct sender *x)
{
	int code = failure_code(x);
	char line[2048];

	failure_line(x, code, line, sizeof(line));
	cli_bar_clear(&x->bar);
	cli_err("%s", line);
	if (x->o.json)
		failed_event(x, line, code);
	return code;
}
