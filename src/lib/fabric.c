#include "fabric.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* rdma_cm's own resolution timeouts; our deadline bounds them further. */
#define RESOLVE_TIMEOUT_MS 5000

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

const char *fab_event_str(enum rdma_cm_event_type t)
{
	return rdma_event_str(t);
}

static int resolve(const char *host, const char *port, bool passive,
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

static int new_channel(struct rdma_event_channel **out, struct rd_err *err)
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
	rc = set_nonblock(ch->fd);
	if (rc) {
		rdma_destroy_event_channel(ch);
		return rd_err_set(err, rc, "fcntl(O_NONBLOCK) on CM channel failed: %s",
				  strerror(-rc));
	}
	*out = ch;
	return 0;
}

/* Gets the next CM event, waiting until @deadline.  0 as deadline means "do
 * not wait". */
static int get_event(struct rdma_event_channel *ch, int64_t deadline,
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

static int listen_on(struct fab_listener **out, const struct sockaddr *sa,
		     const char *host, const char *port, struct rd_err *err)
{
	struct fab_listener *l;
	int rc;

	l = calloc(1, sizeof(*l));
	if (!l)
		return rd_err_set(err, -ENOMEM, "out of memory");
	rc = new_channel(&l->ech, err);
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

	rc = resolve(host, port, true, &ss, err);
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

static void save_priv(struct fab_conn *c, const void *data, size_t len)
{
	c->peer_priv_len = 0;
	if (!data || !len)
		return;
	if (len > sizeof(c->peer_priv))
		len = sizeof(c->peer_priv);
	memcpy(c->peer_priv, data, len);
	c->peer_priv_len = len;
}

int fab_get_request(struct fab_listener *l, int64_t deadline,
		    struct fab_conn **out, struct rd_err *err)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct fab_conn *c;
	int rc;

	for (;;) {
		rc = get_event(l->ech, deadline, &ev);
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
	save_priv(c, ev->param.conn.private_data, ev->param.conn.private_data_len);
	c->peer_qpn = ev->param.conn.qp_num;
	id = ev->id;
	rdma_ack_cm_event(ev);

	rc = new_channel(&c->ech, err);
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
		save_priv(c, ev->param.conn.private_data, ev->param.conn.private_data_len);
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
	rc = get_event(l->ech, 0, &ev);
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
		rd_err_set(&c->err, -ECONNRESET, "peer disconnected");
		*kind = FAB_LEV_CLOSED;
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		c->state = FAB_FAILED;
		rd_err_set(&c->err, ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL ? -ENODEV :
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

static int create_cq(struct fab_conn *c, const struct fab_caps *caps)
{
	uint32_t depth = caps->cq_depth ? caps->cq_depth : caps->sq_depth + caps->rq_depth;
	int rc;

	c->cch = ibv_create_comp_channel(c->id->verbs);
	if (!c->cch)
		return rd_err_set(&c->err, -errno, "ibv_create_comp_channel failed: %s",
				  strerror(errno));
	rc = set_nonblock(c->cch->fd);
	if (rc)
		return rd_err_set(&c->err, rc, "fcntl(O_NONBLOCK) failed: %s", strerror(-rc));
	c->cq = ibv_create_cq(c->id->verbs, (int)depth, c, c->cch, 0);
	if (!c->cq)
		return rd_err_set(&c->err, -errno, "ibv_create_cq(%u entries) failed: %s",
				  depth, strerror(errno));
	c->cq_owned = true;
	rc = ibv_req_notify_cq(c->cq, 0);
	if (rc)
		return rd_err_set(&c->err, -rc, "ibv_req_notify_cq failed: %s", strerror(rc));
	return 0;
}

static int create_resources(struct fab_conn *c, const struct fab_caps *caps)
{
	struct ibv_qp_init_attr attr;
	struct ibv_context *verbs = c->id->verbs;
	int rc;

	if (caps->pd) {
		c->pd = caps->pd;
	} else {
		c->pd = ibv_alloc_pd(verbs);
		if (!c->pd)
			return rd_err_set(&c->err, -errno, "ibv_alloc_pd failed: %s",
					  strerror(errno));
		c->pd_owned = true;
	}
	if (caps->cq) {
		c->cq = caps->cq;
	} else {
		rc = create_cq(c, caps);
		if (rc)
			return rc;
	}

	memset(&attr, 0, sizeof(attr));
	attr.send_cq = c->cq;
	attr.recv_cq = c->cq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = caps->sq_depth;
	attr.cap.max_recv_wr = caps->rq_depth;
	attr.cap.max_send_sge = caps->max_send_sge ? caps->max_send_sge : 1;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = caps->max_inline;
	if (rdma_create_qp(c->id, c->pd, &attr))
		return rd_err_set(&c->err, -errno,
				  "rdma_create_qp(send %u, recv %u) failed: %s",
				  caps->sq_depth, caps->rq_depth, strerror(errno));
	c->qp_created = true;
	return 0;
}

static void conn_param(struct rdma_conn_param *p, const void *priv, size_t len)
{
	memset(p, 0, sizeof(*p));
	p->private_data = priv;
	p->private_data_len = (uint8_t)len;
	/* We only SEND and WRITE: no RDMA READ resources are needed. */
	p->responder_resources = 0;
	p->initiator_depth = 0;
	p->retry_count = 7;
	/* Credit flow control means receivers are always posted; a finite RNR
	 * retry turns a credit bug into a visible error instead of a stall. */
	p->rnr_retry_count = 6;
}

int fab_accept(struct fab_conn *c, const struct fab_caps *caps,
	       const void *priv, size_t len,
	       int (*pre_accept)(struct fab_conn *c, void *arg), void *arg)
{
	struct rdma_conn_param p;
	int rc;

	if (len > FAB_PRIV_ACCEPT_MAX)
		return rd_err_set(&c->err, -EINVAL, "accept private data too long (%zu)", len);
	rc = create_resources(c, caps);
	if (!rc && pre_accept)
		rc = pre_accept(c, arg);
	if (rc)
		return rc;
	conn_param(&p, priv, len);
	if (rdma_accept(c->id, &p))
		return rd_err_set(&c->err, -errno, "rdma_accept failed: %s", strerror(errno));
	c->state = FAB_ACCEPTING;
	return 0;
}

int fab_reject(struct fab_conn *c, const void *priv, size_t len)
{
	if (len > FAB_PRIV_REJECT_MAX)
		len = FAB_PRIV_REJECT_MAX;
	if (rdma_reject(c->id, priv, (uint8_t)len))
		return rd_err_set(&c->err, -errno, "rdma_reject failed: %s", strerror(errno));
	c->state = FAB_DISCONNECTED;
	return 0;
}

/* IB CM reject reasons (IBTA 12.6.7.2) that rdma_cm reports in the event
 * status; libibverbs does not export strings for them. */
enum {
	IB_CM_REJ_INVALID_SERVICE_ID = 8,
	IB_CM_REJ_STALE_CONN = 10,
	IB_CM_REJ_CONSUMER_DEFINED = 28,
};

static const char *reject_reason(int status)
{
	switch (status) {
	case IB_CM_REJ_INVALID_SERVICE_ID:
		return "nobody is listening on that port";
	case IB_CM_REJ_STALE_CONN:
		return "stale connection";
	case IB_CM_REJ_CONSUMER_DEFINED:
		return "rejected by the peer";
	default:
		return status < 0 ? strerror(-status) : "rejected by the remote CM";
	}
}

/* An event other than the one a connection attempt waits for, or a
 * rejection: the attempt failed, and @c->err says why.  Does not ack. */
static int attempt_failed(struct fab_conn *c, const struct rdma_cm_event *ev,
			  const char *what)
{
	enum rdma_cm_event_type got = ev->event;
	int status = ev->status;

	c->state = FAB_FAILED;
	switch (got) {
	case RDMA_CM_EVENT_REJECTED:
		/* IB CM reason 28 is a consumer reject carrying our private
		 * data; anything else comes from the CM itself. */
		if (status == IB_CM_REJ_CONSUMER_DEFINED)
			save_priv(c, ev->param.conn.private_data, ev->param.conn.private_data_len);
		return rd_err_set(&c->err, -ECONNREFUSED, "connection refused %s: %s", what,
				  reject_reason(status));
	case RDMA_CM_EVENT_ADDR_ERROR:
		return rd_err_set(&c->err, -EHOSTUNREACH,
				  "address resolution failed %s: %s (no RDMA device "
				  "reaches that address?)", what, strerror(-status));
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return rd_err_set(&c->err, -EHOSTUNREACH, "route resolution failed %s: %s",
				  what, strerror(-status));
	case RDMA_CM_EVENT_UNREACHABLE:
		return rd_err_set(&c->err, -EHOSTUNREACH, "peer unreachable %s", what);
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return rd_err_set(&c->err, -ECONNABORTED, "connection error %s (status %d)",
				  what, status);
	case RDMA_CM_EVENT_DISCONNECTED:
		return rd_err_set(&c->err, -ECONNRESET, "peer disconnected %s", what);
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return rd_err_set(&c->err, -ENODEV, "RDMA device removed %s", what);
	default:
		return rd_err_set(&c->err, -EPROTO, "unexpected CM event %s %s",
				  rdma_event_str(got), what);
	}
}

/* Waits for one event of type @want on @c's channel (the passive side's
 * ESTABLISHED); the event is acked here. */
static int wait_event(struct fab_conn *c, enum rdma_cm_event_type want,
		      int64_t deadline, const char *what)
{
	struct rdma_cm_event *ev;
	int rc;

	rc = get_event(c->ech, deadline, &ev);
	if (rc == -ETIMEDOUT)
		return rd_err_set(&c->err, rc, "timed out %s", what);
	if (rc)
		return rd_err_set(&c->err, rc, "rdma_get_cm_event failed %s: %s", what,
				  strerror(-rc));
	rc = ev->event == want ? 0 : attempt_failed(c, ev, what);
	rdma_ack_cm_event(ev);
	return rc;
}

/* What an active connection attempt carries between its steps. */
struct fab_attempt {
	struct fab_caps caps;
	uint8_t priv[FAB_PRIV_CONNECT_MAX];
	size_t priv_len;
	int (*pre_connect)(struct fab_conn *c, void *arg);
	void *arg;
	int64_t deadline;
	char what[160];
};

/* rdma_cm's resolution timeouts, within our deadline. */
static int resolve_tmo(const struct fab_attempt *a)
{
	int tmo = rd_remaining_ms(a->deadline);

	if (tmo < 0 || tmo > RESOLVE_TIMEOUT_MS)
		tmo = RESOLVE_TIMEOUT_MS;
	return tmo ? tmo : 1;
}

static int on_route_resolved(struct fab_conn *c, struct fab_attempt *a)
{
	struct rdma_conn_param p;
	int rc = create_resources(c, &a->caps);

	if (!rc && a->pre_connect)
		rc = a->pre_connect(c, a->arg);
	if (rc)
		return rc;
	conn_param(&p, a->priv, a->priv_len);
	if (rdma_connect(c->id, &p))
		return rd_err_set(&c->err, -errno, "rdma_connect %s failed: %s", a->what,
				  strerror(errno));
	return 0;
}

/* One CM event of an attempt; acks it.  1 once established. */
static int attempt_event(struct fab_conn *c, struct rdma_cm_event *ev)
{
	struct fab_attempt *a = c->attempt;
	int rc = 0;

	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(c->id, resolve_tmo(a)))
			rc = rd_err_set(&c->err, -errno, "rdma_resolve_route %s failed: %s",
					a->what, strerror(errno));
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		rc = on_route_resolved(c, a);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		save_priv(c, ev->param.conn.private_data, ev->param.conn.private_data_len);
		c->peer_qpn = ev->param.conn.qp_num;
		c->state = FAB_CONNECTED;
		rc = 1;
		break;
	default:
		rc = attempt_failed(c, ev, a->what);
		break;
	}
	rdma_ack_cm_event(ev);
	if (rc) {
		free(c->attempt);
		c->attempt = NULL;
	}
	return rc;
}

static int numeric_first(const char *host, const char *port, struct sockaddr_storage *ss,
			 struct rd_err *err)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *res = NULL;

	/* An address needs no lookup, so it cannot block; a name can. */
	if (!getaddrinfo(host, port, &hints, &res)) {
		memcpy(ss, res->ai_addr, res->ai_addrlen);
		freeaddrinfo(res);
		return 0;
	}
	return resolve(host, port, false, ss, err);
}

int fab_connect_start(struct fab_conn **out, const char *host, const char *port,
		      const struct fab_caps *caps, const void *priv, size_t len,
		      int (*pre_connect)(struct fab_conn *c, void *arg), void *arg,
		      int64_t deadline, struct rd_err *err)
{
	struct sockaddr_storage ss;
	struct fab_attempt *a;
	struct fab_conn *c;
	int rc;

	*out = NULL;
	if (len > FAB_PRIV_CONNECT_MAX)
		return rd_err_set(err, -EINVAL, "connect private data too long (%zu)", len);
	rc = numeric_first(host, port, &ss, err);
	if (rc)
		return rc;
	c = calloc(1, sizeof(*c));
	a = calloc(1, sizeof(*a));
	if (!c || !a) {
		free(c);
		free(a);
		return rd_err_set(err, -ENOMEM, "out of memory");
	}
	*out = c;
	c->attempt = a;
	a->caps = *caps;
	memcpy(a->priv, priv, len);
	a->priv_len = len;
	a->pre_connect = pre_connect;
	a->arg = arg;
	a->deadline = deadline;
	snprintf(a->what, sizeof(a->what), "connecting to %s:%s", host, port);
	c->state = FAB_IDLE;
	rc = new_channel(&c->ech, &c->err);
	if (!rc && rdma_create_id(c->ech, &c->id, c, RDMA_PS_TCP))
		rc = rd_err_set(&c->err, -errno, "rdma_create_id failed: %s", strerror(errno));
	if (!rc && rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&ss, resolve_tmo(a)))
		rc = rd_err_set(&c->err, -errno, "rdma_resolve_addr %s failed: %s", a->what,
				strerror(errno));
	if (rc && err)
		memcpy(err->msg, c->err.msg, sizeof(err->msg));
	return rc;
}

