#include "populate.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Global offset @pos as a range and an offset in it. */
static bool locate(const struct populate *p, uint64_t pos, unsigned *range, uint64_t *off)
{
	unsigned i;

	for (i = 0; i < p->n; i++) {
		if (pos < p->ranges[i].len) {
			*range = i;
			*off = pos;
			return true;
		}
		pos -= p->ranges[i].len;
	}
	return false;
}

static void failed(struct populate *p, int rc, uint64_t at)
{
	uint64_t one = 1;

	atomic_store(&p->err_at, at);
	atomic_store(&p->err, rc);
	if (p->wake_fd >= 0 && write(p->wake_fd, &one, sizeof(one)) < 0) {
		/* The counter is full: the consumer is being woken anyway. */
	}
}

static uintptr_t page_size(void)
{
	long ps = sysconf(_SC_PAGESIZE);

	return ps > 0 ? (uintptr_t)ps : 4096;
}

int pop_fault_in(void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr, mask = page_size() - 1;

	/* madvise wants a page-aligned start; a block's may not be. */
	if (madvise((void *)(a & ~mask), len + (a & mask), MADV_POPULATE_WRITE))
		return -errno;
	return 0;
}

bool pop_present(const void *addr, size_t len)
{
	unsigned char vec[256];
	uintptr_t ps = page_size(), a = (uintptr_t)addr & ~(ps - 1);
	uintptr_t end = (uintptr_t)addr + len;
	size_t n, i;

	while (a < end) {
		n = (end - a + ps - 1) / ps;
		if (n > sizeof(vec))
			n = sizeof(vec);
		if (mincore((void *)a, n * ps, vec))
			return false;
		for (i = 0; i < n; i++)
			if (!(vec[i] & 1))
				return false;
		a += n * ps;
	}
	return true;
}

static void *run(void *arg)
{
	struct populate *p = arg;
	uint64_t pos = 0, off, len, floor;
	unsigned r;
	int rc;

	rd_thread_background();
	while (!atomic_load(&p->stop) && pos < p->total) {
		floor = atomic_load(&p->floor);
		if (pos < floor)
			pos = floor;
		if (!locate(p, pos, &r, &off))
			break;
		/* Steps end at POP_STEP boundaries of the range; madvise wants
		 * a page-aligned start (the range's own start may not be). */
		len = POP_STEP - off % POP_STEP;
		if (len > p->ranges[r].len - off)
			len = p->ranges[r].len - off;
		rc = pop_fault_in(p->ranges[r].host + off, len);
		if (rc) {
			/* Not supported by this kernel (or memory it cannot
			 * populate, such as an unaligned mapping): registration
			 * populates as it always did. */
			if (rc == -EINVAL) {
				atomic_store(&p->unsupported, true);
				break;
			}
			failed(p, rc, pos);
			break;
		}
		pos += len;
		atomic_store(&p->done, pos);
	}
	return NULL;
}

int pop_start(struct populate *p, const struct pop_range *ranges, unsigned n, int wake_fd,
	      struct rd_err *err)
{
	unsigned i;
	int rc;

	p->ranges = calloc(n ? n : 1, sizeof(*ranges));
	if (!p->ranges)
		return rd_err_set(err, -ENOMEM, "out of memory");
	memcpy(p->ranges, ranges, n * sizeof(*ranges));
	p->n = n;
	for (i = 0; i < n; i++)
		p->total += ranges[i].len;
	p->wake_fd = wake_fd;
	rc = pthread_create(&p->thread, NULL, run, p);
	if (rc) {
		free(p->ranges);
		p->ranges = NULL;
		return rd_err_set(err, -rc, "cannot start the thread that populates memory: %s",
				  strerror(rc));
	}
	p->running = true;
	return 0;
}

void pop_skip(struct populate *p, uint64_t upto)
{
	uint64_t cur = atomic_load(&p->floor);

	while (upto > cur && !atomic_compare_exchange_weak(&p->floor, &cur, upto))
		;
}

int pop_error(const struct populate *p, unsigned *range, uint64_t *off)
{
	int rc = atomic_load(&p->err);

	if (rc && !locate(p, atomic_load(&p->err_at), range, off)) {
		*range = 0;
		*off = 0;
	}
	return rc;
}

void pop_stop(struct populate *p)
{
	if (p->running) {
		atomic_store(&p->stop, true);
		pthread_join(p->thread, NULL);
		p->running = false;
	}
	free(p->ranges);
	p->ranges = NULL;
	p->n = 0;
}
