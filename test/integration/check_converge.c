/* Busy workloads over Soft-RoCE (issue 31): a process and a QEMU guest
 * that write 2-3 times faster than the link carries (--max-bandwidth
 * makes the link the bottleneck, whatever the bed's speed that day: set
 * from the workload's rate measured just before).
 *
 * With --auto-converge the migration throttles the workload (cgroup v2
 * cpu.max on its threads: a process's, or the guest's vCPU threads) until
 * what is left fits --max-downtime, and completes within it, the image
 * consistent.  However the migration ends (success, migrate-recv killed,
 * cancel over the control socket, SIGINT, --on-timeout cancel at
 * --max-time, migrate-send killed with SIGKILL), the throttle is gone
 * afterwards: every thread back in its own cgroup, no rdmig-throttle
 * cgroup left, and the workload writing at its unthrottled rate again.
 *
 * Test cases: "process" (memload --cpu: its writes follow the CPU time it
 * gets, as a vCPU's do), "qemu-7.2" and "qemu-10.0" (the boot-sector test
 * guest walking 16 MiB, on each QEMU of support/qemu_vm.h).  Each test
 * prints "converge:" lines with its figures. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qemu_vm.h"
#include "runs.h"
#include "suite.h"
#include "suites.h"
#include "testutil.h"

#define MIB (1ull << 20)
#define CGROUP_ROOT "/sys/fs/cgroup"
/* The process: a 16 MiB RAM file written page after page at this many MiB
 * per second of CPU time. */
#define LOAD_SIZE "16M"
#define LOAD_RATE "60"
/* The guest walks [1 MiB, 17 MiB) with this pause per page. */
#define GUEST_END_MIB 17
#define GUEST_DELAY 2000
/* The link carries a third of what the process writes.  A guest writes
 * two to three times slower once migrate-send and rxe share the bed's two
 * CPUs with its QEMU (measured: 70 MiB/s alone, 23 MiB/s beside a
 * migration at 23 MiB/s): a sixth of its rate alone is two to three
 * times less than it writes while migrated. */
#define PROCESS_OVERLOAD 3
#define GUEST_OVERLOAD 6
/* A guest's switch-over also holds QEMU saving and loading its devices,
 * 100-200 ms under TCG and more on a loaded machine. */
#define PROCESS_DOWNTIME 400
#define GUEST_DOWNTIME 1000
#define MAX_THREADS 256

/* ---- what a test runs ---------------------------------------------------------- */

struct cfx {
	char dir[128], work[256], addr[64], key[300], ctl[300];
	char sendbin[512], recvbin[512], loadbin[512];
	char ram[256], dst[320], state[320];
	/* the process */
	struct tu_run load;
	/* the guests */
	const struct vm_qemu *qemu;
	struct vm src, dst_vm;
	struct vm_files g;
	struct tu_run send, recv;
	pid_t pid;              /* the workload's process */
	pid_t tids[MAX_THREADS]; /* the threads throttled: a guest's vCPUs, or all */
	char cg[MAX_THREADS][256]; /* ... and their cgroups before */
	unsigned ntids;
	/* unthrottled: CPU share (process), passes/s (guest); the best
	 * sample and the median */
	double rate, typical;
	uint64_t bw;            /* --max-bandwidth, bytes/s */
	unsigned max_downtime;  /* --max-downtime, ms */
};

