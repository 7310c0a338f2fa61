/* dest: the receiving side of a migration, as a non-blocking state machine.
 *
 * rdmig_dest_process() handles every pending CM event and completion and
 * returns; rdmig_dest_run() is that in a poll() loop.  The destination never
 * writes its memory itself except to clear zero ranges: the source's RDMA
 * WRITEs do that, into memory this side registered on request.  Everything
 * the source says is checked against the block table before use, and the
 * migration only counts as complete when COMPLETE arrives with counters
 * matching what was received. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "blocks.h"
#include "chan.h"
#include "codec.h"
#include "config.h"
#include "creg.h"
#include "ctrl.h"
#include "fabric.h"
#include "privdata.h"
#include "rdmig.h"
#include "rdmig.pb-c.h"
#include "zero.h"

enum dst_state {
	DST_NEW,        /* blocks may be added; no connection yet */
	/* Accepted with AUTH: our challenge left inside the ACCEPT, so it
	 * existed before any frame could arrive; waiting for the source's
	 * challenge and answer.  Nothing is registered or revealed.  Frames
	 * are taken before the ESTABLISHED event: our QP is ready once
	 * rdma_accept returns, and a source need not send its RTU. */
	DST_AUTH,
	DST_WAIT_MAP,   /* authenticated (or no key): waiting for the block map */
	DST_RUNNING,    /* iterations, state, until COMPLETE */
	DST_FLUSHING,   /* COMPLETE_ACK posted, waiting for its completion */
	DST_DONE,       /* the image is complete */
	DST_FAILED,     /* terminal; err holds the reason */
};

#define DEST_CHANNELS_DEFAULT 8
/* The handshake (authentication and block map) gets this long at most from
 * the accept, whatever the peer sends meanwhile: a peer that never proves
 * itself must not hold a connection by sending keepalives. */
#define HANDSHAKE_MS_MAX 10000

struct dst_block {
	struct blk_desc d;
	uint8_t *host;
	bool zeroed;
	bool announced;
	uint64_t nchunks;
	uint64_t first_slot;
	struct ibv_mr *mr;  /* pin-all */
};

struct rdmig_listener {
	struct fab_listener *fl;
};

struct rdmig_dest {
	struct rdmig_config cfg;
	struct rd_err err;
	enum dst_state state;
	int result;

	struct dst_block *blocks;   /* configured or mapped on demand */
	unsigned nblocks;
	unsigned *map;              /* announced index -> blocks index */
	unsigned nmap;
	unsigned chunk_shift;       /* the source's */

	struct fab_conn *conn;
	struct ctrl ch;
	bool ctrl_ready;
	uint32_t caps;
	struct chan_set *chans;     /* MULTI_CHANNEL: the source's data channels */
	unsigned req_channels;      /* channels the source asked for */

	struct creg creg;
	bool creg_ready;
	uint64_t nslots;

	uint32_t iteration;
	uint64_t state_bytes;
	struct stats_box stats;

	uint8_t *key;               /* our copy of cfg.auth_key */
	uint8_t nonce[AUTH_NONCE_LEN]; /* our challenge, sent in the ACCEPT */
	struct auth_bind bind;      /* what the answers are bound to */
	bool have_peer_nonce;
	int64_t handshake_deadline; /* block map received by then, or fail */
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
	stats_init(&d->stats);
	rc = cfg_load(&d->cfg, cfg, &d->err);
	if (!d->cfg.channels)
		d->cfg.channels = DEST_CHANNELS_DEFAULT;
	if (rc) {
		d->state = DST_FAILED;
		d->result = rc;
	} else if (d->cfg.auth_key) {
		d->key = auth_key_dup(d->cfg.auth_key, d->cfg.auth_key_len);
		if (!d->key) {
			rdmig_dest_destroy(d);
			return -ENOMEM;
		}
		d->cfg.auth_key = d->key;
	}
	*out = d;
	return rc;
}

const char *rdmig_dest_error(const struct rdmig_dest *d)
{
	/* Creation reports its failure through the handle, except for ENOMEM. */
	return d ? d->err.msg : "out of memory";
}

static int add_block(struct rdmig_dest *d, const char *name, void *host,
		     uint64_t length, int zeroed)
{
	struct dst_block *nb;

	nb = realloc(d->blocks, (d->nblocks + 1) * sizeof(*nb));
	if (!nb)
		return rd_err_set(&d->err, -ENOMEM, "out of memory");
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
		return rd_err_set(&d->err, -EINVAL, "blocks must be added before accepting");
	rc = blk_name_valid(name, &d->err);
	if (rc)
		return rc;
	if (!host || !length)
		return rd_err_set(&d->err, -EINVAL, "block \"%s\": bad address or length", name);
	if (d->nblocks >= BLK_MAX)
		return rd_err_set(&d->err, -E2BIG, "too many blocks (limit %d)", BLK_MAX);
	for (i = 0; i < d->nblocks; i++)
		if (!strcmp(d->blocks[i].d.name, name))
			return rd_err_set(&d->err, -EEXIST, "block \"%s\" added twice", name);
	return add_block(d, name, host, length, zeroed);
}

