/* dst_map: the destination's blocks.  The block map is checked against
 * this side's limits and the application's admission before anything is
 * mapped; pin-all pieces are registered one per step after the answer,
 * their keys sent as they come; dynamic registration answers REGISTER_REQ.
 * Everything the source says is checked against the block table before
 * use. */
#ifndef RDMIG_DST_MAP_H
#define RDMIG_DST_MAP_H

#include <stdint.h>

#include "codec.h"

struct rdmig_dest;

/* Appends a block (its index, or a negative errno): its memory is checked
 * here (aligned, in no other block), its name by the caller. */
int dst_map_add(struct rdmig_dest *d, const char *name, void *host, uint64_t length,
		int zeroed);
/* DST_WAIT_MAP: BLOCK_MAP_REQ. */
int dst_map_on_block_map(struct rdmig_dest *d, const Rdmig__BlockMapReq *r);
/* DST_RUNNING: REGISTER_REQ. */
int dst_map_register(struct rdmig_dest *d, const Rdmig__RegisterReq *r);
/* pin-all: registers the next piece and sends keys; 1 while pieces remain. */
int dst_map_pin_step(struct rdmig_dest *d);
/* 0, or the failure of the thread making pages present, as ours. */
int dst_map_populate_check(struct rdmig_dest *d);
void dst_map_destroy(struct rdmig_dest *d);

#endif
