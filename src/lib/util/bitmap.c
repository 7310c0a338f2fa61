#include "bitmap.h"

#include <stdint.h>
#include <stdlib.h>

uint64_t *bm_alloc(uint64_t nbits)
{
	uint64_t words = bm_words(nbits);

	if (!words)
		words = 1;
	if (words > SIZE_MAX / sizeof(uint64_t))
		return NULL;
	return calloc((size_t)words, sizeof(uint64_t));
}

void bm_free(uint64_t *bm)
{
	free(bm);
}

/* Mask of bits [lo, hi) within one word, 0 <= lo < hi <= 64. */
static inline uint64_t bm_mask(unsigned lo, unsigned hi)
{
	uint64_t m = hi == BM_WORD_BITS ? ~UINT64_C(0) : (UINT64_C(1) << hi) - 1;

	return m & (~UINT64_C(0) << lo);
}

/* Applies @set to bits [start, start + n): whole words in the middle are
 * stored directly. */
static void bm_fill_range(uint64_t *bm, uint64_t start, uint64_t n, bool set)
{
	uint64_t w = start / BM_WORD_BITS, last, wlast;
	unsigned lo = start % BM_WORD_BITS, hi;

	if (!n)
		return;
	last = start + n - 1;
	wlast = last / BM_WORD_BITS;
	hi = last % BM_WORD_BITS + 1;
	if (w == wlast) {
		uint64_t m = bm_mask(lo, hi);

		bm[w] = set ? bm[w] | m : bm[w] & ~m;
		return;
	}
	bm[w] = set ? bm[w] | bm_mask(lo, BM_WORD_BITS) : bm[w] & ~bm_mask(lo, BM_WORD_BITS);
	for (w++; w < wlast; w++)
		bm[w] = set ? ~UINT64_C(0) : 0;
	bm[w] = set ? bm[w] | bm_mask(0, hi) : bm[w] & ~bm_mask(0, hi);
}

void bm_set_range(uint64_t *bm, uint64_t start, uint64_t n)
{
	bm_fill_range(bm, start, n, true);
}

void bm_clear_range(uint64_t *bm, uint64_t start, uint64_t n)
{
	bm_fill_range(bm, start, n, false);
}

/* @flip is all ones to search for clear bits, 0 for set bits. */
static uint64_t bm_next(const uint64_t *bm, uint64_t nbits, uint64_t from, uint64_t flip)
{
	uint64_t w, nw, word, i;

	if (from >= nbits)
		return nbits;
	w = from / BM_WORD_BITS;
	nw = bm_words(nbits);
	word = (bm[w] ^ flip) & (~UINT64_C(0) << (from % BM_WORD_BITS));
	while (!word) {
		if (++w == nw)
			return nbits;
		word = bm[w] ^ flip;
	}
	i = w * BM_WORD_BITS + (uint64_t)__builtin_ctzll(word);
	return i < nbits ? i : nbits;
}

uint64_t bm_next_set(const uint64_t *bm, uint64_t nbits, uint64_t from)
{
	return bm_next(bm, nbits, from, 0);
}

uint64_t bm_next_clear(const uint64_t *bm, uint64_t nbits, uint64_t from)
{
	return bm_next(bm, nbits, from, ~UINT64_C(0));
}

uint64_t bm_count(const uint64_t *bm, uint64_t nbits)
{
	uint64_t full = nbits / BM_WORD_BITS, n = 0, w;
	unsigned rest = nbits % BM_WORD_BITS;

	for (w = 0; w < full; w++)
		n += (uint64_t)__builtin_popcountll(bm[w]);
	if (rest)
		n += (uint64_t)__builtin_popcountll(bm[full] & bm_mask(0, rest));
	return n;
}

uint64_t bm_count_range(const uint64_t *bm, uint64_t start, uint64_t n)
{
	uint64_t end = start + n, i = start, c = 0;

	/* Bit by bit to the first word boundary, then whole words. */
	for (; i < end && i % BM_WORD_BITS; i++)
		c += bm_test(bm, i);
	for (; i + BM_WORD_BITS <= end; i += BM_WORD_BITS)
		c += (uint64_t)__builtin_popcountll(bm[i / BM_WORD_BITS]);
	for (; i < end; i++)
		c += bm_test(bm, i);
	return c;
}
