#include "image.h"
#include "safeopen.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#define HUGETLBFS_MAGIC_ 0x958458f6

static int sys_fail(int fd, struct cli_err *err, const char *what, const char *path)
{
	int e = errno;

	if (fd >= 0)
		close(fd);
	return cli_err_set(err, -e, "cannot %s %s: %s", what, path, strerror(e));
}

/* One directory of the chain: root's or ours, and only we (or root) may
 * rename and remove entries in it. */
static int dir_ok(const char *dir, struct cli_err *err)
{
	struct stat st;

	if (stat(dir, &st))
		return sys_fail(-1, err, "examine", dir);
	if (st.st_uid != 0 && st.st_uid != geteuid())
		return cli_err_set(err, -EPERM,
				   "directory %s belongs to uid %u, who could replace the image "
				   "files in it: use a directory of root's or your own", dir,
				   (unsigned)st.st_uid);
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
		return cli_err_set(err, -EPERM,
				   "directory %s can be written by other users (mode %04o) and "
				   "has no sticky bit, so they could replace the image files in it: run "
				   "chmod go-w %s (or chmod +t %s)", dir,
				   (unsigned)(st.st_mode & 07777), dir,
				   dir);
	return 0;
}

/* A symbolic link in the path as given that another user owns could be
 * pointed elsewhere after the check: each file is made through the path
 * again. */
static int links_ours(const char *dir, struct cli_err *err)
{
	char p[PATH_MAX], *slash;
	struct stat st;

	if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p))
		return sys_fail(-1, err, "resolve", dir);
	/* Every prefix of the path as given, the whole path last. */
	for (slash = strchr(p + 1, '/');; slash = strchr(slash + 1, '/')) {
		if (slash)
			*slash = '\0';
		if (!lstat(p, &st) && S_ISLNK(st.st_mode) && st.st_uid != 0 &&
		    st.st_uid != geteuid()) {
			return cli_err_set(err, -EPERM,
					   "%s is a symbolic link of uid %u, who could point it "
					   "elsewhere: give the path it points to", p,
					   (unsigned)st.st_uid);
		}
		if (!slash)
			return 0;
		*slash = '/';
	}
}

int img_safe_dir(const char *dir, struct cli_err *err)
{
	char real[PATH_MAX], *slash;
	int rc = links_ours(dir, err);

	if (rc)
		return rc;
	if (!realpath(dir, real))
		return sys_fail(-1, err, "resolve", dir);
	/* From the directory up to /: a writable parent could move the whole
	 * subtree aside and put its own in place. */
	for (;;) {
		rc = dir_ok(real[0] ? real : "/", err);
		if (rc || !real[0])
			return rc;
		slash = strrchr(real, '/');
		*slash = '\0';
	}
}

static int page_size_of(int fd, uint64_t *psz)
{
	struct statfs sfs;

	*psz = (uint64_t)sysconf(_SC_PAGESIZE);
	if (!fstatfs(fd, &sfs) && (uint32_t)sfs.f_type == HUGETLBFS_MAGIC_)
		*psz = (uint64_t)sfs.f_bsize;
	return 0;
}

/* A new file is ours: created here, O_EXCL, where nobody else can rename
 * things (img_safe_dir).  An existing one is opened the one safe way
 * (safeopen.h): the operator's must be ours, QEMU's the very file QEMU
 * maps. */
