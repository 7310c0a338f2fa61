/* migrate-send and migrate-recv as operators run them, over Soft-RoCE: cold
 * and live migrations compared byte for byte, the JSON events checked against
 * the data, a destination that dies, cancel over the control socket, the
 * daemon, and command lines that must fail with one line and exit 2. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "suite.h"
#include "suites.h"
#include "runs.h"
#include "testutil.h"

#define MIB (1ull << 20)
#define PAGE 4096u

static int count_lines(const char *path)
{
	char *text = tu_slurp(path, NULL), *p;
	int n = 0;

	for (p = text; p && *p; p++)
		n += *p == '\n';
	free(text);
	return n;
}

/* One page in @every random, the rest zero; returns the zero pages. */
static uint64_t write_sparse(const char *path, size_t len, unsigned every, uint64_t seed)
{
	unsigned char *buf = calloc(1, len);
	uint64_t pg, zero = 0;

	ck_assert_ptr_nonnull(buf);
	for (pg = 0; pg < len / PAGE; pg++) {
		if (pg % every == 0)
			tu_fill_random(buf + pg * PAGE, PAGE, seed + pg);
		else
			zero++;
	}
	tu_write_file(path, buf, len, 0644);
	free(buf);
	return zero;
}

/* ---- a receiver and a workload -------------------------------------------------- */

/* The fixture and a live migration of its block "vm", a workload writing
 * @size at @rate MiB/s: migrate-recv --ram-dir DST @recv_args, then
 * migrate-send --ram vm=... --live --pid PID --json @send_args, waited for
 * until its event @event (NULL: not waited for). */
static void fx_live(struct tu_fx *f, const char *size, const char *rate,
		    const char *const *recv_args, const char *const *send_args, const char *event)
{
	struct tu_argv r = { .n = 0 }, s = { .n = 0 };

	tu_fx_init(f);
	tu_fx_block(f, "vm", 0, 0);
	tu_fx_load(f, f->file, size, rate);
	tu_argv_add(&r, (const char *[]){ "--ram-dir", f->dst, NULL });
	tu_argv_add(&r, recv_args);
	tu_argv_add(&s, (const char *[]){ "--ram", f->ram, "--live", "--pid", f->pid, "--json",
					  NULL });
	tu_argv_add(&s, send_args);
	tu_fx_recv(f, NULL, (const char *const *)r.v);
	tu_fx_send(f, NULL, (const char *const *)s.v);
	if (event)
		tu_must_see(&f->send, "send", event, 30000);
}

/* A second source into the same daemon: migrate-send --connect ADDR
 * @args, its output in DIR/send2.{out,err}. */
static void send2(struct tu_fx *f, struct tu_run *r, const char *const *args)
{
	tu_run_cmd(r, f->dir, "send2", (const char *[]){ f->sendbin, "--connect", f->addr, NULL },
		   args);
}

/* migrate-send ends with @want and one line on stderr. */
static void send_exits(struct tu_fx *f, int want)
{
	int code = tu_run_finish(&f->send, 20000);

	if (code != want)
		tu_run_dump(&f->send, "send");
	ck_assert_int_eq(code, want);
	ck_assert_int_eq(count_lines(f->send.err), 1);
}

static void both_ok(struct tu_fx *f, int timeout_ms)
{
	int sc = tu_run_finish(&f->send, timeout_ms), rc = tu_run_finish(&f->recv, timeout_ms);

	if (sc || rc) {
		tu_run_dump(&f->send, "send");
		tu_run_dump(&f->recv, "recv");
	}
	ck_assert_int_eq(sc, 0);
	ck_assert_int_eq(rc, 0);
}

/* ---- tests ------------------------------------------------------------------------ */

/* 40 MiB random, 24 MiB of which one page in 16 holds data, 1 MiB of state.
 * The random block goes into a file migrate-recv creates; the sparse one
 * over an existing file of the right size full of garbage, so its zero pages
 * must be cleared on the destination. */
