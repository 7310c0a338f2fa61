/* Migrations through the public C API over Soft-RoCE: a source and a
 * destination process (api_peer) with file-backed blocks, compared byte for
 * byte afterwards; statistics come from the library's own counters. */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suite.h"
#include "suites.h"
#include "testutil.h"

#define MIB (1ull << 20)
#define MAXARGS 40

struct mig {
	char dir[256], peer[512], dout[600], sout[600], port[32];
	struct tu_proc dest, src;
	char *dargv[MAXARGS], *sargv[MAXARGS];
	int dn, sn;
	char *dtext, *stext;
};

static void mig_init(struct mig *m)
{
	memset(m, 0, sizeof(*m));
	tu_tmpdir(m->dir, sizeof(m->dir));
	tu_build_path("test/api_peer", m->peer, sizeof(m->peer));
	snprintf(m->dout, sizeof(m->dout), "%s/dest.out", m->dir);
	snprintf(m->sout, sizeof(m->sout), "%s/src.out", m->dir);
	m->dargv[m->dn++] = m->peer;
	m->dargv[m->dn++] = "dest";
	m->dargv[m->dn++] = (char *)tu_addr();
	m->dargv[m->dn++] = "--dir";
	m->dargv[m->dn++] = m->dir;
	m->sargv[m->sn++] = m->peer;
	m->sargv[m->sn++] = "src";
	m->sargv[m->sn++] = (char *)tu_addr();
	m->sargv[m->sn++] = m->port;
	m->sargv[m->sn++] = "--dir";
	m->sargv[m->sn++] = m->dir;
}

static void darg(struct mig *m, const char *a)
{
	ck_assert_int_lt(m->dn, MAXARGS - 1);
	m->dargv[m->dn++] = (char *)a;
}

static void sarg(struct mig *m, const char *a)
{
	ck_assert_int_lt(m->sn, MAXARGS - 1);
	m->sargv[m->sn++] = (char *)a;
}

/* Adds the same option to both sides. */
static void both(struct mig *m, const char *a)
{
	darg(m, a);
	sarg(m, a);
}

static void start_dest(struct mig *m)
{
	ck_assert_int_eq(tu_spawn(&m->dest, m->dout, m->dargv), 0);
	if (tu_wait_line(m->dout, "port ", m->port, sizeof(m->port), 20000)) {
		tu_dump("dest", m->dout);
		ck_abort_msg("destination did not start listening");
	}
}

static void start_src(struct mig *m)
{
	ck_assert_int_eq(tu_spawn(&m->src, m->sout, m->sargv), 0);
}

/* Waits for both; returns their exit codes through the arguments. */
static void finish(struct mig *m, int timeout_ms, int *dcode, int *scode)
{
	int st = tu_wait(&m->src, timeout_ms), dt = tu_wait(&m->dest, timeout_ms);

	m->dtext = tu_slurp(m->dout, NULL);
	m->stext = tu_slurp(m->sout, NULL);
	*scode = st ? -1 : tu_exit_code(&m->src);
	*dcode = dt ? -1 : tu_exit_code(&m->dest);
}

static void run_ok(struct mig *m, int timeout_ms)
{
	int dcode, scode;

	start_dest(m);
	start_src(m);
	finish(m, timeout_ms, &dcode, &scode);
	if (dcode || scode) {
		tu_dump("dest", m->dout);
		tu_dump("src", m->sout);
	}
	ck_assert_int_eq(scode, 0);
	ck_assert_int_eq(dcode, 0);
	ck_assert_ptr_nonnull(strstr(m->stext, "\ncompleted\n"));
	ck_assert_ptr_nonnull(strstr(m->dtext, "\ncompleted\n"));
}

static uint64_t stat_of(const char *text, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "stat %s ", key);
	p = strstr(text, pat);
	ck_assert_msg(p != NULL, "no stat %s in output", key);
	return strtoull(p + strlen(pat), NULL, 10);
}

