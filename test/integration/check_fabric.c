/* fabric over Soft-RoCE: two processes exchange private data, SENDs both ways
 * and a 16 MiB RDMA WRITE verified byte for byte; connects that cannot
 * succeed fail with a clear error within their deadline. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suite.h"
#include "suites.h"
#include "testutil.h"

struct pair {
	char dir[256], peer[512], dout[600], sout[600];
	struct tu_proc dest, src;
	char port[32];
};

static void start_dest(struct pair *p)
{
	char *argv[] = { p->peer, "dest", (char *)tu_addr(), NULL };

	tu_tmpdir(p->dir, sizeof(p->dir));
	tu_build_path("test/fabric_peer", p->peer, sizeof(p->peer));
	snprintf(p->dout, sizeof(p->dout), "%s/dest.out", p->dir);
	snprintf(p->sout, sizeof(p->sout), "%s/src.out", p->dir);
	ck_assert_int_eq(tu_spawn(&p->dest, p->dout, argv), 0);
	if (tu_wait_line(p->dout, "port ", p->port, sizeof(p->port), 20000)) {
		tu_dump("dest", p->dout);
		ck_abort_msg("destination did not start listening");
	}
}

static void run_exchange(int corrupt)
{
	struct pair p;
	char *argv[8] = { p.peer, "src", (char *)tu_addr(), p.port, "16777216", NULL };
	/* The shifted WRITE leaves the first page unwritten: the verifier must
	 * report exactly the first byte, and the source must hear its verdict. */
	const char *dwant = corrupt ? "data mismatch at offset 0 of 16777216" :
				      "verified 16777216 bytes";
	const char *swant = corrupt ? "destination found a mismatch at offset 0\n" :
				      "destination verified 16777216 bytes";
	char *dtext, *stext;

	start_dest(&p);
	if (corrupt)
		argv[5] = "--corrupt";
	ck_assert_int_eq(tu_spawn(&p.src, p.sout, argv), 0);
	ck_assert_msg(tu_wait(&p.src, 60000) == 0, "source timed out");
	ck_assert_msg(tu_wait(&p.dest, 10000) == 0, "destination timed out");
	dtext = tu_slurp(p.dout, NULL);
	stext = tu_slurp(p.sout, NULL);
	/* Both sides' output whenever the outcome is not the expected one (a
	 * --corrupt run fails on purpose, so a nonzero exit alone says nothing):
	 * a flaky run must leave enough behind to say why. */
	if (!dtext || !stext || !strstr(dtext, dwant) || !strstr(stext, swant) ||
	    (tu_exit_code(&p.src) != 0) != corrupt || (tu_exit_code(&p.dest) != 0) != corrupt) {
		tu_dump("dest", p.dout);
		tu_dump("src", p.sout);
	}
	ck_assert_ptr_nonnull(dtext);
	ck_assert_ptr_nonnull(stext);
	/* Private data was checked in both directions. */
	ck_assert_ptr_nonnull(strstr(dtext, "request private data ok"));
	ck_assert_ptr_nonnull(strstr(stext, "accept private data ok"));
	if (corrupt) {
		ck_assert_int_ne(tu_exit_code(&p.dest), 0);
		ck_assert_int_ne(tu_exit_code(&p.src), 0);
	} else {
		ck_assert_int_eq(tu_exit_code(&p.dest), 0);
		ck_assert_int_eq(tu_exit_code(&p.src), 0);
	}
	ck_assert_ptr_nonnull(strstr(dtext, dwant));
	ck_assert_ptr_nonnull(strstr(stext, swant));
	free(dtext);
	free(stext);
	tu_rmdir(p.dir);
}

START_TEST(write_16mib_verified)
{
	run_exchange(0);
}
END_TEST

/* The verifier must be able to fail: a WRITE one page off is caught. */
START_TEST(misplaced_write_detected)
{
	run_exchange(1);
}
END_TEST

static void expect_fast_failure(const char *addr, const char *port, int timeout_ms,
				const char *expect)
{
	char dir[256], peer[512], out[600], tmo[16];
	char *argv[] = { peer, "src", (char *)addr, (char *)port, "4096",
			 "--timeout", tmo, NULL };
	struct tu_proc src;
	uint64_t t0, took;
	char *text;

	tu_tmpdir(dir, sizeof(dir));
	tu_build_path("test/fabric_peer", peer, sizeof(peer));
	snprintf(out, sizeof(out), "%s/src.out", dir);
	snprintf(tmo, sizeof(tmo), "%d", timeout_ms);
	t0 = tu_now_ms();
	ck_assert_int_eq(tu_spawn(&src, out, argv), 0);
	ck_assert_msg(tu_wait(&src, timeout_ms + 10000) == 0,
		      "connect did not give up within its deadline");
	took = tu_now_ms() - t0;
	text = tu_slurp(out, NULL);
	ck_assert_int_eq(tu_exit_code(&src), 1);
	ck_assert_msg(text && strstr(text, expect), "expected \"%s\" in: %s", expect,
		      text ? text : "(nothing)");
	ck_assert_msg(took <= (uint64_t)timeout_ms + 3000, "took %llu ms, deadline %d ms",
		      (unsigned long long)took, timeout_ms);
	printf("connect %s:%s failed after %llu ms: %s", addr, port,
	       (unsigned long long)took, text);
	free(text);
	tu_rmdir(dir);
}

START_TEST(connect_closed_port_refused)
{
	expect_fast_failure(tu_addr(), "1", 5000, "nobody is listening on that port");
}
END_TEST

/* Nobody answers ARP for this address: only our deadline ends the wait. */
START_TEST(connect_unreachable_deadline)
{
	char addr[64], *dot;

	snprintf(addr, sizeof(addr), "%s", tu_addr());
	dot = strrchr(addr, '.');
	ck_assert_ptr_nonnull(dot);
	snprintf(dot + 1, sizeof(addr) - (size_t)(dot + 1 - addr), "%s", "213");
	expect_fast_failure(addr, "4444", 3000, "connecting to");
}
END_TEST

void fabric_cases(Suite *s)
{
	TCase *tc = tu_case(s, "softroce", 180);

	tcase_add_test(tc, write_16mib_verified);
	tcase_add_test(tc, misplaced_write_detected);
	tcase_add_test(tc, connect_closed_port_refused);
	tcase_add_test(tc, connect_unreachable_deadline);
}
