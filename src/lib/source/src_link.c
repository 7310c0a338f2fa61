#include "src_link.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "chan.h"
#include "codec.h"
#include "privdata.h"
#include "src_chan.h"
#include "src_int.h"
#include "src_mem.h"
#include "src_pc.h"
#include "src_state.h"

/* ---- connecting ------------------------------------------------------------ */

/* Before rdma_connect: the control rings, registered by the helpers (a
 * step must not spend the 10-20 ms it costs under emulation), then every
 * receive posted.  The PD and CQ exist now: the helpers register on the
 * PD, and the one fd the caller watches must see the CQ (the helpers wake
 * it when they are done). */
static int pre_connect(struct fab_conn *c, void *arg)
{
	struct rdmig_source *s = arg;
	struct ctrl *ch = &s->ss.ch;
	int rc;

	if (!s->ctrl_submitted) {
		rc = ctrl_prepare(ch, c, s->ss.cfg.ctrl_depth, s->ss.cfg.ctrl_msg_max,
				  &s->ss.err);
		if (!rc)
			rc = src_mem_reg_start(s, c->pd);
		if (!rc)
			rc = sess_watch(&s->ss, fab_cq_fd(c));
		if (!rc)
			rc = regq_submit(&s->rq, ch->rbuf, ctrl_ring_bytes(ch),
					 IBV_ACCESS_LOCAL_WRITE, -1, SRC_REG_COOKIE(REG_CTRL, 0),
					 &s->ss.err);
		if (!rc)
			rc = regq_submit(&s->rq, ch->sbuf, ctrl_ring_bytes(ch),
					 IBV_ACCESS_LOCAL_WRITE, -1, SRC_REG_COOKIE(REG_CTRL, 1),
					 &s->ss.err);
		s->ctrl_submitted = rc == 0;
		return rc ? rc : FAB_PRE_WAIT;
	}
	if (!ch->rmr || !ch->smr)
		return FAB_PRE_WAIT;
	rc = ctrl_post_receives(ch);
	s->ss.ctrl_ready = rc == 0;
	return rc;
}

int src_link_ctrl_reg_done(struct rdmig_source *s, const struct regq_job *j)
{
	if (j->rc) {
		fab_reg_error(&s->ss.err, j->rc, j->len);
		return rd_err_prefix(&s->ss.err, j->rc, "the control channel's %s ring",
				     SRC_REG_N(j->cookie) ? "send" : "receive");
	}
	if (SRC_REG_N(j->cookie))
		s->ss.ch.smr = j->mr;
	else
		s->ss.ch.rmr = j->mr;
	return 0;
}

static uint32_t requested_caps(const struct rdmig_source *s)
{
	const struct rdmig_config *c = &s->ss.cfg;

	return (c->pin_all ? PD_CAP_PIN_ALL : 0) | (c->zero_pages ? PD_CAP_ZERO_PAGES : 0) |
	       (c->auth_key ? PD_CAP_AUTH : 0) | (c->verify ? PD_CAP_VERIFY : 0) |
	       (c->channels > 1 ? PD_CAP_MULTI_CHANNEL : 0) | (c->pin_all ? 0 : PD_CAP_PAGES) |
	       PD_CAP_PROGRESS | PD_CAP_STATE_RING |
	       (c->state_max != RDMIG_STATE_UNSAID ? PD_CAP_STATE_BOUND : 0) |
	       /* A paused post-copy resumes if the destination can take it. */
	       (c->postcopy ? PD_CAP_POSTCOPY | PD_CAP_POSTCOPY_RECOVER : 0);
}

