/* The face of the workloads: what every kind shares (write tracking,
 * SIGSTOP freezes, the throttle, whether the process still exists), and
 * the kind's table (workload_int.h) asked where they differ. */
#include "workload.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dirty.h"
#include "throttle.h"
#include "workload_int.h"

struct workload *wl_alloc(size_t size, const struct workload_ops *ops)
{
	struct workload *w = calloc(1, size);

	if (w)
		w->ops = ops;
	return w;
}

int wl_init(struct workload **out, struct workload *w, const struct proc_ref *proc,
	    const char *const *paths, const uint64_t *lens, unsigned n,
	    const struct dirty_opts *track, int timeout_ms, struct cli_err *err)
{
	int rc;

	*out = NULL;
	if (!w)
		return cli_err_set(err, -ENOMEM, "out of memory");
	w->pid = proc->pid;
	w->timeout_ms = timeout_ms;
	w->proc = (struct proc_ref)PROC_REF_INIT;
	rc = proc_dup(&w->proc, proc, err);
	if (!rc && w->ops->check)
		rc = w->ops->check(w, err);
	if (!rc)
		rc = dirty_open(&w->ds, &w->proc, paths, lens, n, track, err);
	if (rc) {
		wl_close(w);
		return rc;
	}
	*out = w;
	return 0;
}

void wl_close(struct workload *w)
{
	if (!w)
		return;
	throttle_close(w->thr);
	dirty_close(w->ds);
	proc_close(&w->proc);
	free(w);
}

/* ---- freezing ------------------------------------------------------------------ */

static int stopped_thread(void *ctx, pid_t tid, char state)
{
	(void)ctx;
	(void)tid;
	if (state == 'Z' || state == 'X')
		return -ESRCH;
	return state != 'T' && state != 't';
}

/* 0 once every thread of @p is stopped, -ESRCH when it is gone, 1 if not yet. */
static int all_stopped(const struct proc_ref *p)
{
	return proc_each_thread(p, stopped_thread, NULL);
}

int wl_freeze(struct workload *w, wl_idle_fn idle, void *ctx, struct cli_err *err)
{
	uint64_t deadline = cli_now_ms() + (uint64_t)w->timeout_ms;
	int rc;

	/* Before the signal: a keeper that outlives us resumes it. */
	throttle_frozen(w->thr, true);
	rc = proc_signal(&w->proc, SIGSTOP);
	if (rc)
		return cli_err_set(err, rc, "cannot stop process %d: %s", (int)w->pid,
				   rc == -ESRCH ? "it exited" : strerror(-rc));
	w->frozen = true;
	w->frozen_ms = cli_now_ms();
	while ((rc = all_stopped(&w->proc)) == 1) {
		if (cli_now_ms() > deadline)
			return cli_err_set(err, -ETIMEDOUT, "process %d did not stop within "
					   "%d ms", (int)w->pid, w->timeout_ms);
		rc = idle ? idle(ctx) : 0;
		if (rc)
			return rc;
		usleep(500);
	}
	if (rc < 0)
		return cli_err_set(err, rc, "process %d exited", (int)w->pid);
	return 0;
}

void wl_thaw(struct workload *w)
{
	if (w->frozen)
		proc_signal(&w->proc, SIGCONT);
	if (w->frozen)
		throttle_frozen(w->thr, false);
	w->frozen = false;
}

/* ---- what it wrote ----------------------------------------------------------- */

int wl_clear_dirty(struct workload *w, struct cli_err *err)
{
	return dirty_clear(w->ds, err);
}

struct mark_ctx {
	wl_mark_fn mark;
	void *ctx;
	uint64_t *bytes;
};

static int mark_run(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	struct mark_ctx *c = ctx;

	*c->bytes += len;
	return c->mark(c->ctx, file, off, len);
}

int wl_collect_dirty(struct workload *w, wl_mark_fn mark, void *ctx, uint64_t *bytes,
		     struct cli_err *err)
{
	struct mark_ctx c = { .mark = mark, .ctx = ctx, .bytes = bytes };

	return dirty_collect(w->ds, mark_run, &c, err);
}

void wl_tracking(const struct workload *w, const char **method, const char **why_not,
		 unsigned *threads)
{
	*method = dirty_method(w->ds);
	*why_not = dirty_why_not(w->ds);
	*threads = dirty_threads(w->ds);
}

/* ---- the stop, and after ------------------------------------------------------- */

int wl_begin_stop(struct workload *w, bool *now, uint64_t *stop_ms, struct cli_err *err)
{
	*stop_ms = w->frozen_ms;
	return w->ops->begin_stop(w, now, err);
}

const char *wl_kind(const struct workload *w)
{
	return w->ops->kind;
}

const char *wl_running_key(const struct workload *w)
{
	return w->ops->running_key;
}

void wl_left(const struct workload *w, char *buf, size_t len)
{
	w->ops->left(w, buf, len);
}

const char *wl_runs_again(const struct workload *w)
{
	return w->ops->runs_again;
}

int wl_recheck(struct workload *w, struct cli_err *err)
{
	if (proc_signal(&w->proc, 0) == -ESRCH)
		return cli_err_set(err, -ESRCH, "%s %d exited while the migration waited "
				   "for start", w->ops->name, (int)w->pid);
	return w->ops->check ? w->ops->check(w, err) : 0;
}

bool wl_untouched(struct workload *w, char *msg, size_t len)
{
	if (proc_signal(&w->proc, 0) == -ESRCH) {
		snprintf(msg, len, "%s %d has exited", w->ops->name, (int)w->pid);
		return false;
	}
	return w->ops->untouched(w, msg, len);
}

int wl_resume(struct workload *w, struct cli_err *err)
{
	struct cli_err why;

	if (proc_signal(&w->proc, 0) == -ESRCH)
		return cli_err_set(err, -ESRCH, "%s %d has exited", w->ops->name,
				   (int)w->pid);
	/* Unthrottled before it runs on. */
	if (throttle_pct(w->thr) && throttle_set(w->thr, 0, &why)) {
		wl_thaw(w);
		return cli_err_set(err, -EIO, "the %s runs, but its throttle could not be "
				   "released: %s", wl_kind(w), why.msg);
	}
	wl_thaw(w);
	return w->ops->resume ? w->ops->resume(w, err) : 0;
}

/* ---- the throttle ---------------------------------------------------------------- */

int wl_throttle_open(struct workload *w, struct cli_err *err)
{
	pid_t *tids = NULL;
	unsigned n = 0;
	char what[64];
	struct thr_target t = { .proc = &w->proc, .what = what };
	int rc = w->ops->throttle_target(w, &tids, &n, what, sizeof(what), err);

	t.tids = tids;
	t.ntids = n;
	if (!rc)
		rc = throttle_open(&w->thr, &t, err);
	free(tids);
	return rc;
}

int wl_throttle(struct workload *w, unsigned pct, struct cli_err *err)
{
	if (!w->thr)
		return pct ? cli_err_set(err, -EINVAL, "the %s cannot be throttled: no "
					 "throttle was opened", wl_kind(w)) : 0;
	return throttle_set(w->thr, pct, err);
}

void wl_throttle_aside(struct workload *w)
{
	throttle_aside(w->thr);
}

void wl_throttle_state(const struct workload *w, unsigned *pct, uint64_t *ms)
{
	*pct = throttle_pct(w->thr);
	*ms = throttle_time_ms(w->thr);
}

const char *wl_throttle_method(const struct workload *w, const char **where)
{
	*where = throttle_where(w->thr);
	return throttle_method(w->thr);
}
