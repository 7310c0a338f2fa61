/* fabric: the rdma_cm + verbs layer the protocol stands on.
 *
 * One fab_conn owns one rdma_cm id with its own event channel, a PD (owned or
 * borrowed), a completion channel, one CQ shared by send and receive, and an
 * RC QP.  Every wait takes an absolute deadline (util.h); every failure leaves
 * a message naming the call and errno in the conn's (or caller's) rd_err.
 *
 * Work requests carry a pointer to a struct fab_tag embedded in the object
 * that owns the request; completions are dispatched with rd_container_of on
 * the tag, never by decoding bits of wr_id.
 *
 * Implemented in fabric.c (connections), fab_listen.c (listeners) and
 * fab_io.c (registration, posting, completions); fab_cm.h holds the
 * rdma_cm helpers under fabric.c and fab_listen.c. */
#ifndef RDMIG_FABRIC_H
#define RDMIG_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "util.h"

/* The limits rdma_cm places on private data over IB/RoCE CM messages. */
#define FAB_PRIV_CONNECT_MAX 56
#define FAB_PRIV_ACCEPT_MAX 196
#define FAB_PRIV_REJECT_MAX 148
#define FAB_PRIV_MAX 196

struct fab_attempt;

struct fab_tag {
	uint32_t kind; /* owner-defined: which kind of object holds this tag */
};

static inline uint64_t fab_wr_id(struct fab_tag *t)
{
	return (uint64_t)(uintptr_t)t;
}

static inline struct fab_tag *fab_tag_of(const struct ibv_wc *wc)
{
	return (struct fab_tag *)(uintptr_t)wc->wr_id;
}

/* Queue sizes for one connection's QP and CQ. */
struct fab_caps {
	uint32_t sq_depth;     /* send queue entries (SEND + RDMA WRITE) */
	uint32_t rq_depth;     /* receive queue entries (pre-posted control RECVs) */
	uint32_t max_send_sge;
	uint32_t max_inline;
	struct ibv_pd *pd;     /* borrowed PD on the same device, or NULL: own one */
	/* Borrowed CQ (its owner polls it and owns its completion channel),
	 * or NULL: create one with cq_depth entries (0: sq_depth + rq_depth). */
	struct ibv_cq *cq;
	uint32_t cq_depth;
	/* The QP takes part in RDMA READs, as many at once as both devices
	 * allow: the active side answers the peer's READs (its responder
	 * resources), the passive side issues them (its initiator depth).
	 * Post-copy's channels only: the other connections neither read nor
	 * are read, and so offer nothing. */
	bool reads;
};

enum fab_state {
	FAB_IDLE,        /* request received (passive) or being resolved (active) */
	FAB_ACCEPTING,   /* rdma_accept posted, waiting for ESTABLISHED */
	FAB_CONNECTED,
	FAB_DISCONNECTED,
	FAB_FAILED,
};

struct fab_conn {
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	bool pd_owned;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	bool cq_owned;
	bool qp_created;
	unsigned unacked_cq_events;
	enum fab_state state;
	uint8_t peer_priv[FAB_PRIV_MAX]; /* private data the peer sent us */
	size_t peer_priv_len;
	uint32_t peer_qpn;               /* from the peer's REQ or REP */
	struct fab_attempt *attempt;     /* active side, while connecting */
	/* Where this connection's failures are written: the owner's error,
	 * given when the connection is made (a session's, so its message is
	 * the one the caller reads, with no copying between layers), else
	 * own_err. */
	struct rd_err *err;
	struct rd_err own_err;
};

struct fab_listener {
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	struct rd_err err;
};

int fab_listen(struct fab_listener **out, const char *host, const char *port,
	       struct rd_err *err);
/* Listens on @c's local address, on a port the kernel picks. */
int fab_listen_beside(struct fab_listener **out, const struct fab_conn *c,
		      struct rd_err *err);
int fab_listener_fd(const struct fab_listener *l);
/* The port actually bound (useful with port "0"). */
uint16_t fab_listener_port(const struct fab_listener *l);
void fab_listener_destroy(struct fab_listener *l);