int src_link_prepare(struct rdmig_source *s, const char *host, const char *port)
{
	if (snprintf(s->host, sizeof(s->host), "%s", host) >= (int)sizeof(s->host) ||
	    snprintf(s->port, sizeof(s->port), "%s", port) >= (int)sizeof(s->port))
		return rd_err_set(&s->ss.err, -EINVAL, "host or port too long");
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.start_ms = rd_now_ms();
	s->ss.stats.st.status = RDMIG_STATUS_SETUP;
	pthread_mutex_unlock(&s->ss.stats.lock);
	src_set_state(s, SRC_CONNECTING);
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "connecting to %s:%s", host, port);
	return 0;
}

static int link_start(struct rdmig_source *s)
{
	const struct rdmig_config *c = &s->ss.cfg;
	/* The data channels share this CQ: room for their send queues too. */
	struct fab_caps caps = { .sq_depth = c->max_writes + c->ctrl_depth + 4 +
					     SRC_STATE_WRITES,
				 .rq_depth = c->ctrl_depth,
				 .cq_depth = c->max_writes + 2 * c->ctrl_depth + 4 +
					     SRC_STATE_WRITES +
					     (c->channels - 1) * (c->max_writes + 4) };
	struct pd_request req = { .ver_min = PD_VERSION_MIN, .ver_max = PD_VERSION_MAX,
				  .caps = requested_caps(s), .ctrl_depth = c->ctrl_depth,
				  .ctrl_msg_max = c->ctrl_msg_max,
				  .channels = (uint16_t)c->channels };
	int rc;

	s->bind.req_len = pd_encode_request(&req, s->bind.req, sizeof(s->bind.req));
	rc = fab_connect_start(&s->ss.conn, s->host, s->port, &caps, s->bind.req,
			       s->bind.req_len, pre_connect, s,
			       rd_deadline(c->timeout_ms), &s->ss.err);
	if (!rc)
		rc = sess_watch(&s->ss, fab_cm_fd(s->ss.conn));
	return rc;
}

static int decode_reject(struct rdmig_source *s)
{
	struct fab_conn *c = s->ss.conn;
	struct pd_reject rej;
	struct rd_err tmp;

	if (c->peer_priv_len && pd_kind(c->peer_priv, c->peer_priv_len) == PD_REJECT &&
	    pd_decode_reject(c->peer_priv, c->peer_priv_len, &rej, &tmp) == 0)
		return sess_peer_refused(&s->ss, pd_reject_error(&rej, PD_VERSION_MIN,
								 PD_VERSION_MAX, &s->ss.err));
	/* A consumer reject without our payload comes from the kernel cleaning
	 * up after a destination process that went away: not a refusal. */
	if (strstr(s->ss.err.msg, "rejected by the peer"))
		return rd_err_set(&s->ss.err, -ECONNREFUSED, "the destination dropped the "
				  "connection request without a reason (did it exit?)");
	return -ECONNREFUSED; /* the CM's own reason is already in err */
}

/* The destination's ACCEPT: what was granted must have been asked for. */
static int check_accept(struct rdmig_source *s, const struct pd_accept *acc)
{
	uint32_t asked = requested_caps(s);

	if (acc->version < PD_VERSION_MIN || acc->version > PD_VERSION_MAX)
		return rd_err_set(&s->ss.err, -EPROTONOSUPPORT, "the destination chose "
				  "protocol version %u, this side speaks %u..%u", acc->version,
				  PD_VERSION_MIN, PD_VERSION_MAX);
	if (acc->caps & ~asked)
		return rd_err_set(&s->ss.err, -EPROTO, "the destination granted capabilities "
				  "that were not requested (0x%x)", acc->caps & ~asked);
	if (s->ss.cfg.pin_all && !(acc->caps & PD_CAP_PIN_ALL))
		return rd_err_set(&s->ss.err, -EPROTO, "the destination does not allow pin-all");
	/* Our memory goes only to a destination that proves it holds the key. */
	if (s->ss.cfg.auth_key && !(acc->caps & PD_CAP_AUTH))
		return rd_err_set(&s->ss.err, -EACCES, "the destination does not authenticate: "
				  "give it the same key (--auth-key)");
	if (s->ss.cfg.verify && !(acc->caps & PD_CAP_VERIFY))
		return rd_err_set(&s->ss.err, -EPROTO, "the destination cannot verify the image");
	return 0;
}

