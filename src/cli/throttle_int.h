/* The mechanisms behind throttle.h, one ops table (and file) each.
 *
 * probe runs in migrate-send before the keeper exists: it finds out
 * whether the mechanism can slow the target down on this host, changing
 * nothing, and keeps in its state what apply needs (descriptors it opens
 * are listed by fds, so the keeper keeps them).  apply and release run in
 * the keeper only: it alone changes anything, so that it alone can undo
 * it.  Errors are one line in @err, as everywhere in src/cli. */
#ifndef RDMIG_CLI_THROTTLE_INT_H
#define RDMIG_CLI_THROTTLE_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "clierr.h"
#include "throttle_target.h"

struct thr_ops {
	const char *name;
	size_t size;            /* of its state, zeroed before probe */
	int (*probe)(void *st, const struct thr_target *t, struct cli_err *err);
	/* The throttle at @pct percent from now on (1..99). */
	int (*apply)(void *st, unsigned pct, struct cli_err *err);
	/* The workload is frozen by us (SIGSTOP) and the throttle steps aside
	 * (@paused), or it runs again and the throttle applies as before: a
	 * thread held by a throttle would take up to a period to stop. */
	int (*pause)(void *st, bool paused, struct cli_err *err);
	/* Everything as it was before the first apply; fine when nothing was
	 * applied. */
	int (*release)(void *st, struct cli_err *err);
	/* Where it works, for the reports. */
	const char *(*where)(const void *st);
	/* The descriptors it holds, into @fds (at most @max): the keeper
	 * closes every other one it inherited. */
	unsigned (*fds)(const void *st, int *fds, unsigned max);
	/* Closes what probe opened. */
	void (*fini)(void *st);
};

extern const struct thr_ops thr_cgroup_ops;

#endif
