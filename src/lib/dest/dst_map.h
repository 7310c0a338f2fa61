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
struct regq_job;

/* Appends a block (its index, or a negative errno): its memory is checked
 * here (aligned, in no other block), its name by the caller. */
int dst_map_add(struct rdmig_dest *d, const char *name, void *host, uint64_t length,
		int zeroed);
/* DST_WAIT_MAP: BLOCK_MAP_REQ. */
int dst_map_on_block_map(struct rdmig_dest *d, const Rdmig__BlockMapReq *r);
/* DST_RUNNING: REGISTER_REQ, checked and made the job in hand (d->job):
 * its message must live until dst_map_register_step() is done with it. */
int dst_map_register(struct rdmig_dest *d, const Rdmig__RegisterReq *r);
/* Submits the job's chunks to the helper as far as it takes them, and
 * answers once all are registered: DST_JOB_DONE, DST_JOB_WAITING (for the
 * helper), or a negative errno. */
int dst_map_register_step(struct rdmig_dest *d);
/* The helper registered a chunk of the job in hand. */
int dst_map_chunk_done(struct rdmig_dest *d, const struct regq_job *j);
/* pin-all: submits the next pieces to the helper and sends the keys that
 * came back; the helper's results arrive in dst_map_piece_done(). */
int dst_map_pin_step(struct rdmig_dest *d);
int dst_map_piece_done(struct rdmig_dest *d, const struct regq_job *j);
/* 0, or the failure of the thread making pages present, as ours. */
int dst_map_populate_check(struct rdmig_dest *d);
void dst_map_destroy(struct rdmig_dest *d);

#endif
