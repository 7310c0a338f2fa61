/* A stock QEMU guest migrated by migrate-send/migrate-recv --qmp over
 * Soft-RoCE: qemu-system-x86_64 under TCG (nested inside the bed's own TCG
 * guest), running the boot-sector test guest of test/guest, which
 * increments one byte per page of [1 MiB, 101 MiB) pass after pass and
 * prints a marker per pass.
 *
 * Every test runs twice, one test case per QEMU (support/qemu_vm.h): the
 * host's Debian 12 QEMU 7.2 ("qemu-7.2") and Debian 13's QEMU 10.0
 * chrooted in the root of tools/qemu-root ("qemu-10.0"); both QEMUs of a
 * test are the same one, and query-version checks which it is.
 *
 * What decides: the destination guest runs on (new markers after the
 * migration) and its RAM is consistent after it has done whole passes of
 * its own, so a page the migration lost or left stale shows up as a page
 * one behind its neighbours; a failure leaves the source guest running
 * (query-status, and its markers go on); RAM QEMU would not skip is refused
 * before anything moves.  Each test prints one "qemu:" line with the QEMU
 * version and its figures. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qemu_vm.h"
#include "runs.h"
#include "suite.h"
#include "suites.h"
#include "testutil.h"

/* Iterations of the guest's pause per page: under nested TCG about one
 * pass (100 MiB dirtied) per second or two, so pre-copy has to converge. */
#define GUEST_DELAY 3000
#define RAM "128M"

struct qfx {
	char dir[128], work[256], addr[64];
	struct vm_files g;
	char key[300];
	char sendbin[512], recvbin[512];
	const struct vm_qemu *qemu; /* runs both guests */
	struct vm src, dst;
	struct tu_run send, recv;
};

/* @which: the test's loop index, one of VM_QEMU_*. */
static void qfx_init(struct qfx *f, int which)
{
	memset(f, 0, sizeof(*f));
	f->qemu = &vm_qemus[which];
	vm_dir(f->dir, sizeof(f->dir), "qemu");
	tu_tmpdir(f->work, sizeof(f->work));
	vm_files(&f->g, f->dir);
	guest_image(f->g.src_img, GUEST_DELAY);
	guest_image(f->g.dst_img, GUEST_DELAY);
	tu_build_path("bin/migrate-send", f->sendbin, sizeof(f->sendbin));
	tu_build_path("bin/migrate-recv", f->recvbin, sizeof(f->recvbin));
	/* --qmp on either side needs a key, as operators should use one. */
	snprintf(f->key, sizeof(f->key), "%s/key", f->work);
	tu_write_key(f->key);
}

/* How a test QEMU holds its guest RAM. */
enum ram_kind {
	RAM_PLAIN,  /* -m: anonymous memory QEMU migrates itself */
	RAM_FILE,   /* memory-backend-file, share=on: what rdmig carries */
	RAM_MEMFD,  /* memory-backend-memfd, share=on */
};

/* A QEMU whose RAM is the shared file @ram (a file of f->dir, named to a
 * chrooted QEMU by a path of its own root), a memfd or plain -m RAM,
 * booting @img; @extra adds arguments (NULL-terminated, may be NULL). */
