/* The convergence policy, on recorded rounds and on a model guest. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "conv.h"
#include "suite.h"
#include "suites.h"

#define MB 1000000ull
#define MIB (1ull << 20)

/* ---- migrate-send's rules as they were (src/cli/send.c, round_done) --------- */

struct old_send {
	uint64_t max_downtime, max_bandwidth, bw, switch_ms, last_ms;
};

static int old_converged(const struct old_send *x, uint64_t dirty)
{
	uint64_t max_ms = x->max_downtime, rate = x->max_bandwidth, bw = x->bw;

	if (!dirty)
		return 1;
	if (rate && (!bw || rate < bw))
		bw = rate;
	if (!bw)
		return 0;
	return dirty * 1000 / bw + (x->switch_ms < max_ms / 2 ? x->switch_ms : max_ms / 2) <=
	       max_ms;
}

static int old_round_pays(const struct old_send *x, uint64_t dirty, uint64_t round_ms)
{
	uint64_t bw = x->bw, send_ms, overhead_ms, next_ms;

	if (!dirty || !bw || !round_ms)
		return 0;
	send_ms = dirty * 1000 / bw;
	if (send_ms * 2 <= x->switch_ms || send_ms < 10)
		return 0;
	overhead_ms = x->last_ms < round_ms ? round_ms - x->last_ms : 0;
	next_ms = send_ms + overhead_ms;
	return dirty / round_ms * next_ms < dirty / 2;
}

static void policy_defaults(struct conv_policy *p)
{
	memset(p, 0, sizeof(*p));
	p->max_downtime_ms = 300;
	p->throttle_initial = 20;
	p->throttle_increment = 10;
	p->throttle_max = 99;
}

static void one(const struct conv_policy *p, const struct conv_round *r, struct conv_advice *a)
{
	struct conv c;

	conv_init(&c);
	conv_next(&c, p, r, a);
}

/* Wherever the old rules switched over within the limit or went on, the
 * policy decides the same; where they switched over at max_iterations
 * without converging, it gives up (or switches over, when the policy says
 * so, with the excess in its figures). */
START_TEST(same_as_migrate_send)
{
	static const uint64_t dirty[] = { 0, 4096, 100000, MIB, 5 * MIB, 20 * MIB, 100 * MIB };
	static const uint64_t bw[] = { 0, MB, 10 * MB, 30 * MB, 100 * MB, 1000 * MB };
	static const uint64_t sw[] = { 0, 20, 150, 400 }, maxdt[] = { 50, 300, 1000 };
	static const uint64_t maxbw[] = { 0, 5 * MB, 50 * MB };
	static const uint64_t window[] = { 0, 5, 100, 1000, 5000 }, round[] = { 0, 3, 90, 900, 6000 };
	unsigned i, j, k, l, m, n, o, cases = 0, switched = 0, paid = 0;
	struct conv_policy p;
	struct conv_round r;
	struct conv_advice a;

	policy_defaults(&p);
	for (i = 0; i < 7; i++) for (j = 0; j < 6; j++) for (k = 0; k < 4; k++)
	for (l = 0; l < 3; l++) for (m = 0; m < 3; m++) for (n = 0; n < 5; n++)
	for (o = 0; o < 5; o++) {
		struct old_send x = { maxdt[l], maxbw[m], bw[j], sw[k], round[o] };
		int conv = old_converged(&x, dirty[i]);
		int pays = old_round_pays(&x, dirty[i], window[n]);

		p.max_downtime_ms = maxdt[l];
		p.max_bandwidth = maxbw[m];
		p.switch_ms = sw[k];
		p.max_iterations = 30;
		p.switch_on_limit = false;
		r = (struct conv_round){ .dirty = dirty[i], .sent = 10 * MIB, .round_ms = round[o],
					 .window_ms = window[n], .bw = bw[j], .rounds = 3 };
		one(&p, &r, &a);
		ck_assert_msg(a.decision == (conv && !pays ? RDMIG_SWITCH_OVER : RDMIG_NEXT_ROUND),
			      "case %u %u %u %u %u %u %u: old %s, new %d (%s)", i, j, k, l, m, n, o,
			      conv && !pays ? "switch" : "another round", a.decision, a.text);
		ck_assert_int_eq(a.reason, conv ? (pays ? RDMIG_REASON_ROUND_PAYS :
					      RDMIG_REASON_CONVERGED) :
				 bw[j] || maxbw[m] ? RDMIG_REASON_NOT_CONVERGED :
				 RDMIG_REASON_NO_BANDWIDTH);
		switched += conv && !pays;
		paid += conv && pays;
		/* The 30th round: the old rule switched over whatever was left. */
		r.rounds = 30;
		one(&p, &r, &a);
		ck_assert_int_eq(a.decision, conv ? RDMIG_SWITCH_OVER : RDMIG_GIVE_UP);
		if (!conv) {
			ck_assert_int_eq(a.reason, RDMIG_REASON_MAX_ITERATIONS);
			p.switch_on_limit = true;
			one(&p, &r, &a);
			ck_assert_int_eq(a.decision, RDMIG_SWITCH_OVER);
			ck_assert_int_eq(a.reason, RDMIG_REASON_MAX_ITERATIONS);
			/* Not converged: the pages alone, plus at least part of
			 * the fixed cost, were over the limit. */
			ck_assert(!a.bw || a.downtime_ms > p.max_downtime_ms);
		}
		cases++;
	}
	/* The grid holds every outcome, not only one. */
	ck_assert_uint_eq(cases, 7 * 6 * 4 * 3 * 3 * 5 * 5);
	ck_assert_uint_gt(switched, 1000);
	ck_assert_uint_gt(paid, 100);
	ck_assert_uint_gt(cases - switched - paid, 1000);
}
END_TEST