static void assert_same_file(const char *dir, const char *a, const char *b)
{
	char pa[512], pb[512];
	size_t la, lb, i;
	char *da, *db;

	snprintf(pa, sizeof(pa), "%s/%s", dir, a);
	snprintf(pb, sizeof(pb), "%s/%s", dir, b);
	da = tu_slurp(pa, &la);
	db = tu_slurp(pb, &lb);
	ck_assert_msg(da && db, "missing %s or %s", pa, pb);
	ck_assert_uint_eq(la, lb);
	if (memcmp(da, db, la)) {
		for (i = 0; i < la && da[i] == db[i]; i++)
			;
		ck_abort_msg("%s and %s differ at offset %zu of %zu", a, b, i, la);
	}
	free(da);
	free(db);
}

static void assert_blocks_same(struct mig *m, const char *const *names)
{
	char a[128], b[128];

	for (; *names; names++) {
		snprintf(a, sizeof(a), "src-%s", *names);
		snprintf(b, sizeof(b), "dst-%s", *names);
		assert_same_file(m->dir, a, b);
	}
}

static void mig_free(struct mig *m)
{
	free(m->dtext);
	free(m->stext);
	tu_rmdir(m->dir);
}

/* 48 MiB in three blocks (49 chunks of 1 MiB), one not chunk-aligned. */
#define THREE_BYTES (20971520ull + 25165824 + 4206692)
#define THREE_CHUNKS (20ull + 24 + 5)
/* vga's last chunk holds 12388 bytes: a run that short goes inside a PAGES
 * message in dynamic mode, so that chunk is never registered. */
#define THREE_REGISTERED (THREE_CHUNKS - 1)
static const char *const three[] = { "ram0", "ram1", "vga", NULL };

static void add_three(struct mig *m)
{
	both(m, "--block");
	both(m, "ram0:20971520");
	both(m, "--block");
	both(m, "ram1:25165824");
	both(m, "--block");
	both(m, "vga:4206692"); /* 4 MiB + 12 KiB + 100 B: partial chunk and page */
}

START_TEST(pin_all_48mib)
{
	struct mig m;

	mig_init(&m);
	add_three(&m);
	both(&m, "--pin-all");
	run_ok(&m, 120000);
	assert_blocks_same(&m, three);
	ck_assert_uint_eq(stat_of(m.stext, "total"), THREE_BYTES);
	ck_assert_uint_eq(stat_of(m.stext, "normal_bytes"), THREE_BYTES);
	ck_assert_uint_eq(stat_of(m.stext, "register_requests"), 0);
	ck_assert_uint_eq(stat_of(m.stext, "iterations"), 1);
	mig_free(&m);
}
END_TEST

START_TEST(dynamic_48mib_batched_registration)
{
	struct mig m;
	uint64_t chunks = THREE_REGISTERED, reqs;

	mig_init(&m);
	add_three(&m);
	run_ok(&m, 120000);
	assert_blocks_same(&m, three);
	reqs = stat_of(m.stext, "register_requests");
	/* One request per chunk would be 49; batching must do far better. */
	ck_assert_uint_ge(reqs, 1);
	ck_assert_uint_le(reqs * 8, chunks);
	ck_assert_uint_eq(stat_of(m.stext, "chunks_registered"), chunks);
	ck_assert_uint_eq(stat_of(m.dtext, "chunks_registered"), chunks);
	ck_assert_uint_eq(stat_of(m.dtext, "register_requests"), reqs);
	mig_free(&m);
}
END_TEST

/* A cap of 8 chunks forces least-recently-used unregistration on both sides. */
START_TEST(dynamic_pinned_cap_lru)
{
	struct mig m;
	uint64_t chunks = THREE_REGISTERED;

	mig_init(&m);
	add_three(&m);
	both(&m, "--cap");
	both(&m, "8388608");
	run_ok(&m, 120000);
	assert_blocks_same(&m, three);
	ck_assert_uint_le(stat_of(m.stext, "pinned_peak"), 8 * MIB);
	ck_assert_uint_le(stat_of(m.dtext, "pinned_peak"), 8 * MIB);
	ck_assert_uint_lt(stat_of(m.stext, "register_requests"), chunks);
	ck_assert_uint_ge(stat_of(m.stext, "chunks_registered"), chunks);
	mig_free(&m);
}
END_TEST

