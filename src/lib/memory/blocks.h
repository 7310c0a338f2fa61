/* RAM-block table helpers: chunk and page arithmetic, validation of
 * peer-supplied ranges, and matching the source's block map against the
 * destination's blocks.  No verbs here. */
#ifndef RDMIG_BLOCKS_H
#define RDMIG_BLOCKS_H

#include <stdint.h>

#include "util.h"

#define BLK_NAME_MAX 255 /* bytes, without the NUL */
#define BLK_MAX 1024    /* blocks per migration */
#define BLK_LENGTH_MAX (1ull << 50)

struct blk_desc {
	char name[BLK_NAME_MAX + 1]; /* NUL-terminated */
	uint64_t length;             /* bytes */
	uint32_t page_size;          /* power of two */
};

/* Chunks (pages) covering @length bytes, a last partial one included. */
uint64_t blk_nchunks(uint64_t length, unsigned chunk_shift);
uint64_t blk_npages(uint64_t length, uint32_t page_size);

/* Offset and length of chunk @chunk (page @page) of a block of @length
 * bytes; the last one is shorter when @length is not a multiple of the
 * chunk (page) size.  The caller guarantees chunk < blk_nchunks() (page <
 * blk_npages()); @page_size is a power of two. */
void blk_chunk_span(uint64_t length, unsigned chunk_shift, uint64_t chunk,
		    uint64_t *off, uint64_t *len);
void blk_page_span(uint64_t length, uint32_t page_size, uint64_t page,
		   uint64_t *off, uint64_t *len);

/* Validates a peer-supplied range [off, off + len) of block @name of
 * @blk_len bytes: non-empty, no overflow, inside the block.  0 or -ERANGE. */
int blk_check_range(const char *name, uint64_t blk_len, uint64_t off, uint64_t len,
		    struct rd_err *err);
/* Validates a peer-supplied chunk index.  0 or -ERANGE. */
int blk_check_chunk(const char *name, uint64_t blk_len, unsigned chunk_shift,
		    uint64_t chunk, struct rd_err *err);

/* Block-name rules shared with the wire protocol: 1..255 bytes of
 * printable ASCII (0x20..0x7e), as QEMU's RAMBlock idstrs are ("pc.ram",
 * "/rom@etc/acpi/tables").  Commands map them to safe file names
 * themselves.  0 or -EINVAL. */
int blk_name_valid(const char *name, struct rd_err *err);

/* The memory a caller gives for a block: a non-null @host aligned to
 * @align (a power of two), 1 byte to BLK_LENGTH_MAX long, not wrapping.
 * The length need not be a multiple of a page: the last page is partial.
 * 0 or -EINVAL naming the block. */
int blk_check_mem(const char *name, const void *host, uint64_t length, uint32_t align,
		  struct rd_err *err);
/* 0, or -EINVAL when [host, host + length) and the other block's memory
 * share a byte. */
int blk_check_overlap(const char *name, const void *host, uint64_t length,
		      const char *other, const void *ohost, uint64_t olength, struct rd_err *err);

/* Matches the blocks the source announced against the local ones by name:
 * map[i] = local index of announced[i].  Both sides must hold the same set
 * of names with the same lengths; page sizes may differ.  Fails with
 * -EINVAL (too many blocks, a length mismatch), -EEXIST (a name twice on
 * one side) or -ENOENT (a name on one side only), naming the block; @map is
 * then partly written. */
int blk_match(const struct blk_desc *announced, unsigned n_ann,
	      const struct blk_desc *local, unsigned n_local, unsigned *map,
	      struct rd_err *err);

#endif
