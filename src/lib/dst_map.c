/* dst_map: the destination's blocks and what fills them.  The block map is
 * checked against this side's limits and the application's admission
 * before anything is mapped; pin-all pieces are registered one per step
 * after the answer, their keys sent as they come; dynamic registration
 * answers REGISTER_REQ; zero ranges, iterations, the state stream and
 * completion (with its digests and the commit) follow.  Everything the
 * source says is checked against the block table before use. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "dest.h"
#include "privdata.h"
#include "zero.h"

/* Bytes hashed per slice when verifying, and bytes of zero ranges checked
 * (and cleared) per slice: a step checks its clock between slices. */
#define VERIFY_SLICE (1u << 20)
#define ZERO_SLICE (1u << 20)

/* ---- the block map ----------------------------------------------------------- */

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
			return rd_err_set(&d->ss.err, -EEXIST, "block \"%s\" announced twice",
					  bd->name);
		if (d->blocks[i].d.length != bd->length)
			return rd_err_set(&d->ss.err, -EINVAL, "block \"%s\": the source's length "
					  "%" PRIu64 " differs from the destination's %" PRIu64,
					  bd->name, bd->length, d->blocks[i].d.length);
		return (int)i;
	}
	if (!d->ss.cfg.map_block)
		return rd_err_set(&d->ss.err, -ENOENT, "block \"%s\" is not configured on the "
				  "destination", bd->name);
	rc = d->ss.cfg.map_block(d->ss.cfg.map_ctx, bd->name, bd->length, bd->page_size, &host,
				 &zeroed, emsg, sizeof(emsg));
	if (rc || !host)
		return rd_err_set(&d->ss.err, rc < 0 ? rc : -EINVAL, "block \"%s\": %s", bd->name,
				  emsg[0] ? emsg : "could not be mapped");
	return dst_add_block(d, bd->name, host, bd->length, zeroed);
}

static int map_blocks(struct rdmig_dest *d, const Rdmig__BlockMapReq *r)
{
	unsigned i;
	int idx;

	d->chunk_shift = r->chunk_shift;
	d->map = calloc(r->n_blocks, sizeof(*d->map));
	if (!d->map)
		return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	for (i = 0; i < r->n_blocks; i++) {
		struct dst_block *b;

		idx = find_block(d, r->blocks[i]);
		if (idx < 0)
			return idx;
		b = &d->blocks[idx];
		b->announced = true;
		b->d.page_size = r->blocks[i]->page_size;
		b->nchunks = blk_nchunks(b->d.length, d->chunk_shift);
		b->first_slot = d->nslots;
		d->nslots += b->nchunks;
		d->map[d->nmap++] = (unsigned)idx;
	}
	for (i = 0; i < d->nblocks; i++)
		if (!d->blocks[i].announced)
			return rd_err_set(&d->ss.err, -ENOENT, "block \"%s\" was not sent by the "
					  "source", d->blocks[i].d.name);
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
	const struct rdmig_config *c = &d->ss.cfg;
	uint64_t total = 0, max = c->max_image ? c->max_image : host_memory();
	char msg[RD_ERRLEN] = "";
	size_t i;
	int rc;

	for (i = 0; i < r->n_blocks; i++)
		total += r->blocks[i]->length; /* at most 1024 x 2^50: no overflow */
	if (total > max)
		return rd_err_set(&d->ss.err, -EFBIG, "the image of %" PRIu64 " bytes is larger "
				  "than this destination takes (%" PRIu64 " bytes, %s)", total,
				  max, c->max_image ? "its image limit" : "its physical memory");
	if ((d->ss.caps & PD_CAP_PIN_ALL) && c->pinned_cap && total > c->pinned_cap)
		return rd_err_set(&d->ss.err, -ENOSPC, "pin-all would pin %" PRIu64 " bytes, "
				  "more than this destination's pinned-bytes cap of %" PRIu64
				  ": use dynamic registration, or raise the destination's cap",
				  total, c->pinned_cap);
	if (!!(d->ss.caps & PD_CAP_PIN_ALL) != !!r->piece_shift)
		return rd_err_set(&d->ss.err, -EPROTO, "BLOCK_MAP_REQ: piece_shift %u does not "
				  "fit the %s mode", r->piece_shift,
				  (d->ss.caps & PD_CAP_PIN_ALL) ? "pin-all" : "dynamic");
	if (!c->admit)
		return 0;
	rc = c->admit(c->admit_ctx, total, msg, sizeof(msg));
	if (rc)
		return rd_err_set(&d->ss.err, rc < 0 ? rc : -EPERM, "%s",
				  msg[0] ? msg : "the destination turned the migration away");
	return 0;
}

