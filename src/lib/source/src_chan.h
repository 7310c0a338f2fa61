/* src_chan: the source's channels beyond the control connection, driven
 * to connected in non-blocking steps.  Below both src_link, which opens
 * them from the block map (SRC_CHANNELS), and src_pc, which opens
 * post-copy's again when a paused post-copy resumes: each calls down into
 * this, neither into the other. */
#ifndef RDMIG_SRC_CHAN_H
#define RDMIG_SRC_CHAN_H

#include <stdint.h>

struct rdmig_source;

/* What the steps that bring the link up return (src_link.h): here because
 * the channels' step, which both src_link and src_pc call, returns them. */
enum { SRC_LINK_UP = 1, SRC_LINK_AGAIN = 2 };

/* The CM events of the channels not yet up: SRC_LINK_UP once every one
 * (data and post-copy) is, SRC_LINK_AGAIN when the next piece of
 * connection setup can go at once, else 0 or a negative errno. */
int src_chan_step(struct rdmig_source *s);
/* POSTCOPY_RESUMED with pages left: opens the post-copy channels again, to
 * @port with @token; src_chan_step() drives them. */
int src_chan_reopen_pc(struct rdmig_source *s, uint32_t port, uint64_t token);

#endif