static void cfx_init(struct cfx *f)
{
	/* The figures printed survive a failed assertion. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(f, 0, sizeof(*f));
	vm_dir(f->dir, sizeof(f->dir), "conv");
	tu_tmpdir(f->work, sizeof(f->work));
	tu_build_path("bin/migrate-send", f->sendbin, sizeof(f->sendbin));
	tu_build_path("bin/migrate-recv", f->recvbin, sizeof(f->recvbin));
	tu_build_path("bin/memload", f->loadbin, sizeof(f->loadbin));
	snprintf(f->key, sizeof(f->key), "%s/key", f->work);
	snprintf(f->ctl, sizeof(f->ctl), "%s/send.ctl", f->work);
	tu_write_key(f->key);
}

static void cfx_free(struct cfx *f)
{
	tu_run_stop(&f->send);
	tu_run_stop(&f->recv);
	tu_run_stop(&f->load);
	vm_stop(&f->src);
	vm_stop(&f->dst_vm);
	tu_rmdir(f->dir);
	tu_rmdir(f->work);
}

static void dump(struct cfx *f)
{
	tu_run_dump(&f->send, "send");
	tu_run_dump(&f->recv, "recv");
	if (f->src.p.pid)
		tu_dump("source QEMU", f->src.log);
}

/* migrate-recv into plain files, a directory each time (a failure ends
 * the migration before any guest would run there), or into a destination
 * QEMU. */
static void cfx_recv(struct cfx *f, bool qemu)
{
	static int n;

	snprintf(f->dst, sizeof(f->dst), "%s/dst%d", f->work, ++n);
	snprintf(f->state, sizeof(f->state), "%s/state%d", f->work, n);
	ck_assert_int_eq(mkdir(f->dst, 0700), 0);
	const char *plain[] = { "--ram-dir", f->dst, "--state-out", f->state, "--timeout", "5",
				"--auth-key", f->key, NULL };
	const char *vm[] = { "--qmp", f->dst_vm.cmd_sock, "--timeout", "10", "--auth-key", f->key,
			     NULL };

	tu_recv_listen(&f->recv, f->work, f->recvbin, NULL, qemu ? vm : plain, 30000, NULL, 0,
		       f->addr, sizeof(f->addr));
}

/* migrate-send --auto-converge at OVERLOAD times under the workload's
 * rate, with @extra (NULL-terminated). */
static void cfx_send(struct cfx *f, const char *const *extra)
{
	char bw[32], dt[16], pid[16], ram[300];
	struct tu_argv a = { .n = 0 };

	snprintf(bw, sizeof(bw), "%" PRIu64, f->bw);
	snprintf(dt, sizeof(dt), "%u", f->max_downtime);
	snprintf(pid, sizeof(pid), "%d", (int)f->pid);
	snprintf(ram, sizeof(ram), "vm=%s", f->ram);
	tu_argv_add(&a, (const char *[]){ f->sendbin, "--connect", f->addr, "--json", "--auth-key",
					  f->key, "--control", f->ctl, "--auto-converge",
					  "--max-downtime", dt, "--max-bandwidth", bw, NULL });
	if (f->src.p.pid)
		tu_argv_add(&a, (const char *[]){ "--qmp", f->src.cmd_sock, NULL });
	else
		tu_argv_add(&a, (const char *[]){ "--ram", ram, "--live", "--pid", pid, NULL });
	tu_argv_add(&a, extra);
	tu_run_spawn(&f->send, f->work, "send", a.v);
}

/* ---- the throttle, seen from outside ---------------------------------------------- */

/* Thread @tid's cgroup ("0::" line of /proc/PID/task/TID/cgroup). */
static void cgroup_of(pid_t pid, pid_t tid, char *buf, size_t len)
{
	char path[96], *text, *p;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/cgroup", (int)pid, (int)tid);
	text = tu_slurp(path, NULL);
	ck_assert_msg(text, "%s: %s", path, strerror(errno));
	p = strstr(text, "0::");
	ck_assert_msg(p, "%s: no cgroup v2 line: %s", path, text);
	p += 3;
	p[strcspn(p, "\n")] = '\0';
	snprintf(buf, len, "%s", p);
	free(text);
}

/* The threads to watch and their cgroups now, before any throttle. */
static void note_threads(struct cfx *f)
{
	struct cli_err err;
	char task[64];
	struct dirent *de;
	unsigned i;
	DIR *d;

	f->ntids = 0;
	if (f->src.p.pid) {
		ck_assert_msg(qmp_vcpu_threads(f->src.q, f->tids, MAX_THREADS, &f->ntids,
					       &err) == 0, "query-cpus-fast: %s", err.msg);
	} else {
		snprintf(task, sizeof(task), "/proc/%d/task", (int)f->pid);
		d = opendir(task);
		ck_assert_ptr_nonnull(d);
		while ((de = readdir(d)) && f->ntids < MAX_THREADS)
			if (de->d_name[0] != '.')
				f->tids[f->ntids++] = (pid_t)atoi(de->d_name);
		closedir(d);
	}
	for (i = 0; i < f->ntids; i++)
		cgroup_of(f->pid, f->tids[i], f->cg[i], sizeof(f->cg[i]));
}

/* How many threads are in a cgroup other than their own; and whether an
 * rdmig-throttle cgroup is left next to theirs. */
static unsigned moved_threads(struct cfx *f, char *why, size_t len)
{
	char now[256], dir[512];
	struct dirent *de;
	unsigned i, moved = 0;
	DIR *d;

	why[0] = '\0';
	for (i = 0; i < f->ntids; i++) {
		cgroup_of(f->pid, f->tids[i], now, sizeof(now));
		if (strcmp(now, f->cg[i])) {
			moved++;
			snprintf(why, len, "thread %d in %s, not %s", (int)f->tids[i], now, f->cg[i]);
		}
	}
	snprintf(dir, sizeof(dir), CGROUP_ROOT "%s", f->cg[0]);
	d = opendir(dir);
	ck_assert_msg(d, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, "rdmig-throttle.", 15)) {
			moved++;
			snprintf(why, len, "%.300s/%.200s left", dir, de->d_name);
		}
	closedir(d);
	return moved;
}