static void qfx_qemu_ram(struct qfx *f, struct vm *v, const char *name, const char *machine,
			 enum ram_kind kind, const char *ram, const char *serial,
			 const char *img, const char *const *extra)
{
	char mach[128], obj[400], ser[300], drive[300], inner[300];
	const char *args[24];
	int n = 0;

	snprintf(ser, sizeof(ser), "file:%s", serial);
	snprintf(drive, sizeof(drive), "file=%s,format=raw,if=ide", img);
	if (kind != RAM_PLAIN) {
		snprintf(mach, sizeof(mach), "%s,memory-backend=mem", machine);
		if (kind == RAM_FILE)
			snprintf(obj, sizeof(obj), "memory-backend-file,id=mem,size=" RAM
				 ",mem-path=%s,share=on", vm_inner_path(f->qemu, f->dir,
				 strrchr(ram, '/') + 1, inner, sizeof(inner)));
		else
			snprintf(obj, sizeof(obj), "memory-backend-memfd,id=mem,size=" RAM
				 ",share=on");
		args[n++] = "-machine";
		args[n++] = mach;
		args[n++] = "-object";
		args[n++] = obj;
	} else {
		args[n++] = "-machine";
		args[n++] = machine;
		args[n++] = "-m";
		args[n++] = RAM;
	}
	args[n++] = "-serial";
	args[n++] = ser;
	args[n++] = "-drive";
	args[n++] = drive;
	while (extra && *extra && n < 23)
		args[n++] = *extra++;
	args[n] = NULL;
	vm_start_qemu(v, f->qemu, f->dir, name, args);
}

static void qfx_qemu(struct qfx *f, struct vm *v, const char *name, const char *machine,
		     const char *ram, const char *serial, const char *img,
		     const char *const *extra)
{
	qfx_qemu_ram(f, v, name, machine, ram ? RAM_FILE : RAM_PLAIN, ram, serial, img, extra);
}

/* The usual pair: a source guest running its passes, a destination QEMU
 * waiting with -incoming defer on a machine of type @dst_machine. */
static void qfx_pair(struct qfx *f, const char *dst_machine)
{
	qfx_qemu(f, &f->src, "src", "pc", f->g.src_ram, f->g.src_serial, f->g.src_img, NULL);
	qfx_qemu(f, &f->dst, "dst", dst_machine, f->g.dst_ram, f->g.dst_serial, f->g.dst_img,
		 (const char *[]){ "-incoming", "defer", NULL });
	guest_wait_markers(f->g.src_serial, 0, 2, 120000, "source guest");
}

/* migrate-recv --qmp on the destination QEMU's command monitor. */
static void qfx_recv(struct qfx *f, const char *const *extra)
{
	const char *args[24] = { "--timeout", "10", "--auth-key", f->key };
	int n = 4;

	while (extra && *extra && n < 23)
		args[n++] = *extra++;
	args[n] = NULL;
	tu_recv_listen(&f->recv, f->work, f->recvbin, NULL, args, 30000, NULL, 0, f->addr,
		       sizeof(f->addr));
}

static void qfx_send(struct qfx *f, const char *const *extra)
{
	tu_run_cmd(&f->send, f->work, "send",
		   (const char *[]){ f->sendbin, "--connect", f->addr, "--json", "--timeout", "10",
				     "--auth-key", f->key, NULL }, extra);
}

static void dump_all(struct qfx *f);

/* Both commands with --qmp on their QEMU's monitor (and @extra for the
 * source); both must succeed and the guest run at the destination. */
static void qfx_migrate(struct qfx *f, const char *const *extra)
{
	const char *args[16] = { "--qmp", f->src.cmd_sock };
	int n = 2, sc, rc;

	while (extra && *extra && n < 15)
		args[n++] = *extra++;
	args[n] = NULL;
	qfx_recv(f, (const char *[]){ "--qmp", f->dst.cmd_sock, NULL });
	qfx_send(f, args);
	sc = tu_run_finish(&f->send, 180000);
	rc = tu_run_finish(&f->recv, 30000);
	if (sc || rc)
		dump_all(f);
	ck_assert_int_eq(sc, 0);
	ck_assert_int_eq(rc, 0);
	vm_expect_status(&f->dst, "running");
}

static void qfx_free(struct qfx *f)
{
	tu_run_stop(&f->send);
	tu_run_stop(&f->recv);
	vm_stop(&f->src);
	vm_stop(&f->dst);
	tu_rmdir(f->dir);
	tu_rmdir(f->work);
}

static void dump_all(struct qfx *f)
{
	tu_run_dump(&f->send, "send");
	tu_run_dump(&f->recv, "recv");
	tu_dump("source QEMU", f->src.log);
	tu_dump("destination QEMU", f->dst.log);
}

