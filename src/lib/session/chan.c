#include "chan.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <sodium.h>

#include "privdata.h"

/* Data channels post no receives; one keeps the QP valid on every device. */
#define CHAN_RQ_DEPTH 1
#define CHAN_DEST_SQ_DEPTH 1

struct chan_set {
	struct fab_conn *ctrl;       /* borrowed: PD, CQ and the expected peer */
	struct fab_listener *l;
	/* Data channels at most and granted (the control connection
	 * included), then post-copy channels granted: indexes granted..
	 * granted + pc - 1. */
	unsigned max, granted, pc;
	struct ibv_cq *pc_cq;        /* borrowed: the post-copy thread's */
	uint32_t pc_sq_depth;
	uint64_t token;
	struct fab_conn *conn[PD_CHANNELS_MAX]; /* [0] unused: the control conn */
	unsigned accepted;
};

int chan_set_open(struct chan_set **out, struct fab_conn *ctrl, unsigned max,
		  struct rd_err *err)
{
	struct chan_set *cs;
	int rc;

	if (max < 1 || max > PD_CHANNELS_MAX - CHAN_PC_MAX)
		return rd_err_set(err, -EINVAL, "%u channels outside 1..%d", max,
				  PD_CHANNELS_MAX - CHAN_PC_MAX);
	cs = calloc(1, sizeof(*cs));
	if (!cs)
		return rd_err_set(err, -ENOMEM, "out of memory");
	cs->ctrl = ctrl;
	cs->max = max;
	while (!cs->token) {
		if (getrandom(&cs->token, sizeof(cs->token), 0) != sizeof(cs->token)) {
			rc = rd_err_set(err, -errno, "getrandom failed: %s", strerror(errno));
			free(cs);
			return rc;
		}
	}
	rc = fab_listen_beside(&cs->l, ctrl, err);
	if (rc) {
		free(cs);
		return rd_err_prefix(err, rc, "data channels");
	}
	*out = cs;
	return 0;
}

int chan_set_fd(const struct chan_set *cs)
{
	return fab_listener_fd(cs->l);
}

unsigned chan_set_grant(struct chan_set *cs, unsigned n, unsigned pc, uint32_t *port,
			uint64_t *token)
{
	cs->granted = n < 1 ? 1 : n < cs->max ? n : cs->max;
	cs->pc = pc < CHAN_PC_MAX ? pc : CHAN_PC_MAX;
	*port = fab_listener_port(cs->l);
	*token = cs->token;
	if (cs->granted + cs->pc <= 1)
		fab_listener_stop(cs->l);
	return cs->granted;
}

void chan_set_pc_cq(struct chan_set *cs, struct ibv_cq *cq, uint32_t sq_depth)
{
	cs->pc_cq = cq;
	cs->pc_sq_depth = sq_depth;
}

struct fab_conn *chan_set_pc_conn(const struct chan_set *cs, unsigned i)
{
	return cs && i < cs->pc ? cs->conn[cs->granted + i] : NULL;
}

static void refuse(struct fab_conn *c, uint16_t reason)
{
	struct pd_reject rej = { .reason = reason, .ver_min = PD_VERSION_MIN,
				 .ver_max = PD_VERSION_MAX };
	uint8_t buf[PD_REJECT_LEN];

	fab_reject(c, buf, pd_encode_reject(&rej, buf, sizeof(buf)));
	fab_conn_destroy(c);
}

