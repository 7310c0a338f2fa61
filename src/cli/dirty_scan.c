/* The work of one slice, on whichever thread takes it: soft-dirty reads
 * its pagemap words, soft-dirty-scan and wp-async ask PAGEMAP_SCAN for
 * its written ranges (wp-async protecting them again in the same walk,
 * under the page-table lock); what is found goes into the bitmaps.  And
 * how the mappings are cut into slices. */
#include "dirty_scan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dirty_bits.h"

/* ---- one slice ------------------------------------------------------------------- */

static int slice_read(struct worker *w, const struct slice *sl)
{
	struct dirty_set *s = w->s;
	uint64_t *buf = w->buf, at = sl->start, want, i;
	ssize_t r;

	while (at < sl->end) {
		want = (sl->end - at) / s->psz;
		if (want > PM_BATCH)
			want = PM_BATCH;
		r = pread(s->pagemap_fd, buf, want * sizeof(*buf), (off_t)(at / s->psz * sizeof(*buf)));
		if (r == 0)
			return cli_err_set(&w->err, -ESRCH, "process %d exited", (int)s->pid);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return cli_err_set(&w->err, -errno, "cannot read /proc/%d/pagemap: %s",
					   (int)s->pid, strerror(errno));
		want = (uint64_t)r / sizeof(*buf);
		if (!want)
			return cli_err_set(&w->err, -EIO, "short read from /proc/%d/pagemap",
					   (int)s->pid);
		for (i = 0; i < want; i++)
			if (buf[i] & PM_SOFT_DIRTY)
				dirty_bits_mark(s, sl, at + i * s->psz, at + (i + 1) * s->psz);
		at += want * s->psz;
	}
	return 0;
}

static int slice_scan(struct worker *w, const struct slice *sl, enum op op)
{
	struct dirty_set *s = w->s;
	struct page_region_ *vec = w->buf;
	struct pm_scan_arg_ a = { .size = sizeof(a), .start = sl->start, .end = sl->end };
	long n, i;

	if (op == OP_SCAN_SD) {
		a.category_mask = a.return_mask = PAGE_IS_SOFT_DIRTY_;
	} else {
		/* Exactly this mask set takes the kernel's fast path for
		 * "written, and protect it again". */
		a.flags = PM_SCAN_WP_MATCHING_ | PM_SCAN_CHECK_WPASYNC_;
		a.category_mask = a.return_mask = PAGE_IS_WRITTEN_;
	}
	if (op != OP_ARM) {
		a.vec = (uintptr_t)vec;
		a.vec_len = PM_REGIONS;
	}
	while (a.start < sl->end) {
		a.walk_end = 0;
		n = ioctl(s->pagemap_fd, PAGEMAP_SCAN_, &a);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EPERM)
			return cli_err_set(&w->err, -ESTALE, "process %d's mapping at %#"
					   PRIx64 " is no longer registered for write-protection "
					   "(remapped?): pages it dirtied may be missed",
					   (int)s->pid,
					   a.start);
		if (n < 0)
			return cli_err_set(&w->err, errno == ESRCH ? -ESRCH : -errno,
					   "PAGEMAP_SCAN of /proc/%d/pagemap failed: %s",
					   (int)s->pid,
					   strerror(errno));
		for (i = 0; i < n; i++)
			dirty_bits_mark(s, sl, vec[i].start, vec[i].end);
		if (a.walk_end <= a.start)
			return cli_err_set(&w->err, -EIO, "PAGEMAP_SCAN of /proc/%d/pagemap "
					   "made no progress at %#" PRIx64, (int)s->pid, a.start);
		a.start = a.walk_end;
	}
	return 0;
}

int dirty_scan_slice(struct worker *w, const struct slice *sl)
{
	return w->s->op == OP_READ ? slice_read(w, sl) : slice_scan(w, sl, w->s->op);
}

/* ---- the slices ------------------------------------------------------------------ */

/* Pages of mapping @v of file @i below the file's length (0: none). */
static uint64_t vma_pages(const struct dirty_set *s, unsigned i, const struct dirty_vma *v)
{
	uint64_t first = v->off / s->psz, n = (v->end - v->start) / s->psz;

	if (first >= s->files[i].npages)
		return 0;
	return n > s->files[i].npages - first ? s->files[i].npages - first : n;
}

static uint64_t total_pages(const struct dirty_set *s)
{
	uint64_t total = 0;
	unsigned i;
	size_t k;

	for (i = 0; i < s->nfiles; i++)
		for (k = 0; k < s->files[i].nvmas; k++)
			total += vma_pages(s, i, &s->files[i].vmas[k]);
	return total;
}

/* Cuts every mapping's part below its file's length into slices. */
int dirty_scan_cut(struct dirty_set *s, unsigned threads, struct cli_err *err)
{
	uint64_t total = total_pages(s), per = total / (8ull * threads), at, end;
	size_t k, cap = 0;
	unsigned i;

	per = per < SLICE_MIN_PAGES ? SLICE_MIN_PAGES : per > SLICE_MAX_PAGES ?
	      SLICE_MAX_PAGES : (per + 511) / 512 * 512;
	for (i = 0; i < s->nfiles; i++)
		cap += s->files[i].nvmas;
	cap += total / per + 1;
	s->slices = calloc(cap, sizeof(*s->slices));
	if (!s->slices)
		return cli_err_set(err, -ENOMEM, "out of memory");
	for (i = 0; i < s->nfiles; i++)
		for (k = 0; k < s->files[i].nvmas; k++) {
			const struct dirty_vma *v = &s->files[i].vmas[k];

			end = v->start + vma_pages(s, i, v) * s->psz;
			for (at = v->start; at < end; at += per * s->psz) {
				if (s->nslices == cap)
					return cli_err_set(err, -EOVERFLOW, "slice count");
				s->slices[s->nslices++] = (struct slice){
					i, v, at, end - at < per * s->psz ? end : at + per * s->psz
				};
			}
		}
	return 0;
}