static void iterations(int pin_all)
{
	struct mig m;

	mig_init(&m);
	add_three(&m);
	if (pin_all)
		both(&m, "--pin-all");
	sarg(&m, "--iterations");
	sarg(&m, "3");
	sarg(&m, "--redirty");
	sarg(&m, "600");
	run_ok(&m, 180000);
	assert_blocks_same(&m, three);
	ck_assert_uint_eq(stat_of(m.stext, "iterations"), 3);
	ck_assert_uint_eq(stat_of(m.dtext, "iterations"), 3);
	mig_free(&m);
}

START_TEST(three_iterations_dynamic)
{
	iterations(0);
}
END_TEST

START_TEST(three_iterations_pin_all)
{
	iterations(1);
}
END_TEST

/* 24 MiB of which one page in 64 holds data: the zero pages are not written,
 * and the scattered data pages go inside PAGES messages: no chunk is
 * registered on either side and no WRITE posted (with verify on). */
START_TEST(mostly_zero_block)
{
	struct mig m;
	uint64_t pages = 24 * MIB / 4096, data_pages = pages / 64;

	mig_init(&m);
	both(&m, "--verify");
	both(&m, "--block");
	sarg(&m, "sparse:25165824:sparse");
	darg(&m, "sparse:25165824");
	run_ok(&m, 120000);
	ck_assert_uint_eq(stat_of(m.stext, "writes"), 0);
	ck_assert_uint_eq(stat_of(m.stext, "register_requests"), 0);
	ck_assert_uint_eq(stat_of(m.dtext, "chunks_registered"), 0);
	ck_assert_uint_eq(stat_of(m.dtext, "normal_bytes"), data_pages * 4096);
	assert_same_file(m.dir, "src-sparse", "dst-sparse");
	ck_assert_uint_eq(stat_of(m.stext, "normal_pages"), data_pages);
	ck_assert_uint_eq(stat_of(m.stext, "normal_bytes"), data_pages * 4096);
	ck_assert_uint_eq(stat_of(m.stext, "zero_pages"), pages - data_pages);
	/* The destination's file started zero: nothing at all was sent for them. */
	ck_assert_uint_eq(stat_of(m.stext, "zero_pages_skipped"), pages - data_pages);
	mig_free(&m);
}
END_TEST

/* Blocks mapped on demand through the callback, plus a 10 MiB state stream. */
START_TEST(state_stream_10mib)
{
	struct mig m;
	char in[600], out[600];
	static const char *const names[] = { "ram0", NULL };
	char *buf = malloc(10 * MIB);
	FILE *f;

	mig_init(&m);
	snprintf(in, sizeof(in), "%s/state.in", m.dir);
	snprintf(out, sizeof(out), "%s/state.out", m.dir);
	tu_fill_random(buf, 10 * MIB, 7);
	f = fopen(in, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(buf, 1, 10 * MIB, f), 10 * MIB);
	fclose(f);
	free(buf);
	sarg(&m, "--block");
	sarg(&m, "ram0:4194304");
	darg(&m, "--map");
	sarg(&m, "--state-in");
	sarg(&m, in);
	darg(&m, "--state-out");
	darg(&m, out);
	run_ok(&m, 120000);
	assert_blocks_same(&m, names);
	assert_same_file(m.dir, "state.in", "state.out");
	ck_assert_uint_eq(stat_of(m.stext, "state_bytes"), 10 * MIB);
	ck_assert_uint_eq(stat_of(m.dtext, "state_bytes"), 10 * MIB);
	mig_free(&m);
}
END_TEST

START_TEST(block_map_mismatch_named_both_sides)
{
	struct mig m;
	int dcode, scode;

	mig_init(&m);
	sarg(&m, "--block");
	sarg(&m, "ram0:4194304");
	darg(&m, "--block");
	darg(&m, "ram0:2097152");
	start_dest(&m);
	start_src(&m);
	finish(&m, 60000, &dcode, &scode);
	ck_assert_int_eq(dcode, 1);
	ck_assert_int_eq(scode, 1);
	ck_assert_msg(strstr(m.dtext, "block \"ram0\": the source's length 4194304 differs "
			     "from the destination's 2097152") != NULL, "dest said: %s", m.dtext);
	ck_assert_msg(strstr(m.stext, "destination reported: block \"ram0\": the source's "
			     "length 4194304") != NULL, "src said: %s", m.stext);
	mig_free(&m);
}
END_TEST

