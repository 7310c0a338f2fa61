#include "conv.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef unsigned long long ull;

/* The bandwidth the last pages would go at: the limit binds them too,
 * unless the caller granted the switch-over a bandwidth of its own.  That
 * one is taken on trust where the rounds could not show more than the cap
 * they were held to, and no further than they showed the link carries
 * when it, not the cap, held them back (a tenth of slack for the pacing's
 * own jitter). */
static uint64_t effective_bw(const struct conv_policy *p, uint64_t bw)
{
	uint64_t rate = p->max_bandwidth;

	if (p->switch_bw) {
		/* Nothing measured yet: no prediction, as without a grant. */
		if (!bw)
			return 0;
		if ((!rate || bw < rate - rate / 10) && bw < p->switch_bw)
			return bw;
		return p->switch_bw;
	}
	return rate && (!bw || rate < bw) ? rate : bw;
}

void conv_link_measured(struct conv_policy *p, uint64_t link_bw)
{
	/* Above the cap (or with none), the link was seen to carry no more
	 * than that: the grant cannot make it faster.  At the cap it may
	 * carry more, which the grant says, as effective_bw() takes it. */
	if (p->switch_bw > link_bw && (!p->max_bandwidth || link_bw > p->max_bandwidth))
		p->switch_bw = link_bw;
}

bool conv_converged(const struct conv_policy *p, uint64_t dirty, uint64_t bw)
{
	uint64_t max_ms = p->max_downtime_ms;

	if (!dirty)
		return true;
	bw = effective_bw(p, bw);
	if (!bw)
		return false;
	/* The fixed cost counts at most half: one slow measurement of it must
	 * not keep the pre-copy from ever converging. */
	return dirty * 1000 / bw + (p->switch_ms < max_ms / 2 ? p->switch_ms : max_ms / 2) <=
	       max_ms;
}

/* Worth it: the downtime is the part the guest feels, and a round this
 * short adds little to the total.  The guest dirties at the rate the
 * window saw; a round as long as sending @dirty (plus the window's own
 * overhead beyond the round: taking the dirty log) should leave less than
 * half of it.  The arithmetic is migrate-send's, to the rounding. */
bool conv_round_pays(const struct conv_policy *p, uint64_t dirty, uint64_t bw,
		     uint64_t window_ms, uint64_t round_ms)
{
	uint64_t send_ms, overhead_ms, next_ms;

	if (!dirty || !bw || !window_ms)
		return false;
	send_ms = dirty * 1000 / bw;
	/* Data worth less than the fixed switch-over cost: no measurable gain. */
	if (send_ms * 2 <= p->switch_ms || send_ms < 10)
		return false;
	overhead_ms = round_ms < window_ms ? window_ms - round_ms : 0;
	next_ms = send_ms + overhead_ms;
	return dirty / window_ms * next_ms < dirty / 2;
}

uint64_t conv_downtime_ms(const struct conv_policy *p, uint64_t dirty, uint64_t bw)
{
	bw = effective_bw(p, bw);
	if (!dirty)
		return p->switch_ms;
	return bw ? dirty * 1000 / bw + p->switch_ms : 0;
}

uint64_t conv_time_limit(uint64_t max_ms, uint64_t per_gib_ms, uint64_t total)
{
	uint64_t gib = per_gib_ms ? (uint64_t)((double)per_gib_ms * (double)total /
					       (double)(1ull << 30)) : 0;

	/* Any image gets a moment at least. */
	if (per_gib_ms && !gib)
		gib = 1;
	if (!max_ms || (gib && gib < max_ms))
		return gib;
	return max_ms;
}

uint64_t conv_learn_bw(uint64_t bw, uint64_t bytes, uint64_t ms)
{
	if (!bytes || !ms || (bw && bytes < CONV_BW_MIN_BYTES))
		return bw;
	return bytes * 1000 / ms;
}

void conv_policy_init(struct conv_policy *p, const struct rdmig_config *c, uint64_t total)
{
	memset(p, 0, sizeof(*p));
	p->max_downtime_ms = c->max_downtime_ms;
	p->switch_ms = c->switchover_ms;
	p->max_bandwidth = c->max_bandwidth;
	p->switch_bw = c->switchover_bandwidth;
	p->max_time_ms = conv_time_limit(c->max_time_ms, c->max_time_per_gib_ms, total);
	p->max_iterations = c->max_iterations;
	p->stall_rounds = c->stall_rounds;
	p->auto_converge = c->auto_converge;
	p->switch_on_limit = c->on_limit == RDMIG_ON_LIMIT_SWITCH_OVER;
	p->throttle_initial = c->throttle_initial;
	p->throttle_increment = c->throttle_increment;
	p->throttle_max = c->throttle_max;
	p->tailslow = c->throttle_tailslow;
}

