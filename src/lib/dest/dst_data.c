#include "dst_data.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "dst_int.h"
#include "dst_state.h"
#include "populate.h"
#include "privdata.h"
#include "regq.h"
#include "zero.h"

/* Bytes hashed per slice when verifying, and bytes of zero ranges checked
 * (and cleared) per slice, at most and at least: a slice is what fits the
 * step's time left at the learned price. */
#define VERIFY_SLICE (1u << 20)
#define ZERO_SLICE (1u << 20)
#define SLICE_MIN (64u << 10)
#define ZERO_SLICE_MIN SLICE_MIN

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
	d->zero_pages += pages;
	dst_data_count(d);
	d->job = (struct dst_job){ .kind = JOB_ZERO, .zero = z };
	return 0;
}

int dst_data_zero_step(struct rdmig_dest *d, int64_t until_us)
{
	struct dst_job *j = &d->job;
	uint64_t cost, left, n, slice;
	int64_t t0;
	uint8_t *p;
	bool first = true;

	while (j->i < j->zero->n_block) {
		/* A slice is what fits the time left (one at least, at most
		 * ZERO_SLICE); a range shorter than a page costs a page, so a
		 * slice of thousands of tiny ranges is bounded too. */
		slice = cost_bytes(&d->zero_cost, until_us - rd_now_us(), ZERO_SLICE);
		if (slice < ZERO_SLICE_MIN) {
			if (!first)
				return DST_JOB_CUT;
			slice = ZERO_SLICE_MIN;
		}
		first = false;
		cost = 0;
		t0 = rd_now_us();
		while (j->i < j->zero->n_block && cost < slice) {
			const struct dst_block *b = &d->blocks[d->map[j->zero->block[j->i]]];

			p = b->host + j->zero->offset[j->i] + j->off;
			left = j->zero->length[j->i] - j->off;
			n = left < slice - cost ? left : slice - cost;
			/* Reading a never-touched page is free; writing it
			 * would allocate it. */
			if (!zero_is_zero(p, n))
				memset(p, 0, n);
			j->off += n;
			if (j->off == j->zero->length[j->i]) {
				j->i++;
				j->off = 0;
			}
			cost += n > 4096 ? n : 4096;
		}
		cost_learn(&d->zero_cost, cost, (rd_now_us() - t0) * 1000);
	}
	return DST_JOB_DONE;
}

/* Short runs of data pages that came inside the message (PAGES): each run
 * whole pages of an announced block (the last may end at the block's end);
 * msgcheck_pages() checked the lengths add up to the data.  All runs are
 * checked before any is copied; the copying is the job in hand. */
static int on_pages(struct rdmig_dest *d, const Rdmig__Pages *m)
{
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
	}
	d->job = (struct dst_job){ .kind = JOB_PAGES, .pages = m, .src = m->data.data };
	rc = dst_data_pages_step(d);
	if (rc < 0)
		return rc;
	/* Copied at once: no job is left to hold the message. */
	if (rc == DST_JOB_DONE)
		d->job = (struct dst_job){ .kind = JOB_NONE };
	return 0;
}

/* A copy into memory never touched faults in fresh pages inside the step:
 * allocating and clearing each, 2 MiB at once where transparent huge pages
 * back the block (10-22 ms a PAGES message on the emulated test bed).  So
 * the runs whose memory is not all present go to the registration helpers
 * first, all at once, to be faulted in, and the message waits for them
 * with the frames behind it, in order; then every run is copied.  Where
 * the kernel cannot (older than 5.14) or the helpers' queue is full, runs
 * are copied as they come. */
static int submit_fault_ins(struct rdmig_dest *d)
{
	const Rdmig__Pages *m = d->job.pages;
	struct dst_job *j = &d->job;
	struct rd_err ignored;
	uint8_t *at;
	size_t i;
	int rc;

	j->faulted = true;
	for (i = j->i; i < m->n_block && !d->no_fault_in; i++) {
		at = d->blocks[d->map[m->block[i]]].host + m->offset[i];
		if (pop_present(at, m->length[i]))
			continue;
		rc = regq_submit(&d->rq, at, m->length[i], REGQ_FAULT_IN, -1,
				 DST_REG_COOKIE(DREG_FAULT, i), &ignored);
		/* Full (or never started): the rest is copied as it comes;
		 * stopped: so is every run from now on. */
		if (rc == -EAGAIN)
			break;
		if (rc)
			d->no_fault_in = true;
		else
			j->waiting++;
	}
	return j->waiting ? DST_JOB_WAITING : DST_JOB_DONE;
}