int fab_connect_step(struct fab_conn *c)
{
	struct rdma_cm_event *ev;
	int rc;

	if (!c->attempt)
		return c->state == FAB_CONNECTED ? 1 : rd_err_set(&c->err, -EINVAL,
								  "no connection attempt");
	while ((rc = get_event(c->ech, 0, &ev)) == 0) {
		rc = attempt_event(c, ev);
		if (rc)
			return rc;
	}
	if (rc != -EAGAIN)
		return rd_err_set(&c->err, rc, "rdma_get_cm_event failed: %s", strerror(-rc));
	if (rd_expired(c->attempt->deadline))
		return rd_err_set(&c->err, -ETIMEDOUT, "timed out %s", c->attempt->what);
	return 0;
}

int fab_connect(struct fab_conn **out, const char *host, const char *port,
		const struct fab_caps *caps, const void *priv, size_t len,
		int (*pre_connect)(struct fab_conn *c, void *arg), void *arg,
		int64_t deadline, struct rd_err *err)
{
	struct fab_conn *c;
	struct pollfd pfd;
	int rc;

	rc = fab_connect_start(&c, host, port, caps, priv, len, pre_connect, arg, deadline,
			       err);
	if (!rc) {
		pfd = (struct pollfd){ .fd = fab_cm_fd(c), .events = POLLIN };
		while ((rc = fab_connect_step(c)) == 0)
			poll(&pfd, 1, rd_remaining_ms(deadline));
		rc = rc == 1 ? 0 : rc;
		if (rc && err)
			memcpy(err->msg, c->err.msg, sizeof(err->msg));
	}
	/* Until the QP exists nothing of the caller's is on our PD: clean up
	 * here.  From then on the caller owns the connection, failed or not. */
	if (rc && c && !c->qp_created) {
		fab_conn_destroy(c);
		c = NULL;
	}
	if (c)
		*out = c;
	return rc;
}

