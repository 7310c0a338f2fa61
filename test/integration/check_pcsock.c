/* migrate-recv --postcopy-socket and migrate-send --postcopy over rxe
 * (issue 33, item 4b): a VMM in a process of its own (pcvmm) hands its
 * memfd and userfaultfd to migrate-recv, which receives a live process's
 * RAM file into it and serves the VMM's faults after the switch.  Every
 * page the VMM sees must be the source's as of the pause (the process
 * stays stopped after a post-copy, so its file is that reference).
 * The VMM also gets the device state on the socket before "run" (or
 * before "complete"): its digest must be that of migrate-send's
 * --state-in file.
 * Every page the VMM's threads read is checked too: none may be stale.
 * Run: CK_RUN_SUITE=pcsock (cases postcopy_socket, postcopy_socket_hostile,
 * postcopy_error). */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "runs.h"
#include "suite.h"
#include "suites.h"

#define PAGE 4096u

/* The device state sent: over the 4 MiB state ring (it wraps) and far
 * over a UNIX socket's buffer (the VMM reads while it comes), not a
 * multiple of anything. */
#define STATE_BYTES (6u * 1048576u + 4099u)

struct pc {
	struct tu_fx f;
	struct tu_run vmm;
	char sock[400], sums[400], ref[400], vmmbin[512], state[400];
};

/* The fixture, a workload of @size at @rate MiB/s on block "vm", and a
 * VMM for it with @vmm_args, attached to migrate-recv @recv_args. */
static void setup(struct pc *p, const char *size, const char *rate,
		  const char *const *vmm_args, const char *const *recv_args)
{
	struct tu_argv v = { .n = 0 }, r = { .n = 0 };
	char bytes[32];

	memset(&p->vmm, 0, sizeof(p->vmm));
	tu_fx_init(&p->f);
	tu_fx_block(&p->f, "vm", 0, 0);
	tu_fx_load(&p->f, p->f.file, size, rate);
	snprintf(p->sock, sizeof(p->sock), "%s/vmm.sock", p->f.dir);
	snprintf(p->sums, sizeof(p->sums), "%s/vmm.sums", p->f.dir);
	snprintf(p->ref, sizeof(p->ref), "%s/src.sums", p->f.dir);
	tu_build_path("test/pcvmm", p->vmmbin, sizeof(p->vmmbin));
	snprintf(p->state, sizeof(p->state), "%s/state-in", p->f.dir);
	tu_write_random(p->state, STATE_BYTES, 33);
	snprintf(bytes, sizeof(bytes), "%llu", (unsigned long long)strtoull(size, NULL, 0) *
		 (strchr(size, 'M') ? 1048576ull : 1ull));
	tu_argv_add(&v, (const char *[]){ p->vmmbin, p->sock, "vm", bytes, p->sums, NULL });
	tu_argv_add(&v, vmm_args);
	/* The VMM waits for the socket; migrate-recv listens for the source
	 * only once the VMM attached. */
	tu_run_cmd(&p->vmm, p->f.dir, "vmm", (const char *const *)v.v, NULL);
	tu_argv_add(&r, (const char *[]){ "--postcopy-socket", p->sock, NULL });
	tu_argv_add(&r, recv_args);
	tu_fx_recv(&p->f, NULL, (const char *const *)r.v);
	tu_must_see(&p->f.recv, "recv", "vmm-attached", 5000);
}

/* FNV-1a 64 of every page of @path, as pcvmm writes them. */
static void page_sums(const char *path, const char *out)
{
	FILE *in = fopen(path, "r"), *o = fopen(out, "w");
	unsigned char buf[PAGE];

	ck_assert_ptr_nonnull(in);
	ck_assert_ptr_nonnull(o);
	while (fread(buf, 1, PAGE, in) == PAGE) {
		unsigned long long h = 0xcbf29ce484222325ull;
		unsigned i;

		for (i = 0; i < PAGE; i++)
			h = (h ^ buf[i]) * 0x100000001b3ull;
		fprintf(o, "%016llx\n", h);
	}
	fclose(in);
	fclose(o);
}

