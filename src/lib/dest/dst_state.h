/* dst_state: the device-state stream on the destination.  Small pieces
 * come in STATE messages; with STATE_RING the source writes the stream
 * into a ring of ours by RDMA WRITE and says so in STATE_WRITTEN, and we
 * give the space back in STATE_TAKEN once the application took the bytes.
 * Either way the state callback sees the bytes in the order written, and
 * rdmig_dest_pause_state() holds them (and the frames behind them) until
 * resumed. */
#ifndef RDMIG_DST_STATE_H
#define RDMIG_DST_STATE_H

#include <stdint.h>

#include "codec.h"
#include "regq.h"

struct rdmig_dest;

/* The ring's size: what the source may have written and we not yet
 * handed over (several of its writes in flight). */
#define DST_STATE_RING RDMIG_STATE_RING_BYTES

/* STATE or STATE_WRITTEN: delivered, or made the job in hand (d->job)
 * when paused or, for the ring, always (its message must live until
 * dst_state_step() is done with it). */
int dst_state_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m);
/* The job in hand: DST_JOB_WAITING while paused, DST_JOB_CUT when
 * rd_now_us() passed @until_us with ring bytes left, DST_JOB_DONE once the
 * callback took everything, or the callback's error. */
int dst_state_step(struct rdmig_dest *d, int64_t until_us);
/* Once the block map is answered: the ring (mapped at create) handed to the
 * registration helper, STATE_RING sent once it is registered (and a
 * credit is free), STATE_TAKEN when the application took ring bytes since
 * the last. */
int dst_state_ring_step(struct rdmig_dest *d);
/* The helper is done with the ring (regq cookie DREG_RING). */
int dst_state_ring_done(struct rdmig_dest *d, const struct regq_job *j);
/* Maps the ring at the handle's creation when a state callback is set:
 * mapping waits for the address-space lock, which the helpers hold while
 * they pin, so no step does it. */
int dst_state_init(struct rdmig_dest *d);
void dst_state_destroy(struct rdmig_dest *d);

#endif