/* The source guest runs again and makes progress. */
static void assert_source_runs(struct qfx *f)
{
	int before = guest_markers(f->g.src_serial, 0);

	vm_expect_status(&f->src, "running");
	guest_wait_markers(f->g.src_serial, 0, before + 1, 60000, "source guest after the failure");
}

/* Whether @v runs QEMU @major.@minor or later. */
static bool qemu_ge(const struct vm *v, int major, int minor)
{
	int ma = 0, mi = 0;

	sscanf(v->version, "%d.%d", &ma, &mi);
	return ma > major || (ma == major && mi >= minor);
}

/* A management layer's migration settings, as libvirt leaves them on the
 * QEMUs it runs: pause-before-switchover and events on, multifd on, its own
 * bandwidth. */
static void set_libvirt_settings(struct vm *v)
{
	static const char *const caps[] = { "pause-before-switchover", "events", "multifd" };
	struct json_object *list = json_object_new_array(), *c, *p;
	struct cli_err err;
	size_t i;

	for (i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		c = json_object_new_object();
		json_object_object_add(c, "capability", json_object_new_string(caps[i]));
		json_object_object_add(c, "state", json_object_new_boolean(1));
		json_object_array_add(list, c);
	}
	ck_assert_msg(qmp_call(v->q, "migrate-set-capabilities", vm_args1("capabilities", list),
			       NULL, &err) == 0, "%s: set capabilities: %s", v->name,
		      err.msg);
	p = vm_args1("max-bandwidth", json_object_new_int64(10 << 20));
	ck_assert_msg(qmp_call(v->q, "migrate-set-parameters", p, NULL, &err) == 0,
		      "%s: set parameters: %s", v->name, err.msg);
}

/* Every migration capability and parameter of @v, as one string. */
static char *settings(struct vm *v)
{
	struct json_object *c, *p;
	struct cli_err err;
	char *out;

	ck_assert_msg(qmp_call(v->q, "query-migrate-capabilities", NULL, &c,
			       &err) == 0, "%s: %s", v->name, err.msg);
	ck_assert_msg(qmp_call(v->q, "query-migrate-parameters", NULL, &p,
			       &err) == 0, "%s: %s", v->name, err.msg);
	ck_assert(asprintf(&out, "%s %s", json_object_to_json_string(c),
			   json_object_to_json_string(p)) > 0);
	json_object_put(c);
	json_object_put(p);
	return out;
}

static void assert_same_settings(struct vm *v, const char *before)
{
	char *after = settings(v);

	ck_assert_msg(!strcmp(before, after), "%s: migration settings changed:\nbefore %s\n"
		      "after  %s", v->name, before, after);
	free(after);
}

/* QEMU's own migration status, through the test's monitor. */
static void mig_status(struct vm *v, char *st, size_t len)
{
	struct qmp_migration m;
	struct cli_err err;

	ck_assert_msg(qmp_migrate_query(v->q, &m, &err) == 0, "%s: %s", v->name,
		      err.msg);
	snprintf(st, len, "%s", m.status);
}

/* The path of the memfd of @size QEMU (pid @pid) holds. */
static void memfd_of(pid_t pid, char *out, size_t len)
{
	char dir[64], p[320], link[128];
	struct dirent *de;
	struct stat st;
	ssize_t l;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	out[0] = '\0';
	while ((de = readdir(d))) {
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		l = readlink(p, link, sizeof(link) - 1);
		if (l <= 0 || stat(p, &st))
			continue;
		link[l] = '\0';
		if (strstr(link, "memfd:") && st.st_size == 128 << 20)
			snprintf(out, len, "%s", p);
	}
	closedir(d);
	ck_assert_msg(out[0], "QEMU %d holds no 128 MiB memfd", (int)pid);
}

/* ---- tests ----------------------------------------------------------------------- */