START_TEST(block_missing_on_destination)
{
	struct mig m;
	int dcode, scode;

	mig_init(&m);
	both(&m, "--block");
	both(&m, "ram0:1048576");
	sarg(&m, "--block");
	sarg(&m, "extra:1048576");
	start_dest(&m);
	start_src(&m);
	finish(&m, 60000, &dcode, &scode);
	ck_assert_int_eq(dcode, 1);
	ck_assert_int_eq(scode, 1);
	ck_assert_ptr_nonnull(strstr(m.dtext, "block \"extra\" is not configured on the destination"));
	ck_assert_ptr_nonnull(strstr(m.stext, "block \"extra\" is not configured on the destination"));
	mig_free(&m);
}
END_TEST

/* Kills one side after the first iteration; the other must fail, within its
 * timeout, with an error. */
static void kill_peer(int kill_dest)
{
	struct mig m;
	int dcode, scode;
	uint64_t t0, took;

	mig_init(&m);
	both(&m, "--block");
	both(&m, "ram0:16777216");
	both(&m, "--timeout");
	both(&m, "4000");
	sarg(&m, "--forever");
	start_dest(&m);
	start_src(&m);
	ck_assert_msg(tu_wait_line(m.sout, "iteration 1 done", NULL, 0, 60000) == 0,
		      "no iteration completed");
	t0 = tu_now_ms();
	if (kill_dest)
		tu_kill(&m.dest, SIGKILL);
	else
		tu_kill(&m.src, SIGKILL);
	finish(&m, 20000, &dcode, &scode);
	took = tu_now_ms() - t0;
	if (kill_dest) {
		ck_assert_int_eq(scode, 1);
		ck_assert_ptr_nonnull(strstr(m.stext, "error: "));
		ck_assert_ptr_null(strstr(m.stext, "\ncompleted\n"));
	} else {
		ck_assert_int_eq(dcode, 1);
		ck_assert_ptr_nonnull(strstr(m.dtext, "error: "));
		ck_assert_ptr_null(strstr(m.dtext, "\ncompleted\n"));
	}
	/* The 4 s timeout plus start-up slack under emulation. */
	ck_assert_msg(took < 4000 + 5000, "the survivor took %" PRIu64 " ms to notice", took);
	printf("%s killed: survivor failed after %" PRIu64 " ms: %s", kill_dest ? "dest" : "src",
	       took, strstr(kill_dest ? m.stext : m.dtext, "error: "));
	mig_free(&m);
}

START_TEST(dest_killed_mid_stream)
{
	kill_peer(1);
}
END_TEST

START_TEST(src_killed_mid_stream)
{
	kill_peer(0);
}
END_TEST

/* Runs a small migration expected to fail on both sides with the given
 * messages. */
static void expect_failure(struct mig *m, const char *dmsg, const char *smsg)
{
	int dcode, scode;

	start_dest(m);
	start_src(m);
	finish(m, 60000, &dcode, &scode);
	ck_assert_msg(dcode == 1 && scode == 1, "exit codes dest %d src %d\n%s\n%s", dcode,
		      scode, m->dtext, m->stext);
	ck_assert_msg(strstr(m->dtext, dmsg) != NULL, "dest said: %s", m->dtext);
	ck_assert_msg(strstr(m->stext, smsg) != NULL, "src said: %s", m->stext);
	ck_assert_ptr_null(strstr(m->dtext, "\ncompleted\n"));
}

static void small_block(struct mig *m)
{
	both(m, "--block");
	both(m, "ram0:4194304");
}

START_TEST(auth_same_key_and_verify)
{
	struct mig m;
	static const char *const names[] = { "ram0", NULL };

	mig_init(&m);
	small_block(&m);
	both(&m, "--key");
	both(&m, "correct horse battery staple");
	both(&m, "--verify");
	run_ok(&m, 60000);
	assert_blocks_same(&m, names);
	mig_free(&m);
}
END_TEST

