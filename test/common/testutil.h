/* Helpers for tests that drive real processes: spawn with output captured to
 * a file, wait with a deadline (killing on expiry), read files back. */
#ifndef RDMIG_TESTUTIL_H
#define RDMIG_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct tu_proc {
	pid_t pid;
	char out_path[512]; /* stdout and stderr of the process */
	int status;         /* wait status once reaped */
	int reaped;
};

/* A fresh directory for one test's files; removed by tu_rmdir. */
void tu_tmpdir(char *buf, size_t len);
void tu_rmdir(const char *dir);

/* Path of a test helper or program built by make (RDMIG_BUILD/<rel>). */
const char *tu_build_path(const char *rel, char *buf, size_t len);
/* Path of a file of the source tree the tests were built from
 * (RDMIG_SRCDIR/<rel>; the environment's RDMIG_SRCDIR overrides it). */
const char *tu_src_path(const char *rel, char *buf, size_t len);
/* The address of the Soft-RoCE device set up by tools/softroce. */
const char *tu_addr(void);

/* In a child of fork(), before exec: it gets SIGKILL when the test that
 * started it ends, failed or not (Check runs each test in a process of
 * its own), so that a failed test leaves no migrate-recv holding the bed's
 * RDMA device or its files for the tests after it.  @parent is the
 * forking process's pid, read before fork().  Only the direct child: a
 * fork clears the signal (a wrapper shell should exec its command), and so
 * does a change of uid (setpriv --pdeathsig=keep sets it again). */
void tu_die_with_parent(pid_t parent);
/* In a child of fork(), before exec: stdin from /dev/null, stdout to @out
 * and stderr to @err (to @out as well when NULL), emptied first; the child
 * exits 126 when one cannot be opened. */
void tu_child_stdio(const char *out, const char *err);
int tu_spawn(struct tu_proc *p, const char *out_path, char *const argv[]);
/* Waits up to @timeout_ms; on expiry kills the process group and returns -1. */
int tu_wait(struct tu_proc *p, int timeout_ms);
/* Whether @p has exited (reaped now if it just did), without waiting. */
int tu_reap(struct tu_proc *p);
/* The state letter of process @pid from /proc/PID/stat ('?' when it cannot
 * be read); its parent's pid in *@ppid when not NULL (0 when unknown). */
char tu_proc_state(pid_t pid, pid_t *ppid);
/* The kernel function process @pid sleeps in ("" when unknown). */
void tu_proc_wchan(pid_t pid, char *buf, size_t len);
/* Exit code of a reaped process, or 128+signal. */
int tu_exit_code(const struct tu_proc *p);
void tu_kill(struct tu_proc *p, int sig);

/* Waits until a line starting with @prefix appears in @path; copies the rest
 * of that line to @rest.  Returns 0, or -1 on timeout. */
int tu_wait_line(const char *path, const char *prefix, char *rest, size_t len,
		 int timeout_ms);
/* Reads a whole file (NUL-terminated, malloc'd), or NULL. */
char *tu_slurp(const char *path, size_t *len);
/* The rest of the line after the first @key in @path, into @out ("" when
 * absent): the figures a program printed. */
void tu_field(const char *path, const char *key, char *out, size_t len);
/* Prints a process's captured output to stderr, prefixed, for diagnosis. */
void tu_dump(const char *label, const char *path);

uint64_t tu_now_ms(void);

/* Whether @path exists (a link counts as itself). */
int tu_exists(const char *path);
/* Whether the files at @a and @b hold the same bytes. */
int tu_same_file(const char *a, const char *b);
/* A shared key file (32 bytes, mode 0600) for --auth-key, created anew. */
void tu_write_key(const char *path);

/* Deterministic data from a seed, shared by writers and verifiers. */
void tu_fill_random(void *buf, size_t len, uint64_t seed);

#endif