void conv_init(struct conv *c)
{
	memset(c, 0, sizeof(*c));
}

/* The history the rules read: dirtying over the trigger, and the least
 * left since the throttle last changed. */
static void track(struct conv *c, const struct conv_round *r)
{
	if (r->dirty > r->sent * CONV_TRIGGER_PCT / 100)
		c->high++;
	else
		c->high = 0;
	if (!c->started || r->throttle != c->last_throttle || r->dirty < c->least) {
		c->least = r->dirty;
		c->since_least = 0;
	} else {
		c->since_least++;
	}
	c->last_throttle = r->throttle;
	c->started = true;
}

static bool stalled(const struct conv *c, const struct conv_policy *p)
{
	return p->stall_rounds && c->since_least >= p->stall_rounds;
}

/* QEMU's mig_throttle_guest_down(): the first throttle, then steps;
 * tailslow cuts a step to what should bring the dirtying down to the
 * trigger's share of what a round sends. */
static unsigned next_throttle(const struct conv_policy *p, const struct conv_round *r)
{
	uint64_t inc = p->throttle_increment, cpu_now, cpu_ideal;
	uint64_t want = r->sent * CONV_TRIGGER_PCT / 100;

	if (!r->throttle)
		return p->throttle_initial < p->throttle_max ? p->throttle_initial :
		       p->throttle_max;
	if (p->tailslow && r->dirty > want) {
		cpu_now = 100 - r->throttle;
		cpu_ideal = (uint64_t)((double)cpu_now * (double)want / (double)r->dirty);
		if (cpu_now - cpu_ideal < inc)
			inc = cpu_now - cpu_ideal ? cpu_now - cpu_ideal : 1;
	}
	return r->throttle + inc < p->throttle_max ? r->throttle + (unsigned)inc :
	       p->throttle_max;
}

