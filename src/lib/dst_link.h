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
/* DST_AUTH: AUTH_CHALLENGE and AUTH_RESPONSE. */
int dst_link_auth(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m);

#endif