/* What authentication is bound to, from this side's view of the
 * connection: the destination computes the same from its own. */
static int bind_connection(struct rdmig_source *s)
{
	struct fab_conn *c = s->ss.conn;

	memcpy(s->bind.acc, c->peer_priv, PD_ACCEPT_LEN); /* decoded: that long */
	s->bind.src_qpn = fab_local_qpn(c);
	s->bind.dst_qpn = c->peer_qpn;
	if (auth_addr(fab_local_addr(c), s->bind.src_addr) ||
	    auth_addr(fab_peer_addr(c), s->bind.dst_addr))
		return rd_err_set(&s->ss.err, -EAFNOSUPPORT, "the connection is neither IPv4 "
				  "nor IPv6");
	return 0;
}

/* Answers the challenge from the ACCEPT and challenges back.  Our answer
 * is bound to this connection: whoever collects it, posing as a
 * destination, cannot use it on another. */
static int send_auth(struct rdmig_source *s)
{
	Rdmig__AuthChallenge ch = RDMIG__AUTH_CHALLENGE__INIT;
	Rdmig__AuthResponse resp = RDMIG__AUTH_RESPONSE__INIT;
	uint8_t mac[AUTH_MAC_LEN];
	int rc = bind_connection(s);

	if (rc)
		return rc;
	auth_nonce(s->bind.src_nonce);
	if (!auth_nonce_acceptable(s->challenge, s->bind.src_nonce))
		return rd_err_set(&s->ss.err, -EACCES, "the destination's challenge is all "
				  "zero or repeats ours: not answering it (is it an impostor "
				  "collecting answers?)");
	auth_mac(s->ss.cfg.auth_key, s->ss.cfg.auth_key_len, AUTH_SOURCE, &s->bind, mac);
	ch.nonce.data = s->bind.src_nonce;
	ch.nonce.len = AUTH_NONCE_LEN;
	resp.mac.data = mac;
	resp.mac.len = AUTH_MAC_LEN;
	/* Right after connecting every credit is ours: none left is a bug. */
	rc = sess_send(&s->ss, CT_AUTH_CHALLENGE, &ch.base, "send AUTH_CHALLENGE");
	return rc ? rc : sess_send(&s->ss, CT_AUTH_RESPONSE, &resp.base, "send AUTH_RESPONSE");
}

static int send_block_map(struct rdmig_source *s);

static int on_connected(struct rdmig_source *s)
{
	struct fab_conn *c = s->ss.conn;
	struct pd_accept acc;
	int rc = pd_decode_accept(c->peer_priv, c->peer_priv_len, &acc, &s->ss.err);

	if (rc)
		return rd_err_prefix(&s->ss.err, rc, "the destination's answer");
	rc = check_accept(s, &acc);
	if (rc)
		return rc;
	s->ss.caps = acc.caps;
	{
		char asked[160], got[160];

		cfg_log(&s->ss.cfg, RDMIG_LOG_DEBUG, "capabilities asked: %s; granted: %s",
			pd_caps_str(requested_caps(s), asked, sizeof(asked)),
			pd_caps_str(acc.caps, got, sizeof(got)));
	}
	ctrl_start(&s->ss.ch, acc.ctrl_depth, acc.ctrl_msg_max);
	s->peer_msg_max = s->ss.ch.peer_msg_max;
	memcpy(s->challenge, acc.nonce, AUTH_NONCE_LEN);
	if (acc.caps & PD_CAP_AUTH) {
		src_set_state(s, SRC_AUTH);
		return send_auth(s);
	}
	return send_block_map(s);
}

/* ---- the block map ---------------------------------------------------------- */

