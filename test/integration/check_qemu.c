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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qemu_vm.h"
#include "runs.h"
#include "suites.h"
#include "testutil.h"

/* Iterations of the guest's pause per page: under nested TCG about one
 * pass (100 MiB dirtied) per second or two, so pre-copy has to converge. */
#define GUEST_DELAY 3000
#define RAM "128M"

struct qfx {
	char dir[128], work[256], addr[64];
	char src_ram[256], dst_ram[256], src_serial[256], dst_serial[256];
	char src_img[256], dst_img[256], key[300];
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
	snprintf(f->src_ram, sizeof(f->src_ram), "%s/src.ram", f->dir);
	snprintf(f->dst_ram, sizeof(f->dst_ram), "%s/dst.ram", f->dir);
	snprintf(f->src_serial, sizeof(f->src_serial), "%s/src.serial", f->dir);
	snprintf(f->dst_serial, sizeof(f->dst_serial), "%s/dst.serial", f->dir);
	/* Each QEMU its own copy: both lock the image they boot from. */
	snprintf(f->src_img, sizeof(f->src_img), "%s/src.img", f->dir);
	snprintf(f->dst_img, sizeof(f->dst_img), "%s/dst.img", f->dir);
	guest_image(f->src_img, GUEST_DELAY);
	guest_image(f->dst_img, GUEST_DELAY);
	tu_build_path("bin/migrate-send", f->sendbin, sizeof(f->sendbin));
	tu_build_path("bin/migrate-recv", f->recvbin, sizeof(f->recvbin));
	/* --qmp on either side needs a key, as operators should use one. */
	snprintf(f->key, sizeof(f->key), "%s/key", f->work);
	{
		int fd = open(f->key, O_WRONLY | O_CREAT | O_EXCL, 0600);

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, "the migration's shared secret", 29), 29);
		close(fd);
	}
}

/* A QEMU whose RAM is the shared file @ram (NULL: plain anonymous -m RAM),
 * booting @img; @extra adds arguments (NULL-terminated, may be NULL). */