START_TEST(cold_two_files_and_state)
{
	struct tu_fx f;
	char big[400], sparse[400], state[400], dbig[400], dsparse[400], dstate[400];
	char rbig[500], rsparse[500], sbig[500], ssparse[500], mark[500];
	uint64_t zero, pages = (40 + 24) * MIB / PAGE;
	struct json_object *ev;

	tu_fx_init(&f);
	snprintf(big, sizeof(big), "%s/big", f.src);
	snprintf(sparse, sizeof(sparse), "%s/sparse", f.src);
	snprintf(state, sizeof(state), "%s/state", f.src);
	snprintf(dbig, sizeof(dbig), "%s/big", f.dst);
	snprintf(dsparse, sizeof(dsparse), "%s/sparse", f.dst);
	snprintf(dstate, sizeof(dstate), "%s/state", f.dst);
	tu_write_random(big, 40 * MIB, 1);
	tu_write_random(dsparse, 24 * MIB, 2);
	tu_write_random(state, MIB, 3);
	zero = write_sparse(sparse, 24 * MIB, 16, 4);
	snprintf(rbig, sizeof(rbig), "big=%s", dbig);
	snprintf(rsparse, sizeof(rsparse), "sparse=%s", dsparse);
	snprintf(sbig, sizeof(sbig), "big=%s", big);
	snprintf(ssparse, sizeof(ssparse), "sparse=%s", sparse);

	tu_fx_recv(&f, NULL, (const char *[]){ "--ram", rbig, "--ram", rsparse, "--use-existing",
				     "--state-out", dstate, NULL });
	tu_fx_send(&f, NULL, (const char *[]){ "--ram", sbig, "--ram", ssparse, "--state-in", state,
				      "--json", NULL });
	both_ok(&f, 120000);
	tu_assert_same(big, dbig);
	tu_assert_same(sparse, dsparse);
	tu_assert_same(state, dstate);
	snprintf(mark, sizeof(mark), "%s.incomplete", dbig);
	ck_assert_msg(!tu_exists(mark), "%s left behind", mark);
	snprintf(mark, sizeof(mark), "%s.incomplete", dsparse);
	ck_assert_msg(!tu_exists(mark), "%s left behind", mark);
	snprintf(mark, sizeof(mark), "%s.part", dstate);
	ck_assert_msg(!tu_exists(mark), "%s left behind", mark);

	ev = tu_event_in(f.send.out, "completed");
	ck_assert_ptr_nonnull(ev);
	ck_assert_uint_eq(tu_jnum(ev, "total"), 64 * MIB);
	ck_assert_uint_eq(tu_jnum(ev, "duplicate"), zero);
	ck_assert_uint_eq(tu_jnum(ev, "normal"), pages - zero);
	ck_assert_uint_eq(tu_jnum(ev, "normal-bytes"), (pages - zero) * PAGE);
	ck_assert_uint_eq(tu_jnum(ev, "dirty-sync-count"), 1);
	ck_assert_uint_eq(tu_jnum(ev, "state-bytes"), MIB);
	ck_assert_uint_ge(tu_jnum(ev, "transferred"), (pages - zero) * PAGE + MIB);
	json_object_put(ev);
	ev = tu_event_in(f.recv.out, "completed");
	ck_assert_ptr_nonnull(ev);
	ck_assert_uint_eq(tu_jnum(ev, "total"), 64 * MIB);
	ck_assert_uint_eq(tu_jnum(ev, "normal-bytes"), (pages - zero) * PAGE);
	ck_assert_uint_eq(tu_jnum(ev, "state-bytes"), MIB);
	json_object_put(ev);
	tu_fx_free(&f);
}
END_TEST

/* A 32 MiB file written at 4 MiB/s: pre-copy converges, the writer is
 * stopped, and the destination holds exactly what the source held then.
 * _i = 0: the tracking auto picks (wp-async on Linux 6.7 and later,
 * soft-dirty before, saying why); 1: --dirty-tracking soft-dirty; 2 and 3:
 * auto over 2 and 4 channels, each posting from a thread of its own while
 * the writer runs. */
START_TEST(live_converges_and_stops)
{
	static const char *const chans[] = { "1", "1", "2", "4" };
	struct tu_fx f;
	char striping[64];
	struct json_object *ev, *parts;
	uint64_t iters, downtime;
	const char *want;

	fx_live(&f, "32M", "4", NULL,
		(const char *[]){ "--dirty-tracking", _i == 1 ? "soft-dirty" : "auto", "--channels",
				  chans[_i], _i >= 2 ? "--verbose" : NULL, _i == 3 ? "-v" : NULL,
				  NULL }, NULL);
	both_ok(&f, 120000);
	if (_i >= 2) {
		snprintf(striping, sizeof(striping), "striping writes over %s channels", chans[_i]);
		ck_assert_msg(tu_file_has(f.send.err, striping),
			      "the source did not stripe over %s channels", chans[_i]);
	}
	/* Twice verbose: where the source stands, change by change. */
	ck_assert_msg((_i == 3) == tu_file_has(f.send.err, "source state: "), "-v%s: state changes "
		      "%slogged", _i == 3 ? " -v" : "", _i == 3 ? "not " : "");
	ev = tu_event_in(f.send.out, "setup");
	ck_assert_ptr_nonnull(ev);
	want = _i != 1 && tu_kernel_at_least(6, 7) ? "wp-async" : "soft-dirty";
	printf("live, %s, %s channel(s): tracking %s (%s)\n", _i == 1 ? "soft-dirty" : "auto",
	       chans[_i], tu_jstr(ev, "dirty-tracking"), tu_jstr(ev, "dirty-tracking-fallback"));
	ck_assert_msg(!strncmp(tu_jstr(ev, "dirty-tracking"), want, strlen(want)),
		      "dirty-tracking %s, expected %s", tu_jstr(ev, "dirty-tracking"), want);
	ck_assert_uint_ge(tu_jnum(ev, "dirty-tracking-threads"), 1);
	if (_i != 1 && !tu_kernel_at_least(6, 7))
		ck_assert_ptr_nonnull(strstr(tu_jstr(ev, "dirty-tracking-fallback"),
					     "PAGEMAP_SCAN"));
	if (_i != 1 && tu_kernel_at_least(6, 7))
		ck_assert_str_eq(tu_jstr(ev, "dirty-tracking-fallback"), "");
	json_object_put(ev);
	ev = tu_event_in(f.send.out, "iteration");
	ck_assert_ptr_nonnull(ev);
	ck_assert(json_object_object_get_ex(ev, "dirty-collect-us", NULL));
	ck_assert(json_object_object_get_ex(ev, "dirty-clear-us", NULL));
	json_object_put(ev);
	/* Still there, and stopped: it lives on the destination now. */
	ck_assert_int_eq(tu_proc_state(f.load.p.pid, NULL), 'T');
	tu_assert_same(f.file, f.image);
	ev = tu_event_in(f.send.out, "completed");
	ck_assert_ptr_nonnull(ev);
	iters = tu_jnum(ev, "dirty-sync-count");
	downtime = tu_jnum(ev, "downtime");
	ck_assert_uint_ge(iters, 2);
	ck_assert_uint_le(iters, 31);
	ck_assert_uint_lt(downtime, 10000);
	ck_assert_uint_ge(tu_jnum(ev, "normal-bytes"), 32 * MIB);
	/* The last scan is part of stopping, and sub-millisecond work. */
	ck_assert(json_object_object_get_ex(ev, "downtime-parts", &parts));
	ck_assert(json_object_object_get_ex(parts, "stop-tracking-us", NULL));
	ck_assert_uint_le(tu_jnum(parts, "stop-tracking-us") / 1000, tu_jnum(parts, "stop") + 1);
	printf("live: %" PRIu64 " iterations, downtime %" PRIu64 " ms, total %" PRIu64 " ms, "
	       "last scan %" PRIu64 " us\n", iters, downtime, tu_jnum(ev, "total-time"),
	       tu_jnum(parts, "stop-tracking-us"));
	json_object_put(ev);
	tu_fx_free(&f);
}
END_TEST