int fab_wait_established(struct fab_conn *c, int64_t deadline)
{
	int rc;

	if (c->state == FAB_CONNECTED)
		return 0;
	rc = wait_event(c, RDMA_CM_EVENT_ESTABLISHED, deadline,
			"waiting for the connection to be established");
	if (!rc)
		c->state = FAB_CONNECTED;
	return rc;
}

int fab_cm_process(struct fab_conn *c)
{
	struct rdma_cm_event *ev;
	enum rdma_cm_event_type t;
	int rc;

	rc = get_event(c->ech, 0, &ev);
	if (rc == -EAGAIN)
		return 0;
	if (rc)
		return rd_err_set(&c->err, rc, "rdma_get_cm_event failed: %s", strerror(-rc));
	t = ev->event;
	rdma_ack_cm_event(ev);
	switch (t) {
	case RDMA_CM_EVENT_ESTABLISHED:
		c->state = FAB_CONNECTED;
		return 0;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
	case RDMA_CM_EVENT_ADDR_CHANGE:
		return 0;
	case RDMA_CM_EVENT_DISCONNECTED:
		c->state = FAB_DISCONNECTED;
		return rd_err_set(&c->err, -ECONNRESET, "peer disconnected");
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		c->state = FAB_FAILED;
		return rd_err_set(&c->err, -ENODEV, "RDMA device removed");
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		c->state = FAB_FAILED;
		return rd_err_set(&c->err, -ECONNABORTED, "connection failed: %s",
				  rdma_event_str(t));
	default:
		/* Resolution and request events only occur before a connection
		 * exists, where wait_event() consumes them. */
		return 0;
	}
}