/* ---- recorded rounds ------------------------------------------------------------ */

struct rec {
	uint64_t sent, round_ms, dirty, bw;
	enum rdmig_decision want;
};

/* Feeds the rounds in order, each with its expected decision; elapsed
 * time is the sum of the rounds. */
static void replay(const struct conv_policy *p, const struct rec *rec, unsigned n,
		   struct conv_advice *last)
{
	struct conv c;
	struct conv_round r = { 0 };
	unsigned i;

	conv_init(&c);
	for (i = 0; i < n; i++) {
		r.sent = rec[i].sent;
		r.round_ms = r.window_ms = rec[i].round_ms;
		r.dirty = rec[i].dirty;
		r.bw = rec[i].bw;
		r.rounds = i + 1;
		r.elapsed_ms += rec[i].round_ms;
		conv_next(&c, p, &r, last);
		ck_assert_msg(last->decision == rec[i].want, "round %u: decision %d, wanted %d: %s",
			      i + 1, last->decision, rec[i].want, last->text);
	}
}

/* A guest that settles: 64 MiB, then 9 MiB, 1.4 MiB, 200 KiB at 25 MB/s.
 * 1.4 MiB fits 300 ms, yet a round of it should leave far less (it does);
 * 200 KiB is not worth another round. */
START_TEST(converging_guest)
{
	static const struct rec rec[] = {
		{ 64 * MIB, 2700, 9 * MIB, 25 * MB, RDMIG_NEXT_ROUND },
		{ 9 * MIB, 380, 1468006, 25 * MB, RDMIG_NEXT_ROUND },
		{ 1468006, 60, 200000, 25 * MB, RDMIG_SWITCH_OVER },
	};
	struct conv_policy p;
	struct conv_advice a;

	policy_defaults(&p);
	p.stall_rounds = 5;
	replay(&p, rec, 1, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_NOT_CONVERGED);
	replay(&p, rec, 2, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_ROUND_PAYS);
	replay(&p, rec, 3, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_CONVERGED);
	ck_assert_uint_eq(a.downtime_ms, 8);
	ck_assert_ptr_nonnull(strstr(a.text, "within max_downtime 300 ms"));
}
END_TEST

/* Rounds that were to pay and hardly shrink (a fixed cost per round the
 * estimate did not see): the second does not pay any more. */
START_TEST(paid_rounds_must_shrink)
{
	static const struct rec rec[] = {
		{ 64 * MIB, 2700, 4 * MB, 56 * MB, RDMIG_NEXT_ROUND },
		{ 4 * MB, 91, 2 * MB, 56 * MB, RDMIG_NEXT_ROUND },
		{ 2 * MB, 56, 1600000, 56 * MB, RDMIG_SWITCH_OVER },
	};
	struct conv_policy p;
	struct conv_advice a;

	policy_defaults(&p);
	replay(&p, rec, 2, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_ROUND_PAYS);
	/* Alone, the third round would pay too. */
	one(&p, &(struct conv_round){ .dirty = 1600000, .sent = 2 * MB, .round_ms = 56,
				      .window_ms = 56, .bw = 56 * MB, .rounds = 3 }, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_ROUND_PAYS);
	replay(&p, rec, 3, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_CONVERGED);
}
END_TEST

