/* src_step: the source's driver.  One step handles what is pending
 * (completions and the destination's messages in them, connection events,
 * finished registrations), then advances the state the source is in,
 * within a bounded step (rdmig(3), "Bounded steps").  Failing and pausing
 * a post-copy are its alone; source.c, the API, only starts operations
 * and asks for steps. */
#ifndef RDMIG_SRC_STEP_H
#define RDMIG_SRC_STEP_H

#include <stdint.h>

struct rdmig_source;

/* A step of at most @max_bytes and @max_us, then the statistics and the
 * progress callback; the goal is latched GOAL_REACHED once the operation
 * the caller started is done.  0, or s->result once failed. */
int src_step_report(struct rdmig_source *s, uint64_t max_bytes, unsigned max_us);
/* How long the library can wait for its fd (-1: it has nothing to wait
 * for); the latch of a finished operation is not looked at. */
int src_step_wait_ms(const struct rdmig_source *s);
/* The migration fails with @rc (ss.err says why): the peer is told, the
 * threads stop, the connections go.  Returns s->result; a second call
 * changes nothing. */
int src_fail(struct rdmig_source *s, int rc);

#endif
