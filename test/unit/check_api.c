/* The public API's argument checking, which needs no RDMA device. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "rdmig.h"
#include "bitmap.h"
#include "dst_int.h"
#include "session.h"
#include "src_int.h"
#include "src_mem.h"
#include "src_pc.h"
#include "src_step.h"
#include "suite.h"
#include "suites.h"

START_TEST(config_defaults_and_limits)
{
	struct rdmig_config in, out;
	struct rd_err err = { "" };

	rdmig_config_init(&in);
	ck_assert_int_eq(cfg_load(&out, &in, &err), 0);
	ck_assert_uint_eq(out.chunk_size, 1u << 20);
	ck_assert_uint_eq(cfg_chunk_shift(&out), 20);
	/* A second apart at most: a peer's shorter timeout is not ours to know. */
	ck_assert_int_eq(out.keepalive_ms, 1000);
	in.timeout_ms = 2000;
	ck_assert_int_eq(cfg_load(&out, &in, &err), 0);
	ck_assert_int_eq(out.keepalive_ms, 500);
	in.timeout_ms = 30000;
	/* A step's time budget is what rdmig.h says, also when left 0. */
	ck_assert_uint_eq(in.step_us, 10000);
	in.step_us = 0;
	ck_assert_int_eq(cfg_load(&out, &in, &err), 0);
	ck_assert_uint_eq(out.step_us, 10000);
	in.step_us = 10000;

	in.chunk_size = 3u << 20;
	ck_assert_int_eq(cfg_load(&out, &in, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "chunk_size 3145728 must be a power of two"));

	rdmig_config_init(&in);
	in.ctrl_depth = 2;
	ck_assert_int_eq(cfg_load(&out, &in, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "ctrl_depth = 2 is outside 4..1024"));

	rdmig_config_init(&in);
	in.pinned_cap = 1u << 20; /* one chunk: dynamic mode could never overlap */
	ck_assert_int_eq(cfg_load(&out, &in, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "pinned_cap"));

	rdmig_config_init(&in);
	in.merge_max = 0; /* means "the chunk size" */
	ck_assert_int_eq(cfg_load(&out, &in, &err), 0);
	ck_assert_uint_eq(out.merge_max, out.chunk_size);

	rdmig_config_init(&in);
	in.channels = 65;
	ck_assert_int_eq(cfg_load(&out, &in, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "channels = 65 is outside 1..64"));
	in.channels = 64;
	ck_assert_int_eq(cfg_load(&out, &in, &err), 0);

	/* A caller built before `channels` existed gets the default. */
	rdmig_config_init(&in);
	in.channels = 9;
	in.size = offsetof(struct rdmig_config, channels);
	ck_assert_int_eq(cfg_load(&out, &in, &err), 0);
	ck_assert_uint_eq(out.channels, 0);

	rdmig_config_init(&in);
	in.size = 3; /* not a struct from rdmig_config_init */
	ck_assert_int_eq(cfg_load(&out, &in, &err), -EINVAL);
}
END_TEST

/* The convergence policy's fields (since 0.3.0): QEMU's figures by
 * default, for a 0.2.0 program's struct too, and checked. */
START_TEST(convergence_config)
{
	struct rdmig_config in, out;
	struct rd_err err = { "" };

	rdmig_config_init(&in);
	ck_assert_int_eq(cfg_load(&out, &in, &err), 0);
	ck_assert_uint_eq(out.max_downtime_ms, 300);
	ck_assert_uint_eq(out.stall_rounds, 5);
	ck_assert_uint_eq(out.throttle_initial, 20);
	ck_assert_uint_eq(out.throttle_increment, 10);
	ck_assert_uint_eq(out.throttle_max, 99);
	ck_assert_int_eq(out.on_limit, RDMIG_ON_LIMIT_CANCEL);
	ck_assert_int_eq(out.auto_converge, 0);
	ck_assert_uint_eq(out.max_time_ms + out.max_time_per_gib_ms + out.max_iterations, 0);
	in.max_downtime_ms = 0;
	ck_assert_int_eq(cfg_load(&out, &in, &err), 0);
	ck_assert_uint_eq(out.max_downtime_ms, 300);

	/* A 0.2.0 program's struct ends after dirty_ctx. */
	memset(&in, 0xff, sizeof(in));
	rdmig_config_init_sized(&in, offsetof(struct rdmig_config, max_downtime_ms));
	ck_assert_uint_eq(in.size, offsetof(struct rdmig_config, max_downtime_ms));
	ck_assert_uint_eq(in.max_downtime_ms, 0xffffffffu);
	ck_assert_int_eq(cfg_load(&out, &in, &err), 0);
	ck_assert_uint_eq(out.max_downtime_ms, 300);
	ck_assert_uint_eq(out.throttle_max, 99);
	ck_assert_uint_eq(out.max_iterations, 0);

	rdmig_config_init(&in);
	in.on_limit = 2;
	ck_assert_int_eq(cfg_load(&out, &in, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "on_limit = 2 is outside 0..1"));
	rdmig_config_init(&in);
	in.throttle_max = 100;
	ck_assert_int_eq(cfg_load(&out, &in, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "throttle_max = 100 is outside 1..99"));
	rdmig_config_init(&in);
	in.throttle_max = 50;
	in.throttle_initial = 60;
	ck_assert_int_eq(cfg_load(&out, &in, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "throttle_initial = 60 is outside 1..50"));
	rdmig_config_init(&in);
	in.throttle_increment = 0;
	ck_assert_int_eq(cfg_load(&out, &in, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "throttle_increment"));
}
END_TEST

