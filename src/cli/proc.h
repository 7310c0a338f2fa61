/* A process held by identity rather than by number.
 *
 * A pid is only a number: once its process exits, the kernel may give it
 * to another, and a root migrate-send would SIGSTOP, SIGCONT or clear the
 * soft-dirty bits of a stranger.  A proc_ref holds a pidfd (signals reach
 * that process or fail with ESRCH) and a descriptor of its /proc/PID
 * directory (files opened below it belong to that process or fail), both
 * taken while the process was known to be the one meant.
 *
 * Functions return 0 or a negative errno, with one line in @err where they
 * take one; none prints or exits. */
#ifndef RDMIG_CLI_PROC_H
#define RDMIG_CLI_PROC_H

#include <stddef.h>
#include <sys/types.h>

#include "clierr.h"

struct proc_ref {
	pid_t pid;   /* for messages */
	int pidfd;   /* -1 when not open */
	int dirfd;   /* /proc/PID */
};

#define PROC_REF_INIT { 0, -1, -1 }

/* Takes hold of @pid.  The caller vouches that @pid is the process meant at
 * this moment (it was just named by the operator, or by the peer of a
 * socket that is still connected): after this, no reuse can mislead us. */
int proc_open(struct proc_ref *p, pid_t pid, struct cli_err *err);
/* A second, independent hold on the same process. */
int proc_dup(struct proc_ref *to, const struct proc_ref *from, struct cli_err *err);
void proc_close(struct proc_ref *p);

/* Sends @sig; -ESRCH once the process is gone. */
int proc_signal(const struct proc_ref *p, int sig);
/* openat() below /proc/PID ("maps", "task", "fd/3", "root/dev/shm/x"). */
int proc_openat(const struct proc_ref *p, const char *rel, int flags);
/* A path that reaches @rel below this very process's /proc directory, for
 * functions that take a path (open, stat, realpath): "/proc/self/fd/N/REL".
 * -ENAMETOOLONG when it does not fit @len. */
int proc_path(const struct proc_ref *p, const char *rel, char *out, size_t len);
/* When the process started (field 22 of /proc/PID/stat, clock ticks since
 * boot): with its pid, what names one process for good. */
int proc_start_time(const struct proc_ref *p, unsigned long long *ticks);
/* Whether the process holds, among its fds, the socket of inode @ino: 1
 * yes, 0 no, or a negative errno. */
int proc_holds_socket(const struct proc_ref *p, unsigned long ino);
/* Calls @fn with each thread's id and state letter (ps's: R, S, T, Z...)
 * until it returns non-zero, which is then returned; a thread that exits
 * meanwhile is passed over.  0 after the last, -ESRCH when the process is
 * gone. */
typedef int (*proc_thread_fn)(void *ctx, pid_t tid, char state);
int proc_each_thread(const struct proc_ref *p, proc_thread_fn fn, void *ctx);

#endif
