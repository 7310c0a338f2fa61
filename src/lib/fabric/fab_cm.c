/* fab_cm: the rdma_cm helpers under both halves of the fabric's connection
 * code, fabric.c (connect, accept) and fab_listen.c (listeners): resolving
 * an address, a non-blocking event channel, waiting for its next event,
 * keeping a peer's private data.  They know no fab_conn, so the two halves
 * stand on them instead of one calling into the other. */
#include "fab_cm.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <string.h>

int fab_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

int fab_resolve(const char *host, const char *port, bool passive,
		struct sockaddr_storage *ss, struct rd_err *err)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = passive ? AI_PASSIVE : 0 };
	struct addrinfo *res = NULL;
	int rc;

	rc = getaddrinfo(host && *host ? host : NULL, port, &hints, &res);
	if (rc)
		return rd_err_set(err, -EINVAL, "cannot resolve address %s:%s: %s",
				  host ? host : "*", port, gai_strerror(rc));
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

int fab_new_channel(struct rdma_event_channel **out, struct rd_err *err)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	int rc;

	if (!ch) {
		rc = -errno;
		if (rc == -ENODEV || rc == -ENOENT)
			return rd_err_set(err, rc, "rdma_create_event_channel failed: %s "
					  "(is an RDMA device present and rdma_ucm loaded?)",
					  strerror(-rc));
		return rd_err_set(err, rc, "rdma_create_event_channel failed: %s",
				  strerror(-rc));
	}
	rc = fab_set_nonblock(ch->fd);
	if (rc) {
		rdma_destroy_event_channel(ch);
		return rd_err_set(err, rc, "fcntl(O_NONBLOCK) on CM channel failed: %s",
				  strerror(-rc));
	}
	*out = ch;
	return 0;
}

int fab_get_event(struct rdma_event_channel *ch, int64_t deadline,
		  struct rdma_cm_event **ev)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	int rc;

	for (;;) {
		if (!rdma_get_cm_event(ch, ev))
			return 0;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		if (deadline == 0 || rd_expired(deadline))
			return deadline == 0 ? -EAGAIN : -ETIMEDOUT;
		rc = poll(&pfd, 1, rd_remaining_ms(deadline));
		if (rc < 0 && errno != EINTR)
			return -errno;
		if (rc == 0)
			return -ETIMEDOUT;
	}
}

size_t fab_event_priv(const struct rdma_cm_event *ev, void *buf, size_t cap)
{
	size_t len = ev->param.conn.private_data_len;

	if (!ev->param.conn.private_data || !len)
		return 0;
	if (len > cap)
		len = cap;
	memcpy(buf, ev->param.conn.private_data, len);
	return len;
}