unsigned chan_admit(const void *priv, size_t priv_len, uint64_t token, unsigned granted,
		    unsigned pc_first, bool same_peer, uint64_t open, char *note, size_t len)
{
	bool pc;

	struct pd_request req;
	struct rd_err e;

	if (pd_decode_request(priv, priv_len, &req, &e)) {
		snprintf(note, len, "refused a data channel: %s", e.msg);
		return 0;
	}
	if (req.resume) {
		snprintf(note, len, "refused a resume on the channels' port");
		return 0;
	}
	/* The token alone is not enough: it also has to come from the host
	 * that authenticated on the control connection. */
	if (granted < 2 || !token || !same_peer ||
	    sodium_memcmp(&req.session_id, &token, sizeof(token))) {
		snprintf(note, len, "refused a data channel that does not belong to this "
			 "migration");
		return 0;
	}
	if (req.channels != granted || !req.channel || req.channel >= granted ||
	    (open >> req.channel) & 1) {
		snprintf(note, len, "refused data channel %u of %u: %u were granted%s",
			 req.channel, req.channels, granted,
			 req.channel && req.channel < 64 && ((open >> req.channel) & 1) ?
			 " and this one is already open" : "");
		return 0;
	}
	/* A post-copy channel is read from: it must say it is one, and a
	 * data channel must not. */
	pc = req.caps & PD_CAP_POSTCOPY;
	if (pc != (req.channel >= pc_first)) {
		snprintf(note, len, "refused channel %u: it %s a post-copy channel", req.channel,
			 pc ? "claims to be" : "is not");
		return 0;
	}
	return req.channel;
}

static unsigned admit(struct chan_set *cs, struct fab_conn *c, char *note, size_t len)
{
	uint64_t open = 0;
	unsigned i;

	for (i = 1; i < PD_CHANNELS_MAX; i++)
		open |= (uint64_t)(cs->conn[i] != NULL) << i;
	return chan_admit(c->peer_priv, c->peer_priv_len, cs->token, cs->granted + cs->pc,
			  cs->granted, fab_same_peer(c, cs->ctrl), open, note, len);
}

static int on_request(struct chan_set *cs, struct fab_conn *c, char *note, size_t len)
{
	struct fab_caps caps = { .sq_depth = CHAN_DEST_SQ_DEPTH, .rq_depth = CHAN_RQ_DEPTH,
				 .pd = cs->ctrl->pd, .cq = cs->ctrl->cq };
	struct pd_accept acc = { .version = PD_VERSION_MAX, .caps = PD_CAP_MULTI_CHANNEL,
				 .ctrl_depth = PD_DEPTH_MIN, .ctrl_msg_max = PD_MSG_MAX_MIN };
	uint8_t priv[PD_ACCEPT_LEN];
	unsigned idx = admit(cs, c, note, len);

	if (!idx) {
		refuse(c, PD_REJ_UNAUTHORIZED);
		return 0;
	}
	if (idx >= cs->granted) {
		if (!cs->pc_cq) {
			snprintf(note, len, "could not accept post-copy channel %u: no "
				 "completion queue for it", idx);
			refuse(c, PD_REJ_NO_RESOURCES);
			return 0;
		}
		/* Our READs go out on it, their completions to the thread
		 * that serves faults. */
		caps.cq = cs->pc_cq;
		caps.sq_depth = cs->pc_sq_depth;
		caps.reads = true;
		acc.caps = PD_CAP_POSTCOPY;
	}
	if (fab_accept(c, &caps, priv, pd_encode_accept(&acc, priv, sizeof(priv)),
		       NULL, NULL)) {
		snprintf(note, len, "could not accept data channel %u: %s", idx, c->err->msg);
		refuse(c, PD_REJ_NO_RESOURCES);
		return 0;
	}
	cs->conn[idx] = c;
	if (++cs->accepted == cs->granted + cs->pc - 1)
		fab_listener_stop(cs->l); /* every channel is here: nobody else */
	return 0;
}

static unsigned index_of(const struct chan_set *cs, const struct fab_conn *c)
{
	unsigned i;

	for (i = 1; i < PD_CHANNELS_MAX; i++)
		if (cs->conn[i] == c)
			return i;
	return 0;
}

int chan_set_process(struct chan_set *cs, char *note, size_t note_len,
		     struct rd_err *err)
{
	struct fab_conn *c = NULL;
	enum fab_lev kind;
	int i, rc;

	/* Level-triggered fd: a few events per call keep a flood from
	 * starving the control channel. */
	for (i = 0; i < 8; i++) {
		rc = fab_listener_event(cs->l, &kind, &c, err);
		if (rc)
			return rc;
		if (kind == FAB_LEV_NONE && !c)
			return 0;
		if (kind == FAB_LEV_REQUEST) {
			rc = on_request(cs, c, note, note_len);
		} else if (kind == FAB_LEV_CLOSED) {
			return rd_err_set(err, -ECONNRESET, "data channel %u: %s",
					  index_of(cs, c), c->err->msg);
		}
		c = NULL;
	}
	return 0;
}