int fab_cm_fd(const struct fab_conn *c)
{
	return c->ech->fd;
}

uint32_t fab_local_qpn(const struct fab_conn *c)
{
	return c->id && c->id->qp ? c->id->qp->qp_num : 0;
}

const struct sockaddr *fab_local_addr(const struct fab_conn *c)
{
	return rdma_get_local_addr(c->id);
}

const struct sockaddr *fab_peer_addr(const struct fab_conn *c)
{
	return rdma_get_peer_addr(c->id);
}

int fab_cq_fd(const struct fab_conn *c)
{
	return c->cch->fd;
}

/* What a failed ibv_reg_mr means here, and what to do about it. */
static const char *memlock_hint(int err)
{
	struct rlimit rl;

	if (err == EFAULT)
		return " (the pages could not be pinned: the memory is not backed any "
		       "more, e.g. its file was truncated or its filesystem is full, or "
		       "the kernel refuses long-term pins of this kind of file: put "
		       "it on tmpfs or hugetlbfs)";
	if (err != ENOMEM && err != EPERM && err != EAGAIN)
		return "";
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		return " (the locked-memory limit is too low: raise it with "
		       "`ulimit -l unlimited` or LimitMEMLOCK=, or use dynamic "
		       "registration with a smaller pinned-bytes cap)";
	if (err == EPERM)
		return " (the kernel refused to pin these pages: put the memory on "
		       "tmpfs or hugetlbfs)";
	return "";
}