/* Every thread back in its cgroup and no throttle cgroup left, within
 * @ms (the keeper of a migrate-send killed with SIGKILL needs a moment). */
static void assert_released(struct cfx *f, int ms, const char *after)
{
	uint64_t end = tu_now_ms() + (uint64_t)ms;
	char why[600];

	while (moved_threads(f, why, sizeof(why)) && tu_now_ms() < end)
		usleep(20000);
	ck_assert_msg(!moved_threads(f, why, sizeof(why)), "after %s the throttle is still there: "
		      "%s", after, why);
}

/* Whether some thread is still in a throttle cgroup: the throttle was
 * applied. */
static bool throttled_now(struct cfx *f)
{
	char why[600];

	return moved_threads(f, why, sizeof(why)) != 0;
}

/* CPU ticks process @pid used so far. */
static uint64_t cpu_ticks(pid_t pid)
{
	char path[64], *text, *p;
	unsigned long long ut = 0, st = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	text = tu_slurp(path, NULL);
	ck_assert_ptr_nonnull(text);
	p = strrchr(text, ')');
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
				&st), 2);
	free(text);
	return ut + st;
}

/* The workload's rate over @ms: the process's share of a CPU (its writes
 * follow it), or the guest's passes per second. */
static double rate_now(struct cfx *f, int ms, bool migrated)
{
	const char *serial = migrated ? f->g.dst_serial : f->g.src_serial;
	uint64_t t0 = tu_now_ms(), c0, c1;
	int m0, m1;

	if (!f->src.p.pid) {
		c0 = cpu_ticks(f->pid);
		usleep((useconds_t)ms * 1000);
		c1 = cpu_ticks(f->pid);
		return (double)(c1 - c0) / (double)sysconf(_SC_CLK_TCK) * 1000.0 /
		       (double)(tu_now_ms() - t0);
	}
	m0 = guest_markers(serial, migrated);
	usleep((useconds_t)ms * 1000);
	m1 = guest_markers(serial, migrated);
	return (double)(m1 - m0) * 1000.0 / (double)(tu_now_ms() - t0);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The bytes per second the workload dirties, unthrottled, and the link
 * held to a fraction of it: from the best of three samples (a bed shared
 * with other work slows a guest for seconds at a time), so that the link
 * is below it on a good second too; their median is its typical rate. */
static void measure(struct cfx *f)
{
	double mib_s, r[3];
	int i;

	for (i = 0; i < 3; i++) {
		r[i] = rate_now(f, f->src.p.pid ? 2000 : 1000, false);
		/* One thread: a share above 1 is the bed's clock, not memload. */
		if (!f->src.p.pid && r[i] > 1)
			r[i] = 1;
	}
	qsort(r, 3, sizeof(r[0]), cmp_double);
	f->rate = r[2];
	f->typical = r[1];
	mib_s = f->src.p.pid ? f->rate * (GUEST_END_MIB - 1) : f->rate * atof(LOAD_RATE);
	ck_assert_msg(mib_s > 3, "the workload dirties %.2f MiB/s: too slow to test", mib_s);
	f->bw = (uint64_t)(mib_s * (double)MIB / (f->src.p.pid ? GUEST_OVERLOAD : PROCESS_OVERLOAD));
	f->max_downtime = f->src.p.pid ? GUEST_DOWNTIME : PROCESS_DOWNTIME;
	printf("converge: %s dirties %.1f MiB/s unthrottled (%.2f %s); --max-bandwidth %.1f MiB/s\n",
	       f->src.p.pid ? f->src.version : "memload", mib_s, f->rate,
	       f->src.p.pid ? "passes/s" : "of a CPU", (double)f->bw / (double)MIB);
}

/* It runs at its unthrottled rate again, within what a loaded bed lets a
 * rate vary (measured: from half to one and a half times the median, the
 * bed shared with two other test beds): this catches a workload left
 * stopped or held to a third of its rate; that the throttle is gone is
 * assert_released()'s proof. */
static void assert_full_rate(struct cfx *f, bool migrated, const char *after)
{
	double r = rate_now(f, 4000, migrated);

	printf("converge: after %s the %s runs at %.2f %s (%.2f before)\n", after,
	       f->src.p.pid ? "guest" : "process", r, f->src.p.pid ? "passes/s" : "of a CPU",
	       f->typical);
	ck_assert_msg(r >= f->typical / 3, "after %s the workload runs at %.2f, unthrottled it "
		      "ran at %.2f", after, r, f->typical);
}

/* ---- the events ---------------------------------------------------------------------- */

struct peak {
	uint64_t throttle, rounds;
};

static int see_iteration(void *ctx, struct json_object *ev)
{
	struct peak *p = ctx;
	struct json_object *v;

	if (json_object_object_get_ex(ev, "cpu-throttle-percentage", &v) &&
	    (uint64_t)json_object_get_int64(v) > p->throttle)
		p->throttle = (uint64_t)json_object_get_int64(v);
	p->rounds++;
	return 0;
}

static struct peak peak_of(struct cfx *f)
{
	struct peak p = { 0, 0 };

	tu_each_event(f->send.out, "iteration", see_iteration, &p);
	return p;
}

/* Until an iteration event says the throttle is at @pct or more (it is
 * applied when the event goes). */
static void wait_throttle(struct cfx *f, uint64_t pct)
{
	uint64_t end = tu_now_ms() + 120000;
	struct peak p;

	do {
		p = peak_of(f);
		if (p.throttle >= pct)
			return;
		usleep(50000);
	} while (tu_now_ms() < end && !tu_reap(&f->send.p));
	dump(f);
	ck_abort_msg("the throttle never reached %" PRIu64 "%% (%" PRIu64 "%% after %" PRIu64
		     " rounds)", pct, p.throttle, p.rounds);
}

/* The integer @key of @o, or @dflt when there is none. */
static uint64_t jnum_or(struct json_object *o, const char *key, uint64_t dflt)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) ? (uint64_t)json_object_get_int64(v) : dflt;
}