START_TEST(auth_wrong_key)
{
	struct mig m;

	mig_init(&m);
	small_block(&m);
	darg(&m, "--key");
	darg(&m, "correct horse battery staple");
	sarg(&m, "--key");
	sarg(&m, "incorrect horse battery staple");
	expect_failure(&m, "authentication failed: the source does not hold this "
		       "destination's key", "destination reported: authentication failed");
	/* Nothing was registered or mapped: the block file stayed empty. */
	mig_free(&m);
}
END_TEST

START_TEST(auth_missing_key_rejected)
{
	struct mig m;

	mig_init(&m);
	small_block(&m);
	darg(&m, "--key");
	darg(&m, "correct horse battery staple");
	expect_failure(&m, "the source offered no authentication",
		       "destination rejected the connection: unauthorized");
	mig_free(&m);
}
END_TEST

START_TEST(auth_destination_without_key)
{
	struct mig m;

	mig_init(&m);
	small_block(&m);
	sarg(&m, "--key");
	sarg(&m, "correct horse battery staple");
	expect_failure(&m, "error: ", "the destination does not authenticate");
	mig_free(&m);
}
END_TEST

/* Memory changed behind the transfer's back: --verify must catch it. */
START_TEST(verify_detects_corruption)
{
	struct mig m;
	char in[600];
	FILE *f;

	mig_init(&m);
	snprintf(in, sizeof(in), "%s/state.in", m.dir);
	f = fopen(in, "wb");
	ck_assert_ptr_nonnull(f);
	fputs("device state", f);
	fclose(f);
	small_block(&m);
	both(&m, "--verify");
	sarg(&m, "--state-in");
	sarg(&m, in);
	darg(&m, "--state-out");
	darg(&m, "/dev/null");
	darg(&m, "--corrupt-on-state");
	expect_failure(&m, "verification failed: block \"ram0\" differs",
		       "destination reported: verification failed: block \"ram0\" differs");
	mig_free(&m);
}
END_TEST

/* A block in 2 MiB pages (hugetlbfs's) under the default 1 MiB chunks:
 * the registration unit grows to the page, one registration per huge page
 * on each side (16 for its 8 pages before: each page registered in two
 * halves, the whole page pinned twice), and WRITEs are still cut at
 * merge_max (1 MiB), so the first pass takes at least 16. */
START_TEST(huge_pages_dynamic)
{
	static const char *const one[] = { "huge", NULL };
	struct mig m;

	mig_init(&m);
	both(&m, "--block");
	both(&m, "huge:16777216");
	sarg(&m, "--page");
	sarg(&m, "2097152");
	sarg(&m, "--iterations");
	sarg(&m, "2");
	sarg(&m, "--redirty");
	sarg(&m, "100");
	run_ok(&m, 180000);
	assert_blocks_same(&m, one);
	ck_assert_uint_eq(stat_of(m.dtext, "chunks_registered"), 8);
	ck_assert_uint_eq(stat_of(m.stext, "chunks_registered"), 8);
	ck_assert_uint_ge(stat_of(m.stext, "writes"), 16);
	ck_assert_uint_eq(stat_of(m.dtext, "iterations"), 2);
	mig_free(&m);
}
END_TEST

void migrate_cases(Suite *s)
{
	TCase *tc = tu_case(s, "softroce", 300);

	tcase_add_test(tc, pin_all_48mib);
	tcase_add_test(tc, dynamic_48mib_batched_registration);
	tcase_add_test(tc, dynamic_pinned_cap_lru);
	tcase_add_test(tc, three_iterations_dynamic);
	tcase_add_test(tc, three_iterations_pin_all);
	tcase_add_test(tc, mostly_zero_block);
	tcase_add_test(tc, state_stream_10mib);
	tcase_add_test(tc, block_map_mismatch_named_both_sides);
	tcase_add_test(tc, block_missing_on_destination);
	tcase_add_test(tc, dest_killed_mid_stream);
	tcase_add_test(tc, src_killed_mid_stream);
	tc = tu_case(s, "auth-verify", 120);
	tcase_add_test(tc, auth_same_key_and_verify);
	tcase_add_test(tc, auth_wrong_key);
	tcase_add_test(tc, auth_missing_key_rejected);
	tcase_add_test(tc, auth_destination_without_key);
	tcase_add_test(tc, verify_detects_corruption);
	tc = tu_case(s, "huge-pages", 300);
	tcase_add_test(tc, huge_pages_dynamic);
}