/* rdmig_source_advice() on a handle between rounds, its figures set as a
 * round would leave them (no device: the policy and the call's contract
 * only).  It decides once per round, from what is marked then, into the
 * caller's sized struct. */
START_TEST(advice_between_rounds)
{
	static uint8_t ram[8u << 20] __attribute__((aligned(4096)));
	struct {
		struct rdmig_advice a;
		uint8_t canary[64];
	} big;
	struct rdmig_config cfg;
	struct rdmig_advice a = { .size = sizeof(a) };
	struct rdmig_source *s;

	rdmig_config_init(&cfg);
	cfg.max_iterations = 3;
	cfg.switchover_ms = 20;
	ck_assert_int_eq(rdmig_source_create(&s, &cfg), 0);
	ck_assert_int_eq(rdmig_source_add_block(s, "pc.ram", ram, sizeof(ram), 4096), 0);
	ck_assert_int_eq(rdmig_source_advice(s, &a), -ENOTCONN);

	s->state = SRC_READY;
	ck_assert_int_eq(rdmig_source_advice(s, &a), 0);
	ck_assert_int_eq(a.decision, RDMIG_NEXT_ROUND);
	ck_assert_int_eq(a.reason, RDMIG_REASON_NO_ROUND);

	/* Round 1 sent the 8 MiB at 10 MB/s; 3 MiB were marked since. */
	s->iteration = 1;
	s->last_iter_bytes = sizeof(ram);
	s->last_iter_ms = 839;
	s->bw = 10000000;
	s->iter_start_ms = rd_now_ms() - 900;
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, 0, 3u << 20), 0);
	a.size = 16;
	ck_assert_int_eq(rdmig_source_advice(s, &a), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_source_error(s), "sizeof(struct rdmig_advice)"));
	a.size = sizeof(a);
	ck_assert_int_eq(rdmig_source_advice(s, &a), 0);
	ck_assert_int_eq(a.decision, RDMIG_NEXT_ROUND);
	ck_assert_int_eq(a.reason, RDMIG_REASON_NOT_CONVERGED);
	ck_assert_uint_eq(a.iteration, 1);
	ck_assert_uint_eq(a.remaining, 3u << 20);
	ck_assert_uint_eq(a.expected_downtime_ms, 314 + 20);
	ck_assert_uint_eq(a.max_downtime_ms, 300);
	ck_assert_uint_eq(a.bandwidth, 10000000);
	ck_assert_ptr_nonnull(strstr(a.text, "another round"));

	/* Asked again for the same round: the same answer, whatever was
	 * marked since; a larger struct than ours is filled up to ours. */
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, 3u << 20, 1u << 20), 0);
	memset(&big, 0xa5, sizeof(big));
	big.a.size = sizeof(big);
	ck_assert_int_eq(rdmig_source_advice(s, &big.a), 0);
	ck_assert_uint_eq(big.a.size, sizeof(struct rdmig_advice));
	ck_assert_uint_eq(big.a.remaining, 3u << 20);
	ck_assert_uint_eq(big.canary[0], 0xa5);

	/* Round 3 of at most 3, still not converged: give up, saying why. */
	s->iteration = 3;
	ck_assert_int_eq(rdmig_source_advice(s, &a), 0);
	ck_assert_int_eq(a.decision, RDMIG_GIVE_UP);
	ck_assert_int_eq(a.reason, RDMIG_REASON_MAX_ITERATIONS);
	ck_assert_uint_eq(a.remaining, 4u << 20);
	ck_assert_ptr_nonnull(strstr(a.text, "max_iterations 3"));

	/* Only between operations. */
	s->state = SRC_ITERATING;
	ck_assert_int_eq(rdmig_source_advice(s, &a), -EBUSY);
	s->state = SRC_NEW;
	rdmig_source_destroy(s);
}
END_TEST

/* rdmig_source_set_limit(): the policy's figures changed while the
 * migration runs (a switch-over cost measured late, a downtime raised by
 * an operator) count from the next advice on; bad ones are refused. */
