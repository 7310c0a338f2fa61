/* A userfaultfd created inside another process (inject.h says how and why). */
#include "inject.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cli.h"

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* "Seccomp:" of /proc/PID/status: 0 none, 1 strict, 2 filter; or -errno. */
static int seccomp_mode(const struct proc_ref *p)
{
	char buf[4096], *s;
	ssize_t n;
	int fd = proc_openat(p, "status", O_RDONLY);

	if (fd < 0)
		return fd;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -ESRCH;
	buf[n] = '\0';
	s = strstr(buf, "\nSeccomp:");
	return s ? atoi(s + 9) : 0;
}

/* The calling process needs no injection: its own userfaultfd is the one. */
static int own_userfaultfd(int flags, int *fd, struct cli_err *err)
{
	*fd = (int)syscall(SYS_userfaultfd, flags);
	if (*fd >= 0)
		return 0;
	return cli_err_set(err, -errno, "userfaultfd(2) failed: %s", strerror(errno));
}

#if defined(__x86_64__)

#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>

#define MAX_HELD 8
/* Stops that are not ours (signals, the interrupt's own stop) before a
 * single step is done: far more than a thread can produce in that time. */
#define MAX_STOPS 64

struct tracee {
	pid_t pid, tid;
	struct user_regs_struct saved;
	unsigned long long sys_ip;  /* a `syscall' instruction in its text */
	int held[MAX_HELD];         /* signals that arrived meanwhile */
	unsigned nheld;
};

static void hold(struct tracee *t, int sig)
{
	if (t->nheld < MAX_HELD)
		t->held[t->nheld++] = sig;
}

/* The first thread that can run: not a zombie (a zombie leader, exited
 * before the others, cannot be traced). */
static int runnable(void *ctx, pid_t tid, char state)
{
	(void)ctx;
	return state != 'Z' && state != 'X' ? (int)tid : 0;
}

/* A thread of @p that can run: the leader, unless it exited before the
 * others. */
static pid_t pick_thread(const struct proc_ref *p)
{
	int tid = proc_each_thread(p, runnable, NULL);

	return tid > 0 ? (pid_t)tid : -ESRCH;
}

static int wait_stop(const struct tracee *t, int *st)
{
	while (waitpid(t->tid, st, __WALL) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFSTOPPED(*st) ? 0 : -ESRCH;
}

/* Resumes the thread for one instruction and waits until it is done. */
static int step(struct tracee *t)
{
	int st, rc, i;

	for (i = 0; i < MAX_STOPS; i++) {
		if (ptrace(PTRACE_SINGLESTEP, t->tid, NULL, NULL))
			return -errno;
		rc = wait_stop(t, &st);
		if (rc)
			return rc;
		if ((st >> 16) == 0 && WSTOPSIG(st) == SIGTRAP)
			return 0;
		/* PTRACE_INTERRUPT's stop, or a group stop: not a signal to
		 * keep.  Anything else is a signal for the thread: held. */
		if ((st >> 16) != PTRACE_EVENT_STOP)
			hold(t, WSTOPSIG(st));
	}
	return -EAGAIN;
}

/* Runs system call @nr in the stopped thread; its result, or -errno of
 * ptrace itself. */
static long remote_syscall(struct tracee *t, long nr, long a0, int *perr)
{
	struct user_regs_struct r = t->saved;
	int rc;

	*perr = 0;
	r.rip = t->sys_ip;
	r.rax = (unsigned long long)nr;
	r.orig_rax = (unsigned long long)-1;
	r.rdi = (unsigned long long)a0;
	if (ptrace(PTRACE_SETREGS, t->tid, NULL, &r)) {
		*perr = -errno;
		return 0;
	}
	rc = step(t);
	if (!rc && ptrace(PTRACE_GETREGS, t->tid, NULL, &r))
		rc = -errno;
	if (!rc && r.rip != t->sys_ip + 2)
		rc = -EFAULT;
	*perr = rc;
	return (long)r.rax;
}

/* The `syscall' instruction the thread stopped after when it was inside a
 * system call; otherwise one in its vDSO (every x86-64 vDSO has them, in
 * the fallbacks of its clock functions). */
static int find_syscall_insn(const struct proc_ref *p, struct tracee *t)
{
	unsigned long long lo = 0, hi = 0;
	unsigned char *text;
	char line[512];
	size_t i, len;
	long word;
	FILE *f;
	int fd;

	if ((long long)t->saved.orig_rax >= 0) {
		errno = 0;
		word = ptrace(PTRACE_PEEKTEXT, t->tid, (void *)(uintptr_t)(t->saved.rip - 2), NULL);
		if (!errno && (word & 0xffff) == 0x050f) {
			t->sys_ip = t->saved.rip - 2;
			return 0;
		}
	}
	fd = proc_openat(p, "maps", O_RDONLY);
	f = fd < 0 ? NULL : fdopen(fd, "r");
	if (!f) {
		if (fd >= 0)
			close(fd);
		return -ESRCH;
	}
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "[vdso]") && sscanf(line, "%llx-%llx", &lo, &hi) == 2)
			break;
	fclose(f);
	if (hi <= lo || hi - lo > (1u << 20))
		return -ENOENT;
	len = (size_t)(hi - lo);
	text = malloc(len);
	fd = proc_openat(p, "mem", O_RDONLY);
	if (!text || fd < 0 || pread(fd, text, len, (off_t)lo) != (ssize_t)len) {
		free(text);
		if (fd >= 0)
			close(fd);
		return -EIO;
	}
	close(fd);
	for (i = 0; i + 1 < len; i++)
		if (text[i] == 0x0f && text[i + 1] == 0x05)
			break;
	free(text);
	if (i + 1 >= len)
		return -ENOENT;
	t->sys_ip = lo + i;
	return 0;
}

