/* Write tracking (src/cli/dirty.h) against real processes, in each of its
 * ways: memload at a known rate, and a forked child that writes exactly the
 * pages we name through one or several mappings; plus memload's digest and
 * fill.  Loop tests run once per mode: _i = 0 soft-dirty (any kernel with
 * CONFIG_MEM_SOFT_DIRTY: both of the bed's), _i = 1 wp-async, which on a
 * kernel before 6.7 (the bed's default, Debian 12's 6.1) must be refused
 * with the reason instead.  `make check` runs this suite on Debian 12's and
 * Debian 13's kernels. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "suite.h"
#include "suites.h"
#include "testutil.h"

/* The tracker is part of the commands, not of librdmig: its objects are
 * linked in (Makefile), and its private header lets a test look inside a
 * set (its mappings, its slices). */
#include "dirty.h"
#include "dirty_int.h"

/* Whether this kernel has PAGEMAP_SCAN and asynchronous write-protect
 * (Linux 6.7): then wp-async must work here, else be refused. */
static bool wp_kernel(void)
{
	struct utsname u;
	int maj = 0, min = 0;

	ck_assert_int_eq(uname(&u), 0);
	ck_assert_int_eq(sscanf(u.release, "%d.%d", &maj, &min), 2);
	return maj > 6 || (maj == 6 && min >= 7);
}

static enum dirty_mode mode_of(int i)
{
	return i ? DIRTY_WP_ASYNC : DIRTY_SOFT_DIRTY;
}

/* The collecting threads of every set the tests open (0: one per CPU). */
static unsigned test_threads;

#define MAXRUNS 64

struct runs {
	uint64_t off[MAXRUNS], len[MAXRUNS];
	int n;
	uint64_t bytes, end; /* sum of lengths; end of the last run */
	int misordered;      /* a run overlapping, touching or before the last */
};

static int on_run(void *ctx, uint64_t off, uint64_t len)
{
	struct runs *r = ctx;

	if ((r->n && off <= r->end) || len == 0 || off % (uint64_t)getpagesize())
		r->misordered = 1;
	if (r->n < MAXRUNS) {
		r->off[r->n] = off;
		r->len[r->n] = len;
	}
	r->n++;
	r->bytes += len;
	r->end = off + len;
	return 0;
}

/* The only file of a one-file set: runs of other files would be a bug. */
static int on_run1(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	ck_assert_uint_eq(file, 0);
	return on_run(ctx, off, len);
}

static void collect(struct dirty_set *m, struct runs *r)
{
	struct cli_err err = { "" };
	int ret;

	memset(r, 0, sizeof(*r));
	ret = dirty_collect(m, on_run1, r, &err);
	ck_assert_msg(ret == 0, "dirty_collect: %d %s", ret, err.msg);
	ck_assert_msg(!r->misordered, "runs out of order, overlapping or not merged");
}

/* The commands hold the process by identity (proc.h); so do these tests,
 * for the length of one call. */
static int open_files(struct dirty_set **m, pid_t pid, const char *const *paths,
		      const uint64_t *lens, unsigned n, enum dirty_mode mode, struct cli_err *err)
{
	struct dirty_opts o = { .mode = mode, .threads = test_threads };
	struct proc_ref p;
	int ret = proc_open(&p, pid, err);

	*m = NULL;
	if (!ret)
		ret = dirty_open(m, &p, paths, lens, n, &o, err);
	proc_close(&p);
	return ret;
}

static int open_pid(struct dirty_set **m, pid_t pid, const char *path, uint64_t len,
		    enum dirty_mode mode, struct cli_err *err)
{
	return open_files(m, pid, (const char *const[]){ path }, (const uint64_t[]){ len }, 1,
			  mode, err);
}

static void clear(struct dirty_set *m)
{
	struct cli_err err = { "" };
	int ret = dirty_clear(m, &err);

	ck_assert_msg(ret == 0, "dirty_clear: %d %s", ret, err.msg);
}

/* Opens @path of @pid in @mode and checks the method is the one asked for.
 * wp-async on a kernel without it must fail naming PAGEMAP_SCAN and the
 * kernel: then NULL, and the test has nothing more to do. */
static struct dirty_set *open_mode(pid_t pid, const char *path, uint64_t len,
				   enum dirty_mode mode)
{
	struct cli_err err = { "" };
	struct dirty_set *m;
	struct utsname u;
	int ret = open_pid(&m, pid, path, len, mode, &err);