/* The busy guest (QEMU 7.2, 95 MiB rewritten as fast as TCG runs,
 * rounds of ~96 MB at ~450 Mb/s): migrate-send switched over after its 30th
 * round with 1,815 ms of downtime against 300, and said nothing.  The
 * policy gives up at the 30th, saying why; on_limit switch-over switches
 * with the excess in the figures; stall detection ends it sooner. */
START_TEST(busy_guest_never_converges)
{
	struct rec rec[30];
	struct conv_policy p;
	struct conv_advice a;
	unsigned i;

	for (i = 0; i < 30; i++)
		rec[i] = (struct rec){ 96 * MB + (i % 3) * MB, 1750 + (i % 4) * 20,
				       95 * MB + (i % 5) * 300000, 56 * MB, RDMIG_NEXT_ROUND };
	rec[29].want = RDMIG_GIVE_UP;
	policy_defaults(&p);
	p.max_iterations = 30;
	replay(&p, rec, 30, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_MAX_ITERATIONS);
	ck_assert_uint_gt(a.downtime_ms, 1600);
	ck_assert_ptr_nonnull(strstr(a.text, "30 rounds without converging"));
	ck_assert_ptr_nonnull(strstr(a.text, "giving up"));

	p.switch_on_limit = true;
	rec[29].want = RDMIG_SWITCH_OVER;
	replay(&p, rec, 30, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_MAX_ITERATIONS);
	ck_assert_uint_gt(a.downtime_ms, 1600);
	ck_assert_ptr_nonnull(strstr(a.text, "switching over anyway"));

	/* Rounds that never leave less than the second one did. */
	p.switch_on_limit = false;
	p.stall_rounds = 5;
	rec[29].want = RDMIG_NEXT_ROUND;
	rec[1].dirty = 94 * MB;
	for (i = 2; i < 30; i++)
		rec[i].dirty = rec[1].dirty + (i % 3) * 4096;
	rec[6].want = RDMIG_GIVE_UP;
	replay(&p, rec, 7, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_STALL);
	ck_assert_ptr_nonnull(strstr(a.text, "5 rounds without leaving less than"));
}
END_TEST

/* A slow link: 3 MiB left at 2 MB/s is 1.5 s.  Nothing converges; the
 * rounds stall and the policy gives up with the prediction. */
START_TEST(slow_link)
{
	static const struct rec rec[] = {
		{ 64 * MIB, 33000, 3 * MIB, 2 * MB, RDMIG_NEXT_ROUND },
		{ 3 * MIB, 1600, 3 * MIB - 8192, 2 * MB, RDMIG_NEXT_ROUND },
		{ 3 * MIB, 1600, 3 * MIB, 2 * MB, RDMIG_NEXT_ROUND },
		{ 3 * MIB, 1600, 3 * MIB - 4096, 2 * MB, RDMIG_NEXT_ROUND },
		{ 3 * MIB, 1600, 3 * MIB - 8192, 2 * MB, RDMIG_GIVE_UP },
	};
	struct conv_policy p;
	struct conv_advice a;

	policy_defaults(&p);
	p.stall_rounds = 3;
	replay(&p, rec, 5, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_STALL);
	ck_assert_uint_eq(a.downtime_ms, (3 * MIB - 8192) * 1000 / (2 * MB));
	ck_assert_ptr_nonnull(strstr(a.text, "over max_downtime 300 ms"));
}
END_TEST

/* The link slows down under a converging guest: 6 MB fitted at 100 MB/s
 * (60 ms) and does not at 10 MB/s (600 ms); the policy goes by the
 * bandwidth measured last, and the caller learns it from the round. */
START_TEST(link_slows_down)
{
	static const struct rec rec[] = {
		{ 64 * MIB, 700, 40 * MB, 100 * MB, RDMIG_NEXT_ROUND },
		{ 40 * MB, 4000, 6 * MB, 10 * MB, RDMIG_NEXT_ROUND },
	};
	struct conv_policy p;
	struct conv_advice a;

	policy_defaults(&p);
	p.stall_rounds = 5;
	ck_assert_uint_eq(conv_learn_bw(100 * MB, 40 * MB, 4000), 10 * MB);
	replay(&p, rec, 2, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_NOT_CONVERGED);
	ck_assert_uint_eq(a.downtime_ms, 600);
	ck_assert_uint_eq(a.bw, 10 * MB);
}
END_TEST