/* pin-all: the pieces are registered after the answer, by the helpers of
 * start_pin_all. */
static int setup_pin_all(struct rdmig_dest *d, unsigned piece_shift)
{
	unsigned i;

	d->piece_shift = piece_shift;
	for (i = 0; i < d->nmap; i++) {
		struct dst_block *b = &d->blocks[d->map[i]];

		b->npieces = blk_nchunks(b->d.length, piece_shift);
		b->pieces = calloc(b->npieces, sizeof(*b->pieces));
		if (!b->pieces)
			return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	}
	d->pk_max = ctrl_pin_keys_max(d->ss.ch.peer_msg_max);
	d->pk_block = calloc(d->pk_max, sizeof(*d->pk_block));
	d->pk_piece = calloc(d->pk_max, sizeof(*d->pk_piece));
	d->pk_rkey = calloc(d->pk_max, sizeof(*d->pk_rkey));
	return d->pk_block && d->pk_piece && d->pk_rkey ? 0 :
	       rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
}

static int setup_dynamic(struct rdmig_dest *d)
{
	d->rkeys_max = CTRL_REGISTER_MAX;
	d->rkeys = calloc(d->rkeys_max, sizeof(*d->rkeys));
	if (!d->rkeys || creg_init(&d->creg, d->nslots, d->ss.cfg.pinned_cap))
		return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	d->creg_ready = true;
	return 0;
}

static int answer_block_map(struct rdmig_dest *d)
{
	Rdmig__BlockMapResp resp = RDMIG__BLOCK_MAP_RESP__INIT;
	Rdmig__BlockDest *bd = calloc(d->nmap, sizeof(*bd));
	Rdmig__BlockDest **ptrs = calloc(d->nmap, sizeof(*ptrs));
	unsigned i;
	int rc = 0;

	if (!bd || !ptrs)
		rc = rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	for (i = 0; !rc && i < d->nmap; i++) {
		struct dst_block *b = &d->blocks[d->map[i]];

		rdmig__block_dest__init(&bd[i]);
		bd[i].base_addr = (uintptr_t)b->host;
		bd[i].zeroed = b->zeroed;
		ptrs[i] = &bd[i];
	}
	if (!rc) {
		resp.n_blocks = d->nmap;
		resp.blocks = ptrs;
		resp.pinned_cap = (d->ss.caps & PD_CAP_PIN_ALL) ? 0 : d->ss.cfg.pinned_cap;
		if (d->chans) {
			resp.channels = chan_set_grant(d->chans, d->req_channels,
						       &resp.channel_port, &resp.channel_token);
			cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "%u data channels (the source asked "
				"for %u)", resp.channels, d->req_channels);
		}
		rc = dst_send(d, CT_BLOCK_MAP_RESP, &resp.base, "answer the block map");
	}
	free(bd);
	free(ptrs);
	return rc;
}

/* The pages of the blocks, in the order registration takes them, are made
 * present by a helper thread from now on (see populate.h). */
