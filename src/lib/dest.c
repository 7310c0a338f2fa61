/* dest: the receiving side of a migration, as a non-blocking state machine.
 *
 * rdmig_dest_process() handles pending CM events and completions, up to a
 * bound (drain_cq), and returns; rdmig_dest_run() is that in a poll()
 * loop.  The destination never
 * writes its memory itself except to clear zero ranges: the source's RDMA
 * WRITEs do that, into memory this side registered.  This file holds the
 * connection, authentication and the API; dst_map.c the block map and what
 * fills the blocks.  The migration only counts as complete when COMPLETE
 * arrives with counters matching what was received, and is reported so once
 * the confirmation reached the source. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "dest.h"
#include "privdata.h"
#include "rdmig.h"

#define DEST_CHANNELS_DEFAULT 8
/* The handshake (authentication and block map) gets this long at most from
 * the accept, whatever the peer sends meanwhile: a peer that never proves
 * itself must not hold a connection by sending keepalives. */
#define HANDSHAKE_MS_MAX 10000
/* What one rdmig_dest_process() handles at most besides its time budget
 * (step_us): a ring's worth of messages at the default depth, and twice
 * that of completions (each message may cost a send).  The rest waits for
 * the next call, which the timeout (0) asks for at once; an event loop
 * serving other migrations, deadlines and signals gets its turn between.
 * See rdmig(3), "Bounded steps". */
#define DST_STEP_MSGS 32
#define DST_STEP_WCS 64

struct rdmig_listener {
	struct fab_listener *fl;
};

/* ---- listener ---------------------------------------------------------- */

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

/* ---- setup ------------------------------------------------------------- */

int rdmig_dest_create(struct rdmig_dest **out, const struct rdmig_config *cfg)
{
	struct rdmig_dest *d = calloc(1, sizeof(*d));
	int rc;

	*out = NULL;
	if (!d)
		return -ENOMEM;
	rc = sess_init(&d->ss, cfg, "source");
	if (!d->ss.cfg.channels)
		d->ss.cfg.channels = DEST_CHANNELS_DEFAULT;
	if (rc) {
		d->state = DST_FAILED;
		d->result = rc;
	}
	*out = d;
	return rc;
}

const char *rdmig_dest_error(const struct rdmig_dest *d)
{
	/* Creation reports its failure through the handle, except for ENOMEM. */
	return d ? d->ss.err.msg : "out of memory";
}

int dst_add_block(struct rdmig_dest *d, const char *name, void *host, uint64_t length,
		  int zeroed)
{
	struct dst_block *nb;

	nb = realloc(d->blocks, (d->nblocks + 1) * sizeof(*nb));
	if (!nb)
		return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	d->blocks = nb;
	nb = &d->blocks[d->nblocks];
	memset(nb, 0, sizeof(*nb));
	snprintf(nb->d.name, sizeof(nb->d.name), "%s", name);
	nb->d.length = length;
	nb->host = host;
	nb->zeroed = zeroed;
	return (int)d->nblocks++;
}

int rdmig_dest_add_block(struct rdmig_dest *d, const char *name, void *host,
			 uint64_t length, int zeroed)
{
	unsigned i;
	int rc;

	if (d->state != DST_NEW)
		return rd_err_set(&d->ss.err, -EINVAL, "blocks must be added before accepting");
	rc = blk_name_valid(name, &d->ss.err);
	if (rc)
		return rc;
	if (!host || !length)
		return rd_err_set(&d->ss.err, -EINVAL, "block \"%s\": bad address or length",
				  name);
	if (d->nblocks >= BLK_MAX)
		return rd_err_set(&d->ss.err, -E2BIG, "too many blocks (limit %d)", BLK_MAX);
	for (i = 0; i < d->nblocks; i++)
		if (!strcmp(d->blocks[i].d.name, name))
			return rd_err_set(&d->ss.err, -EEXIST, "block \"%s\" added twice", name);
	return dst_add_block(d, name, host, length, zeroed);
}