/* The VMM printed the digest of the state it got: that of @path, every
 * byte of it. */
static void assert_state(struct pc *p, const char *path)
{
	unsigned long long h = 0xcbf29ce484222325ull, n = 0;
	char want[64];
	FILE *in = fopen(path, "r");
	int c;

	ck_assert_ptr_nonnull(in);
	while ((c = getc(in)) != EOF) {
		h = (h ^ (unsigned char)c) * 0x100000001b3ull;
		n++;
	}
	fclose(in);
	snprintf(want, sizeof(want), "state bytes %llu\n", n);
	ck_assert_msg(tu_file_has(p->vmm.out, want), "the VMM did not get %llu state bytes", n);
	snprintf(want, sizeof(want), "digest state %016llx\n", h);
	ck_assert_msg(tu_file_has(p->vmm.out, want), "the VMM's state is not the source's "
		      "(want \"%.30s\")", want);
}

/* Every page the VMM's threads read (pcvmm's SUMS.seen, "PAGE SUM" with
 * the low bit forced on) is the source's page of @ref: none was stale.
 * Nothing to check when the guest never ran. */
static void assert_seen(const char *ref, const char *sums)
{
	char path[512], line[64];
	unsigned long long pg, h, want, at = 0;
	FILE *s, *r = fopen(ref, "r");

	snprintf(path, sizeof(path), "%s.seen", sums);
	s = fopen(path, "r");
	ck_assert_ptr_nonnull(r);
	if (!s) {
		fclose(r);
		return;
	}
	while (fscanf(s, "%llu %llx", &pg, &h) == 2) {
		/* Both in page order: the reference is read on to @pg. */
		for (; at <= pg; at++) {
			ck_assert_msg(fgets(line, sizeof(line), r), "page %llu is beyond the source's",
				      pg);
		}
		want = strtoull(line, NULL, 16) | 1;
		ck_assert_msg(h == want, "the VMM read page %llu as %016llx, the source's is "
			      "%016llx: a stale page", pg, h, want);
	}
	fclose(s);
	fclose(r);
}

/* Every process ended as it should (migrate-send with @send_code), and
 * the VMM's guest is the source's. */
static void all_ok_with(struct pc *p, int send_code)
{
	int sc = tu_run_finish(&p->f.send, 120000), rc = tu_run_finish(&p->f.recv, 30000);
	int vc = tu_run_finish(&p->vmm, 30000);

	if (sc != send_code || rc || vc) {
		tu_run_dump(&p->f.send, "send");
		tu_run_dump(&p->f.recv, "recv");
		tu_run_dump(&p->vmm, "vmm");
	}
	ck_assert_int_eq(sc, send_code);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(vc, 0);
	/* The process stays stopped: its file is the guest as of the pause. */
	ck_assert_int_eq(tu_proc_state(p->f.load.p.pid, NULL), 'T');
	page_sums(p->f.file, p->ref);
	tu_assert_same(p->ref, p->sums);
	assert_seen(p->ref, p->sums);
	assert_state(p, p->state);
}

static void all_ok(struct pc *p)
{
	all_ok_with(p, 0);
}

static void teardown(struct pc *p)
{
	tu_run_stop(&p->vmm);
	tu_fx_free(&p->f);
}

/* (a) One pre-copy round, then post-copy: the VMM's guest runs at once
 * and every page it reads is the source's.  Round 1 must not converge
 * (that would complete by pre-copy): a writer alone does not ensure it
 * (64 MiB/s converged on a quiet bed, 16 MiB sent in 0.2 s), a 1 ms
 * --max-downtime does whatever the link's speed; the pause then goes over
 * it, which the status says (12). */
