#include "blocks.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

uint64_t blk_nchunks(uint64_t length, unsigned chunk_shift)
{
	/* No length + size - 1: that overflows near 2^64. */
	if (chunk_shift >= 64)
		return length != 0;
	return (length >> chunk_shift) + ((length & ((UINT64_C(1) << chunk_shift) - 1)) != 0);
}

uint64_t blk_npages(uint64_t length, uint32_t page_size)
{
	if (!page_size)
		return 0;
	return length / page_size + (length % page_size != 0);
}

static void blk_span(uint64_t length, uint64_t size, uint64_t idx, uint64_t *off,
		     uint64_t *len)
{
	uint64_t left;

	*off = idx * size;
	left = length - *off;
	*len = left < size ? left : size;
}

void blk_chunk_span(uint64_t length, unsigned chunk_shift, uint64_t chunk,
		    uint64_t *off, uint64_t *len)
{
	blk_span(length, UINT64_C(1) << chunk_shift, chunk, off, len);
}

void blk_page_span(uint64_t length, uint32_t page_size, uint64_t page,
		   uint64_t *off, uint64_t *len)
{
	blk_span(length, page_size, page, off, len);
}

int blk_check_range(const char *name, uint64_t blk_len, uint64_t off, uint64_t len,
		    struct rd_err *err)
{
	uint64_t end;

	if (!len)
		return rd_err_set(err, -ERANGE, "empty range at 0x%" PRIx64 " in block \"%s\"",
				  off, name);
	if (rd_add_overflow_u64(off, len, &end) || end > blk_len)
		return rd_err_set(err, -ERANGE,
				  "range 0x%" PRIx64 "+0x%" PRIx64 " outside block \"%s\" of 0x%" PRIx64
				  " bytes", off, len, name, blk_len);
	return 0;
}

int blk_check_chunk(const char *name, uint64_t blk_len, unsigned chunk_shift,
		    uint64_t chunk, struct rd_err *err)
{
	uint64_t n = blk_nchunks(blk_len, chunk_shift);

	if (chunk >= n)
		return rd_err_set(err, -ERANGE,
				  "chunk %" PRIu64 " outside block \"%s\" of 0x%" PRIx64
				  " bytes (%" PRIu64 " chunks)", chunk, name, blk_len, n);
	return 0;
}

int blk_name_valid(const char *name, struct rd_err *err)
{
	size_t len, i;

	if (!name || !*name)
		return rd_err_set(err, -EINVAL, "empty block name");
	len = strnlen(name, BLK_NAME_MAX + 1);
	if (len > BLK_NAME_MAX)
		return rd_err_set(err, -EINVAL, "block name \"%.*s...\" is longer than %d bytes",
				  16, name, BLK_NAME_MAX);
	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)name[i];

		/* The name may come from the peer: show the byte, not the raw
		 * string, which could hold terminal escapes. */
		if (ch < 0x20 || ch > 0x7e)
			return rd_err_set(err, -EINVAL,
					  "block name has byte 0x%02x at position %zu: only printable "
					  "ASCII is allowed", ch, i);
	}
	return 0;
}

int blk_check_mem(const char *name, const void *host, uint64_t length, uint32_t align,
		  struct rd_err *err)
{
	uintptr_t h = (uintptr_t)host;

	if (!host || !length || length > BLK_LENGTH_MAX || h + length < h)
		return rd_err_set(err, -EINVAL, "block \"%s\": bad address %p or length %" PRIu64
				  " (1 byte to 1 PiB)", name, host, length);
	if (h & (align - 1))
		return rd_err_set(err, -EINVAL, "block \"%s\": address %p is not aligned to "
				  "its page size %u", name, host, align);
	return 0;
}

int blk_check_overlap(const char *name, const void *host, uint64_t length,
		      const char *other, const void *ohost, uint64_t olength, struct rd_err *err)
{
	uintptr_t a = (uintptr_t)host, b = (uintptr_t)ohost;

	if (a < b + olength && b < a + length)
		return rd_err_set(err, -EINVAL, "block \"%s\" (%p, %" PRIu64 " bytes) overlaps "
				  "block \"%s\" (%p, %" PRIu64 " bytes)", name, host, length, other,
				  ohost, olength);
	return 0;
}

static bool blk_same_name(const struct blk_desc *a, const struct blk_desc *b)
{
	return !strncmp(a->name, b->name, sizeof(a->name));
}

/* Index of the block named like @d in @tab[0..n), or n. */
static unsigned blk_find(const struct blk_desc *tab, unsigned n, const struct blk_desc *d)
{
	unsigned i;

	for (i = 0; i < n; i++)
		if (blk_same_name(&tab[i], d))
			return i;
	return n;
}

static int blk_check_unique(const struct blk_desc *tab, unsigned n, const char *where,
			    struct rd_err *err)
{
	unsigned i;

	for (i = 1; i < n; i++)
		if (blk_find(tab, i, &tab[i]) < i)
			return rd_err_set(err, -EEXIST, "block \"%.*s\" appears twice %s",
					  BLK_NAME_MAX, tab[i].name, where);
	return 0;
}

int blk_match(const struct blk_desc *announced, unsigned n_ann,
	      const struct blk_desc *local, unsigned n_local, unsigned *map,
	      struct rd_err *err)
{
	bool used[BLK_MAX] = { false };
	unsigned i, j;
	int ret;

	if (n_ann > BLK_MAX || n_local > BLK_MAX)
		return rd_err_set(err, -EINVAL, "%u blocks on the source and %u on the destination: "
				  "at most %d are supported", n_ann, n_local, BLK_MAX);
	ret = blk_check_unique(announced, n_ann, "in the source's block map", err);
	if (!ret)
		ret = blk_check_unique(local, n_local, "on the destination", err);
	if (ret)
		return ret;
	for (i = 0; i < n_ann; i++) {
		const struct blk_desc *a = &announced[i];

		j = blk_find(local, n_local, a);
		if (j == n_local)
			return rd_err_set(err, -ENOENT, "block \"%.*s\" is not configured on the destination",
					  BLK_NAME_MAX, a->name);
		if (a->length != local[j].length)
			return rd_err_set(err, -EINVAL, "block \"%.*s\": the source's length %" PRIu64
					  " differs from the destination's %" PRIu64,
					  BLK_NAME_MAX, a->name, a->length, local[j].length);
		used[j] = true;
		map[i] = j;
	}
	for (j = 0; j < n_local; j++)
		if (!used[j])
			return rd_err_set(err, -ENOENT, "block \"%.*s\" was not sent by the source",
					  BLK_NAME_MAX, local[j].name);
	return 0;
}