/* A slow live migration whose destination is killed: the source gives up
 * with 5 within its timeout and the workload runs on, unharmed. */
START_TEST(recv_killed_workload_resumes)
{
	struct tu_fx f;
	struct json_object *ev;
	uint64_t t0, took;
	size_t la, lb;
	char *a, *b;
	int code;

	fx_live(&f, "16M", "1", NULL,
		(const char *[]){ "--max-bandwidth", "2M", "--timeout", "5", NULL }, "setup");
	usleep(1500 * 1000); /* well inside the first round (16 MiB at 2 MiB/s) */
	tu_kill(&f.recv.p, SIGKILL);
	t0 = tu_now_ms();
	code = tu_run_finish(&f.send, 20000);
	took = tu_now_ms() - t0;
	if (code != 5)
		tu_run_dump(&f.send, "send");
	ck_assert_int_eq(code, 5);
	ck_assert_msg(took < 5000 + 3000, "migrate-send took %" PRIu64 " ms to give up", took);
	ck_assert_int_eq(count_lines(f.send.err), 1);
	ev = tu_event_in(f.send.out, "failed");
	ck_assert_ptr_nonnull(ev);
	ck_assert_uint_eq(tu_jnum(ev, "exit-code"), 5);
	json_object_put(ev);
	/* Alive, running, and still writing its intact file. */
	tu_fx_assert_load_runs(&f);
	a = tu_slurp(f.file, &la);
	usleep(1000 * 1000);
	b = tu_slurp(f.file, &lb);
	ck_assert_uint_eq(la, 16 * MIB);
	ck_assert_uint_eq(lb, 16 * MIB);
	ck_assert_msg(memcmp(a, b, la) != 0, "the workload stopped writing");
	free(a);
	free(b);
	printf("recv killed: migrate-send exited 5 after %" PRIu64 " ms\n", took);
	tu_fx_free(&f);
}
END_TEST

/* migrate-send's state events, in order: how many, the first and the last
 * phase (the strings are copied: the event is freed after the call). */
struct phases {
	unsigned n;
	char first[32], last[32];
};

static int see_state(void *ctx, struct json_object *ev)
{
	struct phases *p = ctx;
	const char *ph = tu_jstr(ev, "phase");

	ck_assert_msg(ph && ph[0], "state event without a phase: %s",
		      json_object_to_json_string(ev));
	if (!p->n++)
		snprintf(p->first, sizeof(p->first), "%s", ph);
	snprintf(p->last, sizeof(p->last), "%s", ph);
	return 0;
}

static const char *ctl_status(const char *sock, char *buf, size_t len)
{
	struct json_object *r, *ret;

	ret = tu_control_get(sock, "{\"command\":\"status\"}\n", "return", &r);
	snprintf(buf, len, "%s", tu_jstr(ret, "status"));
	json_object_put(r);
	return buf;
}

