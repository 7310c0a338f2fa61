#include "pcset.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"

/* ---- the source ------------------------------------------------------------ */

size_t pcset_cut(const uint64_t *const *bm, const uint64_t *npages, unsigned nblocks,
		 struct pcset_cursor *c, uint32_t *block, uint64_t *first, uint64_t *count,
		 size_t max, uint64_t *pages)
{
	size_t n = 0;
	uint64_t start, end;

	while (n < max && c->block < nblocks) {
		start = bm_next_set(bm[c->block], npages[c->block], c->page);
		if (start == npages[c->block]) {
			c->block++;
			c->page = 0;
			continue;
		}
		end = bm_next_clear(bm[c->block], npages[c->block], start);
		block[n] = c->block;
		first[n] = start;
		count[n] = end - start;
		*pages += end - start;
		n++;
		c->page = end;
	}
	return n;
}

/* ---- the destination --------------------------------------------------------- */

void pcset_rx_init(struct pcset_rx *rx, unsigned nblocks, const uint64_t *npages,
		   uint64_t **set)
{
	*rx = (struct pcset_rx){ .nblocks = nblocks, .npages = npages, .set = set };
}

int pcset_take(struct pcset_rx *rx, const uint32_t *block, const uint64_t *first,
	       const uint64_t *count, size_t n, struct rd_err *err)
{
	unsigned eb = rx->end_block;
	uint64_t ep = rx->end_page, end;
	bool any = rx->any;
	size_t i;

	for (i = 0; i < n; i++) {
		if (block[i] >= rx->nblocks)
			return rd_err_set(err, -EPROTO, "POSTCOPY_RANGES: range %zu is in block "
					  "index %u of %u", i, block[i], rx->nblocks);
		if (!count[i] || rd_add_overflow_u64(first[i], count[i], &end) ||
		    end > rx->npages[block[i]])
			return rd_err_set(err, -EPROTO, "POSTCOPY_RANGES: range %zu, pages %"
					  PRIu64 "+%" PRIu64 " of block %u, is empty or outside "
					  "its %" PRIu64 " pages", i, first[i], count[i], block[i],
					  rx->npages[block[i]]);
		if (any && (block[i] < eb || (block[i] == eb && first[i] < ep)))
			return rd_err_set(err, -EPROTO, "POSTCOPY_RANGES: range %zu (block %u, "
					  "page %" PRIu64 ") is not after the one before (block "
					  "%u, up to page %" PRIu64 ")", i, block[i], first[i], eb,
					  ep);
		eb = block[i];
		ep = end;
		any = true;
	}
	for (i = 0; i < n; i++) {
		bm_set_range(rx->set[block[i]], first[i], count[i]);
		rx->pages += count[i];
	}
	rx->end_block = eb;
	rx->end_page = ep;
	rx->any = any;
	return 0;
}

/* ---- the keys ------------------------------------------------------------------ */

void pckeys_init(struct pckeys *k, unsigned nblocks, const uint64_t *length)
{
	*k = (struct pckeys){ .nblocks = nblocks, .length = length };
}

static uint64_t pieces_of(uint64_t length, unsigned shift)
{
	return (length >> shift) + !!(length & ((UINT64_C(1) << shift) - 1));
}

static uint64_t piece_len(const struct pckeys *k, unsigned b, uint64_t p)
{
	uint64_t off = p << k->shift, size = UINT64_C(1) << k->shift;

	return k->length[b] - off < size ? k->length[b] - off : size;
}