/* A huge page registered in chunk-sized parts costs a registration per
 * part on both sides, each pinning the whole page.  So the registration
 * unit grows to the blocks' largest page, up to 2 MiB: past that (1 GiB
 * pages) a chunk would pin a gigabyte for one dirty 4 KiB page of any
 * other block (the wire carries one chunk size), and one eviction would
 * unpin a gigabyte inside a step; such pages stay in chunk-sized parts. */
#define CHUNK_GROW_MAX_SHIFT 21

static unsigned chunk_shift_for(const struct rdmig_source *s)
{
	unsigned shift = cfg_chunk_shift(&s->ss.cfg), i, ps;

	for (i = 0; i < s->nblocks; i++) {
		ps = (unsigned)__builtin_ctz(s->blocks[i].d.page_size);
		if (ps > shift && ps <= CHUNK_GROW_MAX_SHIFT)
			shift = ps;
	}
	return shift;
}

/* Slots: dynamic registration's chunks, or pin-all's pieces. */
static int setup_slots(struct rdmig_source *s)
{
	unsigned i;

	s->chunk_shift = chunk_shift_for(s);
	s->slot_shift = s->ss.cfg.pin_all ?
			(s->chunk_shift > SRC_PIECE_SHIFT ? s->chunk_shift : SRC_PIECE_SHIFT) :
			s->chunk_shift;
	s->dblocks = calloc(s->nblocks, sizeof(*s->dblocks));
	if (!s->dblocks)
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	for (i = 0; i < s->nblocks; i++) {
		struct src_block *b = &s->blocks[i];

		b->nslots = blk_nchunks(b->d.length, s->slot_shift);
		b->first_slot = s->nslots;
		s->nslots += b->nslots;
		s->dblocks[i] = (struct dreg_block){ .first_slot = b->first_slot,
						      .length = b->d.length };
	}
	if (!s->ss.cfg.pin_all)
		return 0;
	s->pieces = calloc(s->nslots, sizeof(*s->pieces));
	return s->pieces ? 0 : rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
}

static int send_block_map(struct rdmig_source *s)
{
	Rdmig__BlockMapReq req = RDMIG__BLOCK_MAP_REQ__INIT;
	Rdmig__BlockDesc *descs, **ptrs;
	unsigned i;
	int rc = setup_slots(s);

	descs = calloc(s->nblocks, sizeof(*descs));
	ptrs = calloc(s->nblocks, sizeof(*ptrs));
	if (!rc && (!descs || !ptrs))
		rc = rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	for (i = 0; !rc && i < s->nblocks; i++) {
		rdmig__block_desc__init(&descs[i]);
		descs[i].name = s->blocks[i].d.name;
		descs[i].length = s->blocks[i].d.length;
		descs[i].page_size = s->blocks[i].d.page_size;
		ptrs[i] = &descs[i];
	}
	if (!rc) {
		req.n_blocks = s->nblocks;
		req.blocks = ptrs;
		req.chunk_shift = s->chunk_shift;
		req.piece_shift = s->ss.cfg.pin_all ? s->slot_shift : 0;
		req.state_max = (s->ss.caps & PD_CAP_STATE_BOUND) ? s->ss.cfg.state_max : 0;
		rc = sess_send(&s->ss, CT_BLOCK_MAP_REQ, &req.base, "send BLOCK_MAP_REQ");
	}
	free(descs);
	free(ptrs);
	src_set_state(s, SRC_MAP);
	return rc;
}

static int apply_block_map(struct rdmig_source *s, const Rdmig__BlockMapResp *r)
{
	unsigned i;

	if (r->n_blocks != s->nblocks)
		return rd_err_set(&s->ss.err, -EPROTO, "the destination mapped %zu blocks, "
				  "%u were sent", r->n_blocks, s->nblocks);
	for (i = 0; i < s->nblocks; i++) {
		s->blocks[i].remote_base = r->blocks[i]->base_addr;
		s->blocks[i].dest_zeroed = r->blocks[i]->zeroed;
		/* The remote range must not wrap around the address space. */
		if (r->blocks[i]->base_addr + s->blocks[i].d.length < r->blocks[i]->base_addr)
			return rd_err_set(&s->ss.err, -EPROTO, "block \"%s\": bad remote base",
					  s->blocks[i].d.name);
	}
	s->dest_cap = r->pinned_cap;
	return 0;
}

