/* lathist: a latency histogram with QEMU's buckets.
 *
 * Bucket N counts the latencies in [2^N, 2^(N+1)) microseconds, the first
 * taking everything under 2 us and the last everything from 2^23 us (8.4 s)
 * on: QEMU's postcopy-latency-dist (since 10.1), so figures of both can be
 * laid side by side.  The count, the sum and the largest value come with
 * it, for QEMU's postcopy-latency (the mean) and a tail the buckets only
 * bound.  Pure; the caller locks. */
#ifndef RDMIG_LATHIST_H
#define RDMIG_LATHIST_H

#include <stdint.h>

#define LATHIST_BUCKETS 24 /* rdmig.h's RDMIG_LATENCY_BUCKETS */

struct lathist {
	uint64_t bucket[LATHIST_BUCKETS];
	uint64_t n;
	uint64_t sum_ns;
	uint64_t max_ns;
};

/* The bucket of @ns nanoseconds. */
unsigned lathist_bucket(uint64_t ns);
void lathist_add(struct lathist *h, uint64_t ns);
/* The mean in nanoseconds (0 when empty). */
uint64_t lathist_mean_ns(const struct lathist *h);
/* An upper bound of the @q-quantile (0 < q <= 1) in microseconds: the end
 * of the bucket that holds it, never more than the largest value seen;
 * 0 when empty. */
uint64_t lathist_quantile_us(const struct lathist *h, double q);

#endif