START_TEST(postcopy_after_one_round)
{
	struct pc p;
	struct json_object *ev;

	setup(&p, "16M", "64", NULL, NULL);
	tu_fx_send(&p.f, NULL, (const char *[]){ "--ram", p.f.ram, "--live", "--pid", p.f.pid,
						 "--json", "--postcopy", "--postcopy-after", "1",
						 "--max-downtime", "1", "--state-in", p.state, NULL });
	tu_must_see(&p.f.send, "send", "postcopy-started", 60000);
	tu_must_see(&p.f.recv, "recv", "postcopy-started", 30000);
	all_ok_with(&p, 12);
	ev = tu_event_in(p.f.recv.out, "completed");
	ck_assert_ptr_nonnull(ev);
	ck_assert_uint_gt(tu_jnum(ev, "postcopy-pages"), 0);
	json_object_put(ev);
	teardown(&p);
}
END_TEST

/* (b) A workload that writes faster than the link never converges:
 * --on-timeout postcopy switches at --max-time instead of giving up.  The
 * completed event says it switched to post-copy at that limit; the pause
 * (the stop and the device state) cannot fit the 1 ms --max-downtime
 * given, so the status is 12 with limit-exceeded max-downtime
 * (migrate-send(1), --on-timeout), and the downtime's parts add up to it,
 * the post-copy's time beside them. */
START_TEST(postcopy_on_timeout)
{
	struct pc p;
	struct json_object *ev, *parts, *lim;
	char reason[64];

	setup(&p, "32M", "400", NULL, NULL);
	tu_fx_send(&p.f, NULL, (const char *[]){ "--ram", p.f.ram, "--live", "--pid", p.f.pid,
						 "--json", "--postcopy", "--max-time", "2",
						 "--max-downtime", "1", "--on-timeout", "postcopy",
						 "--state-in", p.state, NULL });
	ev = tu_wait_event(&p.f.send, "postcopy-started", 60000);
	if (!ev)
		tu_run_dump(&p.f.send, "send");
	ck_assert_ptr_nonnull(ev);
	ck_assert_str_ne(tu_jstr(ev, "reason"), "postcopy-after");
	snprintf(reason, sizeof(reason), "%s", tu_jstr(ev, "reason"));
	json_object_put(ev);
	all_ok_with(&p, 12);
	ev = tu_event_in(p.f.send.out, "completed");
	ck_assert_ptr_nonnull(ev);
	ck_assert_str_eq(tu_jstr(ev, "switchover"), "postcopy");
	ck_assert_str_eq(tu_jstr(ev, "switchover-reason"), reason);
	ck_assert(json_object_object_get_ex(ev, "limit-exceeded", &lim));
	ck_assert_str_eq(tu_jstr(lim, "limit"), "max-downtime");
	ck_assert(json_object_object_get_ex(ev, "downtime-parts", &parts));
	ck_assert_uint_eq(tu_jnum(parts, "confirm"), 0);
	/* Each part is rounded down to a ms on its own: 2 ms of slack. */
	ck_assert_uint_le(tu_jnum(parts, "stop") + tu_jnum(parts, "last-round") +
			  tu_jnum(parts, "device-state"), tu_jnum(ev, "downtime"));
	ck_assert_uint_ge(tu_jnum(parts, "stop") + tu_jnum(parts, "last-round") +
			  tu_jnum(parts, "device-state") + 2, tu_jnum(ev, "downtime"));
	ck_assert(json_object_object_get_ex(ev, "postcopy-time", NULL));
	ck_assert(tu_file_has(p.f.send.err, "the pause before post-copy"));
	json_object_put(ev);
	teardown(&p);
}
END_TEST

/* (b) A workload slow enough to converge in its first round: with
 * --postcopy-after 1 the convergence wins and the migration completes by
 * pre-copy (migrate-send(1), --postcopy-after); the VMM never runs in
 * post-copy. */
START_TEST(converged_round_completes_precopy)
{
	struct pc p;
	struct json_object *ev;

	setup(&p, "16M", "1", NULL, NULL);
	/* A small state: the switch-over's cost counts it, and round 1 must
	 * fit --max-downtime. */
	tu_write_random(p.state, 4096, 34);
	tu_fx_send(&p.f, NULL, (const char *[]){ "--ram", p.f.ram, "--live", "--pid", p.f.pid,
						 "--json", "--postcopy", "--postcopy-after", "1",
						 "--state-in", p.state, NULL });
	all_ok(&p);
	ck_assert(!tu_file_has(p.vmm.out, "running"));
	ck_assert(!tu_has_event(p.f.send.out, "postcopy-started"));
	ev = tu_event_in(p.f.send.out, "completed");
	ck_assert_ptr_nonnull(ev);
	ck_assert_str_eq(tu_jstr(ev, "switchover"), "precopy");
	ck_assert_str_eq(tu_jstr(ev, "switchover-reason"), "converged");
	json_object_put(ev);
	teardown(&p);
}
END_TEST

