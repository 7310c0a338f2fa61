#include "worker.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

enum { WK_IDLE, WK_OUT, WK_DONE };

static void *run(void *arg)
{
	struct worker *w = arg;
	uint64_t one = 1;

	for (;;) {
		if (sem_wait(&w->go)) {
			if (errno == EINTR)
				continue;
			/* Cannot happen with a valid semaphore; if it does,
			 * say so rather than leave a job out for ever. */
			atomic_store(&w->dead, true);
			if (w->wake_fd >= 0 && write(w->wake_fd, &one, sizeof(one)) < 0) {
				/* Readable already. */
			}
			break;
		}
		if (atomic_load(&w->stop))
			break;
		w->rc = w->fn(w->arg);
		/* The job's writes happen before the reaper sees WK_DONE. */
		atomic_store_explicit(&w->state, WK_DONE, memory_order_release);
		if (w->wake_fd >= 0 && write(w->wake_fd, &one, sizeof(one)) < 0) {
			/* The counter is only full if the fd is readable already. */
		}
	}
	return NULL;
}

#define WORKER_STACK (256u << 10)

int worker_start(struct worker *w, int wake_fd, struct rd_err *err)
{
	pthread_attr_t attr;
	int rc;

	memset(w, 0, sizeof(*w));
	w->wake_fd = wake_fd;
	atomic_init(&w->state, WK_IDLE);
	atomic_init(&w->stop, false);
	atomic_init(&w->dead, false);
	if (sem_init(&w->go, 0, 0))
		return rd_err_set(err, -errno, "sem_init: %s", strerror(errno));
	/* A small stack: the jobs call no deep code, and a default 8 MiB
	 * stack's first touch may fault in (and clear) a 2 MiB huge page,
	 * 8-15 ms under emulation inside the call that starts the thread. */
	rc = pthread_attr_init(&attr);
	if (!rc) {
		rc = pthread_attr_setstacksize(&attr, WORKER_STACK);
		if (!rc)
			rc = pthread_create(&w->th, &attr, run, w);
		pthread_attr_destroy(&attr);
	}
	if (rc) {
		sem_destroy(&w->go);
		return rd_err_set(err, -rc, "cannot start the set-up thread: %s", strerror(rc));
	}
	w->started = true;
	return 0;
}

int worker_hand(struct worker *w, int (*fn)(void *), void *arg)
{
	if (!w->started || atomic_load(&w->dead))
		return -ESRCH;
	if (atomic_load(&w->state) != WK_IDLE)
		return -EBUSY;
	w->fn = fn;
	w->arg = arg;
	atomic_store(&w->state, WK_OUT);
	/* sem_post orders the stores above before the worker's sem_wait. */
	if (sem_post(&w->go)) {
		atomic_store(&w->state, WK_IDLE);
		return -errno;
	}
	return 0;
}

int worker_reap(struct worker *w, int *rc)
{
	int st = atomic_load_explicit(&w->state, memory_order_acquire);

	if (st == WK_IDLE)
		return -ENOENT;
	if (st == WK_OUT)
		return atomic_load(&w->dead) ? -ESRCH : 0;
	*rc = w->rc;
	atomic_store(&w->state, WK_IDLE);
	return 1;
}

bool worker_busy(const struct worker *w)
{
	return atomic_load(&((struct worker *)w)->state) != WK_IDLE;
}

void worker_stop(struct worker *w)
{
	if (!w->started)
		return;
	atomic_store(&w->stop, true);
	sem_post(&w->go);
	/* A job in progress runs to its end before the thread sees stop. */
	pthread_join(w->th, NULL);
	sem_destroy(&w->go);
	w->started = false;
	atomic_store(&w->state, WK_IDLE);
}
