/* Failing and finishing (send_end.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>

#include <ev.h>

#include "cli.h"
#include "devstate.h"
#include "rdmig.h"
#include "send_end.h"
#include "send_events.h"
#include "send_int.h"
#include "send_report.h"
#include "workload.h"

int send_lib_fail(struct sender *x, int rc, enum cli_phase phase)
{
	if (x->failed)
		return rc;
	x->failed = true;
	x->f.rc = rc;
	x->f.phase = phase;
	snprintf(x->f.msg, sizeof(x->f.msg), "%s", rc == -ECANCELED ? "cancelled" :
		 rdmig_source_error(x->s));
	send_finish(x);
	return rc;
}

int send_local_fail(struct sender *x, int rc, const char *msg)
{
	if (x->failed)
		return rc;
	x->failed = true;
	x->f.rc = rc ? rc : -EIO;
	x->f.phase = CLI_PHASE_TRANSFER;
	x->f.local = true;
	snprintf(x->f.msg, sizeof(x->f.msg), "%s", msg);
	send_finish(x);
	return x->f.rc;
}

/* After a failure: the device-state end is closed first (QEMU's own
 * migration cancelled, its settings back: it refuses `cont` while its
 * migration runs), then the workload runs again, or the report says why
 * not. */
static void resume_workload(struct sender *x)
{
	struct cli_err err;

	/* After the switch to post-copy the destination's guest may have
	 * run: this copy is stale, and the pages it lacks are only here.
	 * Only the destination's word that it never ran (from the peer that
	 * proved the key, rdmig(7)) makes this copy the guest again. */
	x->pc_never_ran = x->pc_handed && rdmig_source_guest_never_ran(x->s);
	if (x->pc_handed && !x->pc_never_ran) {
		if (ds_close(x->e.ds, &err))
			cli_err("warning: %s", err.msg);
		x->e.ds = NULL;
		snprintf(x->resume_err.msg, sizeof(x->resume_err.msg), "it stays stopped: it "
			 "switched to post-copy, and its destination's guest may have run");
		return;
	}
	if (x->e.wl)
		wl_thaw(x->e.wl);
	if (ds_close(x->e.ds, &err))
		cli_err("warning: %s", err.msg);
	x->e.ds = NULL;
	if (!x->e.wl)
		return;
	if (x->o.defer && !x->begun) {
		x->untouched = true;
		x->resumed = wl_untouched(x->e.wl, x->resume_err.msg, sizeof(x->resume_err.msg));
		return;
	}
	x->resumed = !wl_resume(x->e.wl, &x->resume_err);
}

/* The guest stopped here for good (it runs on the destination): its
 * throttle goes all the same, as after a failure (wl_resume). */
static void release_throttle(struct sender *x)
{
	struct cli_err err;

	if (x->e.wl && wl_throttle(x->e.wl, 0, &err))
		cli_err("warning: %s", err.msg);
}

void send_finish(struct sender *x)
{
	send_set_phase(x, PH_DONE);
	ev_timer_stop(x->loop, &x->stop_timer);
	ev_io_stop(x->loop, &x->ds_io);
	if (x->failed) {
		resume_workload(x);
		x->status = x->cancelled ? ST_CANCELLED : ST_FAILED;
		x->exit_code = send_report_failure(x);
	} else {
		release_throttle(x);
		send_report_success(x);
		x->exit_code = x->o.live && send_promise_broken(x) ? CLI_EX_OVER_LIMIT : CLI_EX_OK;
	}
	ev_break(x->loop, EVBREAK_ALL);
}