START_TEST(limits_while_running)
{
	static uint8_t ram[8u << 20] __attribute__((aligned(4096)));
	struct rdmig_advice a = { .size = sizeof(a) };
	struct rdmig_source *s;

	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_eq(rdmig_source_add_block(s, "pc.ram", ram, sizeof(ram), 4096), 0);
	ck_assert_int_eq(rdmig_source_set_limit(s, (enum rdmig_limit)99, 1), -EINVAL);
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_MAX_DOWNTIME_MS, 1ull << 32),
			 -ERANGE);
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_MAX_ITERATIONS, 1ull << 32),
			 -ERANGE);
	/* 0 is no downtime at all: the default, as in the config. */
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_MAX_DOWNTIME_MS, 0), 0);
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_SWITCHOVER_MS, 40), 0);

	/* Round 1 sent the 8 MiB at 10 MB/s; 3 MiB were marked since. */
	s->state = SRC_READY;
	s->ss.stats.start_ms = rd_now_ms() - 5000;
	s->iteration = 1;
	s->last_iter_bytes = sizeof(ram);
	s->last_iter_ms = 839;
	s->bw = 10000000;
	s->iter_start_ms = rd_now_ms() - 900;
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, 0, 3u << 20), 0);
	ck_assert_int_eq(rdmig_source_advice(s, &a), 0);
	ck_assert_int_eq(a.decision, RDMIG_NEXT_ROUND);
	ck_assert_uint_eq(a.max_downtime_ms, 300);
	ck_assert_uint_eq(a.expected_downtime_ms, 314 + 40);

	/* An operator allows two rounds from now on. */
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_MAX_ITERATIONS, 2), 0);
	s->iteration = 2;
	ck_assert_int_eq(rdmig_source_advice(s, &a), 0);
	ck_assert_int_eq(a.decision, RDMIG_GIVE_UP);
	ck_assert_int_eq(a.reason, RDMIG_REASON_MAX_ITERATIONS);
	ck_assert_ptr_nonnull(strstr(a.text, "max_iterations 2"));

	/* ... then none, but 4 s in all, of which 5 went. */
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_MAX_ITERATIONS, 0), 0);
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_MAX_TIME_MS, 4000), 0);
	s->iteration = 3;
	ck_assert_int_eq(rdmig_source_advice(s, &a), 0);
	ck_assert_int_eq(a.decision, RDMIG_GIVE_UP);
	ck_assert_int_eq(a.reason, RDMIG_REASON_MAX_TIME);
	ck_assert_uint_eq(a.max_time_ms, 4000);

	/* A downtime that fits what is left, written over a round so long
	 * that another would not halve it: switch over. */
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_MAX_TIME_MS, 0), 0);
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_MAX_DOWNTIME_MS, 2000), 0);
	s->iter_start_ms = rd_now_ms() - 5000;
	s->iteration = 4;
	ck_assert_int_eq(rdmig_source_advice(s, &a), 0);
	ck_assert_int_eq(a.decision, RDMIG_SWITCH_OVER);
	ck_assert_uint_eq(a.max_downtime_ms, 2000);

	/* Held to 1 MB/s, the 3 MiB left take 3.1 s; granted 100 MB/s for
	 * the switch-over they fit 300 ms (the rounds ran at the cap, they
	 * could not show more). */
	rdmig_source_set_max_bandwidth(s, 1000000);
	s->bw = 1000000;
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_MAX_DOWNTIME_MS, 300), 0);
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_SWITCHOVER_MS, 0), 0);
	s->iteration = 5;
	ck_assert_int_eq(rdmig_source_advice(s, &a), 0);
	ck_assert_int_ne(a.decision, RDMIG_SWITCH_OVER);
	ck_assert_uint_eq(a.bandwidth, 1000000);
	ck_assert_int_eq(rdmig_source_set_limit(s, RDMIG_LIMIT_SWITCHOVER_BANDWIDTH, 100000000), 0);
	s->iteration = 6;
	ck_assert_int_eq(rdmig_source_advice(s, &a), 0);
	ck_assert_int_eq(a.decision, RDMIG_SWITCH_OVER);
	ck_assert_uint_eq(a.bandwidth, 100000000);
	ck_assert_uint_eq(a.expected_downtime_ms, (3u << 20) / 100000);
	s->state = SRC_NEW;
	rdmig_source_destroy(s);
}
END_TEST

START_TEST(source_block_checks)
{
	struct rdmig_source *s;
	static char mem[3 * 4096] __attribute__((aligned(4096)));
	static char more[3 * 4096] __attribute__((aligned(4096)));

	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_eq(rdmig_source_add_block(s, "ram0", mem, sizeof(mem), 4096), 0);
	/* A last partial page is fine. */
	ck_assert_int_eq(rdmig_source_add_block(s, "ram1", more, 100, 0), 1);
	ck_assert_int_eq(rdmig_source_add_block(s, "ram0", more + 4096, 4096, 4096), -EEXIST);
	ck_assert_str_eq(rdmig_source_error(s), "block \"ram0\" added twice");
	ck_assert_int_eq(rdmig_source_add_block(s, "0000:00:02.0/vga.vram", more + 4096, 4096,
						4096), 2);
	ck_assert_int_lt(rdmig_source_add_block(s, "tab\t", more + 8192, 4096, 4096), 0);
	ck_assert_int_lt(rdmig_source_add_block(s, "", more + 8192, 4096, 4096), 0);
	ck_assert_int_eq(rdmig_source_add_block(s, "odd", more + 8192, 4096, 3000), -EINVAL);
	ck_assert_int_eq(rdmig_source_add_block(s, "nul", NULL, 4096, 4096), -EINVAL);
	/* Memory that is not where its pages start, or that another block
	 * already holds, is refused with the reason. */
	ck_assert_int_eq(rdmig_source_add_block(s, "unaligned", more + 8192 + 8, 100, 4096),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_source_error(s), "is not aligned to its page size 4096"));
	ck_assert_int_eq(rdmig_source_add_block(s, "huge", more + 8192, 4096, 2u << 20), -EINVAL);
	ck_assert_int_eq(rdmig_source_add_block(s, "overlap", mem + 8192, 8192, 4096), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_source_error(s), "overlaps block \"ram0\""));
	ck_assert_int_eq(rdmig_source_add_block(s, "wraps", more + 8192, UINT64_MAX - 4095,
						4096), -EINVAL);
	ck_assert_int_eq(rdmig_source_add_block(s, "ram3", more + 8192, 4096, 4096), 3);

	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, 4095, 2), 0);
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, 8192, 4097), -ERANGE);
	ck_assert_ptr_nonnull(strstr(rdmig_source_error(s), "outside its 12288 bytes"));
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, UINT64_MAX, 2), -ERANGE);
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 4, 0, 1), -EINVAL);
	/* Nothing to migrate over a connection that does not exist. */
	ck_assert_int_eq(rdmig_source_iterate(s), -ENOTCONN);
	ck_assert_int_eq(rdmig_source_complete(s), -ENOTCONN);
	rdmig_source_destroy(s);
}
END_TEST

