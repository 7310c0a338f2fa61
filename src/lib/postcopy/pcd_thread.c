/* pcd_thread: the post-copy engine's thread.  It reads each fault, RDMA
 * READs a faulted page on the fault channel at once and keeps a few larger
 * READs of the background pass going, places what completes, and pauses
 * or ends as pcd.h says; the driving thread's requests reach it through
 * pcd_int.h's atomics and the kick eventfd. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bitmap.h"
#include "pcd_int.h"

static int64_t now_ns(void)
{
	return rd_now_us() * 1000;
}

/* ---- the userfaultfd registration --------------------------------------- */

void pcd_unregister_all(struct pcd *p)
{
	unsigned i;

	for (i = 0; i < p->n; i++) {
		if (!p->b[i].registered)
			continue;
		uffd_unregister(p->uffd, p->b[i].host, p->b[i].npages * PCD_PAGE);
		p->b[i].registered = false;
	}
}

/* ---- the thread ------------------------------------------------------------------ */

/* Posts a READ of @npages pages from @page of block @b into @r's staging or
 * the block's second mapping, on @qp. */
static int post_read(struct pcd *p, struct ibv_qp *qp, struct pcd_read *r, unsigned b,
		     uint64_t page, uint64_t npages)
{
	struct pcd_blk *bk = &p->b[b];
	uint64_t off = page * PCD_PAGE, left;
	uint32_t rkey;
	struct ibv_sge sge = { .length = (uint32_t)(npages * PCD_PAGE) };
	struct ibv_send_wr wr = { .wr_id = fab_wr_id(&r->tag), .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED },
			   *bad = NULL;
	int rc;

	wr.wr.rdma.remote_addr = pckeys_at(p->keys, b, off, &rkey, &left);
	wr.wr.rdma.rkey = rkey;
	if (bk->kind == UFFD_ANON) {
		sge.addr = (uintptr_t)r->buf;
		sge.lkey = p->reg[p->staging_reg].mr->lkey;
	} else {
		sge.addr = (uintptr_t)(bk->alias + off);
		sge.lkey = p->reg[bk->reg_first + (off >> PCD_PIECE_SHIFT)].mr->lkey;
	}
	rc = ibv_post_send(qp, &wr, &bad);
	if (rc)
		return rd_err_set(&p->err, -rc, "post-copy: posting an RDMA READ of block \"%s\" "
				  "failed: %s", bk->name, strerror(rc));
	*r = (struct pcd_read){ .tag = r->tag, .block = b, .page = page, .npages = npages,
				.buf = r->buf, .t_post = now_ns(), .busy = true };
	atomic_fetch_add(&p->busy, 1);
	bm_set_range(bk->taken, page, npages);
	return 0;
}

static struct pcd_read *free_read(struct pcd_read *r, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		if (!r[i].busy)
			return &r[i];
	return NULL;
}

/* Faults oldest first, a page each, while fault READs are free. */
static int post_faults(struct pcd *p)
{
	struct pcd_read *r;
	uint64_t key;
	int rc;

	while ((r = free_read(p->fault, PCD_FAULT_DEPTH)) && pcq_next(&p->q, &key)) {
		rc = post_read(p, p->qp_fault, r, (unsigned)(key >> 48), key & ((UINT64_C(1) << 48) - 1),
			       1);
		if (rc)
			return rc;
		pcq_posted(&p->q, key);
	}
	return 0;
}

/* The next run of pages no READ took, from the background cursor on
 * (wrapping around once); false when none is left. */