/* The tracking migrate-send must have used on QEMU: wp-async where the
 * kernel has PAGEMAP_SCAN (6.7; the test QEMUs run without a seccomp
 * sandbox), soft-dirty before. */
static void expect_tracking(const char *out)
{
	struct json_object *ev = tu_event_in(out, "setup"), *v;
	int maj = 0, min = 0;
	struct utsname u;
	const char *got;

	ck_assert_ptr_nonnull(ev);
	ck_assert(json_object_object_get_ex(ev, "dirty-tracking", &v));
	got = json_object_get_string(v);
	uname(&u);
	ck_assert_int_eq(sscanf(u.release, "%d.%d", &maj, &min), 2);
	ck_assert_str_eq(got, maj > 6 || (maj == 6 && min >= 7) ? "wp-async" : "soft-dirty");
	printf("qemu: QEMU's writes tracked with %s on Linux %s\n", got, u.release);
	json_object_put(ev);
}

/* Live migration with --qmp on both sides: the guest runs on at the
 * destination, its RAM consistent after passes of its own there. */
START_TEST(live_migration_runs_on)
{
	static const char *const part[4] = { "stop", "last-round", "device-state", "confirm" };
	struct json_object *done, *parts, *v;
	uint64_t dt[4], sum = 0;
	int i;
	struct cli_err err;
	char line[512];
	struct qfx f;
	int sc, rc, m0;

	qfx_init(&f, _i);
	qfx_pair(&f, "pc");
	qfx_recv(&f, (const char *[]){ "--qmp", f.dst.cmd_sock, NULL });
	qfx_send(&f, (const char *[]){ "--qmp", f.src.cmd_sock, "--max-downtime", "300", NULL });
	sc = tu_run_finish(&f.send, 180000);
	rc = tu_run_finish(&f.recv, 30000);
	if ((sc && sc != 12) || rc)
		dump_all(&f);
	ck_assert_int_eq(rc, 0);
	expect_tracking(f.send.out);
	done = tu_event_in(f.send.out, "completed");
	ck_assert_ptr_nonnull(done);
	ck_assert_uint_gt(tu_jnum(done, "downtime"), 0);
	/* The limit given is kept (exit 0) or said (exit 12, a loaded bed). */
	ck_assert_msg(tu_jnum(done, "downtime") <= 300 ? sc == 0 :
		      sc == 12 && json_object_object_get_ex(done, "limit-exceeded", NULL),
		      "downtime %" PRIu64 " ms of --max-downtime 300: exit %d",
		      tu_jnum(done, "downtime"), sc);
	/* Its parts account for all of it. */
	ck_assert(json_object_object_get_ex(done, "downtime-parts", &parts));
	for (i = 0; i < 4; i++) {
		ck_assert_msg(json_object_object_get_ex(parts, part[i], &v), "no %s", part[i]);
		dt[i] = (uint64_t)json_object_get_int64(v);
		sum += dt[i];
	}
	ck_assert_uint_le(sum, tu_jnum(done, "downtime") + 2);
	ck_assert_uint_ge(sum + 2, tu_jnum(done, "downtime"));
	ck_assert_uint_ge(tu_jnum(done, "dirty-sync-count"), 2);
	ck_assert_uint_gt(tu_jnum(done, "state-bytes"), 0);
	/* Unthrottled, the guest would write again what a round sends: QEMU's
	 * migration starts as soon as the policy says switch over. */
	tu_phase_after_switch(f.send.out, line, sizeof(line));
	ck_assert_msg(!strcmp(line, "stopping"), "after the switch-over decision: phase \"%s\", "
		      "not \"stopping\"", line);
	/* The guest left the source and runs here. */
	vm_expect_status(&f.src, "postmigrate");
	vm_expect_status(&f.dst, "running");
	m0 = guest_markers(f.g.dst_serial, 1);
	guest_wait_markers(f.g.dst_serial, 1, m0 + 2, 120000, "destination guest");
	ck_assert_msg(qmp_stop(f.dst.q, &err) == 0, "stop: %s", err.msg);
	rc = guest_check(f.g.dst_ram, line, sizeof(line));
	ck_assert_msg(rc == 0, "destination RAM: %s", line);
	printf("qemu: QEMU %s: live migration of a running guest (128 MiB, TCG): %" PRIu64 " rounds, "
	       "total %" PRIu64 " ms, downtime %" PRIu64 " ms (stop %" PRIu64 ", last round %"
	       PRIu64 ", device state %" PRIu64 ", confirm %" PRIu64 "), %" PRIu64 " bytes sent, "
	       "state %" PRIu64 " bytes; destination %s\n", f.src.version,
	       tu_jnum(done, "dirty-sync-count"),
	       tu_jnum(done, "total-time"), tu_jnum(done, "downtime"), dt[0], dt[1], dt[2], dt[3],
	       tu_jnum(done, "transferred"), tu_jnum(done, "state-bytes"), line);
	json_object_put(done);
	qfx_free(&f);
}
END_TEST

