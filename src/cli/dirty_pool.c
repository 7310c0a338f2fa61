/* The collecting threads: made once at dirty_open with their buffers, so a
 * round allocates nothing.  workers[0] is the caller; the others wait for
 * a new generation, take slices until none is left (or one fails) and
 * count themselves out.  The kernel walks each slice's page tables under
 * the mm's read lock, which the threads share. */
#include "dirty_pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dirty_scan.h"

/* Takes slices until there are none left, or one fails. */
static void work(struct worker *w)
{
	struct dirty_set *s = w->s;
	size_t i;

	w->rc = 0;
	while (!w->rc && (i = atomic_fetch_add(&s->next, 1)) < s->nslices)
		w->rc = dirty_scan_slice(w, &s->slices[i]);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct dirty_set *s = w->s;
	uint64_t seen = 0;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->quit && s->gen == seen)
			pthread_cond_wait(&s->go, &s->mu);
		if (s->quit)
			break;
		seen = s->gen;
		pthread_mutex_unlock(&s->mu);
		work(w);
		pthread_mutex_lock(&s->mu);
		if (--s->running == 0)
			pthread_cond_signal(&s->done);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Runs @op over every slice on every thread; the first failure is returned. */
int dirty_pool_run(struct dirty_set *s, enum op op, struct cli_err *err)
{
	unsigned i;

	s->op = op;
	atomic_store(&s->next, 0);
	pthread_mutex_lock(&s->mu);
	s->running = s->nworkers - 1;
	s->gen++;
	pthread_cond_broadcast(&s->go);
	pthread_mutex_unlock(&s->mu);
	work(&s->workers[0]);
	pthread_mutex_lock(&s->mu);
	while (s->running)
		pthread_cond_wait(&s->done, &s->mu);
	pthread_mutex_unlock(&s->mu);
	for (i = 0; i < s->nworkers; i++)
		if (s->workers[i].rc)
			return cli_err_set(err, s->workers[i].rc, "%s", s->workers[i].err.msg);
	return 0;
}

/* The threads, and each one's buffer: all made here, none on the way. */
int dirty_pool_start(struct dirty_set *s, unsigned threads, struct cli_err *err)
{
	size_t bufsz = PM_BATCH * sizeof(uint64_t) > PM_REGIONS * sizeof(struct page_region_) ?
		       PM_BATCH * sizeof(uint64_t) : PM_REGIONS * sizeof(struct page_region_);
	unsigned i;
	int rc;

	if (pthread_mutex_init(&s->mu, NULL) || pthread_cond_init(&s->go, NULL) ||
	    pthread_cond_init(&s->done, NULL))
		return cli_err_set(err, -ENOMEM, "cannot make the collecting threads' locks");
	s->sync_ready = true;
	s->workers = calloc(threads, sizeof(*s->workers));
	if (!s->workers)
		return cli_err_set(err, -ENOMEM, "out of memory");
	s->nworkers = threads;
	for (i = 0; i < threads; i++) {
		s->workers[i].s = s;
		s->workers[i].buf = malloc(bufsz);
		if (!s->workers[i].buf)
			return cli_err_set(err, -ENOMEM, "out of memory");
	}
	for (i = 1; i < threads; i++) {
		rc = pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]);
		if (rc)
			return cli_err_set(err, -rc, "cannot start a collecting thread: %s",
					   strerror(rc));
		s->workers[i].started = true;
	}
	return 0;
}

void dirty_pool_stop(struct dirty_set *s)
{
	unsigned i;

	if (s->sync_ready) {
		pthread_mutex_lock(&s->mu);
		s->quit = true;
		pthread_cond_broadcast(&s->go);
		pthread_mutex_unlock(&s->mu);
	}
	for (i = 0; i < s->nworkers; i++) {
		if (s->workers[i].started)
			pthread_join(s->workers[i].thread, NULL);
		free(s->workers[i].buf);
	}
	free(s->workers);
	s->workers = NULL;
	s->nworkers = 0;
	if (s->sync_ready) {
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->go);
		pthread_cond_destroy(&s->done);
	}
	s->sync_ready = false;
}
