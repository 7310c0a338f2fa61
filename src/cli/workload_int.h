/* workload_int: what a workload is made of, shared by the face
 * (workload.c) and the kinds of workload, one file each:
 *   workload_proc  a process writing its RAM files (--live --pid)
 *   workload_qemu  a QEMU guest, driven over QMP (--qmp)
 * A kind is a static const struct workload_ops and a constructor declared
 * in workload.h; the face keeps what every kind shares (write tracking,
 * SIGSTOP freezes, the throttle, whether the process still exists) and
 * asks the kind's table where they differ, so a new kind is one new file.
 *
 * A kind's object starts with a struct workload named w (wl_close frees
 * it as one),
 and gets back from it with wl_kind_of().  Types and the face's helpers for the kinds only;
 * nothing outside the workloads includes it. */
#ifndef RDMIG_CLI_WORKLOAD_INT_H
#define RDMIG_CLI_WORKLOAD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clierr.h"
#include "dirty.h"
#include "proc.h"

struct workload;
struct throttle;

/* The kind's object of type @type around @wl (its member w). */
#define wl_kind_of(wl, type) ((type *)(void *)((char *)(wl) - offsetof(type, w)))

struct workload_ops {
	const char *kind;         /* "guest": what the reports call it */
	const char *name;         /* "QEMU": what its pid is named with */
	const char *running_key;  /* the "failed" event's key: "guest-running" */
	const char *runs_again;   /* after a failure: "the guest runs on the source again" */
	/* When opened and again when a deferred migration begins (the
	 * process still exists): whether it can be migrated now.  NULL: it
	 * can. */
	int (*check)(struct workload *w, struct cli_err *err);
	/* wl_begin_stop, frozen with the last pages collected: *@now true
	 * when it stays frozen for the last round. */
	int (*begin_stop)(struct workload *w, bool *now, struct cli_err *err);
	/* wl_left. */
	void (*left)(const struct workload *w, char *buf, size_t len);
	/* wl_untouched, once the process is known to exist. */
	bool (*untouched)(struct workload *w, char *msg, size_t len);
	/* wl_resume, thawed and unthrottled.  NULL: it runs. */
	int (*resume)(struct workload *w, struct cli_err *err);
	/* What the throttle slows down: *@tids (calloc'ed, freed by the
	 * caller; NULL with *@n 0: every thread) and @what for its messages. */
	int (*throttle_target)(struct workload *w, pid_t **tids, unsigned *n, char *what,
			       size_t whatlen, struct cli_err *err);
};

/* What every workload has. */
struct workload {
	const struct workload_ops *ops;
	pid_t pid;
	struct proc_ref proc;    /* signals and /proc reach this process only */
	struct dirty_set *ds;    /* the RAM files' written pages */
	int timeout_ms;
	bool frozen;             /* SIGSTOPped by us */
	uint64_t frozen_ms;      /* ... since */
	struct throttle *thr;    /* auto-converge, once opened */
};

/* A zeroed object of @size bytes (a kind's, starting with its struct
 * workload) for @ops, or NULL. */
struct workload *wl_alloc(size_t size, const struct workload_ops *ops);
/* Opens @w (from wl_alloc, the kind's own fields set; NULL: out of
 * memory) with wl_open_*'s arguments: the process held, the kind's check,
 * the tracking.  On failure @w is closed; *@out is set on success only. */
int wl_init(struct workload **out, struct workload *w, const struct proc_ref *proc,
	    const char *const *paths, const uint64_t *lens, unsigned n,
	    const struct dirty_opts *track, int timeout_ms, struct cli_err *err);

#endif
