/* pcq and lathist: the post-copy thread's faults in order, a READ asked
 * for once per page, latencies counted in QEMU's buckets. */
#include <check.h>
#include <errno.h>

#include "lathist.h"
#include "pcq.h"
#include "suite.h"
#include "suites.h"

static void add(void *arg, uint64_t ns)
{
	lathist_add(arg, ns);
}

START_TEST(oldest_first_once_per_page)
{
	struct pcq q;
	uint64_t key;

	ck_assert_int_eq(pcq_init(&q, 4), 0);
	ck_assert(!pcq_next(&q, &key));
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(0, 7), 100, true), 0);
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(1, 3), 200, true), 0);
	/* A second thread on page 7: it needs no READ of its own once one is
	 * posted, and one already fetching a page needs none at all. */
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(0, 7), 300, true), 0);
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(0, 9), 400, false), 0);
	ck_assert(pcq_full(&q));
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(0, 10), 500, true), -ENOSPC);
	ck_assert(pcq_next(&q, &key));
	ck_assert_uint_eq(key, PCQ_KEY(0, 7));
	pcq_posted(&q, key);
	ck_assert(pcq_next(&q, &key));
	ck_assert_uint_eq(key, PCQ_KEY(1, 3));
	pcq_posted(&q, key);
	ck_assert(!pcq_next(&q, &key));
	pcq_fini(&q);
}
END_TEST

START_TEST(failed_reads_are_asked_again)
{
	struct pcq q;
	uint64_t key;

	ck_assert_int_eq(pcq_init(&q, 8), 0);
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(0, 7), 100, true), 0);
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(0, 9), 200, false), 0); /* the background's */
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(1, 9), 300, true), 0);
	ck_assert(pcq_next(&q, &key));
	pcq_posted(&q, key);
	ck_assert(pcq_next(&q, &key));
	pcq_posted(&q, key);
	ck_assert(!pcq_next(&q, &key));
	/* The link broke under the READs of block 0's pages 5..9: those
	 * faults need a READ again, oldest first; block 1's does not. */
	pcq_repost(&q, PCQ_KEY(0, 5), PCQ_KEY(0, 10));
	ck_assert(pcq_next(&q, &key));
	ck_assert_uint_eq(key, PCQ_KEY(0, 7));
	pcq_posted(&q, key);
	ck_assert(pcq_next(&q, &key));
	ck_assert_uint_eq(key, PCQ_KEY(0, 9));
	pcq_posted(&q, key);
	ck_assert(!pcq_next(&q, &key));
	ck_assert_uint_eq(pcq_len(&q), 3);
	pcq_fini(&q);
}
END_TEST

START_TEST(placed_pages_release_their_faults)
{
	struct lathist h = { { 0 }, 0, 0, 0 };
	struct pcq q;

	ck_assert_int_eq(pcq_init(&q, 8), 0);
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(0, 7), 1000, true), 0);
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(0, 7), 5000, true), 0);
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(0, 8), 1000, true), 0);
	ck_assert_int_eq(pcq_push(&q, PCQ_KEY(1, 7), 1000, true), 0);
	/* A background READ placed pages 5..7 of block 0: the two faults on
	 * page 7 leave, page 8's and block 1's stay. */
	ck_assert_uint_eq(pcq_done(&q, PCQ_KEY(0, 5), PCQ_KEY(0, 8), 9000, add, &h), 2);
	ck_assert_uint_eq(pcq_len(&q), 2);
	ck_assert_uint_eq(h.n, 2);
	ck_assert_uint_eq(h.sum_ns, 8000 + 4000);
	ck_assert_uint_eq(h.max_ns, 8000);
	/* A clock that went back counts 0, not a wrapped value. */
	ck_assert_uint_eq(pcq_done(&q, PCQ_KEY(1, 7), PCQ_KEY(1, 8), 10, add, &h), 1);
	ck_assert_uint_eq(h.max_ns, 8000);
	ck_assert_uint_eq(pcq_done(&q, 0, UINT64_MAX, 2000, NULL, NULL), 1);
	ck_assert_uint_eq(pcq_len(&q), 0);
	pcq_fini(&q);
}
END_TEST

START_TEST(qemu_buckets)
{
	struct lathist h = { { 0 }, 0, 0, 0 };
	unsigned i;

	/* [2^N, 2^(N+1)) us; under 2 us in the first, the rest in the last. */
	ck_assert_uint_eq(lathist_bucket(0), 0);
	ck_assert_uint_eq(lathist_bucket(1999), 0);
	ck_assert_uint_eq(lathist_bucket(2000), 1);
	ck_assert_uint_eq(lathist_bucket(255999), 7);
	ck_assert_uint_eq(lathist_bucket(256000), 8);
	ck_assert_uint_eq(lathist_bucket(511999), 8);
	ck_assert_uint_eq(lathist_bucket(UINT64_MAX), LATHIST_BUCKETS - 1);
	ck_assert_uint_eq(lathist_quantile_us(&h, 0.5), 0);
	ck_assert_uint_eq(lathist_mean_ns(&h), 0);
	/* 98 faults at 300 us, two at 20 ms. */
	for (i = 0; i < 98; i++)
		lathist_add(&h, 300000);
	lathist_add(&h, 20000000);
	lathist_add(&h, 20000000);
	ck_assert_uint_eq(h.bucket[8], 98);
	ck_assert_uint_eq(h.bucket[14], 2);
	ck_assert_uint_eq(lathist_mean_ns(&h), (98 * 300000ull + 40000000) / 100);
	/* The median's bucket ends at 512 us; p98 still there, p99 in the
	 * 16-32 ms bucket, bounded by the largest value. */
	ck_assert_uint_eq(lathist_quantile_us(&h, 0.5), 512);
	ck_assert_uint_eq(lathist_quantile_us(&h, 0.98), 512);
	ck_assert_uint_eq(lathist_quantile_us(&h, 0.99), 20000);
	ck_assert_uint_eq(lathist_quantile_us(&h, 1.0), 20000);
}
END_TEST

void pcq_cases(Suite *s)
{
	TCase *tc = tu_case(s, "faults", 0);

	tcase_add_test(tc, oldest_first_once_per_page);
	tcase_add_test(tc, placed_pages_release_their_faults);
	tcase_add_test(tc, failed_reads_are_asked_again);
	tc = tu_case(s, "lathist", 0);
	tcase_add_test(tc, qemu_buckets);
}
