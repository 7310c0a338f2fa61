/* Bitmaps of u64 words: bit i lives in word i / 64, bit i % 64.  Used for
 * dirty, written and transit page sets, so every scan works a word at a
 * time. */
#ifndef RDMIG_BITMAP_H
#define RDMIG_BITMAP_H

#include <stdbool.h>
#include <stdint.h>

#define BM_WORD_BITS 64

/* Words needed for @nbits bits. */
static inline uint64_t bm_words(uint64_t nbits)
{
	return nbits / BM_WORD_BITS + (nbits % BM_WORD_BITS != 0);
}

/* A zeroed bitmap of @nbits bits (at least one word, so 0 bits still gives a
 * pointer to free); NULL when the size overflows or memory is short. */
uint64_t *bm_alloc(uint64_t nbits);
void bm_free(uint64_t *bm);

static inline bool bm_test(const uint64_t *bm, uint64_t i)
{
	return (bm[i / BM_WORD_BITS] >> (i % BM_WORD_BITS)) & 1;
}

static inline void bm_set(uint64_t *bm, uint64_t i)
{
	bm[i / BM_WORD_BITS] |= UINT64_C(1) << (i % BM_WORD_BITS);
}

static inline void bm_clear(uint64_t *bm, uint64_t i)
{
	bm[i / BM_WORD_BITS] &= ~(UINT64_C(1) << (i % BM_WORD_BITS));
}

/* Sets or clears bits [start, start + n); the caller keeps the range inside
 * the bitmap. */
void bm_set_range(uint64_t *bm, uint64_t start, uint64_t n);
void bm_clear_range(uint64_t *bm, uint64_t start, uint64_t n);

/* First set (clear) bit at or after @from and below @nbits, or @nbits when
 * there is none.  Bits at or above @nbits are ignored. */
uint64_t bm_next_set(const uint64_t *bm, uint64_t nbits, uint64_t from);
uint64_t bm_next_clear(const uint64_t *bm, uint64_t nbits, uint64_t from);

/* Number of set bits below @nbits. */
uint64_t bm_count(const uint64_t *bm, uint64_t nbits);
/* Number of set bits in [start, start + n). */
uint64_t bm_count_range(const uint64_t *bm, uint64_t start, uint64_t n);

#endif