/* Puts the registers back and lets the thread go, with the first signal it
 * got meanwhile (PTRACE_DETACH from its last stop delivers it); later ones
 * are sent again. */
static void release(struct tracee *t, bool restore)
{
	unsigned i;

	if (restore)
		ptrace(PTRACE_SETREGS, t->tid, NULL, &t->saved);
	ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(uintptr_t)(t->nheld ? t->held[0] : 0));
	for (i = 1; i < t->nheld; i++)
		syscall(SYS_tgkill, t->pid, t->tid, t->held[i]);
}

int inject_userfaultfd(const struct proc_ref *p, int uffd_flags, bool under_seccomp, int *fd,
		       struct cli_err *err)
{
	struct tracee t = { .pid = p->pid };
	int st, rc, sm, perr, e;
	long rfd, r;

	*fd = -1;
	if (p->pid == getpid())
		return own_userfaultfd(uffd_flags, fd, err);
	sm = seccomp_mode(p);
	if (sm < 0)
		return cli_err_set(err, sm, "cannot read /proc/%d/status: %s", (int)p->pid,
				   strerror(-sm));
	if (sm > 0 && !under_seccomp)
		return cli_err_set(err, -EPERM, "process %d runs under a seccomp filter (Seccomp: "
				   "%d in /proc/%d/status), which might kill it for a userfaultfd(2) "
				   "made inside it", (int)p->pid, sm, (int)p->pid);
	t.tid = pick_thread(p);
	if (t.tid < 0)
		return cli_err_set(err, -ESRCH, "process %d exited", (int)p->pid);
	if (ptrace(PTRACE_SEIZE, t.tid, NULL, NULL)) {
		e = errno;
		return cli_err_set(err, -e, "cannot ptrace process %d (%s): %s", (int)p->pid,
				   strerror(e),
				   e == EPERM ? "another tracer holds it, or it is not ours "
				   "to trace (root can; its owner only with kernel.yama.ptrace_scope 0)" :
				   "it exited");
	}
	rc = ptrace(PTRACE_INTERRUPT, t.tid, NULL, NULL) ? -errno : wait_stop(&t, &st);
	if (rc) {
		ptrace(PTRACE_DETACH, t.tid, NULL, NULL);
		return cli_err_set(err, -ESRCH, "process %d did not stop for ptrace (%s)",
				   (int)p->pid, strerror(-rc));
	}
	/* A signal-delivery stop came first: the signal is the thread's. */
	if ((st >> 16) != PTRACE_EVENT_STOP)
		hold(&t, WSTOPSIG(st));
	if (ptrace(PTRACE_GETREGS, t.tid, NULL, &t.saved)) {
		e = errno;
		release(&t, false);
		return cli_err_set(err, -e, "cannot read the registers of process %d: %s",
				   (int)p->pid, strerror(e));
	}
	/* 0x33: the 64-bit user code segment; a 32-bit process has others
	 * system call numbers and registers. */
	if (t.saved.cs != 0x33) {
		release(&t, false);
		return cli_err_set(err, -EOPNOTSUPP, "process %d is a 32-bit process",
				   (int)p->pid);
	}
	rc = find_syscall_insn(p, &t);
	if (rc) {
		release(&t, false);
		return cli_err_set(err, rc, "no syscall instruction found in process %d's "
				   "vDSO: %s", (int)p->pid, strerror(-rc));
	}
	rfd = remote_syscall(&t, SYS_userfaultfd, uffd_flags, &perr);
	if (perr) {
		release(&t, true);
		return cli_err_set(err, perr, "running userfaultfd(2) in process %d failed: %s",
				   (int)p->pid, strerror(-perr));
	}
	if (rfd < 0) {
		release(&t, true);
		return cli_err_set(err, (int)rfd, "userfaultfd(2) in process %d failed: %s%s",
				   (int)p->pid, strerror((int)-rfd), rfd == -ENOSYS ?
				   " (the kernel is built without CONFIG_USERFAULTFD)" : "");
	}
	*fd = (int)syscall(SYS_pidfd_getfd, p->pidfd, (int)rfd, 0);
	e = errno;
	/* The process keeps nothing of ours: its copy goes again. */
	r = remote_syscall(&t, SYS_close, rfd, &perr);
	release(&t, true);
	if (*fd < 0)
		return cli_err_set(err, -e, "pidfd_getfd(2) of process %d's descriptor %ld "
				   "failed: %s", (int)p->pid, rfd, strerror(e));
	if (perr || r) {
		close(*fd);
		*fd = -1;
		return cli_err_set(err, perr ? perr : (int)r, "closing descriptor %ld in process "
				   "%d again failed: %s", rfd, (int)p->pid,
				   strerror(perr ? -perr : (int)-r));
	}
	return 0;
}

#else /* !__x86_64__ */

int inject_userfaultfd(const struct proc_ref *p, int uffd_flags, bool under_seccomp, int *fd,
		       struct cli_err *err)
{
	(void)under_seccomp;
	(void)seccomp_mode;
	*fd = -1;
	if (p->pid == getpid())
		return own_userfaultfd(uffd_flags, fd, err);
	return cli_err_set(err, -EOPNOTSUPP, "making a userfaultfd inside process %d is "
			   "only implemented for x86-64", (int)p->pid);
}

#endif
