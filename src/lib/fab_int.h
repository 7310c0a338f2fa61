/* fab_int: what the three files of the fabric module share.
 *
 * fabric.c (resolution, CM channels, resources, accept and connect, CM
 * events, teardown), fab_listen.c (listeners and incoming requests) and
 * fab_io.c (memory registration, posting, completions) are one module split
 * by concern; fabric.h stays its only public face.  Only fab*.c include this
 * header: nothing outside the module may rely on these helpers. */
#ifndef RDMIG_FAB_INT_H
#define RDMIG_FAB_INT_H

#include "fabric.h"

int fab_set_nonblock(int fd);
int fab_resolve(const char *host, const char *port, bool passive,
		struct sockaddr_storage *ss, struct rd_err *err);
/* A CM event channel, non-blocking, with a hint when no RDMA device is there. */
int fab_new_channel(struct rdma_event_channel **out, struct rd_err *err);
/* Gets the next CM event, waiting until @deadline.  0 as deadline means "do
 * not wait". */
int fab_get_event(struct rdma_event_channel *ch, int64_t deadline,
		  struct rdma_cm_event **ev);
/* Keeps the peer's private data (truncated to what fab_conn holds). */
void fab_save_priv(struct fab_conn *c, const void *data, size_t len);

#endif
