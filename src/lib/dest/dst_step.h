/* dst_step: the destination's driver.  One step takes finished
 * registrations, completions and the messages in them, connection events,
 * then the work the state asks for, within a bounded step (rdmig(3),
 * "Bounded steps").  Failing and pausing a post-copy are its alone; dest.c,
 * the API, only accepts and asks for steps. */
#ifndef RDMIG_DST_STEP_H
#define RDMIG_DST_STEP_H

struct rdmig_dest;

/* One step of a destination past DST_NEW and not ended, then its outcome:
 * 1 once the migration is complete and the source knows it, 0, or the
 * failure (d->result, the message in ss.err). */
int dst_step_report(struct rdmig_dest *d);
/* How long the caller may wait for the fd: -1 before an accept and after
 * the end; 0 when the next step must come at once. */
int dst_step_wait_ms(const struct rdmig_dest *d);
/* The accepted connection's fds, into the handle's set. */
int dst_watch(struct rdmig_dest *d);
/* The migration fails with @rc (ss.err says why): the peer is told, the
 * helpers and the post-copy engine stop, the connections go.  Returns
 * d->result; a second call changes nothing. */
int dst_fail(struct rdmig_dest *d, int rc);

#endif