START_TEST(source_connect_needs_blocks)
{
	struct rdmig_source *s;

	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_eq(rdmig_source_connect(s, "127.0.0.1", "1"), -EINVAL);
	ck_assert_str_eq(rdmig_source_error(s), "no RAM blocks were added");
	rdmig_source_destroy(s);
}
END_TEST

/* The destination's word that its guest never ran reaches the caller only
 * from a peer that proved the key, outside a resume, and once failed; an
 * ERROR without it (an older destination's) keeps the guest stopped. */
START_TEST(source_guest_never_ran_is_the_peers_word)
{
	static const enum src_state unproved[] = { SRC_NEW, SRC_CONNECTING, SRC_AUTH,
						   SRC_PC_PAUSED };
	Rdmig__Error e = RDMIG__ERROR__INIT;
	struct rdmig_source *s;
	size_t i;

	ck_assert_int_eq(rdmig_source_guest_never_ran(NULL), 0);
	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_eq(rdmig_source_guest_never_ran(s), 0);
	e.code = -EIO;
	e.message = "the postcopy_start callback failed: the VMM is gone";
	e.guest_never_ran = 1;
	for (i = 0; i < RD_ARRAY_SIZE(unproved); i++) {
		s->state = unproved[i];
		ck_assert_int_eq(src_pc_peer_error(s, &e), -EIO);
		ck_assert_msg(!s->pc.peer_never_ran, "kept in %s", src_state_names[unproved[i]]);
	}
	/* A resume's ERROR ends the try; the guest ran before the pause. */
	s->state = SRC_PC_RESUMING;
	ck_assert_int_eq(src_pc_peer_error(s, &e), -ECONNABORTED);
	ck_assert(!s->pc.peer_never_ran);
	/* Nor on the connection a resume brought back (whoever answered it). */
	s->state = SRC_POSTCOPY;
	s->pc.pauses = 1;
	ck_assert_int_eq(src_pc_peer_error(s, &e), -EIO);
	ck_assert(!s->pc.peer_never_ran);
	s->pc.pauses = 0;
	/* The switch under way, an older destination's ERROR. */
	s->state = SRC_PC_SWITCH;
	e.guest_never_ran = 0;
	ck_assert_int_eq(src_pc_peer_error(s, &e), -EIO);
	ck_assert(!s->pc.peer_never_ran);
	e.guest_never_ran = 1;
	ck_assert_int_eq(src_pc_peer_error(s, &e), -EIO);
	ck_assert_str_eq(rdmig_source_error(s), "destination reported: the postcopy_start "
			 "callback failed: the VMM is gone");
	/* Said only once the handle failed. */
	ck_assert_int_eq(rdmig_source_guest_never_ran(s), 0);
	ck_assert_int_eq(src_fail(s, -EIO), -EIO);
	ck_assert_int_eq(rdmig_source_guest_never_ran(s), 1);
	ck_assert_int_eq(rdmig_source_error_class(s), RDMIG_ERROR_PEER);
	rdmig_source_destroy(s);
}
END_TEST

/* A destination says its guest never ran until the switch let it. */
START_TEST(dest_guest_never_ran_until_the_switch)
{
	struct rdmig_dest *d;

	ck_assert_int_eq(rdmig_dest_create(&d, NULL), 0);
	ck_assert(d->ss.guest_never_ran);
	rdmig_dest_destroy(d);
}
END_TEST

START_TEST(bad_config_reported_through_handle)
{
	struct rdmig_config cfg;
	struct rdmig_source *s;
	struct rdmig_dest *d;

	rdmig_config_init(&cfg);
	cfg.timeout_ms = 5;
	ck_assert_int_eq(rdmig_source_create(&s, &cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_source_error(s), "timeout_ms"));
	rdmig_source_destroy(s);
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_dest_error(d), "timeout_ms"));
	rdmig_dest_destroy(d);
	ck_assert_str_eq(rdmig_source_error(NULL), "out of memory");
}
END_TEST