static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

/* ---- the workloads ----------------------------------------------------------------- */

static void start_process(struct cfx *f)
{
	char *fill[] = { f->loadbin, "fill", f->ram, "--size", LOAD_SIZE, "--seed", "5", NULL };
	char *run[] = { f->loadbin, "run", f->ram, "--rate", LOAD_RATE, "--pattern", "seq", "--cpu",
			NULL };
	struct tu_run r;

	snprintf(f->ram, sizeof(f->ram), "%s/ram", f->dir);
	memset(&r, 0, sizeof(r));
	tu_run_spawn(&r, f->work, "fill", fill);
	ck_assert_int_eq(tu_run_finish(&r, 30000), 0);
	tu_run_spawn(&f->load, f->work, "load", run);
	if (tu_wait_line(f->load.out, "ready", NULL, 0, 20000)) {
		tu_run_dump(&f->load, "memload");
		ck_abort_msg("memload did not start");
	}
	f->pid = f->load.p.pid;
	note_threads(f);
	measure(f);
}

/* A QEMU of @f->qemu on the RAM file @ram (named to a chrooted QEMU by a
 * path of its root), booting @img; @extra: more arguments. */
static void start_qemu(struct cfx *f, struct vm *v, const char *name, const char *ram,
		       const char *serial, const char *img, const char *const *extra)
{
	char obj[400], ser[300], drive[300], inner[300];
	const char *args[16] = { "-machine", "pc,memory-backend=mem", "-object", obj, "-serial", ser,
				 "-drive", drive };
	int n = 8;

	snprintf(obj, sizeof(obj), "memory-backend-file,id=mem,size=128M,mem-path=%s,share=on",
		 vm_inner_path(f->qemu, f->dir, strrchr(ram, '/') + 1, inner, sizeof(inner)));
	snprintf(ser, sizeof(ser), "file:%s", serial);
	snprintf(drive, sizeof(drive), "file=%s,format=raw,if=ide", img);
	while (extra && *extra && n < 15)
		args[n++] = *extra++;
	args[n] = NULL;
	vm_start_qemu(v, f->qemu, f->dir, name, args);
}

static void start_guest(struct cfx *f, int which, bool dst)
{
	f->qemu = &vm_qemus[which];
	vm_files(&f->g, f->dir);
	snprintf(f->ram, sizeof(f->ram), "%s", f->g.src_ram);
	guest_image_range(f->g.src_img, GUEST_DELAY, GUEST_END_MIB);
	guest_image_range(f->g.dst_img, GUEST_DELAY, GUEST_END_MIB);
	start_qemu(f, &f->src, "src", f->ram, f->g.src_serial, f->g.src_img, NULL);
	if (dst)
		start_qemu(f, &f->dst_vm, "dst", f->g.dst_ram, f->g.dst_serial, f->g.dst_img,
			   (const char *[]){ "-incoming", "defer", NULL });
	guest_wait_markers(f->g.src_serial, 0, 3, 120000, "source guest");
	f->pid = qmp_pid(f->src.q);
	note_threads(f);
	measure(f);
}

/* ---- tests --------------------------------------------------------------------------- */

/* Auto-converge brings a workload that outwrites the link by OVERLOAD to
 * a switch-over within --max-downtime: the image consistent (byte for
 * byte, or the guest's own check after passes of its own at the
 * destination), the throttle gone afterwards. */
