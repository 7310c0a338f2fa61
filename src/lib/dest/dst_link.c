#include "dst_link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "dst_int.h"
#include "pcd.h"
#include "privdata.h"
#include "rdmig.h"

/* The handshake (authentication and block map) gets this long at most from
 * the accept, whatever the peer sends meanwhile: a peer that never proves
 * itself must not hold a connection by sending keepalives. */
#define HANDSHAKE_MS_MAX 10000
/* Jobs the helpers hold: the chunks of a REGISTER_REQ are fed to them as
 * they take them, pin-all pieces a few per helper ahead. */
#define DST_REGQ_DEPTH 64

struct rdmig_listener {
	struct fab_listener *fl;
};

/* ---- listeners ---------------------------------------------------------- */

static void reject(struct fab_conn *c, uint16_t reason)
{
	struct pd_reject rej = { .reason = reason, .ver_min = PD_VERSION_MIN,
				 .ver_max = PD_VERSION_MAX };
	uint8_t buf[PD_REJECT_LEN];

	fab_reject(c, buf, pd_encode_reject(&rej, buf, sizeof(buf)));
}

int rdmig_listener_create(struct rdmig_listener **out, const char *host,
			  const char *port, char *errbuf, size_t errlen)
{
	struct rdmig_listener *l = calloc(1, sizeof(*l));
	struct rd_err err = { "" };
	int rc;

	*out = NULL;
	if (!l)
		return -ENOMEM;
	rc = fab_listen(&l->fl, host, port, &err);
	if (rc) {
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "%s", err.msg);
		free(l);
		return rc;
	}
	*out = l;
	return 0;
}

int rdmig_listener_fd(const struct rdmig_listener *l)
{
	return fab_listener_fd(l->fl);
}

int dst_link_listener_fd(const struct rdmig_listener *l)
{
	return fab_listener_fd(l->fl);
}

int rdmig_listener_port(const struct rdmig_listener *l)
{
	return fab_listener_port(l->fl);
}

int rdmig_listener_refuse(struct rdmig_listener *l)
{
	struct fab_conn *c = NULL;
	struct rd_err err;
	int rc = fab_get_request(l->fl, 0, &c, &err);

	if (rc)
		return rc;
	reject(c, PD_REJ_BUSY);
	fab_conn_destroy(c);
	return 0;
}

void rdmig_listener_destroy(struct rdmig_listener *l)
{
	if (!l)
		return;
	fab_listener_destroy(l->fl);
	free(l);
}

/* ---- accepting ------------------------------------------------------------ */

/* HOST:PORT of the peer that sent @c's request, kept for the logs even when
 * the request is turned away. */
static void name_peer(struct rdmig_dest *d, const struct fab_conn *c)
{
	const struct sockaddr *sa = fab_peer_addr(c);
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (!sa)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
	}
	snprintf(d->peer, sizeof(d->peer), sa->sa_family == AF_INET6 ? "[%s]:%u" : "%s:%u",
		 host, port);
}

static int pre_accept(struct fab_conn *c, void *arg)
{
	struct rdmig_dest *d = arg;
	int rc = ctrl_init(&d->ss.ch, c, d->ss.cfg.ctrl_depth, d->ss.cfg.ctrl_msg_max,
			   &d->ss.err);

	d->ss.ctrl_ready = rc == 0;
	/* The PD exists now: the helpers register on it (nothing before the
	 * source is admitted). */
	return rc ? rc : regq_init(&d->rq, &regq_verbs, c->pd, DST_REGQ_DEPTH, 0,
				   d->ss.wake_fd, &d->ss.err);
}

/* Listens for the extra channels (data channels, post-copy's) now so the
 * fd set is fixed from accept on; without them the migration still works
 * over one channel, without post-copy. */
static bool open_channels(struct rdmig_dest *d, struct fab_conn *c, unsigned want)
{
	unsigned max = d->ss.cfg.channels < PD_CHANNELS_MAX - CHAN_PC_MAX ?
		       d->ss.cfg.channels : PD_CHANNELS_MAX - CHAN_PC_MAX;
	struct rd_err e;

	if (chan_set_open(&d->chans, c, max, &e)) {
		cfg_log(&d->ss.cfg, RDMIG_LOG_WARN, "using one channel%s: %s",
			d->ss.cfg.postcopy ? ", without post-copy" : "", e.msg);
		return false;
	}
	d->req_channels = want;
	return true;
}