	fprintf(stderr, "dirty_open(%s): %d %s%s\n", mode == DIRTY_WP_ASYNC ? "wp-async" :
		"soft-dirty", ret, ret ? err.msg : "method ", ret ? "" : dirty_method(m));
	if (mode == DIRTY_WP_ASYNC && !wp_kernel()) {
		ck_assert_int_eq(ret, -EOPNOTSUPP);
		ck_assert_ptr_nonnull(strstr(err.msg, "PAGEMAP_SCAN is not in this kernel"));
		uname(&u);
		ck_assert_ptr_nonnull(strstr(err.msg, u.release));
		return NULL;
	}
	ck_assert_msg(ret == 0, "dirty_open: %d %s", ret, err.msg);
	if (mode == DIRTY_WP_ASYNC)
		ck_assert_str_eq(dirty_method(m), "wp-async");
	else
		ck_assert_msg(!strcmp(dirty_method(m), "soft-dirty") ||
			      !strcmp(dirty_method(m), "soft-dirty-scan"), "method %s", dirty_method(m));
	return m;
}

/* Expected runs as {first page, pages}; the last may be clipped by @len. */
static void assert_runs(const struct runs *r, const uint64_t (*want)[2], int n, uint64_t len)
{
	uint64_t ps = (uint64_t)getpagesize(), off, l;
	int i;

	for (i = 0; i < r->n && i < MAXRUNS; i++)
		fprintf(stderr, "  run %d: page %" PRIu64 " +%" PRIu64 " bytes\n", i,
			r->off[i] / ps, r->len[i]);
	ck_assert_int_eq(r->n, n);
	for (i = 0; i < n; i++) {
		off = want[i][0] * ps;
		l = want[i][1] * ps;
		if (off + l > len)
			l = len - off;
		ck_assert_uint_eq(r->off[i], off);
		ck_assert_uint_eq(r->len[i], l);
	}
}

static void make_file(const char *path, uint64_t size)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

/* ---- memload as the workload ------------------------------------------------ */

#define ML_SIZE (16ull << 20)
#define ML_RATE_PAGES 1024.0 /* --rate 4 = 4 MiB/s of 4 KiB pages */

static void start_memload(struct tu_proc *p, const char *dir, const char *pattern,
			  char *file, size_t flen)
{
	char bin[512], out[600], rest[128];
	char *argv[] = { bin, "run", file, "--rate", "4", "--size", "16M", "--pattern",
			 (char *)pattern, NULL };

	tu_build_path("bin/memload", bin, sizeof(bin));
	snprintf(file, flen, "%s/ram0", dir);
	snprintf(out, sizeof(out), "%s/memload.out", dir);
	ck_assert_int_eq(tu_spawn(p, out, argv), 0);
	if (tu_wait_line(out, "ready pid=", rest, sizeof(rest), 20000)) {
		tu_dump("memload", out);
		ck_abort_msg("memload did not start");
	}
	ck_assert_int_eq(atoi(rest), p->pid);
	ck_assert_ptr_nonnull(strstr(rest, "size=16777216"));
}

static void stop_memload(struct tu_proc *p)
{
	char *text;

	tu_kill(p, SIGTERM);
	ck_assert_int_eq(tu_wait(p, 10000), 0);
	text = tu_slurp(p->out_path, NULL);
	ck_assert_int_eq(tu_exit_code(p), 0);
	ck_assert_ptr_nonnull(strstr(text, "\nstopped writes="));
	free(text);
}

/* Pages memload can have written in @ms: its rate, plus the 100 ms it may
 * catch up after a delay, plus one 10 ms slice. */
static uint64_t rate_bound(uint64_t ms)
{
	return (uint64_t)(ML_RATE_PAGES * ((double)ms / 1000 + 0.11)) + 2;
}

/* false: the mode is not in this kernel (open_mode checked the refusal). */
static bool sample_memload(const char *pattern, enum dirty_mode mode, struct runs *r,
			   uint64_t *bound)
{
	char dir[256], file[300];
	struct dirty_set *m;
	struct tu_proc p;
	uint64_t t0;

	tu_tmpdir(dir, sizeof(dir));
	start_memload(&p, dir, pattern, file, sizeof(file));
	m = open_mode(p.pid, file, ML_SIZE, mode);
	if (m) {
		t0 = tu_now_ms();
		clear(m);
		usleep(500000);
		collect(m, r);
		*bound = rate_bound(tu_now_ms() - t0);
		fprintf(stderr, "memload %s, %s: %" PRIu64 " dirty pages in %d runs (bound %" PRIu64
			")\n", pattern, dirty_method(m), r->bytes / 4096, r->n, *bound);
		dirty_close(m);
	}
	stop_memload(&p);
	tu_rmdir(dir);
	return m != NULL;
}

