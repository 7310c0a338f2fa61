#include "devstate.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "qmp.h"
#include "safeopen.h"
#include "vmstate.h"

enum ds_kind { DS_SRC_FILE, DS_SRC_QEMU, DS_DST_FILE, DS_DST_QEMU };

struct devstate {
	enum ds_kind kind;
	int timeout_ms;
	/* files */
	char path[4096], part[4200];  /* dest: FILE and FILE.part, "" for stdout */
	int fd;                       /* dest: where the state goes, -1 none */
	bool none;                    /* no state at all */
	char *data;                   /* source: the whole file */
	size_t len, off;
	bool released;
	/* QEMU */
	struct qmp *q;
	struct vmstate *vms;
	bool start, started;          /* dest: cont wanted, done */
	bool got;                     /* dest: some state arrived */
	uint64_t written, max;        /* dest: state taken, and at most */
};

static int alloc(struct devstate **out, enum ds_kind kind, int timeout_ms, char *err,
		 size_t errlen)
{
	struct devstate *d = calloc(1, sizeof(*d));

	*out = d;
	if (!d)
		return cli_errf(err, errlen, -ENOMEM, "out of memory");
	d->kind = kind;
	d->fd = -1;
	d->timeout_ms = timeout_ms;
	return 0;
}

static bool is_qemu(const struct devstate *d)
{
	return d->kind == DS_SRC_QEMU || d->kind == DS_DST_QEMU;
}

/* ---- construction ---------------------------------------------------------- */

static int read_all(int fd, char **out, size_t *outlen)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap), *nb;
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (len == cap) {
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			n = -errno;
			free(buf);
			return (int)n;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*out = buf;
	*outlen = len;
	return 0;
}

int ds_src_file(struct devstate **out, const char *path, char *err, size_t errlen)
{
	struct stat st;
	struct devstate *d;
	int fd, rc = alloc(out, DS_SRC_FILE, 0, err, errlen);

	if (rc)
		return rc;
	d = *out;
	d->none = !path;
	if (!path)
		return 0;
	fd = strcmp(path, "-") ? sopen_file(path, &(struct sopen_how){ .flags = O_RDONLY,
					     .follow = true }, &st, err, errlen) : 0;
	if (fd < 0)
		return fd;
	rc = read_all(fd, &d->data, &d->len);
	if (fd)
		close(fd);
	return rc ? cli_errf(err, errlen, rc, "cannot read state file %s: %s", path,
			     strerror(-rc)) : 0;
}

int ds_src_qemu(struct devstate **out, struct qmp *q, int timeout_ms, char *err,
		size_t errlen)
{
	int rc = alloc(out, DS_SRC_QEMU, timeout_ms, err, errlen);

	if (!rc)
		(*out)->q = q;
	return rc;
}

int ds_dst_file(struct devstate **out, const char *path, char *err, size_t errlen)
{
	struct devstate *d;
	int rc = alloc(out, DS_DST_FILE, 0, err, errlen);

	if (rc)
		return rc;
	d = *out;
	d->none = !path;
	if (path && strcmp(path, "-")) {
		snprintf(d->path, sizeof(d->path), "%s", path);
		snprintf(d->part, sizeof(d->part), "%s.part", path);
	}
	return 0;
}

int ds_dst_qemu(struct devstate **out, struct qmp *q, bool start, int timeout_ms,
		char *err, size_t errlen)
{
	int rc = alloc(out, DS_DST_QEMU, timeout_ms, err, errlen);

	if (!rc) {
		(*out)->q = q;
		(*out)->start = start;
	}
	return rc;
}

bool ds_takes_state(const struct devstate *d)
{
	return !d->none;
}

void ds_limit(struct devstate *d, uint64_t max)
{
	d->max = max;
}

uint64_t ds_bytes(const struct devstate *d)
{
	switch (d->kind) {
	case DS_SRC_FILE: return d->none ? 0 : (uint64_t)d->len;
	case DS_SRC_QEMU: return UINT64_MAX;
	default: return d->written;
	}
}

/* ---- preparation ------------------------------------------------------------- */

/* FILE.part, made by us alone (O_EXCL): one another user made first would
 * receive the device state.  A leftover of ours from a failed run goes. */
