#include "src_mem.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "config.h"
#include "src_int.h"

/* Whether [host, host + len) lies in private (copy-on-write) mappings: such
 * memory is pinned with write access, which breaks copy-on-write at pin
 * time; a read-only pin of a never-written private page could hold the
 * shared zero page on kernels before 5.19/6.0, and later writes would never
 * reach the migration.  Shared memory is pinned read-only, so pinning does
 * not mark its pages written (soft-dirty tracking would see every pinned
 * chunk as dirty again). */
static bool private_memory(const void *host, uint64_t len)
{
	uintptr_t lo = (uintptr_t)host, hi = lo + len;
	unsigned long start, end;
	char perms[8], line[512];
	bool priv = false;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return true; /* write access is the safe choice */
	while (!priv && fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && start < hi &&
		    end > lo)
			priv = perms[3] == 'p';
	fclose(f);
	return priv;
}

static int check_block(struct rdmig_source *s, const char *name, void *host,
		       uint64_t length, uint32_t page_size)
{
	unsigned i;
	int rc = blk_name_valid(name, &s->ss.err);

	if (rc)
		return rc;
	if (!rd_is_pow2(page_size) || page_size < 4096 || page_size > (1u << 30))
		return rd_err_set(&s->ss.err, -EINVAL, "block \"%s\": page size %u must be a "
				  "power of two from 4096 to 1 GiB", name, page_size);
	/* Its pages are the dirty bitmap's: they start where real pages do. */
	rc = blk_check_mem(name, host, length, page_size, &s->ss.err);
	if (rc)
		return rc;
	if (s->nblocks >= BLK_MAX)
		return rd_err_set(&s->ss.err, -E2BIG, "too many blocks (limit %d)", BLK_MAX);
	for (i = 0; i < s->nblocks; i++) {
		const struct src_block *o = &s->blocks[i];

		if (!strcmp(o->d.name, name))
			return rd_err_set(&s->ss.err, -EEXIST, "block \"%s\" added twice", name);
		rc = blk_check_overlap(name, host, length, o->d.name, o->host, o->d.length,
				       &s->ss.err);
		if (rc)
			return rc;
	}
	return 0;
}

int src_mem_add(struct rdmig_source *s, const char *name, void *host, uint64_t length,
		uint32_t page_size)
{
	struct src_block *b, *nb;
	int rc;

	if (!page_size)
		page_size = CFG_PAGE_SIZE;
	rc = check_block(s, name, host, length, page_size);
	if (rc)
		return rc;
	nb = realloc(s->blocks, (s->nblocks + 1) * sizeof(*nb));
	if (!nb)
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	s->blocks = nb;
	b = &s->blocks[s->nblocks];
	memset(b, 0, sizeof(*b));
	snprintf(b->d.name, sizeof(b->d.name), "%s", name);
	b->d.length = length;
	b->d.page_size = page_size;
	b->host = host;
	b->npages = blk_npages(length, page_size);
	b->cow = private_memory(host, length);
	b->dirty = bm_alloc(b->npages);
	b->sending = bm_alloc(b->npages);
	b->written = bm_alloc(b->npages);
	if (!b->dirty || !b->sending || !b->written) {
		bm_free(b->dirty);
		bm_free(b->sending);
		bm_free(b->written);
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory for the dirty bitmaps");
	}
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.total += length;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return (int)s->nblocks++;
}

void src_mem_destroy(struct rdmig_source *s)
{
	unsigned i;

	for (i = 0; i < s->nblocks; i++) {
		bm_free(s->blocks[i].dirty);
		bm_free(s->blocks[i].sending);
		bm_free(s->blocks[i].written);
	}
	free(s->blocks);
	s->blocks = NULL;
	pthread_mutex_destroy(&s->mark_lock);
}

void src_mem_init(struct rdmig_source *s)
{
	pthread_mutex_init(&s->mark_lock, NULL);
	s->driver = pthread_self();
}

void src_mem_set_driver(struct rdmig_source *s)
{
	pthread_mutex_lock(&s->mark_lock);
	s->driver = pthread_self();
	pthread_mutex_unlock(&s->mark_lock);
}

/* Where a marking failure is told: the handle's error is written by the
 * driving thread alone. */
static struct rd_err *mark_err(struct rdmig_source *s, struct rd_err *scratch)
{
	bool driver;

	pthread_mutex_lock(&s->mark_lock);
	driver = pthread_equal(s->driver, pthread_self());
	pthread_mutex_unlock(&s->mark_lock);
	return driver ? &s->ss.err : scratch;
}

/* Under mark_lock. */
static void mark_pages(struct rdmig_source *s, struct src_block *b, uint64_t first,
		       uint64_t n)
{
	uint64_t fresh = n - bm_count_range(b->dirty, first, n);

	bm_set_range(b->dirty, first, n);
	s->dirty_bytes += fresh * b->d.page_size;
	s->marked_since += fresh * b->d.page_size;
}

int src_mem_mark(struct rdmig_source *s, unsigned block, uint64_t offset, uint64_t length)
{
	struct rd_err scratch;
	struct src_block *b;
	uint64_t first, end;

	/* The block set is fixed once connecting began, and before that only
	 * the driving thread adds blocks. */
	if (block >= s->nblocks)
		return rd_err_set(mark_err(s, &scratch), -EINVAL, "block index %u out of range",
				  block);
	b = &s->blocks[block];
	if (!length)
		return 0;
	if (rd_add_overflow_u64(offset, length, &end) || end > b->d.length)
		return rd_err_set(mark_err(s, &scratch), -ERANGE, "block \"%s\": range %" PRIu64
				  "+%" PRIu64 " is outside its %" PRIu64 " bytes", b->d.name,
				  offset, length, b->d.length);
	first = offset / b->d.page_size;
	pthread_mutex_lock(&s->mark_lock);
	mark_pages(s, b, first, (end - 1) / b->d.page_size - first + 1);
	pthread_mutex_unlock(&s->mark_lock);
	return 0;
}