static int fail(struct rdmig_dest *d, int rc)
{
	if (d->state == DST_FAILED)
		return d->result;
	d->state = DST_FAILED;
	d->result = sess_fail(&d->ss, rc);
	chan_set_disconnect(d->chans);
	pop_stop(&d->pop);
	rp_stop(&d->reg);
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.status = d->result == -ECANCELED ? RDMIG_STATUS_CANCELLED :
				RDMIG_STATUS_FAILED;
	pthread_mutex_unlock(&d->ss.stats.lock);
	return d->result;
}

int dst_send(struct rdmig_dest *d, unsigned type, const ProtobufCMessage *m,
	     const char *what)
{
	int rc = ctrl_send(&d->ss.ch, type, m);

	/* The source only asks within its credits: no room is its fault. */
	return rc == -EAGAIN ? rd_err_set(&d->ss.err, -EPROTO, "no credit to %s", what) : rc;
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
	return rc;
}

/* Listens for the extra channels now so the fd set is fixed from accept on;
 * without them the migration still works over one channel. */
static bool open_channels(struct rdmig_dest *d, struct fab_conn *c, unsigned want)
{
	struct rd_err e;

	if (want < 2)
		return false;
	if (chan_set_open(&d->chans, c, d->ss.cfg.channels, &e)) {
		cfg_log(&d->ss.cfg, RDMIG_LOG_WARN, "using one channel: %s", e.msg);
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
	memcpy(d->bind.req, c->peer_priv, PD_REQUEST_LEN); /* decoded: that long */
	memcpy(d->bind.acc, acc, PD_ACCEPT_LEN);
	d->bind.src_qpn = c->peer_qpn;
	d->bind.dst_qpn = fab_local_qpn(c);
	if (auth_addr(fab_peer_addr(c), d->bind.src_addr) ||
	    auth_addr(fab_local_addr(c), d->bind.dst_addr))
		return rd_err_set(&d->ss.err, -EAFNOSUPPORT, "the connection is neither IPv4 "
				  "nor IPv6");
	return 0;
}

/* The state right after the accept: the first frame may arrive now. */
static void begin_session(struct rdmig_dest *d, uint32_t caps)
{
	int hs = d->ss.cfg.timeout_ms < HANDSHAKE_MS_MAX ? d->ss.cfg.timeout_ms : HANDSHAKE_MS_MAX;

	d->ss.caps = caps;
	d->ss.stats.start_ms = rd_now_ms();
	d->ss.stats.st.status = RDMIG_STATUS_SETUP;
	d->handshake_deadline = d->ss.stats.start_ms + hs;
	d->state = (caps & PD_CAP_AUTH) ? DST_AUTH : DST_WAIT_MAP;
}

/* A request we will not serve: rejected with its reason, nothing kept. */
static int turn_away(struct fab_conn *c, uint16_t reason, int rc)
{
	reject(c, reason);
	fab_conn_destroy(c);
	return rc;
}

int rdmig_dest_accept(struct rdmig_dest *d, struct rdmig_listener *l, int timeout_ms)
{
	struct fab_caps caps = { .sq_depth = d->ss.cfg.ctrl_depth + 4,
				 .rq_depth = d->ss.cfg.ctrl_depth };
	struct pd_request req;
	struct pd_accept acc;
	struct pd_reject rej;
	struct fab_conn *c = NULL;
	uint8_t priv[PD_ACCEPT_LEN];
	uint32_t local = PD_CAP_PIN_ALL | PD_CAP_ZERO_PAGES | PD_CAP_VERIFY | PD_CAP_PAGES |
			 (d->ss.cfg.auth_key ? PD_CAP_AUTH : 0) |
			 (d->ss.cfg.channels > 1 ? PD_CAP_MULTI_CHANNEL : 0);
	int rc;

	if (d->state != DST_NEW)
		return d->state == DST_FAILED ? d->result :
		       rd_err_set(&d->ss.err, -EISCONN, "already accepted a connection");
	rc = fab_get_request(l->fl, timeout_ms ? rd_deadline(timeout_ms) : 0, &c, &d->ss.err);
	if (rc)
		return rc;
	name_peer(d, c);
	rc = pd_decode_request(c->peer_priv, c->peer_priv_len, &req, &d->ss.err);
	if (rc)
		return turn_away(c, PD_REJ_BAD_REQUEST, rd_err_prefix(&d->ss.err, -EPROTO,
					"rejected a connection request"));
	rc = pd_negotiate(&req, PD_VERSION_MIN, PD_VERSION_MAX, local, d->ss.cfg.ctrl_depth,
			  d->ss.cfg.ctrl_msg_max, &acc, &rej, &d->ss.err);
	if (rc)
		return turn_away(c, rej.reason, rd_err_prefix(&d->ss.err, rc,
					"rejected a connection request"));
	if (d->ss.cfg.auth_key && !(acc.caps & PD_CAP_AUTH))
		return turn_away(c, PD_REJ_UNAUTHORIZED, rd_err_set(&d->ss.err, -EACCES,
					"rejected a connection request: the source offered no "
					"authentication (it has no key)"));
	if ((acc.caps & PD_CAP_MULTI_CHANNEL) && !open_channels(d, c, req.channels))
		acc.caps &= ~PD_CAP_MULTI_CHANNEL;
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
		return fail(d, sess_conn_err(&d->ss, rc));
	}
	ctrl_start(&d->ss.ch, req.ctrl_depth, req.ctrl_msg_max);
	rc = bind_connection(d, c, priv);
	if (rc)
		return fail(d, rc);
	begin_session(d, acc.caps);
	cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "accepted a migration (protocol %u)", acc.version);
	return 0;
}