static void converges(struct cfx *f)
{
	struct json_object *done;
	struct peak p;
	struct cli_err line;
	int sc, rc;

	cfx_recv(f, f->src.p.pid != 0);
	cfx_send(f, NULL);
	sc = tu_run_finish(&f->send, 400000);
	rc = tu_run_finish(&f->recv, 30000);
	if (sc || rc)
		dump(f);
	ck_assert_int_eq(sc, 0);
	ck_assert_int_eq(rc, 0);
	done = tu_event_in(f->send.out, "completed");
	ck_assert_ptr_nonnull(done);
	p = peak_of(f);
	printf("converge: %s: downtime-parts %s, switch-over cost estimated %" PRIu64 " ms\n",
	       f->src.p.pid ? f->src.version : "process",
	       json_object_to_json_string(json_object_object_get(done, "downtime-parts")),
	       jnum_or(done, "switchover-cost", 0));
	printf("converge: %s: completed after %" PRIu64 " rounds in %" PRIu64 " ms, downtime %"
	       PRIu64 " ms of --max-downtime %u (predicted %" PRIu64 " ms), throttle %" PRIu64
	       "%% at the switch-over (%" PRIu64 "%% at most), throttled for %" PRIu64 " ms\n",
	       f->src.p.pid ? f->src.version : "process", tu_jnum(done, "dirty-sync-count"),
	       tu_jnum(done, "total-time"), tu_jnum(done, "downtime"), f->max_downtime,
	       jnum_or(done, "expected-downtime", 0), jnum_or(done, "cpu-throttle-percentage", 0),
	       p.throttle, jnum_or(done, "throttle-time", 0));
	ck_assert_msg(tu_jnum(done, "downtime") <= f->max_downtime, "downtime %" PRIu64 " ms, "
		      "over --max-downtime %u", tu_jnum(done, "downtime"), f->max_downtime);
	ck_assert_msg(p.throttle > 0, "the workload was never throttled");
	ck_assert_uint_gt(tu_jnum(done, "throttle-time"), 0);
	ck_assert_str_eq(jstr(done, "switchover-reason"), "converged");
	ck_assert(!json_object_object_get_ex(done, "limit-exceeded", NULL));
	json_object_put(done);
	assert_released(f, 0, "success");
	if (!f->src.p.pid) {
		char dfile[400];

		/* Stopped for good: it lives on the destination. */
		ck_assert_int_eq(tu_proc_state(f->pid, NULL), 'T');
		snprintf(dfile, sizeof(dfile), "%s/vm", f->dst);
		ck_assert_msg(tu_same_file(f->ram, dfile), "the destination's image differs");
		return;
	}
	vm_expect_status(&f->src, "postmigrate");
	vm_expect_status(&f->dst_vm, "running");
	/* Held to the most throttle, the guest writes little while a round
	 * sends what is left: one goes before QEMU's migration starts. */
	tu_phase_after_switch(f->send.out, line.msg, sizeof(line.msg));
	ck_assert_msg(!strcmp(line.msg, "converged"), "after the switch-over decision: phase "
		      "\"%s\", not \"converged\"", line.msg);
	assert_full_rate(f, true, "success, at the destination,");
	ck_assert_msg(qmp_stop(f->dst_vm.q, &line) == 0, "stop: %s", line.msg);
	rc = guest_check_range(f->g.dst_ram, GUEST_END_MIB, line.msg, sizeof(line.msg));
	ck_assert_msg(rc == 0, "destination RAM: %s", line.msg);
	printf("converge: %s: destination %s\n", f->src.version, line.msg);
}

/* How a migration under throttle ends. */
enum ending {
	END_RECV_KILLED,        /* migrate-recv dies: exit 5 */
	END_CANCEL,             /* the control socket's cancel: exit 7 */
	END_SIGINT,             /* ^C: exit 7 */
	END_GIVE_UP,            /* --max-time with --on-timeout cancel: exit 11 */
	END_SIGKILL,            /* migrate-send killed: its keeper releases */
	END_COUNT
};

static const char *const ending_names[END_COUNT] = {
	"migrate-recv killed", "cancel", "SIGINT", "--on-timeout cancel at --max-time",
	"kill -9 of migrate-send",
};

