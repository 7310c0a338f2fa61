/* The registration helper, with stand-in verbs: results in order, the ring
 * full, the read-only fallback, stopping without waiting, and nothing
 * registered is lost. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "regq.h"
#include "suites.h"

static atomic_int live;  /* MRs registered and not deregistered */
static atomic_int slow;  /* microseconds each registration takes */

static int fake_reg(void *pd, void *addr, size_t len, int access, void **mr)
{
	(void)pd;
	(void)len;
	if (atomic_load(&slow))
		usleep((useconds_t)atomic_load(&slow));
	/* Address 1 is "read-only private memory": writable pins fail. */
	if ((uintptr_t)addr == 1 && access)
		return -EFAULT;
	if ((uintptr_t)addr == 2)
		return -ENOMEM;
	*mr = malloc(8);
	atomic_fetch_add(&live, 1);
	return 0;
}

static void fake_dereg(void *mr)
{
	free(mr);
	atomic_fetch_sub(&live, 1);
}

static const struct regq_ops ops = { fake_reg, fake_dereg };

static unsigned reap_all(struct regq *q, struct regq_job *out, unsigned want, int wake)
{
	struct pollfd p = { .fd = wake, .events = POLLIN };
	unsigned n = 0;

	while (n < want) {
		n += regq_reap(q, out + n, want - n);
		if (n < want)
			ck_assert_int_gt(poll(&p, 1, 5000), 0);
	}
	return n;
}

START_TEST(results_in_order)
{
	struct regq q;
	struct regq_job j[8];
	struct rd_err e;
	int wake = eventfd(0, EFD_NONBLOCK);
	unsigned i;

	ck_assert_int_eq(regq_init(&q, &ops, NULL, 4, wake, &e), 0);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(regq_submit(&q, (void *)(uintptr_t)(4096 * (i + 1)), 4096, 1, -1,
					     100 + i, &e), 0);
	/* Four in the ring: a fifth waits for a reap. */
	ck_assert_int_eq(regq_submit(&q, (void *)4096, 4096, 1, -1, 9, &e), -EAGAIN);
	ck_assert_uint_eq(reap_all(&q, j, 4, wake), 4);
	for (i = 0; i < 4; i++) {
		ck_assert_uint_eq(j[i].cookie, 100 + i);
		ck_assert_int_eq(j[i].rc, 0);
		fake_dereg(j[i].mr);
	}
	/* A read-only private page is pinned for reading; a failure is the
	 * job's, with its errno. */
	ck_assert_int_eq(regq_submit(&q, (void *)1, 4096, 1, 0, 1, &e), 0);
	ck_assert_int_eq(regq_submit(&q, (void *)2, 8192, 1, -1, 2, &e), 0);
	ck_assert_uint_eq(reap_all(&q, j, 2, wake), 2);
	ck_assert_int_eq(j[0].rc, 0);
	fake_dereg(j[0].mr);
	ck_assert_int_eq(j[1].rc, -ENOMEM);
	ck_assert_uint_eq(j[1].len, 8192);
	ck_assert_uint_eq(regq_pending(&q), 0);
	regq_fini(&q);
	ck_assert_int_eq(atomic_load(&live), 0);
	close(wake);
}
END_TEST

/* Stopping returns at once while a registration is in progress; finishing
 * waits for it and deregisters what nobody reaped. */
START_TEST(stop_then_fini)
{
	struct regq q;
	struct rd_err e;
	int wake = eventfd(0, EFD_NONBLOCK);
	unsigned i;

	atomic_store(&slow, 50000);
	ck_assert_int_eq(regq_init(&q, &ops, NULL, 8, wake, &e), 0);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(regq_submit(&q, (void *)4096, 4096, 0, -1, i, &e), 0);
	usleep(20000);
	regq_stop(&q);
	ck_assert_int_eq(regq_submit(&q, (void *)4096, 4096, 0, -1, 9, &e), -ECANCELED);
	regq_fini(&q);
	ck_assert_int_eq(atomic_load(&live), 0);
	atomic_store(&slow, 0);
	/* A queue never started, and a zeroed one, finish quietly. */
	ck_assert_int_eq(regq_init(&q, &ops, NULL, 8, -1, &e), 0);
	regq_fini(&q);
	regq_fini(&q);
	close(wake);
}
END_TEST

Suite *regq_suite(void)
{
	Suite *s = suite_create("regq");
	TCase *tc = tcase_create("helper");

	tcase_add_test(tc, results_in_order);
	tcase_add_test(tc, stop_then_fini);
	suite_add_tcase(s, tc);
	return s;
}