START_TEST(dest_block_checks)
{
	struct rdmig_dest *d;
	static char mem[3 * 4096] __attribute__((aligned(4096)));

	ck_assert_int_eq(rdmig_dest_create(&d, NULL), 0);
	ck_assert_int_eq(rdmig_dest_add_block(d, "ram0", mem, 4096, 1), 0);
	ck_assert_int_eq(rdmig_dest_add_block(d, "ram0", mem + 4096, 4096, 1), -EEXIST);
	ck_assert_int_eq(rdmig_dest_add_block(d, "/rom@etc/acpi/tables", mem + 4096, 100, 1), 1);
	ck_assert_int_lt(rdmig_dest_add_block(d, "esc\x1b", mem + 8192, 4096, 1), 0);
	/* Pages would land in another block's memory, or in a page shared
	 * with memory that is not the block's. */
	ck_assert_int_eq(rdmig_dest_add_block(d, "overlap", mem + 4096 + 64, 64, 1), -EINVAL);
	ck_assert_int_eq(rdmig_dest_add_block(d, "overlap", mem + 2048, 8192, 1), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_dest_error(d), "is not aligned"));
	ck_assert_int_eq(rdmig_dest_add_block(d, "overlap", mem, 8192, 1), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_dest_error(d), "overlaps block \"ram0\""));
	ck_assert_int_eq(rdmig_dest_nblocks(d), 2);
	ck_assert_int_eq(rdmig_dest_process(d), -ENOTCONN);
	rdmig_dest_destroy(d);
}
END_TEST

/* The source resumes a paused post-copy where it first connected: a
 * listener kept for the resume that is not the one accepted on would wait
 * for a resume that never comes, so accepting on another is refused before
 * anything is touched (the listeners here are never dereferenced). */
START_TEST(dest_resume_listener_is_the_accepted_one)
{
	struct rdmig_listener *kept = (struct rdmig_listener *)(uintptr_t)0x1000;
	struct rdmig_listener *other = (struct rdmig_listener *)(uintptr_t)0x2000;
	struct rdmig_config cfg;
	struct rdmig_dest *d;

	rdmig_config_init(&cfg);
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), 0);
	ck_assert_int_eq(rdmig_dest_keep_listener(d, kept), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_dest_error(d), "without post-copy"));
	rdmig_dest_destroy(d);
	cfg.postcopy = 1;
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), 0);
	ck_assert_int_eq(rdmig_dest_keep_listener(d, kept), 0);
	ck_assert_int_eq(rdmig_dest_accept(d, other, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_dest_error(d), "not the one accepted on"));
	/* Withdrawn, no listener is watched for a resume. */
	ck_assert_int_eq(rdmig_dest_keep_listener(d, NULL), 0);
	rdmig_dest_destroy(d);
}
END_TEST

/* A foreign post-copy view (rdmig_dest_postcopy_view()) names addresses in
 * another process: the library cannot look at them, so what it can check
 * is checked up front: post-copy with the VMM's userfaultfd, a block that
 * exists, whole 4 KiB pages that do not wrap, and no two views that
 * overlap (a fault address must name one block). */
START_TEST(dest_postcopy_view_checks)
{
	static uint8_t ram[3 << 16] __attribute__((aligned(4096)));
	struct rdmig_config cfg;
	struct rdmig_dest *d;

	rdmig_config_init(&cfg);
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), 0);
	ck_assert_int_ge(rdmig_dest_add_block(d, "a", ram, 1 << 16, 0), 0);
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "a", 0x100000), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_dest_error(d), "postcopy_uffd"));
	rdmig_dest_destroy(d);
	cfg.postcopy = 1;
	cfg.postcopy_uffd = 0; /* never touched before accepting */
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), 0);
	ck_assert_int_ge(rdmig_dest_add_block(d, "a", ram, 1 << 16, 0), 0);
	ck_assert_int_ge(rdmig_dest_add_block(d, "b", ram + (1 << 16), 1 << 16, 0), 0);
	ck_assert_int_ge(rdmig_dest_add_block(d, "c", ram + (2 << 16), 1000, 0), 0);
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "nope", 0x100000), -ENOENT);
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "a", 0), -EINVAL);
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "a", 0x100800), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_dest_error(d), "whole"));
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "a", UINT64_MAX - 4095), -EINVAL);
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "c", 0x900000), -EINVAL);
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "a", 0x100000), 0);
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "b", 0x10f000), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_dest_error(d), "overlaps block \"a\""));
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "b", 0x0f1000), -EINVAL);
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "b", 0x110000), 0);
	/* Set again, the block's own view is no overlap. */
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "a", 0x200000), 0);
	rdmig_dest_destroy(d);
}
END_TEST

/* A guest runs in one process: a handle where some blocks have a
 * post-copy view and others not would serve the latter in this process,
 * where no vCPU faults.  Accepting refuses it before anything is touched,
 * naming a block of each (the listener is never dereferenced). */