static void one_ending(struct cfx *f, enum ending e)
{
	static const int codes[END_COUNT] = { 5, 7, 7, 11, 128 + SIGKILL };
	/* A round sends about the 16 MiB written: the throttle starts after
	 * the second, and the sixth is too early for it to have converged. */
	unsigned secs = (unsigned)(6 * 16 * MIB / f->bw) + 2;
	char max_time[16];
	const char *give_up[] = { "--max-time", max_time, "--on-timeout", "cancel", NULL };
	const char *what = ending_names[e];
	struct json_object *ev, *r;
	uint64_t t0, thr;
	char *err;
	int sc;

	snprintf(max_time, sizeof(max_time), "%u", secs);
	cfx_recv(f, false);
	cfx_send(f, e == END_GIVE_UP ? give_up : NULL);
	wait_throttle(f, 20);
	thr = peak_of(f).throttle;
	/* Seen where it acts, unless it is over already. */
	ck_assert_msg(e == END_GIVE_UP || throttled_now(f), "%s: the throttle (%" PRIu64 "%%) "
		      "is not in the cgroups", what, thr);
	t0 = tu_now_ms();
	switch (e) {
	case END_RECV_KILLED: tu_kill(&f->recv.p, SIGKILL); break;
	case END_CANCEL:
		r = tu_control(f->ctl, "{\"command\":\"cancel\"}\n");
		json_object_put(r);
		break;
	case END_SIGINT: tu_kill(&f->send.p, SIGINT); break;
	case END_GIVE_UP: break;
	case END_SIGKILL: tu_kill(&f->send.p, SIGKILL); break;
	case END_COUNT: break;
	}
	sc = tu_run_finish(&f->send, 60000);
	if (sc != codes[e])
		dump(f);
	ck_assert_msg(sc == codes[e], "%s: migrate-send exited %d, not %d", what, sc, codes[e]);
	assert_released(f, 10000, what);
	printf("converge: %s: exit %d %" PRIu64 " ms after it, the throttle (%" PRIu64 "%%) "
	       "released\n", what, sc, tu_now_ms() - t0, thr);
	if (e != END_SIGKILL) {
		ev = tu_event_in(f->send.out, "failed");
		ck_assert_ptr_nonnull(ev);
		ck_assert_msg(json_object_get_boolean(json_object_object_get(ev,
			      f->src.p.pid ? "guest-running" : "workload-running")),
			      "%s: the failed event does not say the workload runs", what);
		ck_assert_uint_eq(tu_jnum(ev, "cpu-throttle-percentage"), 0);
		if (e == END_GIVE_UP) {
			ck_assert_str_eq(jstr(ev, "limit"), "max-time");
			ck_assert_uint_eq(tu_jnum(ev, "exit-code"), 11);
			err = tu_slurp(f->send.err, NULL);
			ck_assert_msg(err && strstr(err, "gave up") && strstr(err, "--max-time") &&
				      strstr(err, "unthrottled") && strchr(err, '\n') &&
				      !strchr(err, '\n')[1], "stderr: %s", err ? err : "");
			printf("converge: %s", err);
			free(err);
		}
		json_object_put(ev);
	}
	ck_assert_int_ne(tu_proc_state(f->pid, NULL), 'T');
	if (f->recv.p.pid > 0 && !f->recv.p.reaped)
		tu_kill(&f->recv.p, SIGKILL);
	tu_wait(&f->recv.p, 10000);
	assert_full_rate(f, false, what);
	if (f->src.p.pid)
		vm_expect_status(&f->src, "running");
}

static void every_ending(struct cfx *f)
{
	int e;

	for (e = 0; e < END_COUNT; e++)
		one_ending(f, (enum ending)e);
}

/* migrate-send --estimate S over the same link and limits as cfx_send,
 * with or without --auto-converge: its exit status, and its "estimate"
 * event in *@ev (the caller puts it).  The destination it measured the
 * link against never completes. */
static int estimate(struct cfx *f, bool auto_converge, struct json_object **ev)
{
	char bw[32], dt[16], pid[16], ram[300];
	char *argv[] = { f->sendbin, "--connect", f->addr, "--json", "--auth-key", f->key,
			 "--max-downtime", dt, "--max-bandwidth", bw, "--ram", ram, "--live",
			 "--pid", pid, "--estimate", "6", auto_converge ? "--auto-converge" : NULL,
			 NULL };
	int sc, rc;

	snprintf(bw, sizeof(bw), "%" PRIu64, f->bw);
	snprintf(dt, sizeof(dt), "%u", f->max_downtime);
	snprintf(pid, sizeof(pid), "%d", (int)f->pid);
	snprintf(ram, sizeof(ram), "vm=%s", f->ram);
	cfx_recv(f, false);
	tu_run_spawn(&f->send, f->work, "estimate", argv);
	sc = tu_run_finish(&f->send, 60000);
	rc = tu_run_finish(&f->recv, 30000);
	*ev = tu_event_in(f->send.out, "estimate");
	if (!*ev)
		dump(f);
	ck_assert_msg(*ev != NULL, "no estimate event (exit %d)", sc);
	printf("converge: estimate%s: exit %d, %s\n", auto_converge ? " --auto-converge" : "", sc,
	       json_object_to_json_string(*ev));
	/* Nothing migrated: the destination was cancelled, the process runs
	 * on, unthrottled. */
	ck_assert_msg(rc != 0, "migrate-recv reported success for an estimate");
	ck_assert(tu_event_in(f->recv.out, "completed") == NULL);
	ck_assert_int_ne(tu_proc_state(f->pid, NULL), 'T');
	ck_assert(!throttled_now(f));
	memset(&f->send, 0, sizeof(f->send));
	memset(&f->recv, 0, sizeof(f->recv));
	return sc;
}

