#include "workload.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dirty.h"
#include "qmp.h"
#include "throttle.h"

struct workload {
	pid_t pid;
	struct proc_ref proc;    /* signals and /proc reach this process only */
	struct qmp *q;           /* borrowed; NULL for a plain process */
	struct dirty_set *ds;    /* the RAM files' written pages */
	int timeout_ms;
	bool frozen;             /* SIGSTOPped by us */
	uint64_t frozen_ms;      /* ... since */
	bool was_running;        /* a guest: running when we started */
	struct throttle *thr;    /* auto-converge, once opened */
};

/* QEMU's vCPUs at most that are throttled. */
#define MAX_VCPUS 1024

/* A guest we can migrate runs or is paused; anything else (already migrated,
 * shut down, still waiting for its own incoming migration) is refused. */
static int guest_state(struct workload *w, char *err, size_t errlen)
{
	char st[32];
	int rc = qmp_status(w->q, st, sizeof(st), err, errlen);

	if (rc)
		return rc;
	w->was_running = !strcmp(st, "running");
	if (!w->was_running && strcmp(st, "paused") && strcmp(st, "prelaunch"))
		return cli_errf(err, errlen, -EINVAL, "QEMU's guest is %s: only a running or "
			      "paused guest can be migrated", st);
	return 0;
}