void chan_set_disconnect(struct chan_set *cs)
{
	unsigned i;

	for (i = 1; cs && i < PD_CHANNELS_MAX; i++)
		fab_disconnect(cs->conn[i]);
}

void chan_set_break_pc(struct chan_set *cs)
{
	unsigned i;

	for (i = 0; cs && i < cs->pc; i++)
		fab_qp_error(cs->conn[cs->granted + i]);
}

void chan_set_destroy(struct chan_set *cs)
{
	unsigned i;

	if (!cs)
		return;
	for (i = 1; i < PD_CHANNELS_MAX; i++) {
		fab_disconnect(cs->conn[i]);
		fab_conn_destroy(cs->conn[i]);
	}
	fab_listener_destroy(cs->l);
	free(cs);
}

int chan_connect_start(struct fab_conn **out, struct fab_conn *ctrl, uint32_t port,
		       uint64_t token, unsigned idx, unsigned n, uint32_t sq_depth, bool pc,
		       int64_t deadline, struct rd_err *err)
{
	struct fab_caps caps = { .sq_depth = sq_depth, .rq_depth = CHAN_RQ_DEPTH,
				 .pd = ctrl->pd, .cq = ctrl->cq, .reads = pc };
	struct pd_request req = { .ver_min = PD_VERSION_MIN, .ver_max = PD_VERSION_MAX,
				  .caps = pc ? PD_CAP_POSTCOPY : PD_CAP_MULTI_CHANNEL,
				  .ctrl_depth = PD_DEPTH_MIN,
				  .ctrl_msg_max = PD_MSG_MAX_MIN, .session_id = token,
				  .channel = (uint16_t)idx, .channels = (uint16_t)n };
	uint8_t priv[PD_REQUEST_LEN];
	char sport[8], host[NI_MAXHOST];
	const struct sockaddr *peer = fab_peer_addr(ctrl);
	int rc;

	*out = NULL;
	/* The address the control connection reached, numerically: no name
	 * lookup inside a step, and no other address a new lookup might give
	 * (the destination admits channels from the control peer only). */
	if (!peer || getnameinfo(peer, peer->sa_family == AF_INET6 ?
				 sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
				 host, sizeof(host), NULL, 0, NI_NUMERICHOST))
		return rd_err_set(err, -EINVAL, "data channel %u: the control connection has no "
				  "peer address", idx);
	snprintf(sport, sizeof(sport), "%u", port);
	rc = fab_connect_start(out, host, sport, &caps, priv,
			       pd_encode_request(&req, priv, sizeof(priv)), NULL, NULL, deadline,
			       err);
	return rc ? rd_err_prefix(err, rc, "data channel %u", idx) : 0;
}

int chan_connect_finish(struct fab_conn *c, unsigned idx, bool pc, int step_rc,
			struct rd_err *err)
{
	uint32_t want = pc ? PD_CAP_POSTCOPY : PD_CAP_MULTI_CHANNEL;
	struct pd_accept acc;
	struct pd_reject rej;
	int rc;

	if (step_rc == -ECONNREFUSED && c->peer_priv_len &&
	    !pd_decode_reject(c->peer_priv, c->peer_priv_len, &rej, err))
		return rd_err_set(err, -ECONNREFUSED, "the destination refused data channel "
				  "%u: %s", idx, pd_reason_str(rej.reason));
	/* The connection wrote its failure into @err (its owner's) itself. */
	if (step_rc < 0)
		return rd_err_prefix(err, step_rc, "data channel %u", idx);
	rc = pd_decode_accept(c->peer_priv, c->peer_priv_len, &acc, err);
	if (!rc && !(acc.caps & want))
		rc = rd_err_set(err, -EPROTO, "the destination did not accept channel %u "
				"as a %s channel", idx, pc ? "post-copy" : "data");
	return rc;
}
