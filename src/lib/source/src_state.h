/* src_state: the device-state stream, in order, from connected until
 * completion begins.  In STATE messages until the destination offers its
 * ring (STATE_RING), then by RDMA WRITE into the ring from a registered
 * copy here, each write announced in STATE_WRITTEN on the same queue pair
 * and its space given back in STATE_TAKEN. */
#ifndef RDMIG_SRC_STATE_H
#define RDMIG_SRC_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

#include "codec.h"
#include "regq.h"

struct rdmig_source;

/* One WRITE into the ring at most, and WRITEs in flight at most (the
 * queue pair's send queue has room for them beside the pages'). */
#define SRC_STATE_WRITE_MAX (512u << 10)
/* ... and at least, when the ring has room: what one call takes is sized
 * to half a step at the learned cost of a write, never below this. */
#define SRC_STATE_WRITE_MIN (16u << 10)
#define SRC_STATE_WRITES 8
/* Our copy of the ring, at most: a destination may offer a larger one,
 * of which we use this much. */
#define SRC_STATE_RING_MAX (4u << 20)

/* Takes what it can of @data now: the bytes taken (0: no room, come back
 * after a step) or a negative errno. */
ssize_t src_state_write(struct rdmig_source *s, const void *data, size_t len);
/* Whether src_state_write() would take bytes now. */
bool src_state_room(const struct rdmig_source *s);
/* STATE_RING or STATE_TAKEN from the destination. */
int src_state_msg(struct rdmig_source *s, const struct ctrl_hdr *h,
		  const ProtobufCMessage *m);
/* A ring WRITE's completion (tag SRC_TAG_STATE). */
int src_state_write_done(struct rdmig_source *s, const struct ibv_wc *wc);
/* The helper is done with our copy of the ring (cookie REG_STATE). */
int src_state_reg_done(struct rdmig_source *s, const struct regq_job *j);
/* Hands our copy of the ring to the helper once the destination offered
 * one (again when the helper's queue was full). */
int src_state_step(struct rdmig_source *s);
/* Maps our copy of the ring at the handle's creation: mapping waits for
 * the address-space lock, which pinning on other threads holds, so no
 * step does it. */
int src_state_init(struct rdmig_source *s);
void src_state_destroy(struct rdmig_source *s);

#endif
