#include "regq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static int verbs_reg(void *pd, void *addr, size_t len, int access, void **mr)
{
	struct ibv_mr *m = ibv_reg_mr(pd, addr, len, access);

	if (!m)
		return errno ? -errno : -ENOMEM;
	*mr = m;
	return 0;
}

static void verbs_dereg(void *mr)
{
	ibv_dereg_mr(mr);
}

const struct regq_ops regq_verbs = { verbs_reg, verbs_dereg };

static void wake(const struct regq *q)
{
	uint64_t one = 1;

	if (q->wake_fd >= 0 && write(q->wake_fd, &one, sizeof(one)) < 0) {
		/* Only full when the reader is far behind: it wakes anyway. */
	}
}

static void *helper(void *arg)
{
	struct regq *q = arg;
	struct regq_job *slot, job;
	uint64_t pos;

	rd_thread_background();
	for (;;) {
		while (sem_wait(&q->jobs) && errno == EINTR)
			;
		if (atomic_load(&q->stop))
			break;
		pos = atomic_load_explicit(&q->done, memory_order_relaxed);
		if (pos == atomic_load_explicit(&q->tail, memory_order_acquire))
			continue;
		slot = &q->ring[pos % q->cap];
		job = *slot;
		job.mr = NULL;
		job.rc = q->ops.reg(q->pd, job.addr, job.len, job.access, &job.mr);
		if (job.rc == -EFAULT && job.fallback >= 0)
			job.rc = q->ops.reg(q->pd, job.addr, job.len, job.fallback, &job.mr);
		*slot = job;
		atomic_store_explicit(&q->done, pos + 1, memory_order_release);
		wake(q);
	}
	return NULL;
}

int regq_init(struct regq *q, const struct regq_ops *ops, void *pd, unsigned cap,
	      int wake_fd, struct rd_err *err)
{
	int rc;

	memset(q, 0, sizeof(*q));
	q->ring = calloc(cap, sizeof(*q->ring));
	if (!q->ring)
		return rd_err_set(err, -ENOMEM, "out of memory for the registration queue");
	if (sem_init(&q->jobs, 0, 0)) {
		rc = -errno;
		free(q->ring);
		q->ring = NULL;
		return rd_err_set(err, rc, "cannot make the registration queue: %s",
				  strerror(-rc));
	}
	q->ops = *ops;
	q->pd = pd;
	q->cap = cap;
	q->wake_fd = wake_fd;
	/* Now, not at the first job: starting a thread maps its stack, which
	 * waits for the address space's lock that populating holds. */
	rc = pthread_create(&q->thread, NULL, helper, q);
	if (rc) {
		sem_destroy(&q->jobs);
		free(q->ring);
		q->ring = NULL;
		return rd_err_set(err, -rc, "cannot start the registration thread: %s",
				  strerror(rc));
	}
	q->running = true;
	return 0;
}

int regq_submit(struct regq *q, void *addr, size_t len, int access, int fallback,
		uint64_t cookie, struct rd_err *err)
{
	uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);

	if (atomic_load(&q->stop))
		return rd_err_set(err, -ECANCELED, "registrations were stopped");
	if (tail - q->head == q->cap)
		return -EAGAIN;
	q->ring[tail % q->cap] = (struct regq_job){ .addr = addr, .len = len,
		.access = access, .fallback = fallback, .cookie = cookie };
	atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
	sem_post(&q->jobs);
	return 0;
}

unsigned regq_reap(struct regq *q, struct regq_job *out, unsigned max)
{
	uint64_t done;
	unsigned n = 0;

	if (!q->ring)
		return 0;
	done = atomic_load_explicit(&q->done, memory_order_acquire);
	while (n < max && q->head < done)
		out[n++] = q->ring[q->head++ % q->cap];
	return n;
}

unsigned regq_pending(const struct regq *q)
{
	return (unsigned)(atomic_load_explicit(&q->tail, memory_order_relaxed) - q->head);
}

void regq_stop(struct regq *q)
{
	if (!q->ring || atomic_exchange(&q->stop, true))
		return;
	sem_post(&q->jobs);
}

void regq_fini(struct regq *q)
{
	uint64_t pos, done;

	if (!q->ring)
		return;
	regq_stop(q);
	if (q->running)
		pthread_join(q->thread, NULL);
	done = atomic_load(&q->done);
	for (pos = q->head; pos < done; pos++)
		if (!q->ring[pos % q->cap].rc && q->ring[pos % q->cap].mr)
			q->ops.dereg(q->ring[pos % q->cap].mr);
	sem_destroy(&q->jobs);
	free(q->ring);
	memset(q, 0, sizeof(*q));
}