/* ---- data channels ------------------------------------------------------------ */

/* The data channels, then post-copy's: one connection each, in parallel. */
static int open_channels(struct rdmig_source *s, const Rdmig__BlockMapResp *r)
{
	unsigned n = r->channels > 1 ? r->channels : 1, k, all;
	bool pc;
	int rc;

	if (n > s->ss.cfg.channels || (n > 1 && !(s->ss.caps & PD_CAP_MULTI_CHANNEL)))
		return rd_err_set(&s->ss.err, -EPROTO, "the destination granted %u channels, "
				  "%u were requested", n, s->ss.cfg.channels);
	if (!!r->postcopy_channels != !!(s->ss.caps & PD_CAP_POSTCOPY))
		return rd_err_set(&s->ss.err, -EPROTO, "the destination %s post-copy channels "
				  "with post-copy %sgranted", r->postcopy_channels ? "offers" :
				  "offers no", (s->ss.caps & PD_CAP_POSTCOPY) ? "" : "not ");
	all = n + r->postcopy_channels;
	s->chans = calloc(all, sizeof(*s->chans));
	if (!s->chans)
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	s->nchans = n;
	s->npc = r->postcopy_channels;
	s->chans[0] = (struct src_chan){ .conn = s->ss.conn, .up = true };
	s->chans_up = 1;
	s->chan_port = r->channel_port;
	s->chan_token = r->channel_token;
	for (k = 1; k < all; k++) {
		/* Post-copy's post nothing: the destination reads from them. */
		pc = k >= n;
		rc = chan_connect_start(&s->chans[k].conn, s->ss.conn, s->chan_port,
					s->chan_token, k, all, pc ? 1 : s->ss.cfg.max_writes + 4, pc,
					rd_deadline(s->ss.cfg.timeout_ms), &s->ss.err);
		if (!rc)
			rc = sess_watch(&s->ss, fab_cm_fd(s->chans[k].conn));
		if (rc)
			return rc;
	}
	if (n != s->ss.cfg.channels)
		cfg_log(&s->ss.cfg, RDMIG_LOG_WARN, "the destination accepts %u of the %u "
			"channels asked for", n, s->ss.cfg.channels);
	else if (n > 1)
		cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "striping writes over %u channels", n);
	return 0;
}

int src_link_step(struct rdmig_source *s)
{
	int rc;

	switch (s->state) {
	case SRC_CONNECTING:
		if (!s->ss.conn)
			return link_start(s);
		rc = fab_connect_step(s->ss.conn);
		if (rc == -ECONNREFUSED)
			return decode_reject(s);
		if (rc < 0)
			return rc;
		if (rc == FAB_STEP_AGAIN)
			return SRC_LINK_AGAIN;
		return rc ? on_connected(s) : 0;
	case SRC_CHANNELS:
		return src_chan_step(s);
	default:
		return 0;
	}
}

static int on_auth_response(struct rdmig_source *s, const Rdmig__AuthResponse *r)
{
	bool resuming = s->state == SRC_PC_RESUMING && s->pc.resume == RS_AUTH;
	int rc;

	if (s->state != SRC_AUTH && !resuming)
		return rd_err_set(&s->ss.err, -EPROTO, "unexpected AUTH_RESPONSE");
	rc = auth_check(s->ss.cfg.auth_key, s->ss.cfg.auth_key_len, AUTH_DEST, &s->bind,
			r->mac.data, r->mac.len);
	if (rc)
		return rd_err_set(&s->ss.err, -EACCES, "authentication failed: the destination "
				  "does not hold the same key");
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "authenticated the destination");
	return resuming ? src_pc_send_resume(s) : send_block_map(s);
}

