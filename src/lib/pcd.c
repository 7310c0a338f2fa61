#include "pcd.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bitmap.h"
#include "blocks.h"
#include "lathist.h"
#include "pcq.h"
#include "uffd.h"

#define PAGE 4096u
/* Faults read whose READ is not posted yet, or whose page is being read:
 * a thread faults on one page at a time, so this bounds the threads
 * waiting at once; past it the faults wait in the kernel. */
#define PCD_FAULTS 256
/* READs of faulted pages in flight, a page each. */
#define PCD_FAULT_DEPTH PCD_SQ_DEPTH
/* The background pass: READs in flight and pages in each.  Few and small
 * enough that the link is not queued far ahead of a fault's READ (on
 * Soft-RoCE both channels' packets share one queue). */
#define PCD_BG_DEPTH 2
#define PCD_BG_PAGES 32
/* Second mappings are registered in pieces of this many bytes. */
#define PCD_PIECE_SHIFT 24

enum { PCD_TAG_FAULT = 0x200, PCD_TAG_BG = 0x201 };
/* PAUSED (with recovery): a READ failed or the driving thread said the
 * link broke; nothing is posted, faults on pages here are still placed,
 * the others wait in the queue (and, once it is full, in the kernel)
 * until pcd_resume() hands over new queue pairs. */
enum pcd_state { PCD_IDLE, PCD_PULLING, PCD_PAUSED, PCD_DONE, PCD_FAILED };

struct pcd_read {
	struct fab_tag tag;     /* PCD_TAG_FAULT or PCD_TAG_BG */
	unsigned block;
	uint64_t page, npages;
	uint8_t *buf;           /* its staging (anonymous memory) */
	int64_t t_post;         /* ns */
	bool busy;
};

struct pcd_blk {
	const char *name;
	uint8_t *host;
	uint8_t *alias;         /* shared: where the NIC writes */
	uint64_t length, npages;
	enum uffd_kind kind;
	uint64_t *have;         /* pages complete here */
	uint64_t *taken;        /* complete, or being read */
	unsigned reg_first;     /* shared: its first piece's registration */
	bool registered;        /* with the userfaultfd */
};

struct pcd_reg {
	void *addr;
	uint64_t len;
	struct ibv_mr *mr;
};

struct pcd {
	struct pcd_blk *b;
	unsigned n;
	int uffd;
	bool own_uffd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	unsigned cq_events;     /* got, to ack before destroying */
	struct ibv_qp *qp_fault, *qp_bg;
	struct pcd_reg *reg;
	unsigned nreg, staging_reg;
	uint8_t *staging;
	uint64_t staging_len;
	struct pcd_read fault[PCD_FAULT_DEPTH], bg[PCD_BG_DEPTH];
	struct pcq q;
	const struct pckeys *keys;
	uint64_t pending;       /* pages of the set not placed yet */
	bool recover;           /* a failed READ pauses rather than fails */
	atomic_uint busy;       /* READs posted and not completed */
	/* The driving thread's requests: pause (the link broke), resume on
	 * next_fault and next_bg (written before resume_req is set). */
	atomic_bool pause_req, resume_req;
	struct ibv_qp *next_fault, *next_bg;
	int kick_fd;
	struct rd_err pause_err; /* why it paused: the thread's, until PAUSED */
	unsigned bg_block;      /* where the background pass goes on */
	uint64_t bg_page;

	pthread_t th;
	bool started;
	sem_t go;
	int stop_fd;
	atomic_bool stop;
	int wake_fd;
	atomic_int state;       /* enum pcd_state */
	int rc;                 /* the thread's failure, once FAILED */
	struct rd_err err;      /* its message: the thread's until it ended */

	/* The figures: the thread's, published under the statistics' lock. */
	struct stats_box *stats;
	struct lathist hist;
	uint64_t fault_pages, bg_pages, faults, reads, read_ns;
	int64_t start_ms;
};

