/* source: the sending side of a migration.
 *
 * The caller's thread drives everything: each API call runs the state
 * machine until its goal (connected, iteration acknowledged, state sent,
 * completed) or a failure.  An iteration is planned in one pass over the
 * dirty bitmaps (merged WRITEs, zero ranges sent as they fill), then a loop
 * keeps three things moving at once: registration requests for chunks ahead
 * of the writes (dynamic mode), WRITEs whose chunks are ready, and
 * completions.  It only sleeps when none of them can advance. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "auth.h"
#include "bitmap.h"
#include "blocks.h"
#include "chan.h"
#include "codec.h"
#include "config.h"
#include "creg.h"
#include "ctrl.h"
#include "fabric.h"
#include "plan.h"
#include "privdata.h"
#include "rdmig.h"
#include "rdmig.pb-c.h"

enum src_state {
	SRC_NEW,        /* blocks may be added */
	SRC_READY,      /* connected, block map exchanged: iterations may run */
	SRC_COMPLETED,  /* the destination confirmed the whole image */
	SRC_FAILED,     /* terminal; err holds the reason */
};

enum { SRC_TAG_WRITE = 1 };

struct src_block {
	struct blk_desc d;
	uint8_t *host;
	uint64_t npages;
	uint64_t nchunks;
	uint64_t *dirty;        /* pages to send in the next iteration */
	uint64_t *written;      /* pages the destination holds non-zero data for */
	uint64_t first_slot;    /* creg slot of chunk 0 */
	struct ibv_mr *mr;      /* pin-all: the whole block */
	uint64_t remote_base;
	uint32_t remote_rkey;   /* pin-all */
	bool dest_zeroed;
};

/* One planned RDMA WRITE; never crosses a chunk boundary. */
struct src_op {
	uint32_t block;
	uint64_t offset;
	uint64_t length;
	uint64_t slot;
};

/* A REGISTER_REQ awaiting its answer; answers come back in order. */
struct src_regreq {
	uint64_t req_id;
	uint64_t *slots;
	size_t n;
};

#define MAX_REG_OUTSTANDING 4

/* A QP the WRITEs are striped over; chans[0] is the control connection.
 * Completions arrive in order per QP, so the ops posted (a ring) and the
 * posted count at each signaled WRITE (marks) say which ops a completion
 * finishes.  Counters only grow; indexes are taken modulo cap. */
struct src_chan {
	struct fab_conn *conn;  /* owned, except chans[0]'s (s->conn) */
	struct fab_tag tag;
	size_t *ring;           /* op indices, oldest first */
	uint64_t *marks;
	size_t cap;             /* entries in ring and in marks */
	uint64_t posted, done;
	uint64_t mhead, mtail;
	int first, last;        /* this post_writes() call's chain in its wr[] */
};

struct rdmig_source {
	struct rdmig_config cfg;
	unsigned chunk_shift;
	struct rd_err err;
	enum src_state state;

	struct src_block *blocks;
	unsigned nblocks;

	struct fab_conn *conn;
	struct ctrl ch;
	bool ctrl_ready;
	uint32_t caps;
	uint32_t peer_msg_max;
	int wake_fd;
	atomic_bool cancelled;

	/* dynamic registration: chunks registered on both sides */
	struct creg creg;
	bool creg_ready;
	uint64_t nslots;
	struct src_regreq regq[MAX_REG_OUTSTANDING];
	unsigned regq_head, regq_len;
	uint64_t next_req_id;
	size_t batch;           /* chunks in the next REGISTER_REQ (ramps up) */

	/* the iteration being sent */
	struct src_op *ops;
	size_t nops, ops_cap;
	size_t req_pos;         /* ops whose chunks are requested (or pinned) */
	size_t write_pos;       /* ops posted */
	size_t done;            /* ops completed */
	struct src_chan *chans;
	unsigned nchans;
	uint32_t iteration;     /* iterations acknowledged */
	bool iter_acked;
	bool complete_acked;
	bool complete_ok;

	/* zero ranges being collected for one ZERO_RANGES message */
	uint32_t *zr_block;
	uint64_t *zr_offset, *zr_length;
	size_t zr_n, zr_max;

	struct stats_box stats;
	int64_t last_progress_ms;
	uint8_t *key;           /* our copy of cfg.auth_key */
	struct auth_bind bind;  /* what both answers are bound to (AUTH) */
	uint8_t challenge[AUTH_NONCE_LEN]; /* the destination's, from its ACCEPT */
	uint8_t *digests;       /* VERIFY: one per block, for COMPLETE */
};

static void disconnect_all(struct rdmig_source *s)
{
	unsigned k;

	for (k = 1; s->chans && k < s->nchans; k++)
		fab_disconnect(s->chans[k].conn);
	fab_disconnect(s->conn);
}

static int fail(struct rdmig_source *s, int rc)
{
	if (s->state == SRC_FAILED)
		return rc;
	s->state = SRC_FAILED;
	cfg_log(&s->cfg, RDMIG_LOG_ERROR, "migration failed: %s", s->err.msg);
	if (s->ctrl_ready)
		ctrl_send_error(&s->ch, rc, s->err.msg, 200);
	disconnect_all(s);
	return rc;
}

static int conn_err(struct rdmig_source *s, int rc)
{
	if (s->conn && s->conn->err.msg[0] && rc != -ECANCELED)
		memcpy(s->err.msg, s->conn->err.msg, sizeof(s->err.msg));
	return rc;
}

int rdmig_source_create(struct rdmig_source **out, const struct rdmig_config *cfg)
{
	struct rdmig_source *s = calloc(1, sizeof(*s));
	int rc;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	rc = cfg_load(&s->cfg, cfg, &s->err);
	if (rc) {
		/* Report the configuration error through a half-made handle. */
		s->state = SRC_FAILED;
		s->wake_fd = -1;
		stats_init(&s->stats);
		*out = s;
		return rc;
	}
	s->chunk_shift = cfg_chunk_shift(&s->cfg);
	if (s->cfg.auth_key) {
		s->key = auth_key_dup(s->cfg.auth_key, s->cfg.auth_key_len);
		if (!s->key) {
			free(s);
			return -ENOMEM;
		}
		s->cfg.auth_key = s->key;
	}
	s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	stats_init(&s->stats);
	if (!s->cfg.channels)
		s->cfg.channels = 1;
	if (s->wake_fd < 0) {
		rc = rd_err_set(&s->err, -errno, "eventfd: %s", strerror(errno));
		rdmig_source_destroy(s);
		return rc;
	}
	*out = s;
	return 0;
}

const char *rdmig_source_error(const struct rdmig_source *s)
{
	/* Creation reports its failure through the handle, except for ENOMEM. */
	return s ? s->err.msg : "out of memory";
}