/* status, set, an unknown command, then cancel: exit 7, workload running. */
START_TEST(cancel_over_control_socket)
{
	struct tu_fx f;
	struct json_object *ev, *r, *ret;
	struct phases ph = { 0 };
	const char *phase;

	fx_live(&f, "16M", "1", NULL,
		(const char *[]){ "--max-bandwidth", "2M", "--control", f.ctl, NULL }, "setup");

	ret = tu_control_get(f.ctl, "{\"command\":\"status\"}\n", "return", &r);
	ck_assert_str_eq(tu_jstr(ret, "status"), "active");
	/* Where it stands, for a migration that seems stuck. */
	phase = tu_jstr(ret, "phase");
	ck_assert_msg(phase && phase[0], "status without a phase: %s",
		      json_object_to_json_string(ret));
	ck_assert_uint_eq(tu_jnum(ret, "total"), 16 * MIB);
	ck_assert_uint_eq(tu_jnum(ret, "max-bandwidth"), 2 * MIB);
	json_object_put(r);
	tu_control_expect(f.ctl, "{\"command\":\"set\",\"max-bandwidth\":3145728,"
			  "\"max-downtime\":50}\n", "return");
	r = tu_control(f.ctl, "{\"command\":\"status\"}\n");
	json_object_object_get_ex(r, "return", &ret);
	ck_assert_uint_eq(tu_jnum(ret, "max-bandwidth"), 3 * MIB);
	ck_assert_uint_eq(tu_jnum(ret, "max-downtime"), 50);
	json_object_put(r);
	ret = tu_control_get(f.ctl, "{\"command\":\"frobnicate\"}\n", "error", &r);
	ck_assert_str_eq(json_object_get_string(ret), "unknown command");
	json_object_put(r);
	tu_control_expect(f.ctl, "{\"command\":\"cancel\"}\n", "return");

	send_exits(&f, 7);
	ev = tu_event_in(f.send.out, "failed");
	ck_assert_ptr_nonnull(ev);
	ck_assert_uint_eq(tu_jnum(ev, "exit-code"), 7);
	json_object_put(ev);
	/* --json said each phase: from the connection to the end. */
	tu_each_event(f.send.out, "state", see_state, &ph);
	ck_assert_msg(ph.n >= 1, "no state event from migrate-send --json");
	ck_assert_str_eq(ph.first, "connect");
	ck_assert_str_eq(ph.last, "done");
	ck_assert_msg(!tu_exists(f.ctl), "control socket left behind");
	/* The source told the destination why. */
	ck_assert_int_eq(tu_run_finish(&f.recv, 20000), 7);
	tu_fx_assert_load_runs(&f);
	tu_fx_free(&f);
}
END_TEST

/* --defer: connected, the block map exchanged, then nothing until start:
 * the workload runs untouched and no page lands at the destination, for
 * longer than the source's --timeout (the destination's keepalives hold
 * the connection, though its own timeout is longer).
 * start then migrates byte-identical; a second start is refused. */
START_TEST(deferred_start)
{
	struct tu_fx f;
	char st[32];
	struct json_object *ev;
	uint64_t t_prep, t_start, took;
	size_t len;
	char *d;

	/* The destination's own timeout (30 s) is longer than the source's:
	 * its keepalives still come often enough for the source. */
	fx_live(&f, "16M", "1", NULL,
		(const char *[]){ "--defer", "--control", f.ctl, "--timeout", "2", NULL },
		"prepared");
	t_prep = tu_now_ms();
	ck_assert_str_eq(ctl_status(f.ctl, st, sizeof(st)), "prepared");
	usleep(5000 * 1000);
	ck_assert_msg(tu_run_running(&f.send), "migrate-send ended while prepared");
	ck_assert_msg(tu_run_running(&f.recv), "migrate-recv ended while the source was prepared");
	ck_assert_str_eq(ctl_status(f.ctl, st, sizeof(st)), "prepared");
	ck_assert_int_ne(tu_proc_state(f.load.p.pid, NULL), 'T');
	d = tu_slurp(f.image, &len);
	ck_assert_uint_eq(len, 16 * MIB);
	ck_assert_msg(!d[0] && !memcmp(d, d + 1, len - 1),
		      "pages reached the destination before start");
	free(d);

	t_start = tu_now_ms();
	tu_control_expect(f.ctl, "{\"command\":\"start\"}\n", "return");
	tu_control_expect(f.ctl, "{\"command\":\"start\"}\n", "error");
	both_ok(&f, 120000);
	took = tu_now_ms() - t_start;
	tu_assert_same(f.file, f.image);
	/* The wait is reported apart, not inside total-time. */
	ev = tu_event_in(f.send.out, "completed");
	ck_assert_ptr_nonnull(ev);
	ck_assert_uint_ge(tu_jnum(ev, "prepared-time"), 5000);
	ck_assert_uint_le(tu_jnum(ev, "total-time"), tu_jnum(ev, "setup-time") + took + 200);
	json_object_put(ev);
	ck_assert_int_eq(tu_proc_state(f.load.p.pid, NULL), 'T');
	printf("deferred: prepared for 5 s past the source's --timeout 2, then started: "
	       "byte-identical %" PRIu64 " ms after start (prepared %" PRIu64 " ms)\n",
	       took, t_start - t_prep);
	tu_fx_free(&f);
}
END_TEST

