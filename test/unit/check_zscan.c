/* The zero-check helpers: every answer they give matches what the page
 * holds, they answer for pages ahead of a sweep that gives them time, a new
 * iteration never sees the last one's answers, and stopping is clean
 * whatever the helpers are doing. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "suite.h"
#include "suites.h"
#include "zero.h"
#include "zscan.h"

#define PG 4096u
#define NPAGES (3 * ZS_WINDOW_PAGES + 100) /* a partial window at the end */

static uint64_t seed = 1;

static uint64_t rnd(void)
{
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return seed;
}

struct img {
	uint8_t *mem;
	uint64_t *sending;
	struct zs_block zb[2];
};

/* Two blocks: about half the pages zero, a random third dirty; the second
 * block's last page is partial. */
static void make(struct img *m)
{
	uint64_t i, len = (uint64_t)NPAGES * PG;

	m->mem = aligned_alloc(PG, 2 * len);
	m->sending = calloc(2 * (NPAGES / 64 + 1), sizeof(uint64_t));
	ck_assert_ptr_nonnull(m->mem);
	ck_assert_ptr_nonnull(m->sending);
	memset(m->mem, 0, 2 * len);
	for (i = 0; i < 2 * (uint64_t)NPAGES; i++) {
		if (rnd() % 2)
			m->mem[i * PG + rnd() % PG] = 1;
		if (rnd() % 3 == 0)
			m->sending[(i / NPAGES) * (NPAGES / 64 + 1) + (i % NPAGES) / 64] |=
				1ull << (i % NPAGES % 64);
	}
	for (i = 0; i < 2; i++)
		m->zb[i] = (struct zs_block){ .host = m->mem + i * len,
			.length = i ? len - 1000 : len, .npages = NPAGES, .page_size = PG,
			.sending = m->sending + i * (NPAGES / 64 + 1) };
}

static void unmake(struct img *m)
{
	free(m->mem);
	free(m->sending);
}

static int truth(const struct img *m, unsigned b, uint64_t page)
{
	uint64_t off = page * PG, len = PG;

	if (off + len > m->zb[b].length)
		len = m->zb[b].length - off;
	return zero_is_zero(m->zb[b].host + off, len);
}

static int dirty(const struct img *m, unsigned b, uint64_t page)
{
	return (m->zb[b].sending[page / 64] >> (page % 64)) & 1;
}

/* A sweep that pauses at each window start: the helpers answer, and every
 * answer is right. */
static void sweep(struct zscan *z, const struct img *m, bool pause, uint64_t *answered)
{
	uint64_t p;
	unsigned b;
	int h;

	for (b = 0; b < 2; b++) {
		for (p = 0; p < NPAGES; p++) {
			if (p % 256 == 0) {
				zs_feed(z, b, p);
				if (pause && p % ZS_WINDOW_PAGES == 0)
					usleep(20000);
			}
			if (!dirty(m, b, p))
				continue;
			h = zs_hint(z, b, p);
			if (h < 0)
				continue;
			ck_assert_msg(h == truth(m, b, p), "block %u page %llu: hint %d", b,
				      (unsigned long long)p, h);
			(*answered)++;
		}
	}
}

START_TEST(answers_are_right_and_come)
{
	static struct zscan z;
	struct rd_err err = { "" };
	uint64_t answered = 0, ndirty = 0, p;
	struct img m;
	unsigned b;

	make(&m);
	for (b = 0; b < 2; b++)
		for (p = 0; p < NPAGES; p++)
			ndirty += (uint64_t)dirty(&m, b, p);
	ck_assert_int_eq(zs_start(&z, 2, &err), 0);
	zs_begin(&z, m.zb, 2);
	sweep(&z, &m, true, &answered);
	/* With time given at each window, most dirty pages were answered by a
	 * helper. */
	ck_assert_uint_ge(answered, ndirty / 2);
	printf("zscan: %llu of %llu dirty pages answered by helpers\n",
	       (unsigned long long)answered, (unsigned long long)ndirty);
	zs_stop(&z);
	unmake(&m);
}
END_TEST

/* A new iteration with other pages dirty and other contents: the last
 * iteration's windows (some still queued or being checked) are never read. */
START_TEST(new_iteration_forgets)
{
	static struct zscan z;
	struct rd_err err = { "" };
	uint64_t answered = 0;
	struct img m[2];
	int round;

	/* Two images at the same time, other contents and other dirty pages:
	 * an iteration over one begins while the helpers still hold windows
	 * of the other. */
	make(&m[0]);
	make(&m[1]);
	ck_assert_int_eq(zs_start(&z, 3, &err), 0);
	for (round = 0; round < 20; round++) {
		zs_begin(&z, m[round % 2].zb, 2);
		zs_feed(&z, 0, 0);
		zs_begin(&z, m[(round + 1) % 2].zb, 2);
		sweep(&z, &m[(round + 1) % 2], round % 4 == 0, &answered);
	}
	zs_stop(&z);
	unmake(&m[0]);
	unmake(&m[1]);
}
END_TEST

/* Stopping with windows queued and being checked, and stopping a zscan
 * never started or already stopped. */
START_TEST(stop_anytime)
{
	static struct zscan z, never;
	struct rd_err err = { "" };
	struct img m;

	make(&m);
	zs_stop(&never);
	ck_assert_int_eq(zs_start(&z, 0, &err), -EINVAL);
	ck_assert_int_eq(zs_start(&z, ZS_MAX_THREADS, &err), 0);
	zs_begin(&z, m.zb, 2);
	zs_feed(&z, 0, 0);
	zs_stop(&z);
	zs_stop(&z);
	ck_assert_int_eq(zs_hint(&z, 0, 0), -1);
	unmake(&m);
}
END_TEST

void zscan_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 60);

	tcase_add_test(tc, answers_are_right_and_come);
	tcase_add_test(tc, new_iteration_forgets);
	tcase_add_test(tc, stop_anytime);
}