static bool next_run(struct pcd *p, unsigned *b, uint64_t *first, uint64_t *n)
{
	unsigned tried;

	for (tried = 0; tried <= p->n; tried++) {
		struct pcd_blk *bk = &p->b[p->bg_block];
		uint64_t start = bm_next_clear(bk->taken, bk->npages, p->bg_page), end, left;
		uint32_t rkey;

		if (start < bk->npages) {
			end = bm_next_set(bk->taken, bk->npages, start);
			if (end - start > PCD_BG_PAGES)
				end = start + PCD_BG_PAGES;
			/* One READ stays inside one piece of the source's and
			 * one of our second mapping's registrations. */
			pckeys_at(p->keys, p->bg_block, start * PCD_PAGE, &rkey, &left);
			if (end - start > left / PCD_PAGE)
				end = start + left / PCD_PAGE;
			if (bk->kind == UFFD_SHARED) {
				uint64_t piece_end = ((start * PCD_PAGE >> PCD_PIECE_SHIFT) + 1) <<
						     PCD_PIECE_SHIFT;

				if (end * PCD_PAGE > piece_end)
					end = piece_end / PCD_PAGE;
			}
			*b = p->bg_block;
			*first = start;
			*n = end - start;
			p->bg_page = end;
			return true;
		}
		p->bg_block = (p->bg_block + 1) % p->n;
		p->bg_page = 0;
	}
	return false;
}

static int post_background(struct pcd *p)
{
	struct pcd_read *r;
	uint64_t first, n;
	unsigned b;
	int rc;

	while ((r = free_read(p->bg, PCD_BG_DEPTH)) && next_run(p, &b, &first, &n)) {
		rc = post_read(p, p->qp_bg, r, b, first, n);
		if (rc)
			return rc;
	}
	return 0;
}

static void count_latency(void *arg, uint64_t ns)
{
	lathist_add(arg, ns);
}

/* Figures into the statistics: the thread's counters, under their lock. */
static void publish(struct pcd *p)
{
	struct rdmig_stats *st = &p->stats->st;
	unsigned i;

	pthread_mutex_lock(&p->stats->lock);
	st->postcopy_fault_pages = p->fault_pages;
	st->postcopy_background_pages = p->bg_pages;
	st->postcopy_ms = (uint64_t)(rd_now_ms() - p->start_ms);
	st->postcopy_faults = p->hist.n;
	st->postcopy_latency_ns = lathist_mean_ns(&p->hist);
	st->postcopy_latency_max_ns = p->hist.max_ns;
	st->postcopy_blocked_ms = p->hist.sum_ns / 1000000;
	st->postcopy_read_ns = p->reads ? p->read_ns / p->reads : 0;
	for (i = 0; i < LATHIST_BUCKETS; i++)
		st->postcopy_latency_dist[i] = p->hist.bucket[i];
	pthread_mutex_unlock(&p->stats->lock);
}

static const char *wc_hint(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_REM_ACCESS_ERR:
		return " (the source refused the key: it does not hold that memory, or took it "
		       "back)";
	case IBV_WC_WR_FLUSH_ERR:
		return " (the channel had failed already)";
	case IBV_WC_RETRY_EXC_ERR:
		return " (the source is gone?)";
	default:
		return "";
	}
}

static void wake_driver(struct pcd *p)
{
	uint64_t one = 1;

	if (write(p->wake_fd, &one, sizeof(one)) < 0) {
		/* A full eventfd is readable already. */
	}
}

/* Stops posting until pcd_resume(); the driving thread learns why from
 * pcd_poll(). */
__attribute__((format(printf, 2, 3)))
static void pause_now(struct pcd *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->pause_err.msg, sizeof(p->pause_err.msg), fmt, ap);
	va_end(ap);
	publish(p);
	atomic_store(&p->state, PCD_PAUSED);
	wake_driver(p);
}

/* The driving thread's requests, between two rounds of work: a pause, and
 * a resume once no READ of the broken link is outstanding (its QPs may be
 * destroyed then, and the next READs go on the new ones). */
static void requests(struct pcd *p)
{
	if (atomic_load(&p->pause_req) && atomic_load(&p->state) == PCD_PULLING)
		pause_now(p, "the link to the source broke");
	if (atomic_load(&p->state) != PCD_PAUSED || !atomic_load(&p->resume_req) ||
	    atomic_load(&p->busy))
		return;
	p->qp_fault = p->next_fault;
	p->qp_bg = p->next_bg;
	/* In this order: pcd_poll() reads resume_req first. */
	atomic_store(&p->pause_req, false);
	atomic_store(&p->state, PCD_PULLING);
	atomic_store(&p->resume_req, false);
}

