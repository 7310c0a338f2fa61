#include "dst_map.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "dst_int.h"
#include "dst_pc.h"
#include "privdata.h"

int dst_map_add(struct rdmig_dest *d, const char *name, void *host, uint64_t length,
		int zeroed)
{
	struct dst_block *nb;
	unsigned i;
	int rc;

	/* Pages land here as the source's pages: whole pages of ours, and
	 * never in another block's memory. */
	rc = blk_check_mem(name, host, length, CFG_PAGE_SIZE, &d->ss.err);
	for (i = 0; !rc && i < d->nblocks; i++)
		rc = blk_check_overlap(name, host, length, d->blocks[i].d.name,
				       d->blocks[i].host, d->blocks[i].d.length, &d->ss.err);
	if (rc)
		return rc;
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

/* ---- the block map ----------------------------------------------------------- */

static int find_block(struct rdmig_dest *d, const Rdmig__BlockDesc *bd)
{
	char emsg[RD_ERRLEN] = "";
	struct cfg_cb_frame f;
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
	cfg_cb_enter(&f, &d->ss.cfg);
	rc = d->ss.cfg.map_block(d->ss.cfg.map_ctx, bd->name, bd->length, bd->page_size, &host,
				 &zeroed, emsg, sizeof(emsg));
	cfg_cb_leave(&f);
	if (rc || !host)
		return rd_err_set(&d->ss.err, rc < 0 ? rc : -EINVAL, "block \"%s\": %s", bd->name,
				  emsg[0] ? emsg : "could not be mapped");
	return dst_map_add(d, bd->name, host, bd->length, zeroed);
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
	struct cfg_cb_frame f;
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
	/* What the source says it sends at most: the application may reserve
	 * room for it, and more fails the migration (dst_state.c). */
	d->state_max = (d->ss.caps & PD_CAP_STATE_BOUND) ? r->state_max : RDMIG_STATE_UNSAID;
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.state_max = d->state_max;
	pthread_mutex_unlock(&d->ss.stats.lock);
	if (!c->admit)
		return 0;
	cfg_cb_enter(&f, c);
	rc = c->admit(c->admit_ctx, total, msg, sizeof(msg));
	cfg_cb_leave(&f);
	if (rc)
		return rd_err_set(&d->ss.err, rc < 0 ? rc : -EPERM, "%s",
				  msg[0] ? msg : "the destination turned the migration away");
	return 0;
}

/* pin-all: the pieces are registered after the answer, by the
 * registration helpers (dst_map_pin_step). */
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
			resp.postcopy_channels = (d->ss.caps & PD_CAP_POSTCOPY) ? CHAN_PC : 0;
			resp.channels = chan_set_grant(d->chans, d->req_channels,
						       resp.postcopy_channels, &resp.channel_port,
						       &resp.channel_token);
			if (d->req_channels > 1)
				cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "%u data channels (the source "
					"asked for %u)", resp.channels, d->req_channels);
		}
		/* The name a resume must give: only this authenticated source
		 * learns it. */
		if (d->ss.caps & PD_CAP_POSTCOPY_RECOVER) {
			dst_pc_new_token(d);
			resp.resume_token.data = d->pc.token;
			resp.resume_token.len = PD_TOKEN_LEN;
		}
		rc = sess_send(&d->ss, CT_BLOCK_MAP_RESP, &resp.base, "answer the block map");
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

int dst_map_populate_check(struct rdmig_dest *d)
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

