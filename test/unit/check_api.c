/* The public API's argument checking, which needs no RDMA device. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "rdmig.h"
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

START_TEST(source_block_checks)
{
	struct rdmig_source *s;
	static char mem[3 * 4096];

	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_eq(rdmig_source_add_block(s, "ram0", mem, sizeof(mem), 4096), 0);
	ck_assert_int_eq(rdmig_source_add_block(s, "ram1", mem, 100, 0), 1);
	ck_assert_int_eq(rdmig_source_add_block(s, "ram0", mem, 4096, 4096), -EEXIST);
	ck_assert_str_eq(rdmig_source_error(s), "block \"ram0\" added twice");
	ck_assert_int_eq(rdmig_source_add_block(s, "0000:00:02.0/vga.vram", mem, 4096, 4096), 2);
	ck_assert_int_lt(rdmig_source_add_block(s, "tab\t", mem, 4096, 4096), 0);
	ck_assert_int_lt(rdmig_source_add_block(s, "", mem, 4096, 4096), 0);
	ck_assert_int_eq(rdmig_source_add_block(s, "odd", mem, 4096, 3000), -EINVAL);
	ck_assert_int_eq(rdmig_source_add_block(s, "nul", NULL, 4096, 4096), -EINVAL);

	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, 4095, 2), 0);
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, 8192, 4097), -ERANGE);
	ck_assert_ptr_nonnull(strstr(rdmig_source_error(s), "outside its 12288 bytes"));
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 0, UINT64_MAX, 2), -ERANGE);
	ck_assert_int_eq(rdmig_source_mark_dirty(s, 3, 0, 1), -EINVAL);
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
	static char mem[4096];

	ck_assert_int_eq(rdmig_dest_create(&d, NULL), 0);
	ck_assert_int_eq(rdmig_dest_add_block(d, "ram0", mem, sizeof(mem), 1), 0);
	ck_assert_int_eq(rdmig_dest_add_block(d, "ram0", mem, sizeof(mem), 1), -EEXIST);
	ck_assert_int_eq(rdmig_dest_add_block(d, "/rom@etc/acpi/tables", mem, sizeof(mem), 1), 1);
	ck_assert_int_lt(rdmig_dest_add_block(d, "esc\x1b", mem, sizeof(mem), 1), 0);
	ck_assert_int_eq(rdmig_dest_nblocks(d), 2);
	ck_assert_int_eq(rdmig_dest_process(d), -ENOTCONN);
	rdmig_dest_destroy(d);
}
END_TEST

Suite *api_suite(void)
{
	Suite *s = suite_create("api");
	TCase *tc = tcase_create("no-device");

	tcase_add_test(tc, config_defaults_and_limits);
	tcase_add_test(tc, source_block_checks);
	tcase_add_test(tc, source_connect_needs_blocks);
	tcase_add_test(tc, bad_config_reported_through_handle);
	tcase_add_test(tc, dest_block_checks);
	suite_add_tcase(s, tc);
	return s;
}