int rdmig_source_add_block(struct rdmig_source *s, const char *name, void *host,
			   uint64_t length, uint32_t page_size)
{
	struct src_block *b, *nb;
	unsigned i;
	int rc;

	if (s->state != SRC_NEW)
		return rd_err_set(&s->err, -EINVAL, "blocks must be added before connecting");
	if (!page_size)
		page_size = CFG_PAGE_SIZE;
	rc = blk_name_valid(name, &s->err);
	if (rc)
		return rc;
	if (!host || !length || length > (1ull << 50))
		return rd_err_set(&s->err, -EINVAL, "block \"%s\": bad address or length %" PRIu64,
				  name, length);
	if (!rd_is_pow2(page_size) || page_size < 4096 || page_size > (1u << 30))
		return rd_err_set(&s->err, -EINVAL, "block \"%s\": page size %u must be a "
				  "power of two from 4096 to 1 GiB", name, page_size);
	if (page_size > s->cfg.chunk_size)
		return rd_err_set(&s->err, -EINVAL, "block \"%s\": page size %u exceeds the "
				  "chunk size %u", name, page_size, s->cfg.chunk_size);
	if (s->nblocks >= BLK_MAX)
		return rd_err_set(&s->err, -E2BIG, "too many blocks (limit %d)", BLK_MAX);
	for (i = 0; i < s->nblocks; i++)
		if (!strcmp(s->blocks[i].d.name, name))
			return rd_err_set(&s->err, -EEXIST, "block \"%s\" added twice", name);
	nb = realloc(s->blocks, (s->nblocks + 1) * sizeof(*nb));
	if (!nb)
		return rd_err_set(&s->err, -ENOMEM, "out of memory");
	s->blocks = nb;
	b = &s->blocks[s->nblocks];
	memset(b, 0, sizeof(*b));
	snprintf(b->d.name, sizeof(b->d.name), "%s", name);
	b->d.length = length;
	b->d.page_size = page_size;
	b->host = host;
	b->npages = blk_npages(length, page_size);
	b->nchunks = blk_nchunks(length, s->chunk_shift);
	b->dirty = bm_alloc(b->npages);
	b->written = bm_alloc(b->npages);
	if (!b->dirty || !b->written) {
		bm_free(b->dirty);
		bm_free(b->written);
		return rd_err_set(&s->err, -ENOMEM, "out of memory for the dirty bitmap");
	}
	s->stats.st.total += length;
	return (int)s->nblocks++;
}

/* ---- waiting and completions ------------------------------------------ */

static int handle_ctrl_msg(struct rdmig_source *s, const struct ctrl_hdr *h,
			   ProtobufCMessage *m);

/* A signaled WRITE on @ch completed, and with it every WRITE before it. */
static int writes_completed(struct rdmig_source *s, struct src_chan *ch)
{
	uint64_t upto;

	if (ch->mhead == ch->mtail)
		return rd_err_set(&s->err, -EPROTO, "unexpected WRITE completion");
	upto = ch->marks[ch->mhead++ % ch->cap];
	for (; ch->done < upto; ch->done++, s->done++)
		if (!s->cfg.pin_all)
			creg_put(&s->creg, s->ops[ch->ring[ch->done % ch->cap]].slot);
	return 0;
}

static int chan_err(struct rdmig_source *s, const struct src_chan *ch, int rc)
{
	if (ch->conn->err.msg[0] && rc != -ECANCELED)
		memcpy(s->err.msg, ch->conn->err.msg, sizeof(s->err.msg));
	if (ch != s->chans)
		rd_err_prefix(&s->err, rc, "data channel %u", (unsigned)(ch - s->chans));
	return rc;
}

static int handle_wc(struct rdmig_source *s, const struct ibv_wc *wc)
{
	struct src_chan *ch;
	struct ctrl_hdr h;
	ProtobufCMessage *m;
	int rc;

	if (ctrl_owns(wc)) {
		rc = ctrl_complete(&s->ch, wc, &h, &m);
		if (rc <= 0)
			return rc;
		rc = handle_ctrl_msg(s, &h, m);
		ctrl_msg_free(m);
		return rc;
	}
	ch = rd_container_of(fab_tag_of(wc), struct src_chan, tag);
	if (wc->status != IBV_WC_SUCCESS)
		return chan_err(s, ch, fab_wc_error(ch->conn, wc, "RDMA WRITE"));
	return writes_completed(s, ch);
}

static void report_progress(struct rdmig_source *s, bool force)
{
	struct rdmig_stats st;
	int64_t now = rd_now_ms();

	if (!s->cfg.progress || (!force && now - s->last_progress_ms < s->cfg.progress_ms))
		return;
	s->last_progress_ms = now;
	rdmig_source_stats(s, &st);
	s->cfg.progress(s->cfg.progress_ctx, &st);
}

/* Handles whatever completions are ready; with @block, first waits (bounded
 * by the timeout) for at least one.  Returns completions handled or -errno. */
static int progress(struct rdmig_source *s, bool block)
{
	struct ibv_wc wc[32];
	int n, i, rc;

	if (atomic_load(&s->cancelled))
		return rd_err_set(&s->err, -ECANCELED, "migration cancelled");
	if (rd_now_ms() - s->ch.last_send_ms >= s->cfg.keepalive_ms) {
		rc = ctrl_keepalive(&s->ch);
		if (rc)
			return rc;
	}
	n = fab_poll(s->conn, wc, (int)RD_ARRAY_SIZE(wc));
	if (n == 0 && block) {
		n = fab_poll_wait(s->conn, wc, (int)RD_ARRAY_SIZE(wc),
				  rd_deadline(s->cfg.timeout_ms), s->wake_fd);
		if (n == -ETIMEDOUT)
			return rd_err_set(&s->err, -ETIMEDOUT, "the destination did not "
					  "respond within %d ms", s->cfg.timeout_ms);
		if (n == -ECONNRESET)
			return rd_err_set(&s->err, -ECONNRESET, "the destination disconnected");
	}
	if (n < 0)
		return conn_err(s, n);
	for (i = 0; i < n; i++) {
		rc = handle_wc(s, &wc[i]);
		if (rc < 0)
			return rc;
	}
	rc = ctrl_return_credits(&s->ch, false);
	if (rc)
		return rc;
	report_progress(s, false);
	return n;
}

/* Sends one control message, progressing completions until a credit and a
 * send slot are free. */
static int send_msg(struct rdmig_source *s, unsigned type, const ProtobufCMessage *m)
{
	int rc;

	for (;;) {
		rc = ctrl_send(&s->ch, type, m);
		if (rc != -EAGAIN)
			return rc;
		rc = progress(s, true);
		if (rc < 0)
			return rc;
	}
}