/* Know before you move: a process writing three times what the link
 * carries does not converge alone (exit 11, as the migration would give
 * up), and converges with --auto-converge in about as many rounds as the
 * migration then takes (within a factor of two, issue 31), throttled. */
static void expect_honest(struct json_object *done, int sc, unsigned limit);

START_TEST(process_estimate_predicts)
{
	struct json_object *ev, *done;
	uint64_t want, got;
	struct cfx f;
	int sc, rc;

	cfx_init(&f);
	start_process(&f);
	sc = estimate(&f, false, &ev);
	ck_assert_int_eq(sc, 11);
	ck_assert(!json_object_get_boolean(json_object_object_get(ev, "converges")));
	ck_assert_str_eq(jstr(ev, "decision"), "give-up");
	ck_assert_uint_gt(tu_jnum(ev, "link-rate"), 0);
	ck_assert_uint_gt(tu_jnum(ev, "dirty-rate"), tu_jnum(ev, "link-rate"));
	json_object_put(ev);

	sc = estimate(&f, true, &ev);
	ck_assert_int_eq(sc, 0);
	ck_assert(json_object_get_boolean(json_object_object_get(ev, "converges")));
	ck_assert_uint_gt(tu_jnum(ev, "cpu-throttle-percentage"), 0);
	want = tu_jnum(ev, "rounds");
	json_object_put(ev);

	/* The migration itself; its downtime against the limit is
	 * process_converges's to judge (a second such judge here failed CI
	 * once at 405 ms of 400, the policy's switch-over predicted within):
	 * this test is about the rounds, and that a miss is said. */
	cfx_recv(&f, false);
	cfx_send(&f, NULL);
	sc = tu_run_finish(&f.send, 400000);
	rc = tu_run_finish(&f.recv, 30000);
	if ((sc && sc != 12) || rc)
		dump(&f);
	ck_assert_int_eq(rc, 0);
	done = tu_event_in(f.send.out, "completed");
	ck_assert_ptr_nonnull(done);
	expect_honest(done, sc, f.max_downtime);
	got = tu_jnum(done, "dirty-sync-count");
	json_object_put(done);
	printf("converge: estimate: %" PRIu64 " rounds forecast, %" PRIu64 " taken\n", want, got);
	ck_assert_msg(want * 2 >= got && got * 2 >= want, "the estimate forecast %" PRIu64
		      " rounds, the migration took %" PRIu64, want, got);
	cfx_free(&f);
}
END_TEST

START_TEST(process_converges)
{
	struct cfx f;

	cfx_init(&f);
	start_process(&f);
	converges(&f);
	cfx_free(&f);
}
END_TEST

/* The switch-over granted more bandwidth than the rounds' cap
 * (--switchover-bandwidth, QEMU's avail-switchover-bandwidth): 16 MiB at
 * a 2 MiB/s cap (8 s) is far over --max-downtime 2500, at the 8 MiB/s
 * granted (2 s) it fits.  The migration switches over after its first
 * round, unthrottled, and its last round goes faster than the cap; the
 * downtime is within the limit, or (a link slower than the grant on a
 * loaded bed) exit 12 says by how much it was not. */
static int switchover_granted(struct cfx *f, uint64_t cap, uint64_t grant, unsigned limit,
			      struct json_object **done)
{
	char g[32];
	int sc, rc;

	f->bw = cap;
	f->max_downtime = limit;
	snprintf(g, sizeof(g), "%" PRIu64, grant);
	cfx_recv(f, false);
	cfx_send(f, (const char *[]){ "--switchover-bandwidth", g, NULL });
	sc = tu_run_finish(&f->send, 120000);
	rc = tu_run_finish(&f->recv, 30000);
	if ((sc && sc != 12) || rc)
		dump(f);
	ck_assert_msg(sc == 0 || sc == 12, "migrate-send exited %d", sc);
	ck_assert_int_eq(rc, 0);
	*done = tu_event_in(f->send.out, "completed");
	ck_assert_ptr_nonnull(*done);
	printf("converge: --max-bandwidth %" PRIu64 " --switchover-bandwidth %" PRIu64 " "
	       "--max-downtime %u: exit %d, %s\n", cap, grant, limit, sc,
	       json_object_to_json_string(*done));
	ck_assert_uint_eq(tu_jnum(*done, "switchover-bandwidth"), grant);
	ck_assert_str_eq(jstr(*done, "switchover-reason"), "converged");
	/* Migrated: the image is the destination's. */
	ck_assert_int_eq(tu_proc_state(f->pid, NULL), 'T');
	return sc;
}

