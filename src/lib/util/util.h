/* Small helpers shared by every librdmig module: error buffers, deadlines,
 * overflow-checked arithmetic, container_of. */
#ifndef RDMIG_UTIL_H
#define RDMIG_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define RD_ERRLEN 512

#define rd_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#define RD_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* A place to record what went wrong, readable by the caller. */
struct rd_err {
	char msg[RD_ERRLEN];
};

/* Records a message and returns @err (a negative errno) so callers can write
 * `return rd_err_set(e, -EINVAL, "...")`. */
int rd_err_set(struct rd_err *e, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Prefixes the existing message with context, keeping the root cause. */
int rd_err_prefix(struct rd_err *e, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Monotonic clock in milliseconds. */
int64_t rd_now_ms(void);
/* The same in microseconds: the clock a bounded step runs on. */
int64_t rd_now_us(void);

/* Absolute deadline @ms from now; a negative @ms means "no deadline". */
int64_t rd_deadline(int64_t ms);
/* Milliseconds left until @deadline, clamped to [0, INT32_MAX]; -1 when the
 * deadline is "none", ready to pass to poll(). */
int rd_remaining_ms(int64_t deadline);
bool rd_expired(int64_t deadline);

/* The calling thread is a helper (registering, populating): it yields the
 * CPU to the thread that drives the migration, whose steps are bounded in
 * wall-clock time, by running 10 nice levels lower.  Best effort. */
void rd_thread_background(void);

#define RD_NO_DEADLINE INT64_MAX

/* Where a step's time went, phase by phase, for a log line when it ran
 * long: an embedder whose loop stalls must tell our work from its own. */
#define RD_LAPS_MAX 8
struct rd_laps {
	int64_t start, last;
	unsigned n;
	const char *name[RD_LAPS_MAX];
	int64_t us[RD_LAPS_MAX];
};

void rd_laps_start(struct rd_laps *l);
/* Ends the phase @name (a string literal) now. */
void rd_laps_mark(struct rd_laps *l, const char *name);
/* Microseconds since the start. */
int64_t rd_laps_total(const struct rd_laps *l);
/* "name 123 us, name 4 us, ..." into @buf. */
void rd_laps_format(const struct rd_laps *l, char *buf, size_t len);

static inline bool rd_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_add_overflow(a, b, r);
}

static inline bool rd_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_mul_overflow(a, b, r);
}

static inline bool rd_is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

#endif