/* With POSTCOPY_RECOVER, the name a resume gives; none without. */
static int take_token(struct rdmig_source *s, const Rdmig__BlockMapResp *r)
{
	bool recover = s->ss.caps & PD_CAP_POSTCOPY_RECOVER;

	if (recover != (r->resume_token.len != 0))
		return rd_err_set(&s->ss.err, -EPROTO, "the destination sent %s resume token with "
				  "post-copy recovery %sgranted", recover ? "no" : "a",
				  recover ? "" : "not ");
	if (recover)
		memcpy(s->pc.token, r->resume_token.data, PD_TOKEN_LEN); /* checked: that long */
	return 0;
}

int src_link_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	int rc;

	if (h->type == CT_AUTH_RESPONSE)
		return on_auth_response(s, (const Rdmig__AuthResponse *)m);
	if (s->state != SRC_MAP)
		return rd_err_set(&s->ss.err, -EPROTO, "unexpected BLOCK_MAP_RESP");
	rc = apply_block_map(s, (const Rdmig__BlockMapResp *)m);
	if (!rc)
		rc = take_token(s, (const Rdmig__BlockMapResp *)m);
	if (!rc)
		rc = open_channels(s, (const Rdmig__BlockMapResp *)m);
	if (!rc && (s->ss.caps & PD_CAP_POSTCOPY))
		rc = src_pc_setup(s);
	if (rc)
		return rc;
	src_set_state(s, SRC_CHANNELS);
	return s->chans_up == s->nchans + s->npc ? SRC_LINK_UP : 0;
}

/* ---- pin-all pieces ------------------------------------------------------------ */

static unsigned block_of_slot(const struct rdmig_source *s, uint64_t slot)
{
	unsigned i = 0;

	while (i + 1 < s->nblocks && s->blocks[i + 1].first_slot <= slot)
		i++;
	return i;
}

/* Pieces go to the helpers in order, a few per helper ahead of the one
 * the driving thread waits for: the first WRITEs wait for the first piece
 * only, every core registers, and no step waits for a registration. */
int src_pin_step(struct rdmig_source *s)
{
	uint64_t slot, off, len, ahead = SRC_PIECES_AHEAD * (uint64_t)regq_threads(&s->rq);
	struct src_block *b;
	int rc;

	while (s->pieces && s->pieces_sub < s->nslots && s->pieces_sub - s->pieces_local < ahead) {
		slot = s->pieces_sub;
		b = &s->blocks[block_of_slot(s, slot)];
		blk_chunk_span(b->d.length, s->slot_shift, slot - b->first_slot, &off, &len);
		rc = src_mem_submit(s, b, off, len, src_pc_pin_access(s),
				    SRC_REG_COOKIE(REG_PIECE, slot));
		if (rc == -EAGAIN)
			break;
		if (rc)
			return rc;
		s->pieces_sub++;
	}
	return 0;
}

int src_pin_done(struct rdmig_source *s, const struct regq_job *j)
{
	uint64_t slot = SRC_REG_N(j->cookie);

	if (!s->pieces || slot != s->pieces_local)
		return rd_err_set(&s->ss.err, -EPROTO, "pin-all piece %" PRIu64 " registered "
				  "out of order", slot);
	s->pieces[slot].mr = j->mr;
	s->pieces_local++;
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.pinned_bytes += j->len;
	s->ss.stats.st.pinned_peak = s->ss.stats.st.pinned_bytes;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return 0;
}

