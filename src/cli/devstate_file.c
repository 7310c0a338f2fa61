/* A device-state file: the source reads it whole when it is opened and
 * sends it after the memory; the destination writes FILE.part and makes it
 * FILE once the source holds the migration done. */
#include "devstate.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "devstate_int.h"
#include "safeopen.h"

/* ---- the source ------------------------------------------------------------ */

static const struct devstate_ops src_file_ops = {
	.takes_state = true,
	.bytes = ds_slurp_bytes,
	.read = ds_slurp_read,
};

int ds_src_file(struct devstate **out, const char *path, struct cli_err *err)
{
	struct stat st;
	int fd, rc = ds_new(out, sizeof(**out), &src_file_ops, 0, err);

	if (rc)
		return rc;
	fd = sopen_file(path, &(struct sopen_how){ .flags = O_RDONLY, .follow = true }, &st,err);
	if (fd < 0)
		return fd;
	rc = ds_slurp(*out, fd);
	close(fd);
	return rc ? cli_err_set(err, rc, "cannot read state file %s: %s", path,
				strerror(-rc)) : 0;
}

/* ---- the destination ---------------------------------------------------------- */

struct dst_file {
	struct devstate d;
	char path[4096], part[4200];  /* FILE and FILE.part; part "" once renamed */
	int fd;                       /* FILE.part once prepared, else -1 */
};

static struct dst_file *dst_file(const struct devstate *d)
{
	return ds_kind(d, struct dst_file);
}

/* FILE.part becomes FILE at the end: a FILE there already must be ours, or
 * the rename would fail after the source handed over (or, run as root,
 * replace another user's file). */
static int final_ours(const char *path, struct cli_err *err)
{
	struct stat st;

	if (lstat(path, &st))
		return 0;
	if (S_ISREG(st.st_mode) && st.st_uid == geteuid())
		return 0;
	return cli_err_set(err, -EEXIST, "%s already exists and is not a file of ours "
			   "(uid %u): remove it", path, (unsigned)st.st_uid);
}

/* FILE.part, made by us alone (O_EXCL): one another user made first would
 * receive the device state.  A leftover of ours from a failed run goes. */
static int create_part(const char *part, struct cli_err *err)
{
	int fd = -1, tries;
	struct stat st;

	for (tries = 0; tries < 2; tries++) {
		fd = open(part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0 || errno != EEXIST)
			break;
		if (lstat(part, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
		    unlink(part))
			return cli_err_set(err, -EEXIST, "%s already exists and is not a "
					   "leftover of ours: remove it", part);
	}
	if (fd < 0)
		return cli_err_set(err, -errno, "cannot create %s: %s", part, strerror(errno));
	return fd;
}

static int dst_prepare(struct devstate *d, struct cli_err *err)
{
	struct dst_file *f = dst_file(d);
	int rc = final_ours(f->path, err);

	if (!rc)
		rc = create_part(f->part, err);
	if (rc < 0)
		return rc;
	f->fd = rc;
	return 0;
}

static int dst_write(struct devstate *d, const void *data, size_t len, struct cli_err *err)
{
	struct dst_file *f = dst_file(d);

	if (f->fd < 0)
		return cli_err_set(err, -EBADF, "no state sink");
	return ds_write_fd(f->fd, data, len, f->part, err);
}

static int dst_commit(struct devstate *d, struct cli_err *err)
{
	struct dst_file *f = dst_file(d);

	if (f->fd >= 0 && fsync(f->fd))
		return cli_err_set(err, -EIO, "cannot write %s: %s", f->part, strerror(errno));
	return 0;
}

static int dst_finish(struct devstate *d, struct cli_err *err)
{
	struct dst_file *f = dst_file(d);

	if (!f->part[0] || f->fd < 0)
		return 0;
	if (close(f->fd)) {
		f->fd = -1;
		return cli_err_set(err, -EIO, "cannot write %s: %s", f->part, strerror(errno));
	}
	f->fd = -1;
	if (rename(f->part, f->path))
		return cli_err_set(err, -EIO, "cannot rename %s to %s: %s", f->part, f->path,
				   strerror(errno));
	f->part[0] = '\0';
	return 0;
}

/* A half-written FILE.part goes. */
static void dst_abort(struct devstate *d, char *note, size_t len)
{
	struct dst_file *f = dst_file(d);

	(void)note;
	(void)len;
	if (!f->part[0] || f->fd < 0)
		return;
	close(f->fd);
	f->fd = -1;
	unlink(f->part);
	f->part[0] = '\0';
}

static int dst_close(struct devstate *d, struct cli_err *err)
{
	char note[8];

	(void)err;
	dst_abort(d, note, sizeof(note));
	return 0;
}

static const struct devstate_ops dst_file_ops = {
	.takes_state = true,
	.prepare = dst_prepare,
	.write = dst_write,
	.commit = dst_commit,
	.finish = dst_finish,
	.abort = dst_abort,
	.close = dst_close,
};

int ds_dst_file(struct devstate **out, const char *path, struct cli_err *err)
{
	struct dst_file *f;
	int rc = ds_new(out, sizeof(*f), &dst_file_ops, 0, err);

	if (rc)
		return rc;
	f = dst_file(*out);
	f->fd = -1;
	snprintf(f->path, sizeof(f->path), "%s", path);
	snprintf(f->part, sizeof(f->part), "%s.part", path);
	return 0;
}
