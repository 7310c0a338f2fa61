/* Progress and JSON events (send_events.h). */
#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "cli.h"
#include "rdmig.h"
#include "send_events.h"
#include "send_int.h"
#include "workload.h"

static const char *const status_names[] = {
	[ST_SETUP] = "setup", [ST_PREPARED] = "prepared", [ST_ACTIVE] = "active", [ST_DEVICE] = "device",
	[ST_COMPLETED] = "completed", [ST_FAILED] = "failed", [ST_CANCELLING] = "cancelling",
	[ST_CANCELLED] = "cancelled",
};
_Static_assert(sizeof(status_names) / sizeof(*status_names) == ST_CANCELLED + 1,
	       "status_names must name every enum send_status");

/* For the status reply and the state event: a stuck migration says where. */
static const char *const phase_names[] = {
	[PH_CONNECT] = "connect", [PH_PREPARED] = "prepared", [PH_ROUND] = "round",
	[PH_CONVERGED] = "converged", [PH_STOPPING] = "stopping",
	[PH_LAST_ROUND] = "last-round", [PH_STATE] = "state", [PH_COMPLETE] = "complete",
	[PH_POSTCOPY] = "postcopy",
	[PH_DONE] = "done",
};
_Static_assert(sizeof(phase_names) / sizeof(*phase_names) == PH_DONE + 1,
	       "phase_names must name every enum phase");

const char *send_status_name(enum send_status st)
{
	return status_names[st];
}

const char *send_phase_name(enum phase ph)
{
	return phase_names[ph];
}

static void draw_bar(struct sender *x, const struct rdmig_stats *st)
{
	uint64_t done = st->normal_bytes - x->iter_base, ms = cli_now_ms() - x->iter_t0;

	if (done + st->remaining > x->iter_planned)
		x->iter_planned = done + st->remaining;
	if (!x->bar.enabled || cli_now_ms() - x->bar_ms < 100)
		return;
	x->bar_ms = cli_now_ms();
	cli_bar_draw(&x->bar, x->iter_planned ? (double)done / (double)x->iter_planned : 0,
		     ms ? (double)done * 1000.0 / (double)ms : 0, st->iterations + 1);
}

void send_stats(struct sender *x, struct rdmig_stats *st)
{
	uint64_t waited = x->waited_ms;

	rdmig_source_stats(x->s, st);
	if (x->ph == PH_PREPARED && x->said_prepared)
		waited = cli_now_ms() - x->prepared_ms;
	st->total_time_ms -= waited < st->total_time_ms ? waited : st->total_time_ms;
}

void send_on_progress(void *ctx, const struct rdmig_stats *st)
{
	draw_bar(ctx, st);
}

void send_set_phase(struct sender *x, enum phase ph)
{
	struct json_object *o;

	/* Once per phase: waiting for QEMU to stop its guest goes back and
	 * forth between converged and stopping up to 20 times a second, which
	 * the iteration events already count. */
	if (x->o.json && !(x->said_phases & (1u << ph))) {
		o = cli_event("state");
		cli_json_str(o, "phase", phase_names[ph]);
		cli_emit(o);
		x->said_phases |= 1u << ph;
	}
	x->ph = ph;
}

void send_emit_setup(struct sender *x)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	struct json_object *o;

	if (!x->o.json)
		return;
	send_stats(x, &st);
	o = cli_event("setup");
	cli_json_u64(o, "setup-time", st.setup_time_ms);
	cli_json_u64(o, "total", st.total);
	json_object_object_add(o, "auth-key", json_object_new_boolean(x->o.key != NULL));
	if (x->e.wl) {
		const char *method, *why_not;
		unsigned threads;

		wl_tracking(x->e.wl, &method, &why_not, &threads);
		cli_json_str(o, "dirty-tracking", method);
		cli_json_u64(o, "dirty-tracking-threads", threads);
		if (why_not[0])
			cli_json_str(o, "dirty-tracking-fallback", why_not);
		json_object_object_add(o, "auto-converge",
				       json_object_new_boolean(x->o.auto_converge));
		if (x->o.auto_converge) {
			cli_json_str(o, "throttle-method", wl_throttle_method(x->e.wl, &method));
			cli_json_str(o, "throttle-cgroup", method);
		}
	}
	cli_emit(o);
}

void send_json_throttle(struct sender *x, struct json_object *o, bool now)
{
	unsigned pct = 0;
	uint64_t ms = 0;

	if (x->e.wl)
		wl_throttle_state(x->e.wl, &pct, &ms);
	cli_json_u64(o, "cpu-throttle-percentage", now ? pct : x->sw_throttle);
	cli_json_u64(o, "throttle-time", ms);
}

void send_emit_iteration(struct sender *x, uint64_t dirty, uint64_t dirty_ms,
			const struct rdmig_advice *a)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	struct json_object *o;
	uint64_t pages = x->last_bytes / PAGE;

	if (!x->o.json)
		return;
	send_stats(x, &st);
	o = cli_event("iteration");
	cli_json_str(o, "status", status_names[x->status]);
	cli_json_stats(o, &st);
	cli_json_u64(o, "remaining", dirty);
	cli_json_u64(o, "dirty-pages-rate", dirty_ms ? dirty / PAGE * 1000 / dirty_ms : 0);
	cli_json_u64(o, "pages-per-second", x->last_ms ? pages * 1000 / x->last_ms : pages * 1000);
	cli_json_u64(o, "iteration-bytes", x->last_bytes);
	cli_json_u64(o, "iteration-time", x->last_ms);
	if (x->e.wl) {
		cli_json_u64(o, "dirty-collect-us", x->collect_us);
		cli_json_u64(o, "dirty-clear-us", x->clear_us);
		send_json_throttle(x, o, true);
	}
	if (a) {
		cli_json_u64(o, "expected-downtime", a->expected_downtime_ms);
		cli_json_str(o, "decision", cli_decision_name(a->decision));
		cli_json_str(o, "reason", cli_reason_name(a->reason));
	}
	cli_emit(o);
}