static int start_populate(struct rdmig_dest *d)
{
	bool pin_all = d->ss.caps & PD_CAP_PIN_ALL;
	struct pop_range *r;
	uint64_t base = 0;
	unsigned i;
	int rc;

	if (d->ss.cfg.populate == RDMIG_POPULATE_NONE ||
	    (!pin_all && d->ss.cfg.populate != RDMIG_POPULATE_ALL))
		return 0;
	r = calloc(d->nmap ? d->nmap : 1, sizeof(*r));
	if (!r)
		return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	for (i = 0; i < d->nmap; i++) {
		struct dst_block *b = &d->blocks[d->map[i]];

		b->pop_base = base;
		r[i] = (struct pop_range){ b->host, b->d.length };
		base += b->d.length;
	}
	rc = pop_start(&d->pop, r, d->nmap, d->ss.wake_fd, &d->ss.err);
	free(r);
	return rc;
}

int dst_populate_check(struct rdmig_dest *d)
{
	uint64_t off;
	unsigned i;
	int rc = pop_error(&d->pop, &i, &off);

	if (!rc)
		return 0;
	return rd_err_set(&d->ss.err, rc, "block \"%s\": its memory could not be made present "
			  "at offset %" PRIu64 ": %s (%s)", i < d->nmap ?
			  d->blocks[d->map[i]].d.name : "?", off, strerror(-rc),
			  rc == -EFAULT ? "no space left where the block is mapped from?" :
			  "not enough memory?");
}

/* Global piece @g (over the mapped blocks in order): its block and span. */
static struct dst_block *piece_at(struct rdmig_dest *d, uint64_t g, uint64_t *off,
				  uint64_t *len)
{
	struct dst_block *b;
	unsigned i;

	for (i = 0; i < d->nmap; i++) {
		b = &d->blocks[d->map[i]];
		if (g < b->npieces) {
			blk_chunk_span(b->d.length, d->piece_shift, g, off, len);
			return b;
		}
		g -= b->npieces;
	}
	return NULL;
}

/* On a helper thread: what it reads of @d was set before it started and
 * does not change while it runs. */