int wl_open(struct workload **out, const struct proc_ref *proc, struct qmp *q,
	    const char *const *paths, const uint64_t *lens, unsigned n,
	    const struct dirty_opts *track, int timeout_ms, char *err, size_t errlen)
{
	struct workload *w = calloc(1, sizeof(*w));
	int rc;

	*out = NULL;
	if (!w)
		return cli_errf(err, errlen, -ENOMEM, "out of memory");
	w->pid = proc->pid;
	w->q = q;
	w->timeout_ms = timeout_ms;
	w->proc = (struct proc_ref)PROC_REF_INIT;
	rc = proc_dup(&w->proc, proc, err, errlen);
	if (!rc && q)
		rc = guest_state(w, err, errlen);
	if (!rc)
		rc = dirty_open(&w->ds, &w->proc, paths, lens, n, track, err, errlen);
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

int wl_freeze(struct workload *w, wl_idle_fn idle, void *ctx, char *err, size_t errlen)
{
	uint64_t deadline = cli_now_ms() + (uint64_t)w->timeout_ms;
	int rc;

	/* Before the signal: a keeper that outlives us resumes it. */
	throttle_frozen(w->thr, true);
	rc = proc_signal(&w->proc, SIGSTOP);
	if (rc)
		return cli_errf(err, errlen, rc, "cannot stop process %d: %s", (int)w->pid,
				rc == -ESRCH ? "it exited" : strerror(-rc));
	w->frozen = true;
	w->frozen_ms = cli_now_ms();
	while ((rc = all_stopped(&w->proc)) == 1) {
		if (cli_now_ms() > deadline)
			return cli_errf(err, errlen, -ETIMEDOUT, "process %d did not stop within "
				      "%d ms", (int)w->pid, w->timeout_ms);
		rc = idle ? idle(ctx) : 0;
		if (rc)
			return rc;
		usleep(500);
	}
	if (rc < 0)
		return cli_errf(err, errlen, rc, "process %d exited", (int)w->pid);
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

int wl_clear_dirty(struct workload *w, char *err, size_t errlen)
{
	return dirty_clear(w->ds, err, errlen);
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
		     char *err, size_t errlen)
{
	struct mark_ctx c = { .mark = mark, .ctx = ctx, .bytes = bytes };

	return dirty_collect(w->ds, mark_run, &c, err, errlen);
}

void wl_tracking(const struct workload *w, const char **method, const char **why_not,
		 unsigned *threads)
{
	*method = dirty_method(w->ds);
	*why_not = dirty_why_not(w->ds);
	*threads = dirty_threads(w->ds);
}

int wl_begin_stop(struct workload *w, bool *now, uint64_t *stop_ms, char *err, size_t errlen)
{
	int rc;

	*now = !w->q;
	*stop_ms = w->frozen_ms;
	if (!w->q && w->frozen)
		throttle_hold(w->thr);
	if (!w->q)
		return w->frozen ? 0 : cli_errf(err, errlen, -EINVAL, "the process is not frozen");
	/* From here on the guest's writes are the last round's. */
	rc = wl_clear_dirty(w, err, errlen);
	wl_thaw(w);
	return rc;
}

bool wl_was_running(const struct workload *w)
{
	return w->was_running;
}

const char *wl_kind(const struct workload *w)
{
	return w->q ? "guest" : "process";
}

const char *wl_running_key(const struct workload *w)
{
	return w->q ? "guest-running" : "workload-running";
}

void wl_left(const struct workload *w, char *buf, size_t len)
{
	if (w->q)
		snprintf(buf, len, "the guest stays paused here: it now runs on the destination");
	else
		snprintf(buf, len, "process %d stays stopped: it now lives on the destination",
			 (int)w->pid);
}

const char *wl_runs_again(const struct workload *w)
{
	return w->q ? "the guest runs on the source again" : "the process keeps running here";
}

int wl_recheck(struct workload *w, char *err, size_t errlen)
{
	if (proc_signal(&w->proc, 0) == -ESRCH)
		return cli_errf(err, errlen, -ESRCH, "%s %d exited while the migration waited "
				"for start", w->q ? "QEMU" : "process", (int)w->pid);
	return w->q ? guest_state(w, err, errlen) : 0;
}

bool wl_untouched(struct workload *w, char *msg, size_t len)
{
	char st[32] = "", why[256];

	if (proc_signal(&w->proc, 0) == -ESRCH) {
		snprintf(msg, len, "%s %d has exited", w->q ? "QEMU" : "process", (int)w->pid);
		return false;
	}
	if (!w->q) {
		snprintf(msg, len, "process %d was not touched and keeps running", (int)w->pid);
		return true;
	}
	if (qmp_status(w->q, st, sizeof(st), why, sizeof(why))) {
		snprintf(msg, len, "the guest was not touched; its state is unknown: %s", why);
		return false;
	}
	snprintf(msg, len, "the guest was not touched (QEMU status %s)", st);
	return !strcmp(st, "running");
}

int wl_resume(struct workload *w, char *err, size_t errlen)
{
	char why[512], st[32] = "";
	int rc;

	if (proc_signal(&w->proc, 0) == -ESRCH)
		return cli_errf(err, errlen, -ESRCH, "%s %d has exited", w->q ? "QEMU" : "process",
				(int)w->pid);
	/* Unthrottled before it runs on. */
	if (throttle_pct(w->thr) && throttle_set(w->thr, 0, why, sizeof(why))) {
		wl_thaw(w);
		return cli_errf(err, errlen, -EIO, "the %s runs, but its throttle could not be "
				"released: %s", wl_kind(w), why);
	}
	wl_thaw(w);
	if (!w->q)
		return 0;
	rc = qmp_status(w->q, st, sizeof(st), why, sizeof(why));
	if (rc)
		return cli_errf(err, errlen, rc, "the guest's state is unknown: %s", why);
	if (!w->was_running)
		return cli_errf(err, errlen, -EAGAIN, "the guest was paused before the migration "
				"and stays paused on the source (QEMU status %s%s)", st,
				strcmp(st, "postmigrate") ? "" : "; `cont` resumes it there");
	if (!strcmp(st, "running"))
		return 0;
	/* QEMU stopped it for its switch-over (from 8.2 on a failed migration
	 * leaves it paused, before that in postmigrate): it runs again. */
	rc = qmp_cont(w->q, why, sizeof(why));
	return rc ? cli_errf(err, errlen, rc, "the guest (QEMU status %s) could not be resumed: "
			     "%s", st, why) : 0;
}

/* QEMU's vCPU threads, from QEMU: each must be a thread of that QEMU. */
static int vcpu_threads(struct workload *w, pid_t *tids, unsigned *n, char *err,
			size_t errlen)
{
	char task[32];
	unsigned i;
	int rc = qmp_vcpu_threads(w->q, tids, MAX_VCPUS, n, err, errlen), fd;

	for (i = 0; !rc && i < *n; i++) {
		snprintf(task, sizeof(task), "task/%d", (int)tids[i]);
		fd = proc_openat(&w->proc, task, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			rc = cli_errf(err, errlen, -ESRCH, "QEMU names thread %d as a vCPU's, but "
				      "it is no thread of QEMU %d", (int)tids[i], (int)w->pid);
		else
			close(fd);
	}
	return rc;
}

int wl_throttle_open(struct workload *w, char *err, size_t errlen)
{
	pid_t *tids = NULL;
	unsigned n = 0;
	char what[64];
	struct thr_target t = { .proc = &w->proc, .what = what };
	int rc = 0;

	if (w->q) {
		tids = calloc(MAX_VCPUS, sizeof(*tids));
		if (!tids)
			return cli_errf(err, errlen, -ENOMEM, "out of memory");
		rc = vcpu_threads(w, tids, &n, err, errlen);
		snprintf(what, sizeof(what), "QEMU's %u vCPU thread%s", n, n == 1 ? "" : "s");
	} else {
		snprintf(what, sizeof(what), "process %d", (int)w->pid);
	}
	t.tids = tids;
	t.ntids = n;
	if (!rc)
		rc = throttle_open(&w->thr, &t, err, errlen);
	free(tids);
	return rc;
}

int wl_throttle(struct workload *w, unsigned pct, char *err, size_t errlen)
{
	if (!w->thr)
		return pct ? cli_errf(err, errlen, -EINVAL, "the %s cannot be throttled: no "
				      "throttle was opened", wl_kind(w)) : 0;
	return throttle_set(w->thr, pct, err, errlen);
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