START_TEST(dest_postcopy_views_all_or_none)
{
	static uint8_t ram[2 << 16] __attribute__((aligned(4096)));
	struct rdmig_listener *l = (struct rdmig_listener *)(uintptr_t)0x1000;
	struct rdmig_config cfg;
	struct rdmig_dest *d;

	rdmig_config_init(&cfg);
	cfg.postcopy = 1;
	cfg.postcopy_uffd = 0; /* never touched before accepting */
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), 0);
	ck_assert_int_ge(rdmig_dest_add_block(d, "a", ram, 1 << 16, 0), 0);
	ck_assert_int_ge(rdmig_dest_add_block(d, "b", ram + (1 << 16), 1 << 16, 0), 0);
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "b", 0x100000), 0);
	ck_assert_int_eq(rdmig_dest_accept(d, l, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(rdmig_dest_error(d), "block \"b\" has a post-copy view "
				     "and block \"a\" has none"));
	/* Still new: the caller may give "a" its view and accept then. */
	ck_assert_int_eq(rdmig_dest_postcopy_view(d, "a", 0x200000), 0);
	rdmig_dest_destroy(d);
}
END_TEST

/* The unit-test host has no RDMA device: connecting must fail with a
 * message naming that, not crash tearing down what never existed.  The
 * handle then stays failed, quiet and destroyable. */
START_TEST(connect_without_a_device)
{
	static uint8_t ram[1 << 16] __attribute__((aligned(4096)));
	struct rdmig_source *s;
	int rc;

	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_ge(rdmig_source_add_block(s, "pc.ram", ram, sizeof(ram), 4096), 0);
	rc = rdmig_source_connect_async(s, "127.0.0.1", "4444");
	if (rc == 0) /* the work may start in the first step */
		rc = rdmig_source_process(s);
	ck_assert_int_lt(rc, 0);
	ck_assert_msg(strstr(rdmig_source_error(s), "RDMA device"), "%s", rdmig_source_error(s));
	ck_assert_int_eq(rdmig_source_process(s), rc);
	ck_assert_int_eq(rdmig_source_timeout(s), -1);
	rdmig_source_destroy(s);
	/* The blocking call the same way. */
	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_ge(rdmig_source_add_block(s, "pc.ram", ram, sizeof(ram), 4096), 0);
	ck_assert_int_lt(rdmig_source_connect(s, "127.0.0.1", "4444"), 0);
	rdmig_source_destroy(s);
}
END_TEST

/* What a log callback of a failing source did with its handle, and with
 * another one. */
struct reenter {
	struct rdmig_source *s, *other;
	int calls;
	int process, poll, add, iterate, complete, connect, write, send, other_process;
};

static void reenter_log(void *ctx, int level, const char *msg)
{
	static uint8_t more[4096] __attribute__((aligned(4096)));
	struct reenter *r = ctx;
	/* Allowed, and must not wait for a lock the caller holds. */
	struct rdmig_stats st = { .size = sizeof(st) };

	(void)level; (void)msg;
	if (r->calls++)
		return;
	r->process = rdmig_source_process(r->s);
	r->poll = rdmig_source_poll(r->s);
	r->add = rdmig_source_add_block(r->s, "more", more, sizeof(more), 4096);
	r->iterate = rdmig_source_iterate(r->s);
	r->complete = rdmig_source_complete_async(r->s);
	r->connect = rdmig_source_connect_async(r->s, "127.0.0.1", "4444");
	r->write = (int)rdmig_source_write_state(r->s, more, 8);
	r->send = rdmig_source_send_state(r->s, more, 8);
	/* Allowed: the calls any thread may make, and other handles. */
	rdmig_source_stats(r->s, &st);
	rdmig_source_set_max_bandwidth(r->s, 1 << 20);
	r->other_process = rdmig_source_process(r->other);
}

/* rdmig(3), Threads: from a callback only the calls any thread may make
 * are allowed on the callback's handle; the others return -EDEADLK and
 * change nothing (the error text the callback may be reporting included),
 * while other handles can be driven as usual. */
START_TEST(callbacks_may_not_drive_their_handle)
{
	static uint8_t ram[1 << 16] __attribute__((aligned(4096)));
	struct reenter r = { 0 };
	struct rdmig_config cfg;
	char err[RD_ERRLEN];
	int rc;

	rdmig_config_init(&cfg);
	cfg.log = reenter_log;
	cfg.log_ctx = &r;
	cfg.log_level = RDMIG_LOG_ERROR;
	ck_assert_int_eq(rdmig_source_create(&r.s, &cfg), 0);
	ck_assert_int_eq(rdmig_source_create(&r.other, NULL), 0);
	ck_assert_int_ge(rdmig_source_add_block(r.s, "pc.ram", ram, sizeof(ram), 4096), 0);
	ck_assert_int_eq(rdmig_source_connect_async(r.s, "127.0.0.1", "4444"), 0);
	/* No device: the step fails the migration and logs why. */
	rc = rdmig_source_process(r.s);
	ck_assert_int_lt(rc, 0);
	ck_assert_int_eq(r.calls, 1);
	ck_assert_int_eq(r.process, -EDEADLK);
	ck_assert_int_eq(r.poll, -EDEADLK);
	ck_assert_int_eq(r.add, -EDEADLK);
	ck_assert_int_eq(r.iterate, -EDEADLK);
	ck_assert_int_eq(r.complete, -EDEADLK);
	ck_assert_int_eq(r.connect, -EDEADLK);
	ck_assert_int_eq(r.write, -EDEADLK);
	ck_assert_int_eq(r.send, -EDEADLK);
	ck_assert_int_eq(r.other_process, -ENOTCONN);
	/* The failure is still the one logged, and the handle's as before. */
	ck_assert_msg(strstr(rdmig_source_error(r.s), "RDMA device"), "%s", rdmig_source_error(r.s));
	snprintf(err, sizeof(err), "%s", rdmig_source_error(r.s));
	ck_assert_int_eq(rdmig_source_process(r.s), rc);
	ck_assert_str_eq(rdmig_source_error(r.s), err);
	ck_assert_uint_eq(r.s->nblocks, 1);
	rdmig_source_destroy(r.other);
	rdmig_source_destroy(r.s);
}
END_TEST