/* A READ completed: its pages are placed whole, and the faults on them go. */
static int complete(struct pcd *p, const struct ibv_wc *wc)
{
	struct pcd_read *r = rd_container_of(fab_tag_of(wc), struct pcd_read, tag);
	struct pcd_blk *bk;
	int64_t t = now_ns();
	int rc;

	if (r->tag.kind != PCD_TAG_FAULT && r->tag.kind != PCD_TAG_BG)
		return rd_err_set(&p->err, -EPROTO, "post-copy: a completion for nothing we posted");
	bk = &p->b[r->block];
	if (wc->status != IBV_WC_SUCCESS && !p->recover)
		return rd_err_set(&p->err, -EIO, "post-copy: the RDMA READ of block \"%s\" pages %"
				  PRIu64 "..%" PRIu64 " failed: %s%s", bk->name, r->page,
				  r->page + r->npages - 1, ibv_wc_status_str(wc->status),
				  wc_hint(wc->status));
	if (wc->status != IBV_WC_SUCCESS) {
		/* Its pages are read again once the link is back; whoever
		 * waits on them waits until then. */
		bm_clear_range(bk->taken, r->page, r->npages);
		pcq_repost(&p->q, PCQ_KEY(r->block, r->page),
			   PCQ_KEY(r->block, r->page + r->npages));
		r->busy = false;
		atomic_fetch_sub(&p->busy, 1);
		if (atomic_load(&p->state) != PCD_PAUSED)
			pause_now(p, "the RDMA READ of block \"%s\" pages %" PRIu64 "..%" PRIu64
				  " failed: %s%s", bk->name, r->page, r->page + r->npages - 1,
				  ibv_wc_status_str(wc->status), wc_hint(wc->status));
		return 0;
	}
	rc = uffd_place(p->uffd, bk->kind, bk->host + r->page * PCD_PAGE, r->buf,
			r->npages * PCD_PAGE);
	if (rc)
		return rd_err_set(&p->err, rc, "post-copy: block \"%s\": placing pages %" PRIu64
				  "..%" PRIu64 " failed: %s", bk->name, r->page,
				  r->page + r->npages - 1, strerror(-rc));
	bm_set_range(bk->have, r->page, r->npages);
	p->pending -= r->npages;
	r->busy = false;
	atomic_fetch_sub(&p->busy, 1);
	if (r->tag.kind == PCD_TAG_FAULT) {
		p->fault_pages += r->npages;
		p->reads++;
		p->read_ns += (uint64_t)(t - r->t_post);
	} else {
		p->bg_pages += r->npages;
	}
	pcq_done(&p->q, PCQ_KEY(r->block, r->page), PCQ_KEY(r->block, r->page + r->npages), t,
		 count_latency, &p->hist);
	return 0;
}

static struct pcd_blk *block_of(struct pcd *p, uint64_t addr, unsigned *b)
{
	unsigned i;

	for (i = 0; i < p->n; i++)
		if (addr >= (uintptr_t)p->b[i].host &&
		    addr < (uintptr_t)p->b[i].host + p->b[i].npages * PCD_PAGE) {
			*b = i;
			return &p->b[i];
		}
	return NULL;
}

/* One fault: a page complete here is placed at once; one being read waits
 * for its READ; any other is read now, and the background pass goes on
 * after it. */
static int on_fault(struct pcd *p, uint64_t addr)
{
	unsigned b;
	struct pcd_blk *bk = block_of(p, addr, &b);
	uint64_t page;
	int rc;

	if (!bk)
		return rd_err_set(&p->err, -EFAULT, "post-copy: a fault at 0x%" PRIx64 ", outside "
				  "every block", addr);
	page = (addr - (uintptr_t)bk->host) / PCD_PAGE;
	if (bm_test(bk->have, page)) {
		rc = uffd_place_local(p->uffd, bk->kind, bk->host + page * PCD_PAGE, PCD_PAGE);
		return rc ? rd_err_set(&p->err, rc, "post-copy: block \"%s\": mapping page %"
				       PRIu64 " failed: %s", bk->name, page, strerror(-rc)) : 0;
	}
	if (!bm_test(bk->taken, page)) {
		p->bg_block = b;
		p->bg_page = page + 1;
	}
	rc = pcq_push(&p->q, PCQ_KEY(b, page), now_ns(), !bm_test(bk->taken, page));
	return rc ? rd_err_set(&p->err, -EPROTO, "post-copy: the fault queue overflowed") : 0;
}

