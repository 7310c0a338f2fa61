/* src_link: how a source gets to READY, in non-blocking steps.  rdma_cm
 * resolves and connects (SRC_CONNECTING); with AUTH, our challenge and the
 * answer to the destination's (from its ACCEPT) go out and its answer must
 * check out (SRC_AUTH); the block map goes and comes back (SRC_MAP); data
 * channels open in parallel (SRC_CHANNELS).  With pin-all, our pieces are
 * registered one per step from the block map on, while the destination
 * registers its own and sends their keys.
 *
 * The calls that move the link on return 1 once it is complete (every
 * channel up): the driver then makes the source ready for rounds. */
#ifndef RDMIG_SRC_LINK_H
#define RDMIG_SRC_LINK_H

#include <stdint.h>

#include "codec.h"

struct rdmig_source;

/* rdmig_source_connect_async(): records where to and enters
 * SRC_CONNECTING; the first step starts the attempt, so the call itself
 * stays short (a host name's lookup happens in that step). */
int src_link_prepare(struct rdmig_source *s, const char *host, const char *port);
/* SRC_CONNECTING and SRC_CHANNELS: the attempt's first call, then the CM
 * events of the connections. */
int src_link_step(struct rdmig_source *s);
/* AUTH_RESPONSE and BLOCK_MAP_RESP. */
int src_link_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m);
/* pin-all: registers our next piece, one per call. */
int src_pin_step(struct rdmig_source *s);
int src_on_pin_keys(struct rdmig_source *s, const Rdmig__PinKeys *k);
/* Whether pin-all pieces of ours are left to register. */
int src_pin_pending(const struct rdmig_source *s);
/* The CM events of the connections once connected; a disconnect or a
 * failed data channel is an error. */
int src_link_events(struct rdmig_source *s);
/* Disconnects every channel. */
void src_link_disconnect(struct rdmig_source *s);
/* The connections' fds leave the caller's set: a finished source is quiet. */
void src_link_unwatch(struct rdmig_source *s);
void src_link_destroy(struct rdmig_source *s);

#endif
