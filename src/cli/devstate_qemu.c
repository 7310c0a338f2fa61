/* The device state of the QEMU migrated (vmstate.h): at the source, QEMU's
 * own migration into a pipe read here; at the destination, a pipe written
 * here into the QEMU waiting with -incoming defer. */
#include "devstate.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "devstate_int.h"
#include "qmp.h"
#include "vmstate.h"

struct ds_qemu {
	struct devstate d;
	struct qmp *q;                /* borrowed */
	struct vmstate *vms;          /* once prepared */
	bool start, started;          /* dest: cont wanted, done */
	bool got;                     /* dest: some state arrived */
};

static struct ds_qemu *ds_qemu(const struct devstate *d)
{
	return ds_kind(d, struct ds_qemu);
}

static int qemu_new(struct devstate **out, const struct devstate_ops *ops, struct qmp *q,
		    int timeout_ms, struct cli_err *err)
{
	int rc = ds_new(out, sizeof(struct ds_qemu), ops, timeout_ms, err);

	if (!rc)
		ds_qemu(*out)->q = q;
	return rc;
}

static int qemu_close(struct devstate *d, struct cli_err *err)
{
	return vms_close(ds_qemu(d)->vms, err);
}

/* ---- the source ------------------------------------------------------------ */

static uint64_t src_bytes(const struct devstate *d)
{
	(void)d;
	return UINT64_MAX;  /* not known before QEMU is done */
}

static int src_prepare(struct devstate *d, struct cli_err *err)
{
	return vms_prepare(&ds_qemu(d)->vms, ds_qemu(d)->q, true, err);
}

static int src_start(struct devstate *d, struct cli_err *err)
{
	return vms_begin(ds_qemu(d)->vms, err);
}

static int src_stopped(struct devstate *d, uint64_t *stop_ms, struct cli_err *err)
{
	return vms_stopped(ds_qemu(d)->vms, stop_ms, err);
}

static int src_release(struct devstate *d, struct cli_err *err)
{
	return vms_release(ds_qemu(d)->vms, err);
}

static int src_fd(const struct devstate *d)
{
	return ds_qemu(d)->vms ? vms_fd(ds_qemu(d)->vms) : -1;
}

static ssize_t src_read(struct devstate *d, void *buf, size_t len, struct cli_err *err)
{
	struct ds_qemu *m = ds_qemu(d);

	/* Nothing comes before QEMU's migration was prepared. */
	return m->vms ? vms_read(m->vms, buf, len, err) : -EAGAIN;
}

static int src_commit(struct devstate *d, struct cli_err *err)
{
	return vms_save_finish(ds_qemu(d)->vms, d->timeout_ms, err);
}

static const struct devstate_ops src_qemu_ops = {
	.takes_state = true,
	.bytes = src_bytes,
	.prepare = src_prepare,
	.start = src_start,
	.stopped = src_stopped,
	.release = src_release,
	.fd = src_fd,
	.read = src_read,
	.commit = src_commit,
	.close = qemu_close,
};

int ds_src_qemu(struct devstate **out, struct qmp *q, int timeout_ms, struct cli_err *err)
{
	return qemu_new(out, &src_qemu_ops, q, timeout_ms, err);
}

/* ---- the destination ---------------------------------------------------------- */

/* A destination QEMU must be waiting for its incoming migration. */
static int dst_prepare(struct devstate *d, struct cli_err *err)
{
	struct ds_qemu *m = ds_qemu(d);
	char st[32] = "";
	int rc = qmp_status(m->q, st, sizeof(st), err);

	if (!rc && strcmp(st, "inmigrate"))
		rc = cli_err_set(err, -EBUSY, "the destination QEMU is %s, not waiting for "
				 "an incoming migration", st);
	return rc ? rc : vms_prepare(&m->vms, m->q, false, err);
}

static int dst_write(struct devstate *d, const void *data, size_t len, struct cli_err *err)
{
	struct ds_qemu *m = ds_qemu(d);
	/* The first bytes start QEMU's incoming migration (prepared at
	 * admission, so this is one QMP command). */
	int rc = vms_begin(m->vms, err);

	m->got = true;
	return rc ? rc : vms_write(m->vms, data, len, d->timeout_ms, err);
}

/* The source hears "completed" only once its guest runs here (or, without
 * start, is loaded and paused).  The source waits its timeout for our
 * answer from the keepalive sent before this: QEMU must be done well
 * within that, or it gives up while the guest starts here. */
static int dst_commit(struct devstate *d, struct cli_err *err)
{
	struct ds_qemu *m = ds_qemu(d);
	int rc;

	if (!m->got)
		return cli_err_set(err, -EPROTO, "the source sent no device state for QEMU "
				   "(is it migrate-send --qmp?)");
	rc = vms_load_finish(m->vms, d->timeout_ms * 3 / 4, err);
	if (!rc && m->start) {
		struct cli_err why;

		rc = qmp_cont(m->q, &why);
		if (rc)
			cli_err_set(err, rc, "%s", why.msg);
		m->started = rc == 0;
	}
	return rc;
}

/* The source was not told it completed, so it resumes its guest: this copy
 * must not run on beside it. */
static void dst_abort(struct devstate *d, char *note, size_t len)
{
	struct ds_qemu *m = ds_qemu(d);
	struct cli_err why;

	if (!m->started)
		return;
	if (qmp_stop(m->q, &why))
		snprintf(note, len, "; the guest here could not be paused again: %s", why.msg);
	else
		snprintf(note, len,
			 "; the source was not told, so the guest here was paused again");
	m->started = false;
}

static const char *dst_outcome(const struct devstate *d)
{
	return ds_qemu(d)->started ? "; the guest runs here" :
				     "; the guest is loaded and paused (--no-start)";
}

static const char *dst_guest(const struct devstate *d)
{
	return ds_qemu(d)->started ? "running" : "paused";
}

static const struct devstate_ops dst_qemu_ops = {
	.takes_state = true,
	.prepare = dst_prepare,
	.write = dst_write,
	.commit = dst_commit,
	.abort = dst_abort,
	.outcome = dst_outcome,
	.guest = dst_guest,
	.close = qemu_close,
};

int ds_dst_qemu(struct devstate **out, struct qmp *q, bool start, int timeout_ms,
		struct cli_err *err)
{
	int rc = qemu_new(out, &dst_qemu_ops, q, timeout_ms, err);

	if (!rc)
		ds_qemu(*out)->start = start;
	return rc;
}
