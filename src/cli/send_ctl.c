/* The control socket's commands (send_ctl.h). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <json-c/json.h>

#include "cli.h"
#include "control.h"
#include "rdmig.h"
#include "send_ctl.h"
#include "send_events.h"
#include "send_int.h"
#include "send_phase.h"
#include "send_policy.h"

static struct json_object *status_reply(struct sender *x)
{
	struct json_object *o = json_object_new_object();
	struct rdmig_stats st = { .size = sizeof(st) };

	send_stats(x, &st);
	cli_json_str(o, "status", send_status_name(x->status));
	cli_json_str(o, "phase", send_phase_name(x->ph));
	cli_json_stats(o, &st);
	if (x->status == ST_COMPLETED && x->o.live)
		cli_json_u64(o, "downtime", x->downtime_ms);
	cli_json_u64(o, "max-bandwidth", x->max_bandwidth);
	cli_json_u64(o, "switchover-bandwidth", x->o.switch_bw);
	cli_json_u64(o, "max-downtime", x->max_downtime);
	if (x->o.live) {
		cli_json_u64(o, "expected-downtime", st.expected_downtime_ms);
		cli_json_u64(o, "max-iterations", x->o.max_iterations);
		cli_json_u64(o, "max-time", x->max_time_s);
		cli_json_u64(o, "max-time-per-gib", x->max_time_gib_s);
		cli_json_str(o, "on-timeout", x->o.on_timeout == RDMIG_ON_LIMIT_SWITCH_OVER ?
			     "switchover" : "cancel");
		json_object_object_add(o, "auto-converge",
				       json_object_new_boolean(x->o.auto_converge));
		if (x->e.wl)
			send_json_throttle(x, o, true);
	}
	return ctl_return(o);
}

void send_cancel(struct sender *x)
{
	x->cancelled = true;
	if (x->status == ST_ACTIVE || x->status == ST_SETUP || x->status == ST_PREPARED ||
	    x->status == ST_DEVICE)
		x->status = ST_CANCELLING;
	rdmig_source_cancel(x->s);
}

static int get_limit(struct json_object *req, const char *key, uint64_t *v, int *have)
{
	struct json_object *j;

	if (!json_object_object_get_ex(req, key, &j))
		return 0;
	if (!json_object_is_type(j, json_type_int) || json_object_get_int64(j) < 0)
		return -1;
	*v = (uint64_t)json_object_get_int64(j);
	*have = 1;
	return 0;
}

/* Until the workload stops: then its last pages go at the rate the
 * downtime was predicted at.  NULL when taken (or not asked). */
static struct json_object *set_switch_bw(struct sender *x, struct json_object *req, int *have)
{
	uint64_t v = 0;

	if (get_limit(req, "switchover-bandwidth", &v, have))
		return ctl_error("switchover-bandwidth must be a non-negative integer (bytes/s; 0: "
				 "max-bandwidth's)");
	if (!*have)
		return NULL;
	if (!x->o.live)
		return ctl_error("switchover-bandwidth is only used with --live or --qmp");
	if (x->ph >= PH_LAST_ROUND)
		return ctl_error("the workload is stopped: its last pages go at the rate its "
				 "downtime was predicted at");
	x->o.switch_bw = v;
	rdmig_source_set_limit(x->s, RDMIG_LIMIT_SWITCHOVER_BANDWIDTH, v);
	return NULL;
}

static struct json_object *set_reply(struct sender *x, struct json_object *req)
{
	uint64_t dt = 0, bw = 0, t = 0, it = 0;
	int have_dt = 0, have_bw = 0, have_t = 0, have_it = 0, have_sw = 0;
	struct json_object *e;

	if (get_limit(req, "max-downtime", &dt, &have_dt) || (have_dt && (!dt || dt > 3600000)))
		return ctl_error("max-downtime must be an integer from 1 to 3600000 (ms)");
	if (get_limit(req, "max-bandwidth", &bw, &have_bw))
		return ctl_error("max-bandwidth must be a non-negative integer (bytes/s)");
	if (get_limit(req, "max-time", &t, &have_t) || t > 864000)
		return ctl_error("max-time must be an integer from 0 (none) to 864000 (s)");
	if (get_limit(req, "max-iterations", &it, &have_it) || it > 100000)
		return ctl_error("max-iterations must be an integer from 0 (none) to 100000");
	e = set_switch_bw(x, req, &have_sw);
	if (e)
		return e;
	if (!have_dt && !have_bw && !have_t && !have_it && !have_sw)
		return ctl_error("set needs max-downtime, max-bandwidth, max-time, max-iterations "
				 "or switchover-bandwidth");
	if (have_dt) {
		x->max_downtime = dt;
		x->downtime_promised = true;
		rdmig_source_set_limit(x->s, RDMIG_LIMIT_MAX_DOWNTIME_MS, dt);
	}
	if (have_bw) {
		x->max_bandwidth = bw;
		/* Stopped, the last pages go at the rate granted to the
		 * switch-over, the one the downtime was predicted at. */
		if (!x->o.switch_bw || x->ph < PH_LAST_ROUND || x->ph == PH_DONE)
			rdmig_source_set_max_bandwidth(x->s, bw);
	}
	if (have_t) {
		x->max_time_s = t;
		send_set_time_limits(x);
	}
	if (have_it) {
		x->o.max_iterations = it;
		rdmig_source_set_limit(x->s, RDMIG_LIMIT_MAX_ITERATIONS, it);
	}
	return ctl_return(NULL);
}

/* A start before the connection is up is kept: the first round follows
 * it at once. */
static struct json_object *start_reply(struct sender *x)
{
	if (!x->o.defer)
		return ctl_error("this migration runs already: start is for one begun with --defer");
	if (x->start_asked)
		return ctl_error("start was given already");
	if (x->cancelled || x->ph == PH_DONE)
		return ctl_error("the migration has ended");
	x->start_asked = true;
	if (x->ph == PH_PREPARED) {
		if (x->said_prepared)
			x->waited_ms = cli_now_ms() - x->prepared_ms;
		send_begin(x);
	}
	if (x->failed)
		return ctl_error(x->f.msg);
	return ctl_return(NULL);
}

struct json_object *send_on_command(void *ctx, const char *cmd, struct json_object *req)
{
	struct sender *x = ctx;

	if (!strcmp(cmd, "status"))
		return status_reply(x);
	if (!strcmp(cmd, "cancel")) {
		send_cancel(x);
		return ctl_return(NULL);
	}
	if (!strcmp(cmd, "set"))
		return set_reply(x, req);
	if (!strcmp(cmd, "start"))
		return start_reply(x);
	return NULL;
}