static void qfx_qemu(struct qfx *f, struct vm *v, const char *name, const char *machine,
		     const char *ram, const char *serial, const char *img,
		     const char *const *extra)
{
	char mach[128], obj[300], ser[300], drive[300];
	const char *args[24];
	int n = 0;

	snprintf(ser, sizeof(ser), "file:%s", serial);
	snprintf(drive, sizeof(drive), "file=%s,format=raw,if=ide", img);
	if (ram) {
		snprintf(mach, sizeof(mach), "%s,memory-backend=mem", machine);
		snprintf(obj, sizeof(obj), "memory-backend-file,id=mem,size=" RAM ",mem-path=%s,"
			 "share=on", ram);
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

/* The usual pair: a source guest running its passes, a destination QEMU
 * waiting with -incoming defer on a machine of type @dst_machine. */
static void qfx_pair(struct qfx *f, const char *dst_machine)
{
	qfx_qemu(f, &f->src, "src", "pc", f->src_ram, f->src_serial, f->src_img, NULL);
	qfx_qemu(f, &f->dst, "dst", dst_machine, f->dst_ram, f->dst_serial, f->dst_img,
		 (const char *[]){ "-incoming", "defer", NULL });
	guest_wait_markers(f->src_serial, 0, 2, 120000, "source guest");
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
	char *argv[24];
	int n = 0;

	argv[n++] = f->sendbin;
	argv[n++] = "--connect";
	argv[n++] = f->addr;
	argv[n++] = "--json";
	argv[n++] = "--timeout";
	argv[n++] = "10";
	argv[n++] = "--auth-key";
	argv[n++] = f->key;
	while (extra && *extra && n < 23)
		argv[n++] = (char *)*extra++;
	argv[n] = NULL;
	tu_run_spawn(&f->send, f->work, "send", argv);
}

static void qfx_free(struct qfx *f)
{
	if (f->send.p.pid > 0 && !f->send.p.reaped)
		tu_kill(&f->send.p, SIGKILL);
	if (f->recv.p.pid > 0 && !f->recv.p.reaped)
		tu_kill(&f->recv.p, SIGKILL);
	tu_wait(&f->send.p, 5000);
	tu_wait(&f->recv.p, 5000);
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
	int before = guest_markers(f->src_serial, 0);

	vm_expect_status(&f->src, "running");
	guest_wait_markers(f->src_serial, 0, before + 1, 60000, "source guest after the failure");
}

/* ---- tests ----------------------------------------------------------------------- */

/* Live migration with --qmp on both sides: the guest runs on at the
 * destination, its RAM consistent after passes of its own there. */
START_TEST(live_migration_runs_on)
{
	static const char *const part[4] = { "stop", "last-round", "device-state", "confirm" };
	struct json_object *done, *parts, *v;
	uint64_t dt[4], sum = 0;
	int i;
	char line[512], err[512];
	struct qfx f;
	int sc, rc, m0;

	qfx_init(&f, _i);
	qfx_pair(&f, "pc");
	qfx_recv(&f, (const char *[]){ "--qmp", f.dst.cmd_sock, NULL });
	qfx_send(&f, (const char *[]){ "--qmp", f.src.cmd_sock, "--max-downtime", "300", NULL });
	sc = tu_run_finish(&f.send, 180000);
	rc = tu_run_finish(&f.recv, 30000);
	if (sc || rc)
		dump_all(&f);
	ck_assert_int_eq(sc, 0);
	ck_assert_int_eq(rc, 0);
	done = tu_event_in(f.send.out, "completed");
	ck_assert_ptr_nonnull(done);
	ck_assert_uint_gt(tu_jnum(done, "downtime"), 0);
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
	/* The guest left the source and runs here. */
	vm_expect_status(&f.src, "postmigrate");
	vm_expect_status(&f.dst, "running");
	m0 = guest_markers(f.dst_serial, 1);
	guest_wait_markers(f.dst_serial, 1, m0 + 2, 120000, "destination guest");
	ck_assert_msg(qmp_stop(f.dst.q, err, sizeof(err)) == 0, "stop: %s", err);
	rc = guest_check(f.dst_ram, line, sizeof(line));
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
	uint64_t t0;
	struct qfx f;

	qfx_init(&f, _i);
	qfx_pair(&f, "pc");
	t0 = tu_now_ms();
	ev = kill_recv_mid_stream(&f);
	ck_assert_msg(json_object_get_boolean(json_object_object_get(ev, "guest-running")),
		      "the failed event does not say the guest runs");
	json_object_put(ev);
	assert_source_runs(&f);
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
	qfx_qemu(&f, &f.src, "src", "pc", NULL, f.src_serial, f.src_img, NULL);
	guest_wait_markers(f.src_serial, 0, 1, 120000, "source guest");
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
	char err[512];
	const char *msg;
	struct qfx f;

	qfx_init(&f, _i);
	qfx_pair(&f, "pc");
	ck_assert_msg(qmp_stop(f.src.q, err, sizeof(err)) == 0, "stop: %s", err);
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

Suite *qemu_suite(void)
{
	const TTest *const tests[] = {
		unshared_ram_refused,
		live_migration_runs_on,
		recv_killed_guest_resumes,
		recv_killed_paused_guest_stays_paused,
		dest_rejects_state_guest_resumes,
	};
	Suite *s = suite_create("qemu");
	TCase *tc;
	size_t t;
	int i;

	/* One test case per QEMU, each test looped over that QEMU's index
	 * only: CK_RUN_CASE=qemu-10.0 picks one QEMU. */
	for (i = 0; i < VM_QEMUS; i++) {
		tc = tcase_create(vm_qemus[i].name);
		tcase_set_timeout(tc, 400);
		for (t = 0; t < sizeof(tests) / sizeof(tests[0]); t++)
			tcase_add_loop_test(tc, tests[t], i, i + 1);
		suite_add_tcase(s, tc);
	}
	return s;
}
