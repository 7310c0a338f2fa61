/* Fuzzes what a destination makes of post-copy's page set and keys
 * (pcset_take, pckeys_take) against blocks the input sizes: whatever the
 * ranges and keys, an accepted message sets exactly the pages it counts
 * and nothing outside the blocks, a refused one changes nothing, and every
 * key kept maps into its piece.
 *
 * Input: byte 0 = blocks (1..4), then 2 bytes per block, its pages
 * (little-endian, 1..65536); then messages: a byte 0 (ranges: a count,
 * then per range a block byte and 2-byte first and count) or 1 (keys: a
 * shift byte, a count, then per key a block byte, a piece byte, an 8-byte
 * address and a 4-byte rkey). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "pcset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXB 4
#define MAXN 64

static uint64_t get(const uint8_t **p, size_t *left, unsigned n)
{
	uint64_t v = 0;
	unsigned i;

	for (i = 0; i < n && *left; i++, (*p)++, (*left)--)
		v |= (uint64_t)**p << (8 * i);
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t npages[MAXB], length[MAXB], *set[MAXB], *before[MAXB], total;
	uint32_t blk[MAXN], rkey[MAXN];
	uint64_t first[MAXN], count[MAXN], piece[MAXN], addr[MAXN];
	struct pcset_rx rx;
	struct pckeys k;
	struct rd_err e;
	unsigned nb, b, n, i, shift;
	int rc;

	if (size < 1)
		return 0;
	nb = data[0] % MAXB + 1;
	data++;
	size--;
	for (b = 0; b < nb; b++) {
		npages[b] = get(&data, &size, 2) + 1;
		length[b] = npages[b] * 4096;
		set[b] = bm_alloc(npages[b]);
		before[b] = bm_alloc(npages[b]);
		assert(set[b] && before[b]);
	}
	pcset_rx_init(&rx, nb, npages, set);
	pckeys_init(&k, nb, length);
	while (size) {
		unsigned op = (unsigned)get(&data, &size, 1) & 1;

		if (op == 0) {
			n = (unsigned)get(&data, &size, 1) % MAXN;
			for (i = 0; i < n; i++) {
				blk[i] = (uint32_t)get(&data, &size, 1) % (MAXB + 1);
				first[i] = get(&data, &size, 2);
				count[i] = get(&data, &size, 2);
			}
			for (b = 0; b < nb; b++)
				memcpy(before[b], set[b], bm_words(npages[b]) * 8);
			total = rx.pages;
			rc = pcset_take(&rx, blk, first, count, n, &e);
			for (b = 0; rc && b < nb; b++)
				assert(!memcmp(before[b], set[b], bm_words(npages[b]) * 8));
			assert(rc || rx.pages >= total);
			for (b = 0, total = 0; b < nb; b++)
				total += bm_count(set[b], npages[b]);
			/* Ranges never overlap: each page counted once. */
			assert(total == rx.pages);
		} else {
			shift = (unsigned)get(&data, &size, 1) % 32;
			n = (unsigned)get(&data, &size, 1) % MAXN;
			for (i = 0; i < n; i++) {
				blk[i] = (uint32_t)get(&data, &size, 1) % (MAXB + 1);
				piece[i] = get(&data, &size, 1);
				addr[i] = get(&data, &size, 8);
				rkey[i] = (uint32_t)get(&data, &size, 4);
			}
			total = k.got;
			rc = pckeys_take(&k, shift, blk, piece, addr, rkey, n, &e);
			assert(rc || k.got == total + n);
			assert(!k.seen || bm_count(k.seen, k.npieces) == k.got);
		}
	}
	if (pckeys_complete(&k)) {
		/* Every byte of every block maps into its piece, without
		 * wrapping. */
		for (b = 0; b < nb; b++) {
			uint64_t off, left, at;
			uint32_t key;

			for (off = 0; off < length[b]; off += length[b] / 3 + 4096) {
				at = pckeys_at(&k, b, off, &key, &left);
				assert(left > 0 && left <= (UINT64_C(1) << k.shift));
				assert(off + left <= length[b]);
				assert(at + left > at);
			}
		}
	}
	pckeys_fini(&k);
	for (b = 0; b < nb; b++) {
		bm_free(set[b]);
		bm_free(before[b]);
	}
	return 0;
}
