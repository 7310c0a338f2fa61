#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int rd_err_set(struct rd_err *e, int err, const char *fmt, ...)
{
	va_list ap;

	if (e) {
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
	}
	return err;
}

int rd_err_prefix(struct rd_err *e, int err, const char *fmt, ...)
{
	char prefix[RD_ERRLEN], old[RD_ERRLEN];
	va_list ap;

	if (!e)
		return err;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof(old));
	/* Truncation is acceptable: the message is for humans. */
	if (snprintf(e->msg, sizeof(e->msg), "%.*s: %s", RD_ERRLEN / 2, prefix, old) < 0)
		e->msg[0] = '\0';
	return err;
}

int64_t rd_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t rd_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void rd_laps_start(struct rd_laps *l)
{
	l->start = l->last = rd_now_us();
	l->n = 0;
}

void rd_laps_mark(struct rd_laps *l, const char *name)
{
	int64_t now = rd_now_us();

	if (l->n < RD_LAPS_MAX) {
		l->name[l->n] = name;
		l->us[l->n++] = now - l->last;
	}
	l->last = now;
}

int64_t rd_laps_total(const struct rd_laps *l)
{
	return l->last - l->start;
}

void rd_laps_format(const struct rd_laps *l, char *buf, size_t len)
{
	size_t at = 0;
	unsigned i;
	int n;

	buf[0] = '\0';
	for (i = 0; i < l->n && at < len; i++) {
		n = snprintf(buf + at, len - at, "%s%s %lld us", i ? ", " : "", l->name[i],
			     (long long)l->us[i]);
		if (n < 0)
			break;
		at += (size_t)n;
	}
}

int64_t rd_deadline(int64_t ms)
{
	if (ms < 0)
		return RD_NO_DEADLINE;
	return rd_now_ms() + ms;
}

int rd_remaining_ms(int64_t deadline)
{
	int64_t left;

	if (deadline == RD_NO_DEADLINE)
		return -1;
	left = deadline - rd_now_ms();
	if (left < 0)
		return 0;
	return left > INT_MAX ? INT_MAX : (int)left;
}

bool rd_expired(int64_t deadline)
{
	return deadline != RD_NO_DEADLINE && rd_now_ms() >= deadline;
}

void rd_thread_background(void)
{
	/* On Linux the nice value is the thread's own: the driving thread
	 * keeps its priority.  Raising it is always allowed. */
	id_t tid = (id_t)syscall(SYS_gettid);
	int cur;

	errno = 0;
	cur = getpriority(PRIO_PROCESS, tid);
	if (cur == -1 && errno)
		return;
	if (setpriority(PRIO_PROCESS, tid, cur + 10 > 19 ? 19 : cur + 10)) {
		/* Best effort: the helper still works at the same priority. */
	}
}
