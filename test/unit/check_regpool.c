/* The registration helpers without a device: a fake registration hands out
 * a distinct token per piece.  Every piece is registered once and taken in
 * order; a failure is reported at its piece, after every piece before it;
 * stopping at any point joins the helpers and releases exactly the
 * registrations nobody took. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "regpool.h"
#include "suites.h"

#define NPIECES 5000

struct fake {
	uint8_t token[NPIECES];         /* what an MR points to: token + i */
	_Atomic unsigned regs[NPIECES];  /* registrations of each piece */
	_Atomic unsigned rels[NPIECES];  /* releases of each piece */
	uint64_t fail_at;               /* this piece fails (NPIECES: none) */
	useconds_t delay;               /* per registration */
};

static int fake_reg(void *ctx, uint64_t i, void **mr)
{
	struct fake *f = ctx;

	if (f->delay)
		usleep(f->delay);
	atomic_fetch_add(&f->regs[i], 1);
	if (i == f->fail_at)
		return ENOMEM;
	*mr = &f->token[i];
	return 0;
}

static void fake_release(void *ctx, uint64_t i, void *mr)
{
	struct fake *f = ctx;

	ck_assert_ptr_eq(mr, &f->token[i]);
	atomic_fetch_add(&f->rels[i], 1);
}

static struct fake *fake_new(uint64_t fail_at, useconds_t delay)
{
	struct fake *f = calloc(1, sizeof(*f));

	ck_assert_ptr_nonnull(f);
	f->fail_at = fail_at;
	f->delay = delay;
	return f;
}

/* Takes pieces in order as a driving thread does, sleeping on the wake fd
 * when the next is not there; stops at @upto or at a failure.  The number
 * taken. */
static uint64_t consume(struct regpool *p, struct fake *f, int fd, uint64_t upto, int *failed)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint64_t i = 0, buf;
	void *mr;

	*failed = 0;
	while (i < upto) {
		mr = rp_take(p, i);
		if (mr) {
			ck_assert_ptr_eq(mr, &f->token[i]);
			ck_assert(!rp_ready(p, i));
			i++;
			continue;
		}
		*failed = rp_failed(p, i);
		if (*failed)
			break;
		ck_assert_int_eq(poll(&pfd, 1, 10000), 1);
		ck_assert_int_eq(read(fd, &buf, sizeof(buf)), sizeof(buf));
	}
	return i;
}

START_TEST(all_pieces_once_in_order)
{
	struct fake *f = fake_new(NPIECES, 0);
	struct regpool p;
	struct rd_err err = { 0 };
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), failed;
	uint64_t i;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(rp_start(&p, NPIECES, 4, fake_reg, fake_release, f, fd, &err), 0);
	ck_assert_uint_eq(consume(&p, f, fd, NPIECES, &failed), NPIECES);
	ck_assert_int_eq(failed, 0);
	ck_assert(!rp_take(&p, NPIECES));
	rp_stop(&p);
	rp_stop(&p);
	for (i = 0; i < NPIECES; i++) {
		ck_assert_uint_eq(atomic_load(&f->regs[i]), 1);
		ck_assert_uint_eq(atomic_load(&f->rels[i]), 0);
	}
	close(fd);
	free(f);
}
END_TEST

START_TEST(failure_reported_at_its_piece)
{
	uint64_t fail_at = 1234 + (uint64_t)_i * 777, i, released = 0;
	struct fake *f = fake_new(fail_at, 0);
	struct regpool p;
	struct rd_err err = { 0 };
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), failed;

	ck_assert_int_eq(rp_start(&p, NPIECES, 1 + (unsigned)_i, fake_reg, fake_release, f, fd,
				  &err), 0);
	/* Every piece before the failed one arrives, then the failure. */
	ck_assert_uint_eq(consume(&p, f, fd, NPIECES, &failed), fail_at);
	ck_assert_int_eq(failed, ENOMEM);
	ck_assert_int_eq(rp_failed(&p, fail_at - 1), 0);
	rp_stop(&p);
	for (i = 0; i < NPIECES; i++) {
		ck_assert_uint_le(atomic_load(&f->regs[i]), 1);
		/* Registered and not taken: released once; the failed one
		 * has nothing to release. */
		ck_assert_uint_eq(atomic_load(&f->rels[i]),
				  (i > fail_at ? atomic_load(&f->regs[i]) : 0));
		released += atomic_load(&f->rels[i]);
	}
	/* One helper stops at the failure. */
	if (_i == 0)
		ck_assert_uint_eq(released, 0);
	close(fd);
	free(f);
}
END_TEST

START_TEST(stop_anytime)
{
	struct fake *f = fake_new(NPIECES, 200);
	struct regpool p = { 0 };
	struct rd_err err = { 0 };
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), failed;
	uint64_t i, taken;

	/* A zeroed pool and a refused start leave nothing to stop. */
	rp_stop(&p);
	ck_assert_int_eq(rp_start(&p, NPIECES, 0, fake_reg, fake_release, f, fd, &err), -EINVAL);
	rp_stop(&p);
	ck_assert_int_eq(rp_start(&p, NPIECES, RP_MAX_THREADS + 1, fake_reg, fake_release, f, fd,
				  &err), -EINVAL);
	ck_assert_int_eq(rp_start(&p, NPIECES, RP_MAX_THREADS, fake_reg, fake_release, f, fd,
				  &err), 0);
	taken = consume(&p, f, fd, 100 + (uint64_t)_i * 300, &failed);
	usleep(2000 * (useconds_t)_i);
	rp_stop(&p);
	ck_assert(!rp_take(&p, taken));
	for (i = 0; i < NPIECES; i++) {
		ck_assert_uint_le(atomic_load(&f->regs[i]), 1);
		ck_assert_uint_eq(atomic_load(&f->rels[i]),
				  (i < taken ? 0 : atomic_load(&f->regs[i])));
	}
	close(fd);
	free(f);
}
END_TEST

START_TEST(fewer_pieces_than_threads)
{
	struct fake *f = fake_new(NPIECES, 0);
	struct regpool p;
	struct rd_err err = { 0 };
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), failed;

	ck_assert_int_eq(rp_start(&p, 3, RP_MAX_THREADS, fake_reg, fake_release, f, fd, &err), 0);
	ck_assert_uint_le(p.nthreads, 3);
	ck_assert_uint_eq(consume(&p, f, fd, 3, &failed), 3);
	rp_stop(&p);
	ck_assert_uint_eq(atomic_load(&f->regs[3]), 0);
	ck_assert_int_ge(rp_default_threads(), 1);
	ck_assert_int_le(rp_default_threads(), RP_MAX_THREADS);
	close(fd);
	free(f);
}
END_TEST

Suite *regpool_suite(void)
{
	Suite *s = suite_create("regpool");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, all_pieces_once_in_order);
	tcase_add_loop_test(tc, failure_reported_at_its_piece, 0, 4);
	tcase_add_loop_test(tc, stop_anytime, 0, 4);
	tcase_add_test(tc, fewer_pieces_than_threads);
	suite_add_tcase(s, tc);
	return s;
}