START_TEST(memload_random_rate)
{
	uint64_t bound, pages;
	struct runs r;

	if (!sample_memload("random", mode_of(_i), &r, &bound))
		return;
	pages = r.bytes / (uint64_t)getpagesize();
	ck_assert_uint_ge(pages, 16);
	ck_assert_uint_le(pages, bound);
	ck_assert_uint_lt(pages, ML_SIZE / (uint64_t)getpagesize() / 2);
}
END_TEST

START_TEST(memload_seq_one_run)
{
	uint64_t bound, pages;
	struct runs r;

	if (!sample_memload("seq", mode_of(_i), &r, &bound))
		return;
	pages = r.bytes / (uint64_t)getpagesize();
	ck_assert_uint_ge(pages, 16);
	ck_assert_uint_le(pages, bound);
	/* Sequential writes are one run, or two where they wrapped around. */
	ck_assert_int_ge(r.n, 1);
	ck_assert_int_le(r.n, 2);
}
END_TEST

/* ---- a child that writes exactly the pages we name --------------------------- */

/* A write: through mapping @map (0 = whole file shared, 1 = file pages
 * 64..79 shared, 2 = whole file private, 3 = a page of anonymous memory
 * that is not RAM) to page @page of that mapping. */
struct wr {
	int map, page;
};

struct child {
	pid_t pid;
	int to, from; /* pipe ends: commands to the child, acks from it */
	uintptr_t anon; /* where its anonymous page is (map 3) */
};

enum child_flags {
	CH_PREFAULT = 1,  /* every file page present and writable before tracking */
	CH_SECCOMP = 2,   /* under a seccomp filter (one that allows everything) */
};