/* What authentication is bound to, from this side's view of @c. */
static int bind_connection(struct rdmig_dest *d, struct fab_conn *c,
			   const uint8_t acc[PD_ACCEPT_LEN])
{
	memset(&d->bind, 0, sizeof(d->bind));
	/* Decoded: that long. */
	d->bind.req_len = pd_kind(c->peer_priv, c->peer_priv_len) == PD_RESUME ? PD_RESUME_LEN :
			  PD_REQUEST_LEN;
	memcpy(d->bind.req, c->peer_priv, d->bind.req_len);
	memcpy(d->bind.acc, acc, PD_ACCEPT_LEN);
	d->bind.src_qpn = c->peer_qpn;
	d->bind.dst_qpn = fab_local_qpn(c);
	if (auth_addr(fab_peer_addr(c), d->bind.src_addr) ||
	    auth_addr(fab_local_addr(c), d->bind.dst_addr))
		return rd_err_set(&d->ss.err, -EAFNOSUPPORT, "the connection is neither IPv4 "
				  "nor IPv6");
	return 0;
}

void dst_link_begin(struct rdmig_dest *d, uint32_t caps)
{
	int hs = d->ss.cfg.timeout_ms < HANDSHAKE_MS_MAX ? d->ss.cfg.timeout_ms : HANDSHAKE_MS_MAX;

	d->ss.caps = caps;
	d->ss.stats.start_ms = rd_now_ms();
	d->ss.stats.st.status = RDMIG_STATUS_SETUP;
	d->handshake_deadline = d->ss.stats.start_ms + hs;
	dst_set_state(d, (caps & PD_CAP_AUTH) ? DST_AUTH : DST_WAIT_MAP);
}

/* A request we will not serve: rejected with its reason, nothing kept. */
static int turn_away(struct fab_conn *c, uint16_t reason, int rc)
{
	reject(c, reason);
	fab_conn_destroy(c);
	return rc;
}

int dst_link_accept(struct rdmig_dest *d, struct rdmig_listener *l, int timeout_ms)
{
	struct fab_caps caps = { .sq_depth = d->ss.cfg.ctrl_depth + 4,
				 .rq_depth = d->ss.cfg.ctrl_depth };
	struct pd_request req;
	struct pd_accept acc;
	struct pd_reject rej;
	struct fab_conn *c = NULL;
	uint8_t priv[PD_ACCEPT_LEN];
	uint32_t local = PD_CAP_PIN_ALL | PD_CAP_ZERO_PAGES | PD_CAP_VERIFY | PD_CAP_PAGES |
			 PD_CAP_PROGRESS | (d->ss.cfg.auth_key ? PD_CAP_AUTH : 0) |
			 (d->ss.cfg.state ? PD_CAP_STATE_RING : 0) | PD_CAP_STATE_BOUND |
			 (d->ss.cfg.channels > 1 ? PD_CAP_MULTI_CHANNEL : 0) |
			 (d->ss.cfg.postcopy ? PD_CAP_POSTCOPY : 0) |
			 /* Recovery needs somewhere to take the resume. */
			 (d->ss.cfg.postcopy && d->resume_l ? PD_CAP_POSTCOPY_RECOVER : 0);
	bool multi;
	int rc;

	rc = fab_get_request(l->fl, timeout_ms ? rd_deadline(timeout_ms) : 0, &c, &d->ss.err);
	if (rc)
		return rc;
	name_peer(d, c);
	rc = pd_decode_request(c->peer_priv, c->peer_priv_len, &req, &d->ss.err);
	if (rc)
		return turn_away(c, PD_REJ_BAD_REQUEST, rd_err_prefix(&d->ss.err, -EPROTO,
					"rejected a connection request"));
	if (req.resume)
		return turn_away(c, PD_REJ_UNAUTHORIZED, rd_err_set(&d->ss.err, -EACCES,
					"rejected a resume: no post-copy of this destination "
					"is paused"));
	rc = pd_negotiate(&req, PD_VERSION_MIN, PD_VERSION_MAX, local, d->ss.cfg.ctrl_depth,
			  d->ss.cfg.ctrl_msg_max, &acc, &rej, &d->ss.err);
	if (rc)
		return turn_away(c, rej.reason, rd_err_prefix(&d->ss.err, rc,
					"rejected a connection request"));
	if (d->ss.cfg.auth_key && !(acc.caps & PD_CAP_AUTH))
		return turn_away(c, PD_REJ_UNAUTHORIZED, rd_err_set(&d->ss.err, -EACCES,
					"rejected a connection request: the source offered no "
					"authentication (it has no key)"));
	/* Data channels where the source asked for several; post-copy's
	 * come through the same listener. */
	multi = (acc.caps & PD_CAP_MULTI_CHANNEL) && req.channels >= 2;
	if (!multi)
		acc.caps &= ~PD_CAP_MULTI_CHANNEL;
	if ((multi || (acc.caps & PD_CAP_POSTCOPY)) &&
	    !open_channels(d, c, multi ? req.channels : 1))
		acc.caps &= ~(PD_CAP_MULTI_CHANNEL | PD_CAP_POSTCOPY);
	/* The challenge exists before the connection does. */
	if (acc.caps & PD_CAP_AUTH) {
		auth_nonce(d->nonce);
		memcpy(acc.nonce, d->nonce, AUTH_NONCE_LEN);
	}
	d->ss.conn = c;
	rc = fab_accept(c, &caps, priv, pd_encode_accept(&acc, priv, sizeof(priv)),
			pre_accept, d);
	if (rc) {
		/* Not accepted yet: tell the source why instead of going silent. */
		if (c->state != FAB_ACCEPTING)
			reject(c, PD_REJ_NO_RESOURCES);
		return rc;
	}
	ctrl_start(&d->ss.ch, req.ctrl_depth, req.ctrl_msg_max);
	rc = bind_connection(d, c, priv);
	if (rc)
		return rc;
	dst_link_begin(d, acc.caps);
	cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "accepted a migration (protocol %u)", acc.version);
	{
		char asked[160], got[160];

		cfg_log(&d->ss.cfg, RDMIG_LOG_DEBUG, "capabilities asked: %s; granted: %s (local 0x%x)",
			pd_caps_str(req.caps, asked, sizeof(asked)),
			pd_caps_str(acc.caps, got, sizeof(got)), local);
	}
	return 0;
}