int src_on_pin_keys(struct rdmig_source *s, const Rdmig__PinKeys *k)
{
	size_t i;

	if (!s->pieces)
		return rd_err_set(&s->ss.err, -EPROTO, "PIN_KEYS without pin-all");
	for (i = 0; i < k->n_block; i++) {
		const struct src_block *b;

		if (k->block[i] >= s->nblocks)
			return rd_err_set(&s->ss.err, -EPROTO, "PIN_KEYS for block index %u of %u",
					  k->block[i], s->nblocks);
		b = &s->blocks[k->block[i]];
		if (k->piece[i] >= b->nslots)
			return rd_err_set(&s->ss.err, -EPROTO, "PIN_KEYS: block \"%s\" has no "
					  "piece %" PRIu64, b->d.name, k->piece[i]);
		s->pieces[b->first_slot + k->piece[i]].rkey = k->rkey[i];
		s->pieces[b->first_slot + k->piece[i]].remote = true;
	}
	return 0;
}

/* Connection events once connected: a disconnect is reported only after
 * the CQ drained (the driver calls this then), since the peer's last
 * message (an ERROR) may be there. */
int src_link_events(struct rdmig_source *s)
{
	int rc = 0, i;
	unsigned k;

	for (i = 0; i < 4 && !rc; i++)
		rc = fab_cm_process(s->ss.conn);
	/* After a post-copy pause only post-copy's channels came back. */
	for (k = s->pc.data_gone ? s->nchans : 1; s->chans && k < s->nchans + s->npc && !rc; k++)
		if (s->chans[k].up && (rc = fab_cm_process(s->chans[k].conn)))
			rc = rd_err_prefix(&s->ss.err, rc, k < s->nchans ? "data channel %u" :
					   "post-copy channel %u", k < s->nchans ? k : k - s->nchans);
	return rc == -ECONNRESET ? rd_err_set(&s->ss.err, rc, "the destination disconnected") :
	       rc;
}

void src_link_disconnect(struct rdmig_source *s)
{
	unsigned k;

	for (k = 1; s->chans && k < s->nchans + s->npc; k++)
		fab_disconnect(s->chans[k].conn);
	fab_disconnect(s->ss.conn);
}

void src_link_unwatch(struct rdmig_source *s)
{
	unsigned k;

	if (!s->ss.conn)
		return;
	sess_unwatch(&s->ss, fab_cq_fd(s->ss.conn));
	sess_unwatch(&s->ss, fab_cm_fd(s->ss.conn));
	for (k = 1; s->chans && k < s->nchans + s->npc; k++)
		if (s->chans[k].conn)
			sess_unwatch(&s->ss, fab_cm_fd(s->chans[k].conn));
}

/* ---- resuming a paused post-copy ----------------------------------------------- */

/* The rings registered for the first connection serve the new one: its QP
 * is on the same PD. */
static int pre_resume(struct fab_conn *c, void *arg)
{
	struct rdmig_source *s = arg;
	int rc = ctrl_rebind(&s->ss.ch, c);

	return rc ? rc : sess_watch(&s->ss, fab_cq_fd(c));
}

int src_link_resume_start(struct rdmig_source *s)
{
	const struct rdmig_config *c = &s->ss.cfg;
	/* Control frames only: post-copy's channels post nothing. */
	struct fab_caps caps = { .sq_depth = c->ctrl_depth + 4, .rq_depth = c->ctrl_depth,
				 .cq_depth = 2 * c->ctrl_depth + 8, .pd = s->conn0->pd };
	struct pd_request req = { .ver_min = PD_VERSION_RECOVER, .ver_max = PD_VERSION_MAX,
				  .caps = requested_caps(s), .ctrl_depth = c->ctrl_depth,
				  .ctrl_msg_max = c->ctrl_msg_max, .channel = 0, .channels = 1,
				  .resume = true };
	struct fab_conn *old = s->ss.conn;
	unsigned k;
	int rc;

	memcpy(req.token, s->pc.token, PD_TOKEN_LEN);
	/* The broken link's post-copy channels (on its control connection's
	 * CQ) go first, then that connection, unless it is the first one. */
	for (k = s->nchans; k < s->nchans + s->npc; k++) {
		fab_conn_destroy(s->chans[k].conn);
		s->chans[k] = (struct src_chan){ .conn = NULL, .up = false };
	}
	s->chans_up = s->nchans;
	s->ss.conn = NULL;
	if (old != s->conn0)
		fab_conn_destroy(old);
	s->bind.req_len = pd_encode_request(&req, s->bind.req, sizeof(s->bind.req));
	s->pc.resume = RS_CONNECTING;
	rc = fab_connect_start(&s->ss.conn, s->host, s->port, &caps, s->bind.req,
			       s->bind.req_len, pre_resume, s, rd_deadline(c->timeout_ms),
			       &s->ss.err);
	s->chans[0].conn = s->ss.conn;
	if (!rc)
		rc = sess_watch(&s->ss, fab_cm_fd(s->ss.conn));
	return rc;
}