static int fail(struct rdmig_dest *d, int rc)
{
	if (d->state == DST_FAILED)
		return d->result;
	if (rc >= 0)
		rc = -EPROTO;
	d->state = DST_FAILED;
	d->result = rc;
	cfg_log(&d->cfg, RDMIG_LOG_ERROR, "migration failed: %s", d->err.msg);
	if (d->ctrl_ready)
		ctrl_send_error(&d->ch, rc, d->err.msg, 200);
	chan_set_disconnect(d->chans);
	fab_disconnect(d->conn);
	return rc;
}

static int conn_err(struct rdmig_dest *d, int rc)
{
	if (d->conn && d->conn->err.msg[0])
		memcpy(d->err.msg, d->conn->err.msg, sizeof(d->err.msg));
	return rc;
}

static int pre_accept(struct fab_conn *c, void *arg)
{
	struct rdmig_dest *d = arg;
	int rc = ctrl_init(&d->ch, c, d->cfg.ctrl_depth, d->cfg.ctrl_msg_max, &d->err);

	d->ctrl_ready = rc == 0;
	return rc;
}


/* Listens for the extra channels now so the fd set is fixed from accept on;
 * without them the migration still works over one channel. */
static bool open_channels(struct rdmig_dest *d, struct fab_conn *c, unsigned want)
{
	struct rd_err e;

	if (want < 2)
		return false;
	if (chan_set_open(&d->chans, c, d->cfg.channels, &e)) {
		cfg_log(&d->cfg, RDMIG_LOG_WARN, "using one channel: %s", e.msg);
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
		return rd_err_set(&d->err, -EAFNOSUPPORT, "the connection is neither IPv4 "
				  "nor IPv6");
	return 0;
}

/* The state right after the accept: the first frame may arrive now. */
static void begin_session(struct rdmig_dest *d, uint32_t caps)
{
	int hs = d->cfg.timeout_ms < HANDSHAKE_MS_MAX ? d->cfg.timeout_ms : HANDSHAKE_MS_MAX;

	d->caps = caps;
	d->stats.start_ms = rd_now_ms();
	d->handshake_deadline = d->stats.start_ms + hs;
	d->state = (caps & PD_CAP_AUTH) ? DST_AUTH : DST_WAIT_MAP;
}

int rdmig_dest_accept(struct rdmig_dest *d, struct rdmig_listener *l, int timeout_ms)
{
	struct fab_caps caps = { .sq_depth = d->cfg.ctrl_depth + 4,
				 .rq_depth = d->cfg.ctrl_depth };
	struct pd_request req;
	struct pd_accept acc;
	struct pd_reject rej;
	struct fab_conn *c = NULL;
	uint8_t priv[PD_ACCEPT_LEN];
	uint32_t local = PD_CAP_PIN_ALL | PD_CAP_ZERO_PAGES | PD_CAP_VERIFY |
			 (d->cfg.auth_key ? PD_CAP_AUTH : 0) |
			 (d->cfg.channels > 1 ? PD_CAP_MULTI_CHANNEL : 0);
	int rc;

	if (d->state != DST_NEW)
		return d->state == DST_FAILED ? d->result :
		       rd_err_set(&d->err, -EISCONN, "already accepted a connection");
	rc = fab_get_request(l->fl, timeout_ms ? rd_deadline(timeout_ms) : 0, &c, &d->err);
	if (rc)
		return rc;
	rc = pd_decode_request(c->peer_priv, c->peer_priv_len, &req, &d->err);
	if (rc) {
		reject(c, PD_REJ_BAD_REQUEST);
		fab_conn_destroy(c);
		return rd_err_prefix(&d->err, -EPROTO, "rejected a connection request");
	}
	rc = pd_negotiate(&req, PD_VERSION_MIN, PD_VERSION_MAX, local, d->cfg.ctrl_depth,
			  d->cfg.ctrl_msg_max, &acc, &rej, &d->err);
	if (rc) {
		reject(c, rej.reason);
		fab_conn_destroy(c);
		return rd_err_prefix(&d->err, rc, "rejected a connection request");
	}
	if (d->cfg.auth_key && !(acc.caps & PD_CAP_AUTH)) {
		reject(c, PD_REJ_UNAUTHORIZED);
		fab_conn_destroy(c);
		return rd_err_set(&d->err, -EACCES, "rejected a connection request: the "
				  "source offered no authentication (it has no key)");
	}
	if ((acc.caps & PD_CAP_MULTI_CHANNEL) && !open_channels(d, c, req.channels))
		acc.caps &= ~PD_CAP_MULTI_CHANNEL;
	/* The challenge exists before the connection does. */
	if (acc.caps & PD_CAP_AUTH) {
		auth_nonce(d->nonce);
		memcpy(acc.nonce, d->nonce, AUTH_NONCE_LEN);
	}
	d->conn = c;
	rc = fab_accept(c, &caps, priv, pd_encode_accept(&acc, priv, sizeof(priv)),
			pre_accept, d);
	if (rc) {
		/* Not accepted yet: tell the source why instead of going silent. */
		if (c->state != FAB_ACCEPTING)
			reject(c, PD_REJ_NO_RESOURCES);
		return fail(d, conn_err(d, rc));
	}
	ctrl_start(&d->ch, req.ctrl_depth, req.ctrl_msg_max);
	rc = bind_connection(d, c, priv);
	if (rc)
		return fail(d, rc);
	begin_session(d, acc.caps);
	cfg_log(&d->cfg, RDMIG_LOG_INFO, "accepted a migration (protocol %u)", acc.version);
	return 0;
}

/* ---- block map ----------------------------------------------------------- */

static int find_block(struct rdmig_dest *d, const Rdmig__BlockDesc *bd)
{
	char emsg[RD_ERRLEN] = "";
	void *host = NULL;
	int zeroed = 0, rc;
	unsigned i;

	for (i = 0; i < d->nblocks; i++)
		if (!strcmp(d->blocks[i].d.name, bd->name))
			break;
	if (i < d->nblocks) {
		if (d->blocks[i].announced)
			return rd_err_set(&d->err, -EEXIST, "block \"%s\" announced twice", bd->name);
		if (d->blocks[i].d.length != bd->length)
			return rd_err_set(&d->err, -EINVAL, "block \"%s\": the source's length "
					  "%" PRIu64 " differs from the destination's %" PRIu64,
					  bd->name, bd->length, d->blocks[i].d.length);
		return (int)i;
	}
	if (!d->cfg.map_block)
		return rd_err_set(&d->err, -ENOENT, "block \"%s\" is not configured on the "
				  "destination", bd->name);
	rc = d->cfg.map_block(d->cfg.map_ctx, bd->name, bd->length, bd->page_size, &host,
			      &zeroed, emsg, sizeof(emsg));
	if (rc || !host)
		return rd_err_set(&d->err, rc < 0 ? rc : -EINVAL, "block \"%s\": %s", bd->name,
				  emsg[0] ? emsg : "could not be mapped");
	return add_block(d, bd->name, host, bd->length, zeroed);
}

static int map_blocks(struct rdmig_dest *d, const Rdmig__BlockMapReq *r)
{
	unsigned i;
	int idx;

	d->chunk_shift = r->chunk_shift;
	d->map = calloc(r->n_blocks, sizeof(*d->map));
	if (!d->map)
		return rd_err_set(&d->err, -ENOMEM, "out of memory");
	for (i = 0; i < r->n_blocks; i++) {
		idx = find_block(d, r->blocks[i]);
		if (idx < 0)
			return idx;
		d->blocks[idx].announced = true;
		d->blocks[idx].d.page_size = r->blocks[i]->page_size;
		d->blocks[idx].nchunks = blk_nchunks(d->blocks[idx].d.length, d->chunk_shift);
		d->blocks[idx].first_slot = d->nslots;
		d->nslots += d->blocks[idx].nchunks;
		d->map[d->nmap++] = (unsigned)idx;
	}
	for (i = 0; i < d->nblocks; i++)
		if (!d->blocks[i].announced)
			return rd_err_set(&d->err, -ENOENT, "block \"%s\" was not sent by the "
					  "source", d->blocks[i].d.name);
	return 0;
}

static int register_all(struct rdmig_dest *d, Rdmig__BlockDest *out)
{
	unsigned i;
	int rc;

	for (i = 0; i < d->nmap; i++) {
		struct dst_block *b = &d->blocks[d->map[i]];

		rc = fab_reg_mr(d->conn, b->host, b->d.length,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &b->mr);
		if (rc)
			return rd_err_prefix(&d->err, conn_err(d, rc), "block \"%s\"",
					     b->d.name);
		out[i].rkey = b->mr->rkey;
		d->stats.st.pinned_bytes += b->d.length;
	}
	d->stats.st.pinned_peak = d->stats.st.pinned_bytes;
	return 0;
}

static uint64_t host_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);

	return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : UINT64_MAX;
}

