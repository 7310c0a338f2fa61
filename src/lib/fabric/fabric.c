#include "fabric.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fab_cm.h"

/* rdma_cm's own resolution timeouts; our deadline bounds them further. */
#define RESOLVE_TIMEOUT_MS 5000

void fab_warm_up(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	if (ch)
		rdma_destroy_event_channel(ch);
}

const char *fab_event_str(enum rdma_cm_event_type t)
{
	return rdma_event_str(t);
}

static int create_cq(struct fab_conn *c, const struct fab_caps *caps)
{
	uint32_t depth = caps->cq_depth ? caps->cq_depth : caps->sq_depth + caps->rq_depth;
	int rc;

	c->cch = ibv_create_comp_channel(c->id->verbs);
	if (!c->cch)
		return rd_err_set(c->err, -errno, "ibv_create_comp_channel failed: %s",
				  strerror(errno));
	rc = fab_set_nonblock(c->cch->fd);
	if (rc)
		return rd_err_set(c->err, rc, "fcntl(O_NONBLOCK) failed: %s", strerror(-rc));
	c->cq = ibv_create_cq(c->id->verbs, (int)depth, c, c->cch, 0);
	if (!c->cq)
		return rd_err_set(c->err, -errno, "ibv_create_cq(%u entries) failed: %s",
				  depth, strerror(errno));
	c->cq_owned = true;
	rc = ibv_req_notify_cq(c->cq, 0);
	if (rc)
		return rd_err_set(c->err, -rc, "ibv_req_notify_cq failed: %s", strerror(rc));
	return 0;
}

