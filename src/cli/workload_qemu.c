/* A QEMU guest driven over QMP (--qmp): only a running or paused guest is
 * migrated; QEMU stops it itself inside its own migration (devstate.h), so
 * it runs on through the last collect; after a failure a guest that was
 * running runs again, one that was paused stays so. */
#include "workload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "qmp.h"
#include "workload_int.h"

/* QEMU's vCPUs at most that are throttled. */
#define MAX_VCPUS 1024

struct wl_qemu {
	struct workload w;
	struct qmp *q;           /* borrowed */
	bool was_running;        /* running when we started */
};

static struct wl_qemu *wl_qemu(const struct workload *w)
{
	return wl_kind_of(w, struct wl_qemu);
}

/* A guest we can migrate runs or is paused; anything else (already migrated,
 * shut down, still waiting for its own incoming migration) is refused. */
static int guest_state(struct workload *w, struct cli_err *err)
{
	struct wl_qemu *g = wl_qemu(w);
	char st[32];
	int rc = qmp_status(g->q, st, sizeof(st), err);

	if (rc)
		return rc;
	g->was_running = !strcmp(st, "running");
	if (!g->was_running && strcmp(st, "paused") && strcmp(st, "prelaunch"))
		return cli_err_set(err, -EINVAL, "QEMU's guest is %s: only a running or "
				   "paused guest can be migrated", st);
	return 0;
}

/* Its bits are cleared and it runs on: from here on the guest's writes are
 * the last round's. */
static int guest_begin_stop(struct workload *w, bool *now, struct cli_err *err)
{
	int rc;

	*now = false;
	rc = wl_clear_dirty(w, err);
	wl_thaw(w);
	return rc;
}

static void guest_left(const struct workload *w, char *buf, size_t len)
{
	(void)w;
	snprintf(buf, len, "the guest stays paused here: it now runs on the destination");
}

static bool guest_untouched(struct workload *w, char *msg, size_t len)
{
	struct cli_err why;
	char st[32] = "";

	if (qmp_status(wl_qemu(w)->q, st, sizeof(st), &why)) {
		snprintf(msg, len, "the guest was not touched; its state is unknown: %s", why.msg);
		return false;
	}
	snprintf(msg, len, "the guest was not touched (QEMU status %s)", st);
	return !strcmp(st, "running");
}

static int guest_resume(struct workload *w, struct cli_err *err)
{
	struct wl_qemu *g = wl_qemu(w);
	struct cli_err why;
	char st[32] = "";
	int rc = qmp_status(g->q, st, sizeof(st), &why);

	if (rc)
		return cli_err_set(err, rc, "the guest's state is unknown: %s", why.msg);
	if (!g->was_running)
		return cli_err_set(err, -EAGAIN, "the guest was paused before the migration "
				   "and stays paused on the source (QEMU status %s%s)", st,
				   strcmp(st, "postmigrate") ? "" : "; `cont` resumes it there");
	if (!strcmp(st, "running"))
		return 0;
	/* QEMU stopped it for its switch-over (from 8.2 on a failed migration
	 * leaves it paused, before that in postmigrate): it runs again. */
	rc = qmp_cont(g->q, &why);
	return rc ? cli_err_set(err, rc, "the guest (QEMU status %s) could not be resumed: "
				"%s", st, why.msg) : 0;
}

/* QEMU's vCPU threads, from QEMU: each must be a thread of that QEMU. */
static int vcpu_threads(struct workload *w, pid_t *tids, unsigned *n, struct cli_err *err)
{
	char task[32];
	unsigned i;
	int rc = qmp_vcpu_threads(wl_qemu(w)->q, tids, MAX_VCPUS, n, err), fd;

	for (i = 0; !rc && i < *n; i++) {
		snprintf(task, sizeof(task), "task/%d", (int)tids[i]);
		fd = proc_openat(&w->proc, task, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			rc = cli_err_set(err, -ESRCH, "QEMU names thread %d as a vCPU's, but "
					 "it is no thread of QEMU %d", (int)tids[i], (int)w->pid);
		else
			close(fd);
	}
	return rc;
}

static int guest_throttle_target(struct workload *w, pid_t **tids, unsigned *n, char *what,
				 size_t whatlen, struct cli_err *err)
{
	int rc;

	*tids = calloc(MAX_VCPUS, sizeof(**tids));
	if (!*tids)
		return cli_err_set(err, -ENOMEM, "out of memory");
	rc = vcpu_threads(w, *tids, n, err);
	snprintf(what, whatlen, "QEMU's %u vCPU thread%s", *n, *n == 1 ? "" : "s");
	return rc;
}

static const struct workload_ops qemu_ops = {
	.kind = "guest",
	.name = "QEMU",
	.running_key = "guest-running",
	.runs_again = "the guest runs on the source again",
	.check = guest_state,
	.begin_stop = guest_begin_stop,
	.left = guest_left,
	.untouched = guest_untouched,
	.resume = guest_resume,
	.throttle_target = guest_throttle_target,
};

int wl_open_qemu(struct workload **out, const struct proc_ref *proc, struct qmp *q,
		 const char *const *paths, const uint64_t *lens, unsigned n,
		 const struct dirty_opts *track, int timeout_ms, struct cli_err *err)
{
	struct workload *w = wl_alloc(sizeof(struct wl_qemu), &qemu_ops);

	if (w)
		wl_qemu(w)->q = q;
	return wl_init(out, w, proc, paths, lens, n, track, timeout_ms, err);
}
