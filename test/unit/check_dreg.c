/* Dynamic registration on the source, without verbs: which chunks are
 * asked for and when, what is released under the cap, and when an op may
 * go. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "dreg.h"
#include "suite.h"
#include "suites.h"

#define MiB (UINT64_C(1) << 20)

struct fake {
	unsigned regs, done, deregs, room;
	uint64_t reg_off[256], reg_slot[256];
	int fail;
};

/* A helper thread that takes @room more submissions. */
static int reg(void *ctx, unsigned block, uint64_t slot, uint64_t off, uint64_t len)
{
	struct fake *f = ctx;

	(void)block;
	(void)len;
	if (f->fail)
		return -ENOMEM;
	if (!f->room)
		return -EAGAIN;
	f->room--;
	f->reg_slot[f->regs % 256] = slot;
	f->reg_off[f->regs % 256] = off;
	f->regs++;
	return 0;
}

/* The helper finishes the next @n submissions, in order. */
static void finish(struct dreg *d, struct fake *f, unsigned n)
{
	struct rd_err e;

	while (n-- && f->done < f->regs) {
		uint64_t off = f->reg_off[f->done % 256];

		ck_assert_int_eq(dreg_local_done(d, f->reg_slot[f->done % 256],
						 (void *)(uintptr_t)(0x1000 + off),
						 (uint32_t)(off >> 20) + 100, &e), 0);
		f->done++;
	}
}

static void dereg(void *ctx, void *mr)
{
	struct fake *f = ctx;

	ck_assert_ptr_nonnull(mr);
	f->deregs++;
}

static int t_target(void *ctx, uint64_t pos, const struct wp_op *op, struct wp_target *t)
{
	(void)ctx; (void)pos; (void)op; (void)t;
	return 1;
}

static int t_post(void *ctx, unsigned chan, struct ibv_send_wr *wr)
{
	(void)ctx; (void)chan; (void)wr;
	return 0;
}

static const struct wp_callbacks wcb = { t_target, t_post, NULL, NULL };
static const struct dreg_callbacks dcb = { reg, dereg };

/* One block of 64 chunks of 1 MiB; op i writes 512 KiB into chunk i / 2. */
static const struct dreg_block blk[] = { { .first_slot = 0, .length = 64 * MiB } };

static void push(struct wpipe *wp, uint64_t from, uint64_t n)
{
	uint64_t i;

	for (i = from; i < from + n; i++)
		wp_push(wp, &(struct wp_op){ .block = 0, .offset = i * MiB / 2,
					     .length = MiB / 2, .slot = i / 2 });
}

/* The destination's answer to @req: rkey = 1000 + chunk. */
static void answer(struct dreg *d, const Rdmig__RegisterReq *req)
{
	Rdmig__RegisterResp r = RDMIG__REGISTER_RESP__INIT;
	uint32_t rkeys[64];
	struct rd_err e;
	size_t i;

	for (i = 0; i < req->n_chunk_block; i++)
		rkeys[i] = 1000 + (uint32_t)req->chunk_index[i];
	r.req_id = req->req_id;
	r.n_rkeys = req->n_chunk_block;
	r.rkeys = rkeys;
	ck_assert_int_eq(dreg_on_resp(d, &r, &e), 0);
}

