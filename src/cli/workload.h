/* The workload migrate-send moves while it keeps running: a process writing
 * its RAM files (--live --pid), or a QEMU guest driven over QMP (--qmp).
 *
 * Pre-copy rounds freeze it briefly with SIGSTOP around reading and clearing
 * what it wrote, which soft-dirty bits cannot do at once (dirty.h).
 * A QEMU guest is stopped for good by QEMU itself, inside its own migration
 * (pause-before-switchover, vmstate.h): SIGSTOP would freeze its monitor
 * too, and a QMP `stop` round trip would sit in the downtime.  After any
 * failure the workload runs again as it did before the migration began (a
 * guest that was paused stays paused): nothing is lost.
 *
 * Functions return 0 or a negative errno with one line in @err (which may
 * be NULL); none prints or exits. */
#ifndef RDMIG_CLI_WORKLOAD_H
#define RDMIG_CLI_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clierr.h"
#include "dirty.h"
#include "proc.h"

struct qmp;
struct workload;

/* Called while waiting for the workload (to keep the peer from timing
 * out): 0 to go on, or a negative errno to give up with. */
typedef int (*wl_idle_fn)(void *ctx);
/* Receives each run of dirty pages of file @file (index into wl_open_*'s
 * @paths); a negative return stops the walk and is returned. */
typedef int (*wl_mark_fn)(void *ctx, unsigned file, uint64_t off, uint64_t len);

/* The kinds of workload, one file each (workload_int.h says how to add
 * one).  Each tracks @proc's writes to each of @paths (@lens bytes each)
 * the way @track asks (dirty.h; NULL: the best there is); signals go to
 * that process only (proc.h).  A plain process: */
int wl_open_process(struct workload **out, const struct proc_ref *proc,
		    const char *const *paths, const uint64_t *lens, unsigned n,
		    const struct dirty_opts *track, int timeout_ms, struct cli_err *err);
/* A QEMU guest, @q its QMP connection (borrowed): */
int wl_open_qemu(struct workload **out, const struct proc_ref *proc, struct qmp *q,
		 const char *const *paths, const uint64_t *lens, unsigned n,
		 const struct dirty_opts *track, int timeout_ms, struct cli_err *err);
void wl_close(struct workload *w);

/* Freezes every thread (SIGSTOP) and waits until all are stopped. */
int wl_freeze(struct workload *w, wl_idle_fn idle, void *ctx, struct cli_err *err);
/* Lets a frozen workload run again. */
void wl_thaw(struct workload *w);
/* Clears the dirty bits (frozen: nothing may write between the collect
 * before and this). */
int wl_clear_dirty(struct workload *w, struct cli_err *err);
/* Reports what was written since the last clear, adding its bytes to
 * *@bytes.  Does not clear. */
int wl_collect_dirty(struct workload *w, wl_mark_fn mark, void *ctx, uint64_t *bytes,
		     struct cli_err *err);

/* How its writes are tracked, for the setup event: the method, why not a
 * better one ("" if none is), and the threads a collect runs on. */
void wl_tracking(const struct workload *w, const char **method, const char **why_not,
		 unsigned *threads);

/* At convergence, frozen with the last pages collected: how the workload
 * stops.  A process stays frozen (*@now true, *@stop_ms when it was
 * frozen): the last round holds what was collected.  A guest's bits are
 * cleared and it runs on (*@now false): its QEMU stops it by itself during
 * its own migration (devstate.h), and what it wrote meanwhile is collected
 * then. */
int wl_begin_stop(struct workload *w, bool *now, uint64_t *stop_ms, struct cli_err *err);
/* "guest" or "process": what the reports call it. */
const char *wl_kind(const struct workload *w);
/* The "failed" event's key for whether it runs again: "guest-running" or
 * "workload-running". */
const char *wl_running_key(const struct workload *w);
/* After success, for the summary: where it is left ("the guest stays
 * paused here: it now runs on the destination"). */
void wl_left(const struct workload *w, char *buf, size_t len);
/* After a failure it was resumed: "the guest runs on the source again". */
const char *wl_runs_again(const struct workload *w);
/* After a failure: the throttle released, the workload runs again as
 * before the migration (SIGCONT; a guest that was running gets QMP cont if it is not running,
 * whoever paused it).  QEMU refuses while its own migration runs: the
 * device state's end cancels that first.  An error says why it does not
 * run (it exited, QEMU refused), or that a guest paused before stays so. */
int wl_resume(struct workload *w, struct cli_err *err);

/* Auto-converge (throttle.h): from now on the workload may be throttled,
 * a guest's vCPU threads (their ids from QEMU, checked to be its threads)
 * or every thread of a process; a host where that cannot be done says so
 * here, before anything moves.  Its freezes and its stop are told to the
 * throttle's keeper, which resumes a workload left frozen by a migrate-send
 * killed with SIGKILL. */
int wl_throttle_open(struct workload *w, struct cli_err *err);
/* The throttle at @pct percent from now on (0: released). */
int wl_throttle(struct workload *w, unsigned pct, struct cli_err *err);
/* QEMU stopped the guest for its switch-over: the throttle steps aside
 * (throttle_aside()). */
void wl_throttle_aside(struct workload *w);
/* The throttle in force (percent) and the time spent throttled (ms). */
void wl_throttle_state(const struct workload *w, unsigned *pct, uint64_t *ms);
/* The mechanism ("cgroup"; "none" without wl_throttle_open) and where. */
const char *wl_throttle_method(const struct workload *w, const char **where);

/* A migration that waited (--defer) begins: the workload's state is read
 * again, as wl_open_* read it, since its manager may have changed it. */
int wl_recheck(struct workload *w, struct cli_err *err);

/* After a migration that never began: whether the workload, which we never
 * touched, runs; @msg says how it is. */
bool wl_untouched(struct workload *w, char *msg, size_t len);

#endif
