#include "regpool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void wake(const struct regpool *p)
{
	uint64_t one = 1;

	if (p->wake_fd >= 0 && write(p->wake_fd, &one, sizeof(one)) < 0) {
		/* The counter is full: the fd is readable anyway. */
	}
}

static void *run(void *arg)
{
	struct regpool *p = arg;
	uint64_t i;
	void *mr;
	int e;

	while (!atomic_load(&p->stop) && !atomic_load(&p->failed)) {
		i = atomic_fetch_add(&p->next, 1);
		if (i >= p->n)
			break;
		mr = NULL;
		e = p->reg(p->ctx, i, &mr);
		if (e || !mr) {
			atomic_store(&p->err[i], e ? e : EIO);
			atomic_store(&p->failed, true);
			wake(p);
			break;
		}
		atomic_store_explicit(&p->mr[i], mr, memory_order_release);
		wake(p);
	}
	return NULL;
}

unsigned rp_default_threads(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (cpus <= 1)
		return 1;
	return cpus > (long)RP_MAX_THREADS ? RP_MAX_THREADS : (unsigned)cpus;
}

int rp_start(struct regpool *p, uint64_t n, unsigned threads, rp_reg_fn reg,
	     rp_release_fn release, void *ctx, int wake_fd, struct rd_err *err)
{
	unsigned i;
	int rc;

	memset(p, 0, sizeof(*p));
	if (!threads || threads > RP_MAX_THREADS)
		return rd_err_set(err, -EINVAL, "%u registration threads outside 1..%u", threads,
				  RP_MAX_THREADS);
	p->mr = calloc(n ? n : 1, sizeof(*p->mr));
	p->err = calloc(n ? n : 1, sizeof(*p->err));
	if (!p->mr || !p->err) {
		free(p->mr);
		free(p->err);
		p->mr = NULL;
		p->err = NULL;
		return rd_err_set(err, -ENOMEM, "out of memory for %" PRIu64 " pieces", n);
	}
	p->reg = reg;
	p->release = release;
	p->ctx = ctx;
	p->wake_fd = wake_fd;
	p->n = n;
	p->started = true;
	for (i = 0; i < threads && i < n; i++) {
		rc = pthread_create(&p->thread[i], NULL, run, p);
		if (rc) {
			rp_stop(p);
			return rd_err_set(err, -rc, "cannot start a registration thread: %s",
					  strerror(rc));
		}
		p->nthreads++;
	}
	return 0;
}

void *rp_take(struct regpool *p, uint64_t i)
{
	if (!p->started || i >= p->n)
		return NULL;
	return atomic_exchange_explicit(&p->mr[i], NULL, memory_order_acquire);
}

bool rp_ready(const struct regpool *p, uint64_t i)
{
	return p->started && i < p->n &&
	       atomic_load_explicit(&p->mr[i], memory_order_acquire) != NULL;
}

int rp_failed(const struct regpool *p, uint64_t i)
{
	if (!p->started || i >= p->n)
		return 0;
	return atomic_load(&p->err[i]);
}

void rp_stop(struct regpool *p)
{
	uint64_t i;
	void *mr;
	unsigned k;

	if (!p->started)
		return;
	atomic_store(&p->stop, true);
	for (k = 0; k < p->nthreads; k++)
		pthread_join(p->thread[k], NULL);
	p->nthreads = 0;
	for (i = 0; i < p->n; i++) {
		mr = atomic_load(&p->mr[i]);
		if (mr && p->release)
			p->release(p->ctx, i, mr);
	}
	free(p->mr);
	free(p->err);
	p->mr = NULL;
	p->err = NULL;
	p->started = false;
}