/* Before anything is mapped or pinned for it: the image must fit this
 * side's limits, and the application must take it. */
static int admit_image(struct rdmig_dest *d, const Rdmig__BlockMapReq *r)
{
	uint64_t total = 0, max = d->cfg.max_image ? d->cfg.max_image : host_memory();
	char msg[RD_ERRLEN] = "";
	size_t i;
	int rc;

	for (i = 0; i < r->n_blocks; i++)
		total += r->blocks[i]->length; /* at most 1024 x 2^50: no overflow */
	if (total > max)
		return rd_err_set(&d->err, -EFBIG, "the image of %" PRIu64 " bytes is larger "
				  "than this destination takes (%" PRIu64 " bytes, %s)", total,
				  max, d->cfg.max_image ? "its image limit" : "its physical memory");
	if ((d->caps & PD_CAP_PIN_ALL) && d->cfg.pinned_cap && total > d->cfg.pinned_cap)
		return rd_err_set(&d->err, -ENOSPC, "pin-all would pin %" PRIu64 " bytes, "
				  "more than this destination's pinned-bytes cap of %" PRIu64
				  ": use dynamic registration, or raise the destination's cap",
				  total, d->cfg.pinned_cap);
	if (!d->cfg.admit)
		return 0;
	rc = d->cfg.admit(d->cfg.admit_ctx, total, msg, sizeof(msg));
	if (rc)
		return rd_err_set(&d->err, rc < 0 ? rc : -EPERM, "%s",
				  msg[0] ? msg : "the destination turned the migration away");
	return 0;
}

