/* The workload migrate-send moves while it keeps running: a process writing
 * its RAM files (--live --pid), or a QEMU guest driven over QMP (--qmp).
 *
 * Pre-copy rounds freeze it briefly with SIGSTOP around reading and clearing
 * the soft-dirty bits, which cannot be read and cleared at once (dirty.h).
 * The final stop of a QEMU guest is QMP `stop` instead: SIGSTOP would freeze
 * its monitor too, and the device state must still be asked of it.  After
 * any failure the workload runs again as it did before the migration began
 * (a guest that was paused stays paused): nothing is lost.
 *
 * Functions return 0 or a negative errno with one line in @err (which may
 * be NULL); none prints or exits. */
#ifndef RDMIG_CLI_WORKLOAD_H
#define RDMIG_CLI_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proc.h"

struct qmp;
struct workload;

/* Called while waiting for the workload (to keep the peer from timing
 * out): 0 to go on, or a negative errno to give up with. */
typedef int (*wl_idle_fn)(void *ctx);
/* Receives each run of dirty pages of file @file (index into wl_open's
 * @paths); a negative return stops the walk and is returned. */
typedef int (*wl_mark_fn)(void *ctx, unsigned file, uint64_t off, uint64_t len);

/* Tracks @proc's writes to each of @paths (@lens bytes each); signals go to
 * that process only (proc.h).  @q: the guest's QMP connection, borrowed
 * (NULL for a plain process). */
int wl_open(struct workload **out, const struct proc_ref *proc, struct qmp *q,
	    const char *const *paths, const uint64_t *lens, unsigned n, int timeout_ms,
	    char *err, size_t errlen);
void wl_close(struct workload *w);

/* Freezes every thread (SIGSTOP) and waits until all are stopped. */
int wl_freeze(struct workload *w, wl_idle_fn idle, void *ctx, char *err, size_t errlen);
/* Lets a frozen workload run again. */
void wl_thaw(struct workload *w);
/* Clears the dirty bits (frozen: nothing may write between the collect
 * before and this). */
int wl_clear_dirty(struct workload *w, char *err, size_t errlen);
/* Reports what was written since the last clear, adding its bytes to
 * *@bytes.  Does not clear. */
int wl_collect_dirty(struct workload *w, wl_mark_fn mark, void *ctx, uint64_t *bytes,
		     char *err, size_t errlen);

/* The final stop before the last round; it stays stopped if the migration
 * succeeds.  A frozen process simply stays frozen.  A guest is thawed and
 * paused with QMP `stop` (a no-op if it was paused before the migration):
 * pages it wrote between the freeze and the stop still carry their dirty
 * bits, so collect again afterwards. */
int wl_stop(struct workload *w, char *err, size_t errlen);
/* Whether wl_stop paused a running guest (or froze the process). */
bool wl_stopped(const struct workload *w);
/* A guest: whether it was running when the migration started. */
bool wl_was_running(const struct workload *w);
/* After a failure: the workload runs again (SIGCONT; QMP cont for a guest
 * that was running).  Returns an error when QEMU refuses, as it does while
 * its own migration runs: vms_close() cancels that first. */
int wl_resume(struct workload *w, char *err, size_t errlen);

#endif
