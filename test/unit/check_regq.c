/* The registration helpers, with stand-in verbs: results in order (even
 * when later jobs finish first), the ring full, the read-only fallback,
 * several helpers registering at once, stopping without waiting, and
 * nothing registered is lost or registered twice. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "regq.h"
#include "suite.h"
#include "suites.h"

static atomic_int live;  /* MRs registered and not deregistered */
static atomic_int slow;  /* microseconds each registration takes */
static atomic_int busy, busy_max;  /* registrations in progress, and the most */

static int fake_reg(void *pd, void *addr, size_t len, int access, void **mr)
{
	int b = atomic_fetch_add(&busy, 1) + 1, m = atomic_load(&busy_max);

	(void)pd;
	(void)len;
	while (b > m && !atomic_compare_exchange_weak(&busy_max, &m, b))
		;
	if (atomic_load(&slow))
		usleep((useconds_t)atomic_load(&slow));
	/* Address 3 is "memory that takes long to pin". */
	if ((uintptr_t)addr == 3)
		usleep(100000);
	atomic_fetch_sub(&busy, 1);
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

static atomic_int faulted;  /* fault-in jobs done */

/* Address 5 is "memory with no room left behind it". */
static int fake_fault_in(void *addr, size_t len)
{
	(void)len;
	atomic_fetch_add(&faulted, 1);
	return (uintptr_t)addr == 5 ? -EFAULT : 0;
}

static const struct regq_ops ops = { fake_reg, fake_dereg, fake_fault_in };
static const struct regq_ops ops_no_fault = { fake_reg, fake_dereg, NULL };

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

/* Once with one helper, once with four. */
START_TEST(results_in_order)
{
	struct regq q;
	struct regq_job j[8];
	struct rd_err e;
	int wake = eventfd(0, EFD_NONBLOCK);
	unsigned i;

	ck_assert_int_eq(regq_init(&q, &ops, NULL, 4, _i ? 4 : 1, wake, &e), 0);
	ck_assert_uint_eq(regq_threads(&q), _i ? 4 : 1);
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
	ck_assert_int_eq(regq_init(&q, &ops, NULL, 8, _i ? 4 : 1, wake, &e), 0);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(regq_submit(&q, (void *)4096, 4096, 0, -1, i, &e), 0);
	usleep(20000);
	regq_stop(&q);
	ck_assert_int_eq(regq_submit(&q, (void *)4096, 4096, 0, -1, 9, &e), -ECANCELED);
	regq_fini(&q);
	ck_assert_int_eq(atomic_load(&live), 0);
	atomic_store(&slow, 0);
	/* A queue never started, and a zeroed one, finish quietly. */
	ck_assert_int_eq(regq_init(&q, &ops, NULL, 8, 0, -1, &e), 0);
	ck_assert_uint_ge(regq_threads(&q), 1);
	ck_assert_uint_le(regq_threads(&q), REGQ_MAX_THREADS);
	regq_fini(&q);
	regq_fini(&q);
	ck_assert_int_eq(regq_init(&q, &ops, NULL, 8, REGQ_MAX_THREADS + 1, -1, &e), -EINVAL);
	regq_fini(&q);
	close(wake);
}
END_TEST

/* Four helpers register four jobs at once (pin-all over the cores); a job
 * that finished behind a slow one waits for it, so results stay in
 * order. */
START_TEST(helpers_at_once)
{
	struct regq q;
	struct regq_job j[8];
	struct rd_err e;
	int wake = eventfd(0, EFD_NONBLOCK);
	unsigned i;

	atomic_store(&busy_max, 0);
	atomic_store(&slow, 30000);
	ck_assert_int_eq(regq_init(&q, &ops, NULL, 8, 4, wake, &e), 0);
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(regq_submit(&q, (void *)4096, 4096, 0, -1, i, &e), 0);
	ck_assert_uint_eq(reap_all(&q, j, 8, wake), 8);
	for (i = 0; i < 8; i++) {
		ck_assert_uint_eq(j[i].cookie, i);
		fake_dereg(j[i].mr);
	}
	ck_assert_int_ge(atomic_load(&busy_max), 2);
	ck_assert_int_le(atomic_load(&busy_max), 4);
	atomic_store(&slow, 0);
	/* The first job takes 100 ms, the three after it none. */
	ck_assert_int_eq(regq_submit(&q, (void *)3, 4096, 0, -1, 10, &e), 0);
	for (i = 1; i < 4; i++)
		ck_assert_int_eq(regq_submit(&q, (void *)4096, 4096, 0, -1, 10 + i, &e), 0);
	while (atomic_load(&live) < 3)
		usleep(1000);
	ck_assert_uint_eq(regq_reap(&q, j, 8), 0);
	ck_assert_uint_eq(reap_all(&q, j, 4, wake), 4);
	for (i = 0; i < 4; i++) {
		ck_assert_uint_eq(j[i].cookie, 10 + i);
		fake_dereg(j[i].mr);
	}
	regq_fini(&q);
	ck_assert_int_eq(atomic_load(&live), 0);
	close(wake);
}
END_TEST

/* Thousands of jobs through a small ring on REGQ_MAX_THREADS helpers, the
 * driving thread reaping as it goes and stopping at a different point
 * each time: each job is reaped once, in order, and what was registered
 * and not reaped is deregistered by fini. */
START_TEST(many_jobs_stop_anytime)
{
	uint64_t n = 5000, stop_at = 300 + (uint64_t)_i * 1500, sub = 0, got = 0;
	struct pollfd p;
	struct regq q;
	struct regq_job j[16];
	struct rd_err e;
	int wake = eventfd(0, EFD_NONBLOCK), rc;
	unsigned k, r;

	p = (struct pollfd){ .fd = wake, .events = POLLIN };
	ck_assert_int_eq(regq_init(&q, &ops, NULL, 16, REGQ_MAX_THREADS, wake, &e), 0);
	while (got < stop_at) {
		while (sub < n) {
			/* One job fails with its errno; the others go on. */
			rc = regq_submit(&q, (void *)(uintptr_t)(sub == 1234 ? 2 : 4096), 4096, 0, -1,
					 sub, &e);
			if (rc == -EAGAIN)
				break;
			ck_assert_int_eq(rc, 0);
			sub++;
		}
		r = regq_reap(&q, j, RD_ARRAY_SIZE(j));
		for (k = 0; k < r; k++, got++) {
			ck_assert_uint_eq(j[k].cookie, got);
			ck_assert_int_eq(j[k].rc, got == 1234 ? -ENOMEM : 0);
			if (!j[k].rc)
				fake_dereg(j[k].mr);
		}
		if (!r) {
			uint64_t v;

			ck_assert_int_gt(poll(&p, 1, 5000), 0);
			ck_assert_int_eq(read(wake, &v, sizeof(v)), sizeof(v));
		}
	}
	regq_stop(&q);
	regq_fini(&q);
	ck_assert_int_eq(atomic_load(&live), 0);
	close(wake);
}
END_TEST

/* A fault-in job registers nothing: its result is the fault-in's, in
 * order with the registrations around it; without the op, -ENOSYS; its
 * -EFAULT is not retried as a read-only registration. */
START_TEST(fault_in_registers_nothing)
{
	struct regq q;
	struct regq_job j[4];
	struct rd_err e;
	int wake = eventfd(0, EFD_NONBLOCK);

	atomic_store(&faulted, 0);
	ck_assert_int_eq(regq_init(&q, &ops, NULL, 4, 2, wake, &e), 0);
	ck_assert_int_eq(regq_submit(&q, (void *)4096, 4096, REGQ_FAULT_IN, -1, 1, &e), 0);
	ck_assert_int_eq(regq_submit(&q, (void *)8192, 4096, 1, -1, 2, &e), 0);
	ck_assert_int_eq(regq_submit(&q, (void *)5, 4096, REGQ_FAULT_IN, -1, 3, &e), 0);
	ck_assert_uint_eq(reap_all(&q, j, 3, wake), 3);
	ck_assert_uint_eq(j[0].cookie, 1);
	ck_assert_int_eq(j[0].rc, 0);
	ck_assert_ptr_null(j[0].mr);
	ck_assert_uint_eq(j[1].cookie, 2);
	ck_assert_ptr_nonnull(j[1].mr);
	fake_dereg(j[1].mr);
	ck_assert_int_eq(j[2].rc, -EFAULT);
	ck_assert_ptr_null(j[2].mr);
	ck_assert_int_eq(atomic_load(&faulted), 2);
	regq_fini(&q);
	ck_assert_int_eq(atomic_load(&live), 0);

	ck_assert_int_eq(regq_init(&q, &ops_no_fault, NULL, 4, 1, wake, &e), 0);
	ck_assert_int_eq(regq_submit(&q, (void *)4096, 4096, REGQ_FAULT_IN, -1, 7, &e), 0);
	ck_assert_uint_eq(reap_all(&q, j, 1, wake), 1);
	ck_assert_int_eq(j[0].rc, -ENOSYS);
	regq_fini(&q);
	close(wake);
}
END_TEST

void regq_cases(Suite *s)
{
	TCase *tc = tu_case(s, "helper", 60);

	tcase_add_loop_test(tc, results_in_order, 0, 2);
	tcase_add_loop_test(tc, stop_then_fini, 0, 2);
	tcase_add_test(tc, helpers_at_once);
	tcase_add_loop_test(tc, many_jobs_stop_anytime, 0, 4);
	tcase_add_test(tc, fault_in_registers_nothing);
}