/* Takes the next connection request, waiting until @deadline (0: poll once,
 * returning -EAGAIN when none is pending).  The new conn has its own event
 * channel, no QP yet, and the requester's private data in peer_priv; its
 * failures go to @err from now on. */
int fab_get_request(struct fab_listener *l, int64_t deadline,
		    struct fab_conn **out, struct rd_err *err);
/* Creates PD/CQ/QP, runs @pre_accept (to post receives the peer may need at
 * once) and posts rdma_accept with @priv.  Does not wait: call
 * fab_wait_established() or drive fab_cm_process() from an event loop. */
int fab_accept(struct fab_conn *c, const struct fab_caps *caps,
	       const void *priv, size_t len,
	       int (*pre_accept)(struct fab_conn *c, void *arg), void *arg);
int fab_reject(struct fab_conn *c, const void *priv, size_t len);

/* A listener's connections can also stay on its event channel, so one fd
 * serves the listener and all of them: fab_listener_event() reads one
 * pending event without blocking.  REQUEST returns a new conn (no QP yet,
 * no channel of its own) to fab_accept() or fab_reject() and destroy; the
 * other kinds name the conn the event is for.  Those conns must be destroyed
 * before the listener. */
enum fab_lev {
	FAB_LEV_NONE,         /* nothing pending, or nothing to act on */
	FAB_LEV_REQUEST,
	FAB_LEV_ESTABLISHED,
	FAB_LEV_CLOSED,       /* disconnected or failed; (*c)->err says how */
};
int fab_listener_event(struct fab_listener *l, enum fab_lev *kind,
		       struct fab_conn **c, struct rd_err *err);
/* Stops taking requests; events of accepted conns still arrive. */
void fab_listener_stop(struct fab_listener *l);
/* Whether @a and @b were opened from the same peer IP address. */
bool fab_same_peer(const struct fab_conn *a, const struct fab_conn *b);

/* Active side: resolve, create resources, connect and wait for the peer's
 * answer, all before @deadline.  A rejection returns -ECONNREFUSED with the
 * peer's reject private data in (*out)->peer_priv when it sent any.
 * @pre_connect, when set, runs after the QP exists and before rdma_connect so
 * the caller can post receives the peer may need immediately.  Once the QP
 * exists @out is set, on failure too, and the caller destroys it after
 * deregistering what it registered (a PD with live MRs cannot be freed);
 * before that, @out is left untouched. */
int fab_connect(struct fab_conn **out, const char *host, const char *port,
		const struct fab_caps *caps, const void *priv, size_t len,
		int (*pre_connect)(struct fab_conn *c, void *arg), void *arg,
		int64_t deadline, struct rd_err *err);

/* Sends @c's failures to @err (NULL: its own) from now on. */
void fab_conn_set_err(struct fab_conn *c, struct rd_err *err);

/* The same in steps, for event loops: fab_connect_start() resolves a
 * numeric address at once (a host name is looked up with getaddrinfo, which
 * may block) and starts address resolution; fab_connect_step() handles the
 * CM events pending on fab_cm_fd(), without blocking: route resolution,
 * creating PD/CQ/QP, @pre_connect, rdma_connect, each of those three in a
 * call of its own.  It returns 1 once established, FAB_STEP_AGAIN when the
 * next piece of setup can go at once (call again without waiting for the
 * fd), 0 while it waits for the CM, a negative errno on failure (with
 * @deadline expired: -ETIMEDOUT).  *out is set by start, even when it fails:
 * the caller destroys it (after deregistering its MRs).  Failures are
 * written to @err, from start on and in every later call on the conn.
 * @pre_connect may return FAB_PRE_WAIT: it is waiting for something that
 * will wake the caller's loop (a registration on a helper thread), and is
 * called again in a later step, until the deadline. */
#define FAB_STEP_AGAIN 2
#define FAB_PRE_WAIT 3
int fab_connect_start(struct fab_conn **out, const char *host, const char *port,
		      const struct fab_caps *caps, const void *priv, size_t len,
		      int (*pre_connect)(struct fab_conn *c, void *arg), void *arg,
		      int64_t deadline, struct rd_err *err);
