/* pcd: the post-copy engine's face to the driving thread (pcd.h says what
 * the engine does; its thread is pcd_thread.c, their shared state
 * pcd_int.h). */
#include "pcd.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bitmap.h"
#include "blocks.h"
#include "pcd_int.h"

_Static_assert(PCD_FAULT_DEPTH == PCD_SQ_DEPTH,
	       "the fault channel's READs in flight fill its send queue, no more");

/* ---- set-up ---------------------------------------------------------------- */

/* A foreign view: the guest's mapping is in the userfaultfd's process and
 * ours (@in->host) must be the same memory, shared, for the NIC to write
 * and the guest to see.  No second mapping is made: ours is one already,
 * and the guest's view is not in this process to duplicate. */
static int setup_foreign(struct pcd_blk *bk, const struct pcd_block *in, struct rd_err *err)
{
	if (bk->kind != UFFD_SHARED)
		return rd_err_set(err, -EINVAL, "block \"%s\": the guest's memory is another "
				  "process's, and private memory of another process cannot be "
				  "written by pre-copy: back the guest's RAM by a memfd (or tmpfs) "
				  "mapped shared, and hand that over", in->name);
	bk->host = (uint8_t *)(uintptr_t)in->view;
	bk->alias = in->host;
	bk->foreign = true;
	return 0;
}

static int setup_block(struct pcd_blk *bk, const struct pcd_block *in, struct rd_err *err)
{
	int rc;

	bk->name = in->name;
	bk->host = in->host;
	bk->length = in->length;
	bk->npages = blk_npages(in->length, PCD_PAGE);
	rc = uffd_kind_of(in->name, in->host, in->length, &bk->kind, err);
	if (rc)
		return rc;
	/* The userfaultfd places whole pages, and a READ fills whole pages. */
	if ((uintptr_t)in->host % PCD_PAGE || in->length % PCD_PAGE)
		return rd_err_set(err, -EINVAL, "block \"%s\": post-copy needs memory in whole "
				  "pages (its length is %" PRIu64 ")", in->name, in->length);
	bk->have = bm_alloc(bk->npages);
	bk->taken = bm_alloc(bk->npages);
	if (!bk->have || !bk->taken)
		return rd_err_set(err, -ENOMEM, "out of memory");
	if (in->view)
		return setup_foreign(bk, in, err);
	if (bk->kind == UFFD_SHARED) {
		/* The same pages a second time (mremap with an old size of 0
		 * duplicates a shared mapping): the NIC writes here while the
		 * guest's mapping shows no page, until it is whole. */
		void *a = mremap(in->host, 0, bk->npages * PCD_PAGE, MREMAP_MAYMOVE);

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
			n += (unsigned)blk_nchunks(p->b[i].npages * PCD_PAGE, PCD_PIECE_SHIFT);
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
		pieces = blk_nchunks(bk->npages * PCD_PAGE, PCD_PIECE_SHIFT);
		for (j = 0; j < pieces; j++) {
			blk_chunk_span(bk->npages * PCD_PAGE, PCD_PIECE_SHIFT, j, &off, &len);
			p->reg[k++] = (struct pcd_reg){ bk->alias + off, len, NULL };
		}
	}
	p->nreg = k;
	return 0;
}

static int setup_staging(struct pcd *p, struct rd_err *err)
{
	unsigned i;

	p->staging_len = (uint64_t)(PCD_FAULT_DEPTH + PCD_BG_DEPTH * PCD_BG_PAGES) * PCD_PAGE;
	p->staging = mmap(NULL, p->staging_len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p->staging == MAP_FAILED) {
		p->staging = NULL;
		return rd_err_set(err, -ENOMEM, "cannot map post-copy's staging area");
	}
	for (i = 0; i < PCD_FAULT_DEPTH; i++)
		p->fault[i].buf = p->staging + (size_t)i * PCD_PAGE;
	for (i = 0; i < PCD_BG_DEPTH; i++)
		p->bg[i].buf = p->staging + (size_t)(PCD_FAULT_DEPTH + i * PCD_BG_PAGES) * PCD_PAGE;
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
		rc = -pthread_create(&p->th, NULL, pcd_thread, p);
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
		rc = uffd_register(p->uffd, p->b[i].kind, p->b[i].host, p->b[i].npages * PCD_PAGE,
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
			/* A foreign view's page tables are its VMM's to drop,
			 * before its vCPUs run (rdmig(3)). */
			if (!bk->foreign && madvise(bk->host + first * PCD_PAGE, (end - first) * PCD_PAGE,
				    MADV_DONTNEED))
				rc = rd_err_set(err, -errno, "block \"%s\": cannot drop pages %"
						PRIu64 "..%" PRIu64 " from the guest's view: %s",
						bk->name, first, end - 1, strerror(errno));
		}
		memcpy(bk->taken, bk->have, bm_words(bk->npages) * sizeof(uint64_t));
	}
	if (rc) {
		pcd_unregister_all(p);
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
		pcd_unregister_all(p);
		close(p->uffd);
	}
	for (i = 0; p->b && i < p->n; i++) {
		if (p->b[i].alias && !p->b[i].foreign)
			munmap(p->b[i].alias, p->b[i].npages * PCD_PAGE);
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
