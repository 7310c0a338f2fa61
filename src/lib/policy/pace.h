/* pace: the source's bandwidth limit, a token bucket.
 *
 * Refilled at the rate, it holds at most 1/20 s of it (and at least 64 KiB),
 * so idle time does not buy a long burst.  What leaves is charged after the
 * fact, so the bucket may go into debt (a PAGES message larger than what
 * was left); the time until it is out again is what the caller sleeps.
 * The rate may be changed from any thread; everything else belongs to the
 * driving thread.  The clock is the caller's (rd_now_ms()), so the bucket
 * is tested without waiting. */
#ifndef RDMIG_PACE_H
#define RDMIG_PACE_H

#include <stdatomic.h>
#include <stdint.h>

/* A send is worth waiting for once this much may go. */
#define PACE_MIN_SEND 4096u

struct pace {
	_Atomic uint64_t rate;  /* bytes per second, 0: no limit */
	int64_t last_ms;        /* last refill; 0: not started (full) */
	double tokens;
};

void pace_init(struct pace *p, uint64_t rate);
/* Any thread: the limit from the next budget on. */
void pace_set(struct pace *p, uint64_t rate);
/* Bytes that may go now (UINT64_MAX: no limit), after refilling to @now. */
uint64_t pace_budget(struct pace *p, int64_t now_ms);
/* Charges @bytes that went. */
void pace_spent(struct pace *p, uint64_t bytes);
/* Milliseconds until PACE_MIN_SEND may go (0: now; at most 1000, so a
 * raised limit is seen within a second). */
int pace_wait_ms(const struct pace *p);

#endif