/* ---- authentication -------------------------------------------------- */

/* The source sends its challenge, then its answer to ours (which went out
 * in the ACCEPT); we answer only once its answer checks out, so a source
 * without the key learns nothing, not even our answer. */
static int on_auth(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m)
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
	rc = dst_send(d, CT_AUTH_RESPONSE, &resp.base, "answer");
	if (rc)
		return rc;
	d->state = DST_WAIT_MAP;
	cfg_log(c, RDMIG_LOG_INFO, "authenticated the source");
	return 0;
}

static int handle_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	if (h->type == CT_CREDIT || h->type == CT_KEEPALIVE)
		return 0;
	if (h->type == CT_ERROR)
		return sess_peer_error(&d->ss, (const Rdmig__Error *)m);
	switch (d->state) {
	case DST_AUTH:
		return on_auth(d, h, m);
	case DST_WAIT_MAP:
		if (h->type != CT_BLOCK_MAP_REQ)
			return rd_err_set(&d->ss.err, -EPROTO, "expected BLOCK_MAP_REQ, got %s",
					  ctrl_type_name(h->type));
		return dst_on_block_map(d, (const Rdmig__BlockMapReq *)m);
	case DST_RUNNING:
		return dst_running_msg(d, h, m);
	default:
		return rd_err_set(&d->ss.err, -EPROTO, "unexpected %s after completion",
				  ctrl_type_name(h->type));
	}
}

/* ---- driving ----------------------------------------------------------- */

/* 1 when a message was delivered and handled, 0 for any other completion. */
static int handle_wc(struct rdmig_dest *d, const struct ibv_wc *wc)
{
	struct ctrl_hdr h;
	ProtobufCMessage *m;
	int rc;

	if (!ctrl_owns(wc))
		return rd_err_set(&d->ss.err, -EPROTO, "completion for an unknown request");
	/* Once COMPLETE_ACK is posted the source may disconnect, flushing our
	 * idle receives; only the ACK's own completion still matters. */
	if (d->state == DST_FLUSHING && wc->status == IBV_WC_WR_FLUSH_ERR &&
	    fab_tag_of(wc)->kind == CTRL_TAG_RECV)
		return 0;
	rc = ctrl_complete(&d->ss.ch, wc, &h, &m);
	if (rc <= 0)
		return rc;
	rc = handle_msg(d, &h, m);
	/* A ZERO_RANGES worked off over several steps lives on until then. */
	if (rc == 0 && d->zero.z)
		d->zero_msg = m;
	else
		ctrl_msg_done(&d->ss.ch, m);
	return rc < 0 ? rc : 1;
}