int dst_data_pages_step(struct rdmig_dest *d)
{
	const Rdmig__Pages *m = d->job.pages;
	struct dst_job *j = &d->job;
	uint8_t *at;

	if (!j->faulted && !d->no_fault_in && submit_fault_ins(d) == DST_JOB_WAITING)
		return DST_JOB_WAITING;
	if (j->waiting)
		return DST_JOB_WAITING;
	for (; j->i < m->n_block; j->i++) {
		at = d->blocks[d->map[m->block[j->i]]].host + m->offset[j->i];
		memcpy(at, j->src, m->length[j->i]);
		j->src += m->length[j->i];
	}
	return DST_JOB_DONE;
}

int dst_data_fault_done(struct rdmig_dest *d, const struct regq_job *r)
{
	struct dst_job *j = &d->job;
	uint64_t run = DST_REG_N(r->cookie);

	if (j->kind != JOB_PAGES || !j->waiting || run >= j->pages->n_block)
		return rd_err_set(&d->ss.err, -EPROTO, "a fault-in nobody asked for");
	j->waiting--;
	/* Not supported here (an older kernel, memory it cannot populate):
	 * from now on runs are copied as they come, as before. */
	if (r->rc == -EINVAL || r->rc == -ENOSYS) {
		d->no_fault_in = true;
		return 0;
	}
	if (r->rc)
		return rd_err_set(&d->ss.err, r->rc, "block \"%s\": its memory could not be "
				  "made present at offset %" PRIu64 " for %" PRIu64 " bytes of "
				  "PAGES: %s (%s)",
				  d->blocks[d->map[j->pages->block[run]]].d.name,
				  j->pages->offset[run], j->pages->length[run], strerror(-r->rc),
				  r->rc == -EFAULT ? "no space left where the block is mapped "
				  "from?" : "not enough memory?");
	return 0;
}

/* The per-round statistics: this ITER_END closes the round that began at
 * the last one (or at the block map). */
static void round_done(struct rdmig_dest *d, uint64_t bytes)
{
	int64_t now = rd_now_ms();
	uint64_t zero = d->zero_pages + d->told_skipped;

	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.last_iter_bytes = bytes;
	d->ss.stats.st.last_iter_zero_pages = zero - d->round_zero_base;
	d->ss.stats.st.last_iter_ms = (uint64_t)(now - d->round_start_ms);
	pthread_mutex_unlock(&d->ss.stats.lock);
	d->round_zero_base = zero;
	d->round_start_ms = now;
}

static int on_iter_end(struct rdmig_dest *d, const Rdmig__IterEnd *e)
{
	Rdmig__IterAck ack = RDMIG__ITER_ACK__INIT;

	if (e->iteration != d->iteration + 1)
		return rd_err_set(&d->ss.err, -EPROTO, "ITER_END for iteration %u, expected %u",
				  e->iteration, d->iteration + 1);
	d->iteration++;
	ack.iteration = d->iteration;
	d->iter_bytes += e->bytes;
	dst_data_count(d);
	round_done(d, e->bytes);
	return sess_send(&d->ss, CT_ITER_ACK, &ack.base, "acknowledge the iteration");
}

/* PROGRESS: counters since the connection, so one that went down is a
 * broken source. */
static int on_progress(struct rdmig_dest *d, const Rdmig__Progress *p)
{
	if (!(d->ss.caps & PD_CAP_PROGRESS))
		return rd_err_set(&d->ss.err, -EPROTO, "PROGRESS without the capability");
	if (p->normal_bytes < d->told_bytes || p->normal_pages < d->told_pages ||
	    p->zero_pages_skipped < d->told_skipped)
		return rd_err_set(&d->ss.err, -EPROTO, "PROGRESS went down: %" PRIu64 " bytes, "
				  "%" PRIu64 " pages, %" PRIu64 " zero pages skipped after %" PRIu64
				  ", %" PRIu64 ", %" PRIu64, p->normal_bytes, p->normal_pages,
				  p->zero_pages_skipped, d->told_bytes, d->told_pages,
				  d->told_skipped);
	d->told_bytes = p->normal_bytes;
	d->told_pages = p->normal_pages;
	d->told_skipped = p->zero_pages_skipped;
	dst_data_count(d);
	return 0;
}

