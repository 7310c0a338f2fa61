/* One bitmap per file, indexed by file page: what the kernel reports per
 * virtual range is folded in, so a page mapped twice is reported once, and
 * the runs come out in file order.  Slices of several threads may share a
 * word, so bits are set atomically. */
#include "dirty_bits.h"

#include <string.h>

/* Sets bits [a, b) of @bits; slices of several threads may share a word. */
void dirty_bits_set(uint64_t *bits, uint64_t a, uint64_t b)
{
	uint64_t w, lo, hi, mask;

	while (a < b) {
		w = a / 64;
		lo = a % 64;
		hi = b - w * 64 < 64 ? b - w * 64 : 64;
		mask = (hi == 64 ? ~0ull : (1ull << hi) - 1) & ~((1ull << lo) - 1);
		__atomic_fetch_or(&bits[w], mask, __ATOMIC_RELAXED);
		a = w * 64 + hi;
	}
}

/* Marks the file pages that virtual [a, b) of @sl's mapping shows. */
void dirty_bits_mark(struct dirty_set *s, const struct slice *sl, uint64_t a, uint64_t b)
{
	struct dirty_file *f = &s->files[sl->file];
	uint64_t p0 = (sl->v->off + (a - sl->v->start)) / s->psz;
	uint64_t p1 = p0 + (b - a + s->psz - 1) / s->psz;

	if (p0 >= f->npages)
		return;
	dirty_bits_set(f->bits, p0, p1 < f->npages ? p1 : f->npages);
}

void dirty_bits_zero(struct dirty_set *s)
{
	unsigned i;

	for (i = 0; i < s->nfiles; i++)
		memset(s->files[i].bits, 0, (s->files[i].npages / 64 + 1) * sizeof(uint64_t));
}

/* The first page at or after @from whose bit equals @set, or npages. */
uint64_t dirty_bits_next(const struct dirty_file *f, uint64_t from, int set)
{
	uint64_t w;

	while (from < f->npages) {
		w = f->bits[from / 64];
		if (!set)
			w = ~w;
		w &= ~0ull << (from % 64);
		if (w) {
			from = from / 64 * 64 + (uint64_t)__builtin_ctzll(w);
			return from < f->npages ? from : f->npages;
		}
		from = (from / 64 + 1) * 64;
	}
	return f->npages;
}