/* Time: over max_time it gives up; KubeVirt's per-GiB form makes the
 * limit. */
START_TEST(max_time)
{
	static const struct rec rec[] = {
		{ 64 * MIB, 60000, 30 * MB, 10 * MB, RDMIG_NEXT_ROUND },
		{ 30 * MB, 31000, 29 * MB, 10 * MB, RDMIG_GIVE_UP },
	};
	struct conv_policy p;
	struct conv_advice a;

	ck_assert_uint_eq(conv_time_limit(0, 150000, 2ull << 30), 300000);
	ck_assert_uint_eq(conv_time_limit(200000, 150000, 2ull << 30), 200000);
	ck_assert_uint_eq(conv_time_limit(200000, 0, 2ull << 30), 200000);
	ck_assert_uint_eq(conv_time_limit(0, 0, 2ull << 30), 0);
	ck_assert_uint_eq(conv_time_limit(0, 150000, MIB), 146);
	ck_assert_uint_eq(conv_time_limit(0, 1, 4096), 1);
	policy_defaults(&p);
	p.max_time_ms = conv_time_limit(0, 150000, 600 * MIB);
	ck_assert_uint_eq(p.max_time_ms, 87890);
	replay(&p, rec, 2, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_MAX_TIME);
	ck_assert_ptr_nonnull(strstr(a.text, "91000 ms since the start, max_time 87890 ms"));
	/* Converged at the limit: it switches over, no round more. */
	policy_defaults(&p);
	p.max_time_ms = 1000;
	{
		struct conv_round r = { .dirty = 2 * MB, .sent = 10 * MB, .round_ms = 100,
					.window_ms = 100, .bw = 100 * MB, .rounds = 4,
					.elapsed_ms = 999 };

		one(&p, &r, &a);
		ck_assert_int_eq(a.reason, RDMIG_REASON_ROUND_PAYS);
		r.elapsed_ms = 1000;
		one(&p, &r, &a);
		ck_assert_int_eq(a.decision, RDMIG_SWITCH_OVER);
		ck_assert_int_eq(a.reason, RDMIG_REASON_CONVERGED);
	}
}
END_TEST

/* ---- auto-converge on a model guest ------------------------------------------------ */

/* A guest that dirties @rate bytes a second of a @wss working set when
 * unthrottled; rounds send what was left at @bw plus @overhead_ms.  The
 * caller applies each throttle advised.  Returns the rounds it took to a
 * decision other than another round or a throttle. */
static unsigned model(const struct conv_policy *p, uint64_t rate, uint64_t wss, uint64_t bw,
		      struct conv_advice *a, unsigned *steps, unsigned *nsteps)
{
	struct conv c;
	struct conv_round r = { .dirty = wss };
	unsigned i, throttle = 0;

	conv_init(&c);
	*nsteps = 0;
	for (i = 1; i <= 200; i++) {
		r.sent = r.dirty;
		r.round_ms = r.window_ms = r.sent * 1000 / bw + 20;
		r.dirty = rate * (100 - throttle) / 100 * r.round_ms / 1000;
		if (r.dirty > wss)
			r.dirty = wss;
		r.bw = bw;
		r.rounds = i;
		r.elapsed_ms += r.round_ms;
		r.throttle = throttle;
		conv_next(&c, p, &r, a);
		if (a->decision == RDMIG_THROTTLE) {
			ck_assert_uint_gt(a->throttle, throttle);
			steps[(*nsteps)++] = a->throttle;
		}
		if (a->decision != RDMIG_THROTTLE && a->decision != RDMIG_NEXT_ROUND)
			return i;
		ck_assert_uint_eq(a->throttle, a->decision == RDMIG_THROTTLE ? a->throttle :
				  throttle);
		throttle = a->throttle;
	}
	return i;
}

/* 150 MB/s of dirtying over a 96 MB set against a 56 MB/s link (2.7 x):
 * without auto-converge the rounds stall and it gives up; with it the
 * throttle climbs QEMU's steps (20, then 10 at a time, each after two
 * rounds over the trigger) until the rounds shrink and what is left fits,
 * and the switch-over keeps max_downtime. */
