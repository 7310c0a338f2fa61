/* src_link: how a source gets its link up, in non-blocking steps.  rdma_cm
 * resolves and connects (SRC_CONNECTING); with AUTH, our challenge and the
 * answer to the destination's (from its ACCEPT) go out and its answer must
 * check out (SRC_AUTH); the block map goes and comes back (SRC_MAP); data
 * channels open in parallel (SRC_CHANNELS).  With pin-all, our pieces are
 * registered by the registration helpers (regq.h) from the block map on,
 * in order, while the destination registers its own and sends their keys.
 *
 * The calls that move the link on return SRC_LINK_UP once it is complete
 * (every channel up): the driver then sets the rounds' machinery up
 * (SRC_PREPARING, src_iter_prepare) and the source is READY;
 * SRC_LINK_AGAIN when the next piece of connection setup can go at once. */
#ifndef RDMIG_SRC_LINK_H
#define RDMIG_SRC_LINK_H

#include <stdint.h>

#include "codec.h"
#include "src_chan.h" /* SRC_LINK_UP, SRC_LINK_AGAIN */

struct rdmig_source;
struct regq_job;

/* rdmig_source_connect_async(): records where to and enters
 * SRC_CONNECTING; the first step starts the attempt, so the call itself
 * stays short (a host name's lookup happens in that step). */
int src_link_prepare(struct rdmig_source *s, const char *host, const char *port);
/* SRC_CONNECTING and SRC_CHANNELS: the attempt's first call, then the CM
 * events of the connections. */
int src_link_step(struct rdmig_source *s);
/* AUTH_RESPONSE and BLOCK_MAP_RESP. */
int src_link_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m);
/* pin-all: submits our next pieces to the helper ... */
int src_pin_step(struct rdmig_source *s);
/* ... which finished one (in order). */
int src_pin_done(struct rdmig_source *s, const struct regq_job *j);
/* A control ring the helper registered (REG_CTRL), or failed to. */
int src_link_ctrl_reg_done(struct rdmig_source *s, const struct regq_job *j);
int src_on_pin_keys(struct rdmig_source *s, const Rdmig__PinKeys *k);
/* The CM events of the connections once connected; a disconnect or a
 * failed data channel is an error. */
int src_link_events(struct rdmig_source *s);
/* POSTCOPY_RECOVER, paused: starts a new control connection with a
 * RESUME (the broken link's post-copy channels and control connection
 * destroyed, but the first, whose PD holds every registration and which
 * the new one shares) ... */
int src_link_resume_start(struct rdmig_source *s);
/* ... and drives it: once connected and the grant checked, the
 * authentication or POSTCOPY_RESUME goes (src_pc.resume moves on).
 * SRC_LINK_AGAIN, 0, or a negative errno (a refusal included). */
int src_link_resume_step(struct rdmig_source *s);
/* Disconnects every channel. */
void src_link_disconnect(struct rdmig_source *s);
/* The connections' fds leave the caller's set: a finished source is quiet. */
void src_link_unwatch(struct rdmig_source *s);
void src_link_destroy(struct rdmig_source *s);

#endif