static int read_faults(struct pcd *p)
{
	uint64_t addr;
	int rc = 0, n = 0;

	while (n++ < PCD_FAULTS && !pcq_full(&p->q)) {
		rc = uffd_read_fault(p->uffd, &addr);
		if (rc == 0)
			return 0;
		if (rc < 0)
			return rd_err_set(&p->err, rc, "post-copy: reading the userfaultfd "
					  "failed: %s", strerror(-rc));
		if (rc == 1 && (rc = on_fault(p, addr)))
			return rc;
	}
	return 0;
}

static int drain(struct pcd *p)
{
	struct ibv_wc wc[16];
	int n, i, rc;

	while ((n = ibv_poll_cq(p->cq, (int)RD_ARRAY_SIZE(wc), wc)) > 0)
		for (i = 0; i < n; i++)
			if ((rc = complete(p, &wc[i])))
				return rc;
	return n < 0 ? rd_err_set(&p->err, -EIO, "post-copy: polling the completion queue "
				  "failed") : 0;
}

/* Sleeps until a fault, a completion or a stop; the completion channel's
 * event is taken and the queue re-armed. */
static int wait_event(struct pcd *p)
{
	struct pollfd fds[4] = {
		{ .fd = p->uffd, .events = pcq_full(&p->q) ? 0 : POLLIN },
		{ .fd = p->cch->fd, .events = POLLIN },
		{ .fd = p->stop_fd, .events = POLLIN },
		{ .fd = p->kick_fd, .events = POLLIN },
	};
	uint64_t v;
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_req_notify_cq(p->cq, 0))
		return rd_err_set(&p->err, -EIO, "post-copy: arming the completion queue failed");
	/* What completed before the arming, or the fault that came meanwhile,
	 * is handled before sleeping. */
	if (poll(fds, 4, 0) == 0) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(p->cq, 1, &wc);

		if (n > 0)
			return complete(p, &wc);
		if (poll(fds, 4, -1) < 0 && errno != EINTR)
			return rd_err_set(&p->err, -errno, "post-copy: poll failed: %s",
					  strerror(errno));
	}
	if ((fds[3].revents & POLLIN) && read(p->kick_fd, &v, sizeof(v)) < 0) {
		/* Read empty by someone: nothing to do. */
	}
	if ((fds[1].revents & POLLIN) && !ibv_get_cq_event(p->cch, &cq, &ctx)) {
		ibv_ack_cq_events(cq, 1);
	}
	return 0;
}

static void ended(struct pcd *p, int state)
{
	publish(p);
	atomic_store(&p->state, state);
	wake_driver(p);
}

void *pcd_thread(void *arg)
{
	struct pcd *p = arg;
	int64_t last_publish = 0;
	int rc = 0;

	sem_wait(&p->go);
	if (atomic_load(&p->stop))
		return NULL;
	while (!atomic_load(&p->stop)) {
		bool paused;

		requests(p);
		paused = atomic_load(&p->state) == PCD_PAUSED;
		rc = read_faults(p);
		if (!rc && !paused)
			rc = post_faults(p);
		if (!rc)
			rc = drain(p);
		paused = atomic_load(&p->state) == PCD_PAUSED;
		if (!rc && !paused)
			rc = post_faults(p);
		if (!rc && !paused)
			rc = post_background(p);
		if (rc)
			break;
		if (!p->pending) {
			/* Every page is in: faults are the kernel's again. */
			pcd_unregister_all(p);
			ended(p, PCD_DONE);
			return NULL;
		}
		if (rd_now_ms() - last_publish >= 100) {
			publish(p);
			last_publish = rd_now_ms();
		}
		rc = wait_event(p);
		if (rc)
			break;
	}
	if (rc) {
		p->rc = rc < 0 ? rc : -EIO;
		ended(p, PCD_FAILED);
	}
	return NULL;
}