static int open_file(struct cli_ram *r, enum img_mode mode, struct stat *st, struct cli_err *err)
{
	struct sopen_how how = { .flags = O_RDWR, .ours = mode == IMG_EXISTING };
	int fd;

	if (mode == IMG_QEMU && !r->ino)
		return cli_err_set(err, -EINVAL, "%s: which file QEMU maps is not known, so "
				   "it cannot be checked", r->path);
	if (mode != IMG_NEW) {
		how.dev = r->dev;
		how.ino = r->ino;
		return sopen_file(r->path, &how, st, err);
	}
	fd = open(r->path, O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
	if (fd < 0 && errno == EEXIST)
		return cli_err_set(err, -EEXIST,
				   "%s already exists: remove it, or receive into it with "
				   "--ram NAME=%s --use-existing", r->path, r->path);
	if (fd < 0)
		return sys_fail(-1, err, "create", r->path);
	r->created = 1;
	if (fstat(fd, st))
		return sys_fail(fd, err, "examine", r->path);
	return fd;
}

static int map_fd(int fd, struct cli_ram *r, uint64_t len, const struct stat *st,
		  struct cli_err *err)
{
	void *p;

	r->zeroed = st->st_size == 0;
	if (!len && st->st_size <= 0) {
		close(fd);
		return cli_err_set(err, -EINVAL, "%s is empty", r->path);
	}
	if (!len)
		len = (uint64_t)st->st_size;
	else if ((uint64_t)st->st_size != len && ftruncate(fd, (off_t)len))
		return sys_fail(fd, err, "resize", r->path);
	page_size_of(fd, &r->pgsz);
	p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return sys_fail(fd, err, "map", r->path);
	close(fd);
	r->host = p;
	r->len = len;
	r->dev = st->st_dev;
	r->ino = st->st_ino;
	return 0;
}

int img_open(struct cli_ram *r, uint64_t len, enum img_mode mode, struct cli_err *err)
{
	struct stat st;
	int fd = open_file(r, mode, &st, err), rc;

	if (fd < 0)
		return fd;
	rc = map_fd(fd, r, len, &st, err);
	/* Without its marker a file we just made would look like a complete
	 * image, and a retry would find it in the way. */
	if (rc && r->created) {
		unlink(r->path);
		r->created = 0;
	}
	return rc;
}

uint64_t img_unallocated(const struct cli_ram *r)
{
	struct stat st;
	uint64_t have;

	if (!r->host)
		return 0;
	if (stat(r->path, &st) || st.st_dev != r->dev || st.st_ino != r->ino)
		return r->len;
	have = (uint64_t)st.st_blocks * 512;
	return have < r->len ? r->len - have : 0;
}

int img_fs_free(const char *path, uint64_t *bytes, dev_t *dev)
{
	struct statvfs vfs;
	struct stat st;

	if (statvfs(path, &vfs) || stat(path, &st))
		return -errno;
	/* A filesystem without a size (the one memfds live on) has no room
	 * to run out of but memory itself. */
	*bytes = vfs.f_blocks ? (uint64_t)vfs.f_bavail * vfs.f_frsize : UINT64_MAX;
	*dev = st.st_dev;
	return 0;
}

static void marker_path(const struct cli_ram *r, char *buf, size_t len)
{
	snprintf(buf, len, "%s.incomplete", r->path);
}

/* A marker left by an earlier run of ours says what ours would say. */
static int stale_marker_ours(const char *m, struct cli_err *err)
{
	struct stat st;

	if (lstat(m, &st))
		return sys_fail(-1, err, "examine", m);
	if (S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_nlink == 1)
		return 0;
	return cli_err_set(err, -EEXIST,
			   "%s already exists and is not a marker of ours (uid %u, %s): "
			   "remove it", m, (unsigned)st.st_uid, S_ISREG(st.st_mode) ? "a file" :
			   S_ISLNK(st.st_mode) ? "a symbolic link" : "not a plain file");
}

int img_mark_incomplete(struct cli_ram *r, struct cli_err *err)
{
	char m[sizeof(r->path) + 16];
	int fd, rc;

	marker_path(r, m, sizeof(m));
	fd = open(m, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 && errno == EEXIST) {
		rc = stale_marker_ours(m, err);
		if (rc)
			return rc;
		r->marker = 1;
		return 0;
	}
	if (fd < 0)
		return sys_fail(-1, err, "create", m);
	close(fd);
	r->marker = 1;
	return 0;
}

int img_sync(struct cli_ram *r, struct cli_err *err)
{
	if (r->host && msync(r->host, (size_t)r->len, MS_SYNC))
		return sys_fail(-1, err, "sync", r->path);
	return 0;
}

int img_complete(struct cli_ram *r, struct cli_err *err)
{
	char m[sizeof(r->path) + 16];

	if (!r->marker) {
		r->complete = 1;
		return 0;
	}
	marker_path(r, m, sizeof(m));
	if (unlink(m) && errno != ENOENT)
		return sys_fail(-1, err, "remove", m);
	r->marker = 0;
	r->complete = 1;
	return 0;
}

void img_close(struct cli_ram *r, int discard)
{
	char m[sizeof(r->path) + 16];

	cli_ram_unmap(r);
	/* A file we made that is neither marked incomplete nor complete would
	 * pass for a complete image: it goes in every case. */
	if (r->created && !r->marker && !r->complete)
		discard = 1;
	if (!discard || !r->created)
		return;
	unlink(r->path);
	if (r->marker) {
		marker_path(r, m, sizeof(m));
		unlink(m);
		r->marker = 0;
	}
	r->created = 0;
}