/* rdmig(3): timeout and process agree in every state a handle can be in
 * without a device: -1 (nothing due) whenever process would only say
 * "not connected" or repeat a failure; 0 right after an operation started,
 * until a step began it; and the one fd exists from creation on. */
START_TEST(timeout_and_process_agree)
{
	static uint8_t ram[1 << 16] __attribute__((aligned(4096)));
	struct rdmig_source *s;
	struct rdmig_dest *d;
	int fds[RDMIG_DEST_MAX_FDS], rc;

	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_ge(rdmig_source_fd(s), 0);
	ck_assert_int_eq(rdmig_source_timeout(s), -1);
	ck_assert_int_eq(rdmig_source_process(s), -ENOTCONN);
	ck_assert_int_ge(rdmig_source_add_block(s, "pc.ram", ram, sizeof(ram), 4096), 0);
	ck_assert_int_eq(rdmig_source_connect_async(s, "127.0.0.1", "4444"), 0);
	/* Started, not begun: nothing would wake a loop that waits. */
	ck_assert_int_eq(rdmig_source_timeout(s), 0);
	rc = rdmig_source_process(s);
	ck_assert_int_lt(rc, 0);
	ck_assert_int_eq(rdmig_source_timeout(s), -1);
	ck_assert_int_eq(rdmig_source_process(s), rc);
	rdmig_source_destroy(s);

	ck_assert_int_eq(rdmig_dest_create(&d, NULL), 0);
	ck_assert_int_ge(rdmig_dest_fd(d), 0);
	ck_assert_int_eq(rdmig_dest_timeout(d), -1);
	ck_assert_int_eq(rdmig_dest_process(d), -ENOTCONN);
	/* Older callers get the same single fd. */
	ck_assert_int_eq(rdmig_dest_fds(d, fds, RDMIG_DEST_MAX_FDS), 1);
	ck_assert_int_eq(fds[0], rdmig_dest_fd(d));
	ck_assert_int_eq(rdmig_dest_fds(d, fds, 0), -EINVAL);
	rdmig_dest_destroy(d);
}
END_TEST

/* What a failure was of, on both sides: this host (no device, a bad
 * config), a cancel (ours or the peer's, which arrives as -ECONNABORTED on
 * a source), the peer's word whatever its errno, the link, a timeout. */
START_TEST(error_classes)
{
	static const struct { int peer_code, rc; const char *peer; int cls; } peer[] = {
		{ -ECANCELED, 0, "destination", RDMIG_ERROR_CANCELLED },
		{ -ECANCELED, 0, "source", RDMIG_ERROR_CANCELLED },
		{ -ENOSPC, 0, "destination", RDMIG_ERROR_PEER },
		{ -EIO, 0, "source", RDMIG_ERROR_PEER },
		{ 0, -ECONNRESET, "destination", RDMIG_ERROR_CONNECTION },
		{ 0, -ECONNREFUSED, "destination", RDMIG_ERROR_CONNECTION },
		{ 0, -ETIMEDOUT, "source", RDMIG_ERROR_TIMEOUT },
		{ 0, -EPROTO, "source", RDMIG_ERROR_PEER },
		{ 0, -ENOMEM, "source", RDMIG_ERROR_LOCAL },
	};
	static uint8_t ram[1 << 16] __attribute__((aligned(4096)));
	struct rdmig_config cfg;
	struct rdmig_source *s;
	struct rdmig_dest *d;
	struct session ss;
	unsigned i;
	int rc;

	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_eq(rdmig_source_error_class(s), RDMIG_ERROR_NONE);
	ck_assert_int_ge(rdmig_source_add_block(s, "pc.ram", ram, sizeof(ram), 4096), 0);
	ck_assert_int_eq(rdmig_source_connect_async(s, "127.0.0.1", "4444"), 0);
	ck_assert_int_lt(rdmig_source_process(s), 0);
	ck_assert_int_eq(rdmig_source_error_class(s), RDMIG_ERROR_LOCAL);
	rdmig_source_destroy(s);

	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_ge(rdmig_source_add_block(s, "pc.ram", ram, sizeof(ram), 4096), 0);
	ck_assert_int_eq(rdmig_source_connect_async(s, "127.0.0.1", "4444"), 0);
	rdmig_source_cancel(s);
	ck_assert_int_eq(rdmig_source_process(s), -ECANCELED);
	ck_assert_int_eq(rdmig_source_error_class(s), RDMIG_ERROR_CANCELLED);
	rdmig_source_destroy(s);

	rdmig_config_init(&cfg);
	cfg.chunk_size = 3;
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), -EINVAL);
	ck_assert_int_eq(rdmig_dest_error_class(d), RDMIG_ERROR_LOCAL);
	rdmig_dest_destroy(d);

	for (i = 0; i < sizeof(peer) / sizeof(peer[0]); i++) {
		ck_assert_int_eq(sess_init(&ss, NULL, peer[i].peer), 0);
		rc = peer[i].rc;
		if (peer[i].peer_code) {
			Rdmig__Error e = RDMIG__ERROR__INIT;

			e.code = peer[i].peer_code;
			e.message = (char *)"because";
			rc = sess_peer_error(&ss, &e);
		}
		ck_assert_int_eq(sess_fail(&ss, rc), rc);
		ck_assert_msg(sess_error_class(&ss, rc) == peer[i].cls, "case %u: class %d, not %d",
			      i, sess_error_class(&ss, rc), peer[i].cls);
		sess_fini(&ss);
	}
}
END_TEST

