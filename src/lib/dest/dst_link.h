/* dst_link: how a destination gets a connection it can serve: listeners,
 * taking a request, negotiating and accepting it (or turning it away with
 * a reason the source reports), and authentication. */
#ifndef RDMIG_DST_LINK_H
#define RDMIG_DST_LINK_H

#include <stdint.h>

#include "codec.h"

struct rdmig_dest;
struct rdmig_listener;

/* rdmig_dest_accept() once the handle is known to be new.  A failure
 * after the request became this handle's connection (d->ss.conn set) is
 * the migration's: the caller fails it. */
int dst_link_accept(struct rdmig_dest *d, struct rdmig_listener *l, int timeout_ms);
/* The state right after the accept: the first frame may arrive now. */
void dst_link_begin(struct rdmig_dest *d, uint32_t caps);
/* DST_PC_PAUSED: takes one pending request from the kept listener, if
 * any.  A RESUME with this migration's token from a connection that can
 * reach the memory is accepted: 1, DST_PC_RESUMING, the new connection
 * d->ss.conn.  Anything else is turned away with its reason logged: 0,
 * the pause goes on.  A negative errno only when the listener failed. */
int dst_link_resume(struct rdmig_dest *d);
int dst_link_listener_fd(const struct rdmig_listener *l);
/* DST_AUTH: AUTH_CHALLENGE and AUTH_RESPONSE (and DST_PC_RESUMING's). */
int dst_link_auth(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m);

#endif
