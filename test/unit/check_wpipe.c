/* The WRITE pipeline without verbs: what it would post, on which channel,
 * which WRITEs are signaled, and which ops a completion finishes. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "suite.h"
#include "suites.h"
#include "wpipe.h"

#define MAXREC 4096

/* What the callbacks saw. */
struct rec {
	uint64_t not_ready_from;     /* ops at or past this position wait */
	unsigned posts[8];           /* post calls per channel */
	uint64_t wr_addr[8][MAXREC]; /* remote addresses posted, per channel */
	int signaled[8][MAXREC];
	unsigned nwr[8];
	uint64_t done[MAXREC];       /* op offsets completed, in order */
	unsigned ndone;
	int fail_post;
};

static int target(void *ctx, uint64_t pos, const struct wp_op *op, struct wp_target *t)
{
	struct rec *r = ctx;

	if (pos >= r->not_ready_from)
		return 0;
	t->local_addr = 0x1000 + op->offset;
	t->lkey = 7;
	t->remote_addr = op->offset;
	t->rkey = 9;
	return 1;
}

static int post(void *ctx, unsigned chan, struct ibv_send_wr *wr)
{
	struct rec *r = ctx;

	if (r->fail_post)
		return -EIO;
	r->posts[chan]++;
	for (; wr; wr = wr->next) {
		ck_assert_uint_lt(r->nwr[chan], MAXREC);
		ck_assert_int_eq(wr->opcode, IBV_WR_RDMA_WRITE);
		ck_assert_uint_eq(wr->sg_list->length, (uint32_t)(wr->wr.rdma.remote_addr % 7 + 1) *
				  4096);
		r->wr_addr[chan][r->nwr[chan]] = wr->wr.rdma.remote_addr;
		r->signaled[chan][r->nwr[chan]++] = !!(wr->send_flags & IBV_SEND_SIGNALED);
	}
	return 0;
}

static void done(void *ctx, const struct wp_op *op)
{
	struct rec *r = ctx;

	r->done[r->ndone++] = op->offset;
}

static const struct wp_callbacks cbs = { target, post, done, NULL };

/* Op i: its offset encodes i, its length 1..7 pages. */
static void push_ops(struct wpipe *wp, uint64_t first, uint64_t n)
{
	uint64_t i;

	for (i = first; i < first + n; i++) {
		uint64_t off = i * 1000003 * 7;

		wp_push(wp, &(struct wp_op){ .block = 0, .offset = off,
					     .length = (off % 7 + 1) * 4096, .slot = i });
	}
}

/* Completes every signaled WRITE of channel @k posted so far. */
static void complete_chan(struct wpipe *wp, struct rec *r, unsigned k, unsigned *seen)
{
	struct rd_err e;

	for (; seen[k] < r->nwr[k]; seen[k]++)
		if (r->signaled[k][seen[k]])
			ck_assert_int_eq(wp_complete(wp, &wp->chans[k].tag, &e), 0);
}

START_TEST(channels_take_turns_and_complete_in_order)
{
	static struct rec r;
	static struct wpipe wp;
	unsigned seen[8] = { 0 }, k, i;
	struct rd_err e;
	uint64_t nops;
	int64_t got;

	memset(&r, 0, sizeof(r));
	r.not_ready_from = UINT64_MAX;
	ck_assert_int_eq(wp_init(&wp, 3, 4, 77, &cbs, &r, &e), 0);
	ck_assert_uint_ge(wp_room(&wp), WP_WINDOW_MIN);
	push_ops(&wp, 0, 20);
	/* Four in flight per channel at most: 12 of 20 go. */
	got = wp_post(&wp, 0, 0, &nops);
	ck_assert_int_gt(got, 0);
	ck_assert_uint_eq(nops, 12);
	for (k = 0; k < 3; k++) {
		ck_assert_uint_eq(r.nwr[k], 4);
		/* Op p goes to channel p % 3, in order. */
		for (i = 0; i < 4; i++)
			ck_assert_uint_eq(r.wr_addr[k][i], (uint64_t)(k + 3 * i) * 1000003 * 7);
		/* The last WRITE of each post call is signaled. */
		ck_assert_int_eq(r.signaled[k][3], 1);
	}
	ck_assert(!wp_idle(&wp));
	/* Channel 1 completing first frees its ops only: done stays at 0. */
	complete_chan(&wp, &r, 1, seen);
	ck_assert_uint_eq(r.ndone, 4);
	ck_assert_uint_eq(wp.done, 0);
	complete_chan(&wp, &r, 0, seen);
	ck_assert_uint_eq(wp.done, 2);
	complete_chan(&wp, &r, 2, seen);
	ck_assert_uint_eq(wp.done, 12);
	got = wp_post(&wp, 0, 0, &nops);
	ck_assert_uint_eq(nops, 8);
	for (k = 0; k < 3; k++)
		complete_chan(&wp, &r, k, seen);
	ck_assert(wp_idle(&wp));
	ck_assert_uint_eq(r.ndone, 20);
	/* A completion nobody signaled is a protocol error. */
	ck_assert_int_eq(wp_complete(&wp, &wp.chans[0].tag, &e), -EPROTO);
	ck_assert_uint_eq(wp_chan_index(&wp, &wp.chans[2].tag), 2);
	ck_assert_uint_eq(wp.chans[2].tag.kind, 77);
	wp_fini(&wp);
}
END_TEST