/* Both QEMUs and both commands up, migrate-recv killed a second into the
 * first (slowed) round; returns migrate-send's failed event, after
 * checking it exited 5. */
static struct json_object *kill_recv_mid_stream(struct qfx *f)
{
	struct json_object *ev;
	int sc;

	qfx_recv(f, (const char *[]){ "--qmp", f->dst.cmd_sock, NULL });
	/* Slow enough that the first round is still going. */
	qfx_send(f, (const char *[]){ "--qmp", f->src.cmd_sock, "--max-bandwidth", "8M", NULL });
	ev = tu_wait_event(&f->send, "setup", 60000);
	ck_assert_msg(ev != NULL, "no setup event");
	json_object_put(ev);
	usleep(1000 * 1000);
	tu_kill(&f->recv.p, SIGKILL);
	sc = tu_run_finish(&f->send, 60000);
	if (sc != 5)
		dump_all(f);
	ck_assert_int_eq(sc, 5);
	ev = tu_event_in(f->send.out, "failed");
	ck_assert_ptr_nonnull(ev);
	return ev;
}

/* migrate-recv dies mid-stream: migrate-send fails with 5 and the guest
 * runs on at the source. */
START_TEST(recv_killed_guest_resumes)
{
	struct json_object *ev;
	char *before;
	uint64_t t0;
	struct qfx f;

	qfx_init(&f, _i);
	qfx_pair(&f, "pc");
	/* A failure puts a manager's settings back too. */
	set_libvirt_settings(&f.src);
	before = settings(&f.src);
	t0 = tu_now_ms();
	ev = kill_recv_mid_stream(&f);
	ck_assert_msg(json_object_get_boolean(json_object_object_get(ev, "guest-running")),
		      "the failed event does not say the guest runs");
	json_object_put(ev);
	assert_source_runs(&f);
	assert_same_settings(&f.src, before);
	free(before);
	printf("qemu: QEMU %s: migrate-recv killed mid-stream: migrate-send exit 5 %" PRIu64
	       " ms after it started, the source guest running and making progress\n",
	       f.src.version, tu_now_ms() - t0);
	qfx_free(&f);
}
END_TEST

/* The destination QEMU (another machine type) cannot load the device
 * state: both sides fail and the guest runs on at the source. */
START_TEST(dest_rejects_state_guest_resumes)
{
	char *err;
	struct qfx f;
	int sc, rc;

	qfx_init(&f, _i);
	qfx_pair(&f, "q35");
	qfx_recv(&f, (const char *[]){ "--qmp", f.dst.cmd_sock, NULL });
	qfx_send(&f, (const char *[]){ "--qmp", f.src.cmd_sock, NULL });
	sc = tu_run_finish(&f.send, 180000);
	rc = tu_run_finish(&f.recv, 30000);
	if (sc != 5 || rc == 0)
		dump_all(&f);
	ck_assert_int_eq(sc, 5);
	ck_assert_int_ne(rc, 0);
	ck_assert(!tu_has_event(f.recv.out, "completed"));
	assert_source_runs(&f);
	/* From 9.1 on the rejecting QEMU stays, to be looked at
	 * (exit-on-error off); 7.2's exits. */
	if (qemu_ge(&f.dst, 9, 1)) {
		char st[32];

		ck_assert_msg(!vm_exited(&f.dst), "the destination QEMU exited on the bad state");
		mig_status(&f.dst, st, sizeof(st));
		ck_assert_str_eq(st, "failed");
	}
	err = tu_slurp(f.send.err, NULL);
	printf("qemu: QEMU %s: destination QEMU of another machine type: %s", f.src.version, err);
	free(err);
	qfx_free(&f);
}
END_TEST

