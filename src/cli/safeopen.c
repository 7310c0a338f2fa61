#include "safeopen.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "clierr.h"

/* With RESOLVE_IN_ROOT the kernel asks to try again when a rename raced
 * the walk. */
#define RACE_TRIES 8

static int openat2_(int dirfd, const char *path, int flags, unsigned resolve)
{
	struct open_how how = { .flags = (unsigned)flags, .resolve = resolve };
	int i, fd = -1;

	for (i = 0; i < RACE_TRIES; i++) {
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN)
			break;
	}
	return fd < 0 ? -errno : fd;
}

static int walk_fail(int rc, const char *path, struct cli_err *err)
{
	if (rc == -ELOOP)
		return cli_err_set(err, rc, "%s: a symbolic link is in the path (the file or "
				   "one of its directories), and none is followed: give the path "
				   "without links", path);
	if (rc == -ENOSYS)
		return cli_err_set(err, rc, "%s: this kernel has no openat2 (Linux 5.6 and "
				   "later), which opening files safely needs", path);
	if (rc == -EXDEV)
		return cli_err_set(err, rc, "%s: the path leads out of QEMU's root", path);
	return cli_err_set(err, rc, "%s: %s", path, strerror(-rc));
}

/* /proc/PID/NAME's directory, without following anything on the way. */
static int proc_dir(int pid, const char *name, int flags)
{
	char p[64];
	int dir, fd;

	snprintf(p, sizeof(p), "/proc/%d", pid);
	dir = openat2_(AT_FDCWD, p, O_PATH | O_DIRECTORY | O_CLOEXEC,
		       RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
	if (dir < 0)
		return dir;
	/* The magic link itself (fd/N, root) is the point: it is QEMU's
	 * file, or QEMU's root, whatever names point there. */
	fd = openat(dir, name, flags | O_PATH | O_CLOEXEC);
	fd = fd < 0 ? -errno : fd;
	close(dir);
	return fd;
}

/* A number as qemu_ram.c writes one: digits, no sign, no leading zero, at
 * most 9 of them; its length, or 0 when @s does not start with one. */
static size_t number(const char *s)
{
	size_t n = strspn(s, "0123456789");

	return n && n <= 9 && (s[0] != '0' || n == 1) ? n : 0;
}

/* An O_PATH descriptor of what @path names, or -errno.  Only the forms
 * qemu_ram.c makes are QEMU's: "/proc/PID/fd/N" and "/proc/PID/root/REST". */
static int resolve(const char *path, bool follow)
{
	const char *p = path + 6, *rest;
	size_t n, m;
	int pid, fd, root;

	if (follow) {
		fd = open(path, O_PATH | O_CLOEXEC);
		return fd < 0 ? -errno : fd;
	}
	n = strncmp(path, "/proc/", 6) ? 0 : number(p);
	pid = n ? atoi(p) : 0;
	rest = p + n;
	m = pid > 0 && !strncmp(rest, "/fd/", 4) ? number(rest + 4) : 0;
	if (m && !rest[4 + m])
		return proc_dir(pid, rest + 1, 0);
	if (pid > 0 && !strncmp(rest, "/root/", 6)) {
		root = proc_dir(pid, "root", O_DIRECTORY);
		if (root < 0)
			return root;
		fd = openat2_(root, rest + 5, O_PATH | O_CLOEXEC,
			      RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
		close(root);
		return fd;
	}
	return openat2_(AT_FDCWD, path, O_PATH | O_CLOEXEC,
			RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
}

static const char *kind_of(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISFIFO(m) ? "a FIFO" :
	       S_ISSOCK(m) ? "a socket" : S_ISLNK(m) ? "a symbolic link" : "not a plain file";
}

/* What @fd (O_PATH) names must be the regular file @how wants. */
static int check(int fd, const char *path, const struct sopen_how *how, struct stat *st,
		 struct cli_err *err)
{
	if (fstat(fd, st))
		return cli_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st->st_mode))
		return cli_err_set(err, -EINVAL, "%s is %s, not a regular file: refused "
				   "before it was opened", path, kind_of(st->st_mode));
	if (how && how->ino && (st->st_dev != how->dev || st->st_ino != how->ino))
		return cli_err_set(err, -ESTALE, "%s is no longer the file QEMU maps (device "
				   "%u:%u inode %llu, found device %u:%u inode %llu): it was replaced "
				   "since QEMU's RAM was looked at", path, major(how->dev),
				   minor(how->dev), (unsigned long long)how->ino, major(st->st_dev),
				   minor(st->st_dev), (unsigned long long)st->st_ino);
	if (how && how->ours && st->st_uid != geteuid())
		return cli_err_set(err, -EPERM, "%s belongs to uid %u, not to us (uid %u): "
				   "another user's file is never written into; remove it or give a "
				   "path of your own", path, (unsigned)st->st_uid,
				   (unsigned)geteuid());
	/* A second name elsewhere could be another user's way in (a hard
	 * link they made to our file, where protected_hardlinks is off). */
	if (how && how->ours && st->st_nlink != 1)
		return cli_err_set(err, -EPERM, "%s has %lu names (hard links): give a file "
				   "with one", path, (unsigned long)st->st_nlink);
	return 0;
}

int sopen_stat(const char *path, struct stat *st, struct cli_err *err)
{
	int fd = resolve(path, false), rc;

	if (fd < 0)
		return walk_fail(fd, path, err);
	rc = check(fd, path, NULL, st, err);
	close(fd);
	return rc;
}

int sopen_file(const char *path, const struct sopen_how *how, struct stat *st, struct cli_err *err)
{
	char self[64];
	struct stat now;
	int pfd = resolve(path, how->follow), fd, rc;

	if (pfd < 0)
		return walk_fail(pfd, path, err);
	rc = check(pfd, path, how, st, err);
	if (rc) {
		close(pfd);
		return rc;
	}
	/* Through the descriptor: the file checked, whatever the name says
	 * by now. */
	snprintf(self, sizeof(self), "/proc/self/fd/%d", pfd);
	fd = open(self, how->flags | O_CLOEXEC | O_NOCTTY);
	rc = fd < 0 ? -errno : 0;
	close(pfd);
	if (rc)
		return cli_err_set(err, rc, "cannot open %s: %s", path, strerror(-rc));
	if (fstat(fd, &now) || now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
		close(fd);
		return cli_err_set(err, -ESTALE, "%s changed while it was opened", path);
	}
	return fd;
}
