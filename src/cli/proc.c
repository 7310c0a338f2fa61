#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cli.h"

/* glibc 2.36 has wrappers, older ones do not: the system calls are the
 * interface (Linux 5.3 and later). */
static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int pidfd_signal_(int pidfd, int sig)
{
	return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

int proc_open(struct proc_ref *p, pid_t pid, struct cli_err *err)
{
	char dir[32];
	int e;

	p->pid = pid;
	p->pidfd = p->dirfd = -1;
	if (pid <= 0)
		return cli_err_set(err, -EINVAL, "invalid process id %d", (int)pid);
	p->pidfd = pidfd_open_(pid);
	if (p->pidfd < 0) {
		e = errno;
		return cli_err_set(err, -e, "no process %d (%s)", (int)pid,
				   e == ESRCH ? "it does not exist" : strerror(e));
	}
	snprintf(dir, sizeof(dir), "/proc/%d", (int)pid);
	p->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	e = errno;
	/* Alive after the directory was opened: the directory is its. */
	if (p->dirfd < 0 || pidfd_signal_(p->pidfd, 0)) {
		if (p->dirfd >= 0)
			e = errno;
		proc_close(p);
		return cli_err_set(err, e == ENOENT || e == ESRCH ? -ESRCH : -e,
				   "no process %d (%s: %s)", (int)pid, dir, strerror(e));
	}
	return 0;
}

int proc_dup(struct proc_ref *to, const struct proc_ref *from, struct cli_err *err)
{
	to->pid = from->pid;
	to->pidfd = fcntl(from->pidfd, F_DUPFD_CLOEXEC, 0);
	to->dirfd = to->pidfd < 0 ? -1 : fcntl(from->dirfd, F_DUPFD_CLOEXEC, 0);
	if (to->dirfd >= 0)
		return 0;
	proc_close(to);
	return cli_err_set(err, -errno, "cannot duplicate a descriptor: %s", strerror(errno));
}

void proc_close(struct proc_ref *p)
{
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->dirfd >= 0)
		close(p->dirfd);
	p->pidfd = p->dirfd = -1;
}

int proc_signal(const struct proc_ref *p, int sig)
{
	return pidfd_signal_(p->pidfd, sig) ? -errno : 0;
}

int proc_openat(const struct proc_ref *p, const char *rel, int flags)
{
	int fd = openat(p->dirfd, rel, flags | O_CLOEXEC);

	/* Below a dead process's directory every name is gone. */
	return fd >= 0 ? fd : errno == ENOENT && proc_signal(p, 0) ? -ESRCH : -errno;
}

int proc_path(const struct proc_ref *p, const char *rel, char *out, size_t len)
{
	int n = snprintf(out, len, "/proc/self/fd/%d/%s", p->dirfd, rel);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The state letter in a task's stat: after the last ')', as the name
 * before it may hold anything; 0 when unreadable (the thread exited). */
static char thread_state(const struct proc_ref *p, const char *tid)
{
	char rel[64], buf[512], *s;
	ssize_t n;
	int fd;

	snprintf(rel, sizeof(rel), "task/%.20s/stat", tid);
	fd = proc_openat(p, rel, O_RDONLY);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	s = strrchr(buf, ')');
	return s && s[1] ? s[2] : 0;
}

int proc_each_thread(const struct proc_ref *p, proc_thread_fn fn, void *ctx)
{
	struct dirent *de;
	int rc = 0, fd = proc_openat(p, "task", O_RDONLY | O_DIRECTORY);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	char st;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return -ESRCH;
	}
	while (!rc && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		st = thread_state(p, de->d_name);
		if (st)
			rc = fn(ctx, (pid_t)atoi(de->d_name), st);
	}
	closedir(d);
	return rc;
}

int proc_start_time(const struct proc_ref *p, unsigned long long *ticks)
{
	char buf[1024], *close_paren;
	ssize_t n;
	int fd = proc_openat(p, "stat", O_RDONLY), i;

	if (fd < 0)
		return fd;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	/* The name in parentheses may hold spaces and parentheses itself:
	 * the fields start after the last one (field 3, the state). */
	close_paren = strrchr(buf, ')');
	if (!close_paren)
		return -EIO;
	for (i = 3; i <= 22; i++) {
		close_paren = strchr(close_paren + 1, ' ');
		if (!close_paren)
			return -EIO;
	}
	return sscanf(close_paren + 1, "%llu", ticks) == 1 ? 0 : -EIO;
}

int proc_holds_socket(const struct proc_ref *p, unsigned long ino)
{
	char want[48], link[64], rel[300];
	struct dirent *de;
	ssize_t l;
	int found = 0, fd = proc_openat(p, "fd", O_RDONLY | O_DIRECTORY);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);

	if (!d) {
		if (fd >= 0)
			close(fd);
		return fd < 0 ? fd : -ENOMEM;
	}
	snprintf(want, sizeof(want), "socket:[%lu]", ino);
	while (!found && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(rel, sizeof(rel), "fd/%.255s", de->d_name);
		l = readlinkat(p->dirfd, rel, link, sizeof(link) - 1);
		if (l < 0)
			continue;
		link[l] = '\0';
		found = !strcmp(link, want);
	}
	closedir(d);
	return found;
}