static int step_channels(struct rdmig_dest *d)
{
	char note[RD_ERRLEN] = "";
	int rc = chan_set_process(d->chans, note, sizeof(note), &d->ss.err);

	if (note[0])
		cfg_log(&d->ss.cfg, RDMIG_LOG_WARN, "%s", note);
	/* Once COMPLETE_ACK is out, the source closing its channels is normal. */
	return d->state == DST_FLUSHING ? 0 : rc;
}

/* The next completion: from the batch in hand, else polled.  0 once the CQ
 * is empty, and re-armed then, so its fd tells of the next one. */
static int next_wc(struct rdmig_dest *d, const struct ibv_wc **wc)
{
	int n, rc;

	if (d->wc_next == d->wc_n) {
		n = fab_poll(d->ss.conn, d->wcs, (int)RD_ARRAY_SIZE(d->wcs));
		if (n == 0) {
			rc = fab_cq_rearm(d->ss.conn);
			if (rc)
				return sess_conn_err(&d->ss, rc);
			n = fab_poll(d->ss.conn, d->wcs, (int)RD_ARRAY_SIZE(d->wcs));
		}
		if (n <= 0)
			return n < 0 ? sess_conn_err(&d->ss, n) : 0;
		d->wc_n = (unsigned)n;
		d->wc_next = 0;
	}
	*wc = &d->wcs[d->wc_next++];
	return 1;
}

/* The ZERO_RANGES in hand, worked on until it is done (1) or the step's
 * time is up (0); its message is let go once it is done. */
static int finish_zero(struct rdmig_dest *d, int64_t until)
{
	int rc;

	if (!d->zero.z)
		return 1;
	rc = dst_zero_step(d, until);
	if (rc > 0 && d->zero_msg) {
		ctrl_msg_done(&d->ss.ch, d->zero_msg);
		d->zero_msg = NULL;
	}
	return rc;
}

/* Completions until the CQ is empty or this step's share is used up:
 * DST_STEP_WCS completions, DST_STEP_MSGS messages, or its time, read after
 * each message and between slices of zero ranges.  A source can keep the
 * CQ from ever emptying (every ITER_ACK hands its credits back for more
 * ZERO_RANGES and ITER_END): draining to the end would never return.
 * d->more says whether work was left. */
static int drain_cq(struct rdmig_dest *d, int64_t until)
{
	const struct ibv_wc *wc = NULL;
	unsigned wcs = 0, msgs = 0;
	int rc;

	d->more = true;
	for (;;) {
		rc = finish_zero(d, until);
		if (rc <= 0)
			return rc;
		if (wcs == DST_STEP_WCS || msgs == DST_STEP_MSGS || (msgs && rd_now_us() > until))
			return 0;
		rc = next_wc(d, &wc);
		if (rc <= 0) {
			d->more = rc < 0;
			return rc;
		}
		wcs++;
		rc = handle_wc(d, wc);
		if (rc < 0)
			return rc;
		msgs += (unsigned)rc;
	}
}

