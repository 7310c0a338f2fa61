#include "pace.h"

static double bucket_max(uint64_t rate)
{
	double b = (double)rate / 20.0;

	return b < 65536.0 ? 65536.0 : b;
}

void pace_init(struct pace *p, uint64_t rate)
{
	atomic_store(&p->rate, rate);
	p->last_ms = 0;
	p->tokens = 0;
}

void pace_set(struct pace *p, uint64_t rate)
{
	atomic_store(&p->rate, rate);
}

uint64_t pace_budget(struct pace *p, int64_t now_ms)
{
	uint64_t rate = atomic_load(&p->rate);

	if (!rate) {
		p->last_ms = 0;
		return UINT64_MAX;
	}
	if (!p->last_ms) {
		p->last_ms = now_ms;
		p->tokens = bucket_max(rate);
	}
	if (now_ms > p->last_ms)
		p->tokens += (double)rate * (double)(now_ms - p->last_ms) / 1000.0;
	if (p->tokens > bucket_max(rate))
		p->tokens = bucket_max(rate);
	p->last_ms = now_ms;
	return p->tokens > 0 ? (uint64_t)p->tokens : 0;
}

void pace_spent(struct pace *p, uint64_t bytes)
{
	if (atomic_load(&p->rate))
		p->tokens -= (double)bytes;
}

int pace_wait_ms(const struct pace *p)
{
	uint64_t rate = atomic_load(&p->rate);
	double need;

	if (!rate || !p->last_ms || p->tokens >= PACE_MIN_SEND)
		return 0;
	need = PACE_MIN_SEND - p->tokens;
	/* Deep in debt (a burst of PAGES): look again in a second. */
	return need * 1000.0 / (double)rate >= 1000.0 ? 1000 :
	       (int)(need * 1000.0 / (double)rate) + 1;
}
