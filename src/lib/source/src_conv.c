#include "src_conv.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "src_int.h"
#include "src_mem.h"

/* struct rdmig_advice as release 0.3.0 had it: the least a caller passes. */
#define ADVICE_SIZE_0_3_0 (offsetof(struct rdmig_advice, text) + 256)
_Static_assert(sizeof(struct rdmig_advice) >= ADVICE_SIZE_0_3_0, "rdmig_advice only grows");

void src_conv_init(struct rdmig_source *s)
{
	const struct rdmig_config *c = &s->ss.cfg;

	atomic_store(&s->limits[RDMIG_LIMIT_MAX_DOWNTIME_MS], c->max_downtime_ms);
	atomic_store(&s->limits[RDMIG_LIMIT_SWITCHOVER_MS], c->switchover_ms);
	atomic_store(&s->limits[RDMIG_LIMIT_MAX_TIME_MS], c->max_time_ms);
	atomic_store(&s->limits[RDMIG_LIMIT_MAX_TIME_PER_GIB_MS], c->max_time_per_gib_ms);
	atomic_store(&s->limits[RDMIG_LIMIT_MAX_ITERATIONS], c->max_iterations);
	atomic_store(&s->limits[RDMIG_LIMIT_SWITCHOVER_BANDWIDTH], c->switchover_bandwidth);
}

int src_conv_set_limit(struct rdmig_source *s, unsigned limit, uint64_t value)
{
	/* What the config field holds (the time limits are 64 bits wide). */
	static const uint64_t most[SRC_LIMITS] = {
		[RDMIG_LIMIT_MAX_DOWNTIME_MS] = UINT32_MAX,
		[RDMIG_LIMIT_SWITCHOVER_MS] = UINT32_MAX,
		[RDMIG_LIMIT_MAX_TIME_MS] = UINT64_MAX,
		[RDMIG_LIMIT_MAX_TIME_PER_GIB_MS] = UINT64_MAX,
		[RDMIG_LIMIT_MAX_ITERATIONS] = UINT32_MAX,
		[RDMIG_LIMIT_SWITCHOVER_BANDWIDTH] = UINT64_MAX,
	};

	if (limit >= SRC_LIMITS)
		return -EINVAL;
	if (value > most[limit])
		return -ERANGE;
	/* As in the config: no downtime at all is not a limit, the default is. */
	if (limit == RDMIG_LIMIT_MAX_DOWNTIME_MS && !value)
		value = CFG_MAX_DOWNTIME_MS;
	atomic_store(&s->limits[limit], value);
	return 0;
}

void src_conv_policy(const struct rdmig_source *s, struct conv_policy *p)
{
	uint64_t total = 0;
	unsigned i;

	for (i = 0; i < s->nblocks; i++)
		total += s->blocks[i].d.length;
	/* The config's, but for the figures rdmig_source_set_limit() and
	 * rdmig_source_set_max_bandwidth() change while it runs. */
	conv_policy_init(p, &s->ss.cfg, total);
	p->max_downtime_ms = atomic_load(&s->limits[RDMIG_LIMIT_MAX_DOWNTIME_MS]);
	p->switch_ms = atomic_load(&s->limits[RDMIG_LIMIT_SWITCHOVER_MS]);
	p->max_bandwidth = atomic_load(&s->pace.rate);
	p->max_time_ms = conv_time_limit(atomic_load(&s->limits[RDMIG_LIMIT_MAX_TIME_MS]),
					 atomic_load(&s->limits[RDMIG_LIMIT_MAX_TIME_PER_GIB_MS]),
					 total);
	p->max_iterations = atomic_load(&s->limits[RDMIG_LIMIT_MAX_ITERATIONS]);
	p->switch_bw = atomic_load(&s->limits[RDMIG_LIMIT_SWITCHOVER_BANDWIDTH]);
}

uint64_t src_conv_switchover_bw(const struct rdmig_source *s)
{
	return atomic_load(&s->limits[RDMIG_LIMIT_SWITCHOVER_BANDWIDTH]);
}

/* The round just ended, as the policy reads it.  What is left accumulated
 * from the round's start (its marks were frozen then) until the log was
 * last taken: the round's end where the library pulls it, now where the
 * VMM pushes. */
static void last_round(struct rdmig_source *s, int64_t now, struct conv_round *r)
{
	int64_t seen = s->ss.cfg.dirty_sync ? s->round_end_ms : now;

	memset(r, 0, sizeof(*r));
	r->dirty = src_mem_dirty_bytes(s);
	r->sent = s->last_iter_bytes;
	r->round_ms = s->last_iter_ms;
	r->window_ms = seen > s->iter_start_ms ? (uint64_t)(seen - s->iter_start_ms) : 0;
	r->bw = s->bw;
	r->rounds = s->iteration;
	r->elapsed_ms = now > s->ss.stats.start_ms ? (uint64_t)(now - s->ss.stats.start_ms) : 0;
	r->throttle = s->throttle;
}

/* Decides for the round that ended last, once. */
static void decide(struct rdmig_source *s)
{
	struct rdmig_advice *a = &s->advice;
	int64_t now = rd_now_ms();
	struct conv_policy p;
	struct conv_round r;
	struct conv_advice ca;

	src_conv_policy(s, &p);
	last_round(s, now, &r);
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->iteration = s->iteration;
	a->remaining = r.dirty;
	a->max_downtime_ms = p.max_downtime_ms;
	a->elapsed_ms = r.elapsed_ms;
	a->max_time_ms = p.max_time_ms;
	if (!s->iteration) {
		a->decision = RDMIG_NEXT_ROUND;
		a->reason = RDMIG_REASON_NO_ROUND;
		strcpy(a->text, "no iteration has finished yet: iterate");
		return;
	}
	conv_next(&s->conv, &p, &r, &ca);
	s->throttle = ca.throttle;
	s->advised = s->iteration;
	a->decision = ca.decision;
	a->reason = ca.reason;
	a->throttle_pct = ca.throttle;
	a->expected_downtime_ms = ca.downtime_ms;
	a->bandwidth = ca.bw;
	memcpy(a->text, ca.text, sizeof(a->text));
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "after iteration %u: %s", s->iteration, a->text);
}

int src_conv_advice(struct rdmig_source *s, struct rdmig_advice *out)
{
	size_t n = out->size;

	if (n < ADVICE_SIZE_0_3_0)
		return rd_err_set(&s->ss.err, -EINVAL, "struct rdmig_advice: size %zu, at least "
				  "%zu expected (set it to sizeof(struct rdmig_advice))", n,
				  (size_t)ADVICE_SIZE_0_3_0);
	if (s->advised != s->iteration || !s->iteration)
		decide(s);
	if (n > sizeof(s->advice))
		n = sizeof(s->advice);
	memcpy(out, &s->advice, n);
	out->size = (uint32_t)n;
	return 0;
}