static int64_t now_ns(void)
{
	return rd_now_us() * 1000;
}

/* ---- set-up ---------------------------------------------------------------- */

static int setup_block(struct pcd_blk *bk, const struct pcd_block *in, struct rd_err *err)
{
	int rc;

	bk->name = in->name;
	bk->host = in->host;
	bk->length = in->length;
	bk->npages = blk_npages(in->length, PAGE);
	rc = uffd_kind_of(in->name, in->host, in->length, &bk->kind, err);
	if (rc)
		return rc;
	/* The userfaultfd places whole pages, and a READ fills whole pages. */
	if ((uintptr_t)in->host % PAGE || in->length % PAGE)
		return rd_err_set(err, -EINVAL, "block \"%s\": post-copy needs memory in whole "
				  "pages (its length is %" PRIu64 ")", in->name, in->length);
	bk->have = bm_alloc(bk->npages);
	bk->taken = bm_alloc(bk->npages);
	if (!bk->have || !bk->taken)
		return rd_err_set(err, -ENOMEM, "out of memory");
	if (bk->kind == UFFD_SHARED) {
		/* The same pages a second time (mremap with an old size of 0
		 * duplicates a shared mapping): the NIC writes here while the
		 * guest's mapping shows no page, until it is whole. */
		void *a = mremap(in->host, 0, bk->npages * PAGE, MREMAP_MAYMOVE);

		if (a == MAP_FAILED)
			return rd_err_set(err, -errno, "block \"%s\": cannot map its shared memory "
					  "a second time: %s", in->name, strerror(errno));
		bk->alias = a;
	}
	return 0;
}

/* What the helpers register: the staging area, then every shared block's
 * second mapping in pieces. */
static int plan_regs(struct pcd *p, bool anon, struct rd_err *err)
{
	unsigned i, k = 0, n = anon ? 1 : 0;
	uint64_t off, len;

	for (i = 0; i < p->n; i++)
		if (p->b[i].kind == UFFD_SHARED)
			n += (unsigned)blk_nchunks(p->b[i].npages * PAGE, PCD_PIECE_SHIFT);
	p->reg = calloc(n ? n : 1, sizeof(*p->reg));
	if (!p->reg)
		return rd_err_set(err, -ENOMEM, "out of memory");
	if (anon) {
		p->staging_reg = k;
		p->reg[k++] = (struct pcd_reg){ p->staging, p->staging_len, NULL };
	}
	for (i = 0; i < p->n; i++) {
		struct pcd_blk *bk = &p->b[i];
		uint64_t j, pieces;

		if (bk->kind != UFFD_SHARED)
			continue;
		bk->reg_first = k;
		pieces = blk_nchunks(bk->npages * PAGE, PCD_PIECE_SHIFT);
		for (j = 0; j < pieces; j++) {
			blk_chunk_span(bk->npages * PAGE, PCD_PIECE_SHIFT, j, &off, &len);
			p->reg[k++] = (struct pcd_reg){ bk->alias + off, len, NULL };
		}
	}
	p->nreg = k;
	return 0;
}

static int setup_staging(struct pcd *p, struct rd_err *err)
{
	unsigned i;

	p->staging_len = (uint64_t)(PCD_FAULT_DEPTH + PCD_BG_DEPTH * PCD_BG_PAGES) * PAGE;
	p->staging = mmap(NULL, p->staging_len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p->staging == MAP_FAILED) {
		p->staging = NULL;
		return rd_err_set(err, -ENOMEM, "cannot map post-copy's staging area");
	}
	for (i = 0; i < PCD_FAULT_DEPTH; i++)
		p->fault[i].buf = p->staging + (size_t)i * PAGE;
	for (i = 0; i < PCD_BG_DEPTH; i++)
		p->bg[i].buf = p->staging + (size_t)(PCD_FAULT_DEPTH + i * PCD_BG_PAGES) * PAGE;
	return 0;
}