/* A cancel while prepared: exit 7 on both sides, workload never stopped,
 * and the failed event says the migration never started.  Before it, the
 * wait outlasts the destination's --timeout. */
START_TEST(deferred_cancel)
{
	struct tu_fx f;
	struct json_object *ev;

	fx_live(&f, "8M", "1", (const char *[]){ "--timeout", "2", NULL },
		(const char *[]){ "--defer", "--control", f.ctl, NULL }, "prepared");
	usleep(4000 * 1000);
	ck_assert_msg(tu_run_running(&f.recv),
		      "migrate-recv --timeout 2 ended while the source was prepared");
	tu_control_expect(f.ctl, "{\"command\":\"cancel\"}\n", "return");
	send_exits(&f, 7);
	ev = tu_event_in(f.send.out, "failed");
	ck_assert_ptr_nonnull(ev);
	ck_assert(json_object_object_get_ex(ev, "started", NULL));
	ck_assert(!json_object_get_boolean(json_object_object_get(ev, "started")));
	ck_assert(json_object_get_boolean(json_object_object_get(ev, "workload-running")));
	json_object_put(ev);
	ck_assert_int_eq(tu_run_finish(&f.recv, 20000), 7);
	tu_fx_assert_load_runs(&f);
	tu_fx_free(&f);
}
END_TEST

/* SIGTERM cancels like the control socket does: exit 7, workload running. */
START_TEST(sigterm_cancels_live_migration)
{
	struct tu_fx f;


	fx_live(&f, "16M", "1", NULL,
		(const char *[]){ "--max-bandwidth", "2M", NULL }, "setup");
	usleep(500 * 1000);
	tu_kill(&f.send.p, SIGTERM);
	send_exits(&f, 7);
	ck_assert_int_eq(tu_run_finish(&f.recv, 20000), 7);
	tu_fx_assert_load_runs(&f);
	tu_fx_free(&f);
}
END_TEST

/* migrate-recv's own control socket, and a signal while it waits. */
START_TEST(recv_control_and_signal)
{
	struct tu_fx f;
	char st[32];

	tu_fx_init(&f);
	tu_fx_recv(&f, NULL, (const char *[]){ "--ram-dir", f.dst, "--control", f.ctl, NULL });
	ck_assert_str_eq(ctl_status(f.ctl, st, sizeof(st)), "listening");
	tu_control_expect(f.ctl, "{\"command\":\"set\",\"max-downtime\":5}\n", "error");
	tu_control_expect(f.ctl, "not json\n", "error");
	tu_control_expect(f.ctl, "{\"command\":\"cancel\"}\n", "return");
	ck_assert_int_eq(tu_run_finish(&f.recv, 10000), 7);
	ck_assert_int_eq(count_lines(f.recv.err), 1);
	ck_assert_msg(!tu_exists(f.ctl), "control socket left behind");

	tu_fx_recv(&f, NULL, (const char *[]){ "--ram-dir", f.dst, NULL });
	ck_assert_int_eq(tu_fx_recv_term(&f), 7);
	tu_fx_free(&f);
}
END_TEST

/* Two sources at once into one daemon: DIR/1 and DIR/2. */
START_TEST(daemon_two_at_once)
{
	struct tu_fx f;
	char b[400], rb[500], d1[400], d2[400];
	struct tu_run s2 = { .p.pid = 0 };
	int c1, c2;

	tu_fx_init(&f);
	tu_fx_block(&f, "ram", 8 * MIB, 11);
	snprintf(b, sizeof(b), "%s/b", f.src);
	tu_write_random(b, 8 * MIB, 12);
	snprintf(rb, sizeof(rb), "ram=%s", b);
	/* A daemon admits keyed sources only (or --trusted-fabric). */
	tu_fx_recv(&f, NULL, (const char *[]){ "--ram-dir", f.dst, "--daemon", "--auth-key", f.key,
					       NULL });
	tu_fx_send(&f, NULL, (const char *[]){ "--ram", f.ram, "--auth-key", f.key, NULL });
	send2(&f, &s2, (const char *[]){ "--ram", rb, "--auth-key", f.key, NULL });
	c1 = tu_run_finish(&f.send, 60000);
	c2 = tu_run_finish(&s2, 60000);
	if (c1 || c2) {
		tu_run_dump(&f.send, "send");
		tu_run_dump(&s2, "send2");
		tu_run_dump(&f.recv, "recv");
	}
	ck_assert_int_eq(c1, 0);
	ck_assert_int_eq(c2, 0);
	snprintf(d1, sizeof(d1), "%s/1/ram", f.dst);
	snprintf(d2, sizeof(d2), "%s/2/ram", f.dst);
	/* Which source got which number depends on who connected first. */
	{
		char *x = tu_slurp(f.file, NULL), *y = tu_slurp(d1, NULL);
		int a_is_1 = x && y && !memcmp(x, y, 8 * MIB);

		free(x);
		free(y);
		tu_assert_same(a_is_1 ? d1 : d2, f.file);
		tu_assert_same(a_is_1 ? d2 : d1, b);
	}
	ck_assert_int_eq(tu_fx_recv_term(&f), 0);
	ck_assert_int_eq(count_lines(f.recv.out), 5); /* listening, 2 setup, 2 completed */
	tu_fx_free(&f);
}
END_TEST

