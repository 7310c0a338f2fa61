#include "zscan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blocks.h"
#include "zero.h"

static struct zs_win *slot(const struct zscan *z, uint64_t pos)
{
	return &z->win[pos % z->nwin];
}

/* A helper's work: the zero bit of every dirty page of @w. */
static void check(struct zs_win *w)
{
	uint64_t j, off, len, bits;
	unsigned k;

	for (k = 0; k < ZS_WINDOW_PAGES / 64; k++) {
		w->zero[k] = 0;
		for (bits = w->dirty[k]; bits; bits &= bits - 1) {
			j = (uint64_t)k * 64 + (uint64_t)__builtin_ctzll(bits);
			blk_page_span(w->blk_len, w->page_size, w->first + j, &off, &len);
			if (zero_is_zero(w->host + off, len))
				w->zero[k] |= 1ull << (j % 64);
		}
	}
}

static void *run(void *arg)
{
	struct zscan *z = arg;
	unsigned i;
	int want;

	/* Below the driving thread, as the other helpers (util.h): a page no
	 * helper got to is read by the sweep itself, so the helpers only use
	 * the CPU the driving thread leaves. */
	rd_thread_background();
	for (;;) {
		pthread_mutex_lock(&z->lock);
		while (!atomic_load(&z->stop) && !z->pending)
			pthread_cond_wait(&z->cond, &z->lock);
		if (atomic_load(&z->stop)) {
			pthread_mutex_unlock(&z->lock);
			break;
		}
		z->pending--;
		pthread_mutex_unlock(&z->lock);
		/* At most one queued window per count taken; a withdrawn one
		 * leaves a count with nothing behind it. */
		for (i = 0; i < z->nwin; i++) {
			want = ZS_QUEUED;
			if (atomic_compare_exchange_strong(&z->win[i].state, &want, ZS_BUSY)) {
				check(&z->win[i]);
				atomic_store_explicit(&z->win[i].state, ZS_DONE, memory_order_release);
				break;
			}
		}
	}
	return NULL;
}

unsigned zs_default_threads(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (cpus <= 1)
		return 0;
	return cpus - 1 > (long)ZS_MAX_THREADS ? ZS_MAX_THREADS : (unsigned)(cpus - 1);
}

int zs_start(struct zscan *z, unsigned threads, struct rd_err *err)
{
	unsigned i;
	int rc;

	memset(z, 0, sizeof(*z));
	if (!threads || threads > ZS_MAX_THREADS)
		return rd_err_set(err, -EINVAL, "%u zero-check threads outside 1..%u", threads,
				  ZS_MAX_THREADS);
	/* The live windows, plus as many retired ones a helper may still
	 * hold. */
	z->nwin = threads * ZS_AHEAD + threads;
	z->win = calloc(z->nwin, sizeof(*z->win));
	if (!z->win)
		return rd_err_set(err, -ENOMEM, "out of memory for the zero-check threads");
	pthread_mutex_init(&z->lock, NULL);
	pthread_cond_init(&z->cond, NULL);
	z->started = true;
	for (i = 0; i < threads; i++) {
		rc = pthread_create(&z->thread[i], NULL, run, z);
		if (rc) {
			zs_stop(z);
			return rd_err_set(err, -rc, "cannot start a zero-check thread: %s",
					  strerror(rc));
		}
		z->nthreads++;
	}
	return 0;
}

/* Withdraws a window nobody took yet; one a helper holds finishes unread. */
static void withdraw(struct zs_win *w)
{
	int want = ZS_QUEUED;

	atomic_compare_exchange_strong(&w->state, &want, ZS_FREE);
}

/* Every window of the last iteration is withdrawn (head = tail), and a
 * slot a helper still holds is not refilled until it is done: the windows
 * zs_hint looks at are all of this iteration. */
void zs_begin(struct zscan *z, const struct zs_block *blocks, unsigned nblocks)
{
	for (; z->head < z->tail; z->head++)
		withdraw(slot(z, z->head));
	z->blocks = blocks;
	z->nblocks = nblocks;
	z->next_block = 0;
	z->next_page = 0;
}

