#include "vmstate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "qmp.h"

#define CAP "x-ignore-shared"
#define FD_NAME "rdmig-state"
#define PIPE_ROOM (1 << 20)    /* the unprivileged pipe-max-size default */

struct vmstate {
	struct qmp *q;      /* borrowed */
	int fd;             /* our end of the pipe, -1 once closed */
	bool source;
	bool cap_was_on;
	bool cap_changed;   /* we turned it on and have not restored it */
	bool begun;         /* migrate / migrate-incoming went out */
};

static int ignore_shared(struct vmstate *v, char *err, size_t errlen)
{
	char why[512];
	int rc = qmp_migrate_cap_get(v->q, CAP, &v->cap_was_on, why, sizeof(why));

	if (rc == -ENOENT)
		return cli_errf(err, errlen, rc, "this QEMU has no %s capability (QEMU 4.0 or "
			       "later is needed)", CAP);
	if (!rc && !v->cap_was_on) {
		rc = qmp_migrate_cap_set(v->q, CAP, true, why, sizeof(why));
		v->cap_changed = rc == 0;
	}
	return rc ? cli_errf(err, errlen, rc, "cannot set %s: %s", CAP, why) : 0;
}

static void restore_cap(struct vmstate *v)
{
	if (v->cap_changed && !qmp_migrate_cap_set(v->q, CAP, false, NULL, 0))
		v->cap_changed = false;
}

/* Capability on, a pipe, QEMU's end passed with getfd: all but the one
 * command that must wait for the guest to stop. */
int vms_prepare(struct vmstate **out, struct qmp *q, bool source, char *err, size_t errlen)
{
	struct vmstate *v = calloc(1, sizeof(*v));
	int p[2], theirs, rc;
	char why[512];

	*out = NULL;
	if (!v)
		return cli_errf(err, errlen, -ENOMEM, "out of memory");
	v->q = q;
	v->fd = -1;
	v->source = source;
	rc = ignore_shared(v, err, errlen);
	if (rc)
		goto fail;
	if (pipe2(p, O_CLOEXEC)) {
		rc = cli_errf(err, errlen, -errno, "pipe: %s", strerror(errno));
		goto fail;
	}
	v->fd = source ? p[0] : p[1];
	theirs = source ? p[1] : p[0];
	fcntl(v->fd, F_SETFL, fcntl(v->fd, F_GETFL) | O_NONBLOCK);
	/* Room for a small guest's whole device state: QEMU's save need not
	 * wait for us while the last pages go out.  Best effort (the default
	 * 64 KiB works too, QEMU then waits for the reads). */
	if (source)
		fcntl(v->fd, F_SETPIPE_SZ, PIPE_ROOM);
	rc = qmp_getfd(q, theirs, FD_NAME, why, sizeof(why));
	/* QEMU holds its own copy now: ours would hide the end of stream. */
	close(theirs);
	if (rc) {
		rc = cli_errf(err, errlen, rc, "QEMU refused the device state's pipe: %s", why);
		goto fail;
	}
	*out = v;
	return 0;
fail:
	vms_close(v);
	return rc;
}

int vms_begin(struct vmstate *v, char *err, size_t errlen)
{
	char why[512];
	int rc;

	if (v->begun)
		return 0;
	rc = v->source ? qmp_migrate(v->q, "fd:" FD_NAME, why, sizeof(why)) :
			     qmp_migrate_incoming(v->q, "fd:" FD_NAME, why, sizeof(why));

	if (rc)
		return cli_errf(err, errlen, rc, "QEMU refused to %s the device state: %s",
				v->source ? "save" : "load", why);
	v->begun = true;
	return 0;
}

int vms_fd(const struct vmstate *v)
{
	return v->fd;
}

ssize_t vms_read(struct vmstate *v, void *buf, size_t len, char *err, size_t errlen)
{
	ssize_t n;

	do
		n = read(v->fd, buf, len);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno == EAGAIN)
		return -EAGAIN;
	if (n < 0)
		return cli_errf(err, errlen, -errno, "reading QEMU's device state: %s",
			       strerror(errno));
	return n;
}

/* Whether QEMU finished, and how; the capability goes back either way. */
static int finish(struct vmstate *v, int timeout_ms, char *err, size_t errlen)
{
	struct qmp_migration m;
	char why[512];
	int rc = qmp_migrate_wait(v->q, timeout_ms, &m, why, sizeof(why));

	if (rc == -ECONNRESET)
		rc = cli_errf(err, errlen, rc, "QEMU exited while %s the device state%s",
			     v->source ? "saving" : "loading", v->source ? "" : ": it rejected "
			     "it (another machine type, devices or RAM layout than the source's?)");
	else if (rc)
		rc = cli_errf(err, errlen, rc, "QEMU could not %s the device state: %s",
			     v->source ? "save" : "load", why);
	else
		restore_cap(v);
	return rc;
}

int vms_save_finish(struct vmstate *v, int timeout_ms, char *err, size_t errlen)
{
	return finish(v, timeout_ms, err, errlen);
}

int vms_write(struct vmstate *v, const void *data, size_t len, int timeout_ms,
	      char *err, size_t errlen)
{
	uint64_t deadline = cli_now_ms() + (uint64_t)timeout_ms;
	const char *p = data;
	struct pollfd pfd = { .fd = v->fd, .events = POLLOUT };
	ssize_t n;

	while (len) {
		n = write(v->fd, p, len);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EPIPE)
			return cli_errf(err, errlen, -EPIPE, "QEMU stopped reading the device state "
				       "(it rejected it?)");
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return cli_errf(err, errlen, -errno, "writing the device state to QEMU: %s",
				       strerror(errno));
		if (cli_now_ms() >= deadline)
			return cli_errf(err, errlen, -ETIMEDOUT, "QEMU did not read the device state "
				       "within %d ms", timeout_ms);
		poll(&pfd, 1, 100);
	}
	return 0;
}

int vms_load_finish(struct vmstate *v, int timeout_ms, char *err, size_t errlen)
{
	/* End of stream: QEMU knows the state is whole only from EOF. */
	close(v->fd);
	v->fd = -1;
	return finish(v, timeout_ms, err, errlen);
}

void vms_close(struct vmstate *v)
{
	struct qmp_migration m;

	if (!v)
		return;
	if (v->fd >= 0)
		close(v->fd);
	/* Prepared, never used: QEMU would keep the fd for good. */
	if (!v->begun)
		qmp_closefd(v->q, FD_NAME, NULL, 0);
	/* Capabilities cannot change while QEMU's own migration runs: ours,
	 * that is; one we never started is the operator's to keep. */
	if (v->source && v->begun && !qmp_migrate_query(v->q, &m, NULL, 0) &&
	    (!strcmp(m.status, "setup") || !strcmp(m.status, "active") ||
	     !strcmp(m.status, "device")) && !qmp_migrate_cancel(v->q, NULL, 0))
		qmp_migrate_wait(v->q, 5000, &m, NULL, 0);
	restore_cap(v);
	free(v);
}