/* (a) A source that completes in pre-copy: the VMM gets its state, then
 * "complete" at once, and never faults. */
START_TEST(precopy_completes)
{
	struct pc p;

	setup(&p, "16M", "8", NULL, NULL);
	tu_fx_send(&p.f, NULL, (const char *[]){ "--ram", p.f.ram, "--live", "--pid", p.f.pid,
						 "--json", "--state-in", p.state, NULL });
	all_ok(&p);
	ck_assert(!tu_file_has(p.vmm.out, "running"));
	teardown(&p);
}
END_TEST

/* (c) A VMM that stops reading its state: migrate-recv gives up within
 * --timeout, naming the VMM and what it was sending, instead of holding
 * the source's guest for ever; the source fails too, and although it had
 * switched, its process runs again: the destination said its guest never
 * ran (rdmig(7), ERROR's guest_never_ran), so the source's copy is whole. */
START_TEST(postcopy_socket_vmm_stalls)
{
	struct json_object *ev;
	struct pc p;
	char pid[64];
	int rc, sc;

	setup(&p, "16M", "8", (const char *[]){ "--stall-state", NULL },
	      (const char *[]){ "--timeout", "5", NULL });
	tu_fx_send(&p.f, NULL, (const char *[]){ "--ram", p.f.ram, "--live", "--pid", p.f.pid,
						 "--json", "--postcopy", "--postcopy-after", "0",
						 "--state-in", p.state, NULL });
	rc = tu_run_finish(&p.f.recv, 60000);
	sc = tu_run_finish(&p.f.send, 60000);
	if (rc == 0 || sc == 0 || !tu_file_has(p.f.recv.err, "did not read the device state")) {
		tu_run_dump(&p.f.recv, "recv");
		tu_run_dump(&p.f.send, "send");
	}
	/* The VMM's doing: a cancel (migrate-recv(1), EXIT STATUS). */
	ck_assert_int_eq(rc, 7);
	ck_assert_int_ne(sc, 0);
	snprintf(pid, sizeof(pid), "the VMM (pid %d) did not read the device state within 5 s",
		 (int)p.vmm.p.pid);
	ck_assert(tu_file_has(p.f.recv.err, pid));
	ck_assert(tu_file_has(p.f.recv.err, "(--timeout)"));
	/* migrate-recv hung up on it: it saw no "run". */
	ck_assert_int_eq(tu_run_finish(&p.vmm, 10000), 3);
	ck_assert(!tu_file_has(p.vmm.out, "running"));
	/* ... and told the source so: migrate-send resumed its process after
	 * the switch, and says why, in the line and in the failed event. */
	if (!tu_file_has(p.f.send.err, "the destination's guest never ran: resumed after "
			 "the switch to post-copy"))
		tu_run_dump(&p.f.send, "send");
	ck_assert(tu_file_has(p.f.send.err, "the destination's guest never ran: resumed after "
			      "the switch to post-copy, the process keeps running here"));
	ev = tu_event_in(p.f.send.out, "failed");
	ck_assert_ptr_nonnull(ev);
	ck_assert(json_object_get_boolean(json_object_object_get(ev,
								 "destination-guest-never-ran")));
	ck_assert(json_object_get_boolean(json_object_object_get(ev, "workload-running")));
	json_object_put(ev);
	tu_fx_assert_load_runs(&p.f);
	teardown(&p);
}
END_TEST

/* (c) Another user's peer is refused, twice: by the socket's mode, and,
 * with the mode opened up, by SO_PEERCRED; migrate-recv goes on waiting
 * and the real VMM attaches after. */
