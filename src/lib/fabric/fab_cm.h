/* fab_cm: rdma_cm helpers shared by fabric.c and fab_listen.c (fab_cm.c
 * says why they stand apart).  Only fab*.c include this header: nothing
 * outside the fabric may rely on them; fabric.h stays its public face. */
#ifndef RDMIG_FAB_CM_H
#define RDMIG_FAB_CM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <rdma/rdma_cma.h>

#include "util.h"

int fab_set_nonblock(int fd);
int fab_resolve(const char *host, const char *port, bool passive,
		struct sockaddr_storage *ss, struct rd_err *err);
/* A CM event channel, non-blocking, with a hint when no RDMA device is there. */
int fab_new_channel(struct rdma_event_channel **out, struct rd_err *err);
/* Gets the next CM event, waiting until @deadline.  0 as deadline means "do
 * not wait". */
int fab_get_event(struct rdma_event_channel *ch, int64_t deadline,
		  struct rdma_cm_event **ev);
/* Copies the private data of a connection event @ev into @buf, truncated
 * to @cap bytes; returns the bytes kept (0 when the peer sent none). */
size_t fab_event_priv(const struct rdma_cm_event *ev, void *buf, size_t cap);

#endif
