/* A process writing its RAM files (--live --pid): frozen with SIGSTOP for
 * the last round, and left stopped once it lives on the destination. */
#include "workload.h"

#include <errno.h>
#include <stdio.h>

#include "cli.h"
#include "throttle.h"
#include "workload_int.h"

/* It stays frozen: the last round holds what was collected. */
static int proc_begin_stop(struct workload *w, bool *now, struct cli_err *err)
{
	*now = true;
	if (!w->frozen)
		return cli_err_set(err, -EINVAL, "the process is not frozen");
	throttle_hold(w->thr);
	return 0;
}

static void proc_left(const struct workload *w, char *buf, size_t len)
{
	snprintf(buf, len, "process %d stays stopped: it now lives on the destination",
		 (int)w->pid);
}

static bool proc_untouched(struct workload *w, char *msg, size_t len)
{
	snprintf(msg, len, "process %d was not touched and keeps running", (int)w->pid);
	return true;
}

/* Every thread it has. */
static int proc_throttle_target(struct workload *w, pid_t **tids, unsigned *n, char *what,
				size_t whatlen, struct cli_err *err)
{
	(void)tids;
	(void)n;
	(void)err;
	snprintf(what, whatlen, "process %d", (int)w->pid);
	return 0;
}

static const struct workload_ops proc_ops = {
	.kind = "process",
	.name = "process",
	.running_key = "workload-running",
	.runs_again = "the process keeps running here",
	.begin_stop = proc_begin_stop,
	.left = proc_left,
	.untouched = proc_untouched,
	.throttle_target = proc_throttle_target,
};

int wl_open_process(struct workload **out, const struct proc_ref *proc,
		    const char *const *paths, const uint64_t *lens, unsigned n,
		    const struct dirty_opts *track, int timeout_ms, struct cli_err *err)
{
	return wl_init(out, wl_alloc(sizeof(struct workload), &proc_ops), proc, paths, lens, n,
		       track, timeout_ms, err);
}