START_TEST(auto_converge_until_it_fits)
{
	struct conv_policy p;
	struct conv_advice a;
	unsigned steps[200], n, rounds, i;

	policy_defaults(&p);
	p.stall_rounds = 5;
	rounds = model(&p, 150 * MB, 96 * MB, 56 * MB, &a, steps, &n);
	ck_assert_int_eq(a.decision, RDMIG_GIVE_UP);
	ck_assert_int_eq(a.reason, RDMIG_REASON_STALL);
	ck_assert_uint_eq(n, 0);
	ck_assert_uint_le(rounds, 8);

	p.auto_converge = true;
	rounds = model(&p, 150 * MB, 96 * MB, 56 * MB, &a, steps, &n);
	ck_assert_msg(a.decision == RDMIG_SWITCH_OVER, "%s", a.text);
	ck_assert_int_eq(a.reason, RDMIG_REASON_CONVERGED);
	ck_assert_uint_le(a.downtime_ms, p.max_downtime_ms);
	ck_assert_uint_ge(n, 3);
	ck_assert_uint_eq(steps[0], 20);
	for (i = 1; i < n; i++)
		ck_assert_uint_eq(steps[i], steps[i - 1] + 10);
	/* The throttle that made it fit: under it the guest dirties less than
	 * half of what the link carries. */
	ck_assert_uint_ge(steps[n - 1], 82);
	ck_assert_uint_le(steps[n - 1], 99);
	ck_assert_uint_le(rounds, 2 * n + 12);

	/* Tailslow: steps no larger, and it still gets there. */
	p.tailslow = true;
	model(&p, 150 * MB, 96 * MB, 56 * MB, &a, steps, &n);
	ck_assert_msg(a.decision == RDMIG_SWITCH_OVER, "%s", a.text);
	for (i = 1; i < n; i++)
		ck_assert_uint_le(steps[i] - steps[i - 1], 10);
}
END_TEST

/* A guest no throttle tames (it dirties 100 x the link): the throttle
 * stops at throttle_max, then the stall gives up, saying so; on_limit
 * switch-over switches with the excess. */
START_TEST(auto_converge_at_its_most)
{
	struct conv_policy p;
	struct conv_advice a;
	unsigned steps[200], n;

	policy_defaults(&p);
	p.stall_rounds = 4;
	p.auto_converge = true;
	p.throttle_max = 60;
	model(&p, 5600 * MB, 96 * MB, 56 * MB, &a, steps, &n);
	ck_assert_int_eq(a.decision, RDMIG_GIVE_UP);
	ck_assert_int_eq(a.reason, RDMIG_REASON_STALL);
	ck_assert_uint_eq(steps[n - 1], 60);
	ck_assert_uint_eq(a.throttle, 60);
	ck_assert_ptr_nonnull(strstr(a.text, "at the most throttle"));
	p.switch_on_limit = true;
	model(&p, 5600 * MB, 96 * MB, 56 * MB, &a, steps, &n);
	ck_assert_int_eq(a.decision, RDMIG_SWITCH_OVER);
	ck_assert_int_eq(a.reason, RDMIG_REASON_STALL);
	ck_assert_uint_gt(a.downtime_ms, 1000);
}
END_TEST

/* Rounds that stop shrinking without the dirtying passing the trigger
 * (the round sent more than twice what is left, yet no less is left
 * than before) throttle too, before anything gives up. */
START_TEST(stall_throttles_first)
{
	static const struct rec rec[] = {
		{ 64 * MIB, 3000, 10 * MB, 20 * MB, RDMIG_NEXT_ROUND },
		{ 30 * MB, 1500, 10 * MB, 20 * MB, RDMIG_NEXT_ROUND },
		{ 30 * MB, 1500, 10 * MB, 20 * MB, RDMIG_THROTTLE },
	};
	struct conv_policy p;
	struct conv_advice a;

	policy_defaults(&p);
	p.stall_rounds = 2;
	p.auto_converge = true;
	replay(&p, rec, 3, &a);
	ck_assert_int_eq(a.reason, RDMIG_REASON_STALL);
	ck_assert_uint_eq(a.throttle, 20);
}
END_TEST