/* Runs a command that must fail at once with exit 2 and one line on stderr
 * containing @needle. */
static void usage_fails(struct tu_fx *f, const char *needle, char *const argv[])
{
	struct tu_run r = { .p.pid = 0 };
	char *err;
	int code;

	tu_run_spawn(&r, f->dir, "usage", argv);
	code = tu_run_finish(&r, 10000);
	err = tu_slurp(r.err, NULL);
	ck_assert_msg(code == 2, "%s exited %d: %s", argv[1], code, err);
	ck_assert_msg(count_lines(r.err) == 1, "not one line: %s", err);
	ck_assert_msg(strstr(err, needle) != NULL, "\"%s\" not in: %s", needle, err);
	ck_assert_msg(!strncmp(err, "migrate-", 8), "no program name: %s", err);
	free(err);
}

START_TEST(bad_command_lines)
{
	struct tu_fx f;
	char file[400], ram[500], missing[500];

	tu_fx_init(&f);
	snprintf(file, sizeof(file), "%s/ram", f.src);
	tu_write_file(file, "x", 1, 0644);
	snprintf(ram, sizeof(ram), "a=%s", file);
	snprintf(missing, sizeof(missing), "a=%s/nope", f.src);
	usage_fails(&f, "nope", (char *[]){ f.sendbin, "--connect", "10.77.0.1:4444", "--ram",
					    missing, NULL });
	usage_fails(&f, "--frob", (char *[]){ f.sendbin, "--frob", NULL });
	usage_fails(&f, "--frob", (char *[]){ f.recvbin, "--frob", NULL });
	usage_fails(&f, "10.77.0.1", (char *[]){ f.sendbin, "--connect", "10.77.0.1", "--ram",
						 ram, NULL });
	usage_fails(&f, "[::1", (char *[]){ f.recvbin, "--listen", "[::1", "--ram-dir", f.dst,
					    NULL });
	usage_fails(&f, "--chunk-size", (char *[]){ f.sendbin, "--connect", "10.77.0.1:1",
						    "--ram", ram, "--chunk-size", "3000", NULL });
	usage_fails(&f, "--pid", (char *[]){ f.sendbin, "--connect", "10.77.0.1:1", "--ram", ram,
					     "--live", NULL });
	usage_fails(&f, "--dirty-tracking 'often'", (char *[]){ f.sendbin, "--connect",
								 "10.77.0.1:1", "--ram", ram, "--live", "--pid", "1",
								 "--dirty-tracking", "often", NULL });
	usage_fails(&f, "--dirty-tracking is only used", (char *[]){ f.sendbin, "--connect",
								      "10.77.0.1:1", "--ram", ram, "--dirty-tracking",
								      "soft-dirty", NULL });
	usage_fails(&f, "--ram-dir", (char *[]){ f.recvbin, "--listen", "10.77.0.1:0",
						 "--daemon", NULL });
	usage_fails(&f, "--control", (char *[]){ f.sendbin, "--connect", "10.77.0.1:1", "--ram",
						 ram, "--defer", NULL });
	tu_fx_free(&f);
}
END_TEST

/* An existing destination file of another length: migrate-recv exits 2
 * naming the block, migrate-send 5 with the destination's reason. */
START_TEST(size_mismatch_existing_file)
{
	struct tu_fx f;
	char rd[500], *err;
	int sc, rc;

	tu_fx_init(&f);
	tu_fx_block(&f, "vm", 2 * MIB, 5);
	tu_write_random(f.image, MIB, 5); /* the source's first half */
	snprintf(rd, sizeof(rd), "vm=%s", f.image);
	tu_fx_recv(&f, NULL, (const char *[]){ "--ram", rd, "--use-existing", NULL });
	tu_fx_send(&f, NULL, (const char *[]){ "--ram", f.ram, NULL });
	sc = tu_run_finish(&f.send, 60000);
	rc = tu_run_finish(&f.recv, 60000);
	if (sc != 5 || rc != 2) {
		tu_run_dump(&f.send, "send");
		tu_run_dump(&f.recv, "recv");
	}
	ck_assert_int_eq(rc, 2);
	ck_assert_int_eq(sc, 5);
	ck_assert_int_eq(count_lines(f.recv.err), 1);
	ck_assert_int_eq(count_lines(f.send.err), 1);
	err = tu_slurp(f.recv.err, NULL);
	ck_assert_msg(strstr(err, "\"vm\"") && strstr(err, "2097152") && strstr(err, "1048576"),
		      "recv said: %s", err);
	printf("size mismatch: %s", err);
	free(err);
	err = tu_slurp(f.send.err, NULL);
	ck_assert_msg(strstr(err, "\"vm\"") && strstr(err, "destination"), "send said: %s", err);
	printf("size mismatch: %s", err);
	free(err);
	ck_assert_int_eq(count_lines(f.recv.out), 3); /* listening, setup, failed */
	tu_fx_free(&f);
}
END_TEST