static int step(struct rdmig_dest *d)
{
	int64_t until = rd_now_us() + d->ss.cfg.step_us;
	uint64_t buf;
	int rc, i, cm_rc = 0;

	if (read(d->ss.wake_fd, &buf, sizeof(buf)) < 0) {
		/* Nothing to read: not cancelled. */
	}
	/* Once COMPLETE_ACK is posted the outcome is the source's to learn:
	 * a cancel now would contradict a confirmation on its way. */
	rc = d->state < DST_FLUSHING ? sess_check_cancel(&d->ss) : 0;
	if (rc)
		return rc;
	/* The CM fd is level-triggered: a few events per step is enough. */
	for (i = 0; i < 4 && !cm_rc; i++)
		cm_rc = fab_cm_process(d->ss.conn);
	if (cm_rc && !d->cm_rc)
		d->cm_rc = cm_rc;
	/* Even after a disconnect, drain the CQ first: the source's last
	 * message (an ERROR saying why) may be waiting there, possibly
	 * behind more than one step's worth. */
	rc = drain_cq(d, until);
	if (rc)
		return rc;
	if (d->cm_rc && !d->more)
		return d->state == DST_FLUSHING ? 0 : sess_conn_err(&d->ss, d->cm_rc);
	if (d->chans) {
		rc = step_channels(d);
		if (rc)
			return rc;
	}
	rc = dst_populate_check(d);
	if (!rc)
		rc = dst_pin_step(d);
	if (rc >= 0)
		rc = dst_verify_step(d, until);
	if (rc < 0)
		return rc;
	return ctrl_return_credits(&d->ss.ch, false);
}

static int finish(struct rdmig_dest *d)
{
	d->state = DST_DONE;
	pop_stop(&d->pop);
	chan_set_disconnect(d->chans);
	fab_disconnect(d->ss.conn);
	pthread_mutex_lock(&d->ss.stats.lock);
	stats_refresh(&d->ss.stats);
	d->ss.stats.st.status = RDMIG_STATUS_COMPLETED;
	pthread_mutex_unlock(&d->ss.stats.lock);
	cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "migration complete: %u iterations, %" PRIu64
		" state bytes", d->iteration, d->state_bytes);
	return 1;
}

static int check_deadlines(struct rdmig_dest *d)
{
	int64_t now = rd_now_ms();

	if (d->state < DST_RUNNING && now > d->handshake_deadline)
		return rd_err_set(&d->ss.err, -ETIMEDOUT, "the source did not %s within "
				  "%" PRId64 " ms of connecting", d->state == DST_AUTH ?
				  "authenticate" : "send its block map",
				  d->handshake_deadline - d->ss.stats.start_ms);
	if (now - d->ss.ch.last_recv_ms > d->ss.cfg.timeout_ms)
		return rd_err_set(&d->ss.err, -ETIMEDOUT, "the source was silent for %d ms",
				  d->ss.cfg.timeout_ms);
	return d->state >= DST_WAIT_MAP ? sess_keepalive(&d->ss) : 0;
}

int rdmig_dest_process(struct rdmig_dest *d)
{
	int rc;

	if (d->state == DST_FAILED)
		return d->result;
	if (d->state == DST_DONE)
		return 1;
	if (d->state == DST_NEW)
		return rd_err_set(&d->ss.err, -ENOTCONN, "no connection accepted");
	rc = step(d);
	/* What other threads may read goes through the lock. */
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.ctrl_sent = d->ss.ch.sent;
	d->ss.stats.st.ctrl_received = d->ss.ch.received;
	pthread_mutex_unlock(&d->ss.stats.lock);
	if (rc < 0) {
		if (rc == -ECONNRESET && d->state != DST_FLUSHING)
			rd_err_set(&d->ss.err, rc, "the source disconnected before completing the "
				   "migration: the image is incomplete");
		return fail(d, rc);
	}
	/* The ACK's send completed: the source holds the confirmation. */
	if (d->state == DST_FLUSHING && !ctrl_sends_busy(&d->ss.ch))
		return finish(d);
	rc = check_deadlines(d);
	return rc ? fail(d, rc) : 0;
}

int rdmig_dest_fds(const struct rdmig_dest *d, int *fds, int max)
{
	int n = 0;

	if (!d->ss.conn || max < (d->chans ? 4 : 3))
		return 0;
	fds[n++] = fab_cm_fd(d->ss.conn);
	fds[n++] = fab_cq_fd(d->ss.conn);
	fds[n++] = d->ss.wake_fd;
	if (d->chans)
		fds[n++] = chan_set_fd(d->chans);
	return n;
}