/* Connected again: the destination must grant what it granted at first. */
static int on_resume_connected(struct rdmig_source *s)
{
	struct fab_conn *c = s->ss.conn;
	struct pd_accept acc;
	int rc = pd_decode_accept(c->peer_priv, c->peer_priv_len, &acc, &s->ss.err);

	if (rc)
		return rd_err_prefix(&s->ss.err, rc, "the destination's answer to the resume");
	if (acc.version < PD_VERSION_RECOVER || acc.version > PD_VERSION_MAX)
		return rd_err_set(&s->ss.err, -EPROTO, "the destination resumed in protocol "
				  "version %u", acc.version);
	if (acc.caps != s->ss.caps)
		return rd_err_set(&s->ss.err, -EPROTO, "the destination resumed with "
				  "capabilities 0x%x, the migration has 0x%x", acc.caps,
				  s->ss.caps);
	if (acc.ctrl_msg_max < s->ss.ch.peer_msg_max)
		return rd_err_set(&s->ss.err, -EPROTO, "the destination resumed with control "
				  "messages of %u bytes, smaller than the first connection's %u",
				  acc.ctrl_msg_max, s->ss.ch.peer_msg_max);
	ctrl_start(&s->ss.ch, acc.ctrl_depth, s->ss.ch.peer_msg_max);
	s->ss.ctrl_ready = true;
	memcpy(s->challenge, acc.nonce, AUTH_NONCE_LEN);
	if (acc.caps & PD_CAP_AUTH) {
		s->pc.resume = RS_AUTH;
		return send_auth(s);
	}
	return src_pc_send_resume(s);
}

int src_link_resume_step(struct rdmig_source *s)
{
	struct fab_conn *c = s->ss.conn;
	struct pd_reject rej;
	struct rd_err tmp;
	int rc = fab_connect_step(c);

	/* A refusal is no reason to stop trying: the destination may be busy
	 * with the broken link's last READs. */
	if (rc == -ECONNREFUSED && c->peer_priv_len &&
	    pd_decode_reject(c->peer_priv, c->peer_priv_len, &rej, &tmp) == 0)
		return rd_err_set(&s->ss.err, rc, "the destination refused the resume: %s",
				  pd_reason_str(rej.reason));
	if (rc < 0)
		return rc;
	if (rc == FAB_STEP_AGAIN)
		return SRC_LINK_AGAIN;
	return rc ? on_resume_connected(s) : 0;
}

void src_link_destroy(struct rdmig_source *s)
{
	unsigned k;
	uint64_t i;

	for (k = 0; s->chans && k < s->nchans + s->npc; k++)
		fab_disconnect(s->chans[k].conn);
	/* The other channels' QPs use the control connection's PD and CQ. */
	for (k = 1; s->chans && k < s->nchans + s->npc; k++)
		fab_conn_destroy(s->chans[k].conn);
	for (i = 0; s->pieces && i < s->nslots; i++)
		if (s->pieces[i].mr)
			ibv_dereg_mr(s->pieces[i].mr);
	free(s->pieces);
	free(s->chans);
	s->pieces = NULL;
	s->chans = NULL;
}
