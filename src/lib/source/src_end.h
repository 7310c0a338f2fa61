/* src_end: completion.  What was marked dirty since the last round goes
 * first, in a final round; pages marked during it (or later) refuse the
 * completion.  With VERIFY the image is hashed a slice per step
 * (SRC_HASHING), then COMPLETE goes with the state byte count, the last
 * round and the digests (SRC_COMPLETING); the destination's COMPLETE_ACK
 * says it holds the whole image (SRC_COMPLETED). */
#ifndef RDMIG_SRC_END_H
#define RDMIG_SRC_END_H

#include <stdint.h>

#include "codec.h"

struct rdmig_source;

/* Completing, with the dirty log taken: a final round (SRC_ITERATING) when
 * pages are marked, or hashing. */
int src_end_begin(struct rdmig_source *s);
/* The final round ended and the log was taken once more: hashing, or
 * -EBUSY when pages were marked meanwhile. */
int src_end_final_done(struct rdmig_source *s);
/* SRC_HASHING: hashes until rd_now_us() passes @until_us, then sends
 * COMPLETE when a credit allows.  1 when it stopped with hashing left,
 * 0 when done or waiting for a credit, or a negative errno. */
int src_end_step(struct rdmig_source *s, int64_t until_us);
/* COMPLETE_ACK. */
int src_end_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m);
void src_end_destroy(struct rdmig_source *s);

#endif