int dst_map_on_block_map(struct rdmig_dest *d, const Rdmig__BlockMapReq *r)
{
	unsigned i;
	int rc;

	rc = admit_image(d, r);
	if (!rc)
		rc = map_blocks(d, r);
	if (!rc)
		rc = (d->ss.caps & PD_CAP_PIN_ALL) ? setup_pin_all(d, r->piece_shift) :
							setup_dynamic(d);
	/* Before the answer: the post-copy channels it invites need the
	 * engine's completion queue. */
	if (!rc && (d->ss.caps & PD_CAP_POSTCOPY))
		rc = dst_pc_setup(d);
	if (!rc)
		rc = answer_block_map(d);
	if (!rc)
		rc = start_populate(d);
	if (rc)
		return rc;
	dst_set_state(d, DST_RUNNING);
	d->round_start_ms = rd_now_ms();
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

/* Pieces at most with the helpers at once, per helper (regq.h): every
 * core registers, and the keys go in order. */
#define DST_PIECES_AHEAD 4

static int piece_failed(struct rdmig_dest *d, const struct regq_job *j)
{
	unsigned m = (unsigned)(DST_REG_N(j->cookie) >> 32);

	fab_reg_error(&d->ss.err, j->rc, j->len);
	return m < d->nmap ? rd_err_prefix(&d->ss.err, j->rc, "block \"%s\"",
					   d->blocks[d->map[m]].d.name) : j->rc;
}

int dst_map_pin_step(struct rdmig_dest *d)
{
	struct dst_block *b;
	uint64_t off, len;
	unsigned ahead = DST_PIECES_AHEAD * regq_threads(&d->rq);
	int rc;

	/* Switching to post-copy: a pin would fault on the guest's memory. */
	if (d->state != DST_RUNNING || !(d->ss.caps & PD_CAP_PIN_ALL) || d->pc.switching)
		return 0;
	rc = flush_pin_keys(d);
	/* Keys that cannot go yet wait; registering on would outrun them. */
	while (!rc && d->pin_block < d->nmap && d->pin_sub < ahead &&
	       d->pk_n + d->pin_sub < d->pk_max) {
		b = &d->blocks[d->map[d->pin_block]];
		blk_chunk_span(b->d.length, d->piece_shift, d->pin_piece, &off, &len);
		rc = regq_submit(&d->rq, b->host + off, len,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, -1,
				 DST_REG_COOKIE(DREG_PIECE, (uint64_t)d->pin_block << 32 |
						d->pin_piece), &d->ss.err);
		if (rc == -EAGAIN)
			return 0;
		if (rc)
			return rc;
		d->pin_sub++;
		if (++d->pin_piece == b->npieces) {
			d->pin_piece = 0;
			d->pin_block++;
		}
	}
	return rc;
}

int dst_map_piece_done(struct rdmig_dest *d, const struct regq_job *j)
{
	unsigned m = (unsigned)(DST_REG_N(j->cookie) >> 32);
	uint64_t piece = DST_REG_N(j->cookie) & 0xffffffffu, off, len;
	struct dst_block *b;

	if (j->rc)
		return piece_failed(d, j);
	if (m >= d->nmap || !d->pin_sub || d->pk_n == d->pk_max)
		return rd_err_set(&d->ss.err, -EPROTO, "a pin-all piece nobody asked for");
	b = &d->blocks[d->map[m]];
	if (piece >= b->npieces || b->pieces[piece])
		return rd_err_set(&d->ss.err, -EPROTO, "a pin-all piece nobody asked for");
	d->pin_sub--;
	b->pieces[piece] = j->mr;
	blk_chunk_span(b->d.length, d->piece_shift, piece, &off, &len);
	d->pk_block[d->pk_n] = m;
	d->pk_piece[d->pk_n] = piece;
	d->pk_rkey[d->pk_n++] = b->pieces[piece]->rkey;
	pop_skip(&d->pop, b->pop_base + off + len);
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.pinned_bytes += len;
	d->ss.stats.st.pinned_peak = d->ss.stats.st.pinned_bytes;
	pthread_mutex_unlock(&d->ss.stats.lock);
	return flush_pin_keys(d);
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

/* A chunk of the job in hand: already registered, already with the helper
 * (named twice in the request), or submitted now.  -EAGAIN when the
 * helper's queue is full. */
static int register_chunk(struct rdmig_dest *d, uint32_t blk, uint64_t chunk)
{
	struct dst_block *b;
	uint64_t slot, off, len;
	int rc;

	rc = chunk_slot(d, blk, chunk, &b, &slot);
	if (rc || creg_state(&d->creg, slot) != CREG_NONE)
		return rc;
	blk_chunk_span(b->d.length, d->chunk_shift, chunk, &off, &len);
	if (d->creg.cap_bytes && d->creg.pinned_bytes + len > d->creg.cap_bytes)
		return rd_err_set(&d->ss.err, -ENOSPC, "registering chunk %" PRIu64 " of \"%s\" "
				  "would exceed the pinned-bytes cap of %" PRIu64 " bytes",
				  chunk, b->d.name, d->creg.cap_bytes);
	rc = regq_submit(&d->rq, b->host + off, len,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, -1,
			 DST_REG_COOKIE(DREG_CHUNK, slot), &d->ss.err);
	if (rc)
		return rc;
	if (creg_add(&d->creg, slot, len, CREG_PENDING))
		return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	d->job.waiting++;
	/* No pop_skip() here: dynamic registration is sparse, and populating
	 * ALL must not jump over the holes below the highest chunk. */
	return 0;
}

int dst_map_register(struct rdmig_dest *d, const Rdmig__RegisterReq *r)
{
	struct dst_block *b;
	uint64_t slot;
	size_t i;
	int rc;

	if (!d->creg_ready)
		return rd_err_set(&d->ss.err, -EPROTO, "REGISTER_REQ in pin-all mode");
	/* Everything is checked before anything is registered. */
	for (i = 0; i < r->n_chunk_block; i++) {
		rc = chunk_slot(d, r->chunk_block[i], r->chunk_index[i], &b, &slot);
		if (rc)
			return rc;
	}
	rc = release_chunks(d, r);
	if (rc)
		return rc;
	d->job = (struct dst_job){ .kind = JOB_REGISTER, .reg = r };
	return 0;
}

int dst_map_register_step(struct rdmig_dest *d)
{
	Rdmig__RegisterResp resp = RDMIG__REGISTER_RESP__INIT;
	const Rdmig__RegisterReq *r = d->job.reg;
	struct dst_block *b;
	uint64_t slot;
	size_t i;
	int rc;

	for (; d->job.i < r->n_chunk_block; d->job.i++) {
		rc = register_chunk(d, r->chunk_block[d->job.i], r->chunk_index[d->job.i]);
		if (rc == -EAGAIN)
			return DST_JOB_WAITING;
		if (rc)
			return rd_err_prefix(&d->ss.err, rc, "REGISTER_REQ %" PRIu64, r->req_id);
	}
	if (d->job.waiting)
		return DST_JOB_WAITING;
	for (i = 0; i < r->n_chunk_block; i++) {
		chunk_slot(d, r->chunk_block[i], r->chunk_index[i], &b, &slot);
		d->rkeys[i] = creg_slot(&d->creg, slot)->rkey;
	}
	resp.req_id = r->req_id;
	resp.n_rkeys = r->n_chunk_block;
	resp.rkeys = d->rkeys;
	rc = sess_send(&d->ss, CT_REGISTER_RESP, &resp.base, "answer, with more requests "
		       "than the source's credits allow");
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.register_requests++;
	d->ss.stats.st.chunks_registered += r->n_chunk_block;
	d->ss.stats.st.pinned_bytes = d->creg.pinned_bytes;
	d->ss.stats.st.pinned_peak = d->creg.peak_bytes;
	pthread_mutex_unlock(&d->ss.stats.lock);
	return rc ? rc : DST_JOB_DONE;
}

int dst_map_chunk_done(struct rdmig_dest *d, const struct regq_job *j)
{
	uint64_t slot = DST_REG_N(j->cookie);
	const struct creg_slot *cs = creg_slot(&d->creg, slot);
	unsigned i;

	if (!cs || cs->state != CREG_PENDING || d->job.kind != JOB_REGISTER || !d->job.waiting)
		return rd_err_set(&d->ss.err, -EPROTO, "a chunk registered that nobody asked for");
	if (j->rc) {
		fab_reg_error(&d->ss.err, j->rc, j->len);
		for (i = 0; i < d->nmap; i++) {
			const struct dst_block *b = &d->blocks[d->map[i]];

			if (slot >= b->first_slot && slot < b->first_slot + b->nchunks)
				return rd_err_prefix(&d->ss.err, j->rc, "block \"%s\", chunk %"
						     PRIu64, b->d.name, slot - b->first_slot);
		}
		return j->rc;
	}
	creg_set_ready(&d->creg, slot, ((struct ibv_mr *)j->mr)->rkey, j->mr);
	d->job.waiting--;
	return 0;
}

static void dereg_mr(void *ctx, void *mr)
{
	(void)ctx;
	ibv_dereg_mr(mr);
}

void dst_map_destroy(struct rdmig_dest *d)
{
	unsigned i;
	uint64_t k;

	pop_stop(&d->pop);
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
