#include "regq.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "populate.h"

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

const struct regq_ops regq_verbs = { verbs_reg, verbs_dereg, pop_fault_in };

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
	struct regq_slot *slot;
	struct regq_job job;
	uint64_t pos;

	rd_thread_background();
	for (;;) {
		while (sem_wait(&q->jobs) && errno == EINTR)
			;
		if (atomic_load(&q->stop))
			break;
		/* One post per job: the position claimed was submitted, or is
		 * being published right now; its tail (acquire) also makes
		 * the job's fields visible. */
		pos = atomic_fetch_add(&q->next, 1);
		while (atomic_load_explicit(&q->tail, memory_order_acquire) <= pos)
			sched_yield();
		slot = &q->ring[pos % q->cap];
		job = slot->job;
		job.mr = NULL;
		if (job.access == REGQ_FAULT_IN)
			job.rc = q->ops.fault_in ? q->ops.fault_in(job.addr, job.len) : -ENOSYS;
		else
			job.rc = q->ops.reg(q->pd, job.addr, job.len, job.access, &job.mr);
		if (job.rc == -EFAULT && job.fallback >= 0)
			job.rc = q->ops.reg(q->pd, job.addr, job.len, job.fallback, &job.mr);
		slot->job = job;
		atomic_store_explicit(&slot->fin, pos + 1, memory_order_release);
		wake(q);
	}
	return NULL;
}

unsigned regq_default_threads(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (cpus <= 1)
		return 1;
	return cpus > REGQ_MAX_THREADS ? REGQ_MAX_THREADS : (unsigned)cpus;
}

int regq_init(struct regq *q, const struct regq_ops *ops, void *pd, unsigned cap,
	      unsigned threads, int wake_fd, struct rd_err *err)
{
	int rc;

	memset(q, 0, sizeof(*q));
	if (!threads)
		threads = regq_default_threads();
	if (threads > REGQ_MAX_THREADS || !cap)
		return rd_err_set(err, -EINVAL, "a registration queue of %u jobs on %u threads "
				  "(at most %u)", cap, threads, REGQ_MAX_THREADS);
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
	for (; q->nthreads < threads; q->nthreads++) {
		rc = pthread_create(&q->thread[q->nthreads], NULL, helper, q);
		if (rc) {
			regq_fini(q);
			return rd_err_set(err, -rc, "cannot start a registration thread: %s",
					  strerror(rc));
		}
	}
	return 0;
}

unsigned regq_threads(const struct regq *q)
{
	return q->nthreads;
}

int regq_submit(struct regq *q, void *addr, size_t len, int access, int fallback,
		uint64_t cookie, struct rd_err *err)
{
	uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);

	if (atomic_load(&q->stop))
		return rd_err_set(err, -ECANCELED, "registrations were stopped");
	if (tail - q->head == q->cap)
		return -EAGAIN;
	/* The slot's last job was reaped: no helper touches it any more. */
	q->ring[tail % q->cap].job = (struct regq_job){ .addr = addr, .len = len,
		.access = access, .fallback = fallback, .cookie = cookie };
	atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
	sem_post(&q->jobs);
	return 0;
}

static bool finished(const struct regq *q, uint64_t pos)
{
	return atomic_load_explicit(&q->ring[pos % q->cap].fin, memory_order_acquire) == pos + 1;
}

unsigned regq_reap(struct regq *q, struct regq_job *out, unsigned max)
{
	uint64_t tail;
	unsigned n = 0;

	if (!q->ring)
		return 0;
	tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
	while (n < max && q->head < tail && finished(q, q->head))
		out[n++] = q->ring[q->head++ % q->cap].job;
	return n;
}

unsigned regq_pending(const struct regq *q)
{
	return (unsigned)(atomic_load_explicit(&q->tail, memory_order_relaxed) - q->head);
}

void regq_stop(struct regq *q)
{
	unsigned k;

	if (!q->ring || atomic_exchange(&q->stop, true))
		return;
	/* One wake per helper: each that sees the flag leaves. */
	for (k = 0; k < q->nthreads; k++)
		sem_post(&q->jobs);
}

void regq_fini(struct regq *q)
{
	uint64_t pos, tail;
	unsigned k;

	if (!q->ring)
		return;
	regq_stop(q);
	for (k = 0; k < q->nthreads; k++)
		pthread_join(q->thread[k], NULL);
	/* Every helper is gone: what finished is final, what did not never
	 * will. */
	tail = atomic_load(&q->tail);
	for (pos = q->head; pos < tail; pos++) {
		const struct regq_job *j = &q->ring[pos % q->cap].job;

		if (finished(q, pos) && !j->rc && j->mr)
			q->ops.dereg(j->mr);
	}
	sem_destroy(&q->jobs);
	free(q->ring);
	memset(q, 0, sizeof(*q));
}