void dst_data_count(struct rdmig_dest *d)
{
	uint64_t bytes = d->told_bytes > d->iter_bytes ? d->told_bytes : d->iter_bytes;

	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.iterations = d->iteration;
	d->ss.stats.st.normal_bytes = bytes;
	d->ss.stats.st.normal_pages = d->told_pages;
	d->ss.stats.st.transferred = bytes;
	d->ss.stats.st.zero_pages = d->zero_pages + d->told_skipped;
	d->ss.stats.st.zero_pages_skipped = d->told_skipped;
	pthread_mutex_unlock(&d->ss.stats.lock);
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
	dst_set_state(d, DST_VERIFYING);
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.status = RDMIG_STATUS_COMPLETING;
	pthread_mutex_unlock(&d->ss.stats.lock);
	return 0;
}

/* One slice of the digest of block vblock; 1 once every block is done
 * and matched. */
static int verify_slice(struct rdmig_dest *d, uint64_t max)
{
	const struct dst_block *b = &d->blocks[d->map[d->vblock]];
	char a[2 * DIGEST_LEN + 1], h[2 * DIGEST_LEN + 1];
	uint8_t mine[DIGEST_LEN];
	uint64_t n = b->d.length - d->voff < max ? b->d.length - d->voff : max;
	int64_t t0 = rd_now_us();

	if (!d->vdig && !(d->vdig = auth_digest_begin()))
		return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	auth_digest_more(d->vdig, b->host + d->voff, n);
	cost_learn(&d->hash_cost, n, (rd_now_us() - t0) * 1000);
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
		struct cfg_cb_frame f;

		rc = keepalive_first(d) ? ctrl_keepalive(&d->ss.ch) : 0;
		if (rc)
			return rc;
		cfg_cb_enter(&f, &d->ss.cfg);
		rc = d->ss.cfg.commit(d->ss.cfg.commit_ctx, msg, sizeof(msg));
		cfg_cb_leave(&f);
		if (rc)
			return rd_err_set(&d->ss.err, rc < 0 ? rc : -EIO, "the destination could "
					  "not save the image: %s", msg[0] ? msg : strerror(EIO));
	}
	ack.ok = 1;
	rc = sess_send(&d->ss, CT_COMPLETE_ACK, &ack.base, "acknowledge completion");
	if (!rc)
		dst_set_state(d, DST_FLUSHING);
	return rc;
}

/* The ACK needs a credit, and the keepalive before the commit one more:
 * wait for both rather than commit and then fail to say so.  The source
 * returns credits at half its depth, so both come, unless its ring is
 * under 4 deep: then room for two never comes, and the commit goes
 * without the keepalive. */
bool dst_data_verify_ready(const struct rdmig_dest *d)
{
	return d->state == DST_VERIFYING &&
	       ctrl_room(&d->ss.ch) >= (keepalive_first(d) ? 2u : 1u);
}

int dst_data_verify_step(struct rdmig_dest *d, int64_t until_us)
{
	uint64_t slice;
	bool first = true;
	int rc = 0;

	if (!dst_data_verify_ready(d))
		return 0;
	if (d->want_dig && d->vblock < d->nmap) {
		/* Slices that fit the time left, one at least. */
		for (;;) {
			slice = cost_bytes(&d->hash_cost, until_us - rd_now_us(), VERIFY_SLICE);
			if (slice < SLICE_MIN) {
				if (!first)
					return 0;
				slice = SLICE_MIN;
			}
			first = false;
			rc = verify_slice(d, slice);
			if (rc)
				break;
		}
		if (rc < 0)
			return rc;
		cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "verified %u blocks", d->nmap);
	}
	return commit_and_ack(d);
}

int dst_data_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	switch (h->type) {
	case CT_ZERO_RANGES:
		return on_zero_ranges(d, (const Rdmig__ZeroRanges *)m);
	case CT_PAGES:
		return on_pages(d, (const Rdmig__Pages *)m);
	case CT_ITER_END:
		return on_iter_end(d, (const Rdmig__IterEnd *)m);
	case CT_PROGRESS:
		return on_progress(d, (const Rdmig__Progress *)m);
	case CT_STATE:
	case CT_STATE_WRITTEN:
		return dst_state_msg(d, h, m);
	case CT_COMPLETE:
		return on_complete(d, (const Rdmig__Complete *)m);
	default:
		return rd_err_set(&d->ss.err, -EPROTO, "unexpected %s from the source",
				  ctrl_type_name(h->type));
	}
}

void dst_data_destroy(struct rdmig_dest *d)
{
	uint8_t junk[DIGEST_LEN];

	if (d->vdig)
		auth_digest_end(d->vdig, junk);
	d->vdig = NULL;
	free(d->want_dig);
	d->want_dig = NULL;
}