static int reg_piece(void *ctx, uint64_t g, void **mr)
{
	struct rdmig_dest *d = ctx;
	struct dst_block *b;
	uint64_t off, len;

	b = piece_at(d, g, &off, &len);
	if (!b)
		return EINVAL;
	*mr = ibv_reg_mr(fab_pd(d->ss.conn), b->host + off, len,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	return *mr ? 0 : errno ? errno : EIO;
}

static void unreg_piece(void *ctx, uint64_t g, void *mr)
{
	(void)ctx;
	(void)g;
	ibv_dereg_mr(mr);
}

/* The pieces are registered from now on by helpers, in order; each step
 * takes those done (dst_pin_step). */
static int start_pin_all(struct rdmig_dest *d)
{
	uint64_t n = 0;
	unsigned i;

	for (i = 0; i < d->nmap; i++)
		n += d->blocks[d->map[i]].npieces;
	return rp_start(&d->reg, n, rp_default_threads(), reg_piece, unreg_piece, d,
			d->ss.wake_fd, &d->ss.err);
}

int dst_on_block_map(struct rdmig_dest *d, const Rdmig__BlockMapReq *r)
{
	unsigned i;
	int rc;

	rc = admit_image(d, r);
	if (!rc)
		rc = map_blocks(d, r);
	if (!rc)
		rc = (d->ss.caps & PD_CAP_PIN_ALL) ? setup_pin_all(d, r->piece_shift) :
							setup_dynamic(d);
	if (!rc)
		rc = answer_block_map(d);
	if (!rc)
		rc = start_populate(d);
	if (!rc && (d->ss.caps & PD_CAP_PIN_ALL))
		rc = start_pin_all(d);
	if (rc)
		return rc;
	d->state = DST_RUNNING;
	pthread_mutex_lock(&d->ss.stats.lock);
	for (i = 0; i < d->nmap; i++)
		d->ss.stats.st.total += d->blocks[d->map[i]].d.length;
	d->ss.stats.st.setup_time_ms = (uint64_t)(rd_now_ms() - d->ss.stats.start_ms);
	d->ss.stats.st.status = RDMIG_STATUS_ACTIVE;
	d->ss.stats.data_start_ms = rd_now_ms();
	pthread_mutex_unlock(&d->ss.stats.lock);
	return 0;
}

/* ---- pin-all pieces ------------------------------------------------------------- */

static int flush_pin_keys(struct rdmig_dest *d)
{
	Rdmig__PinKeys k = RDMIG__PIN_KEYS__INIT;
	int rc;

	if (!d->pk_n || !ctrl_can_send(&d->ss.ch))
		return 0;
	k.n_block = k.n_piece = k.n_rkey = d->pk_n;
	k.block = d->pk_block;
	k.piece = d->pk_piece;
	k.rkey = d->pk_rkey;
	rc = ctrl_send(&d->ss.ch, CT_PIN_KEYS, &k.base);
	if (!rc)
		d->pk_n = 0;
	return rc == -EAGAIN ? 0 : rc;
}

/* A helper failed to register global piece @g with errno @e. */
static int pin_failed(struct rdmig_dest *d, int e, uint64_t g)
{
	struct dst_block *b;
	uint64_t off = 0, len = 0;
	int rc;

	b = piece_at(d, g, &off, &len);
	rc = fab_reg_failed(d->ss.conn, e, len);
	return rd_err_prefix(&d->ss.err, sess_conn_err(&d->ss, rc), "block \"%s\"",
			     b ? b->d.name : "?");
}

bool dst_pin_ready(const struct rdmig_dest *d)
{
	if (d->state != DST_RUNNING || !(d->ss.caps & PD_CAP_PIN_ALL))
		return false;
	if (d->pk_n)
		return true;
	return d->pin_block < d->nmap &&
	       (rp_ready(&d->reg, d->pin_g) || rp_failed(&d->reg, d->pin_g));
}

/* Takes the pieces the helpers registered, in order, and sends their keys;
 * a piece not done yet is taken in a later step (its helper writes the wake
 * fd).  1 when something was done. */
int dst_pin_step(struct rdmig_dest *d)
{
	struct dst_block *b;
	uint64_t off, len;
	struct ibv_mr *mr;
	int rc, did = 0, e;

	if (d->state != DST_RUNNING || !(d->ss.caps & PD_CAP_PIN_ALL))
		return 0;
	rc = flush_pin_keys(d);
	if (rc)
		return rc;
	/* Keys that cannot go yet wait; taking more would outrun them. */
	while (d->pin_block < d->nmap && d->pk_n < d->pk_max) {
		b = &d->blocks[d->map[d->pin_block]];
		blk_chunk_span(b->d.length, d->piece_shift, d->pin_piece, &off, &len);
		mr = rp_take(&d->reg, d->pin_g);
		if (!mr) {
			e = rp_failed(&d->reg, d->pin_g);
			if (e)
				return pin_failed(d, e, d->pin_g);
			break;
		}
		b->pieces[d->pin_piece] = mr;
		d->pin_g++;
		d->pk_block[d->pk_n] = d->pin_block;
		d->pk_piece[d->pk_n] = d->pin_piece;
		d->pk_rkey[d->pk_n++] = mr->rkey;
		pop_skip(&d->pop, b->pop_base + off + len);
		pthread_mutex_lock(&d->ss.stats.lock);
		d->ss.stats.st.pinned_bytes += len;
		d->ss.stats.st.pinned_peak = d->ss.stats.st.pinned_bytes;
		pthread_mutex_unlock(&d->ss.stats.lock);
		if (++d->pin_piece == b->npieces) {
			d->pin_piece = 0;
			d->pin_block++;
		}
		did = 1;
	}
	if (d->pin_block == d->nmap)
		rp_stop(&d->reg);
	rc = flush_pin_keys(d);
	return rc ? rc : did || d->pk_n;
}

/* ---- dynamic registration ------------------------------------------------------- */

/* Resolves a peer (block, chunk) pair to our block and slot, validating both. */
static int chunk_slot(struct rdmig_dest *d, uint32_t blk, uint64_t chunk,
		      struct dst_block **bo, uint64_t *slot)
{
	struct dst_block *b;

	if (blk >= d->nmap)
		return rd_err_set(&d->ss.err, -EPROTO, "block index %u out of range (%u blocks)",
				  blk, d->nmap);
	b = &d->blocks[d->map[blk]];
	if (chunk >= b->nchunks)
		return rd_err_set(&d->ss.err, -EPROTO, "block \"%s\": chunk %" PRIu64
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
			return rd_err_set(&d->ss.err, -EPROTO, "block \"%s\": release of chunk %"
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
		return rd_err_set(&d->ss.err, -ENOSPC, "registering chunk %" PRIu64 " of \"%s\" "
				  "would exceed the pinned-bytes cap of %" PRIu64 " bytes",
				  chunk, b->d.name, d->creg.cap_bytes);
	rc = fab_reg_mr(d->ss.conn, b->host + off, len,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &mr);
	if (rc)
		return rd_err_prefix(&d->ss.err, sess_conn_err(&d->ss, rc), "block \"%s\", "
				     "chunk %" PRIu64, b->d.name, chunk);
	if (creg_add(&d->creg, slot, len, CREG_READY)) {
		ibv_dereg_mr(mr);
		return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	}
	creg_set_ready(&d->creg, slot, mr->rkey, mr);
	*rkey = mr->rkey;
	/* No pop_skip() here: dynamic registration is sparse, and populating
	 * ALL must not jump over the holes below the highest chunk. */
	return 0;
}

static int on_register(struct rdmig_dest *d, const Rdmig__RegisterReq *r)
{
	Rdmig__RegisterResp resp = RDMIG__REGISTER_RESP__INIT;
	size_t i;
	int rc;

	if (!d->creg_ready)
		return rd_err_set(&d->ss.err, -EPROTO, "REGISTER_REQ in pin-all mode");
	rc = release_chunks(d, r);
	for (i = 0; !rc && i < r->n_chunk_block; i++)
		rc = register_chunk(d, r->chunk_block[i], r->chunk_index[i], &d->rkeys[i]);
	if (!rc) {
		resp.req_id = r->req_id;
		resp.n_rkeys = r->n_chunk_block;
		resp.rkeys = d->rkeys;
		rc = dst_send(d, CT_REGISTER_RESP, &resp.base, "answer, with more requests "
			      "than the source's credits allow");
	}
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.register_requests++;
	d->ss.stats.st.chunks_registered += r->n_chunk_block;
	d->ss.stats.st.pinned_bytes = d->creg.pinned_bytes;
	d->ss.stats.st.pinned_peak = d->creg.peak_bytes;
	pthread_mutex_unlock(&d->ss.stats.lock);
	return rc;
}

/* ---- data-path messages -------------------------------------------------------- */

/* Every range is checked before any is worked on, so a bad one fails the
 * migration with nothing cleared; the work itself is dst_zero_step()'s. */
static int on_zero_ranges(struct rdmig_dest *d, const Rdmig__ZeroRanges *z)
{
	uint64_t pages = 0;
	size_t i;
	int rc;

	if (!(d->ss.caps & PD_CAP_ZERO_PAGES))
		return rd_err_set(&d->ss.err, -EPROTO, "ZERO_RANGES without the ZERO_PAGES "
				  "capability (it was not negotiated)");
	for (i = 0; i < z->n_block; i++) {
		struct dst_block *b;

		if (z->block[i] >= d->nmap)
			return rd_err_set(&d->ss.err, -EPROTO, "zero range for block index %u "
					  "out of range", z->block[i]);
		b = &d->blocks[d->map[z->block[i]]];
		rc = blk_check_range(b->d.name, b->d.length, z->offset[i], z->length[i],
				     &d->ss.err);
		if (rc)
			return rc;
		pages += (z->length[i] + b->d.page_size - 1) / b->d.page_size;
	}
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.zero_pages += pages;
	pthread_mutex_unlock(&d->ss.stats.lock);
	d->zero = (struct dst_zero_job){ .z = z };
	return 0;
}

int dst_zero_step(struct rdmig_dest *d, int64_t until_us)
{
	struct dst_zero_job *j = &d->zero;
	uint64_t cost, left, n;
	uint8_t *p;

	while (j->z) {
		cost = 0;
		while (j->range < j->z->n_block && cost < ZERO_SLICE) {
			const struct dst_block *b = &d->blocks[d->map[j->z->block[j->range]]];

			p = b->host + j->z->offset[j->range] + j->off;
			left = j->z->length[j->range] - j->off;
			n = left < ZERO_SLICE - cost ? left : ZERO_SLICE - cost;
			/* Reading a never-touched page is free; writing it
			 * would allocate it. */
			if (!zero_is_zero(p, n))
				memset(p, 0, n);
			j->off += n;
			if (j->off == j->z->length[j->range]) {
				j->range++;
				j->off = 0;
			}
			/* A range shorter than a page costs a page: a slice
			 * of thousands of tiny ranges is bounded too. */
			cost += n > 4096 ? n : 4096;
		}
		if (j->range == j->z->n_block)
			j->z = NULL;
		else if (rd_now_us() > until_us)
			return 0;
	}
	return 1;
}

/* Short runs of data pages that came inside the message (PAGES): each run
 * whole pages of an announced block (the last may end at the block's end);
 * msgcheck_pages() checked the lengths add up to the data. */
static int on_pages(struct rdmig_dest *d, const Rdmig__Pages *m)
{
	const uint8_t *src = m->data.data;
	size_t i;
	int rc;

	if (!(d->ss.caps & PD_CAP_PAGES))
		return rd_err_set(&d->ss.err, -EPROTO, "PAGES without the capability");
	for (i = 0; i < m->n_block; i++) {
		struct dst_block *b;
		uint64_t ps;

		if (m->block[i] >= d->nmap)
			return rd_err_set(&d->ss.err, -EPROTO, "PAGES run %zu for block index %u "
					  "out of range", i, m->block[i]);
		b = &d->blocks[d->map[m->block[i]]];
		ps = b->d.page_size;
		rc = blk_check_range(b->d.name, b->d.length, m->offset[i], m->length[i],
				     &d->ss.err);
		if (rc)
			return rd_err_prefix(&d->ss.err, rc, "PAGES run %zu", i);
		if (m->offset[i] % ps ||
		    (m->length[i] % ps && m->offset[i] + m->length[i] != b->d.length))
			return rd_err_set(&d->ss.err, -EPROTO, "PAGES run %zu of block \"%s\" "
					  "is not whole pages (offset %" PRIu64 ", length %" PRIu64
					  ")", i, b->d.name, m->offset[i], m->length[i]);
		memcpy(b->host + m->offset[i], src, m->length[i]);
		src += m->length[i];
	}
	return 0;
}

static int on_iter_end(struct rdmig_dest *d, const Rdmig__IterEnd *e)
{
	Rdmig__IterAck ack = RDMIG__ITER_ACK__INIT;

	if (e->iteration != d->iteration + 1)
		return rd_err_set(&d->ss.err, -EPROTO, "ITER_END for iteration %u, expected %u",
				  e->iteration, d->iteration + 1);
	d->iteration++;
	ack.iteration = d->iteration;
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.iterations = d->iteration;
	d->ss.stats.st.normal_bytes += e->bytes;
	d->ss.stats.st.transferred += e->bytes;
	pthread_mutex_unlock(&d->ss.stats.lock);
	return dst_send(d, CT_ITER_ACK, &ack.base, "acknowledge the iteration");
}

static int on_state(struct rdmig_dest *d, const Rdmig__State *st)
{
	char msg[RD_ERRLEN] = "";
	int rc;

	if (!d->ss.cfg.state)
		return rd_err_set(&d->ss.err, -EPROTO, "the source sent device state but the "
				  "destination has no state sink");
	rc = d->ss.cfg.state(d->ss.cfg.state_ctx, st->data.data, st->data.len, msg,
			     sizeof(msg));
	if (rc)
		return rd_err_set(&d->ss.err, rc < 0 ? rc : -EIO, "the device state could not "
				  "be taken: %s", msg[0] ? msg : strerror(rc < 0 ? -rc : EIO));
	d->state_bytes += st->data.len;
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.state_bytes = d->state_bytes;
	pthread_mutex_unlock(&d->ss.stats.lock);
	return 0;
}

static void hex(const uint8_t *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

/* COMPLETE: the counts must match what arrived; with VERIFY the source's
 * digests are kept for dst_verify_step(), which hashes our copy in slices
 * so this side keeps answering (and the source's silence timer quiet). */
static int on_complete(struct rdmig_dest *d, const Rdmig__Complete *c)
{
	unsigned i;

	if (c->state_bytes != d->state_bytes)
		return rd_err_set(&d->ss.err, -EIO, "the source sent %" PRIu64 " state bytes, "
				  "%" PRIu64 " arrived", c->state_bytes, d->state_bytes);
	if (c->iteration != d->iteration)
		return rd_err_set(&d->ss.err, -EPROTO, "COMPLETE after iteration %u, %u were "
				  "acknowledged", c->iteration, d->iteration);
	if ((d->ss.caps & PD_CAP_VERIFY) && d->nmap) {
		if (c->n_digests != d->nmap)
			return rd_err_set(&d->ss.err, -EPROTO, "COMPLETE carries %zu digests for "
					  "%u blocks", c->n_digests, d->nmap);
		d->want_dig = malloc((size_t)d->nmap * DIGEST_LEN);
		if (!d->want_dig)
			return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
		for (i = 0; i < d->nmap; i++) {
			if (c->digests[i].len != DIGEST_LEN)
				return rd_err_set(&d->ss.err, -EPROTO, "digest of %zu bytes",
						  c->digests[i].len);
			memcpy(d->want_dig + (size_t)i * DIGEST_LEN, c->digests[i].data,
			       DIGEST_LEN);
		}
	}
	d->state = DST_VERIFYING;
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.status = RDMIG_STATUS_COMPLETING;
	pthread_mutex_unlock(&d->ss.stats.lock);
	return 0;
}

/* One slice of the digest of block vblock; 1 once every block is done
 * and matched. */
static int verify_slice(struct rdmig_dest *d)
{
	const struct dst_block *b = &d->blocks[d->map[d->vblock]];
	char a[2 * DIGEST_LEN + 1], h[2 * DIGEST_LEN + 1];
	uint8_t mine[DIGEST_LEN];
	uint64_t n = b->d.length - d->voff < VERIFY_SLICE ? b->d.length - d->voff : VERIFY_SLICE;

	if (!d->vdig && !(d->vdig = auth_digest_begin()))
		return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	auth_digest_more(d->vdig, b->host + d->voff, n);
	d->voff += n;
	if (d->voff < b->d.length)
		return 0;
	auth_digest_end(d->vdig, mine);
	d->vdig = NULL;
	if (memcmp(mine, d->want_dig + (size_t)d->vblock * DIGEST_LEN, DIGEST_LEN)) {
		hex(d->want_dig + (size_t)d->vblock * DIGEST_LEN, DIGEST_LEN, a);
		hex(mine, DIGEST_LEN, h);
		return rd_err_set(&d->ss.err, -EILSEQ, "verification failed: block \"%s\" "
				  "differs (source %s, destination %s)", b->d.name, a, h);
	}
	d->voff = 0;
	return ++d->vblock == d->nmap;
}

/* A keepalive before the commit callback gives it the source's whole
 * silence timeout; it needs a second frame's room (see below). */
static bool keepalive_first(const struct rdmig_dest *d)
{
	return d->ss.cfg.commit && d->ss.ch.peer_depth >= 4;
}

/* The image is whole: the application makes it durable, then the source
 * hears it.  A keepalive goes first, so the commit callback has the whole
 * silence timeout of the source to return in. */
static int commit_and_ack(struct rdmig_dest *d)
{
	Rdmig__CompleteAck ack = RDMIG__COMPLETE_ACK__INIT;
	int rc;

	if (d->ss.cfg.commit) {
		char msg[RD_ERRLEN] = "";

		rc = keepalive_first(d) ? ctrl_keepalive(&d->ss.ch) : 0;
		if (rc)
			return rc;
		rc = d->ss.cfg.commit(d->ss.cfg.commit_ctx, msg, sizeof(msg));
		if (rc)
			return rd_err_set(&d->ss.err, rc < 0 ? rc : -EIO, "the destination could "
					  "not save the image: %s", msg[0] ? msg : strerror(EIO));
	}
	ack.ok = 1;
	rc = dst_send(d, CT_COMPLETE_ACK, &ack.base, "acknowledge completion");
	if (!rc)
		d->state = DST_FLUSHING;
	return rc;
}

/* The ACK needs a credit, and the keepalive before the commit one more:
 * wait for both rather than commit and then fail to say so.  The source
 * returns credits at half its depth, so both come, unless its ring is
 * under 4 deep: then room for two never comes, and the commit goes
 * without the keepalive. */
bool dst_verify_ready(const struct rdmig_dest *d)
{
	return d->state == DST_VERIFYING &&
	       ctrl_room(&d->ss.ch) >= (keepalive_first(d) ? 2u : 1u);
}

int dst_verify_step(struct rdmig_dest *d, int64_t until_us)
{
	int rc = 0;

	if (!dst_verify_ready(d))
		return 0;
	if (d->want_dig && d->vblock < d->nmap) {
		do
			rc = verify_slice(d);
		while (!rc && rd_now_us() <= until_us);
		if (rc <= 0)
			return rc;
		cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "verified %u blocks", d->nmap);
	}
	return commit_and_ack(d);
}

int dst_running_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	switch (h->type) {
	case CT_REGISTER_REQ:
		return on_register(d, (const Rdmig__RegisterReq *)m);
	case CT_ZERO_RANGES:
		return on_zero_ranges(d, (const Rdmig__ZeroRanges *)m);
	case CT_PAGES:
		return on_pages(d, (const Rdmig__Pages *)m);
	case CT_ITER_END:
		return on_iter_end(d, (const Rdmig__IterEnd *)m);
	case CT_STATE:
		return on_state(d, (const Rdmig__State *)m);
	case CT_COMPLETE:
		return on_complete(d, (const Rdmig__Complete *)m);
	default:
		return rd_err_set(&d->ss.err, -EPROTO, "unexpected %s from the source",
				  ctrl_type_name(h->type));
	}
}

static void dereg_mr(void *ctx, void *mr)
{
	(void)ctx;
	ibv_dereg_mr(mr);
}

void dst_map_destroy(struct rdmig_dest *d)
{
	uint8_t junk[DIGEST_LEN];
	unsigned i;
	uint64_t k;

	pop_stop(&d->pop);
	rp_stop(&d->reg);
	if (d->vdig)
		auth_digest_end(d->vdig, junk);
	free(d->want_dig);
	for (i = 0; i < d->nblocks; i++) {
		for (k = 0; d->blocks[i].pieces && k < d->blocks[i].npieces; k++)
			if (d->blocks[i].pieces[k])
				ibv_dereg_mr(d->blocks[i].pieces[k]);
		free(d->blocks[i].pieces);
	}
	if (d->creg_ready)
		creg_fini(&d->creg, dereg_mr, NULL);
	free(d->rkeys);
	free(d->pk_block);
	free(d->pk_piece);
	free(d->pk_rkey);
}
