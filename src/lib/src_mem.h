/* src_mem: the source's blocks: adding them, the dirty marks the caller
 * makes, and registering our own memory for WRITEs (pin-all pieces and
 * dynamic chunks alike). */
#ifndef RDMIG_SRC_MEM_H
#define RDMIG_SRC_MEM_H

#include <stdint.h>

#include <infiniband/verbs.h>

struct rdmig_source;
struct src_block;

/* rdmig_source_add_block() without the state check: its index, or a
 * negative errno. */
int src_mem_add(struct rdmig_source *s, const char *name, void *host, uint64_t length,
		uint32_t page_size);
/* Frees the blocks' bitmaps. */
void src_mem_destroy(struct rdmig_source *s);

int src_mem_mark(struct rdmig_source *s, unsigned block, uint64_t offset, uint64_t length);
int src_mem_mark_bitmap(struct rdmig_source *s, unsigned block, const unsigned long *bitmap,
			uint64_t first_page, uint64_t npages);
void src_mem_mark_all(struct rdmig_source *s);
/* A round begins: what was marked is what it sends; marks from now on go
 * to the next one.  Returns the bytes it froze. */
uint64_t src_mem_freeze(struct rdmig_source *s, int64_t now_ms);

/* Registers [off, off + len) of @b for WRITEs from it. */
int src_mem_reg(struct rdmig_source *s, const struct src_block *b, uint64_t off,
		uint64_t len, struct ibv_mr **mr);

#endif