static int on_block_map(struct rdmig_dest *d, const Rdmig__BlockMapReq *r)
{
	Rdmig__BlockMapResp resp = RDMIG__BLOCK_MAP_RESP__INIT;
	Rdmig__BlockDest *bd = NULL, **ptrs = NULL;
	unsigned i;
	int rc;

	rc = admit_image(d, r);
	if (!rc)
		rc = map_blocks(d, r);
	if (rc)
		goto out;
	bd = calloc(d->nmap, sizeof(*bd));
	ptrs = calloc(d->nmap, sizeof(*ptrs));
	if (!bd || !ptrs) {
		rc = rd_err_set(&d->err, -ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < d->nmap; i++) {
		struct dst_block *b = &d->blocks[d->map[i]];

		rdmig__block_dest__init(&bd[i]);
		bd[i].base_addr = (uintptr_t)b->host;
		bd[i].zeroed = b->zeroed;
		ptrs[i] = &bd[i];
		d->stats.st.total += b->d.length;
	}
	if (d->caps & PD_CAP_PIN_ALL) {
		rc = register_all(d, bd);
	} else {
		rc = creg_init(&d->creg, d->nslots, d->cfg.pinned_cap) ?
		     rd_err_set(&d->err, -ENOMEM, "out of memory") : 0;
		d->creg_ready = rc == 0;
		resp.pinned_cap = d->cfg.pinned_cap;
	}
	if (rc)
		goto out;
	resp.n_blocks = d->nmap;
	resp.blocks = ptrs;
	if (d->chans) {
		resp.channels = chan_set_grant(d->chans, d->req_channels, &resp.channel_port,
					       &resp.channel_token);
		cfg_log(&d->cfg, RDMIG_LOG_INFO, "%u data channels (the source asked for %u)",
			resp.channels, d->req_channels);
	}
	rc = ctrl_send(&d->ch, CT_BLOCK_MAP_RESP, &resp.base);
	if (rc == -EAGAIN)
		rc = rd_err_set(&d->err, -EPROTO, "no credit to answer the block map");
	d->state = DST_RUNNING;
	pthread_mutex_lock(&d->stats.lock);
	d->stats.st.setup_time_ms = (uint64_t)(rd_now_ms() - d->stats.start_ms);
	pthread_mutex_unlock(&d->stats.lock);
out:
	free(bd);
	free(ptrs);
	return rc;
}

/* ---- dynamic registration -------------------------------------------- */

/* Resolves a peer (block, chunk) pair to our block and slot, validating both. */
static int chunk_slot(struct rdmig_dest *d, uint32_t blk, uint64_t chunk,
		      struct dst_block **bo, uint64_t *slot)
{
	struct dst_block *b;

	if (blk >= d->nmap)
		return rd_err_set(&d->err, -EPROTO, "block index %u out of range (%u blocks)",
				  blk, d->nmap);
	b = &d->blocks[d->map[blk]];
	if (chunk >= b->nchunks)
		return rd_err_set(&d->err, -EPROTO, "block \"%s\": chunk %" PRIu64
				  " out of range (%" PRIu64 " chunks)", b->d.name, chunk,
				  b->nchunks);
	*bo = b;
	*slot = b->first_slot + chunk;
	return 0;
}

static int release_chunks(struct rdmig_dest *d, const Rdmig__RegisterReq *r)
{
	struct dst_block *b;
	uint64_t slot;
	size_t i;
	int rc;

	for (i = 0; i < r->n_release_block; i++) {
		rc = chunk_slot(d, r->release_block[i], r->release_index[i], &b, &slot);
		if (rc)
			return rc;
		if (creg_state(&d->creg, slot) != CREG_READY)
			return rd_err_set(&d->err, -EPROTO, "block \"%s\": release of chunk %"
					  PRIu64 " that is not registered", b->d.name,
					  r->release_index[i]);
		ibv_dereg_mr(creg_slot(&d->creg, slot)->mr);
		creg_remove(&d->creg, slot);
	}
	return 0;
}

static int register_chunk(struct rdmig_dest *d, uint32_t blk, uint64_t chunk,
			  uint32_t *rkey)
{
	struct dst_block *b;
	struct ibv_mr *mr;
	uint64_t slot, off, len;
	int rc;

	rc = chunk_slot(d, blk, chunk, &b, &slot);
	if (rc)
		return rc;
	if (creg_state(&d->creg, slot) == CREG_READY) {
		*rkey = creg_slot(&d->creg, slot)->rkey;
		return 0;
	}
	blk_chunk_span(b->d.length, d->chunk_shift, chunk, &off, &len);
	if (d->creg.cap_bytes && d->creg.pinned_bytes + len > d->creg.cap_bytes)
		return rd_err_set(&d->err, -ENOSPC, "registering chunk %" PRIu64 " of \"%s\" "
				  "would exceed the pinned-bytes cap of %" PRIu64 " bytes",
				  chunk, b->d.name, d->creg.cap_bytes);
	rc = fab_reg_mr(d->conn, b->host + off, len,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &mr);
	if (rc)
		return rd_err_prefix(&d->err, conn_err(d, rc), "block \"%s\", chunk %"
				     PRIu64, b->d.name, chunk);
	if (creg_add(&d->creg, slot, len, CREG_READY)) {
		ibv_dereg_mr(mr);
		return rd_err_set(&d->err, -ENOMEM, "out of memory");
	}
	creg_set_ready(&d->creg, slot, mr->rkey, mr);
	*rkey = mr->rkey;
	d->stats.st.chunks_registered++;
	return 0;
}

static int on_register(struct rdmig_dest *d, const Rdmig__RegisterReq *r)
{
	Rdmig__RegisterResp resp = RDMIG__REGISTER_RESP__INIT;
	uint32_t *rkeys;
	size_t i;
	int rc;

	if (d->caps & PD_CAP_PIN_ALL)
		return rd_err_set(&d->err, -EPROTO, "REGISTER_REQ in pin-all mode");
	rc = release_chunks(d, r);
	if (rc)
		return rc;
	rkeys = calloc(r->n_chunk_block ? r->n_chunk_block : 1, sizeof(*rkeys));
	if (!rkeys)
		return rd_err_set(&d->err, -ENOMEM, "out of memory");
	for (i = 0; i < r->n_chunk_block && !rc; i++)
		rc = register_chunk(d, r->chunk_block[i], r->chunk_index[i], &rkeys[i]);
	if (!rc) {
		resp.req_id = r->req_id;
		resp.n_rkeys = r->n_chunk_block;
		resp.rkeys = rkeys;
		rc = ctrl_send(&d->ch, CT_REGISTER_RESP, &resp.base);
		if (rc == -EAGAIN)
			rc = rd_err_set(&d->err, -EPROTO, "the source sent more requests "
					"than its credits allow");
	}
	free(rkeys);
	pthread_mutex_lock(&d->stats.lock);
	d->stats.st.register_requests++;
	d->stats.st.pinned_bytes = d->creg.pinned_bytes;
	d->stats.st.pinned_peak = d->creg.peak_bytes;
	pthread_mutex_unlock(&d->stats.lock);
	return rc;
}

/* ---- data-path messages ------------------------------------------------ */

static int on_zero_ranges(struct rdmig_dest *d, const Rdmig__ZeroRanges *z)
{
	uint64_t pages = 0;
	size_t i;
	int rc;

	for (i = 0; i < z->n_block; i++) {
		struct dst_block *b;

		if (z->block[i] >= d->nmap)
			return rd_err_set(&d->err, -EPROTO, "zero range for block index %u out "
					  "of range", z->block[i]);
		b = &d->blocks[d->map[z->block[i]]];
		rc = blk_check_range(b->d.name, b->d.length, z->offset[i], z->length[i], &d->err);
		if (rc)
			return rc;
		/* Reading a never-touched page is free; writing it would
		 * allocate it. */
		if (!zero_is_zero(b->host + z->offset[i], z->length[i]))
			memset(b->host + z->offset[i], 0, z->length[i]);
		pages += (z->length[i] + b->d.page_size - 1) / b->d.page_size;
	}
	pthread_mutex_lock(&d->stats.lock);
	d->stats.st.zero_pages += pages;
	pthread_mutex_unlock(&d->stats.lock);
	return 0;
}

static int on_iter_end(struct rdmig_dest *d, const Rdmig__IterEnd *e)
{
	Rdmig__IterAck ack = RDMIG__ITER_ACK__INIT;
	int rc;

	if (e->iteration != d->iteration + 1)
		return rd_err_set(&d->err, -EPROTO, "ITER_END for iteration %u, expected %u",
				  e->iteration, d->iteration + 1);
	d->iteration++;
	ack.iteration = d->iteration;
	rc = ctrl_send(&d->ch, CT_ITER_ACK, &ack.base);
	if (rc == -EAGAIN)
		rc = rd_err_set(&d->err, -EPROTO, "no credit to acknowledge the iteration");
	pthread_mutex_lock(&d->stats.lock);
	d->stats.st.iterations = d->iteration;
	d->stats.st.normal_bytes += e->bytes;
	d->stats.st.transferred += e->bytes;
	pthread_mutex_unlock(&d->stats.lock);
	return rc;
}

static int on_state(struct rdmig_dest *d, const Rdmig__State *st)
{
	int rc;

	if (!d->cfg.state)
		return rd_err_set(&d->err, -EPROTO, "the source sent device state but the "
				  "destination has no state sink");
	rc = d->cfg.state(d->cfg.state_ctx, st->data.data, st->data.len);
	if (rc)
		return rd_err_set(&d->err, rc < 0 ? rc : -EIO, "writing device state failed: %s",
				  strerror(rc < 0 ? -rc : EIO));
	d->state_bytes += st->data.len;
	pthread_mutex_lock(&d->stats.lock);
	d->stats.st.state_bytes = d->state_bytes;
	pthread_mutex_unlock(&d->stats.lock);
	return 0;
}

static void hex(const uint8_t *p, size_t n, char *out)
{
	size_t i;

	for (i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
}

/* With VERIFY, the image counts as complete only if every block hashes to
 * the digest the source computed over its final memory. */
static int verify_digests(struct rdmig_dest *d, const Rdmig__Complete *c)
{
	uint8_t mine[DIGEST_LEN];
	char a[2 * DIGEST_LEN + 1], b[2 * DIGEST_LEN + 1];
	unsigned i;

	if (!(d->caps & PD_CAP_VERIFY) || c->n_digests == 0)
		return (d->caps & PD_CAP_VERIFY) && d->nmap ?
		       rd_err_set(&d->err, -EPROTO, "COMPLETE carries no digests") : 0;
	if (c->n_digests != d->nmap)
		return rd_err_set(&d->err, -EPROTO, "COMPLETE carries %zu digests for %u blocks",
				  c->n_digests, d->nmap);
	for (i = 0; i < d->nmap; i++) {
		const struct dst_block *blk = &d->blocks[d->map[i]];

		if (c->digests[i].len != DIGEST_LEN)
			return rd_err_set(&d->err, -EPROTO, "digest of %zu bytes", c->digests[i].len);
		auth_digest(blk->host, blk->d.length, mine);
		if (memcmp(mine, c->digests[i].data, DIGEST_LEN)) {
			hex(c->digests[i].data, DIGEST_LEN, a);
			hex(mine, DIGEST_LEN, b);
			return rd_err_set(&d->err, -EILSEQ, "verification failed: block \"%s\" "
					  "differs (source %s, destination %s)", blk->d.name, a, b);
		}
	}
	cfg_log(&d->cfg, RDMIG_LOG_INFO, "verified %u blocks", d->nmap);
	return 0;
}

static int on_complete(struct rdmig_dest *d, const Rdmig__Complete *c)
{
	Rdmig__CompleteAck ack = RDMIG__COMPLETE_ACK__INIT;
	int rc;

	if (c->state_bytes != d->state_bytes)
		return rd_err_set(&d->err, -EIO, "the source sent %" PRIu64 " state bytes, "
				  "%" PRIu64 " arrived", c->state_bytes, d->state_bytes);
	if (c->iteration != d->iteration)
		return rd_err_set(&d->err, -EPROTO, "COMPLETE after iteration %u, %u were "
				  "acknowledged", c->iteration, d->iteration);
	rc = verify_digests(d, c);
	if (rc)
		return rc;
	if (d->cfg.commit) {
		char msg[RD_ERRLEN] = "";

		rc = d->cfg.commit(d->cfg.commit_ctx, msg, sizeof(msg));
		if (rc)
			return rd_err_set(&d->err, rc < 0 ? rc : -EIO, "the destination could "
					  "not save the image: %s", msg[0] ? msg : strerror(EIO));
	}
	ack.ok = 1;
	rc = ctrl_send(&d->ch, CT_COMPLETE_ACK, &ack.base);
	if (rc == -EAGAIN)
		rc = rd_err_set(&d->err, -EPROTO, "no credit to acknowledge completion");
	if (!rc)
		d->state = DST_FLUSHING;
	return rc;
}

static int peer_error(struct rdmig_dest *d, const Rdmig__Error *e)
{
	char clean[512];
	size_t i;

	snprintf(clean, sizeof(clean), "%s", e->message ? e->message : "");
	for (i = 0; clean[i]; i++)
		if ((unsigned char)clean[i] < 0x20 || clean[i] == 0x7f)
			clean[i] = '?';
	return rd_err_set(&d->err, e->code == -ECANCELED ? -ECANCELED : -ECONNABORTED,
			  "source reported: %s", clean);
}

/* ---- authentication ------------------------------------------------ */

/* The source sends its challenge, then its answer to ours (which went out
 * in the ACCEPT); we answer only once its answer checks out, so a source
 * without the key learns nothing, not even our answer. */
static int on_auth(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	Rdmig__AuthResponse resp = RDMIG__AUTH_RESPONSE__INIT;
	const Rdmig__AuthResponse *r = (const Rdmig__AuthResponse *)m;
	uint8_t mac[AUTH_MAC_LEN];
	int rc;

	if (h->type == CT_AUTH_CHALLENGE && !d->have_peer_nonce) {
		const Rdmig__AuthChallenge *c = (const Rdmig__AuthChallenge *)m;

		if (c->nonce.len != AUTH_NONCE_LEN)
			return rd_err_set(&d->err, -EPROTO, "the source's challenge has %zu bytes",
					  c->nonce.len);
		if (!auth_nonce_acceptable(c->nonce.data, d->nonce))
			return rd_err_set(&d->err, -EACCES, "authentication failed: the source's "
					  "challenge is all zero or repeats ours");
		memcpy(d->bind.src_nonce, c->nonce.data, AUTH_NONCE_LEN);
		d->have_peer_nonce = true;
		return 0;
	}
	if (h->type != CT_AUTH_RESPONSE || !d->have_peer_nonce)
		return rd_err_set(&d->err, -EACCES, "authentication required: the source sent "
				  "%s instead", ctrl_type_name(h->type));
	if (auth_check(d->cfg.auth_key, d->cfg.auth_key_len, AUTH_SOURCE, &d->bind,
		       r->mac.data, r->mac.len))
		return rd_err_set(&d->err, -EACCES, "authentication failed: the source does "
				  "not hold this destination's key, or its answer was made for "
				  "another connection");
	auth_mac(d->cfg.auth_key, d->cfg.auth_key_len, AUTH_DEST, &d->bind, mac);
	resp.mac.data = mac;
	resp.mac.len = AUTH_MAC_LEN;
	rc = ctrl_send(&d->ch, CT_AUTH_RESPONSE, &resp.base);
	if (rc)
		return rc == -EAGAIN ? rd_err_set(&d->err, -EPROTO, "no credit to answer") : rc;
	d->state = DST_WAIT_MAP;
	cfg_log(&d->cfg, RDMIG_LOG_INFO, "authenticated the source");
	return 0;
}

static int handle_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	if (h->type == CT_CREDIT || h->type == CT_KEEPALIVE)
		return 0;
	if (h->type == CT_ERROR)
		return peer_error(d, (const Rdmig__Error *)m);
	if (d->state == DST_AUTH)
		return on_auth(d, h, m);
	if (d->state == DST_WAIT_MAP) {
		if (h->type != CT_BLOCK_MAP_REQ)
			return rd_err_set(&d->err, -EPROTO, "expected BLOCK_MAP_REQ, got %s",
					  ctrl_type_name(h->type));
		return on_block_map(d, (const Rdmig__BlockMapReq *)m);
	}
	if (d->state != DST_RUNNING)
		return rd_err_set(&d->err, -EPROTO, "unexpected %s after completion",
				  ctrl_type_name(h->type));
	switch (h->type) {
	case CT_REGISTER_REQ:
		return on_register(d, (const Rdmig__RegisterReq *)m);
	case CT_ZERO_RANGES:
		return on_zero_ranges(d, (const Rdmig__ZeroRanges *)m);
	case CT_ITER_END:
		return on_iter_end(d, (const Rdmig__IterEnd *)m);
	case CT_STATE:
		return on_state(d, (const Rdmig__State *)m);
	case CT_COMPLETE:
		return on_complete(d, (const Rdmig__Complete *)m);
	default:
		return rd_err_set(&d->err, -EPROTO, "unexpected %s from the source",
				  ctrl_type_name(h->type));
	}
}

/* ---- driving ----------------------------------------------------------- */

static int handle_wc(struct rdmig_dest *d, const struct ibv_wc *wc)
{
	struct ctrl_hdr h;
	ProtobufCMessage *m;
	int rc;

	if (!ctrl_owns(wc))
		return rd_err_set(&d->err, -EPROTO, "completion for an unknown request");
	/* Once COMPLETE_ACK is posted the source may disconnect, flushing our
	 * idle receives; only the ACK's own completion still matters. */
	if (d->state == DST_FLUSHING && wc->status == IBV_WC_WR_FLUSH_ERR &&
	    fab_tag_of(wc)->kind == CTRL_TAG_RECV)
		return 0;
	rc = ctrl_complete(&d->ch, wc, &h, &m);
	if (rc <= 0)
		return rc;
	rc = handle_msg(d, &h, m);
	ctrl_msg_free(m);
	return rc;
}

static int step_channels(struct rdmig_dest *d)
{
	char note[RD_ERRLEN] = "";
	int rc = chan_set_process(d->chans, note, sizeof(note), &d->err);

	if (note[0])
		cfg_log(&d->cfg, RDMIG_LOG_WARN, "%s", note);
	/* Once COMPLETE_ACK is out, the source closing its channels is normal. */
	return d->state == DST_FLUSHING ? 0 : rc;
}

static int step(struct rdmig_dest *d)
{
	struct ibv_wc wc[16];
	int n, i, rc;
	int cm_rc = 0;

	/* The CM fd is level-triggered: a few events per step is enough. */
	for (i = 0; i < 4 && !cm_rc; i++)
		cm_rc = fab_cm_process(d->conn);
	/* Even after a disconnect, drain the CQ first: the source's last
	 * message (an ERROR saying why) may be waiting there. */
	for (;;) {
		n = fab_poll(d->conn, wc, (int)RD_ARRAY_SIZE(wc));
		if (n < 0)
			return conn_err(d, n);
		if (n == 0) {
			rc = fab_cq_rearm(d->conn);
			if (rc)
				return conn_err(d, rc);
			n = fab_poll(d->conn, wc, (int)RD_ARRAY_SIZE(wc));
			if (n <= 0)
				break;
		}
		for (i = 0; i < n; i++) {
			rc = handle_wc(d, &wc[i]);
			if (rc < 0)
				return rc;
		}
	}
	if (cm_rc)
		return d->state == DST_FLUSHING ? 0 : conn_err(d, cm_rc);
	if (d->chans) {
		rc = step_channels(d);
		if (rc)
			return rc;
	}
	return ctrl_return_credits(&d->ch, false);
}

int rdmig_dest_process(struct rdmig_dest *d)
{
	int64_t now;
	int rc;

	if (d->state == DST_FAILED)
		return d->result;
	if (d->state == DST_DONE)
		return 1;
	if (d->state == DST_NEW)
		return rd_err_set(&d->err, -ENOTCONN, "no connection accepted");
	rc = step(d);
	if (rc < 0) {
		if (rc == -ECONNRESET && d->state != DST_FLUSHING)
			rd_err_set(&d->err, rc, "the source disconnected before completing the "
				   "migration: the image is incomplete");
		return fail(d, rc);
	}
	if (d->state == DST_FLUSHING && !ctrl_sends_busy(&d->ch)) {
		d->state = DST_DONE;
		chan_set_disconnect(d->chans);
		fab_disconnect(d->conn);
		pthread_mutex_lock(&d->stats.lock);
		stats_refresh(&d->stats);
		pthread_mutex_unlock(&d->stats.lock);
		cfg_log(&d->cfg, RDMIG_LOG_INFO, "migration complete: %u iterations, %" PRIu64
			" state bytes", d->iteration, d->state_bytes);
		return 1;
	}
	now = rd_now_ms();
	if (d->state < DST_RUNNING && now > d->handshake_deadline)
		return fail(d, rd_err_set(&d->err, -ETIMEDOUT, "the source did not %s within "
					  "%" PRId64 " ms of connecting", d->state == DST_AUTH ?
					  "authenticate" : "send its block map",
					  d->handshake_deadline - d->stats.start_ms));
	if (now - d->ch.last_recv_ms > d->cfg.timeout_ms)
		return fail(d, rd_err_set(&d->err, -ETIMEDOUT, "the source was silent for "
					  "%d ms", d->cfg.timeout_ms));
	if (d->state >= DST_WAIT_MAP && now - d->ch.last_send_ms >= d->cfg.keepalive_ms) {
		rc = ctrl_keepalive(&d->ch);
		if (rc)
			return fail(d, rc);
	}
	return 0;
}

int rdmig_dest_fds(const struct rdmig_dest *d, int *fds, int max)
{
	if (!d->conn || max < (d->chans ? 3 : 2))
		return 0;
	fds[0] = fab_cm_fd(d->conn);
	fds[1] = fab_cq_fd(d->conn);
	if (!d->chans)
		return 2;
	fds[2] = chan_set_fd(d->chans);
	return 3;
}

int rdmig_dest_timeout(const struct rdmig_dest *d)
{
	int64_t now = rd_now_ms();
	int64_t t1 = d->ch.last_recv_ms + d->cfg.timeout_ms - now;
	int64_t t2 = d->ch.last_send_ms + d->cfg.keepalive_ms - now;
	int64_t t = t1 < t2 ? t1 : t2;

	if (d->state < DST_RUNNING && d->handshake_deadline - now < t)
		t = d->handshake_deadline - now;
	if (d->state == DST_DONE || d->state == DST_FAILED)
		return -1;
	if (d->state == DST_FLUSHING)
		return 10;
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
	pthread_mutex_lock(&d->stats.lock);
	if (d->state != DST_DONE)
		stats_refresh(&d->stats);
	d->stats.st.ctrl_sent = d->ch.sent;
	d->stats.st.ctrl_received = d->ch.received;
	*st = d->stats.st;
	pthread_mutex_unlock(&d->stats.lock);
}

void rdmig_dest_cancel(struct rdmig_dest *d, const char *reason)
{
	if (d->state == DST_DONE || d->state == DST_FAILED)
		return;
	rd_err_set(&d->err, -ECANCELED, "cancelled by the destination: %s",
		   reason && *reason ? reason : "no reason given");
	fail(d, -ECANCELED);
}

int rdmig_dest_peer(const struct rdmig_dest *d, char *buf, size_t len)
{
	const struct sockaddr *sa = d->conn ? fab_peer_addr(d->conn) : NULL;
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (!sa || !len)
		return -ENOTCONN;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
	}
	snprintf(buf, len, sa->sa_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, port);
	return 0;
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

static void dereg_mr(void *mr)
{
	ibv_dereg_mr(mr);
}

void rdmig_dest_destroy(struct rdmig_dest *d)
{
	unsigned i;

	if (!d)
		return;
	/* The channels' QPs use the control connection's PD and CQ. */
	chan_set_destroy(d->chans);
	fab_disconnect(d->conn);
	for (i = 0; i < d->nblocks; i++)
		if (d->blocks[i].mr)
			ibv_dereg_mr(d->blocks[i].mr);
	if (d->creg_ready)
		creg_fini(&d->creg, dereg_mr);
	ctrl_fini(&d->ch);
	fab_conn_destroy(d->conn);
	stats_fini(&d->stats);
	free(d->blocks);
	free(d->map);
	auth_key_free(d->key, d->cfg.auth_key_len);
	free(d);
}