START_TEST(postcopy_socket_other_user)
{
	struct pc p;
	struct tu_run evil = { 0 };

	memset(&p, 0, sizeof(p));
	tu_fx_init(&p.f);
	snprintf(p.sock, sizeof(p.sock), "%s/vmm.sock", p.f.dir);
	tu_build_path("test/pcvmm", p.vmmbin, sizeof(p.vmmbin));
	snprintf(p.sums, sizeof(p.sums), "%s/evil.sums", p.f.dir);
	chmod(p.f.dir, 0755);
	tu_run_cmd(&p.f.recv, p.f.dir, "recv", (const char *[]){ p.f.recvbin, "--listen",
		   "127.0.0.1:0", "--postcopy-socket", p.sock, "--timeout", "20", NULL }, NULL);
	for (int i = 0; i < 50 && !tu_exists(p.sock); i++)
		usleep(100000);
	ck_assert(tu_exists(p.sock));
	tu_run_cmd(&evil, p.f.dir, "evil", (const char *[]){ "/usr/bin/setpriv", "--reuid=65534",
		   "--regid=65534", "--clear-groups", p.vmmbin, p.sock, "vm", "1048576", p.sums,
		   NULL }, NULL);
	ck_assert_int_eq(tu_run_finish(&evil, 10000), 4); /* EACCES: mode 0600 */
	ck_assert_int_eq(chmod(p.sock, 0666), 0);
	tu_run_cmd(&evil, p.f.dir, "evil", (const char *[]){ "/usr/bin/setpriv", "--reuid=65534",
		   "--regid=65534", "--clear-groups", p.vmmbin, p.sock, "vm", "1048576", p.sums,
		   NULL }, NULL);
	ck_assert_int_eq(tu_run_finish(&evil, 10000), 2);
	ck_assert(tu_file_has(evil.err, "error: a peer of user 65534"));
	ck_assert(tu_file_has(p.f.recv.err, "refused a peer of user 65534"));
	ck_assert(tu_run_running(&p.f.recv));
	tu_run_stop(&evil);
	teardown(&p);
}
END_TEST

/* (c) A message with a bad size, count or fds, or a userfaultfd with a
 * feature refused, is refused with the cause
 * named, to the VMM and on stderr, and migrate-recv exits 2. */
static void bad_message(const char *what, const char *words)
{
	struct pc p;

	memset(&p, 0, sizeof(p));
	tu_fx_init(&p.f);
	snprintf(p.sock, sizeof(p.sock), "%s/vmm.sock", p.f.dir);
	snprintf(p.sums, sizeof(p.sums), "%s/vmm.sums", p.f.dir);
	tu_build_path("test/pcvmm", p.vmmbin, sizeof(p.vmmbin));
	tu_run_cmd(&p.vmm, p.f.dir, "vmm", (const char *[]){ p.vmmbin, p.sock, "vm", "1048576",
		   p.sums, "--bad", what, NULL }, NULL);
	tu_run_cmd(&p.f.recv, p.f.dir, "recv", (const char *[]){ p.f.recvbin, "--listen",
		   "127.0.0.1:0", "--postcopy-socket", p.sock, NULL }, NULL);
	ck_assert_int_eq(tu_run_finish(&p.vmm, 20000), 2);
	ck_assert_int_eq(tu_run_finish(&p.f.recv, 20000), 2);
	ck_assert(tu_file_has(p.vmm.err, words));
	ck_assert(tu_file_has(p.f.recv.err, words));
	/* The error was the answer: nothing after it, and no warning about a
	 * VMM that is gone. */
	ck_assert(!tu_file_has(p.f.recv.err, "is gone"));
	ck_assert(!tu_file_has(p.f.recv.err, "warning"));
	teardown(&p);
}

/* (c) No VMM comes: migrate-recv gives up after --timeout, status 2,
 * without warning about a VMM that never was. */