/* Copies the dirty bits of pages [first, first + n) (first a multiple of
 * 64) into @w; false when none is set. */
static bool copy_dirty(struct zs_win *w, const uint64_t *sending, uint64_t first, uint64_t n)
{
	uint64_t any = 0, words = (n + 63) / 64, k;

	for (k = 0; k < ZS_WINDOW_PAGES / 64; k++) {
		w->dirty[k] = k < words ? sending[first / 64 + k] : 0;
		if (k + 1 == words && n % 64)
			w->dirty[k] &= (1ull << (n % 64)) - 1;
		any |= w->dirty[k];
	}
	return any != 0;
}

void zs_feed(struct zscan *z, unsigned block, uint64_t cursor)
{
	uint64_t limit = (uint64_t)z->nthreads * ZS_AHEAD, n;
	const struct zs_block *b;
	struct zs_win *w;
	unsigned skipped = 0;
	int st;

	if (!z->started || !z->blocks)
		return;
	/* Retire what the sweep passed. */
	while (z->head < z->tail) {
		w = slot(z, z->head);
		if (w->block > block || (w->block == block && w->first + w->npages > cursor))
			break;
		withdraw(w);
		z->head++;
	}
	/* Never queue behind the sweep. */
	if (z->next_block < block || (z->next_block == block && z->next_page < cursor)) {
		z->next_block = block;
		z->next_page = cursor & ~63ull;
	}
	while (z->tail - z->head < limit && z->next_block < z->nblocks) {
		b = &z->blocks[z->next_block];
		if (z->next_page >= b->npages) {
			z->next_block++;
			z->next_page = 0;
			continue;
		}
		w = slot(z, z->tail);
		st = atomic_load_explicit(&w->state, memory_order_acquire);
		if (st == ZS_QUEUED || st == ZS_BUSY)
			break;
		n = b->npages - z->next_page;
		if (n > ZS_WINDOW_PAGES)
			n = ZS_WINDOW_PAGES;
		if (!copy_dirty(w, b->sending, z->next_page, n)) {
			z->next_page += n;
			if (++skipped == ZS_FEED_SKIP)
				break;
			continue;
		}
		w->block = z->next_block;
		w->first = z->next_page;
		w->npages = n;
		w->host = b->host;
		w->blk_len = b->length;
		w->page_size = b->page_size;
		atomic_store_explicit(&w->state, ZS_QUEUED, memory_order_release);
		z->tail++;
		z->next_page += n;
		pthread_mutex_lock(&z->lock);
		z->pending++;
		pthread_cond_signal(&z->cond);
		pthread_mutex_unlock(&z->lock);
	}
}

int zs_hint(struct zscan *z, unsigned block, uint64_t page)
{
	const struct zs_win *w;
	uint64_t pos, j;

	if (!z->started)
		return -1;
	for (pos = z->head; pos < z->tail; pos++) {
		w = slot(z, pos);
		if (w->block != block || page < w->first || page >= w->first + w->npages)
			continue;
		if (atomic_load_explicit(&w->state, memory_order_acquire) != ZS_DONE)
			break;
		j = page - w->first;
		z->hits++;
		return (w->zero[j / 64] >> (j % 64)) & 1;
	}
	z->misses++;
	return -1;
}

void zs_stop(struct zscan *z)
{
	unsigned i;

	if (!z->started)
		return;
	pthread_mutex_lock(&z->lock);
	atomic_store(&z->stop, true);
	pthread_cond_broadcast(&z->cond);
	pthread_mutex_unlock(&z->lock);
	for (i = 0; i < z->nthreads; i++)
		pthread_join(z->thread[i], NULL);
	z->nthreads = 0;
	pthread_mutex_destroy(&z->lock);
	pthread_cond_destroy(&z->cond);
	free(z->win);
	z->win = NULL;
	z->head = z->tail = 0;
	z->blocks = NULL;
	z->started = false;
}