/* Guest RAM QEMU would migrate itself (not in a shared backend) is refused
 * before anything is sent, naming the fix. */
START_TEST(unshared_ram_refused)
{
	char dst[300], *err;
	struct qfx f;
	int sc;

	qfx_init(&f, _i);
	qfx_qemu(&f, &f.src, "src", "pc", NULL, f.g.src_serial, f.g.src_img, NULL);
	guest_wait_markers(f.g.src_serial, 0, 1, 120000, "source guest");
	snprintf(dst, sizeof(dst), "%s/ramdir", f.work);
	ck_assert_int_eq(mkdir(dst, 0700), 0);
	qfx_recv(&f, (const char *[]){ "--ram-dir", dst, NULL });
	qfx_send(&f, (const char *[]){ "--qmp", f.src.cmd_sock, NULL });
	sc = tu_run_finish(&f.send, 60000);
	err = tu_slurp(f.send.err, NULL);
	ck_assert_msg(sc == 2 && strstr(err, "share=on") && strstr(err, "memory-backend"),
		      "exit %d: %s", sc, err);
	/* Nothing reached the destination, and the guest never paused. */
	ck_assert(!tu_has_event(f.recv.out, "setup") && !tu_has_event(f.recv.out, "refused"));
	vm_expect_status(&f.src, "running");
	printf("qemu: QEMU %s: guest RAM not shared: %s", f.src.version, err);
	free(err);
	tu_kill(&f.recv.p, SIGTERM);
	qfx_free(&f);
}
END_TEST

/* A guest paused before the migration stays paused after a failure, and
 * the report says so instead of claiming it runs. */
START_TEST(recv_killed_paused_guest_stays_paused)
{
	struct json_object *ev;
	struct cli_err err;
	const char *msg;
	struct qfx f;

	qfx_init(&f, _i);
	qfx_pair(&f, "pc");
	ck_assert_msg(qmp_stop(f.src.q, &err) == 0, "stop: %s", err.msg);
	ev = kill_recv_mid_stream(&f);
	ck_assert_msg(!json_object_get_boolean(json_object_object_get(ev, "guest-running")),
		      "the failed event says a paused guest runs");
	msg = json_object_get_string(json_object_object_get(ev, "error"));
	ck_assert_msg(msg && strstr(msg, "stays paused on the source (QEMU status paused)"),
		      "error: %s", msg ? msg : "(none)");
	vm_expect_status(&f.src, "paused");
	printf("qemu: QEMU %s: migrate-recv killed, guest paused beforehand: %s\n",
	       f.src.version, msg);
	json_object_put(ev);
	qfx_free(&f);
}
END_TEST

/* A QEMU run the way libvirt leaves it (pause-before-switchover, events,
 * multifd on, its own max-bandwidth): the pipe migration works, and both
 * QEMUs' migration settings read afterwards exactly as before. */
START_TEST(manager_settings_restored)
{
	char *src_before, *dst_before;
	struct qfx f;

	qfx_init(&f, _i);
	qfx_pair(&f, "pc");
	set_libvirt_settings(&f.src);
	set_libvirt_settings(&f.dst);
	src_before = settings(&f.src);
	dst_before = settings(&f.dst);
	qfx_migrate(&f, NULL);
	assert_same_settings(&f.src, src_before);
	assert_same_settings(&f.dst, dst_before);
	printf("qemu: QEMU %s: with libvirt's settings (pause-before-switchover, events, multifd, "
	       "max-bandwidth 10M): migrated, and both QEMUs' capabilities and parameters read "
	       "as before\n", f.src.version);
	free(src_before);
	free(dst_before);
	qfx_free(&f);
}
END_TEST