static void say(struct conv_advice *a, enum rdmig_decision d, enum rdmig_reason why,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void say(struct conv_advice *a, enum rdmig_decision d, enum rdmig_reason why,
		const char *fmt, ...)
{
	va_list ap;

	a->decision = d;
	a->reason = why;
	va_start(ap, fmt);
	vsnprintf(a->text, sizeof(a->text), fmt, ap);
	va_end(ap);
}

/* "N ms at R MB/s" for the prediction, or why there is none. */
static void predicted(const struct conv_advice *a, uint64_t dirty, char *buf, size_t len)
{
	if (!a->bw)
		snprintf(buf, len, dirty ? "an unknown time (no bandwidth measured yet)" :
			 "%llu ms (the switch-over's own)", (ull)a->downtime_ms);
	else
		snprintf(buf, len, "%llu ms at %.1f MB/s", (ull)a->downtime_ms,
			 (double)a->bw / 1e6);
}

/* A limit reached before converging: the policy's choice, said with the
 * downtime it would cost. */
static void at_limit(const struct conv_policy *p, const struct conv_round *r,
		     struct conv_advice *a, enum rdmig_reason why, const char *what)
{
	char dt[96];

	predicted(a, r->dirty, dt, sizeof(dt));
	if (p->switch_on_limit)
		say(a, RDMIG_SWITCH_OVER, why, "%s: switching over anyway (on_limit): %llu bytes "
		    "left take %s, over max_downtime %llu ms", what, (ull)r->dirty, dt,
		    (ull)p->max_downtime_ms);
	else
		say(a, RDMIG_GIVE_UP, why, "%s: giving up, the guest runs on here: %llu bytes "
		    "left would take %s, over max_downtime %llu ms", what, (ull)r->dirty, dt,
		    (ull)p->max_downtime_ms);
}

/* Converged: switch over, unless a round pays and no limit says stop.  A
 * round that was to pay and left three quarters or more of what the one
 * before it left says the estimate missed a cost: no more of them. */
static void converged(const struct conv *c, const struct conv_policy *p,
		      const struct conv_round *r, struct conv_advice *a, bool limit)
{
	bool missed = c->paid && r->dirty / 3 >= c->last_dirty / 4;
	char dt[96];

	predicted(a, r->dirty, dt, sizeof(dt));
	if (!limit && !missed && conv_round_pays(p, r->dirty, r->bw, r->window_ms, r->round_ms))
		say(a, RDMIG_NEXT_ROUND, RDMIG_REASON_ROUND_PAYS, "%llu bytes left take %s, "
		    "within max_downtime %llu ms, but one more round should leave less than "
		    "half", (ull)r->dirty, dt, (ull)p->max_downtime_ms);
	else
		say(a, RDMIG_SWITCH_OVER, RDMIG_REASON_CONVERGED, "%llu bytes left take %s, "
		    "within max_downtime %llu ms: switch over", (ull)r->dirty, dt,
		    (ull)p->max_downtime_ms);
}

/* The limit reached, if any, named in @what. */
static enum rdmig_reason limit_reached(const struct conv_policy *p, const struct conv_round *r,
				       char *what, size_t len)
{
	if (p->max_time_ms && r->elapsed_ms >= p->max_time_ms) {
		snprintf(what, len, "%llu ms since the start, max_time %llu ms",
			 (ull)r->elapsed_ms, (ull)p->max_time_ms);
		return RDMIG_REASON_MAX_TIME;
	}
	if (p->max_iterations && r->rounds >= p->max_iterations) {
		snprintf(what, len, "%llu rounds without converging, max_iterations %llu",
			 (ull)r->rounds, (ull)p->max_iterations);
		return RDMIG_REASON_MAX_ITERATIONS;
	}
	return RDMIG_REASON_NO_ROUND;
}

static void throttle(const struct conv_policy *p, const struct conv_round *r,
		     struct conv *c, struct conv_advice *a, bool stall)
{
	a->throttle = next_throttle(p, r);
	c->high = 0;
	if (stall)
		say(a, RDMIG_THROTTLE, RDMIG_REASON_STALL, "%u rounds without leaving less than "
		    "%llu bytes: throttle the guest from %u%% to %u%%", c->since_least,
		    (ull)c->least, r->throttle, a->throttle);
	else
		say(a, RDMIG_THROTTLE, RDMIG_REASON_DIRTY_RATE, "the guest dirtied %llu bytes "
		    "while the round sent %llu, over %d%% twice running: throttle it from %u%% "
		    "to %u%%", (ull)r->dirty, (ull)r->sent, CONV_TRIGGER_PCT, r->throttle,
		    a->throttle);
}

/* Not converged: a limit, a throttle, a stall, or another round. */
static void unconverged(struct conv *c, const struct conv_policy *p,
			const struct conv_round *r, struct conv_advice *a,
			enum rdmig_reason limit, const char *limit_what)
{
	char what[128], dt[96];

	if (limit != RDMIG_REASON_NO_ROUND) {
		at_limit(p, r, a, limit, limit_what);
		return;
	}
	if (p->auto_converge && r->throttle < p->throttle_max &&
	    (c->high >= 2 || stalled(c, p))) {
		throttle(p, r, c, a, c->high < 2);
		return;
	}
	if (stalled(c, p)) {
		snprintf(what, sizeof(what), "%u rounds without leaving less than %llu bytes%s",
			 c->since_least, (ull)c->least, p->auto_converge ? " at the most throttle" :
			 "");
		at_limit(p, r, a, RDMIG_REASON_STALL, what);
		return;
	}
	if (!a->bw) {
		say(a, RDMIG_NEXT_ROUND, RDMIG_REASON_NO_BANDWIDTH, "%llu bytes left, and no "
		    "round has measured the bandwidth yet: another round", (ull)r->dirty);
		return;
	}
	predicted(a, r->dirty, dt, sizeof(dt));
	say(a, RDMIG_NEXT_ROUND, RDMIG_REASON_NOT_CONVERGED, "%llu bytes left would take %s, "
	    "over max_downtime %llu ms: another round", (ull)r->dirty, dt,
	    (ull)p->max_downtime_ms);
}

void conv_next(struct conv *c, const struct conv_policy *p, const struct conv_round *r,
	       struct conv_advice *a)
{
	enum rdmig_reason limit;
	char what[128];

	memset(a, 0, sizeof(*a));
	a->throttle = r->throttle;
	a->bw = effective_bw(p, r->bw);
	a->downtime_ms = conv_downtime_ms(p, r->dirty, r->bw);
	track(c, r);
	limit = limit_reached(p, r, what, sizeof(what));
	if (conv_converged(p, r->dirty, r->bw))
		converged(c, p, r, a, limit != RDMIG_REASON_NO_ROUND);
	else
		unconverged(c, p, r, a, limit, what);
	c->paid = a->reason == RDMIG_REASON_ROUND_PAYS;
	c->last_dirty = r->dirty;
}
