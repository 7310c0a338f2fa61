/* What a throttle slows down: the one type that both throttle.h (its
 * callers name the target) and throttle_int.h (each mechanism probes it)
 * need.  Apart from throttle.h so that the mechanisms' header does not
 * include the face of the module that drives them. */
#ifndef RDMIG_CLI_THROTTLE_TARGET_H
#define RDMIG_CLI_THROTTLE_TARGET_H

#include <sys/types.h>

struct proc_ref;

/* What to slow down: threads @tids of @proc (vCPU threads), or, when
 * @ntids is 0, every thread it has when the throttle is first applied. */
struct thr_target {
	const struct proc_ref *proc;
	const pid_t *tids;
	unsigned ntids;
	const char *what;       /* "QEMU's 2 vCPU threads": for messages */
};

#endif