static int setup_cq(struct pcd *p, struct ibv_context *verbs, struct rd_err *err)
{
	p->cch = ibv_create_comp_channel(verbs);
	if (!p->cch)
		return rd_err_set(err, -errno, "post-copy: ibv_create_comp_channel failed: %s",
				  strerror(errno));
	/* Its events are read only once poll() said there is one. */
	if (fcntl(p->cch->fd, F_SETFL, fcntl(p->cch->fd, F_GETFL) | O_NONBLOCK))
		return rd_err_set(err, -errno, "post-copy: fcntl failed: %s", strerror(errno));
	p->cq = ibv_create_cq(verbs, 2 * PCD_SQ_DEPTH + 4, p, p->cch, 0);
	if (!p->cq)
		return rd_err_set(err, -errno, "post-copy: ibv_create_cq failed: %s",
				  strerror(errno));
	return 0;
}

static void *run(void *arg);

int pcd_create(struct pcd **out, struct ibv_context *verbs, const struct pcd_block *blocks,
	       unsigned n, int uffd, int wake_fd, struct stats_box *stats, struct rd_err *err)
{
	struct pcd *p = calloc(1, sizeof(*p));
	bool anon = false, shared = false;
	unsigned i;
	int rc = 0;

	*out = NULL;
	if (!p)
		return rd_err_set(err, -ENOMEM, "out of memory");
	p->uffd = -1;
	p->stop_fd = -1;
	p->kick_fd = -1;
	p->wake_fd = wake_fd;
	p->stats = stats;
	sem_init(&p->go, 0, 0);
	p->b = calloc(n ? n : 1, sizeof(*p->b));
	if (!p->b)
		rc = rd_err_set(err, -ENOMEM, "out of memory");
	for (i = 0; !rc && i < n; i++) {
		p->n = i + 1;
		rc = setup_block(&p->b[i], &blocks[i], err);
		anon |= !rc && p->b[i].kind == UFFD_ANON;
		shared |= !rc && p->b[i].kind == UFFD_SHARED;
	}
	if (!rc && anon)
		rc = setup_staging(p, err);
	if (!rc)
		rc = plan_regs(p, anon, err);
	if (!rc)
		rc = setup_cq(p, verbs, err);
	if (!rc && pcq_init(&p->q, PCD_FAULTS))
		rc = rd_err_set(err, -ENOMEM, "out of memory");
	if (!rc) {
		p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		p->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (p->stop_fd < 0 || p->kick_fd < 0)
			rc = rd_err_set(err, -errno, "eventfd failed: %s", strerror(errno));
	}
	if (!rc && uffd >= 0) {
		rc = uffd_adopt(uffd, err);
		p->uffd = uffd;
	} else if (!rc) {
		rc = uffd_open(shared, &p->uffd, err);
		p->own_uffd = rc == 0;
	}
	for (i = 0; i < PCD_FAULT_DEPTH; i++)
		p->fault[i].tag.kind = PCD_TAG_FAULT;
	for (i = 0; i < PCD_BG_DEPTH; i++)
		p->bg[i].tag.kind = PCD_TAG_BG;
	if (!rc) {
		rc = -pthread_create(&p->th, NULL, run, p);
		if (rc)
			rd_err_set(err, rc, "cannot start the post-copy thread: %s", strerror(-rc));
		p->started = rc == 0;
	}
	if (rc) {
		pcd_destroy(p);
		return rc;
	}
	*out = p;
	return 0;
}

struct ibv_cq *pcd_cq(const struct pcd *p)
{
	return p->cq;
}

unsigned pcd_nregs(const struct pcd *p)
{
	return p->nreg;
}

void pcd_reg_at(const struct pcd *p, unsigned i, void **addr, uint64_t *len)
{
	*addr = p->reg[i].addr;
	*len = p->reg[i].len;
}

void pcd_reg_done(struct pcd *p, unsigned i, struct ibv_mr *mr)
{
	p->reg[i].mr = mr;
}