static int create_resources(struct fab_conn *c, const struct fab_caps *caps)
{
	struct ibv_qp_init_attr attr;
	struct ibv_context *verbs = c->id->verbs;
	int rc;

	if (caps->pd) {
		/* A borrowed PD is of one device: memory registered on it is
		 * reachable only through that device's QPs. */
		if (caps->pd->context != verbs)
			return rd_err_set(c->err, -EXDEV, "the connection goes through another "
					  "RDMA device than the one its memory is registered "
					  "with");
		c->pd = caps->pd;
	} else {
		c->pd = ibv_alloc_pd(verbs);
		if (!c->pd)
			return rd_err_set(c->err, -errno, "ibv_alloc_pd failed: %s",
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
		return rd_err_set(c->err, -errno,
				  "rdma_create_qp(send %u, recv %u) failed: %s",
				  caps->sq_depth, caps->rq_depth, strerror(errno));
	c->qp_created = true;
	return 0;
}

/* @active: rdma_connect's parameters, else rdma_accept's. */
static void conn_param(struct rdma_conn_param *p, const void *priv, size_t len, bool reads,
		       bool active)
{
	memset(p, 0, sizeof(*p));
	p->private_data = priv;
	p->private_data_len = (uint8_t)len;
	/* SEND and WRITE need no RDMA READ resources.  A post-copy channel's
	 * destination reads from its source: the source (active) offers what
	 * its device answers at once, and the destination's accept takes the
	 * smaller of that and what its own device issues (rdma_accept's
	 * RDMA_MAX_INIT_DEPTH). */
	p->responder_resources = reads && active ? RDMA_MAX_RESP_RES : 0;
	p->initiator_depth = reads && !active ? RDMA_MAX_INIT_DEPTH : 0;
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
		return rd_err_set(c->err, -EINVAL, "accept private data too long (%zu)", len);
	rc = create_resources(c, caps);
	if (!rc && pre_accept)
		rc = pre_accept(c, arg);
	if (rc)
		return rc;
	conn_param(&p, priv, len, caps->reads, false);
	if (rdma_accept(c->id, &p))
		return rd_err_set(c->err, -errno, "rdma_accept failed: %s", strerror(errno));
	c->state = FAB_ACCEPTING;
	return 0;
}

int fab_reject(struct fab_conn *c, const void *priv, size_t len)
{
	if (len > FAB_PRIV_REJECT_MAX)
		len = FAB_PRIV_REJECT_MAX;
	if (rdma_reject(c->id, priv, (uint8_t)len))
		return rd_err_set(c->err, -errno, "rdma_reject failed: %s", strerror(errno));
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
			c->peer_priv_len = fab_event_priv(ev, c->peer_priv,
							  sizeof(c->peer_priv));
		return rd_err_set(c->err, -ECONNREFUSED, "connection refused %s: %s", what,
				  reject_reason(status));
	case RDMA_CM_EVENT_ADDR_ERROR:
		return rd_err_set(c->err, -EHOSTUNREACH,
				  "address resolution failed %s: %s (no RDMA device "
				  "reaches that address?)", what, strerror(-status));
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return rd_err_set(c->err, -EHOSTUNREACH, "route resolution failed %s: %s",
				  what, strerror(-status));
	case RDMA_CM_EVENT_UNREACHABLE:
		return rd_err_set(c->err, -EHOSTUNREACH, "peer unreachable %s", what);
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return rd_err_set(c->err, -ECONNABORTED, "connection error %s (status %d)",
				  what, status);
	case RDMA_CM_EVENT_DISCONNECTED:
		return rd_err_set(c->err, -ECONNRESET, "peer disconnected %s", what);
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return rd_err_set(c->err, -ENODEV, "RDMA device removed %s", what);
	default:
		return rd_err_set(c->err, -EPROTO, "unexpected CM event %s %s",
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

	rc = fab_get_event(c->ech, deadline, &ev);
	if (rc == -ETIMEDOUT)
		return rd_err_set(c->err, rc, "timed out %s", what);
	if (rc)
		return rd_err_set(c->err, rc, "rdma_get_cm_event failed %s: %s", what,
				  strerror(-rc));
	rc = ev->event == want ? 0 : attempt_failed(c, ev, what);
	rdma_ack_cm_event(ev);
	return rc;
}

/* Where an active attempt is once its route is resolved: the setup that
 * follows is three calls of 3-16 ms each under emulation, one per step so
 * that no step does all of them. */
enum fab_setup {
	SETUP_NONE,       /* waiting for CM events */
	SETUP_RESOURCES,  /* PD, CQ and QP next */
	SETUP_PRE,        /* the caller's pre_connect (its receives) next */
	SETUP_CONNECT,    /* rdma_connect next */
};

/* What an active connection attempt carries between its steps. */
struct fab_attempt {
	enum fab_setup setup;
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

/* The next piece of setup after the route: FAB_STEP_AGAIN while more
 * follows, 0 once rdma_connect went out. */
static int setup_step(struct fab_conn *c, struct fab_attempt *a)
{
	struct rdma_conn_param p;
	int rc;

	switch (a->setup) {
	case SETUP_RESOURCES:
		rc = create_resources(c, &a->caps);
		a->setup = SETUP_PRE;
		return rc ? rc : FAB_STEP_AGAIN;
	case SETUP_PRE:
		rc = a->pre_connect ? a->pre_connect(c, a->arg) : 0;
		if (rc == FAB_PRE_WAIT)
			return rd_expired(a->deadline) ? rd_err_set(c->err, -ETIMEDOUT, "timed out "
								    "%s", a->what) : 0;
		a->setup = SETUP_CONNECT;
		return rc ? rc : FAB_STEP_AGAIN;
	case SETUP_CONNECT:
		a->setup = SETUP_NONE;
		conn_param(&p, a->priv, a->priv_len, a->caps.reads, true);
		if (rdma_connect(c->id, &p))
			return rd_err_set(c->err, -errno, "rdma_connect %s failed: %s", a->what,
					  strerror(errno));
		return 0;
	default:
		return 0;
	}
}

/* One CM event of an attempt; acks it.  1 once established. */
static int attempt_event(struct fab_conn *c, struct rdma_cm_event *ev)
{
	struct fab_attempt *a = c->attempt;
	int rc = 0;

	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(c->id, resolve_tmo(a)))
			rc = rd_err_set(c->err, -errno, "rdma_resolve_route %s failed: %s",
					a->what, strerror(errno));
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		a->setup = SETUP_RESOURCES;
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		c->peer_priv_len = fab_event_priv(ev, c->peer_priv, sizeof(c->peer_priv));
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
	return fab_resolve(host, port, false, ss, err);
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
	fab_conn_set_err(c, err);
	c->attempt = a;
	a->caps = *caps;
	memcpy(a->priv, priv, len);
	a->priv_len = len;
	a->pre_connect = pre_connect;
	a->arg = arg;
	a->deadline = deadline;
	snprintf(a->what, sizeof(a->what), "connecting to %s:%s", host, port);
	c->state = FAB_IDLE;
	rc = fab_new_channel(&c->ech, c->err);
	if (!rc && rdma_create_id(c->ech, &c->id, c, RDMA_PS_TCP))
		rc = rd_err_set(c->err, -errno, "rdma_create_id failed: %s", strerror(errno));
	if (!rc && rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&ss, resolve_tmo(a)))
		rc = rd_err_set(c->err, -errno, "rdma_resolve_addr %s failed: %s", a->what,
				strerror(errno));
	return rc;
}

int fab_connect_step(struct fab_conn *c)
{
	struct rdma_cm_event *ev;
	int rc;

	if (!c->attempt)
		return c->state == FAB_CONNECTED ? 1 : rd_err_set(c->err, -EINVAL,
								  "no connection attempt");
	if (c->attempt->setup != SETUP_NONE) {
		rc = setup_step(c, c->attempt);
		/* Waiting for the caller's pre_connect: no CM event is due
		 * before rdma_connect, and one left unread (a device removed)
		 * would keep the fd readable all the while. */
		if (rc == 0 && c->attempt->setup == SETUP_PRE &&
		    fab_get_event(c->ech, 0, &ev) == 0) {
			rc = attempt_failed(c, ev, c->attempt->what);
			rdma_ack_cm_event(ev);
		}
		if (rc < 0) {
			free(c->attempt);
			c->attempt = NULL;
		}
		return rc;
	}
	while ((rc = fab_get_event(c->ech, 0, &ev)) == 0) {
		rc = attempt_event(c, ev);
		if (rc)
			return rc;
		if (c->attempt->setup != SETUP_NONE)
			return FAB_STEP_AGAIN;
	}
	if (rc != -EAGAIN)
		return rd_err_set(c->err, rc, "rdma_get_cm_event failed: %s", strerror(-rc));
	if (rd_expired(c->attempt->deadline))
		return rd_err_set(c->err, -ETIMEDOUT, "timed out %s", c->attempt->what);
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
		while ((rc = fab_connect_step(c)) == 0 || rc == FAB_STEP_AGAIN)
			if (!rc)
				poll(&pfd, 1, rd_remaining_ms(deadline));
		rc = rc == 1 ? 0 : rc;
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

	rc = fab_get_event(c->ech, 0, &ev);
	if (rc == -EAGAIN)
		return 0;
	if (rc)
		return rd_err_set(c->err, rc, "rdma_get_cm_event failed: %s", strerror(-rc));
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
		return rd_err_set(c->err, -ECONNRESET, "peer disconnected");
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		c->state = FAB_FAILED;
		return rd_err_set(c->err, -ENODEV, "RDMA device removed");
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		c->state = FAB_FAILED;
		return rd_err_set(c->err, -ECONNABORTED, "connection failed: %s",
				  rdma_event_str(t));
	default:
		/* Resolution and request events only occur before a connection
		 * exists, where wait_event() consumes them. */
		return 0;
	}
}

void fab_conn_set_err(struct fab_conn *c, struct rd_err *err)
{
	c->err = err ? err : &c->own_err;
}

int fab_cm_fd(const struct fab_conn *c)
{
	/* A connection whose channel could not be made (no RDMA device) has
	 * no fd to watch or unwatch. */
	return c && c->ech ? c->ech->fd : -1;
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
