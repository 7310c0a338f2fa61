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

int regq_init(struct regq *q, const struct regq_ops *ops, void *pd, unsigned cap,
	      int wake_fd, struct rd_err *err)
{
	memset(q, 0, sizeof(*q));
	q->ring = calloc(cap, sizeof(*q->ring));
	if (!q->ring)
		return rd_err_set(err, -ENOMEM, "out of memory for the registration queue");
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	q->ops = *ops;
	q->pd = pd;
	q->cap = cap;
	q->wake_fd = wake_fd;
	return 0;
}

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
	struct regq_job job;
	uint64_t pos;

	rd_thread_background();
	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (!atomic_load(&q->stop) && q->done == q->tail)
			pthread_cond_wait(&q->cond, &q->lock);
		if (atomic_load(&q->stop))
			break;
		pos = q->done;
		job = q->ring[pos % q->cap];
		pthread_mutex_unlock(&q->lock);
		job.mr = NULL;
		job.rc = q->ops.reg(q->pd, job.addr, job.len, job.access, &job.mr);
		if (job.rc == -EFAULT && job.fallback >= 0)
			job.rc = q->ops.reg(q->pd, job.addr, job.len, job.fallback, &job.mr);
		pthread_mutex_lock(&q->lock);
		q->ring[pos % q->cap] = job;
		q->done = pos + 1;
		wake(q);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int regq_submit(struct regq *q, void *addr, size_t len, int access, int fallback,
		uint64_t cookie, struct rd_err *err)
{
	int rc;

	if (atomic_load(&q->stop))
		return rd_err_set(err, -ECANCELED, "registrations were stopped");
	pthread_mutex_lock(&q->lock);
	if (q->tail - q->head == q->cap) {
		pthread_mutex_unlock(&q->lock);
		return -EAGAIN;
	}
	if (!q->running) {
		rc = pthread_create(&q->thread, NULL, helper, q);
		if (rc) {
			pthread_mutex_unlock(&q->lock);
			return rd_err_set(err, -rc, "cannot start the registration thread: %s",
					  strerror(rc));
		}
		q->running = true;
	}
	q->ring[q->tail % q->cap] = (struct regq_job){ .addr = addr, .len = len,
		.access = access, .fallback = fallback, .cookie = cookie };
	q->tail++;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

unsigned regq_reap(struct regq *q, struct regq_job *out, unsigned max)
{
	unsigned n = 0;

	if (!q->ring)
		return 0;
	pthread_mutex_lock(&q->lock);
	while (n < max && q->head < q->done)
		out[n++] = q->ring[q->head++ % q->cap];
	pthread_mutex_unlock(&q->lock);
	return n;
}

unsigned regq_pending(const struct regq *q)
{
	return (unsigned)(q->tail - q->head);
}

void regq_stop(struct regq *q)
{
	if (!q->ring)
		return;
	pthread_mutex_lock(&q->lock);
	atomic_store(&q->stop, true);
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

void regq_fini(struct regq *q)
{
	uint64_t pos;

	if (!q->ring)
		return;
	regq_stop(q);
	if (q->running)
		pthread_join(q->thread, NULL);
	for (pos = q->head; pos < q->done; pos++)
		if (!q->ring[pos % q->cap].rc && q->ring[pos % q->cap].mr)
			q->ops.dereg(q->ring[pos % q->cap].mr);
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->lock);
	free(q->ring);
	memset(q, 0, sizeof(*q));
}