bool pcd_ready(const struct pcd *p)
{
	unsigned i;

	for (i = 0; i < p->nreg; i++)
		if (!p->reg[i].mr)
			return false;
	return true;
}

/* ---- the switch ---------------------------------------------------------------- */

static void unregister_all(struct pcd *p)
{
	unsigned i;

	for (i = 0; i < p->n; i++) {
		if (!p->b[i].registered)
			continue;
		uffd_unregister(p->uffd, p->b[i].host, p->b[i].npages * PAGE);
		p->b[i].registered = false;
	}
}

int pcd_begin(struct pcd *p, struct fab_conn *fault, struct fab_conn *bg,
	      const struct pckeys *keys, uint64_t *const *set, uint64_t pages, bool recover,
	      struct rd_err *err)
{
	uint64_t first, end;
	unsigned i;
	int rc = 0;

	p->qp_fault = fab_qp(fault);
	p->qp_bg = fab_qp(bg);
	p->keys = keys;
	p->pending = pages;
	p->recover = recover;
	/* Registered first: from the moment a page is gone from the guest's
	 * view, touching it waits for us. */
	for (i = 0; !rc && i < p->n; i++) {
		rc = uffd_register(p->uffd, p->b[i].kind, p->b[i].host, p->b[i].npages * PAGE,
				   p->b[i].name, err);
		p->b[i].registered = rc == 0;
	}
	for (i = 0; !rc && i < p->n; i++) {
		struct pcd_blk *bk = &p->b[i];

		/* Every page is complete but the set's. */
		memset(bk->have, 0xff, bm_words(bk->npages) * sizeof(uint64_t));
		for (first = bm_next_set(set[i], bk->npages, 0); !rc && first < bk->npages;
		     first = bm_next_set(set[i], bk->npages, end)) {
			end = bm_next_clear(set[i], bk->npages, first);
			bm_clear_range(bk->have, first, end - first);
			if (madvise(bk->host + first * PAGE, (end - first) * PAGE, MADV_DONTNEED))
				rc = rd_err_set(err, -errno, "block \"%s\": cannot drop pages %"
						PRIu64 "..%" PRIu64 " from the guest's view: %s",
						bk->name, first, end - 1, strerror(errno));
		}
		memcpy(bk->taken, bk->have, bm_words(bk->npages) * sizeof(uint64_t));
	}
	if (rc) {
		unregister_all(p);
		return rc;
	}
	p->start_ms = rd_now_ms();
	pthread_mutex_lock(&p->stats->lock);
	p->stats->st.postcopy_pages = pages;
	pthread_mutex_unlock(&p->stats->lock);
	atomic_store(&p->state, PCD_PULLING);
	sem_post(&p->go);
	return 0;
}

/* ---- the thread ------------------------------------------------------------------ */

/* Posts a READ of @npages pages from @page of block @b into @r's staging or
 * the block's second mapping, on @qp. */
