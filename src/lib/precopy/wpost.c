#include "wpost.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Requests per post call at most: the ring frees up in steps this size. */
#define WPOST_BATCH 32

static void wake(struct wpost *p)
{
	uint64_t one = 1;

	if (p->wake_fd >= 0 && write(p->wake_fd, &one, sizeof(one)) < 0) {
		/* The counter is full: the driving thread is being woken anyway. */
	}
}

static void failed(struct wpost_chan *c, int rc)
{
	struct wpost *p = c->p;

	if (!atomic_flag_test_and_set(&p->failing)) {
		rd_err_set(&p->msg, rc, "ibv_post_send on channel %u failed: %s", c->index,
			   strerror(-rc));
		atomic_store_explicit(&p->err, rc, memory_order_release);
	}
	wake(p);
}

/* Waits until the ring holds something or the thread must stop; false on
 * stop. */
static bool wait_work(struct wpost_chan *c, uint64_t head)
{
	bool go;

	pthread_mutex_lock(&c->lock);
	c->sleeping = true;
	while (!atomic_load(&c->p->stop) &&
	       atomic_load_explicit(&c->tail, memory_order_acquire) == head)
		pthread_cond_wait(&c->cond, &c->lock);
	c->sleeping = false;
	go = !atomic_load(&c->p->stop);
	pthread_mutex_unlock(&c->lock);
	return go;
}

static void *run(void *arg)
{
	struct wpost_chan *c = arg;
	uint64_t head = atomic_load_explicit(&c->head, memory_order_relaxed), tail, end, i;
	struct ibv_send_wr *bad;
	int rc;

	for (;;) {
		tail = atomic_load_explicit(&c->tail, memory_order_acquire);
		if (tail == head) {
			if (!wait_work(c, head))
				break;
			continue;
		}
		/* What a stop finds in the ring is never posted: the migration
		 * is over and the queue pair about to go. */
		if (atomic_load(&c->p->stop))
			break;
		end = tail - head > WPOST_BATCH ? head + WPOST_BATCH : tail;
		for (i = head; i < end; i++)
			c->wr[i & (c->cap - 1)].next = i + 1 < end ? &c->wr[(i + 1) & (c->cap - 1)] :
				NULL;
		rc = ibv_post_send(c->qp, &c->wr[head & (c->cap - 1)], &bad);
		if (rc) {
			failed(c, -rc);
			break;
		}
		atomic_fetch_add_explicit(&c->posts, 1, memory_order_relaxed);
		head = end;
		/* seq_cst, as wpost_room's request and second look are: either
		 * it sees this head or this sees its request. */
		atomic_store(&c->head, head);
		if (atomic_exchange(&c->want_wake, false))
			wake(c->p);
	}
	return NULL;
}

int wpost_start(struct wpost *p, struct ibv_qp *const *qps, unsigned n, uint32_t max_writes,
		uint32_t batch, int wake_fd, struct rd_err *err)
{
	uint64_t cap = 1;
	unsigned k;
	int rc;

	memset(p, 0, sizeof(*p));
	atomic_flag_clear(&p->failing);
	p->wake_fd = wake_fd;
	p->batch = batch ? batch : 1;
	while (cap < (uint64_t)max_writes + p->batch)
		cap <<= 1;
	p->chans = calloc(n, sizeof(*p->chans));
	if (!p->chans)
		return rd_err_set(err, -ENOMEM, "out of memory for the posting threads");
	for (k = 0; k < n; k++) {
		struct wpost_chan *c = &p->chans[k];

		c->p = p;
		c->index = k;
		c->qp = qps[k];
		c->cap = cap;
		pthread_mutex_init(&c->lock, NULL);
		pthread_cond_init(&c->cond, NULL);
		p->n = k + 1;
		c->wr = calloc(cap, sizeof(*c->wr));
		c->sge = calloc(cap, sizeof(*c->sge));
		if (!c->wr || !c->sge) {
			wpost_stop(p);
			return rd_err_set(err, -ENOMEM, "out of memory for the posting threads");
		}
		rc = pthread_create(&c->thread, NULL, run, c);
		if (rc) {
			wpost_stop(p);
			return rd_err_set(err, -rc, "cannot start the posting thread of data "
					  "channel %u: %s", k, strerror(rc));
		}
		c->running = true;
	}
	return 0;
}

bool wpost_room(struct wpost *p, unsigned chan)
{
	struct wpost_chan *c = &p->chans[chan];
	uint64_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed) + p->batch;

	if (tail - atomic_load_explicit(&c->head, memory_order_acquire) <= c->cap)
		return true;
	/* Ask for a wake-up, then look again: the thread may have moved on
	 * before it could see the request. */
	atomic_store(&c->want_wake, true);
	return tail - atomic_load(&c->head) <= c->cap;
}

void wpost_submit(struct wpost *p, unsigned chan, const struct ibv_send_wr *wr)
{
	struct wpost_chan *c = &p->chans[chan];
	uint64_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed), slot;

	for (; wr; wr = wr->next, tail++) {
		slot = tail & (c->cap - 1);
		c->wr[slot] = *wr;
		c->wr[slot].next = NULL;
		if (wr->num_sge) {
			c->sge[slot] = wr->sg_list[0];
			c->wr[slot].sg_list = &c->sge[slot];
			c->wr[slot].num_sge = 1;
		}
	}
	atomic_store_explicit(&c->tail, tail, memory_order_release);
	pthread_mutex_lock(&c->lock);
	if (c->sleeping)
		pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

int wpost_error(struct wpost *p, struct rd_err *err)
{
	int rc = atomic_load_explicit(&p->err, memory_order_acquire);

	/* The thread's own message: it could not write the owner's while the
	 * driving thread might. */
	return rc && err ? rd_err_set(err, rc, "%s", p->msg.msg) : rc;
}

uint64_t wpost_calls(const struct wpost *p, unsigned chan)
{
	return chan < p->n ? atomic_load(&p->chans[chan].posts) : 0;
}

void wpost_stop(struct wpost *p)
{
	unsigned k;

	if (!p->chans)
		return;
	atomic_store(&p->stop, true);
	for (k = 0; k < p->n; k++) {
		struct wpost_chan *c = &p->chans[k];

		if (!c->running)
			continue;
		pthread_mutex_lock(&c->lock);
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
		c->running = false;
	}
	for (k = 0; k < p->n; k++) {
		struct wpost_chan *c = &p->chans[k];

		free(c->wr);
		free(c->sge);
		pthread_mutex_destroy(&c->lock);
		pthread_cond_destroy(&c->cond);
	}
	free(p->chans);
	p->chans = NULL;
	p->n = 0;
}