static int create_part(const char *part, char *err, size_t errlen)
{
	int fd = -1, tries;
	struct stat st;

	for (tries = 0; tries < 2; tries++) {
		fd = open(part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0 || errno != EEXIST)
			break;
		if (lstat(part, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
		    unlink(part))
			return cli_errf(err, errlen, -EEXIST, "%s already exists and is not a "
					"leftover of ours: remove it", part);
	}
	if (fd < 0)
		return cli_errf(err, errlen, -errno, "cannot create %s: %s", part, strerror(errno));
	return fd;
}

/* FILE.part becomes FILE at the end: a FILE there already must be ours, or
 * the rename would fail after the source handed over (or, run as root,
 * replace another user's file). */
static int final_ours(const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (lstat(path, &st))
		return 0;
	if (S_ISREG(st.st_mode) && st.st_uid == geteuid())
		return 0;
	return cli_errf(err, errlen, -EEXIST, "%s already exists and is not a file of ours "
			"(uid %u): remove it", path, (unsigned)st.st_uid);
}

/* A destination QEMU must be waiting for its incoming migration. */
static int qemu_waits(struct devstate *d, char *err, size_t errlen)
{
	char st[32] = "";
	int rc = qmp_status(d->q, st, sizeof(st), err, errlen);

	if (!rc && strcmp(st, "inmigrate"))
		rc = cli_errf(err, errlen, -EBUSY, "the destination QEMU is %s, not waiting for "
			      "an incoming migration", st);
	return rc;
}

int ds_prepare(struct devstate *d, char *err, size_t errlen)
{
	int rc;

	switch (d->kind) {
	case DS_SRC_FILE:
		return 0;
	case DS_SRC_QEMU:
		return vms_prepare(&d->vms, d->q, true, err, errlen);
	case DS_DST_FILE:
		if (d->none)
			return 0;
		if (!d->part[0]) {
			d->fd = 1;
			return 0;
		}
		rc = final_ours(d->path, err, errlen);
		if (!rc)
			rc = create_part(d->part, err, errlen);
		if (rc < 0)
			return rc;
		d->fd = rc;
		return 0;
	case DS_DST_QEMU:
		rc = qemu_waits(d, err, errlen);
		return rc ? rc : vms_prepare(&d->vms, d->q, false, err, errlen);
	}
	return -EINVAL;
}

/* ---- the source side ----------------------------------------------------------- */

int ds_start(struct devstate *d, char *err, size_t errlen)
{
	return d->kind == DS_SRC_QEMU ? vms_begin(d->vms, err, errlen) : 0;
}

int ds_stopped(struct devstate *d, uint64_t *stop_ms, char *err, size_t errlen)
{
	return d->kind == DS_SRC_QEMU ? vms_stopped(d->vms, stop_ms, err, errlen) : -ENOTSUP;
}

int ds_release(struct devstate *d, char *err, size_t errlen)
{
	d->released = true;
	return d->kind == DS_SRC_QEMU ? vms_release(d->vms, err, errlen) : 0;
}

int ds_fd(const struct devstate *d)
{
	return d->kind == DS_SRC_QEMU && d->vms ? vms_fd(d->vms) : -1;
}

ssize_t ds_read(struct devstate *d, void *buf, size_t len, char *err, size_t errlen)
{
	size_t n;

	/* Nothing comes before QEMU's migration was prepared. */
	if (d->kind == DS_SRC_QEMU)
		return d->vms ? vms_read(d->vms, buf, len, err, errlen) : -EAGAIN;
	/* A file's state follows the memory: nothing before the release. */
	if (!d->released)
		return -EAGAIN;
	n = d->len - d->off < len ? d->len - d->off : len;
	memcpy(buf, d->data + d->off, n);
	d->off += n;
	return (ssize_t)n;
}

/* ---- the destination side --------------------------------------------------------- */

int ds_write(struct devstate *d, const void *data, size_t len, char *err, size_t errlen)
{
	const char *p = data;
	ssize_t n;
	int rc;

	d->got = true;
	/* A source that sends state without end must not fill the filesystem
	 * (or QEMU's memory). */
	if (d->max && len > d->max - (d->written < d->max ? d->written : d->max))
		return cli_errf(err, errlen, -EFBIG, "the device state is larger than this "
				"destination takes (%llu bytes, --max-state)",
				(unsigned long long)d->max);
	d->written += len;
	if (d->kind == DS_DST_QEMU) {
		/* The first bytes start QEMU's incoming migration (prepared at
		 * admission, so this is one QMP command). */
		rc = vms_begin(d->vms, err, errlen);
		return rc ? rc : vms_write(d->vms, data, len, d->timeout_ms, err, errlen);
	}
	if (d->fd < 0)
		return cli_errf(err, errlen, -EBADF, "no state sink");
	while (len) {
		n = write(d->fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return cli_errf(err, errlen, -errno, "writing %s: %s", d->part[0] ? d->part :
					"the state", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int commit_file(struct devstate *d, char *err, size_t errlen)
{
	if (d->fd == 1 && fflush(stdout))
		return cli_errf(err, errlen, -EIO, "cannot write the state to standard output: %s",
				strerror(errno));
	if (d->fd > 1 && fsync(d->fd))
		return cli_errf(err, errlen, -EIO, "cannot write %s: %s", d->part, strerror(errno));
	return 0;
}

/* The source hears "completed" only once its guest runs here (or, without
 * start, is loaded and paused).  The source waits its timeout for our
 * answer from the keepalive sent before this: QEMU must be done well
 * within that, or it gives up while the guest starts here. */
static int commit_qemu(struct devstate *d, char *err, size_t errlen)
{
	int rc;

	if (!d->got)
		return cli_errf(err, errlen, -EPROTO, "the source sent no device state for QEMU "
				"(is it migrate-send --qmp?)");
	rc = vms_load_finish(d->vms, d->timeout_ms * 3 / 4, err, errlen);
	if (!rc && d->start) {
		char why[512];

		rc = qmp_cont(d->q, why, sizeof(why));
		if (rc)
			cli_errf(err, errlen, rc, "%s", why);
		d->started = rc == 0;
	}
	return rc;
}

int ds_commit(struct devstate *d, char *err, size_t errlen)
{
	switch (d->kind) {
	case DS_SRC_FILE:
		return 0;
	case DS_SRC_QEMU:
		return vms_save_finish(d->vms, d->timeout_ms, err, errlen);
	case DS_DST_FILE:
		return commit_file(d, err, errlen);
	case DS_DST_QEMU:
		return commit_qemu(d, err, errlen);
	}
	return -EINVAL;
}

int ds_finish(struct devstate *d, char *err, size_t errlen)
{
	if (d->kind != DS_DST_FILE || !d->part[0] || d->fd < 0)
		return 0;
	if (close(d->fd)) {
		d->fd = -1;
		return cli_errf(err, errlen, -EIO, "cannot write %s: %s", d->part, strerror(errno));
	}
	d->fd = -1;
	if (rename(d->part, d->path))
		return cli_errf(err, errlen, -EIO, "cannot rename %s to %s: %s", d->part, d->path,
				strerror(errno));
	d->part[0] = '\0';
	return 0;
}

void ds_abort(struct devstate *d, char *note, size_t len)
{
	char why[512];

	note[0] = '\0';
	if (d->kind == DS_DST_FILE && d->part[0] && d->fd > 1) {
		close(d->fd);
		d->fd = -1;
		unlink(d->part);
		d->part[0] = '\0';
	}
	if (d->kind != DS_DST_QEMU || !d->started)
		return;
	/* The source was not told it completed, so it resumes its guest: this
	 * copy must not run on beside it. */
	if (qmp_stop(d->q, why, sizeof(why)))
		snprintf(note, len, "; the guest here could not be paused again: %s", why);
	else
		snprintf(note, len, "; the source was not told, so the guest here was paused again");
	d->started = false;
}

const char *ds_outcome(const struct devstate *d)
{
	if (d->kind != DS_DST_QEMU)
		return "";
	return d->started ? "; the guest runs here" :
			    "; the guest is loaded and paused (--no-start)";
}

const char *ds_guest(const struct devstate *d)
{
	if (d->kind != DS_DST_QEMU)
		return NULL;
	return d->started ? "running" : "paused";
}

int ds_close(struct devstate *d, char *err, size_t errlen)
{
	char note[8];
	int rc = 0;

	if (!d)
		return 0;
	if (d->kind == DS_DST_FILE)
		ds_abort(d, note, sizeof(note));
	if (d->fd > 1)
		close(d->fd);
	if (is_qemu(d))
		rc = vms_close(d->vms, err, errlen);
	free(d->data);
	free(d);
	return rc;
}