/* A dirty-ring reaper marks from its own thread while the driving thread
 * begins rounds: every page marked lands in exactly one round (none lost
 * to the bitmaps' swap, none counted twice), and a bad range from that
 * thread leaves the handle's message alone. */
enum { MARK_PAGES = 4096 };

static void *reaper(void *arg)
{
	struct rdmig_source *s = arg;
	uint64_t p;

	for (p = 0; p < MARK_PAGES; p++)
		ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, p * 4096, 4096), 0);
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, MARK_PAGES * 4096ull, 1), -ERANGE);
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 7, 0, 1), -EINVAL);
	return NULL;
}

START_TEST(marking_from_another_thread)
{
	static uint8_t ram[MARK_PAGES * 4096] __attribute__((aligned(4096)));
	struct rdmig_source *s;
	uint64_t *seen = bm_alloc(MARK_PAGES), frozen = 0, p;
	pthread_t t;
	int done = 0;

	ck_assert_ptr_nonnull(seen);
	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_eq(rdmig_source_add_block(s, "pc.ram", ram, sizeof(ram), 4096), 0);
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, sizeof(ram), 1), -ERANGE);
	ck_assert_ptr_nonnull(strstr(rdmig_source_error(s), "outside its"));
	ck_assert_int_eq(pthread_create(&t, NULL, reaper, s), 0);
	while (!done) {
		done = pthread_tryjoin_np(t, NULL) == 0;
		/* A round begins: what was marked is its own. */
		frozen += src_mem_freeze(s, 0);
		for (p = 0; p < MARK_PAGES; p++) {
			if (!bm_test(s->blocks[0].sending, p))
				continue;
			ck_assert_msg(!bm_test(seen, p), "page %" PRIu64 " in two rounds", p);
			bm_set(seen, p);
		}
		bm_clear_range(s->blocks[0].sending, 0, MARK_PAGES);
	}
	frozen += src_mem_freeze(s, 0);
	for (p = 0; p < MARK_PAGES; p++)
		if (bm_test(s->blocks[0].sending, p))
			bm_set(seen, p);
	ck_assert_uint_eq(bm_count(seen, MARK_PAGES), MARK_PAGES);
	ck_assert_uint_eq(frozen, MARK_PAGES * 4096ull);
	/* The reaper's failures did not write the driving thread's text. */
	ck_assert_ptr_nonnull(strstr(rdmig_source_error(s), "outside its"));
	rdmig_source_destroy(s);
	bm_free(seen);
}
END_TEST

void api_cases(Suite *s)
{
	TCase *tc = tu_case(s, "no-device", 0);

	tcase_add_test(tc, config_defaults_and_limits);
	tcase_add_test(tc, convergence_config);
	tcase_add_test(tc, advice_between_rounds);
	tcase_add_test(tc, limits_while_running);
	tcase_add_test(tc, source_block_checks);
	tcase_add_test(tc, source_connect_needs_blocks);
	tcase_add_test(tc, source_guest_never_ran_is_the_peers_word);
	tcase_add_test(tc, dest_guest_never_ran_until_the_switch);
	tcase_add_test(tc, bad_config_reported_through_handle);
	tcase_add_test(tc, dest_block_checks);
	tcase_add_test(tc, dest_resume_listener_is_the_accepted_one);
	tcase_add_test(tc, dest_postcopy_view_checks);
	tcase_add_test(tc, dest_postcopy_views_all_or_none);
	tcase_add_test(tc, connect_without_a_device);
	tcase_add_test(tc, timeout_and_process_agree);
	tcase_add_test(tc, callbacks_may_not_drive_their_handle);
	tcase_add_test(tc, error_classes);
	tcase_add_test(tc, marking_from_another_thread);
}