/* QEMU stopped the guest and waits in pre-switchover while the last round
 * cannot go (migrate-recv frozen): a cancel then ends QEMU's migration in
 * that state, the guest runs again, and QEMU's settings are as before. */
START_TEST(cancel_in_pre_switchover)
{
	char ctl[300], st[32] = "", *before;
	struct json_object *ev;
	uint64_t t0, took;
	struct qfx f;
	int sc;

	qfx_init(&f, _i);
	qfx_pair(&f, "pc");
	before = settings(&f.src);
	snprintf(ctl, sizeof(ctl), "%s/send.ctl", f.work);
	qfx_recv(&f, (const char *[]){ "--qmp", f.dst.cmd_sock, NULL });
	/* QEMU's own migration starts once rdmig's pre-copy ends: at most
	 * three rounds, and then the switch-over whatever is left, so that a
	 * loaded bed, where the guest dirties as fast as the link moves and
	 * the rounds go on to the default 30, still gets there in time (it
	 * did not within 120 s once, both QEMUs). */
	qfx_send(&f, (const char *[]){ "--qmp", f.src.cmd_sock, "--control", ctl,
				       "--max-iterations", "3", "--on-timeout", "switchover", NULL });
	t0 = tu_now_ms();
	while (tu_now_ms() - t0 < 120000) {
		mig_status(&f.src, st, sizeof(st));
		if (strcmp(st, "none"))
			break;
		usleep(2000);
	}
	ck_assert_msg(strcmp(st, "none"), "QEMU's own migration never started");
	tu_kill(&f.recv.p, SIGSTOP);
	t0 = tu_now_ms();
	do {
		mig_status(&f.src, st, sizeof(st));
	} while (strcmp(st, "pre-switchover") && tu_now_ms() - t0 < 30000 && !usleep(5000));
	/* Once under load QEMU's migration read "cancelled" here: what
	 * migrate-send and both QEMUs said then is the only clue. */
	if (strcmp(st, "pre-switchover"))
		dump_all(&f);
	ck_assert_str_eq(st, "pre-switchover");
	/* QEMU stopped the guest for its switch-over. */
	vm_expect_status(&f.src, "finish-migrate");
	t0 = tu_now_ms();
	json_object_put(tu_control(ctl, "{\"command\":\"cancel\"}\n"));
	sc = tu_run_finish(&f.send, 30000);
	took = tu_now_ms() - t0;
	tu_kill(&f.recv.p, SIGCONT);
	if (sc != 7)
		dump_all(&f);
	ck_assert_int_eq(sc, 7);
	ev = tu_event_in(f.send.out, "failed");
	ck_assert_ptr_nonnull(ev);
	ck_assert_msg(json_object_get_boolean(json_object_object_get(ev, "guest-running")),
		      "the failed event does not say the guest runs");
	json_object_put(ev);
	mig_status(&f.src, st, sizeof(st));
	ck_assert_str_eq(st, "cancelled");
	assert_source_runs(&f);
	assert_same_settings(&f.src, before);
	printf("qemu: QEMU %s: cancelled with QEMU in pre-switchover: migrate-send exit 7 %" PRIu64
	       " ms after the cancel, QEMU's migration cancelled, the guest runs on the source, "
	       "settings as before\n", f.src.version, took);
	free(before);
	qfx_free(&f);
}
END_TEST

/* memfd RAM: QEMU 8.1 and later migrate it themselves after stopping the
 * guest (x-ignore-shared skips file-backed RAM only), so both commands
 * refuse it before anything moves, naming the fix; 7.2 skips it, and it
 * migrates as file-backed RAM does. */
