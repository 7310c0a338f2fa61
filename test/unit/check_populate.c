/* The helper thread that makes memory present ahead of registration: it
 * populates in order, skips what the consumer already registered, reports
 * a range it cannot populate with where, and stops promptly. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "populate.h"
#include "suite.h"
#include "suites.h"

#define MiB (UINT64_C(1) << 20)

/* Pages of [p, p + len) resident in memory. */
static uint64_t resident(void *p, uint64_t len)
{
	unsigned char vec[4096];
	uint64_t n = 0, i, pages = len / 4096;

	ck_assert_uint_le(pages, sizeof(vec));
	ck_assert_int_eq(mincore(p, len, vec), 0);
	for (i = 0; i < pages; i++)
		n += vec[i] & 1;
	return n;
}

static void wait_done(struct populate *p)
{
	int i;

	for (i = 0; i < 5000 && atomic_load(&p->done) < p->total && !atomic_load(&p->err) &&
		    !atomic_load(&p->unsupported); i++)
		usleep(1000);
}

START_TEST(populates_every_range_in_order)
{
	uint8_t *a = mmap(NULL, 8 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *b = mmap(NULL, 4 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct pop_range r[] = { { a, 8 * MiB }, { b + 4096, 4 * MiB - 8192 } };
	struct populate p = { .n = 0 };
	struct rd_err e;
	unsigned range;
	uint64_t off;

	ck_assert_ptr_ne(a, MAP_FAILED);
	ck_assert_ptr_ne(b, MAP_FAILED);
	ck_assert_uint_eq(resident(a, 8 * MiB), 0);
	ck_assert_int_eq(pop_start(&p, r, 2, -1, &e), 0);
	wait_done(&p);
	if (atomic_load(&p.unsupported)) {
		pop_stop(&p);
		return; /* a kernel before 5.14: nothing to check */
	}
	ck_assert_uint_eq(atomic_load(&p.done), 12 * MiB - 8192);
	ck_assert_int_eq(pop_error(&p, &range, &off), 0);
	pop_stop(&p);
	ck_assert_uint_eq(resident(a, 8 * MiB), 2048);
	/* An unaligned range start is rounded down, not refused. */
	ck_assert_uint_ge(resident(b, 4 * MiB), 1022);
	/* Nothing was written: private memory still reads zero. */
	ck_assert_int_eq(a[0] | a[8 * MiB - 1] | b[4096], 0);
	munmap(a, 8 * MiB);
	munmap(b, 4 * MiB);
}
END_TEST

/* What registration already covered is not populated again. */
START_TEST(skips_below_the_consumer)
{
	uint8_t *a = mmap(NULL, 8 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct pop_range r = { a, 8 * MiB };
	struct populate p;
	struct rd_err e;

	ck_assert_ptr_ne(a, MAP_FAILED);
	memset(&p, 0, sizeof(p));
	/* The floor is set before the thread runs: it starts there. */
	pop_skip(&p, 6 * MiB);
	ck_assert_int_eq(pop_start(&p, &r, 1, -1, &e), 0);
	wait_done(&p);
	pop_stop(&p);
	if (atomic_load(&p.unsupported))
		return;
	ck_assert_uint_eq(resident(a + 6 * MiB, 2 * MiB), 512);
	ck_assert_uint_eq(resident(a, 6 * MiB), 0);
	munmap(a, 8 * MiB);
}
END_TEST

/* A hole in the middle of a range fails with where it is, and the wake fd
 * is written. */
START_TEST(reports_where_it_failed)
{
	uint8_t *a = mmap(NULL, 8 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct pop_range r[] = { { a, 2 * MiB }, { a + 2 * MiB, 6 * MiB } };
	struct populate p = { .n = 0 };
	struct rd_err e;
	unsigned range = 9;
	uint64_t off = 9, v;
	int fds[2], rc;

	ck_assert_ptr_ne(a, MAP_FAILED);
	ck_assert_int_eq(pipe(fds), 0);
	ck_assert_int_eq(munmap(a + 4 * MiB, 2 * MiB), 0);
	ck_assert_int_eq(pop_start(&p, r, 2, fds[1], &e), 0);
	wait_done(&p);
	rc = pop_error(&p, &range, &off);
	pop_stop(&p);
	if (atomic_load(&p.unsupported))
		return;
	ck_assert_int_eq(rc, -ENOMEM);
	ck_assert_uint_eq(range, 1);
	ck_assert_uint_eq(off, 2 * MiB);
	ck_assert_int_eq(read(fds[0], &v, sizeof(v)), (ssize_t)sizeof(v));
	close(fds[0]);
	close(fds[1]);
	munmap(a, 4 * MiB);
	munmap(a + 6 * MiB, 2 * MiB);
}
END_TEST

/* Never-touched memory is not present; faulted in, it is, and its
 * bytes are untouched; an unaligned start counts its whole first page. */
START_TEST(present_after_fault_in)
{
	size_t len = 8 * 4096;
	uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(m, MAP_FAILED);
	/* One page per write, whatever the host's transparent huge pages. */
	madvise(m, len, MADV_NOHUGEPAGE);
	ck_assert(!pop_present(m, len));
	m[4096] = 7;
	ck_assert(pop_present(m + 4096 + 100, 200));
	ck_assert(!pop_present(m + 4096, 4097));
	if (pop_fault_in(m + 100, len - 100) == -EINVAL) {
		/* A kernel older than 5.14: nothing to check. */
		munmap(m, len);
		return;
	}
	ck_assert(pop_present(m, len));
	ck_assert_uint_eq(m[4096], 7);
	ck_assert_uint_eq(m[0], 0);
	munmap(m, len);
}
END_TEST

void populate_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 0);

	tcase_add_test(tc, populates_every_range_in_order);
	tcase_add_test(tc, skips_below_the_consumer);
	tcase_add_test(tc, reports_where_it_failed);
	tcase_add_test(tc, present_after_fault_in);
}
