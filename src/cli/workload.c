#include "workload.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dirty.h"
#include "qmp.h"

struct workload {
	pid_t pid;
	struct qmp *q;           /* borrowed; NULL for a plain process */
	struct dirty_map **dm;
	unsigned n;
	int timeout_ms;
	bool frozen;             /* SIGSTOPped by us */
	bool was_running;        /* a guest: running when we started */
	bool paused;             /* a guest: paused by our QMP stop */
};

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

int wl_open(struct workload **out, pid_t pid, struct qmp *q, const char *const *paths,
	    const uint64_t *lens, unsigned n, int timeout_ms, char *err, size_t errlen)
{
	struct workload *w = calloc(1, sizeof(*w));
	unsigned i;
	int rc;

	*out = NULL;
	if (!w || !(w->dm = calloc(n ? n : 1, sizeof(*w->dm)))) {
		free(w);
		return cli_errf(err, errlen, -ENOMEM, "out of memory");
	}
	w->pid = pid;
	w->q = q;
	w->n = n;
	w->timeout_ms = timeout_ms;
	rc = q ? guest_state(w, err, errlen) : 0;
	for (i = 0; !rc && i < n; i++)
		rc = dirty_open(&w->dm[i], pid, paths[i], lens[i], err, errlen);
	if (rc) {
		wl_close(w);
		return rc;
	}
	*out = w;
	return 0;
}

void wl_close(struct workload *w)
{
	unsigned i;

	if (!w)
		return;
	for (i = 0; i < w->n; i++)
		dirty_close(w->dm[i]);
	free(w->dm);
	free(w);
}

/* 0 once every thread of @pid is stopped, -ESRCH when it is gone, 1 if not yet. */
static int all_stopped(pid_t pid)
{
	char path[64], buf[512], *p;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -ESRCH;
	while (!rc && (de = readdir(d))) {
		FILE *f;
		size_t n;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.20s/stat", (int)pid, de->d_name);
		f = fopen(path, "re");
		if (!f)
			continue; /* the thread exited */
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		p = strrchr(buf, ')');
		if (!p || !p[1] || !p[2])
			continue;
		if (p[2] == 'Z' || p[2] == 'X')
			rc = -ESRCH;
		else if (p[2] != 'T' && p[2] != 't')
			rc = 1;
	}
	closedir(d);
	return rc;
}

int wl_freeze(struct workload *w, wl_idle_fn idle, void *ctx, char *err, size_t errlen)
{
	uint64_t deadline = cli_now_ms() + (uint64_t)w->timeout_ms;
	int rc;

	if (kill(w->pid, SIGSTOP))
		return cli_errf(err, errlen, -errno, "cannot stop process %d: %s", (int)w->pid,
			      strerror(errno));
	w->frozen = true;
	while ((rc = all_stopped(w->pid)) == 1) {
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
		kill(w->pid, SIGCONT);
	w->frozen = false;
}

int wl_clear_dirty(struct workload *w, char *err, size_t errlen)
{
	return dirty_clear(w->pid, err, errlen);
}

struct mark_ctx {
	wl_mark_fn mark;
	void *ctx;
	unsigned file;
	uint64_t *bytes;
};

static int mark_run(void *ctx, uint64_t off, uint64_t len)
{
	struct mark_ctx *c = ctx;

	*c->bytes += len;
	return c->mark(c->ctx, c->file, off, len);
}

int wl_collect_dirty(struct workload *w, wl_mark_fn mark, void *ctx, uint64_t *bytes,
		     char *err, size_t errlen)
{
	struct mark_ctx c = { .mark = mark, .ctx = ctx, .bytes = bytes };
	int rc;

	for (c.file = 0; c.file < w->n; c.file++) {
		rc = dirty_collect(w->dm[c.file], mark_run, &c, err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

int wl_stop(struct workload *w, char *err, size_t errlen)
{
	char why[512];
	int rc;

	if (!w->q)
		return w->frozen ? 0 : cli_errf(err, errlen, -EINVAL, "the process is not frozen");
	/* The monitor must answer: from here on the guest is paused, not
	 * the process. */
	wl_thaw(w);
	if (!w->was_running)
		return 0;
	rc = qmp_stop(w->q, why, sizeof(why));
	if (rc)
		return cli_errf(err, errlen, rc, "QEMU refused to stop the guest: %s", why);
	w->paused = true;
	return 0;
}

bool wl_stopped(const struct workload *w)
{
	return w->frozen || w->paused;
}

bool wl_was_running(const struct workload *w)
{
	return w->was_running;
}

int wl_resume(struct workload *w, char *err, size_t errlen)
{
	char why[512];
	int rc;

	wl_thaw(w);
	if (!w->paused)
		return 0;
	rc = qmp_cont(w->q, why, sizeof(why));
	if (rc)
		return cli_errf(err, errlen, rc, "the guest could not be resumed: %s", why);
	w->paused = false;
	return 0;
}