static int allow_all_filter(void)
{
	struct sock_filter f[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
	struct sock_fprog prog = { .len = 1, .filter = f };

	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

static void child_main(const char *path, int npages, int flags, const struct wr *w, int nw,
		       int in, int out)
{
	size_t ps = (size_t)getpagesize();
	char *map[4], c;
	int fd = open(path, O_RDWR), i;
	uintptr_t a;

	if (fd < 0)
		_exit(10);
	map[0] = mmap(NULL, npages * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	map[1] = mmap(NULL, 16 * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 64 * (off_t)ps);
	map[2] = mmap(NULL, npages * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	map[3] = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map[0] == MAP_FAILED || map[1] == MAP_FAILED || map[2] == MAP_FAILED ||
	    map[3] == MAP_FAILED)
		_exit(11);
	map[3][0] = 1;
	/* Present and writable already, so only the tracked writes fault. */
	for (i = 0; (flags & CH_PREFAULT) && i < npages; i++)
		map[0][(size_t)i * ps] = 1;
	if ((flags & CH_SECCOMP) && allow_all_filter())
		_exit(14);
	a = (uintptr_t)map[3];
	if (write(out, "R", 1) != 1 || write(out, &a, sizeof(a)) != sizeof(a))
		_exit(12);
	/* W: the writes; Q: quit. */
	while (read(in, &c, 1) == 1 && c == 'W') {
		for (i = 0; i < nw; i++)
			map[w[i].map][(size_t)w[i].page * ps + 8] = (char)(i + 2);
		if (write(out, "D", 1) != 1)
			_exit(13);
	}
	_exit(c == 'Q' ? 0 : 15);
}

static void child_start(struct child *ch, const char *path, int npages, int flags,
			const struct wr *w, int nw)
{
	int down[2], up[2];
	char c;

	ck_assert_int_eq(pipe(down), 0);
	ck_assert_int_eq(pipe(up), 0);
	ch->pid = fork();
	ck_assert_int_ge(ch->pid, 0);
	if (ch->pid == 0) {
		close(down[1]);
		close(up[0]);
		child_main(path, npages, flags, w, nw, down[0], up[1]);
	}
	close(down[0]);
	close(up[1]);
	ch->to = down[1];
	ch->from = up[0];
	ck_assert_int_eq(read(ch->from, &c, 1), 1);
	ck_assert_int_eq(c, 'R');
	ck_assert_int_eq(read(ch->from, &ch->anon, sizeof(ch->anon)), sizeof(ch->anon));
}

/* Lets the child do its writes and waits until they are done. */
static void child_write(struct child *ch)
{
	char c;

	ck_assert_int_eq(write(ch->to, "W", 1), 1);
	ck_assert_int_eq(read(ch->from, &c, 1), 1);
	ck_assert_int_eq(c, 'D');
}

static void child_finish(struct child *ch)
{
	int st;

	ck_assert_int_eq(write(ch->to, "Q", 1), 1);
	ck_assert_int_eq(waitpid(ch->pid, &st, 0), ch->pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	close(ch->to);
	close(ch->from);
}

#define NPAGES 256

static void make_ram(char *dir, size_t dlen, char *path, size_t plen, uint64_t size)
{
	tu_tmpdir(dir, dlen);
	snprintf(path, plen, "%s/ram", dir);
	make_file(path, size);
}

/* _i: the mode (mode_of); _i / 2 = 1: every page present before the clear,
 * 0: none ever touched. */
START_TEST(exact_pages)
{
	static const struct wr w[] = { { 0, 0 }, { 0, 5 }, { 0, 6 }, { 0, 7 }, { 0, 100 },
				       { 0, NPAGES - 1 } };
	static const uint64_t want[][2] = { { 0, 1 }, { 5, 3 }, { 100, 1 }, { NPAGES - 1, 1 } };
	uint64_t len = NPAGES * (uint64_t)getpagesize();
	char dir[256], path[300];
	struct dirty_set *m;
	struct child ch;
	struct runs r;

	make_ram(dir, sizeof(dir), path, sizeof(path), len);
	child_start(&ch, path, NPAGES, _i / 2 ? CH_PREFAULT : 0, w, 6);
	m = open_mode(ch.pid, path, len, mode_of(_i % 2));
	if (m) {
		clear(m);
		collect(m, &r);
		ck_assert_int_eq(r.n, 0);
		child_write(&ch);
		collect(m, &r);
		assert_runs(&r, want, 4, len);
		/* Collecting does not clear. */
		collect(m, &r);
		assert_runs(&r, want, 4, len);
		clear(m);
		collect(m, &r);
		ck_assert_int_eq(r.n, 0);
		/* The same pages written again: seen again. */
		child_write(&ch);
		collect(m, &r);
		assert_runs(&r, want, 4, len);
		dirty_close(m);
	}
	child_finish(&ch);
	tu_rmdir(dir);
}
END_TEST

/* Two shared mappings at different file offsets feed one set of runs; a
 * private mapping's writes are not the file's; file_len clips. */
START_TEST(several_mappings_and_clipping)
{
	static const struct wr w[] = {
		{ 0, 3 }, { 0, 65 }, { 1, 2 } /* file page 66 */, { 0, 67 },
		{ 2, 10 } /* private */, { 1, 15 } /* file page 79 */,
		{ 0, 200 } /* partly past file_len */, { 0, 250 } /* past it */,
	};
	static const uint64_t want[][2] = { { 3, 1 }, { 65, 3 }, { 79, 1 }, { 200, 1 } };
	uint64_t ps = (uint64_t)getpagesize(), len = 200 * ps + 100;
	char dir[256], path[300];
	struct dirty_set *m;
	struct child ch;
	struct runs r;

	make_ram(dir, sizeof(dir), path, sizeof(path), NPAGES * ps);
	child_start(&ch, path, NPAGES, CH_PREFAULT, w, 8);
	m = open_mode(ch.pid, path, len, mode_of(_i));
	if (m) {
		ck_assert_uint_eq(m->files[0].nvmas, 2);
		clear(m);
		child_write(&ch);
		collect(m, &r);
		assert_runs(&r, want, 4, len);
		ck_assert_uint_eq(r.off[3] + r.len[3], len);
		dirty_close(m);
	}
	child_finish(&ch);
	tu_rmdir(dir);
}
END_TEST

/* Before the first clear a fresh mapping reports everything: over-reporting
 * is the safe side. */
START_TEST(everything_dirty_before_first_clear)
{
	uint64_t len = NPAGES * (uint64_t)getpagesize();
	char dir[256], path[300];
	struct dirty_set *m;
	struct child ch;
	struct runs r;

	make_ram(dir, sizeof(dir), path, sizeof(path), len);
	child_start(&ch, path, NPAGES, 0, NULL, 0);
	m = open_mode(ch.pid, path, len, mode_of(_i));
	if (m) {
		collect(m, &r);
		ck_assert_int_eq(r.n, 1);
		ck_assert_uint_eq(r.off[0], 0);
		ck_assert_uint_eq(r.len[0], len);
		dirty_close(m);
	}
	child_finish(&ch);
	tu_rmdir(dir);
}
END_TEST

/* ---- several files, several threads ------------------------------------------- */

struct file_runs {
	struct runs r[2];
	int last_file;
	int out_of_order;
};

static int on_run2(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	struct file_runs *f = ctx;

	ck_assert_uint_lt(file, 2);
	if ((int)file < f->last_file)
		f->out_of_order = 1;
	f->last_file = (int)file;
	return on_run(&f->r[file], off, len);
}

/* Two RAM files in one set, each a few slices long, collected by three
 * threads: runs that cross slice boundaries come out whole, file by file. */
START_TEST(two_files_many_slices)
{
	/* 6 slices of SLICE_MIN_PAGES each in file 0; file 1 is small. */
	const int np0 = 6 * (int)SLICE_MIN_PAGES, np1 = 64;
	const struct wr w[] = {
		{ 0, 1 }, { 0, (int)SLICE_MIN_PAGES - 1 }, { 0, (int)SLICE_MIN_PAGES },
		{ 0, 3 * (int)SLICE_MIN_PAGES + 7 }, { 0, np0 - 1 },
	};
	static const uint64_t want0[][2] = { { 1, 1 }, { SLICE_MIN_PAGES - 1, 2 },
					     { 3 * SLICE_MIN_PAGES + 7, 1 },
					     { 6 * SLICE_MIN_PAGES - 1, 1 } };
	uint64_t ps = (uint64_t)getpagesize(), lens[2] = { np0 * ps, np1 * ps };
	struct cli_err err = { "" };
	char dir[256], p0[300], p1[300];
	struct dirty_set *m;
	struct file_runs fr;
	struct child ch;
	int down[2], up[2], st;
	pid_t pid;
	char c;

	tu_tmpdir(dir, sizeof(dir));
	snprintf(p0, sizeof(p0), "%s/ram0", dir);
	snprintf(p1, sizeof(p1), "%s/ram1", dir);
	make_file(p0, lens[0]);
	make_file(p1, lens[1]);
	/* File 0 through the usual child; file 1 mapped by the same child
	 * would need another kind: a second child holds ram1 instead, and
	 * must make the open fail (the set is one process's). */
	child_start(&ch, p0, np0, CH_PREFAULT, w, 5);
	test_threads = 3;
	ck_assert_int_eq(open_files(&m, ch.pid, (const char *const[]){ p0, p1 }, lens, 2,
				    mode_of(_i), &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, "does not map"));
	ck_assert_ptr_nonnull(strstr(err.msg, p1));
	child_finish(&ch);

	/* Now one process mapping both: the test's own child of a different
	 * shape, writing page 1 of ram1 and the pages of w in ram0. */
	ck_assert_int_eq(pipe(down), 0);
	ck_assert_int_eq(pipe(up), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int f0 = open(p0, O_RDWR), f1 = open(p1, O_RDWR), i;
		char *m0 = mmap(NULL, lens[0], PROT_READ | PROT_WRITE, MAP_SHARED, f0, 0);
		char *m1 = mmap(NULL, lens[1], PROT_READ | PROT_WRITE, MAP_SHARED, f1, 0);

		if (m0 == MAP_FAILED || m1 == MAP_FAILED)
			_exit(11);
		for (i = 0; i < np0; i++)
			m0[(size_t)i * ps] = 1;
		if (write(up[1], "R", 1) != 1 || read(down[0], &c, 1) != 1)
			_exit(12);
		if (c == 'Q')
			_exit(0);
		for (i = 0; i < 5; i++)
			m0[(size_t)w[i].page * ps + 8] = 2;
		m1[1 * ps] = 2;
		m1[(size_t)(np1 - 1) * ps] = 2;
		if (write(up[1], "D", 1) != 1 || read(down[0], &c, 1) != 1)
			_exit(13);
		_exit(0);
	}
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	if (mode_of(_i) == DIRTY_WP_ASYNC && !wp_kernel()) {
		ck_assert_int_eq(open_files(&m, pid, (const char *const[]){ p0, p1 }, lens, 2,
					    mode_of(_i), &err), -EOPNOTSUPP);
	} else {
		ck_assert_msg(!open_files(&m, pid, (const char *const[]){ p0, p1 }, lens, 2,
					  mode_of(_i), &err), "dirty_open: %s", err.msg);
		ck_assert_uint_ge(m->nslices, 7);
		ck_assert_uint_eq(dirty_threads(m), 3);
		clear(m);
		ck_assert_int_eq(write(down[1], "W", 1), 1);
		ck_assert_int_eq(read(up[0], &c, 1), 1);
		memset(&fr, 0, sizeof(fr));
		ck_assert_int_eq(dirty_collect(m, on_run2, &fr, &err), 0);
		ck_assert(!fr.out_of_order && !fr.r[0].misordered && !fr.r[1].misordered);
		assert_runs(&fr.r[0], want0, 4, lens[0]);
		assert_runs(&fr.r[1], (const uint64_t[][2]){ { 1, 1 }, { np1 - 1, 1 } }, 2, lens[1]);
		dirty_close(m);
	}
	test_threads = 0;
	ck_assert_int_eq(write(down[1], "Q", 1), 1);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	tu_rmdir(dir);
}
END_TEST

/* ---- what each way touches ------------------------------------------------------ */

/* The soft-dirty bit of @addr in process @pid. */
static bool soft_dirty_at(pid_t pid, uintptr_t addr)
{
	char path[64];
	uint64_t e = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
	fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &e, sizeof(e), (off_t)(addr / (uint64_t)getpagesize() * 8)), 8);
	close(fd);
	return e & PM_SOFT_DIRTY;
}

static int count_fds(pid_t pid)
{
	char path[64];
	struct dirent *de;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* wp-async touches the RAM's ranges only: the rest of the process keeps its
 * soft-dirty bits (clear_refs would clear them all), and the process keeps
 * no descriptor of ours.  soft-dirty clears the whole process's bits: the
 * difference this test sees. */
START_TEST(only_the_ram_is_touched)
{
	static const struct wr w[] = { { 0, 9 } };
	uint64_t len = NPAGES * (uint64_t)getpagesize();
	char dir[256], path[300];
	struct dirty_set *m;
	struct child ch;
	struct runs r;
	int fds;

	make_ram(dir, sizeof(dir), path, sizeof(path), len);
	child_start(&ch, path, NPAGES, CH_PREFAULT, w, 1);
	fds = count_fds(ch.pid);
	ck_assert(soft_dirty_at(ch.pid, ch.anon));
	m = open_mode(ch.pid, path, len, mode_of(_i));
	if (m) {
		clear(m);
		ck_assert_int_eq(count_fds(ch.pid), fds);
		if (_i)
			ck_assert_msg(soft_dirty_at(ch.pid, ch.anon),
				      "wp-async cleared a soft-dirty bit outside the RAM");
		else
			ck_assert(!soft_dirty_at(ch.pid, ch.anon));
		child_write(&ch);
		collect(m, &r);
		assert_runs(&r, (const uint64_t[][2]){ { 9, 1 } }, 1, len);
		dirty_close(m);
		/* Unprotected again: the child writes on without us. */
		child_write(&ch);
	}
	child_finish(&ch);
	tu_rmdir(dir);
}
END_TEST

/* auto takes wp-async where the kernel has it; where it cannot (a kernel
 * before 6.7, a process under a seccomp filter, one another tracer holds),
 * it takes soft-dirty and says why.  Forced wp-async fails instead, except
 * under a seccomp filter, which it is allowed to risk. */
START_TEST(auto_picks_and_says_why)
{
	uint64_t len = NPAGES * (uint64_t)getpagesize();
	struct cli_err err;
	char dir[256], path[300];
	struct dirty_set *m;
	struct child ch;
	struct utsname u;
	int st;

	uname(&u);
	make_ram(dir, sizeof(dir), path, sizeof(path), len);

	/* A plain process. */
	child_start(&ch, path, NPAGES, CH_PREFAULT, NULL, 0);
	ck_assert_int_eq(open_pid(&m, ch.pid, path, len, DIRTY_AUTO, &err), 0);
	fprintf(stderr, "auto on %s: %s (%s), %u threads\n", u.release, dirty_method(m),
		dirty_why_not(m), dirty_threads(m));
	if (wp_kernel()) {
		ck_assert_str_eq(dirty_method(m), "wp-async");
		ck_assert_str_eq(dirty_why_not(m), "");
	} else {
		ck_assert_str_eq(dirty_method(m), "soft-dirty");
		ck_assert_ptr_nonnull(strstr(dirty_why_not(m), "PAGEMAP_SCAN is not in this kernel"));
		ck_assert_ptr_nonnull(strstr(dirty_why_not(m), u.release));
	}
	dirty_close(m);

	/* Another tracer (this test) holds it. */
	ck_assert_int_eq(ptrace(PTRACE_SEIZE, ch.pid, NULL, NULL), 0);
	ck_assert_int_eq(open_pid(&m, ch.pid, path, len, DIRTY_AUTO, &err), 0);
	fprintf(stderr, "auto, traced: %s (%s)\n", dirty_method(m), dirty_why_not(m));
	ck_assert(strcmp(dirty_method(m), "wp-async"));
	if (wp_kernel())
		ck_assert_ptr_nonnull(strstr(dirty_why_not(m), "another tracer holds it"));
	dirty_close(m);
	if (wp_kernel()) {
		ck_assert_int_eq(open_pid(&m, ch.pid, path, len, DIRTY_WP_ASYNC, &err),
				 -EPERM);
		ck_assert_ptr_nonnull(strstr(err.msg, "wp-async tracking is not possible"));
		ck_assert_ptr_nonnull(strstr(err.msg, "another tracer holds it"));
	}
	/* Detaching needs a stopped tracee. */
	ck_assert_int_eq(ptrace(PTRACE_INTERRUPT, ch.pid, NULL, NULL), 0);
	ck_assert_int_eq(waitpid(ch.pid, &st, __WALL), ch.pid);
	ck_assert_int_eq(ptrace(PTRACE_DETACH, ch.pid, NULL, NULL), 0);
	child_finish(&ch);

	/* Under a seccomp filter: auto does not risk it, wp-async does. */
	child_start(&ch, path, NPAGES, CH_PREFAULT | CH_SECCOMP, NULL, 0);
	ck_assert_int_eq(open_pid(&m, ch.pid, path, len, DIRTY_AUTO, &err), 0);
	fprintf(stderr, "auto, seccomp: %s (%s)\n", dirty_method(m), dirty_why_not(m));
	ck_assert(strcmp(dirty_method(m), "wp-async"));
	if (wp_kernel())
		ck_assert_ptr_nonnull(strstr(dirty_why_not(m), "seccomp filter"));
	dirty_close(m);
	if (wp_kernel()) {
		ck_assert_int_eq(open_pid(&m, ch.pid, path, len, DIRTY_WP_ASYNC, &err), 0);
		ck_assert_str_eq(dirty_method(m), "wp-async");
		dirty_close(m);
	}
	child_finish(&ch);
	tu_rmdir(dir);
}
END_TEST

/* ---- errors ------------------------------------------------------------------- */

static int open_fails(pid_t pid, const char *path, struct cli_err *err)
{
	struct dirty_set *m = (struct dirty_set *)1;
	int ret = open_pid(&m, pid, path, 1 << 20, DIRTY_AUTO, err);

	ck_assert_ptr_null(m);
	fprintf(stderr, "dirty_open(%d, %s): %d %s\n", (int)pid, path, ret, err->msg);
	return ret;
}

START_TEST(open_errors)
{
	struct cli_err err;
	char dir[256], path[300], missing[320], want[400];
	void *priv;
	int fd;

	tu_tmpdir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/ram", dir);
	snprintf(missing, sizeof(missing), "%s/nope", dir);
	make_file(path, 1 << 20);

	ck_assert_int_eq(open_fails(getpid(), path, &err), -ENOENT);
	snprintf(want, sizeof(want), "process %d does not map %s", (int)getpid(), path);
	ck_assert_str_eq(err.msg, want);

	ck_assert_int_eq(open_fails(getpid(), missing, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, missing));

	fd = open(path, O_RDWR);
	priv = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	ck_assert_ptr_ne(priv, MAP_FAILED);
	ck_assert_int_eq(open_fails(getpid(), path, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "only privately"));
	ck_assert_ptr_nonnull(strstr(err.msg, path));
	munmap(priv, 1 << 20);
	close(fd);

	/* PIDs count up from a high one only after wrapping: this one is free. */
	ck_assert_int_eq(open_fails(0x3ffffff, path, &err), -ESRCH);
	ck_assert_ptr_nonnull(strstr(err.msg, "no process 67108863"));
	tu_rmdir(dir);
}
END_TEST

/* Pages dirtied through a mapping that was unmapped cannot be seen: the
 * change must fail the collect, not pass as "clean".  The first part tracks
 * this very process (wp-async then needs no injection). */
START_TEST(mapping_change_and_exit_fail_collect)
{
	uint64_t len = NPAGES * (uint64_t)getpagesize();
	struct cli_err err;
	char dir[256], path[300];
	struct dirty_set *m;
	struct child ch;
	struct runs r;
	void *p;
	int fd, st;

	make_ram(dir, sizeof(dir), path, sizeof(path), len);
	fd = open(path, O_RDWR);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	m = open_mode(getpid(), path, len, mode_of(_i));
	if (m) {
		clear(m);
		collect(m, &r);
		munmap(p, len);
		ck_assert_int_eq(dirty_collect(m, on_run1, &r, &err), -ESTALE);
		ck_assert_ptr_nonnull(strstr(err.msg, "changed its mappings of"));
		dirty_close(m);
	} else {
		munmap(p, len);
	}
	close(fd);

	child_start(&ch, path, NPAGES, 0, NULL, 0);
	m = open_mode(ch.pid, path, len, mode_of(_i));
	kill(ch.pid, SIGKILL);
	ck_assert_int_eq(waitpid(ch.pid, &st, 0), ch.pid);
	if (m) {
		ck_assert_int_eq(dirty_collect(m, on_run1, &r, &err), -ESRCH);
		ck_assert_ptr_nonnull(strstr(err.msg, "exited"));
		dirty_close(m);
	}
	close(ch.to);
	close(ch.from);
	tu_rmdir(dir);
}
END_TEST

/* ---- memload digest and fill --------------------------------------------------- */

/* Runs memload with @args; returns its exit code, output in @out (malloc'd). */
static int memload(const char *dir, char **out, char *const *args)
{
	char bin[512], log[600];
	char *argv[16];
	struct tu_proc p;
	int n = 0, code;

	tu_build_path("bin/memload", bin, sizeof(bin));
	snprintf(log, sizeof(log), "%s/memload.log", dir);
	argv[n++] = bin;
	while (*args && n < 15)
		argv[n++] = *args++;
	argv[n] = NULL;
	ck_assert_int_eq(tu_spawn(&p, log, argv), 0);
	ck_assert_int_eq(tu_wait(&p, 30000), 0);
	code = tu_exit_code(&p);
	*out = tu_slurp(log, NULL);
	ck_assert_ptr_nonnull(*out);
	return code;
}

static void digest(const char *dir, const char *file, char hex[17])
{
	char *out, *args[] = { "digest", (char *)file, NULL };

	ck_assert_int_eq(memload(dir, &out, args), 0);
	ck_assert_msg(strlen(out) == 16 + 2 + strlen(file) + 1 && !strncmp(out + 16, "  ", 2),
		      "bad digest line: %s", out);
	memcpy(hex, out, 16);
	hex[16] = '\0';
	free(out);
}

START_TEST(memload_digest_and_fill)
{
	char dir[256], a[300], b[300], abc[300], ha[17], hb[17], *out;
	size_t len, i, zeros = 0;
	char *data;
	int fd;

	tu_tmpdir(dir, sizeof(dir));
	snprintf(a, sizeof(a), "%s/a", dir);
	snprintf(b, sizeof(b), "%s/b", dir);
	snprintf(abc, sizeof(abc), "%s/abc", dir);
	{
		char *fa[] = { "fill", a, "--size", "1M", "--zero-percent", "25", "--seed", "7", NULL };
		char *fb[] = { "fill", b, "--size", "1M", "--zero-percent", "25", "--seed", "7", NULL };

		ck_assert_int_eq(memload(dir, &out, fa), 0);
		ck_assert_ptr_nonnull(strstr(out, "pages=256 zero-pages=64"));
		free(out);
		ck_assert_int_eq(memload(dir, &out, fb), 0);
		free(out);
	}
	data = tu_slurp(a, &len);
	ck_assert_uint_eq(len, 1 << 20);
	for (i = 0; i < len; i += 4096) {
		size_t j = 0;

		while (j < 4096 && !data[i + j])
			j++;
		zeros += j == 4096;
	}
	free(data);
	ck_assert_uint_eq(zeros, 64);

	digest(dir, a, ha);
	digest(dir, b, hb);
	ck_assert_str_eq(ha, hb);
	fd = open(b, O_WRONLY);
	ck_assert_int_eq(pwrite(fd, "x", 1, 777777), 1);
	close(fd);
	digest(dir, b, hb);
	ck_assert_str_ne(ha, hb);

	/* XXH64 reference value, so the digest matches xxhsum -H1. */
	fd = open(abc, O_WRONLY | O_CREAT, 0644);
	ck_assert_int_eq(write(fd, "abc", 3), 3);
	close(fd);
	digest(dir, abc, ha);
	ck_assert_str_eq(ha, "44bc2cf5ad770999");

	{
		char *bad[] = { "run", a, "--pattern", "zigzag", "--rate", "1", NULL };

		ck_assert_int_eq(memload(dir, &out, bad), 2);
		ck_assert_ptr_nonnull(strstr(out, "zigzag"));
		free(out);
	}
	tu_rmdir(dir);
}
END_TEST

void dirty_cases(Suite *s)
{
	TCase *tc = tu_case(s, "tracking", 60);

	/* Loop index: the mode (0 soft-dirty, 1 wp-async), see mode_of. */
	tcase_add_loop_test(tc, memload_random_rate, 0, 2);
	tcase_add_loop_test(tc, memload_seq_one_run, 0, 2);
	tcase_add_loop_test(tc, exact_pages, 0, 4);
	tcase_add_loop_test(tc, several_mappings_and_clipping, 0, 2);
	tcase_add_loop_test(tc, everything_dirty_before_first_clear, 0, 2);
	tcase_add_loop_test(tc, two_files_many_slices, 0, 2);
	tcase_add_loop_test(tc, only_the_ram_is_touched, 0, 2);
	tcase_add_test(tc, auto_picks_and_says_why);
	tcase_add_test(tc, open_errors);
	tcase_add_loop_test(tc, mapping_change_and_exit_fail_collect, 0, 2);
	tcase_add_test(tc, memload_digest_and_fill);
}
