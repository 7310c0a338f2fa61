/* dst_data: what fills the destination's blocks once they are mapped, and
 * how the migration ends: zero ranges (worked off a slice at a time),
 * PAGES, rounds, COMPLETE with its digests and the commit; the state
 * stream's messages go on to dst_state. */
#ifndef RDMIG_DST_DATA_H
#define RDMIG_DST_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "codec.h"

struct rdmig_dest;
struct regq_job;

/* DST_RUNNING: ZERO_RANGES, PAGES, ITER_END, PROGRESS, STATE,
 * STATE_WRITTEN, COMPLETE.
 * A ZERO_RANGES is only checked here and becomes the job in hand
 * (d->job): its message must live until dst_data_zero_step() is done with
 * it. */
int dst_data_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m);
/* Works on the ZERO_RANGES in hand in slices that fit until @until_us at
 * the learned price (one slice at least): DST_JOB_DONE once none is left,
 * DST_JOB_CUT while it goes on. */
int dst_data_zero_step(struct rdmig_dest *d, int64_t until_us);
/* Copies the PAGES in hand from its next run on: DST_JOB_DONE once all
 * are copied, DST_JOB_WAITING while a helper makes a run's memory
 * present (dst_data_fault_done() tells when). */
int dst_data_pages_step(struct rdmig_dest *d);
/* A helper made a run's memory present (or could not). */
int dst_data_fault_done(struct rdmig_dest *d, const struct regq_job *j);
/* The statistics of what landed, from what the source said (ITER_END,
 * PROGRESS) and the zero ranges that came. */
void dst_data_count(struct rdmig_dest *d);
/* DST_VERIFYING: hashes until rd_now_us() passes @until_us, then commits
 * and posts COMPLETE_ACK once the image checked out. */
int dst_data_verify_step(struct rdmig_dest *d, int64_t until_us);
/* Whether dst_data_verify_step has work it can do now. */
bool dst_data_verify_ready(const struct rdmig_dest *d);
void dst_data_destroy(struct rdmig_dest *d);

#endif