START_TEST(batches_ramp_and_keys_arrive)
{
	static struct wpipe wp;
	struct fake f = { 0 };
	Rdmig__RegisterReq req;
	struct dreg d;
	struct rd_err e;
	uint32_t lkey, rkey;
	size_t sizes[8], n = 0;

	ck_assert_int_eq(wp_init(&wp, 1, 256, 1, &wcb, NULL, &e), 0);
	ck_assert_int_eq(dreg_init(&d, blk, 1, 20, 64, 0, 64, &dcb, &f, &e), 0);
	push(&wp, 0, 40); /* chunks 0..19 */
	/* Nothing may go before its chunk is asked for and answered. */
	ck_assert(!dreg_ready(&d, 0, wp_at(&wp, 0), &lkey, &rkey));
	while (dreg_build(&d, &wp, &req)) {
		sizes[n++] = req.n_chunk_block;
		dreg_sent(&d, &req);
	}
	/* 2, 4, 8, then the four requests allowed in flight are out. */
	ck_assert_uint_eq(n, DREG_OUTSTANDING);
	ck_assert_uint_eq(sizes[0], 2);
	ck_assert_uint_eq(sizes[1], 4);
	ck_assert_uint_eq(sizes[2], 8);
	ck_assert_uint_eq(sizes[3], 6); /* the rest: 20 chunks in all */
	ck_assert_uint_eq(d.frontier, 40);
	/* Our side registers apart from sending: submitted as far as the
	 * helper takes them, finished in order. */
	ck_assert_uint_eq(f.regs, 0);
	f.room = 1;
	ck_assert_int_eq(dreg_reg_local(&d), 1);
	ck_assert_int_eq(dreg_reg_local(&d), 0);
	ck_assert_uint_eq(f.regs, 1);
	ck_assert(!dreg_ready(&d, 0, wp_at(&wp, 0), &lkey, &rkey));
	finish(&d, &f, 1);
	ck_assert(!dreg_ready(&d, 0, wp_at(&wp, 0), &lkey, &rkey));
	/* Answers come back in order; the first request's makes ops 0..1
	 * ready (chunk 0 registered here too), not yet ops 2..3: chunk 1 is
	 * not registered on our side. */
	req.req_id = 1;
	req.n_chunk_block = 2;
	req.chunk_index = (uint64_t[]){ 0, 1 };
	answer(&d, &req);
	ck_assert(dreg_ready(&d, 1, wp_at(&wp, 1), &lkey, &rkey));
	ck_assert_uint_eq(lkey, 100);
	ck_assert(!dreg_ready(&d, 2, wp_at(&wp, 2), &lkey, &rkey));
	f.room = 100;
	ck_assert_int_eq(dreg_reg_local(&d), 1);
	ck_assert_uint_eq(f.regs, 20);
	ck_assert_int_eq(dreg_reg_local(&d), 0);
	ck_assert(!dreg_ready(&d, 3, wp_at(&wp, 3), &lkey, &rkey));
	finish(&d, &f, 100);
	ck_assert(dreg_ready(&d, 3, wp_at(&wp, 3), &lkey, &rkey));
	ck_assert_uint_eq(rkey, 1001);
	ck_assert_uint_eq(lkey, 101);
	ck_assert(!dreg_ready(&d, 4, wp_at(&wp, 4), &lkey, &rkey));
	/* An answer that is not to the oldest request is refused. */
	{
		Rdmig__RegisterResp bad = RDMIG__REGISTER_RESP__INIT;

		bad.req_id = 3;
		ck_assert_int_eq(dreg_on_resp(&d, &bad, &e), -EPROTO);
		ck_assert_str_eq(e.msg, "REGISTER_RESP for request 3 that is not the oldest "
				 "outstanding");
		bad.req_id = 2;
		bad.n_rkeys = 1;
		bad.rkeys = (uint32_t[]){ 5 };
		ck_assert_int_eq(dreg_on_resp(&d, &bad, &e), -EPROTO);
		ck_assert_str_eq(e.msg, "REGISTER_RESP carries 1 keys for 4 chunks");
	}
	dreg_fini(&d);
	/* Every MR still recorded went back. */
	ck_assert_uint_eq(f.deregs, 20);
	wp_fini(&wp);
}
END_TEST

/* Under a cap of 4 chunks, idle chunks are released, least recently used
 * first, and the releases ride in the next request; chunks with WRITEs in
 * flight stay. */
START_TEST(cap_releases_idle_chunks)
{
	static struct wpipe wp;
	struct fake f = { 0 };
	Rdmig__RegisterReq req;
	struct dreg d;
	struct rd_err e;
	uint64_t i;

	ck_assert_int_eq(wp_init(&wp, 1, 256, 1, &wcb, NULL, &e), 0);
	ck_assert_int_eq(dreg_init(&d, blk, 1, 20, 64, 4 * MiB, 64, &dcb, &f, &e), 0);
	push(&wp, 0, 16); /* chunks 0..7 */
	ck_assert_int_eq(dreg_build(&d, &wp, &req), 1);
	dreg_sent(&d, &req);
	answer(&d, &req);
	ck_assert_int_eq(dreg_build(&d, &wp, &req), 1);
	dreg_sent(&d, &req);
	answer(&d, &req);
	f.room = 100;
	ck_assert_int_eq(dreg_reg_local(&d), 1);
	finish(&d, &f, 100);
	ck_assert_uint_eq(d.creg.pinned_bytes, 4 * MiB);
	/* Full and every chunk has an op in flight: nothing more now. */
	ck_assert_int_eq(dreg_build(&d, &wp, &req), 0);
	/* Chunks 0 and 1 complete. */
	for (i = 0; i < 4; i++)
		dreg_op_done(&d, wp_at(&wp, i));
	ck_assert_int_eq(dreg_build(&d, &wp, &req), 1);
	ck_assert_uint_eq(req.n_release_block, 2);
	ck_assert_uint_eq(req.release_index[0], 0);
	ck_assert_uint_eq(req.release_index[1], 1);
	ck_assert_uint_eq(req.n_chunk_block, 2);
	ck_assert_uint_eq(req.chunk_index[0], 4);
	ck_assert_uint_eq(f.deregs, 2);
	ck_assert_uint_le(d.creg.pinned_bytes, 4 * MiB);
	ck_assert_uint_eq(d.creg.peak_bytes, 4 * MiB);
	/* A failing submission is the callback's error, and a result out of
	 * order is refused. */
	dreg_sent(&d, &req);
	f.fail = 1;
	ck_assert_int_eq(dreg_reg_local(&d), -ENOMEM);
	f.fail = 0;
	ck_assert_int_eq(dreg_reg_local(&d), 1);
	ck_assert_int_eq(dreg_local_done(&d, 99, NULL, 0, &e), -EPROTO);
	dreg_fini(&d);
	wp_fini(&wp);
}
END_TEST

void dreg_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 0);

	tcase_add_test(tc, batches_ramp_and_keys_arrive);
	tcase_add_test(tc, cap_releases_idle_chunks);
}
