/* pack: short runs of data pages gathered into one PAGES message, for the
 * source's dynamic mode.  A run of a page or two in a chunk nobody has
 * registered would otherwise cost a registration of the whole chunk on
 * both sides (the destination allocating and clearing all of it) and one
 * small RDMA WRITE; carried in a control message it costs a copy on each
 * side.  No verbs here: the caller sends what pack_msg() describes. */
#ifndef RDMIG_PACK_H
#define RDMIG_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdmig.pb-c.h"
#include "util.h"

/* Runs longer than this go as RDMA WRITEs. */
#define PACK_RUN_MAX (16u << 10)

struct pack {
	uint32_t *block;
	uint64_t *offset, *length;
	size_t n, runs_max;
	uint8_t *data;
	size_t len, data_max;
};

/* Scratch for messages of the peer's @msg_max bytes, allocated once. */
int pack_init(struct pack *p, uint32_t msg_max, struct rd_err *err);
void pack_fini(struct pack *p);

/* A run of @len bytes fits in the message being gathered. */
bool pack_fits(const struct pack *p, uint64_t len);
/* Copies the run (the caller checked pack_fits). */
void pack_add(struct pack *p, uint32_t block, uint64_t offset, const uint8_t *src,
	      uint64_t len);
/* Fills @m to send what was gathered (pointing into the scratch). */
void pack_msg(const struct pack *p, Rdmig__Pages *m);
/* After the message went: start the next one. */
void pack_reset(struct pack *p);

#endif