/* ---- authentication -------------------------------------------------- */

/* The source sends its challenge, then its answer to ours (which went out
 * in the ACCEPT); we answer only once its answer checks out, so a source
 * without the key learns nothing, not even our answer. */
int dst_link_auth(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	Rdmig__AuthResponse resp = RDMIG__AUTH_RESPONSE__INIT;
	const Rdmig__AuthResponse *r = (const Rdmig__AuthResponse *)m;
	const struct rdmig_config *c = &d->ss.cfg;
	uint8_t mac[AUTH_MAC_LEN];
	int rc;

	if (h->type == CT_AUTH_CHALLENGE && !d->have_peer_nonce) {
		const Rdmig__AuthChallenge *ch = (const Rdmig__AuthChallenge *)m;

		if (ch->nonce.len != AUTH_NONCE_LEN)
			return rd_err_set(&d->ss.err, -EPROTO, "the source's challenge has %zu "
					  "bytes", ch->nonce.len);
		if (!auth_nonce_acceptable(ch->nonce.data, d->nonce))
			return rd_err_set(&d->ss.err, -EACCES, "authentication failed: the "
					  "source's challenge is all zero or repeats ours");
		memcpy(d->bind.src_nonce, ch->nonce.data, AUTH_NONCE_LEN);
		d->have_peer_nonce = true;
		return 0;
	}
	if (h->type != CT_AUTH_RESPONSE || !d->have_peer_nonce)
		return rd_err_set(&d->ss.err, -EACCES, "authentication required: the source "
				  "sent %s instead", ctrl_type_name(h->type));
	if (auth_check(c->auth_key, c->auth_key_len, AUTH_SOURCE, &d->bind, r->mac.data,
		       r->mac.len))
		return rd_err_set(&d->ss.err, -EACCES, "authentication failed: the source does "
				  "not hold this destination's key, or its answer was made for "
				  "another connection");
	auth_mac(c->auth_key, c->auth_key_len, AUTH_DEST, &d->bind, mac);
	resp.mac.data = mac;
	resp.mac.len = AUTH_MAC_LEN;
	rc = sess_send(&d->ss, CT_AUTH_RESPONSE, &resp.base, "answer");
	if (rc)
		return rc;
	if (d->state == DST_PC_RESUMING)
		d->pc.authed = true;
	else
		dst_set_state(d, DST_WAIT_MAP);
	cfg_log(c, RDMIG_LOG_INFO, "authenticated the source");
	return 0;
}

/* ---- resuming a paused post-copy ------------------------------------------ */

/* The rings registered for the first connection serve the new one: its QP
 * is on the same PD. */
static int pre_resume(struct fab_conn *c, void *arg)
{
	struct rdmig_dest *d = arg;

	return ctrl_rebind(&d->ss.ch, c);
}

/* Why @req on @c cannot resume this post-copy (with the reason the source
 * is told), or NULL.  It must be a RESUME naming this migration (its token,
 * compared in constant time), ask for what was granted, take frames as
 * large as the ones we send, come through the device our memory is
 * registered with, and find the broken link's READs all back. */