int rdmig_dest_timeout(const struct rdmig_dest *d)
{
	int64_t now = rd_now_ms();
	int64_t t1 = d->ss.ch.last_recv_ms + d->ss.cfg.timeout_ms - now;
	int64_t t2 = d->ss.ch.last_send_ms + d->ss.cfg.keepalive_ms - now;
	int64_t t = t1 < t2 ? t1 : t2;

	if (d->state == DST_DONE || d->state == DST_FAILED)
		return -1;
	/* The last step stopped at its cap: the CQ was not emptied (nor
	 * re-armed), so its fd may never become readable for what waits. */
	if (d->more)
		return 0;
	/* Pin-all pieces registered, or keys to send; the helpers write the
	 * wake fd for the pieces still to come. */
	if (dst_pin_ready(d))
		return 0;
	if (d->state < DST_RUNNING && d->handshake_deadline - now < t)
		t = d->handshake_deadline - now;
	if (d->state == DST_FLUSHING)
		return 10;
	/* Hashing goes on at once, unless the ACK waits for a credit. */
	if (dst_verify_ready(d))
		return 0;
	/* A keepalive that is due but has no credit waits for the fd. */
	if (t2 <= 0 && !ctrl_can_send(&d->ss.ch))
		t = t1;
	return t < 0 ? 0 : (int)(t > 1000 ? 1000 : t);
}

int rdmig_dest_run(struct rdmig_dest *d)
{
	struct pollfd pfd[RDMIG_DEST_MAX_FDS];
	int rc, n, fds[RDMIG_DEST_MAX_FDS], i;

	for (;;) {
		rc = rdmig_dest_process(d);
		if (rc)
			return rc > 0 ? 0 : rc;
		n = rdmig_dest_fds(d, fds, RDMIG_DEST_MAX_FDS);
		for (i = 0; i < n; i++)
			pfd[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		poll(pfd, (nfds_t)n, rdmig_dest_timeout(d));
	}
}

void rdmig_dest_stats(struct rdmig_dest *d, struct rdmig_stats *st)
{
	struct rdmig_stats all;

	pthread_mutex_lock(&d->ss.stats.lock);
	if (d->ss.stats.st.status != RDMIG_STATUS_COMPLETED)
		stats_refresh(&d->ss.stats);
	all = d->ss.stats.st;
	pthread_mutex_unlock(&d->ss.stats.lock);
	sess_stats_out(&all, st);
}

void rdmig_dest_cancel(struct rdmig_dest *d, const char *reason)
{
	sess_cancel(&d->ss, reason ? reason : "no reason given");
}

int rdmig_dest_nblocks(const struct rdmig_dest *d)
{
	return (int)d->nblocks;
}

int rdmig_dest_block(const struct rdmig_dest *d, unsigned idx, const char **name,
		     void **host, uint64_t *length)
{
	if (idx >= d->nblocks)
		return -EINVAL;
	*name = d->blocks[idx].d.name;
	*host = d->blocks[idx].host;
	*length = d->blocks[idx].d.length;
	return 0;
}

int rdmig_dest_peer(const struct rdmig_dest *d, char *buf, size_t len)
{
	if (!d->peer[0] || !len)
		return -ENOTCONN;
	snprintf(buf, len, "%s", d->peer);
	return 0;
}

void rdmig_dest_destroy(struct rdmig_dest *d)
{
	if (!d)
		return;
	/* The channels' QPs use the control connection's PD and CQ. */
	chan_set_destroy(d->chans);
	fab_disconnect(d->ss.conn);
	if (d->zero_msg)
		ctrl_msg_done(&d->ss.ch, d->zero_msg);
	dst_map_destroy(d);
	sess_fini(&d->ss);
	free(d->blocks);
	free(d->map);
	free(d);
}
