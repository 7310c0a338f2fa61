#include "cost.h"

void cost_init(struct cost *c, double ns_per_byte)
{
	c->ns_per_byte = ns_per_byte;
}

void cost_learn(struct cost *c, uint64_t bytes, int64_t ns)
{
	double v;

	/* Tiny pieces say more about the clock than about the work. */
	if (bytes < 4096 || ns <= 0)
		return;
	v = (double)ns / (double)bytes;
	/* Up at once to what was seen, down slowly: a step that trusted a
	 * cheap estimate overshoots its time; one that distrusts it only
	 * does a little less. */
	if (v > c->ns_per_byte)
		c->ns_per_byte = v;
	else
		c->ns_per_byte = c->ns_per_byte * 0.9 + v * 0.1;
}

uint64_t cost_bytes(const struct cost *c, int64_t us, uint64_t max)
{
	double b;

	if (us <= 0)
		return 0;
	if (c->ns_per_byte <= 0)
		return max;
	b = (double)us * 1000.0 / c->ns_per_byte;
	return b >= (double)max ? max : (uint64_t)b;
}