static int post_read(struct pcd *p, struct ibv_qp *qp, struct pcd_read *r, unsigned b,
		     uint64_t page, uint64_t npages)
{
	struct pcd_blk *bk = &p->b[b];
	uint64_t off = page * PAGE, left;
	uint32_t rkey;
	struct ibv_sge sge = { .length = (uint32_t)(npages * PAGE) };
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
			pckeys_at(p->keys, p->bg_block, start * PAGE, &rkey, &left);
			if (end - start > left / PAGE)
				end = start + left / PAGE;
			if (bk->kind == UFFD_SHARED) {
				uint64_t piece_end = ((start * PAGE >> PCD_PIECE_SHIFT) + 1) <<
						     PCD_PIECE_SHIFT;

				if (end * PAGE > piece_end)
					end = piece_end / PAGE;
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
	rc = uffd_place(p->uffd, bk->kind, bk->host + r->page * PAGE, r->buf, r->npages * PAGE);
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
		    addr < (uintptr_t)p->b[i].host + p->b[i].npages * PAGE) {
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
	page = (addr - (uintptr_t)bk->host) / PAGE;
	if (bm_test(bk->have, page)) {
		rc = uffd_place_local(p->uffd, bk->kind, bk->host + page * PAGE, PAGE);
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

static void *run(void *arg)
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
			unregister_all(p);
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

/* ---- the driving thread's ------------------------------------------------------------ */

int pcd_poll(struct pcd *p, uint64_t *fault_pages, uint64_t *bg_pages, struct rd_err *err)
{
	/* A resume asked for and not yet taken is no pause of its own. */
	bool resuming = atomic_load(&p->resume_req);
	int state = atomic_load(&p->state);

	if (state == PCD_PAUSED && !resuming) {
		rd_err_set(err, -ECONNRESET, "%s", p->pause_err.msg);
		return PCD_POLL_PAUSED;
	}
	if (state == PCD_FAILED) {
		rd_err_set(err, p->rc, "%s", p->err.msg);
		return p->rc;
	}
	if (state != PCD_DONE)
		return 0;
	*fault_pages = p->fault_pages;
	*bg_pages = p->bg_pages;
	return 1;
}

void pcd_pause(struct pcd *p)
{
	uint64_t one = 1;

	atomic_store(&p->pause_req, true);
	if (write(p->kick_fd, &one, sizeof(one)) < 0) {
		/* Readable already. */
	}
}

bool pcd_quiet(const struct pcd *p)
{
	int st = atomic_load(&p->state);

	/* READs on a channel that still worked may complete while paused and
	 * bring in the last pages: the thread is gone then, nothing changes
	 * any more.  Paused with none left, it is about to say so. */
	if (st == PCD_DONE)
		return true;
	return st == PCD_PAUSED && !atomic_load(&p->busy) && p->pending;
}

void pcd_resume(struct pcd *p, struct fab_conn *fault, struct fab_conn *bg)
{
	uint64_t one = 1;

	p->next_fault = fab_qp(fault);
	p->next_bg = fab_qp(bg);
	atomic_store(&p->resume_req, true);
	if (write(p->kick_fd, &one, sizeof(one)) < 0) {
		/* Readable already. */
	}
}

uint64_t pcd_pending(const struct pcd *p, uint64_t *fault_pages, uint64_t *bg_pages)
{
	/* The thread's counters, read while it is paused (pcd_quiet()):
	 * nothing changes them then but a fault on a page that is here. */
	*fault_pages = p->fault_pages;
	*bg_pages = p->bg_pages;
	return p->pending;
}

void pcd_stop(struct pcd *p)
{
	uint64_t one = 1;

	if (!p || !p->started)
		return;
	atomic_store(&p->stop, true);
	if (write(p->stop_fd, &one, sizeof(one)) < 0) {
		/* Readable already. */
	}
	sem_post(&p->go);
	pthread_join(p->th, NULL);
	p->started = false;
}

void pcd_destroy(struct pcd *p)
{
	unsigned i;

	if (!p)
		return;
	pcd_stop(p);
	for (i = 0; p->reg && i < p->nreg; i++)
		if (p->reg[i].mr)
			ibv_dereg_mr(p->reg[i].mr);
	if (p->cq)
		ibv_destroy_cq(p->cq);
	if (p->cch)
		ibv_destroy_comp_channel(p->cch);
	if (p->own_uffd) {
		unregister_all(p);
		close(p->uffd);
	}
	for (i = 0; p->b && i < p->n; i++) {
		if (p->b[i].alias)
			munmap(p->b[i].alias, p->b[i].npages * PAGE);
		bm_free(p->b[i].have);
		bm_free(p->b[i].taken);
	}
	if (p->staging)
		munmap(p->staging, p->staging_len);
	if (p->stop_fd >= 0)
		close(p->stop_fd);
	if (p->kick_fd >= 0)
		close(p->kick_fd);
	pcq_fini(&p->q);
	sem_destroy(&p->go);
	free(p->reg);
	free(p->b);
	free(p);
}