int src_mem_mark_bitmap(struct rdmig_source *s, unsigned block, const unsigned long *bitmap,
			uint64_t first_page, uint64_t npages)
{
	const unsigned bits = sizeof(unsigned long) * 8;
	struct rd_err scratch;
	struct src_block *b;
	uint64_t i, end;

	if (block >= s->nblocks)
		return rd_err_set(mark_err(s, &scratch), -EINVAL, "block index %u out of range",
				  block);
	b = &s->blocks[block];
	if (rd_add_overflow_u64(first_page, npages, &end) || end > b->npages)
		return rd_err_set(mark_err(s, &scratch), -ERANGE, "block \"%s\": pages %" PRIu64
				  "+%" PRIu64 " are outside its %" PRIu64 " pages", b->d.name,
				  first_page, npages, b->npages);
	pthread_mutex_lock(&s->mark_lock);
	/* Word at a time, run by run: a clean word costs one test. */
	for (i = 0; i < npages; ) {
		unsigned long w = bitmap[i / bits] >> (i % bits);
		uint64_t left = bits - i % bits, skip, run;

		if (left > npages - i)
			left = npages - i;
		if (!w) {
			i += left;
			continue;
		}
		skip = (uint64_t)__builtin_ctzl(w);
		if (skip >= left) {
			i += left;
			continue;
		}
		w >>= skip;
		run = ~w ? (uint64_t)__builtin_ctzl(~w) : bits;
		if (run > left - skip)
			run = left - skip;
		mark_pages(s, b, first_page + i + skip, run);
		i += skip + run;
	}
	pthread_mutex_unlock(&s->mark_lock);
	return 0;
}

void src_mem_mark_all(struct rdmig_source *s)
{
	unsigned i;

	pthread_mutex_lock(&s->mark_lock);
	for (i = 0; i < s->nblocks; i++)
		mark_pages(s, &s->blocks[i], 0, s->blocks[i].npages);
	pthread_mutex_unlock(&s->mark_lock);
}

int src_mem_sync(struct rdmig_source *s)
{
	char msg[RD_ERRLEN] = "";
	struct cfg_cb_frame f;
	int rc;

	if (!s->ss.cfg.dirty_sync)
		return 0;
	cfg_cb_enter(&f, &s->ss.cfg);
	rc = s->ss.cfg.dirty_sync(s->ss.cfg.dirty_ctx, s, msg, sizeof(msg));
	cfg_cb_leave(&f);
	if (!rc)
		return 0;
	return rd_err_set(&s->ss.err, rc < 0 ? rc : -EIO, "the dirty_sync callback failed: %s",
			  msg[0] ? msg : "no reason given");
}

uint64_t src_mem_dirty_bytes(struct rdmig_source *s)
{
	uint64_t n;

	pthread_mutex_lock(&s->mark_lock);
	n = s->dirty_bytes;
	pthread_mutex_unlock(&s->mark_lock);
	return n;
}

uint64_t src_mem_freeze(struct rdmig_source *s, int64_t now_ms)
{
	uint64_t frozen;
	unsigned i;

	pthread_mutex_lock(&s->mark_lock);
	frozen = s->dirty_bytes;
	for (i = 0; i < s->nblocks; i++) {
		uint64_t *t = s->blocks[i].sending;

		s->blocks[i].sending = s->blocks[i].dirty;
		s->blocks[i].dirty = t;
	}
	s->dirty_bytes = 0;
	if (s->marked_since_ms && now_ms > s->marked_since_ms)
		s->dirty_rate = s->marked_since * 1000 / (uint64_t)(now_ms - s->marked_since_ms);
	s->marked_since = 0;
	s->marked_since_ms = now_ms;
	pthread_mutex_unlock(&s->mark_lock);
	return frozen;
}

/* Jobs the helpers hold: enough for pin-all pieces ahead (a few per
 * helper), the dynamic chunks of the requests in flight, and the state
 * ring. */
#define SRC_REGQ_DEPTH 64

int src_mem_reg_start(struct rdmig_source *s, struct ibv_pd *pd)
{
	return regq_init(&s->rq, &regq_verbs, pd, SRC_REGQ_DEPTH, 0, s->ss.wake_fd,
			 &s->ss.err);
}

int src_mem_submit(struct rdmig_source *s, const struct src_block *b, uint64_t off,
		   uint64_t len, int access, uint64_t cookie)
{
	/* A WRITE source needs only local read access; private memory is
	 * pinned for writing so copy-on-write is broken now (see
	 * private_memory).  A read-only private mapping can only be pinned
	 * for reading. */
	return regq_submit(&s->rq, b->host + off, len,
			   (b->cow ? IBV_ACCESS_LOCAL_WRITE : 0) | access, b->cow ? access : -1,
			   cookie, &s->ss.err);
}

int src_mem_reg_failed(struct rdmig_source *s, const struct regq_job *j)
{
	unsigned i;

	fab_reg_error(&s->ss.err, j->rc, j->len);
	for (i = 0; i < s->nblocks; i++)
		if ((uint8_t *)j->addr >= s->blocks[i].host &&
		    (uint8_t *)j->addr < s->blocks[i].host + s->blocks[i].d.length)
			return rd_err_prefix(&s->ss.err, j->rc, "block \"%s\"",
					     s->blocks[i].d.name);
	return j->rc;
}
