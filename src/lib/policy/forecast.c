/* forecast: rdmig_forecast(), the convergence policy (conv.h) run over
 * rounds a model of the workload predicts, before anything moves.
 *
 * The model is the one the policy itself assumes: a round takes what it
 * sends at the bandwidth, plus its own cost, and the workload dirties at a
 * steady rate, slowed in proportion by the throttle, within a working set
 * it never leaves.  A real guest's rate varies; the estimate is meant to
 * tell "converges in a few rounds" from "needs the throttle" from "never",
 * and migrate-send --estimate checks it against real rounds (within a
 * factor of two). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "conv.h"
#include "rdmig.h"

/* A policy without limits and without stall detection could go on for
 * ever on a workload that never converges: the forecast stops here. */
#define FORECAST_MAX_ROUNDS 100000u

typedef unsigned long long ull;

static int bad(char *err, size_t errlen, const char *msg)
{
	if (err && errlen)
		snprintf(err, errlen, "%s", msg);
	return -EINVAL;
}

/* Bytes the workload leaves dirty after a round of @ms at @throttle. */
static uint64_t dirtied(const struct rdmig_forecast_in *in, uint64_t ws, uint64_t ms,
			unsigned throttle)
{
	double d = (double)in->dirty_rate * (double)(100 - throttle) / 100.0 * (double)ms /
		   1000.0;

	return d >= (double)ws ? ws : (uint64_t)d;
}

static uint64_t send_ms(uint64_t bytes, uint64_t bw)
{
	double ms = (double)bytes * 1000.0 / (double)bw;

	return ms >= (double)UINT64_MAX / 2 ? UINT64_MAX / 2 : (uint64_t)ms;
}

static void outcome(struct rdmig_forecast *f, const struct conv_policy *p,
		    const struct conv_advice *a, uint64_t rounds, uint64_t elapsed)
{
	f->decision = a->decision;
	f->reason = a->reason;
	f->throttle_pct = a->throttle;
	f->rounds = rounds;
	if (a->decision == RDMIG_SWITCH_OVER) {
		f->downtime_ms = a->downtime_ms;
		f->total_ms = elapsed + a->downtime_ms;
		f->within_limit = a->downtime_ms <= p->max_downtime_ms;
		snprintf(f->text, sizeof(f->text), "switches over after %llu rounds in %.1f s, "
			 "throttle %u%%, downtime %llu ms %s the limit of %llu ms", (ull)rounds,
			 (double)f->total_ms / 1000.0, a->throttle, (ull)a->downtime_ms,
			 f->within_limit ? "within" : "over", (ull)p->max_downtime_ms);
		return;
	}
	f->total_ms = elapsed;
	snprintf(f->text, sizeof(f->text), "gives up after %llu rounds in %.1f s: %.160s",
		 (ull)rounds, (double)elapsed / 1000.0, a->text);
}

int rdmig_forecast(const struct rdmig_config *cfg, const struct rdmig_forecast_in *in,
		   struct rdmig_forecast *out, char *err, size_t errlen)
{
	struct rdmig_config c;
	struct conv_policy p;
	struct conv_advice a;
	struct conv_round r;
	struct conv conv;
	struct rd_err e = { 0 };
	uint64_t ws, bw, left, elapsed = 0, k;
	unsigned throttle = 0;

	if (!cfg || !in || !out || in->size < sizeof(*in) || out->size < sizeof(*out))
		return bad(err, errlen, "rdmig_forecast: a NULL or a size smaller than sizeof");
	if (!in->bandwidth || !in->image_bytes)
		return bad(err, errlen, "rdmig_forecast: no bandwidth or no image to forecast");
	if (cfg_load(&c, cfg, &e))
		return bad(err, errlen, e.msg);
	conv_policy_init(&p, &c, in->image_bytes);
	conv_link_measured(&p, in->bandwidth);
	bw = p.max_bandwidth && p.max_bandwidth < in->bandwidth ? p.max_bandwidth : in->bandwidth;
	ws = in->working_set && in->working_set < in->image_bytes ? in->working_set :
								    in->image_bytes;
	memset(out, 0, sizeof(*out));
	out->size = sizeof(*out);
	conv_init(&conv);
	left = in->image_bytes;
	for (k = 1; k <= FORECAST_MAX_ROUNDS; k++) {
		uint64_t ms = (k == 1 && in->first_round_ms ? in->first_round_ms :
							       send_ms(left, bw)) + in->round_cost_ms;

		elapsed += ms;
		memset(&r, 0, sizeof(r));
		r.sent = left;
		r.dirty = dirtied(in, ws, ms, throttle);
		r.round_ms = r.window_ms = ms;
		r.bw = bw;
		r.rounds = k;
		r.elapsed_ms = elapsed;
		r.throttle = throttle;
		conv_next(&conv, &p, &r, &a);
		if (a.decision == RDMIG_SWITCH_OVER || a.decision == RDMIG_GIVE_UP) {
			outcome(out, &p, &a, k, elapsed);
			return 0;
		}
		throttle = a.throttle;
		left = r.dirty;
	}
	a.decision = RDMIG_GIVE_UP;
	a.reason = RDMIG_REASON_NOT_CONVERGED;
	snprintf(a.text, sizeof(a.text), "no end after %u rounds (no limit, no stall "
		 "detection): set max_iterations, max_time_ms or stall_rounds",
		 FORECAST_MAX_ROUNDS);
	outcome(out, &p, &a, FORECAST_MAX_ROUNDS, elapsed);
	return 0;
}