START_TEST(postcopy_socket_no_vmm)
{
	struct pc p;

	memset(&p, 0, sizeof(p));
	tu_fx_init(&p.f);
	snprintf(p.sock, sizeof(p.sock), "%s/vmm.sock", p.f.dir);
	tu_run_cmd(&p.f.recv, p.f.dir, "recv", (const char *[]){ p.f.recvbin, "--listen",
		   "127.0.0.1:0", "--postcopy-socket", p.sock, "--timeout", "1", NULL }, NULL);
	ck_assert_int_eq(tu_run_finish(&p.f.recv, 20000), 2);
	ck_assert(tu_file_has(p.f.recv.err, "no VMM came within 1 s (--timeout)"));
	ck_assert(!tu_file_has(p.f.recv.err, "is gone"));
	ck_assert(!tu_file_has(p.f.recv.err, "warning"));
	ck_assert(!tu_exists(p.sock));
	teardown(&p);
}
END_TEST

/* (c) SIGINT while waiting for the VMM is a cancel (7), not "no VMM
 * came" (2). */
START_TEST(postcopy_socket_sigint)
{
	struct pc p;
	int i;

	memset(&p, 0, sizeof(p));
	tu_fx_init(&p.f);
	snprintf(p.sock, sizeof(p.sock), "%s/vmm.sock", p.f.dir);
	tu_run_cmd(&p.f.recv, p.f.dir, "recv", (const char *[]){ p.f.recvbin, "--listen",
		   "127.0.0.1:0", "--postcopy-socket", p.sock, "--timeout", "30", NULL }, NULL);
	for (i = 0; i < 50 && !tu_exists(p.sock); i++)
		usleep(100000);
	ck_assert(tu_exists(p.sock));
	ck_assert_int_eq(kill(p.f.recv.p.pid, SIGINT), 0);
	ck_assert_int_eq(tu_run_finish(&p.f.recv, 10000), 7);
	ck_assert(tu_file_has(p.f.recv.err, "interrupted by a signal while waiting for a VMM"));
	ck_assert(!tu_file_has(p.f.recv.err, "no VMM came"));
	teardown(&p);
}
END_TEST

START_TEST(postcopy_socket_bad_messages)
{
	bad_message("size", "size 1048575 is not whole pages");
	bad_message("count", "2 fds for 2 regions");
	bad_message("fds", "3 fds for 1 regions");
	/* A VMM whose MADV_DONTNEED would wait for a REMOVE event nobody
	 * reads, placing pages failing with EAGAIN meanwhile: refused at the
	 * hand-over, not at the switch. */
	bad_message("event-remove", "the userfaultfd has UFFD_FEATURE_EVENT_REMOVE");
	/* A view that is not the memfd at the OFFSET claimed: migrate-recv
	 * would write one place and serve faults on another. */
	bad_message("offset", "maps its memfd at offset 0, not at 4096 (OFFSET)");
	/* A memfd the VMM could shrink under migrate-recv's writes. */
	bad_message("unsealed", "its memfd is not sealed against shrinking");
}
END_TEST

/* (c) The VMM dies during post-copy: migrate-recv fails and says why, the
 * source fails too, and its process stays stopped (the destination's
 * guest ran, and its ERROR does not say it never did). */
