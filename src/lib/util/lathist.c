#include "lathist.h"

unsigned lathist_bucket(uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned b;

	if (us < 2)
		return 0;
	b = 63u - (unsigned)__builtin_clzll(us);
	return b < LATHIST_BUCKETS ? b : LATHIST_BUCKETS - 1;
}

void lathist_add(struct lathist *h, uint64_t ns)
{
	h->bucket[lathist_bucket(ns)]++;
	h->n++;
	h->sum_ns += ns;
	if (ns > h->max_ns)
		h->max_ns = ns;
}

uint64_t lathist_mean_ns(const struct lathist *h)
{
	return h->n ? h->sum_ns / h->n : 0;
}

uint64_t lathist_quantile_us(const struct lathist *h, double q)
{
	/* The rank of the quantile, 1-based: ceil(q n). */
	uint64_t rank = (uint64_t)(q * (double)h->n), seen = 0, end, max_us;
	unsigned b;

	if (!h->n)
		return 0;
	if ((double)rank < q * (double)h->n)
		rank++;
	if (!rank)
		rank = 1;
	max_us = (h->max_ns + 999) / 1000;
	for (b = 0; b < LATHIST_BUCKETS; b++) {
		seen += h->bucket[b];
		if (seen >= rank)
			break;
	}
	end = b + 1 < LATHIST_BUCKETS ? UINT64_C(1) << (b + 1) : max_us;
	return end < max_us ? end : max_us;
}