int fab_reg_mr(struct fab_conn *c, void *addr, size_t len, int access,
	       struct ibv_mr **out)
{
	struct ibv_mr *mr = ibv_reg_mr(c->pd, addr, len, access);

	if (!mr) {
		int e = errno;

		return rd_err_set(&c->err, -e, "ibv_reg_mr(%zu bytes) failed: %s%s",
				  len, strerror(e), memlock_hint(e));
	}
	*out = mr;
	return 0;
}

int fab_dereg_mr(struct fab_conn *c, struct ibv_mr *mr)
{
	int rc;

	if (!mr)
		return 0;
	rc = ibv_dereg_mr(mr);
	if (rc)
		return rd_err_set(&c->err, -rc, "ibv_dereg_mr failed: %s", strerror(rc));
	return 0;
}

int fab_post_send(struct fab_conn *c, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(c->id->qp, wr, &bad);

	if (rc)
		return rd_err_set(&c->err, -rc, "ibv_post_send failed: %s", strerror(rc));
	return 0;
}

int fab_post_recv(struct fab_conn *c, struct ibv_recv_wr *wr)
{
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_recv(c->id->qp, wr, &bad);

	if (rc)
		return rd_err_set(&c->err, -rc, "ibv_post_recv failed: %s", strerror(rc));
	return 0;
}

int fab_poll(struct fab_conn *c, struct ibv_wc *wc, int n)
{
	int rc = ibv_poll_cq(c->cq, n, wc);

	if (rc < 0)
		return rd_err_set(&c->err, -EIO, "ibv_poll_cq failed");
	return rc;
}

