/* src_mem: the source's blocks: adding them, the dirty marks the caller
 * makes, and registering our own memory for WRITEs (pin-all pieces and
 * dynamic chunks alike). */
#ifndef RDMIG_SRC_MEM_H
#define RDMIG_SRC_MEM_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

struct rdmig_source;
struct regq_job;
struct src_block;

/* The marks' lock, and the calling thread as the one that drives the
 * handle (creating it; connecting it, from then on). */
void src_mem_init(struct rdmig_source *s);
void src_mem_set_driver(struct rdmig_source *s);

/* rdmig_source_add_block() without the state check: its index, or a
 * negative errno. */
int src_mem_add(struct rdmig_source *s, const char *name, void *host, uint64_t length,
		uint32_t page_size);
/* Frees the blocks' bitmaps. */
void src_mem_destroy(struct rdmig_source *s);

/* Marking, from any thread: a failure's text goes into the handle's error
 * only on the driving thread (other threads get the errno alone). */
int src_mem_mark(struct rdmig_source *s, unsigned block, uint64_t offset, uint64_t length);
int src_mem_mark_bitmap(struct rdmig_source *s, unsigned block, const unsigned long *bitmap,
			uint64_t first_page, uint64_t npages);
void src_mem_mark_all(struct rdmig_source *s);
/* The caller's dirty_sync, when it pulls its log that way: what its log
 * holds is marked now.  0, or its failure as the handle's error. */
int src_mem_sync(struct rdmig_source *s);
/* Bytes marked and not yet frozen into a round. */
uint64_t src_mem_dirty_bytes(struct rdmig_source *s);
/* A round begins: what was marked is what it sends; marks from now on go
 * to the next one.  Returns the bytes it froze. */
uint64_t src_mem_freeze(struct rdmig_source *s, int64_t now_ms);

/* Our registrations go to a helper thread (regq.h) on the connection's
 * @pd, from the moment it exists. */
int src_mem_reg_start(struct rdmig_source *s, struct ibv_pd *pd);
/* Submits [off, off + len) of @b for WRITEs from it, and @access besides
 * (post-copy's remote read), @cookie saying what for: 0, -EAGAIN (the
 * queue is full: reap first) or -errno. */
int src_mem_submit(struct rdmig_source *s, const struct src_block *b, uint64_t off,
		   uint64_t len, int access, uint64_t cookie);
/* The failure of a job the helper finished, named by its block. */
int src_mem_reg_failed(struct rdmig_source *s, const struct regq_job *j);

#endif