START_TEST(postcopy_socket_vmm_dies)
{
	struct json_object *ev;
	struct pc p;
	int rc, sc;

	setup(&p, "32M", "8", (const char *[]){ "--die-after-run", "50", NULL },
	      (const char *[]){ "--timeout", "10", NULL });
	tu_fx_send(&p.f, NULL, (const char *[]){ "--ram", p.f.ram, "--live", "--pid", p.f.pid,
						 "--json", "--postcopy", "--postcopy-after", "0",
						 "--max-bandwidth", "8M", NULL });
	ck_assert_int_eq(tu_run_finish(&p.vmm, 60000), 128 + 9);
	rc = tu_run_finish(&p.f.recv, 30000);
	sc = tu_run_finish(&p.f.send, 60000);
	if (rc == 0 || sc == 0) {
		tu_run_dump(&p.f.recv, "recv");
		tu_run_dump(&p.f.send, "send");
	}
	/* Whichever failure came first (its hangup, or placing a page into a
	 * dead process), the VMM's doing is a cancel. */
	ck_assert_int_eq(rc, 7);
	ck_assert_int_ne(sc, 0);
	ck_assert(tu_file_has(p.f.recv.err, "disconnected from --postcopy-socket") ||
		  tu_file_has(p.f.recv.err, "post-copy"));
	ck_assert_int_eq(tu_proc_state(p.f.load.p.pid, NULL), 'T');
	ck_assert(tu_file_has(p.f.send.err, "it stays stopped: it switched to post-copy, and "
			      "its destination's guest may have run"));
	ev = tu_event_in(p.f.send.out, "failed");
	ck_assert_ptr_nonnull(ev);
	ck_assert(json_object_object_get_ex(ev, "destination-guest-never-ran", NULL));
	ck_assert(!json_object_get_boolean(json_object_object_get(ev,
								  "destination-guest-never-ran")));
	ck_assert(!json_object_get_boolean(json_object_object_get(ev, "workload-running")));
	json_object_put(ev);
	teardown(&p);
}
END_TEST

/* (c) migrate-recv is killed (SIGKILL) after "run": the VMM, which holds
 * its userfaultfd as migrate-recv(1) asks, sees the hangup, stops its
 * guest, and its threads stay blocked on the pages that never came; none
 * read a stale page (every page read is the source's as of the pause). */
START_TEST(postcopy_socket_recv_killed)
{
	struct pc p;
	int i, vc;

	setup(&p, "32M", "8", NULL, (const char *[]){ "--timeout", "10", NULL });
	tu_fx_send(&p.f, NULL, (const char *[]){ "--ram", p.f.ram, "--live", "--pid", p.f.pid,
						 "--json", "--postcopy", "--postcopy-after", "0",
						 "--max-bandwidth", "8M", "--timeout", "10", NULL });
	for (i = 0; i < 600 && !tu_file_has(p.vmm.out, "running"); i++)
		usleep(100000);
	ck_assert_msg(tu_file_has(p.vmm.out, "running"), "the VMM's guest never ran");
	usleep(50000);
	ck_assert_int_eq(kill(p.f.recv.p.pid, SIGKILL), 0);
	vc = tu_run_finish(&p.vmm, 30000);
	tu_run_finish(&p.f.recv, 10000);
	tu_run_finish(&p.f.send, 60000);
	if (vc != 3 || !tu_file_has(p.vmm.err, "guest stopped")) {
		tu_run_dump(&p.vmm, "vmm");
		tu_run_dump(&p.f.send, "send");
	}
	ck_assert_int_eq(vc, 3);
	ck_assert(tu_file_has(p.vmm.err, "after run: migrate-recv hung up: guest stopped"));
	/* Killed 50 ms into the pass of 32 MiB at 8 MiB/s: a thread met a
	 * page that never came, and waits on it. */
	ck_assert(!tu_file_has(p.vmm.err, "guest stopped, 0 of"));
	ck_assert_int_eq(tu_proc_state(p.f.load.p.pid, NULL), 'T');
	page_sums(p.f.file, p.ref);
	assert_seen(p.ref, p.sums);
	teardown(&p);
}
END_TEST

/* A destination that gives up after the switch (evil_peer pcdest
 * --variant @variant) with an ERROR that says its guest never ran
 * (@never_ran) or does not, as one older than 0.3.0: migrate-send fails
 * with its reason, the same status either way, and resumes its process
 * only on that word. */
