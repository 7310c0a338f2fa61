/* conv: when a pre-copy migration switches over, throttles the guest or
 * gives up; figures in, a decision out.
 *
 * After each round the caller says what is left, what the round sent and
 * how long it took, the bandwidth it measured, the time spent so far and
 * the throttle it applies; the policy answers with one of enum
 * rdmig_decision, the reason, the throttle to apply from now and the
 * downtime switching over now would take.  The rules:
 *  - converged: what is left, at the bandwidth (no more than max_bandwidth),
 *    plus the switch-over's fixed cost counted at most at half the limit
 *    (one slow measurement of it must not keep a migration from ever
 *    converging), fits max_downtime.  Converged, it switches over, unless
 *    one more round pays (the guest dirtying at the rate this round saw
 *    would leave less than half as much after a round that short) and no
 *    limit is reached; a round taken because it paid must have left less
 *    than three quarters of what the one before it left (it was to leave
 *    less than half), or no further round pays: its fixed costs were more
 *    than the estimate saw, and rounds would go on shrinking by a little
 *    each, for ever;
 *  - a limit reached unconverged (time, rounds, a stall the throttle can no
 *    longer help) gives up, or switches over above max_downtime when the
 *    policy says so: never silently;
 *  - auto-converge, QEMU's model: when the guest dirtied more than half of
 *    what the round sent, twice running (cpu-throttle-trigger-threshold
 *    50), or the rounds stalled, the throttle rises: to throttle_initial,
 *    then by throttle_increment (tailslow: by no more than should make the
 *    dirtying fit that half), up to throttle_max;
 *  - a stall: stall_rounds rounds in a row leave no less than the least
 *    left after an earlier one (counted afresh whenever the throttle
 *    changed).
 * No clock here, nothing printed: the caller measures, and its state of
 * past rounds lives in struct conv, so the policy is tested on recorded
 * rounds (test/unit/check_conv.c).  migrate-send's old rules (converged,
 * another round pays) are conv_converged() and conv_round_pays(). */
#ifndef RDMIG_CONV_H
#define RDMIG_CONV_H

#include <stdbool.h>
#include <stdint.h>

#include "rdmig.h"

/* QEMU's cpu-throttle-trigger-threshold: the guest dirtied more than this
 * percent of what the round sent. */
#define CONV_TRIGGER_PCT 50
/* A round that moved less says more about its fixed costs than about the
 * link: it does not replace an earlier estimate of the bandwidth. */
#define CONV_BW_MIN_BYTES (1u << 20)

struct conv_policy {
	uint64_t max_downtime_ms;
	uint64_t switch_ms;        /* the switch-over's fixed cost */
	uint64_t max_bandwidth;    /* bytes per second the link may use (0: any) */
	uint64_t switch_bw;        /* ... once the guest is paused (0: max_bandwidth) */
	uint64_t max_time_ms;      /* 0: none (conv_time_limit()) */
	uint64_t max_iterations;   /* 0: none */
	unsigned stall_rounds;     /* 0: not watched */
	bool auto_converge;
	bool switch_on_limit;      /* RDMIG_ON_LIMIT_SWITCH_OVER */
	unsigned throttle_initial, throttle_increment, throttle_max;
	bool tailslow;
};

/* One round's figures, as the caller measured them at its end. */
struct conv_round {
	uint64_t dirty;            /* bytes left: marked and not sent */
	uint64_t sent;             /* page bytes the round sent */
	uint64_t round_ms;         /* the round, from its start to its end */
	uint64_t window_ms;        /* over which @dirty was dirtied: since the
				    * dirty log was last taken (>= round_ms when
				    * taking it has a cost of its own) */
	uint64_t bw;               /* bytes per second, measured (0: unknown) */
	uint64_t rounds;           /* rounds done, this one included */
	uint64_t elapsed_ms;       /* since the migration began */
	unsigned throttle;         /* percent applied during the round */
};

struct conv_advice {
	enum rdmig_decision decision;
	enum rdmig_reason reason;
	unsigned throttle;         /* percent to apply from now */
	uint64_t downtime_ms;      /* predicted for a switch-over now (0:
				    * the bandwidth is unknown) */
	uint64_t bw;               /* what the prediction used */
	char text[256];
};

/* What the policy remembers of past rounds. */
struct conv {
	unsigned high;             /* rounds in a row over CONV_TRIGGER_PCT */
	uint64_t least;            /* the least left after a round, since ... */
	unsigned since_least;      /* ... this many rounds ago */
	unsigned last_throttle;    /* the throttle of the previous round */
	uint64_t last_dirty;       /* left after the previous round */
	bool paid;                 /* the previous round was one that paid */
	bool started;
};

void conv_init(struct conv *c);
/* The policy a loaded config (cfg_load()) sets, for an image of @total
 * bytes. */
void conv_policy_init(struct conv_policy *p, const struct rdmig_config *c, uint64_t total);
/* A link measured apart from the rounds (rdmig_forecast()'s) bounds what a
 * switch-over bandwidth granted can be trusted for. */
void conv_link_measured(struct conv_policy *p, uint64_t link_bw);
/* The decision after round @r; call once per round, in order. */
void conv_next(struct conv *c, const struct conv_policy *p, const struct conv_round *r,
	       struct conv_advice *a);

/* migrate-send's rules, which conv_next() applies. */
bool conv_converged(const struct conv_policy *p, uint64_t dirty, uint64_t bw);
bool conv_round_pays(const struct conv_policy *p, uint64_t dirty, uint64_t bw,
		     uint64_t window_ms, uint64_t round_ms);
/* The pause a switch-over of @dirty bytes would take: at @bw (no more than
 * max_bandwidth), plus switch_ms; 0 when @bw is 0 and bytes are left. */
uint64_t conv_downtime_ms(const struct conv_policy *p, uint64_t dirty, uint64_t bw);
/* The time limit of @max_ms and @per_gib_ms over an image of @total bytes
 * (KubeVirt's completionTimeoutPerGiB): the smaller of those set, 0 for
 * none. */
uint64_t conv_time_limit(uint64_t max_ms, uint64_t per_gib_ms, uint64_t total);
/* The bandwidth after a round that moved @bytes in @ms: its rate when it
 * moved CONV_BW_MIN_BYTES or more, or when nothing was known; otherwise
 * @bw stays. */
uint64_t conv_learn_bw(uint64_t bw, uint64_t bytes, uint64_t ms);

#endif