static const char *resume_refusal(const struct rdmig_dest *d, const struct fab_conn *c,
				  const struct pd_request *req, uint16_t *reason)
{
	*reason = PD_REJ_BUSY;
	if (!req->resume)
		return "a new migration while a post-copy is paused";
	*reason = PD_REJ_UNAUTHORIZED;
	if (sodium_memcmp(req->token, d->pc.token, PD_TOKEN_LEN))
		return "a resume with the wrong token";
	*reason = PD_REJ_VERSION;
	if (req->ver_min > PD_VERSION_MAX)
		return "a resume in a protocol version this side does not speak";
	*reason = PD_REJ_CAPABILITY;
	if ((req->caps & d->ss.caps) != d->ss.caps)
		return "a resume that does not ask for the capabilities granted at first";
	if (req->ctrl_msg_max < d->ss.ch.peer_msg_max)
		return "a resume with smaller control messages than the first connection's";
	*reason = PD_REJ_NO_RESOURCES;
	if (c->id->verbs != d->pc.conn0->pd->context)
		return "a resume through another RDMA device than the memory's";
	*reason = PD_REJ_BUSY;
	if (!pcd_quiet(d->pc.eng))
		return "a resume before the broken link's reads came back (try again)";
	return NULL;
}

int dst_link_resume(struct rdmig_dest *d)
{
	int hs = d->ss.cfg.timeout_ms < HANDSHAKE_MS_MAX ? d->ss.cfg.timeout_ms : HANDSHAKE_MS_MAX;
	struct fab_caps caps = { .sq_depth = d->ss.cfg.ctrl_depth + 4,
				 .rq_depth = d->ss.cfg.ctrl_depth, .pd = d->pc.conn0->pd };
	struct pd_accept acc = { .version = PD_VERSION_MAX, .caps = d->ss.caps,
				 .ctrl_depth = d->ss.ch.depth, .ctrl_msg_max = d->ss.ch.msg_max };
	struct fab_conn *c = NULL, *old = d->ss.conn;
	uint8_t priv[PD_ACCEPT_LEN];
	struct pd_request req;
	const char *why;
	uint16_t reason;
	struct rd_err e;
	int rc;

	rc = fab_get_request(d->resume_l->fl, 0, &c, &e);
	if (rc == -EAGAIN)
		return 0;
	if (rc)
		return rd_err_set(&d->ss.err, rc, "waiting for the source to resume: %s", e.msg);
	rc = pd_decode_request(c->peer_priv, c->peer_priv_len, &req, &e);
	reason = PD_REJ_BAD_REQUEST;
	why = rc ? e.msg : resume_refusal(d, c, &req, &reason);
	if (why) {
		cfg_log(&d->ss.cfg, RDMIG_LOG_WARN, "post-copy paused: refused a connection "
			"request: %s", why);
		turn_away(c, reason, 0);
		return 0;
	}
	if (req.ver_max < acc.version)
		acc.version = req.ver_max;
	/* A new challenge: an answer to the first connection's proves nothing
	 * here, and the answer is bound to this RESUME, token included. */
	if (acc.caps & PD_CAP_AUTH) {
		auth_nonce(d->nonce);
		memcpy(acc.nonce, d->nonce, AUTH_NONCE_LEN);
	}
	fab_conn_set_err(c, &d->ss.err);
	rc = fab_accept(c, &caps, priv, pd_encode_accept(&acc, priv, sizeof(priv)), pre_resume,
			d);
	/* Its QP is on the PD where the guest's memory stays registered for
	 * remote writing, and in RTS before the challenge: nothing but
	 * messages comes over a resume (the device state came before the
	 * switch), so nothing else is let in, proof or not.  The peer learns
	 * the QP's number only from the accept, after which this follows at
	 * once. */
	if (!rc)
		rc = fab_qp_sends_only(c);
	if (rc) {
		if (c->state != FAB_ACCEPTING)
			reject(c, PD_REJ_NO_RESOURCES);
		cfg_log(&d->ss.cfg, RDMIG_LOG_WARN, "post-copy paused: could not accept the "
			"source's resume: %s", d->ss.err.msg);
		fab_conn_destroy(c);
		d->ss.ch.conn = old;
		return 0;
	}
	/* The broken link's connections go, but the first: its PD holds every
	 * registration. */
	d->ss.conn = c;
	if (old != d->pc.conn0)
		fab_conn_destroy(old);
	chan_set_destroy(d->chans);
	d->chans = NULL;
	ctrl_start(&d->ss.ch, req.ctrl_depth, d->ss.ch.peer_msg_max);
	name_peer(d, c);
	d->have_peer_nonce = false;
	d->pc.authed = !(acc.caps & PD_CAP_AUTH);
	d->pc.resumed_sent = false;
	d->handshake_deadline = rd_now_ms() + hs;
	dst_set_state(d, DST_PC_RESUMING);
	rc = bind_connection(d, c, priv);
	if (rc)
		return rc;
	cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "the source %s resumes the post-copy", d->peer);
	return 1;
}

