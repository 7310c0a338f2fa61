/* Creating a userfaultfd inside another process.
 *
 * A userfaultfd belongs to the mm of the process that created it:
 * userfaultfd(2) and /dev/userfaultfd take no pid, and a process cannot
 * register another's ranges with its own.  But once one exists, its ioctls
 * act on its own mm whoever calls them (UFFDIO_API, UFFDIO_REGISTER and
 * PAGEMAP_SCAN's write-protect all work on the descriptor's mm), so it only
 * has to be *created* over there: this makes the tracked process itself run
 * userfaultfd(2) once, takes the new descriptor with pidfd_getfd(2), and
 * makes the process close its own copy again.  That is the technique of
 * debuggers and of CRIU's parasite code, reduced to two system calls:
 *
 *  - ptrace(PTRACE_SEIZE) and PTRACE_INTERRUPT stop one thread of the
 *    process (the others run on);
 *  - its registers are saved, pointed at a `syscall' instruction (the one
 *    the thread is stopped after, if it was inside a system call, else one
 *    in its vDSO), PTRACE_SINGLESTEP runs exactly that instruction, the
 *    result is read, and the registers are put back; orig_rax is -1 while
 *    ours runs, so the kernel's restart of an interrupted system call
 *    applies to the thread's own call only, after we are gone;
 *  - a signal that arrives meanwhile is held and delivered at PTRACE_DETACH.
 *
 * What it needs: x86-64 (the register layout), ptrace access to the process
 * (root, or its owner where Yama allows it) and no other tracer.  A process
 * under a seccomp filter is refused unless @under_seccomp: a filter that
 * kills on userfaultfd(2) would kill it (QEMU's -sandbox allows it; other
 * filters may not).  If this process dies in the few microseconds between
 * pointing the registers elsewhere and putting them back, the thread resumes
 * at the wrong place: the window is two single steps long.
 *
 * Returns 0 with our descriptor in *@fd, or a negative errno with one line in
 * @err naming the cause and the fix; prints nothing. */
#ifndef RDMIG_CLI_INJECT_H
#define RDMIG_CLI_INJECT_H

#include <stdbool.h>
#include <stddef.h>

#include "clierr.h"
#include "proc.h"

int inject_userfaultfd(const struct proc_ref *p, int uffd_flags, bool under_seccomp, int *fd,
		       struct cli_err *err);

#endif
