/* cost: what a kind of work that cannot be cut short once started costs per
 * byte, learned as it is done, so a step starts only what fits in the time
 * it has left.
 *
 * The work a step does in pieces (posting WRITEs, hashing, clearing zero
 * ranges, handing state to the application) has no fixed price: on a NIC a
 * 1 MiB WRITE posts in a microsecond, on Soft-RoCE the post itself sends
 * the data (18-45 ms per MiB under emulation).  Each kind keeps an estimate
 * that rises at once when a piece took longer than expected and falls
 * slowly when pieces come in cheaper, so a step overshoots its budget by
 * little more than one misjudged piece.  No clock here: the caller measures
 * and says. */
#ifndef RDMIG_COST_H
#define RDMIG_COST_H

#include <stdint.h>

struct cost {
	double ns_per_byte;
};

/* @ns_per_byte: the first guess, before anything was measured. */
void cost_init(struct cost *c, double ns_per_byte);
/* @bytes took @ns. */
void cost_learn(struct cost *c, uint64_t bytes, int64_t ns);
/* Bytes that take about @us at the estimate (0 when @us <= 0), at most
 * @max. */
uint64_t cost_bytes(const struct cost *c, int64_t us, uint64_t max);

#endif