static void error_after_switch(const char *variant, bool never_ran)
{
	struct json_object *ev, *flag;
	struct tu_run evil;
	char evilbin[512], port[32];
	struct tu_fx f;
	int code, sc;

	memset(&evil, 0, sizeof(evil));
	tu_fx_init(&f);
	tu_fx_block(&f, "vm", 0, 0);
	tu_fx_load(&f, f.file, "16M", "8");
	tu_build_path("test/evil_peer", evilbin, sizeof(evilbin));
	snprintf(f.addr, sizeof(f.addr), "%s:1", tu_addr());
	tu_run_cmd(&evil, f.dir, variant, (const char *[]){ evilbin, "pcdest", f.addr, NULL },
		   (const char *[]){ "--variant", variant, "--listen", tu_addr(), NULL });
	if (tu_wait_line(evil.err, "evil_peer: listening on port ", port, sizeof(port),
			 20000)) {
		tu_run_dump(&evil, "evil_peer");
		ck_abort_msg("evil_peer did not listen");
	}
	snprintf(f.addr, sizeof(f.addr), "%s:%s", tu_addr(), port);
	tu_fx_send(&f, NULL, (const char *[]){ "--ram", f.ram, "--live", "--pid", f.pid,
					       "--json", "--postcopy", "--postcopy-after", "0",
					       NULL });
	code = tu_run_finish(&evil, 90000);
	sc = tu_run_finish(&f.send, 60000);
	if (code != 0 || sc != 5) {
		tu_run_dump(&evil, "evil_peer");
		tu_run_dump(&f.send, "send");
	}
	ck_assert_msg(code == 0, "evil_peer %s did not get to send its ERROR", variant);
	/* The destination reported an error (migrate-send(1), EXIT STATUS). */
	ck_assert_int_eq(sc, 5);
	ck_assert(tu_file_has(f.send.err, "destination reported: a test's destination gives up "
			      "after the switch"));
	ev = tu_event_in(f.send.out, "failed");
	ck_assert_ptr_nonnull(ev);
	ck_assert(json_object_object_get_ex(ev, "destination-guest-never-ran", &flag));
	ck_assert_int_eq(json_object_get_boolean(flag), never_ran);
	ck_assert_int_eq(json_object_get_boolean(json_object_object_get(ev, "workload-running")),
			 never_ran);
	json_object_put(ev);
	if (never_ran) {
		ck_assert(tu_file_has(f.send.err, "the destination's guest never ran: resumed "
				      "after the switch to post-copy"));
		tu_fx_assert_load_runs(&f);
	} else {
		ck_assert(tu_file_has(f.send.err, "it stays stopped: it switched to post-copy, "
				      "and its destination's guest may have run"));
		ck_assert_int_eq(tu_proc_state(f.load.p.pid, NULL), 'T');
	}
	tu_run_stop(&evil);
	tu_fx_free(&f);
}

/* (c) An older destination's ERROR after the switch lacks guest_never_ran:
 * the process stays stopped, as before 0.3.0. */
START_TEST(postcopy_error_from_old_destination)
{
	error_after_switch("error-old", false);
}
END_TEST

/* (c) A destination's ERROR after the switch that says its guest never
 * ran: the process runs again.  The source cannot check the word: a
 * destination that lied would fork the guest, which rdmig(7), THREAT
 * MODEL, accepts from the peer that holds the key. */
START_TEST(postcopy_error_guest_never_ran)
{
	error_after_switch("error-never-ran", true);
}
END_TEST

void pcsock_cases(Suite *s)
{
	TCase *tc = tu_case(s, "postcopy_socket", 400);

	tcase_add_test(tc, postcopy_after_one_round);
	tcase_add_test(tc, postcopy_on_timeout);
	tcase_add_test(tc, precopy_completes);
	tcase_add_test(tc, converged_round_completes_precopy);
	tc = tu_case(s, "postcopy_socket_hostile", 300);
	tcase_add_test(tc, postcopy_socket_other_user);
	tcase_add_test(tc, postcopy_socket_bad_messages);
	tcase_add_test(tc, postcopy_socket_no_vmm);
	tcase_add_test(tc, postcopy_socket_sigint);
	tcase_add_test(tc, postcopy_socket_vmm_dies);
	tcase_add_test(tc, postcopy_socket_vmm_stalls);
	tcase_add_test(tc, postcopy_socket_recv_killed);
	/* A destination's ERROR after the switch, with or without its word
	 * that its guest never ran: CK_RUN_CASE=postcopy_error. */
	tc = tu_case(s, "postcopy_error", 120);
	tcase_add_test(tc, postcopy_error_from_old_destination);
	tcase_add_test(tc, postcopy_error_guest_never_ran);
}
