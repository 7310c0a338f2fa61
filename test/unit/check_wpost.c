/* The posting threads without a device: ibv_post_send dispatches through
 * the context's ops, so fake queue pairs record what each thread posts.
 * Every request handed over is posted once, in order, on its own channel;
 * a failed post reaches the driving thread and its wake fd; stopping joins
 * threads that sleep or that still have work. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "suite.h"
#include "suites.h"
#include "wpost.h"

#define NCH 4
#define PER_CHAN 20000
#define MAX_WRITES 64
#define BATCH 32

struct fake {
	struct ibv_context ctx;
	struct ibv_qp qp[NCH];
	/* Per channel, written only by that channel's thread. */
	uint64_t next[NCH];        /* the wr_id expected next */
	uint64_t calls[NCH];
	unsigned longest[NCH];
	_Atomic uint64_t posted[NCH];
	_Atomic int bad[NCH];      /* an out-of-order or malformed request */
	_Atomic int fail_at;       /* a post of this wr_id fails (0: none) */
};

static struct fake F;

static int fake_post(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	unsigned k = (unsigned)(qp - F.qp), n = 0;

	for (; wr; wr = wr->next, n++) {
		if (atomic_load(&F.fail_at) && wr->wr_id == (uint64_t)atomic_load(&F.fail_at)) {
			*bad = wr;
			return EIO;
		}
		/* wr_id: channel in the top byte, sequence below; the scatter
		 * entry and the remote address derive from it. */
		if (wr->wr_id != ((uint64_t)k << 56 | F.next[k]) || wr->num_sge != 1 ||
		    wr->sg_list->addr != wr->wr_id * 3 || wr->wr.rdma.remote_addr != wr->wr_id * 5)
			atomic_store(&F.bad[k], 1);
		F.next[k]++;
	}
	F.calls[k]++;
	if (n > F.longest[k])
		F.longest[k] = n;
	atomic_fetch_add(&F.posted[k], n);
	return 0;
}

static void fake_init(void)
{
	unsigned k;

	memset(&F, 0, sizeof(F));
	F.ctx.ops.post_send = fake_post;
	for (k = 0; k < NCH; k++)
		F.qp[k].context = &F.ctx;
}

/* A chain of @n requests of channel @k from sequence @seq on. */
static void make_chain(struct ibv_send_wr *wr, struct ibv_sge *sge, unsigned k, uint64_t seq,
		       unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		uint64_t id = (uint64_t)k << 56 | (seq + i);

		sge[i] = (struct ibv_sge){ .addr = id * 3, .length = 4096, .lkey = 1 };
		wr[i] = (struct ibv_send_wr){ .wr_id = id, .sg_list = &sge[i], .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE, .next = i + 1 < n ? &wr[i + 1] : NULL,
			.wr.rdma = { .remote_addr = id * 5, .rkey = 2 } };
	}
}

static void qps(struct ibv_qp **q)
{
	unsigned k;

	for (k = 0; k < NCH; k++)
		q[k] = &F.qp[k];
}

/* Many chains of varying length on every channel, handed over as fast as
 * the rings take them: every request arrives once, in order, and the rings
 * let no more than max_writes + batch be waiting. */
START_TEST(every_request_posted_in_order)
{
	static struct wpost p;
	struct ibv_send_wr wr[BATCH];
	struct ibv_sge sge[BATCH];
	struct ibv_qp *q[NCH];
	uint64_t seq[NCH] = { 0 }, left = (uint64_t)NCH * PER_CHAN;
	struct rd_err err = { "" };
	unsigned k, n, round = 0, waits = 0;

	fake_init();
	qps(q);
	ck_assert_int_eq(wpost_start(&p, q, NCH, MAX_WRITES, BATCH, -1, &err), 0);
	while (left) {
		for (k = 0; k < NCH; k++) {
			if (seq[k] == PER_CHAN)
				continue;
			if (!wpost_room(&p, k)) {
				waits++;
				continue;
			}
			n = 1 + (round * 7 + k * 13) % BATCH;
			if (n > PER_CHAN - seq[k])
				n = (unsigned)(PER_CHAN - seq[k]);
			make_chain(wr, sge, k, seq[k], n);
			wpost_submit(&p, k, wr);
			/* The requests were copied: scribbling on ours is harmless. */
			memset(wr, 0xa5, sizeof(wr));
			memset(sge, 0x5a, sizeof(sge));
			seq[k] += n;
			left -= n;
		}
		round++;
	}
	for (k = 0; k < NCH; k++)
		while (atomic_load(&F.posted[k]) < PER_CHAN)
			usleep(1000);
	ck_assert_int_eq(wpost_error(&p, &err), 0);
	for (k = 0; k < NCH; k++) {
		ck_assert_int_eq(atomic_load(&F.bad[k]), 0);
		ck_assert_uint_eq(atomic_load(&F.posted[k]), PER_CHAN);
		ck_assert_uint_ge(wpost_calls(&p, k), PER_CHAN / BATCH);
		ck_assert_uint_le(F.longest[k], BATCH);
	}
	wpost_stop(&p);
	/* Stopped: nothing more is posted, and stopping twice is fine. */
	wpost_stop(&p);
	printf("wpost: %u channels x %d requests, %u hand-overs waited for room\n", NCH,
	       PER_CHAN, waits);
}
END_TEST

/* A post that fails is kept for the driving thread, with the channel named,
 * and the wake fd is written. */
START_TEST(failed_post_reaches_driver)
{
	static struct wpost p;
	struct ibv_send_wr wr[4];
	struct ibv_sge sge[4];
	struct ibv_qp *q[NCH];
	struct rd_err err = { "" };
	uint64_t v = 0;
	int efd = eventfd(0, EFD_CLOEXEC), i;

	ck_assert_int_ge(efd, 0);
	fake_init();
	qps(q);
	atomic_store(&F.fail_at, (int)((uint64_t)0 << 56 | 6));
	ck_assert_int_eq(wpost_start(&p, q, 2, MAX_WRITES, BATCH, efd, &err), 0);
	make_chain(wr, sge, 0, 0, 4);
	wpost_submit(&p, 0, wr);
	make_chain(wr, sge, 0, 4, 4);
	wpost_submit(&p, 0, wr);
	for (i = 0; i < 5000 && !wpost_error(&p, &err); i++)
		usleep(1000);
	ck_assert_int_eq(wpost_error(&p, &err), -EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "channel 0"));
	ck_assert_int_eq(read(efd, &v, sizeof(v)), (int)sizeof(v));
	ck_assert_uint_ge(v, 1);
	wpost_stop(&p);
	/* The error outlives the threads, for a report made after stopping. */
	ck_assert_int_eq(wpost_error(&p, NULL), -EIO);
	close(efd);
}
END_TEST

/* Threads asleep on empty rings, or never given anything, stop at once. */
START_TEST(stop_idle_and_never_started)
{
	static struct wpost p, never;
	struct ibv_qp *q[NCH];
	struct rd_err err = { "" };

	fake_init();
	qps(q);
	wpost_stop(&never);
	ck_assert_int_eq(wpost_error(&never, &err), 0);
	ck_assert_int_eq(wpost_start(&p, q, NCH, 1, 1, -1, &err), 0);
	usleep(10000);
	wpost_stop(&p);
	ck_assert_uint_eq(atomic_load(&F.posted[0]), 0);
}
END_TEST

void wpost_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 60);

	tcase_add_test(tc, every_request_posted_in_order);
	tcase_add_test(tc, failed_post_reaches_driver);
	tcase_add_test(tc, stop_idle_and_never_started);
}