/* The first message: the piece size, and the arrays it implies. */
static int size_pieces(struct pckeys *k, unsigned shift, struct rd_err *err)
{
	unsigned b;

	if (shift < PCKEYS_SHIFT_MIN || shift > PCKEYS_SHIFT_MAX)
		return rd_err_set(err, -EPROTO, "POSTCOPY_KEYS: piece_shift %u outside %u..%u",
				  shift, PCKEYS_SHIFT_MIN, PCKEYS_SHIFT_MAX);
	k->first_piece = calloc(k->nblocks ? k->nblocks : 1, sizeof(*k->first_piece));
	if (!k->first_piece)
		return rd_err_set(err, -ENOMEM, "out of memory");
	for (b = 0; b < k->nblocks; b++) {
		k->first_piece[b] = k->npieces;
		/* Blocks are at most 2^50 bytes and 1024: no overflow. */
		k->npieces += pieces_of(k->length[b], shift);
	}
	k->addr = calloc(k->npieces ? k->npieces : 1, sizeof(*k->addr));
	k->rkey = calloc(k->npieces ? k->npieces : 1, sizeof(*k->rkey));
	k->seen = bm_alloc(k->npieces);
	if (!k->addr || !k->rkey || !k->seen)
		return rd_err_set(err, -ENOMEM, "out of memory for %" PRIu64 " keys",
				  k->npieces);
	k->shift = shift;
	return 0;
}

static int check_key(const struct pckeys *k, uint32_t block, uint64_t piece, uint64_t addr,
		     size_t i, struct rd_err *err)
{
	uint64_t end;

	if (block >= k->nblocks)
		return rd_err_set(err, -EPROTO, "POSTCOPY_KEYS: key %zu is for block index %u "
				  "of %u", i, block, k->nblocks);
	if (piece >= pieces_of(k->length[block], k->shift))
		return rd_err_set(err, -EPROTO, "POSTCOPY_KEYS: key %zu is for piece %" PRIu64
				  " of block %u, which has %" PRIu64, i, piece, block,
				  pieces_of(k->length[block], k->shift));
	if (bm_test(k->seen, k->first_piece[block] + piece))
		return rd_err_set(err, -EPROTO, "POSTCOPY_KEYS: piece %" PRIu64 " of block %u "
				  "has a key already", piece, block);
	if (!addr || rd_add_overflow_u64(addr, piece_len(k, block, piece), &end))
		return rd_err_set(err, -EPROTO, "POSTCOPY_KEYS: key %zu: address 0x%" PRIx64
				  " cannot hold its piece", i, addr);
	return 0;
}

int pckeys_take(struct pckeys *k, unsigned shift, const uint32_t *block, const uint64_t *piece,
		const uint64_t *addr, const uint32_t *rkey, size_t n, struct rd_err *err)
{
	uint64_t idx;
	size_t i, j;
	int rc;

	if (!k->shift) {
		rc = size_pieces(k, shift, err);
		if (rc) {
			pckeys_fini(k);
			pckeys_init(k, k->nblocks, k->length);
			return rc;
		}
	} else if (shift != k->shift) {
		return rd_err_set(err, -EPROTO, "POSTCOPY_KEYS: piece_shift %u after %u", shift,
				  k->shift);
	}
	/* Checked in order, each piece marked seen as it passes, so a piece
	 * twice in one message is caught like one from an earlier message;
	 * a failure unmarks what this message marked. */
	for (i = 0; i < n; i++) {
		rc = check_key(k, block[i], piece[i], addr[i], i, err);
		if (rc) {
			for (j = 0; j < i; j++)
				bm_clear(k->seen, k->first_piece[block[j]] + piece[j]);
			return rc;
		}
		bm_set(k->seen, k->first_piece[block[i]] + piece[i]);
	}
	for (i = 0; i < n; i++) {
		idx = k->first_piece[block[i]] + piece[i];
		k->addr[idx] = addr[i];
		k->rkey[idx] = rkey[i];
		k->got++;
	}
	return 0;
}

bool pckeys_complete(const struct pckeys *k)
{
	return k->shift && k->got == k->npieces;
}

uint64_t pckeys_at(const struct pckeys *k, unsigned b, uint64_t off, uint32_t *rkey,
		   uint64_t *left)
{
	uint64_t p = off >> k->shift, idx = k->first_piece[b] + p;

	*rkey = k->rkey[idx];
	*left = piece_len(k, b, p) - (off - (p << k->shift));
	return k->addr[idx] + (off - (p << k->shift));
}

void pckeys_fini(struct pckeys *k)
{
	free(k->first_piece);
	free(k->addr);
	free(k->rkey);
	bm_free(k->seen);
	k->first_piece = NULL;
	k->addr = NULL;
	k->rkey = NULL;
	k->seen = NULL;
}