/* Progresses until *flag becomes true. */
static int wait_for(struct rdmig_source *s, bool *flag)
{
	int rc;

	while (!*flag) {
		rc = progress(s, true);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ---- control messages from the destination ---------------------------- */

static int on_register_resp(struct rdmig_source *s, const Rdmig__RegisterResp *r)
{
	struct src_regreq *q = &s->regq[s->regq_head];
	size_t i;

	if (!s->regq_len || r->req_id != q->req_id)
		return rd_err_set(&s->err, -EPROTO, "REGISTER_RESP for request %" PRIu64
				  " that is not the oldest outstanding", r->req_id);
	if (r->n_rkeys != q->n)
		return rd_err_set(&s->err, -EPROTO, "REGISTER_RESP carries %zu keys for %zu "
				  "chunks", r->n_rkeys, q->n);
	for (i = 0; i < q->n; i++)
		creg_set_ready(&s->creg, q->slots[i], r->rkeys[i],
			       creg_slot(&s->creg, q->slots[i])->mr);
	free(q->slots);
	q->slots = NULL;
	s->regq_head = (s->regq_head + 1) % MAX_REG_OUTSTANDING;
	s->regq_len--;
	return 0;
}

static int peer_error(struct rdmig_source *s, const Rdmig__Error *e)
{
	int code = e->code < 0 && e->code > -4096 ? e->code : -EPROTO;

	/* The peer's text is untrusted: keep it printable. */
	char clean[512];
	size_t i;

	snprintf(clean, sizeof(clean), "%s", e->message ? e->message : "");
	for (i = 0; clean[i]; i++)
		if ((unsigned char)clean[i] < 0x20 || clean[i] == 0x7f)
			clean[i] = '?';
	return rd_err_set(&s->err, code == -ECANCELED ? -ECONNABORTED : code,
			  "destination reported: %s", clean);
}

static int handle_ctrl_msg(struct rdmig_source *s, const struct ctrl_hdr *h,
			   ProtobufCMessage *m)
{
	switch (h->type) {
	case CT_CREDIT:
	case CT_KEEPALIVE:
		return 0;
	case CT_ERROR:
		return peer_error(s, (const Rdmig__Error *)m);
	case CT_REGISTER_RESP:
		return on_register_resp(s, (const Rdmig__RegisterResp *)m);
	case CT_ITER_ACK:
		if (((const Rdmig__IterAck *)m)->iteration != s->iteration + 1 || s->iter_acked)
			return rd_err_set(&s->err, -EPROTO, "ITER_ACK for iteration %u, expected %u",
					  ((const Rdmig__IterAck *)m)->iteration, s->iteration + 1);
		s->iter_acked = true;
		return 0;
	case CT_COMPLETE_ACK:
		if (s->complete_acked)
			return rd_err_set(&s->err, -EPROTO, "duplicate COMPLETE_ACK");
		s->complete_acked = true;
		s->complete_ok = ((const Rdmig__CompleteAck *)m)->ok;
		return 0;
	default:
		return rd_err_set(&s->err, -EPROTO, "unexpected %s from the destination",
				  ctrl_type_name(h->type));
	}
}

/* ---- connect ---------------------------------------------------------- */

static int pre_connect(struct fab_conn *c, void *arg)
{
	struct rdmig_source *s = arg;
	int rc = ctrl_init(&s->ch, c, s->cfg.ctrl_depth, s->cfg.ctrl_msg_max, &s->err);

	s->ctrl_ready = rc == 0;
	return rc;
}

static int decode_reject(struct rdmig_source *s)
{
	struct pd_reject rej;
	struct rd_err tmp;

	if (s->conn->peer_priv_len &&
	    pd_kind(s->conn->peer_priv, s->conn->peer_priv_len) == PD_REJECT &&
	    pd_decode_reject(s->conn->peer_priv, s->conn->peer_priv_len, &rej, &tmp) == 0)
		return pd_reject_error(&rej, PD_VERSION_MIN, PD_VERSION_MAX, &s->err);
	/* A consumer reject without our payload comes from the kernel cleaning
	 * up after a destination process that went away: not a refusal. */
	if (strstr(s->err.msg, "rejected by the peer"))
		return rd_err_set(&s->err, -ECONNREFUSED, "the destination dropped the "
				  "connection request without a reason (did it exit?)");
	return -ECONNREFUSED; /* the CM's own reason is already in err */
}

/* What authentication is bound to, from this side's view of the
 * connection: the destination computes the same from its own. */
static int bind_connection(struct rdmig_source *s, const uint8_t req[PD_REQUEST_LEN])
{
	memset(&s->bind, 0, sizeof(s->bind));
	memcpy(s->bind.req, req, PD_REQUEST_LEN);
	memcpy(s->bind.acc, s->conn->peer_priv, PD_ACCEPT_LEN); /* decoded: that long */
	s->bind.src_qpn = fab_local_qpn(s->conn);
	s->bind.dst_qpn = s->conn->peer_qpn;
	if (auth_addr(fab_local_addr(s->conn), s->bind.src_addr) ||
	    auth_addr(fab_peer_addr(s->conn), s->bind.dst_addr))
		return rd_err_set(&s->err, -EAFNOSUPPORT, "the connection is neither IPv4 "
				  "nor IPv6");
	return 0;
}

static int do_connect(struct rdmig_source *s, const char *host, const char *port)
{
	/* The data channels share this CQ: room for their send queues too. */
	struct fab_caps caps = { .sq_depth = s->cfg.max_writes + s->cfg.ctrl_depth + 4,
				 .rq_depth = s->cfg.ctrl_depth,
				 .cq_depth = s->cfg.max_writes + 2 * s->cfg.ctrl_depth + 4 +
					     (s->cfg.channels - 1) * (s->cfg.max_writes + 4) };
	struct pd_request req = { .ver_min = PD_VERSION_MIN, .ver_max = PD_VERSION_MAX,
				  .ctrl_depth = s->cfg.ctrl_depth,
				  .ctrl_msg_max = s->cfg.ctrl_msg_max,
				  .channels = (uint16_t)s->cfg.channels };
	struct pd_accept acc;
	uint8_t priv[FAB_PRIV_CONNECT_MAX];
	size_t len;
	int rc;

	req.caps = (s->cfg.pin_all ? PD_CAP_PIN_ALL : 0) |
		   (s->cfg.zero_pages ? PD_CAP_ZERO_PAGES : 0) |
		   (s->cfg.auth_key ? PD_CAP_AUTH : 0) |
		   (s->cfg.verify ? PD_CAP_VERIFY : 0) |
		   (s->cfg.channels > 1 ? PD_CAP_MULTI_CHANNEL : 0);
	len = pd_encode_request(&req, priv, sizeof(priv));
	rc = fab_connect(&s->conn, host, port, &caps, priv, len, pre_connect, s,
			 rd_deadline(s->cfg.timeout_ms), &s->err);
	if (rc == -ECONNREFUSED)
		return decode_reject(s);
	if (rc)
		return rc;
	rc = pd_decode_accept(s->conn->peer_priv, s->conn->peer_priv_len, &acc, &s->err);
	if (rc)
		return rd_err_prefix(&s->err, rc, "the destination's answer");
	if (acc.version < PD_VERSION_MIN || acc.version > PD_VERSION_MAX)
		return rd_err_set(&s->err, -EPROTONOSUPPORT, "the destination chose protocol "
				  "version %u, this side speaks %u..%u", acc.version,
				  PD_VERSION_MIN, PD_VERSION_MAX);
	if (acc.caps & ~req.caps)
		return rd_err_set(&s->err, -EPROTO, "the destination granted capabilities "
				  "that were not requested (0x%x)", acc.caps & ~req.caps);
	if (s->cfg.pin_all && !(acc.caps & PD_CAP_PIN_ALL))
		return rd_err_set(&s->err, -EPROTO, "the destination does not allow pin-all");
	/* Our memory goes only to a destination that proves it holds the key. */
	if (s->cfg.auth_key && !(acc.caps & PD_CAP_AUTH))
		return rd_err_set(&s->err, -EACCES, "the destination does not authenticate: "
				  "give it the same key (--auth-key)");
	if (s->cfg.verify && !(acc.caps & PD_CAP_VERIFY))
		return rd_err_set(&s->err, -EPROTO, "the destination cannot verify the image");
	s->caps = acc.caps;
	ctrl_start(&s->ch, acc.ctrl_depth, acc.ctrl_msg_max);
	s->peer_msg_max = s->ch.peer_msg_max;
	memcpy(s->challenge, acc.nonce, AUTH_NONCE_LEN);
	return (acc.caps & PD_CAP_AUTH) ? bind_connection(s, priv) : 0;
}

static int send_block_map(struct rdmig_source *s)
{
	Rdmig__BlockMapReq req = RDMIG__BLOCK_MAP_REQ__INIT;
	Rdmig__BlockDesc *descs, **ptrs;
	unsigned i;
	int rc;

	descs = calloc(s->nblocks, sizeof(*descs));
	ptrs = calloc(s->nblocks, sizeof(*ptrs));
	if (!descs || !ptrs) {
		rc = rd_err_set(&s->err, -ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < s->nblocks; i++) {
		rdmig__block_desc__init(&descs[i]);
		descs[i].name = s->blocks[i].d.name;
		descs[i].length = s->blocks[i].d.length;
		descs[i].page_size = s->blocks[i].d.page_size;
		ptrs[i] = &descs[i];
	}
	req.n_blocks = s->nblocks;
	req.blocks = ptrs;
	req.chunk_shift = s->chunk_shift;
	rc = send_msg(s, CT_BLOCK_MAP_REQ, &req.base);
out:
	free(descs);
	free(ptrs);
	return rc;
}

static int pin_all_local(struct rdmig_source *s)
{
	unsigned i;
	int rc;

	for (i = 0; i < s->nblocks; i++) {
		/* A WRITE source needs only local read access. */
		rc = fab_reg_mr(s->conn, s->blocks[i].host, s->blocks[i].d.length, 0,
				&s->blocks[i].mr);
		if (rc)
			return rd_err_prefix(&s->err, conn_err(s, rc), "block \"%s\"",
					     s->blocks[i].d.name);
		s->stats.st.pinned_bytes += s->blocks[i].d.length;
	}
	s->stats.st.pinned_peak = s->stats.st.pinned_bytes;
	return 0;
}

/* Waits for one control message of @type during setup, when nothing else
 * may arrive but credits, keepalives or an ERROR. */
static int wait_ctrl(struct rdmig_source *s, unsigned type, ProtobufCMessage **out)
{
	struct ibv_wc wc;
	struct ctrl_hdr h;
	ProtobufCMessage *m;
	int rc;

	for (;;) {
		rc = fab_poll_wait(s->conn, &wc, 1, rd_deadline(s->cfg.timeout_ms), s->wake_fd);
		if (rc == -ETIMEDOUT)
			return rd_err_set(&s->err, rc, "the destination sent no %s within %d ms",
					  ctrl_type_name(type), s->cfg.timeout_ms);
		if (rc < 0)
			return conn_err(s, rc);
		if (!ctrl_owns(&wc))
			return rd_err_set(&s->err, -EPROTO, "unexpected completion");
		rc = ctrl_complete(&s->ch, &wc, &h, &m);
		if (rc < 0)
			return rc;
		if (rc == 0 || h.type == CT_CREDIT || h.type == CT_KEEPALIVE) {
			ctrl_msg_free(m);
			continue;
		}
		if (h.type == type) {
			*out = m;
			return 0;
		}
		rc = h.type == CT_ERROR ? peer_error(s, (Rdmig__Error *)m) :
		     rd_err_set(&s->err, -EPROTO, "expected %s, got %s", ctrl_type_name(type),
				ctrl_type_name(h.type));
		ctrl_msg_free(m);
		return rc;
	}
}

/* Answers the challenge the destination sent in its ACCEPT, challenges it
 * in turn, and checks its answer before any block information is sent.
 * Our answer is bound to this connection: whoever collects it, posing as a
 * destination, cannot use it on another. */
static int authenticate(struct rdmig_source *s)
{
	Rdmig__AuthChallenge ch = RDMIG__AUTH_CHALLENGE__INIT;
	Rdmig__AuthResponse resp = RDMIG__AUTH_RESPONSE__INIT;
	const Rdmig__AuthResponse *r;
	uint8_t mac[AUTH_MAC_LEN];
	ProtobufCMessage *m = NULL;
	int rc;

	auth_nonce(s->bind.src_nonce);
	if (!auth_nonce_acceptable(s->challenge, s->bind.src_nonce))
		return rd_err_set(&s->err, -EACCES, "the destination's challenge is all zero "
				  "or repeats ours: not answering it (is it an impostor collecting "
				  "answers?)");
	auth_mac(s->cfg.auth_key, s->cfg.auth_key_len, AUTH_SOURCE, &s->bind, mac);
	ch.nonce.data = s->bind.src_nonce;
	ch.nonce.len = AUTH_NONCE_LEN;
	resp.mac.data = mac;
	resp.mac.len = AUTH_MAC_LEN;
	rc = send_msg(s, CT_AUTH_CHALLENGE, &ch.base);
	if (!rc)
		rc = send_msg(s, CT_AUTH_RESPONSE, &resp.base);
	if (!rc)
		rc = wait_ctrl(s, CT_AUTH_RESPONSE, &m);
	if (rc)
		return rc;
	r = (const Rdmig__AuthResponse *)m;
	rc = auth_check(s->cfg.auth_key, s->cfg.auth_key_len, AUTH_DEST, &s->bind,
			r->mac.data, r->mac.len);
	ctrl_msg_free(m);
	if (rc)
		return rd_err_set(&s->err, -EACCES, "authentication failed: the destination "
				  "does not hold the same key");
	cfg_log(&s->cfg, RDMIG_LOG_INFO, "authenticated the destination");
	return 0;
}

static int setup_dynamic(struct rdmig_source *s, uint64_t dest_cap)
{
	uint64_t cap = s->cfg.pinned_cap;
	unsigned i;

	for (i = 0; i < s->nblocks; i++) {
		s->blocks[i].first_slot = s->nslots;
		s->nslots += s->blocks[i].nchunks;
	}
	if (dest_cap && (!cap || dest_cap < cap))
		cap = dest_cap;
	if (cap && cap < 2ull << s->chunk_shift)
		return rd_err_set(&s->err, -EINVAL, "the pinned-bytes cap (%" PRIu64 ") is "
				  "smaller than two chunks", cap);
	if (creg_init(&s->creg, s->nslots, cap))
		return rd_err_set(&s->err, -ENOMEM, "out of memory");
	s->creg_ready = true;
	return 0;
}

static int apply_block_map(struct rdmig_source *s, const Rdmig__BlockMapResp *r)
{
	unsigned i;

	if (r->n_blocks != s->nblocks)
		return rd_err_set(&s->err, -EPROTO, "the destination mapped %zu blocks, "
				  "%u were sent", r->n_blocks, s->nblocks);
	for (i = 0; i < s->nblocks; i++) {
		s->blocks[i].remote_base = r->blocks[i]->base_addr;
		s->blocks[i].remote_rkey = r->blocks[i]->rkey;
		s->blocks[i].dest_zeroed = r->blocks[i]->zeroed;
		/* The remote range must not wrap around the address space. */
		if (r->blocks[i]->base_addr + s->blocks[i].d.length < r->blocks[i]->base_addr)
			return rd_err_set(&s->err, -EPROTO, "block \"%s\": bad remote base",
					  s->blocks[i].d.name);
	}
	return s->cfg.pin_all ? 0 : setup_dynamic(s, r->pinned_cap);
}

static int init_chan(struct rdmig_source *s, struct src_chan *ch)
{
	ch->tag.kind = SRC_TAG_WRITE;
	ch->cap = s->cfg.max_writes + 1;
	ch->ring = calloc(ch->cap, sizeof(*ch->ring));
	ch->marks = calloc(ch->cap, sizeof(*ch->marks));
	return ch->ring && ch->marks ? 0 : rd_err_set(&s->err, -ENOMEM, "out of memory");
}

/* Channel 0 is the control connection; the others go to the port the
 * destination announced, each with its own send queue. */
static int open_channels(struct rdmig_source *s, const char *host,
			 const Rdmig__BlockMapResp *r)
{
	unsigned n = r->channels > 1 ? r->channels : 1, k;
	int rc;

	if (n > s->cfg.channels || (n > 1 && !(s->caps & PD_CAP_MULTI_CHANNEL)))
		return rd_err_set(&s->err, -EPROTO, "the destination granted %u channels, "
				  "%u were requested", n, s->cfg.channels);
	s->chans = calloc(n, sizeof(*s->chans));
	if (!s->chans)
		return rd_err_set(&s->err, -ENOMEM, "out of memory");
	s->nchans = n;
	for (k = 0; k < n; k++) {
		rc = init_chan(s, &s->chans[k]);
		if (rc)
			return rc;
	}
	s->chans[0].conn = s->conn;
	for (k = 1; k < n; k++) {
		rc = chan_connect(&s->chans[k].conn, s->conn, host, r->channel_port,
				  r->channel_token, k, n, s->cfg.max_writes + 4,
				  rd_deadline(s->cfg.timeout_ms), &s->err);
		if (rc)
			return rc;
	}
	if (n != s->cfg.channels)
		cfg_log(&s->cfg, RDMIG_LOG_WARN, "the destination accepts %u of the %u "
			"channels asked for", n, s->cfg.channels);
	else if (n > 1)
		cfg_log(&s->cfg, RDMIG_LOG_INFO, "striping writes over %u channels", n);
	return 0;
}

int rdmig_source_connect(struct rdmig_source *s, const char *host, const char *port)
{
	Rdmig__BlockMapResp *resp = NULL;
	int rc;

	if (s->state != SRC_NEW)
		return s->state == SRC_FAILED ? -EINVAL :
		       rd_err_set(&s->err, -EISCONN, "already connected");
	if (!s->nblocks)
		return rd_err_set(&s->err, -EINVAL, "no RAM blocks were added");
	s->stats.start_ms = rd_now_ms();
	cfg_log(&s->cfg, RDMIG_LOG_INFO, "connecting to %s:%s", host, port);
	rc = do_connect(s, host, port);
	if (!rc && (s->caps & PD_CAP_AUTH))
		rc = authenticate(s);
	if (!rc)
		rc = send_block_map(s);
	/* Pin our blocks while the destination pins (or maps) its own. */
	if (!rc && s->cfg.pin_all)
		rc = pin_all_local(s);
	if (!rc)
		rc = wait_ctrl(s, CT_BLOCK_MAP_RESP, (ProtobufCMessage **)&resp);
	if (!rc)
		rc = apply_block_map(s, resp);
	if (!rc)
		rc = open_channels(s, host, resp);
	ctrl_msg_free(resp ? &resp->base : NULL);
	if (rc)
		return fail(s, rc);
	pthread_mutex_lock(&s->stats.lock);
	s->stats.st.setup_time_ms = (uint64_t)(rd_now_ms() - s->stats.start_ms);
	pthread_mutex_unlock(&s->stats.lock);
	s->state = SRC_READY;
	cfg_log(&s->cfg, RDMIG_LOG_INFO, "connected: %u blocks, %s registration",
		s->nblocks, s->cfg.pin_all ? "pin-all" : "dynamic");
	return 0;
}

/* ---- dirty pages ------------------------------------------------------ */

int rdmig_source_mark_dirty(struct rdmig_source *s, unsigned block, uint64_t offset,
			    uint64_t length)
{
	struct src_block *b;
	uint64_t first, last, end;

	if (block >= s->nblocks)
		return rd_err_set(&s->err, -EINVAL, "block index %u out of range", block);
	b = &s->blocks[block];
	if (!length)
		return 0;
	if (rd_add_overflow_u64(offset, length, &end) || end > b->d.length)
		return rd_err_set(&s->err, -ERANGE, "block \"%s\": range %" PRIu64 "+%" PRIu64
				  " is outside its %" PRIu64 " bytes", b->d.name, offset,
				  length, b->d.length);
	first = offset / b->d.page_size;
	last = (end - 1) / b->d.page_size;
	bm_set_range(b->dirty, first, last - first + 1);
	return 0;
}

int rdmig_source_mark_all(struct rdmig_source *s)
{
	unsigned i;

	for (i = 0; i < s->nblocks; i++)
		bm_set_range(s->blocks[i].dirty, 0, s->blocks[i].npages);
	return 0;
}

/* ---- one iteration ---------------------------------------------------- */

static int flush_zero_ranges(struct rdmig_source *s)
{
	Rdmig__ZeroRanges zr = RDMIG__ZERO_RANGES__INIT;
	int rc;

	if (!s->zr_n)
		return 0;
	zr.n_block = zr.n_offset = zr.n_length = s->zr_n;
	zr.block = s->zr_block;
	zr.offset = s->zr_offset;
	zr.length = s->zr_length;
	rc = send_msg(s, CT_ZERO_RANGES, &zr.base);
	s->zr_n = 0;
	return rc;
}

static int add_zero_range(struct rdmig_source *s, uint32_t block, const struct plan_op *op)
{
	if (!s->zr_max) {
		s->zr_max = ctrl_zero_ranges_max(s->peer_msg_max);
		s->zr_block = calloc(s->zr_max, sizeof(*s->zr_block));
		s->zr_offset = calloc(s->zr_max, sizeof(*s->zr_offset));
		s->zr_length = calloc(s->zr_max, sizeof(*s->zr_length));
		if (!s->zr_block || !s->zr_offset || !s->zr_length)
			return rd_err_set(&s->err, -ENOMEM, "out of memory");
	}
	s->zr_block[s->zr_n] = block;
	s->zr_offset[s->zr_n] = op->offset;
	s->zr_length[s->zr_n] = op->length;
	if (++s->zr_n == s->zr_max)
		return flush_zero_ranges(s);
	return 0;
}

static int add_op(struct rdmig_source *s, uint32_t block, const struct plan_op *op)
{
	if (s->nops == s->ops_cap) {
		size_t ncap = s->ops_cap ? s->ops_cap * 2 : 1024;
		struct src_op *n = realloc(s->ops, ncap * sizeof(*n));

		if (!n)
			return rd_err_set(&s->err, -ENOMEM, "out of memory for the write plan");
		s->ops = n;
		s->ops_cap = ncap;
	}
	s->ops[s->nops++] = (struct src_op){ .block = block, .offset = op->offset,
					     .length = op->length,
					     .slot = s->blocks[block].first_slot + op->chunk };
	return 0;
}

/* Turns the dirty bitmaps into WRITE ops; zero ranges go out as they fill. */
static int plan_iteration(struct rdmig_source *s)
{
	uint64_t remaining = 0, zero = 0, skipped = 0;
	struct plan_op op;
	unsigned i;
	int rc;

	s->nops = s->req_pos = s->write_pos = s->done = 0;
	s->batch = 2;
	for (i = 0; i < s->nblocks; i++) {
		struct src_block *b = &s->blocks[i];
		struct plan_params p = { .chunk_shift = s->chunk_shift,
					 .merge_max = s->cfg.merge_max,
					 .page_size = b->d.page_size,
					 .detect_zero = !!(s->caps & PD_CAP_ZERO_PAGES),
					 .dest_zeroed = b->dest_zeroed };
		uint64_t cursor = 0;

		if (p.merge_max < p.page_size)
			p.merge_max = p.page_size;
		while (plan_next(&p, b->host, b->d.length, b->dirty, b->written, &cursor, &op) == 1) {
			if (op.kind == PLAN_WRITE) {
				rc = add_op(s, i, &op);
				remaining += op.length;
			} else if (op.kind == PLAN_ZERO) {
				rc = add_zero_range(s, i, &op);
				zero += op.pages;
			} else {
				rc = 0;
				zero += op.pages;
				skipped += op.pages;
			}
			if (rc)
				return rc;
		}
	}
	pthread_mutex_lock(&s->stats.lock);
	s->stats.st.remaining = remaining;
	s->stats.st.zero_pages += zero;
	s->stats.st.zero_pages_skipped += skipped;
	pthread_mutex_unlock(&s->stats.lock);
	return flush_zero_ranges(s);
}

static uint64_t slot_bytes(struct rdmig_source *s, const struct src_op *op, uint64_t *off)
{
	const struct src_block *b = &s->blocks[op->block];
	uint64_t len;

	blk_chunk_span(b->d.length, s->chunk_shift, op->slot - b->first_slot, off, &len);
	return len;
}

static void release_victims(struct rdmig_source *s, const uint64_t *victims, int n,
			    uint32_t *rel_block, uint64_t *rel_index, size_t *nrel);

/* Frees room under the pinned-bytes cap by releasing idle chunks; their
 * remote release rides in the next REGISTER_REQ. */
static int make_room(struct rdmig_source *s, uint64_t need, uint32_t *rel_block,
		     uint64_t *rel_index, size_t *nrel, size_t max_rel)
{
	uint64_t victims[64];
	size_t room;
	int n;

	for (;;) {
		room = max_rel - *nrel < 64 ? max_rel - *nrel : 64;
		if (!room) /* this request's release list is full */
			return s->creg.cap_bytes &&
			       s->creg.pinned_bytes + need > s->creg.cap_bytes ? -ENOSPC : 0;
		n = creg_victims(&s->creg, need, victims, room, NULL);
		if (n <= 0)
			return n < 0 ? -ENOSPC : 0;
		release_victims(s, victims, n, rel_block, rel_index, nrel);
	}
}

static void release_victims(struct rdmig_source *s, const uint64_t *victims, int n,
			    uint32_t *rel_block, uint64_t *rel_index, size_t *nrel)
{
	int i;

	for (i = 0; i < n; i++) {
		uint64_t slot = victims[i];
		unsigned b = 0;

		while (b + 1 < s->nblocks && s->blocks[b + 1].first_slot <= slot)
			b++;
		ibv_dereg_mr(creg_slot(&s->creg, slot)->mr);
		creg_remove(&s->creg, slot);
		rel_block[*nrel] = b;
		rel_index[*nrel] = slot - s->blocks[b].first_slot;
		(*nrel)++;
	}
}

/* Requests registration of the chunks the next ops need, as one batch.
 * Returns 1 when a request went out, 0 when nothing could be requested. */
static int request_chunks(struct rdmig_source *s)
{
	Rdmig__RegisterReq req = RDMIG__REGISTER_REQ__INIT;
	size_t max = ctrl_register_max(s->peer_msg_max) / 2, n = 0, nrel = 0, i;
	/* Small first batches let the first writes start after one quick round
	 * trip; later ones grow so the request count stays far below the chunk
	 * count while the destination registers ahead of the writes. */
	size_t want = s->batch < max ? s->batch : max;
	uint32_t *cb = NULL, *rb = NULL;
	uint64_t *ci = NULL, *ri = NULL, *slots = NULL;
	struct src_regreq *q;
	int rc = 0;

	if (s->regq_len == MAX_REG_OUTSTANDING || !ctrl_can_send(&s->ch))
		return 0;
	cb = malloc(max * sizeof(*cb));
	rb = malloc(max * sizeof(*rb));
	ci = malloc(max * sizeof(*ci));
	ri = malloc(max * sizeof(*ri));
	slots = malloc(max * sizeof(*slots));
	if (!cb || !rb || !ci || !ri || !slots) {
		rc = rd_err_set(&s->err, -ENOMEM, "out of memory");
		goto out;
	}
	while (s->req_pos < s->nops && n < want) {
		struct src_op *op = &s->ops[s->req_pos];
		if (creg_state(&s->creg, op->slot) == CREG_NONE) {
			uint64_t off, len = slot_bytes(s, op, &off);

			/* Everything pinned may be in flight: wait for completions. */
			if (make_room(s, len, rb, ri, &nrel, max) < 0 ||
			    creg_add(&s->creg, op->slot, len, CREG_PENDING) < 0)
				break;
			cb[n] = op->block;
			ci[n] = op->slot - s->blocks[op->block].first_slot;
			slots[n++] = op->slot;
		}
		creg_get(&s->creg, op->slot);
		creg_touch(&s->creg, op->slot);
		s->req_pos++;
	}
	if (!n && !nrel)
		goto out;
	req.req_id = ++s->next_req_id;
	req.n_chunk_block = req.n_chunk_index = n;
	req.chunk_block = cb;
	req.chunk_index = ci;
	req.n_release_block = req.n_release_index = nrel;
	req.release_block = rb;
	req.release_index = ri;
	rc = ctrl_send(&s->ch, CT_REGISTER_REQ, &req.base);
	if (rc)
		goto out;
	/* Register our side of the chunks while the destination does its part. */
	for (i = 0; i < n; i++) {
		struct src_op tmp = { .block = cb[i], .slot = slots[i] };
		uint64_t off, len = slot_bytes(s, &tmp, &off);
		struct ibv_mr *mr;

		rc = fab_reg_mr(s->conn, s->blocks[cb[i]].host + off, len, 0, &mr);
		if (rc) {
			rc = conn_err(s, rc);
			goto out;
		}
		creg_set_mr(&s->creg, slots[i], mr);
	}
	if (s->batch < max)
		s->batch *= 2;
	q = &s->regq[(s->regq_head + s->regq_len) % MAX_REG_OUTSTANDING];
	q->req_id = req.req_id;
	q->slots = slots;
	q->n = n;
	slots = NULL;
	s->regq_len++;
	pthread_mutex_lock(&s->stats.lock);
	s->stats.st.register_requests++;
	s->stats.st.chunks_registered += n;
	s->stats.st.pinned_bytes = s->creg.pinned_bytes;
	s->stats.st.pinned_peak = s->creg.peak_bytes;
	pthread_mutex_unlock(&s->stats.lock);
	rc = 1;
out:
	free(cb);
	free(rb);
	free(ci);
	free(ri);
	free(slots);
	return rc;
}

static bool op_ready(struct rdmig_source *s, const struct src_op *op)
{
	return s->cfg.pin_all || creg_state(&s->creg, op->slot) == CREG_READY;
}

static void signal_write(struct src_chan *ch, struct ibv_send_wr *wr)
{
	wr->send_flags = IBV_SEND_SIGNALED;
	ch->marks[ch->mtail++ % ch->cap] = ch->posted;
}

/* Appends op @i to its channel's chain as wr[n]: channels take ops in turn,
 * each signaling every 16th so its send queue drains without a completion
 * per WRITE.  Returns false when that channel has max_writes in flight. */
static bool chain_op(struct rdmig_source *s, size_t i, struct ibv_send_wr *wr,
		     struct ibv_sge *sge, int n)
{
	struct src_chan *ch = &s->chans[i % s->nchans];
	const struct src_op *op = &s->ops[i];
	const struct src_block *b = &s->blocks[op->block];
	const struct creg_slot *cs = s->cfg.pin_all ? NULL : creg_slot(&s->creg, op->slot);
	uint32_t lkey = cs ? ((struct ibv_mr *)cs->mr)->lkey : b->mr->lkey;
	uint32_t rkey = cs ? cs->rkey : b->remote_rkey;

	if (ch->posted - ch->done >= s->cfg.max_writes)
		return false;
	sge[n] = (struct ibv_sge){ .addr = (uintptr_t)(b->host + op->offset),
				   .length = (uint32_t)op->length, .lkey = lkey };
	wr[n] = (struct ibv_send_wr){ .wr_id = fab_wr_id(&ch->tag), .sg_list = &sge[n],
		.num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.wr.rdma = { .remote_addr = b->remote_base + op->offset, .rkey = rkey } };
	if (ch->last >= 0)
		wr[ch->last].next = &wr[n];
	else
		ch->first = n;
	ch->last = n;
	ch->ring[ch->posted++ % ch->cap] = i;
	if (ch->posted % 16 == 0)
		signal_write(ch, &wr[n]);
	return true;
}

static void count_writes(struct rdmig_source *s, size_t from, size_t to)
{
	uint64_t bytes = 0, pages = 0;
	size_t i;

	for (i = from; i < to; i++) {
		uint32_t ps = s->blocks[s->ops[i].block].d.page_size;

		bytes += s->ops[i].length;
		pages += (s->ops[i].length + ps - 1) / ps;
	}
	pthread_mutex_lock(&s->stats.lock);
	s->stats.st.writes += to - from;
	s->stats.st.normal_bytes += bytes;
	s->stats.st.normal_pages += pages;
	s->stats.st.transferred += bytes;
	s->stats.st.remaining -= bytes < s->stats.st.remaining ? bytes : s->stats.st.remaining;
	pthread_mutex_unlock(&s->stats.lock);
}

/* Posts ready WRITEs, one chain per channel, the last of each signaled. */
static int post_writes(struct rdmig_source *s)
{
	struct ibv_send_wr wr[32];
	struct ibv_sge sge[32];
	size_t from = s->write_pos;
	unsigned k;
	int n = 0, rc;

	for (k = 0; k < s->nchans; k++)
		s->chans[k].first = s->chans[k].last = -1;
	while (n < 32 && s->write_pos < s->req_pos && op_ready(s, &s->ops[s->write_pos]) &&
	       chain_op(s, s->write_pos, wr, sge, n)) {
		s->write_pos++;
		n++;
	}
	for (k = 0; k < s->nchans; k++) {
		struct src_chan *ch = &s->chans[k];

		if (ch->first < 0)
			continue;
		if (!(wr[ch->last].send_flags & IBV_SEND_SIGNALED))
			signal_write(ch, &wr[ch->last]);
		rc = fab_post_send(ch->conn, &wr[ch->first]);
		if (rc)
			return chan_err(s, ch, rc);
	}
	if (n)
		count_writes(s, from, s->write_pos);
	return n;
}

static int send_ops(struct rdmig_source *s)
{
	int rc, moved;

	while (s->done < s->nops) {
		moved = 0;
		if (s->cfg.pin_all) {
			s->req_pos = s->nops;
		} else {
			rc = request_chunks(s);
			if (rc < 0)
				return rc;
			moved += rc;
		}
		rc = post_writes(s);
		if (rc < 0)
			return rc;
		moved += rc;
		rc = progress(s, !moved);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int rdmig_source_iterate(struct rdmig_source *s)
{
	Rdmig__IterEnd end = RDMIG__ITER_END__INIT;
	int64_t t0 = rd_now_ms();
	uint64_t before = s->stats.st.normal_bytes;
	int rc;

	if (s->state != SRC_READY)
		return s->state == SRC_FAILED ? -EINVAL :
		       rd_err_set(&s->err, -ENOTCONN, "not connected");
	rc = plan_iteration(s);
	if (!rc)
		rc = send_ops(s);
	if (rc)
		return fail(s, rc);
	end.iteration = s->iteration + 1;
	end.bytes = s->stats.st.normal_bytes - before;
	s->iter_acked = false;
	rc = send_msg(s, CT_ITER_END, &end.base);
	if (!rc)
		rc = wait_for(s, &s->iter_acked);
	if (rc)
		return fail(s, rc);
	s->iteration++;
	pthread_mutex_lock(&s->stats.lock);
	s->stats.st.iterations = s->iteration;
	s->stats.st.data_time_ms += (uint64_t)(rd_now_ms() - t0);
	s->stats.st.remaining = 0;
	pthread_mutex_unlock(&s->stats.lock);
	report_progress(s, true);
	return 0;
}

int rdmig_source_poll(struct rdmig_source *s)
{
	int rc;

	if (s->state != SRC_READY)
		return s->state == SRC_FAILED ? -EINVAL : 0;
	rc = progress(s, false);
	return rc < 0 ? fail(s, rc) : 0;
}

/* ---- state, completion ------------------------------------------------ */

int rdmig_source_send_state(struct rdmig_source *s, const void *data, size_t len)
{
	Rdmig__State st = RDMIG__STATE__INIT;
	size_t max, n;
	int rc;

	if (s->state != SRC_READY)
		return s->state == SRC_FAILED ? -EINVAL :
		       rd_err_set(&s->err, -ENOTCONN, "not connected");
	max = ctrl_state_max(s->peer_msg_max);
	while (len) {
		n = len < max ? len : max;
		st.data.data = (uint8_t *)(uintptr_t)data;
		st.data.len = n;
		rc = send_msg(s, CT_STATE, &st.base);
		if (rc)
			return fail(s, rc);
		data = (const uint8_t *)data + n;
		len -= n;
		pthread_mutex_lock(&s->stats.lock);
		s->stats.st.state_bytes += n;
		pthread_mutex_unlock(&s->stats.lock);
	}
	return 0;
}

/* Our last sends must complete before the QP goes away; a failure here
 * cannot change the outcome the destination already confirmed. */
static void drain_sends(struct rdmig_source *s)
{
	int64_t deadline = rd_deadline(s->cfg.timeout_ms);
	struct ctrl_hdr h;
	ProtobufCMessage *m;
	struct ibv_wc wc;

	while (ctrl_sends_busy(&s->ch) &&
	       fab_poll_wait(s->conn, &wc, 1, deadline, -1) > 0) {
		if (ctrl_owns(&wc) && ctrl_complete(&s->ch, &wc, &h, &m) > 0)
			ctrl_msg_free(m);
	}
}

/* With VERIFY, one digest per block of the final image goes in COMPLETE. */
static int add_digests(struct rdmig_source *s, Rdmig__Complete *c)
{
	unsigned i;

	if (!(s->caps & PD_CAP_VERIFY))
		return 0;
	s->digests = calloc(s->nblocks, DIGEST_LEN);
	c->digests = calloc(s->nblocks, sizeof(*c->digests));
	if (!s->digests || !c->digests)
		return rd_err_set(&s->err, -ENOMEM, "out of memory");
	for (i = 0; i < s->nblocks; i++) {
		auth_digest(s->blocks[i].host, s->blocks[i].d.length, s->digests + i * DIGEST_LEN);
		c->digests[i].data = s->digests + i * DIGEST_LEN;
		c->digests[i].len = DIGEST_LEN;
	}
	c->n_digests = s->nblocks;
	return 0;
}

int rdmig_source_complete(struct rdmig_source *s)
{
	Rdmig__Complete c = RDMIG__COMPLETE__INIT;
	int rc;

	if (s->state != SRC_READY)
		return s->state == SRC_FAILED ? -EINVAL :
		       rd_err_set(&s->err, -ENOTCONN, "not connected");
	c.state_bytes = s->stats.st.state_bytes;
	c.iteration = s->iteration;
	rc = add_digests(s, &c);
	if (!rc)
		rc = send_msg(s, CT_COMPLETE, &c.base);
	free(c.digests);
	free(s->digests);
	s->digests = NULL;
	if (!rc)
		rc = wait_for(s, &s->complete_acked);
	if (!rc && !s->complete_ok)
		rc = rd_err_set(&s->err, -EIO, "the destination did not accept the image");
	if (rc)
		return fail(s, rc);
	drain_sends(s);
	disconnect_all(s);
	s->state = SRC_COMPLETED;
	pthread_mutex_lock(&s->stats.lock);
	stats_refresh(&s->stats);
	pthread_mutex_unlock(&s->stats.lock);
	cfg_log(&s->cfg, RDMIG_LOG_INFO, "migration completed after %u iterations",
		s->iteration);
	return 0;
}

void rdmig_source_cancel(struct rdmig_source *s)
{
	uint64_t one = 1;

	atomic_store(&s->cancelled, true);
	if (write(s->wake_fd, &one, sizeof(one)) < 0) {
		/* The counter can only be full if cancel was already signalled. */
	}
}

void rdmig_source_stats(struct rdmig_source *s, struct rdmig_stats *st)
{
	pthread_mutex_lock(&s->stats.lock);
	if (s->state != SRC_COMPLETED)
		stats_refresh(&s->stats);
	if (s->creg_ready) {
		s->stats.st.pinned_bytes = s->creg.pinned_bytes;
		s->stats.st.pinned_peak = s->creg.peak_bytes;
	}
	s->stats.st.ctrl_sent = s->ch.sent;
	s->stats.st.ctrl_received = s->ch.received;
	*st = s->stats.st;
	st->transferred += s->ch.bytes_sent;
	pthread_mutex_unlock(&s->stats.lock);
}

static void dereg_mr(void *mr)
{
	ibv_dereg_mr(mr);
}

void rdmig_source_destroy(struct rdmig_source *s)
{
	unsigned i;

	if (!s)
		return;
	disconnect_all(s);
	/* The data channels' QPs use the control connection's PD and CQ. */
	for (i = 1; s->chans && i < s->nchans; i++)
		fab_conn_destroy(s->chans[i].conn);
	for (i = 0; i < s->nblocks; i++) {
		if (s->blocks[i].mr)
			ibv_dereg_mr(s->blocks[i].mr);
		bm_free(s->blocks[i].dirty);
		bm_free(s->blocks[i].written);
	}
	for (i = 0; i < MAX_REG_OUTSTANDING; i++)
		free(s->regq[i].slots);
	if (s->creg_ready)
		creg_fini(&s->creg, dereg_mr);
	ctrl_fini(&s->ch);
	fab_conn_destroy(s->conn);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	stats_fini(&s->stats);
	free(s->blocks);
	free(s->ops);
	for (i = 0; s->chans && i < s->nchans; i++) {
		free(s->chans[i].ring);
		free(s->chans[i].marks);
	}
	free(s->chans);
	free(s->zr_block);
	free(s->zr_offset);
	free(s->zr_length);
	auth_key_free(s->key, s->cfg.auth_key_len);
	free(s);
}