START_TEST(not_ready_stops_in_order_and_budget_limits)
{
	static struct rec r;
	static struct wpipe wp;
	unsigned seen[8] = { 0 };
	struct rd_err e;
	uint64_t nops;
	int64_t got;

	memset(&r, 0, sizeof(r));
	r.not_ready_from = 5;
	ck_assert_int_eq(wp_init(&wp, 1, 256, 1, &cbs, &r, &e), 0);
	push_ops(&wp, 0, 200);
	got = wp_post(&wp, 0, 0, &nops);
	ck_assert_uint_eq(nops, 5);
	ck_assert_uint_eq(wp.posted, 5);
	/* Nothing more until op 5 is ready, whatever comes after it. */
	got = wp_post(&wp, 0, 0, &nops);
	ck_assert_int_eq(got, 0);
	ck_assert_uint_eq(nops, 0);
	r.not_ready_from = UINT64_MAX;
	/* A budget of one byte still sends one op. */
	got = wp_post(&wp, 1, 0, &nops);
	ck_assert_uint_eq(nops, 1);
	ck_assert_int_eq(got, (int64_t)wp_at(&wp, 5)->length);
	got = wp_post(&wp, 100 * 4096, 0, &nops);
	ck_assert_int_ge(got, 100 * 4096);
	ck_assert_int_lt(got, 100 * 4096 + 7 * 4096);
	/* Every 16th WRITE of a channel is signaled, and each call's last. */
	ck_assert_int_eq(r.signaled[0][15], 1);
	ck_assert_int_eq(r.signaled[0][14], 0);
	complete_chan(&wp, &r, 0, seen);
	ck_assert_uint_eq(wp.done, wp.posted);
	r.fail_post = 1;
	got = wp_post(&wp, 0, 0, &nops);
	ck_assert_int_eq(got, -EIO);
	wp_fini(&wp);
}
END_TEST

/* Bytes of each post call, for ops of any size. */
struct calls {
	uint64_t bytes[64];
	unsigned n;
};

static int post_sized(void *ctx, unsigned chan, struct ibv_send_wr *wr)
{
	struct calls *c = ctx;

	(void)chan;
	ck_assert_uint_lt(c->n, 64);
	for (c->bytes[c->n] = 0; wr; wr = wr->next)
		c->bytes[c->n] += wr->sg_list->length;
	c->n++;
	return 0;
}

static int target_any(void *ctx, uint64_t pos, const struct wp_op *op, struct wp_target *t)
{
	(void)ctx;
	(void)pos;
	t->local_addr = 0x1000 + op->offset;
	t->remote_addr = op->offset;
	return 1;
}

/* A post call carries about WP_BATCH_BYTES (on rxe the post moves the data
 * itself), and a call whose time is up stops after its first post. */
START_TEST(post_calls_are_bounded)
{
	static const struct wp_callbacks sized = { target_any, post_sized, NULL, NULL };
	static struct wpipe wp;
	struct calls c = { .n = 0 };
	struct rd_err e;
	uint64_t nops, i;
	int64_t got;

	ck_assert_int_eq(wp_init(&wp, 1, 256, 1, &sized, &c, &e), 0);
	/* 24 WRITEs of 256 KiB: 6 MiB, fewer than WP_BATCH. */
	for (i = 0; i < 24; i++)
		wp_push(&wp, &(struct wp_op){ .offset = i << 18, .length = 1u << 18, .slot = i });
	got = wp_post(&wp, 0, 1, &nops);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_int_eq(got, WP_BATCH_BYTES);
	/* Without a clock the rest goes too, WP_BATCH_BYTES per call. */
	got = wp_post(&wp, 0, 0, &nops);
	ck_assert_int_eq(got, 5 * WP_BATCH_BYTES);
	ck_assert_uint_eq(c.n, 6);
	for (i = 0; i < c.n; i++)
		ck_assert_uint_eq(c.bytes[i], WP_BATCH_BYTES);
	wp_fini(&wp);
}
END_TEST

/* The window is a ring: positions keep growing, entries are reused. */
START_TEST(window_wraps)
{
	static struct rec r;
	static struct wpipe wp;
	unsigned seen[8] = { 0 }, round;
	struct rd_err e;
	uint64_t nops, room;

	memset(&r, 0, sizeof(r));
	r.not_ready_from = UINT64_MAX;
	ck_assert_int_eq(wp_init(&wp, 2, 64, 1, &cbs, &r, &e), 0);
	room = wp_room(&wp);
	for (round = 0; round < 5; round++) {
		uint64_t first = wp.tail;

		memset(&r, 0, sizeof(r));
		r.not_ready_from = UINT64_MAX;
		memset(seen, 0, sizeof(seen));
		push_ops(&wp, first, room);
		ck_assert_uint_eq(wp_room(&wp), 0);
		while (!wp_idle(&wp)) {
			wp_post(&wp, 0, 0, &nops);
			complete_chan(&wp, &r, 0, seen);
			complete_chan(&wp, &r, 1, seen);
		}
		ck_assert_uint_eq(r.ndone, room);
		ck_assert_uint_eq(r.done[room - 1], (first + room - 1) * 1000003 * 7);
		ck_assert_uint_eq(wp_room(&wp), room);
	}
	wp_fini(&wp);
}
END_TEST

void wpipe_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 0);

	tcase_add_test(tc, channels_take_turns_and_complete_in_order);
	tcase_add_test(tc, not_ready_stops_in_order_and_budget_limits);
	tcase_add_test(tc, window_wraps);
	tcase_add_test(tc, post_calls_are_bounded);
}
