/* The set-up thread: handing a job over and reaping it never waits for the
 * job; its result and what it wrote come with the reap, and the wake fd
 * says when; a second job while one is out is refused; stopping waits for
 * a job in progress and is safe twice and on a worker never started. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "suite.h"
#include "suites.h"
#include "worker.h"

struct job {
	atomic_bool release;    /* the job may end */
	atomic_bool running;
	int wrote;              /* plain: visible to the reaper after the reap */
	int result;
};

static int slow_job(void *arg)
{
	struct job *j = arg;

	atomic_store(&j->running, true);
	while (!atomic_load(&j->release))
		usleep(1000);
	j->wrote = 42;
	return j->result;
}

static int64_t now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static bool readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1;
}

START_TEST(hand_reap_wake)
{
	struct worker w;
	struct rd_err err;
	struct job j = { .result = -EIO };
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), rc = 0;
	uint64_t n;
	int64_t t0;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(worker_start(&w, fd, &err), 0);
	ck_assert_int_eq(worker_reap(&w, &rc), -ENOENT);
	ck_assert(!worker_busy(&w));
	t0 = now_us();
	ck_assert_int_eq(worker_hand(&w, slow_job, &j), 0);
	ck_assert(worker_busy(&w));
	/* Out: neither call waits for it, a second job is refused. */
	ck_assert_int_eq(worker_reap(&w, &rc), 0);
	ck_assert_int_eq(worker_hand(&w, slow_job, &j), -EBUSY);
	ck_assert_int_lt(now_us() - t0, 50000);
	ck_assert(!readable(fd, 20));
	atomic_store(&j.release, true);
	ck_assert(readable(fd, 5000));
	ck_assert_int_eq(read(fd, &n, sizeof(n)), (int)sizeof(n));
	ck_assert_int_eq(worker_reap(&w, &rc), 1);
	ck_assert_int_eq(rc, -EIO);
	ck_assert_int_eq(j.wrote, 42);
	ck_assert(!worker_busy(&w));
	/* Free again: a second job runs. */
	j = (struct job){ .result = 0 };
	atomic_store(&j.release, true);
	ck_assert_int_eq(worker_hand(&w, slow_job, &j), 0);
	ck_assert(readable(fd, 5000));
	ck_assert_int_eq(worker_reap(&w, &rc), 1);
	ck_assert_int_eq(rc, 0);
	worker_stop(&w);
	worker_stop(&w);
	ck_assert_int_eq(worker_hand(&w, slow_job, &j), -ESRCH);
	close(fd);
}
END_TEST

static void *release_later(void *arg)
{
	struct job *j = arg;

	usleep(100000);
	atomic_store(&j->release, true);
	return NULL;
}

START_TEST(stop_waits_for_the_job)
{
	struct worker w, never = { 0 };
	struct rd_err err;
	struct job j = { .result = 0 };
	pthread_t t;
	int64_t t0;

	worker_stop(&never);
	ck_assert_int_eq(worker_start(&w, -1, &err), 0);
	ck_assert_int_eq(worker_hand(&w, slow_job, &j), 0);
	while (!atomic_load(&j.running))
		usleep(1000);
	ck_assert_int_eq(pthread_create(&t, NULL, release_later, &j), 0);
	t0 = now_us();
	worker_stop(&w);
	/* The job ran to its end before the thread was joined. */
	ck_assert_int_ge(now_us() - t0, 50000);
	ck_assert_int_eq(j.wrote, 42);
	pthread_join(t, NULL);
}
END_TEST

void worker_cases(Suite *s)
{
	TCase *tc = tu_case(s, "worker", 0);

	tcase_add_test(tc, hand_reap_wake);
	tcase_add_test(tc, stop_waits_for_the_job);
}