/* ---- authentication and verification ---------------------------------------- */

static void write_key(const char *path, const char *key, mode_t mode)
{
	tu_write_file(path, key, strlen(key), mode);
	ck_assert_int_eq(chmod(path, mode), 0);
}

/* A key file others may read is refused before anything happens. */
START_TEST(auth_key_file_permissions)
{
	struct tu_fx f;
	tu_fx_init(&f);
	tu_fx_block(&f, "a", 0, 0);
	tu_write_file(f.file, "x", 1, 0644);
	write_key(f.key, "0123456789abcdef0123", 0644);
	usage_fails(&f, "chmod 600", (char *[]){ f.sendbin, "--connect", "10.77.0.1:1", "--ram",
						 f.ram, "--auth-key", f.key, NULL });
	usage_fails(&f, "chmod 600", (char *[]){ f.recvbin, "--listen", "10.77.0.1:0",
						 "--ram-dir", f.dst, "--auth-key", f.key, NULL });
	write_key(f.key, "short", 0600);
	usage_fails(&f, "16 to 1024", (char *[]){ f.sendbin, "--connect", "10.77.0.1:1",
						  "--ram", f.ram, "--auth-key", f.key, NULL });
	tu_fx_free(&f);
}
END_TEST

/* The same key on both sides, with --verify: identical image, exit 0. */
START_TEST(auth_and_verify_succeed)
{
	struct tu_fx f;
	tu_fx_init(&f);
	tu_fx_block(&f, "ram", 4 * MIB, 77);
	tu_fx_recv(&f, NULL, (const char *[]){ "--ram-dir", f.dst, "--auth-key", f.key, NULL });
	tu_fx_send(&f, NULL, (const char *[]){ "--ram", f.ram, "--auth-key", f.key, "--verify",
					       NULL });
	both_ok(&f, 60000);
	tu_assert_same(f.file, f.image);
	tu_fx_free(&f);
}
END_TEST

/* --channels: the daemon grants at most 3; a pin-all source asking for 4
 * gets 3 and says so, a dynamic one with a cap of four chunks (so chunks
 * are released and re-registered while other channels write) gets the 3 it
 * asks for, with --verify and --auth-key; both images are exact. */
START_TEST(channels_stripe_and_cap)
{
	struct tu_fx f;
	char b[400], rb[500], d1[400], d2[400];
	struct tu_run s2 = { .p.pid = 0 };
	int c2;

	tu_fx_init(&f);
	tu_fx_block(&f, "ram", 24 * MIB, 31);
	snprintf(b, sizeof(b), "%s/b", f.src);
	write_sparse(b, 24 * MIB, 3, 32);
	snprintf(rb, sizeof(rb), "ram=%s", b);
	tu_fx_recv(&f, NULL, (const char *[]){ "--ram-dir", f.dst, "--daemon", "--channels", "3",
					       "--auth-key", f.key, NULL });
	tu_fx_send(&f, NULL, (const char *[]){ "--ram", f.ram, "--pin-all", "--channels", "4",
					       "--auth-key", f.key, NULL });
	ck_assert_int_eq(tu_run_finish(&f.send, 60000), 0);
	if (!tu_file_has(f.send.err, "accepts 3 of the 4 channels")) {
		tu_run_dump(&f.send, "send");
		ck_abort_msg("the pin-all source did not report 3 of 4 channels");
	}
	send2(&f, &s2, (const char *[]){ "--ram", rb, "--channels", "3", "--chunk-size", "256K",
					 "--pinned-cap", "1M", "--verify", "--auth-key", f.key,
					 "--verbose", NULL });
	c2 = tu_run_finish(&s2, 60000);
	if (c2 || !tu_file_has(s2.err, "striping writes over 3 channels")) {
		tu_run_dump(&s2, "send2");
		tu_run_dump(&f.recv, "recv");
	}
	ck_assert_int_eq(c2, 0);
	ck_assert_msg(tu_file_has(s2.err, "striping writes over 3 channels"),
		      "the dynamic source did not stripe over 3 channels");
	snprintf(d1, sizeof(d1), "%s/1/ram", f.dst);
	snprintf(d2, sizeof(d2), "%s/2/ram", f.dst);
	tu_assert_same(f.file, d1);
	tu_assert_same(b, d2);
	ck_assert_int_eq(tu_fx_recv_term(&f), 0);
	tu_fx_free(&f);
}
END_TEST

/* A wrong key: the source exits 4; migrate-recv turns that connection away
 * without touching the operator's files (no marker next to the existing
 * --ram image, no --state-out FILE.part), keeps waiting, and then takes the
 * real source.  (Before, it exited 4 after creating the marker and
 * truncating the .part file.) */