/* The figures the policy and the statistics share. */
START_TEST(downtime_and_bandwidth)
{
	struct conv_policy p;

	policy_defaults(&p);
	ck_assert_uint_eq(conv_downtime_ms(&p, 10 * MB, 100 * MB), 100);
	ck_assert_uint_eq(conv_downtime_ms(&p, 10 * MB, 0), 0);
	ck_assert_uint_eq(conv_downtime_ms(&p, 0, 0), 0);
	p.switch_ms = 40;
	ck_assert_uint_eq(conv_downtime_ms(&p, 10 * MB, 100 * MB), 140);
	ck_assert_uint_eq(conv_downtime_ms(&p, 0, 100 * MB), 40);
	p.max_bandwidth = 20 * MB;
	ck_assert_uint_eq(conv_downtime_ms(&p, 10 * MB, 100 * MB), 540);
	ck_assert_uint_eq(conv_downtime_ms(&p, 10 * MB, 0), 540);
	/* A small round does not replace a measured bandwidth; the first
	 * measurement is taken whatever its size. */
	ck_assert_uint_eq(conv_learn_bw(0, 4096, 2), 2048000);
	ck_assert_uint_eq(conv_learn_bw(30 * MB, 4096, 2), 30 * MB);
	ck_assert_uint_eq(conv_learn_bw(30 * MB, 2 * MB, 100), 20 * MB);
	ck_assert_uint_eq(conv_learn_bw(30 * MB, 0, 100), 30 * MB);
	ck_assert_uint_eq(conv_learn_bw(30 * MB, 2 * MB, 0), 30 * MB);
}
END_TEST

/* A bandwidth granted to the switch-over: the last pages are predicted
 * at it where the rounds could only show the cap, never faster than a
 * round showed the link carries below the cap. */
START_TEST(switchover_bandwidth)
{
	struct conv_policy p;
	struct conv_advice a;
	struct conv_round r = { .dirty = 16 * MIB, .sent = 16 * MIB, .round_ms = 1100,
				.window_ms = 1100, .bw = 15 * MB, .rounds = 3,
				.elapsed_ms = 4000 };

	policy_defaults(&p);
	p.max_downtime_ms = 1000;
	p.max_bandwidth = 15 * MB;
	/* Without it, 16 MiB at the cap is over the limit. */
	ck_assert(!conv_converged(&p, r.dirty, r.bw));
	one(&p, &r, &a);
	ck_assert_int_eq(a.decision, RDMIG_NEXT_ROUND);
	ck_assert_uint_eq(a.bw, 15 * MB);
	/* Granted 60 MB/s while the rounds ran at the cap: 279 ms. */
	p.switch_bw = 60 * MB;
	one(&p, &r, &a);
	ck_assert_int_eq(a.decision, RDMIG_SWITCH_OVER);
	ck_assert_int_eq(a.reason, RDMIG_REASON_CONVERGED);
	ck_assert_uint_eq(a.bw, 60 * MB);
	ck_assert_uint_eq(a.downtime_ms, 16 * MIB * 1000 / (60 * MB));
	/* Nothing measured yet: no prediction, grant or not. */
	ck_assert_uint_eq(conv_downtime_ms(&p, 16 * MIB, 0), 0);
	ck_assert(!conv_converged(&p, 16 * MIB, 0));
	/* A round at 9 MB/s under a 15 MB/s cap: the link, not the cap, held
	 * it: the grant is not believed beyond it. */
	r.bw = 9 * MB;
	one(&p, &r, &a);
	ck_assert_uint_eq(a.bw, 9 * MB);
	ck_assert_int_eq(a.decision, RDMIG_NEXT_ROUND);
	/* No cap: the rounds measured the link itself. */
	p.max_bandwidth = 0;
	r.bw = 40 * MB;
	ck_assert_uint_eq(conv_downtime_ms(&p, 40 * MB, r.bw), 1000);
	r.bw = 100 * MB;
	ck_assert_uint_eq(conv_downtime_ms(&p, 60 * MB, r.bw), 1000);
	/* Granted less than the cap: the grant binds. */
	p.max_bandwidth = 15 * MB;
	p.switch_bw = 5 * MB;
	ck_assert_uint_eq(conv_downtime_ms(&p, 5 * MB, 15 * MB), 1000);
}
END_TEST

void conv_cases(Suite *s)
{
	TCase *tc = tu_case(s, "rules", 0);

	tcase_add_test(tc, same_as_migrate_send);
	tcase_add_test(tc, downtime_and_bandwidth);
	tcase_add_test(tc, switchover_bandwidth);
	tc = tu_case(s, "rounds", 0);
	tcase_add_test(tc, converging_guest);
	tcase_add_test(tc, paid_rounds_must_shrink);
	tcase_add_test(tc, busy_guest_never_converges);
	tcase_add_test(tc, slow_link);
	tcase_add_test(tc, link_slows_down);
	tcase_add_test(tc, max_time);
	tcase_add_test(tc, stall_throttles_first);
	tc = tu_case(s, "auto-converge", 0);
	tcase_add_test(tc, auto_converge_until_it_fits);
	tcase_add_test(tc, auto_converge_at_its_most);
}