int fab_connect_step(struct fab_conn *c);

int fab_wait_established(struct fab_conn *c, int64_t deadline);

/* Reads and handles one pending CM event without blocking.  Returns 0 when an
 * event was handled or none was pending, or a negative errno when the event
 * ends the connection (peer disconnected, device removed, ...). */
int fab_cm_process(struct fab_conn *c);

/* -1 when the connection has no CM channel (it could not be created). */
int fab_cm_fd(const struct fab_conn *c);

/* What identifies this connection on the fabric: our QP number and both
 * addresses as rdma_cm sees them (with peer_qpn, what authentication is
 * bound to). */
uint32_t fab_local_qpn(const struct fab_conn *c);
const struct sockaddr *fab_local_addr(const struct fab_conn *c);
const struct sockaddr *fab_peer_addr(const struct fab_conn *c);
int fab_cq_fd(const struct fab_conn *c);

int fab_reg_mr(struct fab_conn *c, void *addr, size_t len, int access,
	       struct ibv_mr **out);
/* The message for a registration of @len bytes that failed with @rc (made
 * elsewhere: a helper thread), with the fix where there is one. */
int fab_reg_error(struct rd_err *err, int rc, size_t len);
int fab_dereg_mr(struct fab_conn *c, struct ibv_mr *mr);

int fab_post_send(struct fab_conn *c, struct ibv_send_wr *wr);
/* The connection's QP, for a thread that posts on it directly (wpost). */
static inline struct ibv_qp *fab_qp(const struct fab_conn *c)
{
	return c->id->qp;
}
int fab_post_recv(struct fab_conn *c, struct ibv_recv_wr *wr);
/* Whether @c's QP is in the error state, which no completion may tell
 * where nothing is posted: a responder's QP goes there when it refused a
 * peer's RDMA READ (a bad key or address).  false when it cannot say. */
bool fab_qp_broken(const struct fab_conn *c);
/* Moves @c's QP (if any) to the error state: what is posted on it
 * completes at once, flushed, whatever the CM did or did not do. */
void fab_qp_error(struct fab_conn *c);
/* Clears the remote access of @c's QP, in RTS (after the accept: rdma_cm
 * sets it again on the way there): the peer's RDMA WRITEs and READs are
 * refused from now on, SENDs still arrive.  For a connection that carries
 * only messages on a PD where memory is registered for remote access.
 * 0, or a negative errno with @c->err set. */
int fab_qp_sends_only(struct fab_conn *c);

/* Non-blocking poll of up to @n completions.  Returns the count (0 when the
 * CQ is empty) or a negative errno. */
int fab_poll(struct fab_conn *c, struct ibv_wc *wc, int n);
/* Blocks until at least one completion, a connection-ending CM event, @wake_fd
 * becoming readable (-ECANCELED; -1 for none) or @deadline: returns the
 * number of completions, or a negative errno (-ETIMEDOUT, -ECONNRESET, ...).
 * Also answers CM events while waiting. */
int fab_poll_wait(struct fab_conn *c, struct ibv_wc *wc, int n,
		  int64_t deadline, int wake_fd);
/* For external event loops: consume completion-channel events and re-arm the
 * CQ.  After it returns, poll the CQ until empty before sleeping again. */
int fab_cq_rearm(struct fab_conn *c);

/* Formats a failed completion as "<op> completion failed: <status> (...)". */
int fab_wc_error(struct fab_conn *c, const struct ibv_wc *wc, const char *what);

/* Loads librdmacm and the verbs providers now: the first use in a process
 * costs tens to hundreds of milliseconds (every provider library is
 * loaded), which a connection step should not.  Harmless without a
 * device. */
void fab_warm_up(void);

const char *fab_event_str(enum rdma_cm_event_type t);
void fab_disconnect(struct fab_conn *c);
/* Tears down in reverse order of creation; accepts NULL and half-built
 * connections.  The caller must have deregistered its MRs first. */
void fab_conn_destroy(struct fab_conn *c);

#endif