/* Exit 12 and limit-exceeded agree with the figures, or exit 0 and no
 * limit exceeded. */
static void expect_honest(struct json_object *done, int sc, unsigned limit)
{
	struct json_object *lim;
	uint64_t down = tu_jnum(done, "downtime");

	if (down <= limit) {
		ck_assert_msg(sc == 0, "downtime %" PRIu64 " ms within %u, exit %d", down, limit, sc);
		ck_assert(!json_object_object_get_ex(done, "limit-exceeded", NULL));
		return;
	}
	ck_assert_msg(sc == 12, "downtime %" PRIu64 " ms over the --max-downtime %u given, exit %d",
		      down, limit, sc);
	ck_assert(json_object_object_get_ex(done, "limit-exceeded", &lim));
	ck_assert_str_eq(jstr(lim, "limit"), "max-downtime");
	ck_assert(json_object_get_boolean(json_object_object_get(lim, "given")));
	ck_assert_uint_eq(tu_jnum(lim, "exceeded-by"), down - limit);
}

START_TEST(process_switchover_bandwidth)
{
	struct json_object *done, *parts;
	uint64_t round_ms;
	struct cfx f;
	int sc;

	cfx_init(&f);
	start_process(&f);
	sc = switchover_granted(&f, 2 * MIB, 8 * MIB, 2500, &done);
	/* The first round, then the last one. */
	ck_assert_uint_eq(tu_jnum(done, "dirty-sync-count"), 2);
	ck_assert_uint_eq(peak_of(&f).throttle, 0);
	ck_assert(json_object_object_get_ex(done, "downtime-parts", &parts));
	round_ms = tu_jnum(parts, "last-round");
	/* At the cap, the 16 MiB written meanwhile would take 8 s. */
	ck_assert_msg(round_ms < 4000, "last round %" PRIu64 " ms: not faster than the cap",
		      round_ms);
	expect_honest(done, sc, 2500);
	json_object_put(done);
	assert_released(&f, 0, "success");
	cfx_free(&f);
}
END_TEST

/* A grant no link here carries (1 GiB/s) and --max-downtime 100: the
 * policy, trusting it, switches over at once, and the 16 MiB take longer:
 * exit 12, limit-exceeded names --max-downtime, given, and by how much. */
START_TEST(process_over_the_limit_given)
{
	struct json_object *done;
	struct cfx f;
	char *err;
	int sc;

	cfx_init(&f);
	start_process(&f);
	sc = switchover_granted(&f, 4 * MIB, 1ull << 30, 100, &done);
	ck_assert_uint_gt(tu_jnum(done, "downtime"), 100);
	expect_honest(done, sc, 100);
	err = tu_slurp(f.send.err, NULL);
	ck_assert_msg(err && strstr(err, "completed over --max-downtime"), "stderr: %s",
		      err ? err : "");
	free(err);
	json_object_put(done);
	cfx_free(&f);
}
END_TEST

START_TEST(process_released_on_every_exit)
{
	struct cfx f;

	cfx_init(&f);
	start_process(&f);
	every_ending(&f);
	cfx_free(&f);
}
END_TEST

START_TEST(guest_converges)
{
	struct cfx f;

	cfx_init(&f);
	start_guest(&f, _i, true);
	converges(&f);
	cfx_free(&f);
}
END_TEST

START_TEST(guest_released_on_every_exit)
{
	struct cfx f;

	cfx_init(&f);
	start_guest(&f, _i, false);
	every_ending(&f);
	cfx_free(&f);
}
END_TEST

void converge_cases(Suite *s)
{
	TCase *tc = tu_case(s, "process", 600);
	int i;

	tcase_add_test(tc, process_converges);
	tcase_add_test(tc, process_released_on_every_exit);
	tcase_add_test(tc, process_estimate_predicts);
	tcase_add_test(tc, process_switchover_bandwidth);
	tcase_add_test(tc, process_over_the_limit_given);
	/* One test case per QEMU, as the qemu suite has them. */
	for (i = 0; i < VM_QEMUS; i++) {
		tc = tu_case(s, vm_qemus[i].name, 600);
		tcase_add_loop_test(tc, guest_converges, i, i + 1);
		tcase_add_loop_test(tc, guest_released_on_every_exit, i, i + 1);
	}
}
