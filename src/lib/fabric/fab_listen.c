/* fabric, the listener side: listening ids, incoming connection requests
 * and the events of connections that stay on a listener's channel. */
#include "fabric.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fab_cm.h"

static int listen_on(struct fab_listener **out, const struct sockaddr *sa,
		     const char *host, const char *port, struct rd_err *err)
{
	struct fab_listener *l;
	int rc;

	l = calloc(1, sizeof(*l));
	if (!l)
		return rd_err_set(err, -ENOMEM, "out of memory");
	rc = fab_new_channel(&l->ech, err);
	if (rc)
		goto out_free;
	if (rdma_create_id(l->ech, &l->id, l, RDMA_PS_TCP)) {
		rc = rd_err_set(err, -errno, "rdma_create_id failed: %s", strerror(errno));
		goto out_destroy_channel;
	}
	if (rdma_bind_addr(l->id, (struct sockaddr *)sa)) {
		rc = -errno;
		rd_err_set(err, rc, "cannot listen on %s:%s: rdma_bind_addr failed: %s%s",
			   host, port, strerror(-rc),
			   rc == -EADDRNOTAVAIL || rc == -ENODEV ?
			   " (no RDMA device has this address)" : "");
		goto out_destroy_id;
	}
	if (rdma_listen(l->id, 16)) {
		rc = rd_err_set(err, -errno, "cannot listen on %s:%s: rdma_listen failed: %s",
				host, port, strerror(errno));
		goto out_destroy_id;
	}
	*out = l;
	return 0;

out_destroy_id:
	rdma_destroy_id(l->id);
out_destroy_channel:
	rdma_destroy_event_channel(l->ech);
out_free:
	free(l);
	return rc;
}

int fab_listen(struct fab_listener **out, const char *host, const char *port,
	       struct rd_err *err)
{
	struct sockaddr_storage ss;
	int rc;

	rc = fab_resolve(host, port, true, &ss, err);
	if (rc)
		return rc;
	return listen_on(out, (struct sockaddr *)&ss, host && *host ? host : "*", port, err);
}

int fab_listen_beside(struct fab_listener **out, const struct fab_conn *c,
		      struct rd_err *err)
{
	struct sockaddr_storage ss;
	const struct sockaddr *local = rdma_get_local_addr(c->id);

	memset(&ss, 0, sizeof(ss));
	if (local->sa_family == AF_INET6) {
		memcpy(&ss, local, sizeof(struct sockaddr_in6));
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	} else {
		memcpy(&ss, local, sizeof(struct sockaddr_in));
		((struct sockaddr_in *)&ss)->sin_port = 0;
	}
	return listen_on(out, (struct sockaddr *)&ss, "the control connection's address",
			 "0", err);
}

int fab_listener_fd(const struct fab_listener *l)
{
	return l->ech->fd;
}

uint16_t fab_listener_port(const struct fab_listener *l)
{
	return l->id ? ntohs(rdma_get_src_port(l->id)) : 0;
}

void fab_listener_stop(struct fab_listener *l)
{
	if (l && l->id) {
		rdma_destroy_id(l->id);
		l->id = NULL;
	}
}

void fab_listener_destroy(struct fab_listener *l)
{
	if (!l)
		return;
	fab_listener_stop(l);
	if (l->ech)
		rdma_destroy_event_channel(l->ech);
	free(l);
}