START_TEST(memfd_by_version)
{
	struct cli_err line;
	char *serr, rerr[4096], ram[320];
	struct qfx f;
	int sc, rc, m0;

	qfx_init(&f, _i);
	qfx_qemu_ram(&f, &f.src, "src", "pc", RAM_MEMFD, NULL, f.g.src_serial, f.g.src_img, NULL);
	qfx_qemu_ram(&f, &f.dst, "dst", "pc", RAM_MEMFD, NULL, f.g.dst_serial, f.g.dst_img,
		     (const char *[]){ "-incoming", "defer", NULL });
	guest_wait_markers(f.g.src_serial, 0, 2, 120000, "source guest");
	if (qemu_ge(&f.src, 8, 1)) {
		struct tu_run r;
		const char *args[] = { "--listen", "10.77.0.1:0", "--qmp", f.dst.cmd_sock,
				       "--auth-key", f.key, NULL };
		char *argv[12] = { f.recvbin };
		int n = 1;

		while (args[n - 1])
			argv[n] = (char *)args[n - 1], n++;
		argv[n] = NULL;
		memset(&r, 0, sizeof(r));
		tu_run_spawn(&r, f.work, "recvmemfd", argv);
		rc = tu_run_finish(&r, 30000);
		serr = tu_slurp(r.err, NULL);
		snprintf(rerr, sizeof(rerr), "%s", serr ? serr : "");
		free(serr);
		snprintf(f.addr, sizeof(f.addr), "10.77.0.1:1");
		qfx_send(&f, (const char *[]){ "--qmp", f.src.cmd_sock, NULL });
		sc = tu_run_finish(&f.send, 60000);
		serr = tu_slurp(f.send.err, NULL);
		ck_assert_msg(sc == 2 && strstr(serr, "memory-backend-memfd") &&
			      strstr(serr, "memory-backend-file") && strstr(serr, "8.1"),
			      "migrate-send exit %d: %s", sc, serr);
		ck_assert_msg(rc == 2 && strstr(rerr, "memory-backend-memfd"),
			      "migrate-recv exit %d: %s", rc, rerr);
		vm_expect_status(&f.src, "running");
		printf("qemu: QEMU %s: memfd RAM refused before anything moved: %s", f.src.version,
		       serr);
		free(serr);
		qfx_free(&f);
		return;
	}
	qfx_migrate(&f, NULL);
	m0 = guest_markers(f.g.dst_serial, 1);
	guest_wait_markers(f.g.dst_serial, 1, m0 + 1, 120000, "destination guest");
	ck_assert_msg(qmp_stop(f.dst.q, &line) == 0, "stop: %s", line.msg);
	memfd_of(f.dst.p.pid, ram, sizeof(ram));
	ck_assert_msg(guest_check(ram, line.msg, sizeof(line.msg)) == 0, "destination RAM: %s",
		      line.msg);
	printf("qemu: QEMU %s: memfd RAM migrated live; destination %s\n", f.src.version, line.msg);
	qfx_free(&f);
}
END_TEST

void qemu_cases(Suite *s)
{
	const TTest *const tests[] = {
		unshared_ram_refused,
		live_migration_runs_on,
		recv_killed_guest_resumes,
		recv_killed_paused_guest_stays_paused,
		dest_rejects_state_guest_resumes,
		manager_settings_restored,
		cancel_in_pre_switchover,
		memfd_by_version,
	};
	TCase *tc;
	size_t t;
	int i;

	/* One test case per QEMU, each test looped over that QEMU's index
	 * only: CK_RUN_CASE=qemu-10.0 picks one QEMU. */
	for (i = 0; i < VM_QEMUS; i++) {
		tc = tu_case(s, vm_qemus[i].name, 400);
		for (t = 0; t < sizeof(tests) / sizeof(tests[0]); t++)
			tcase_add_loop_test(tc, tests[t], i, i + 1);
	}
}
