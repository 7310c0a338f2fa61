/* The convergence policy's glue (send_policy.h). */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "rdmig.h"
#include "send_end.h"
#include "send_int.h"
#include "send_loop.h"
#include "send_policy.h"
#include "send_report.h"
#include "workload.h"

int send_advise(struct sender *x)
{
	struct cli_err err;
	int rc;

	x->adv.size = sizeof(x->adv);
	rc = rdmig_source_advice(x->s, &x->adv);
	if (rc)
		return send_lib_fail(x, rc, CLI_PHASE_TRANSFER);
	if (x->adv.decision != RDMIG_THROTTLE)
		return 0;
	rc = wl_throttle(x->e.wl, x->adv.throttle_pct, &err);
	return rc ? send_local_fail(x, rc, err.msg) : 0;
}

void send_give_up(struct sender *x)
{
	char lim[256], left[128];

	send_limit_said(x, lim, sizeof(lim));
	send_left_said(&x->adv, left, sizeof(left));
	x->gave_up = true;
	snprintf(x->gave_up_msg, sizeof(x->gave_up_msg), "gave up: %s; %s, over --max-downtime "
		 "%" PRIu64 " ms", lim, left, x->adv.max_downtime_ms);
	rdmig_source_cancel(x->s);
	send_kick(x);
}

void send_set_time_limits(struct sender *x)
{
	uint64_t wait = x->waited_ms, total = 0, gib;
	unsigned i;

	for (i = 0; i < x->e.nrams; i++)
		total += x->e.rams[i].len;
	/* The per-GiB limit grows by the wait over the image's GiBs. */
	gib = x->max_time_gib_s && total ?
	      x->max_time_gib_s * 1000 + (wait * (1ull << 30) + total - 1) / total : 0;
	rdmig_source_set_limit(x->s, RDMIG_LIMIT_MAX_TIME_MS,
			       x->max_time_s ? x->max_time_s * 1000 + wait : 0);
	rdmig_source_set_limit(x->s, RDMIG_LIMIT_MAX_TIME_PER_GIB_MS, gib);
}

/* The switch-over's fixed cost: the state's preparation and the resume
 * after it (switch_base), and stopping the workload then confirming,
 * each counted as long as the longest freeze seen at a round's end. */
static void switch_cost(struct sender *x)
{
	x->switch_ms = x->switch_base + 2 * x->freeze_ms;
	rdmig_source_set_limit(x->s, RDMIG_LIMIT_SWITCHOVER_MS, x->switch_ms);
}

void send_note_freeze(struct sender *x, uint64_t ms)
{
	if (ms <= x->freeze_ms)
		return;
	x->freeze_ms = ms;
	switch_cost(x);
}

void send_note_prepare(struct sender *x, uint64_t ms)
{
	/* What the workload's manager adds after the confirmation (libvirt's
	 * resume at the destination, measured by rdmig-libvirt) is as fixed a
	 * cost of the switch-over, and the workload feels it as downtime. */
	x->switch_base = 2 * ms + 1 + x->o.resume_cost_ms;
	switch_cost(x);
}