int fab_get_request(struct fab_listener *l, int64_t deadline,
		    struct fab_conn **out, struct rd_err *err)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct fab_conn *c;
	int rc;

	for (;;) {
		rc = fab_get_event(l->ech, deadline, &ev);
		if (rc == -ETIMEDOUT)
			return rd_err_set(err, rc, "timed out waiting for a connection");
		if (rc == -EAGAIN)
			return rc;
		if (rc)
			return rd_err_set(err, rc, "rdma_get_cm_event failed: %s",
					  strerror(-rc));
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		/* Only requests and device events reach a listening id. */
		rc = ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL ? -ENODEV : 0;
		rdma_ack_cm_event(ev);
		if (rc)
			return rd_err_set(err, rc, "RDMA device removed under the listener");
	}

	c = calloc(1, sizeof(*c));
	if (!c) {
		rdma_reject(ev->id, NULL, 0);
		rdma_ack_cm_event(ev);
		return rd_err_set(err, -ENOMEM, "out of memory");
	}
	fab_conn_set_err(c, err);
	c->peer_priv_len = fab_event_priv(ev, c->peer_priv, sizeof(c->peer_priv));
	c->peer_qpn = ev->param.conn.qp_num;
	id = ev->id;
	rdma_ack_cm_event(ev);

	rc = fab_new_channel(&c->ech, err);
	if (rc)
		goto out_reject;
	/* Each connection gets its own channel so several can be driven from
	 * one event loop and one dying peer cannot stall another's events. */
	if (rdma_migrate_id(id, c->ech)) {
		rc = rd_err_set(err, -errno, "rdma_migrate_id failed: %s", strerror(errno));
		goto out_destroy_channel;
	}
	id->context = c;
	c->id = id;
	c->state = FAB_IDLE;
	*out = c;
	return 0;

out_destroy_channel:
	rdma_destroy_event_channel(c->ech);
out_reject:
	rdma_reject(id, NULL, 0);
	rdma_destroy_id(id);
	free(c);
	return rc;
}

/* A request whose conn stays on the listener's channel.  Acks @ev. */
static int take_request(struct rdma_cm_event *ev, struct fab_conn **out, struct rd_err *err)
{
	struct fab_conn *c = calloc(1, sizeof(*c));
	struct rdma_cm_id *id = ev->id;

	if (c) {
		fab_conn_set_err(c, NULL);
		c->peer_priv_len = fab_event_priv(ev, c->peer_priv, sizeof(c->peer_priv));
		c->peer_qpn = ev->param.conn.qp_num;
	}
	/* Acked before anything else touches the id: destroying an id with an
	 * unacked event waits forever. */
	rdma_ack_cm_event(ev);
	if (!c) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return rd_err_set(err, -ENOMEM, "out of memory");
	}
	c->id = id;
	id->context = c;
	c->state = FAB_IDLE;
	*out = c;
	return 0;
}

int fab_listener_event(struct fab_listener *l, enum fab_lev *kind,
		       struct fab_conn **out, struct rd_err *err)
{
	struct rdma_cm_event *ev;
	struct fab_conn *c;
	int rc;

	*kind = FAB_LEV_NONE;
	rc = fab_get_event(l->ech, 0, &ev);
	if (rc == -EAGAIN)
		return 0;
	if (rc)
		return rd_err_set(err, rc, "rdma_get_cm_event failed: %s", strerror(-rc));
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		rc = take_request(ev, out, err);
		if (!rc)
			*kind = FAB_LEV_REQUEST;
		return rc;
	}
	if (l->id && ev->id == l->id) {
		rc = ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL ? -ENODEV : 0;
		rdma_ack_cm_event(ev);
		return rc ? rd_err_set(err, rc, "RDMA device removed under the listener") : 0;
	}
	c = ev->id->context;
	*out = c;
	switch (ev->event) {
	case RDMA_CM_EVENT_ESTABLISHED:
		c->state = FAB_CONNECTED;
		*kind = FAB_LEV_ESTABLISHED;
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		c->state = FAB_DISCONNECTED;
		rd_err_set(c->err, -ECONNRESET, "peer disconnected");
		*kind = FAB_LEV_CLOSED;
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		c->state = FAB_FAILED;
		rd_err_set(c->err, ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL ? -ENODEV :
			   -ECONNABORTED, "connection failed: %s", rdma_event_str(ev->event));
		*kind = FAB_LEV_CLOSED;
		break;
	default:
		break;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

bool fab_same_peer(const struct fab_conn *a, const struct fab_conn *b)
{
	const struct sockaddr *x = rdma_get_peer_addr(a->id);
	const struct sockaddr *y = rdma_get_peer_addr(b->id);

	if (x->sa_family != y->sa_family)
		return false;
	if (x->sa_family == AF_INET)
		return ((const struct sockaddr_in *)x)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)y)->sin_addr.s_addr;
	if (x->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)x)->sin6_addr,
			       &((const struct sockaddr_in6 *)y)->sin6_addr,
			       sizeof(struct in6_addr));
	return false;
}