START_TEST(auth_wrong_key_rejected)
{
	struct tu_fx f;
	char k1[400], k2[400], rd[500], state[400], part[420], *err;
	int sc;

	tu_fx_init(&f);
	snprintf(k1, sizeof(k1), "%s/key1", f.dir);
	snprintf(k2, sizeof(k2), "%s/key2", f.dir);
	write_key(k1, "the destination's secret key", 0600);
	write_key(k2, "somebody else's secret key!!", 0600);
	tu_fx_block(&f, "ram", 0, 0);
	snprintf(state, sizeof(state), "%s/state", f.dst);
	snprintf(part, sizeof(part), "%s.part", state);
	write_sparse(f.file, 1 << 20, 3, 5);
	tu_write_file(f.image, "the operator's image, not to be touched", 39, 0644);
	tu_write_file(part, "an earlier run's partial state", 30, 0644);
	/* The existing file must be as long as the source's block. */
	ck_assert_int_eq(truncate(f.image, 1 << 20), 0);
	snprintf(rd, sizeof(rd), "ram=%s", f.image);
	tu_fx_recv(&f, NULL, (const char *[]){ "--ram", rd, "--use-existing", "--state-out", state,
				     "--auth-key", k1, NULL });
	tu_fx_send(&f, NULL, (const char *[]){ "--ram", f.ram, "--auth-key", k2, NULL });
	sc = tu_run_finish(&f.send, 60000);
	err = tu_slurp(f.send.err, NULL);
	ck_assert_msg(sc == 4 && strstr(err, "authentication failed"), "send %d: %s", sc, err);
	printf("wrong key: %s", err);
	free(err);
	/* Turned away; nothing of the operator's was touched. */
	ck_assert(tu_wait_line(f.recv.err, "migrate-recv: turned away a connection from ",
			       NULL, 0, 10000) == 0);
	ck_assert_int_eq(waitpid(f.recv.p.pid, NULL, WNOHANG), 0);
	ck_assert(!tu_exists(f.mark));
	err = tu_slurp(part, NULL);
	ck_assert_str_eq(err, "an earlier run's partial state");
	free(err);
	err = tu_slurp(f.image, NULL);
	ck_assert_str_eq(err, "the operator's image, not to be touched");
	free(err);
	/* The real source still gets through. */
	tu_fx_send(&f, NULL, (const char *[]){ "--ram", f.ram, "--auth-key", k1, NULL });
	both_ok(&f, 60000);
	tu_assert_same(f.file, f.image);
	ck_assert(!tu_exists(f.mark));
	ck_assert(tu_exists(state) && !tu_exists(part));
	tu_fx_free(&f);
}
END_TEST

/* A keyless source is turned away; the keyed receiver keeps waiting. */
START_TEST(auth_keyless_source_turned_away)
{
	struct tu_fx f;
	char *err;
	int sc;

	tu_fx_init(&f);
	tu_fx_block(&f, "ram", 0, 0);
	tu_write_file(f.file, "data", 4, 0644);
	tu_fx_recv(&f, NULL, (const char *[]){ "--ram-dir", f.dst, "--auth-key", f.key, NULL });
	tu_fx_send(&f, NULL, (const char *[]){ "--ram", f.ram, NULL });
	sc = tu_run_finish(&f.send, 60000);
	err = tu_slurp(f.send.err, NULL);
	ck_assert_msg(sc == 4, "send exited %d: %s", sc, err);
	ck_assert_msg(strstr(err, "unauthorized") != NULL, "send said: %s", err);
	free(err);
	/* Still listening for the real source. */
	usleep(300000);
	ck_assert_int_eq(waitpid(f.recv.p.pid, NULL, WNOHANG), 0);
	ck_assert_int_eq(tu_fx_recv_term(&f), 7);
	err = tu_slurp(f.recv.err, NULL);
	ck_assert_msg(strstr(err, "still waiting") != NULL, "recv said: %s", err);
	free(err);
	tu_fx_free(&f);
}
END_TEST

void cli_cases(Suite *s)
{
	TCase *tc = tu_case(s, "softroce", 240);

	tcase_add_test(tc, bad_command_lines);
	tcase_add_test(tc, cold_two_files_and_state);
	tcase_add_loop_test(tc, live_converges_and_stops, 0, 4);
	tcase_add_test(tc, recv_killed_workload_resumes);
	tcase_add_test(tc, cancel_over_control_socket);
	tcase_add_test(tc, sigterm_cancels_live_migration);
	tcase_add_test(tc, deferred_start);
	tcase_add_test(tc, deferred_cancel);
	tcase_add_test(tc, recv_control_and_signal);
	tcase_add_test(tc, daemon_two_at_once);
	tcase_add_test(tc, size_mismatch_existing_file);
	tcase_add_test(tc, auth_key_file_permissions);
	tcase_add_test(tc, auth_and_verify_succeed);
	tcase_add_test(tc, auth_wrong_key_rejected);
	tcase_add_test(tc, auth_keyless_source_turned_away);
	tcase_add_test(tc, channels_stripe_and_cap);
}