int fab_cq_rearm(struct fab_conn *c)
{
	struct ibv_cq *cq;
	void *ctx;
	int rc;

	while (ibv_get_cq_event(c->cch, &cq, &ctx) == 0) {
		/* Acking in batches: each ack takes a mutex in libibverbs. */
		if (++c->unacked_cq_events >= 64) {
			ibv_ack_cq_events(c->cq, c->unacked_cq_events);
			c->unacked_cq_events = 0;
		}
	}
	rc = ibv_req_notify_cq(c->cq, 0);
	if (rc)
		return rd_err_set(&c->err, -rc, "ibv_req_notify_cq failed: %s", strerror(rc));
	return 0;
}

int fab_poll_wait(struct fab_conn *c, struct ibv_wc *wc, int n, int64_t deadline,
		  int wake_fd)
{
	struct pollfd pfd[3];
	int rc;

	for (;;) {
		rc = fab_poll(c, wc, n);
		if (rc)
			return rc;
		/* Completions that arrived before a disconnect are still
		 * delivered first: the peer's last message may be among them. */
		if (c->state == FAB_DISCONNECTED || c->state == FAB_FAILED)
			return c->state == FAB_DISCONNECTED ?
			       rd_err_set(&c->err, -ECONNRESET, "peer disconnected") :
			       rd_err_set(&c->err, -ECONNABORTED, "connection failed");
		rc = fab_cq_rearm(c);
		if (rc)
			return rc;
		/* A completion may have arrived between the poll and the arm. */
		rc = fab_poll(c, wc, n);
		if (rc)
			return rc;
		if (rd_expired(deadline))
			return rd_err_set(&c->err, -ETIMEDOUT,
					  "timed out waiting for a completion");
		pfd[0] = (struct pollfd){ .fd = c->cch->fd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = c->ech->fd, .events = POLLIN };
		pfd[2] = (struct pollfd){ .fd = wake_fd, .events = POLLIN };
		rc = poll(pfd, wake_fd >= 0 ? 3 : 2, rd_remaining_ms(deadline));
		if (rc < 0 && errno != EINTR)
			return rd_err_set(&c->err, -errno, "poll failed: %s", strerror(errno));
		if (rc > 0 && wake_fd >= 0 && (pfd[2].revents & POLLIN))
			return rd_err_set(&c->err, -ECANCELED, "cancelled");
		if (rc > 0 && (pfd[1].revents & POLLIN))
			fab_cm_process(c); /* a disconnect is reported after the CQ drains */
	}
}

/* What a failed completion most likely means for a migration. */
static const char *wc_hint(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_REM_ACCESS_ERR:
		return ": the peer's memory registration is gone (did the peer fail or exit?)";
	case IBV_WC_RETRY_EXC_ERR:
		return ": the peer stopped answering (host down or link cut?)";
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return ": the peer had no receive buffer posted";
	case IBV_WC_WR_FLUSH_ERR:
		return ": the connection was already broken";
	default:
		return "";
	}
}

int fab_wc_error(struct fab_conn *c, const struct ibv_wc *wc, const char *what)
{
	int rc = wc->status == IBV_WC_WR_FLUSH_ERR ? -ECONNRESET : -EIO;

	return rd_err_set(&c->err, rc, "%s failed: %s (status %d, vendor error 0x%x)%s",
			  what, ibv_wc_status_str(wc->status), wc->status, wc->vendor_err,
			  wc_hint(wc->status));
}

void fab_disconnect(struct fab_conn *c)
{
	if (c && c->id && (c->state == FAB_CONNECTED || c->state == FAB_ACCEPTING))
		rdma_disconnect(c->id);
	if (c && c->state != FAB_FAILED)
		c->state = FAB_DISCONNECTED;
}

void fab_conn_destroy(struct fab_conn *c)
{
	if (!c)
		return;
	free(c->attempt);
	if (c->qp_created)
		rdma_destroy_qp(c->id);
	if (c->cq && c->cq_owned) {
		if (c->unacked_cq_events)
			ibv_ack_cq_events(c->cq, c->unacked_cq_events);
		ibv_destroy_cq(c->cq);
	}
	if (c->cch)
		ibv_destroy_comp_channel(c->cch);
	if (c->pd && c->pd_owned)
		ibv_dealloc_pd(c->pd);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->ech)
		rdma_destroy_event_channel(c->ech);
	free(c);
}
