/* Soft-dirty tracking (src/cli/dirty.c) against real processes: memload at a
 * known rate, and a forked child that writes exactly the pages we name
 * through one or several mappings; plus memload's digest and fill.  Needs a
 * kernel with CONFIG_MEM_SOFT_DIRTY (the Soft-RoCE guest has it). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "suites.h"
#include "testutil.h"

/* The module is part of the commands, not of librdmig: build it in here. */
#include "../../src/cli/dirty.c"

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

static void collect(struct dirty_map *m, struct runs *r)
{
	char err[512] = "";
	int ret;

	memset(r, 0, sizeof(*r));
	ret = dirty_collect(m, on_run, r, err, sizeof(err));
	ck_assert_msg(ret == 0, "dirty_collect: %d %s", ret, err);
	ck_assert_msg(!r->misordered, "runs out of order, overlapping or not merged");
}

/* The commands hold the process by identity (proc.h); so do these tests,
 * for the length of one call. */
static int open_pid(struct dirty_map **m, pid_t pid, const char *path, uint64_t len,
		    char *err, size_t errlen)
{
	struct proc_ref p;
	int ret = proc_open(&p, pid, err, errlen);

	*m = NULL;
	if (!ret)
		ret = dirty_open(m, &p, path, len, err, errlen);
	proc_close(&p);
	return ret;
}

static void clear(pid_t pid)
{
	char err[512] = "";
	struct proc_ref p;
	int ret = proc_open(&p, pid, err, sizeof(err));

	if (!ret)
		ret = dirty_clear(&p, err, sizeof(err));
	proc_close(&p);
	ck_assert_msg(ret == 0, "dirty_clear: %d %s", ret, err);
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

static void sample_memload(const char *pattern, struct runs *r, uint64_t *bound)
{
	char dir[256], file[300], err[512] = "";
	struct dirty_map *m;
	struct tu_proc p;
	uint64_t t0;
	int ret;

	tu_tmpdir(dir, sizeof(dir));
	start_memload(&p, dir, pattern, file, sizeof(file));
	ret = open_pid(&m, p.pid, file, ML_SIZE, err, sizeof(err));
	ck_assert_msg(ret == 0, "dirty_open: %d %s", ret, err);
	t0 = tu_now_ms();
	clear(p.pid);
	usleep(500000);
	collect(m, r);
	*bound = rate_bound(tu_now_ms() - t0);
	fprintf(stderr, "memload %s: %" PRIu64 " dirty pages in %d runs (bound %" PRIu64 ")\n",
		pattern, r->bytes / 4096, r->n, *bound);
	dirty_close(m);
	stop_memload(&p);
	tu_rmdir(dir);
}

START_TEST(memload_random_rate)
{
	uint64_t bound, pages;
	struct runs r;

	sample_memload("random", &r, &bound);
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

	sample_memload("seq", &r, &bound);
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
 * 64..79 shared, 2 = whole file private) to page @page of that mapping. */
struct wr {
	int map, page;
};

struct child {
	pid_t pid;
	int to, from; /* pipe ends: commands to the child, acks from it */
};

static void child_main(const char *path, int npages, int prefault, const struct wr *w,
		       int nw, int in, int out)
{
	size_t ps = (size_t)getpagesize();
	char *map[3], c;
	int fd = open(path, O_RDWR), i;

	if (fd < 0)
		_exit(10);
	map[0] = mmap(NULL, npages * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	map[1] = mmap(NULL, 16 * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 64 * (off_t)ps);
	map[2] = mmap(NULL, npages * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	if (map[0] == MAP_FAILED || map[1] == MAP_FAILED || map[2] == MAP_FAILED)
		_exit(11);
	/* Present and writable already, so only the tracked writes fault. */
	for (i = 0; prefault && i < npages; i++)
		map[0][(size_t)i * ps] = 1;
	if (write(out, "R", 1) != 1 || read(in, &c, 1) != 1)
		_exit(12);
	for (i = 0; i < nw; i++)
		map[w[i].map][(size_t)w[i].page * ps + 8] = (char)(i + 2);
	if (write(out, "D", 1) != 1 || read(in, &c, 1) != 1)
		_exit(13);
	_exit(0);
}

static void child_start(struct child *ch, const char *path, int npages, int prefault,
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
		child_main(path, npages, prefault, w, nw, down[0], up[1]);
	}
	close(down[0]);
	close(up[1]);
	ch->to = down[1];
	ch->from = up[0];
	ck_assert_int_eq(read(ch->from, &c, 1), 1);
	ck_assert_int_eq(c, 'R');
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

static struct dirty_map *open_ok(pid_t pid, const char *path, uint64_t len)
{
	char err[512] = "";
	struct dirty_map *m;
	int ret = open_pid(&m, pid, path, len, err, sizeof(err));

	ck_assert_msg(ret == 0, "dirty_open: %d %s", ret, err);
	return m;
}

/* _i = 1: every page present before the clear; 0: none ever touched. */
START_TEST(exact_pages)
{
	static const struct wr w[] = { { 0, 0 }, { 0, 5 }, { 0, 6 }, { 0, 7 }, { 0, 100 },
				       { 0, NPAGES - 1 } };
	static const uint64_t want[][2] = { { 0, 1 }, { 5, 3 }, { 100, 1 }, { NPAGES - 1, 1 } };
	uint64_t len = NPAGES * (uint64_t)getpagesize();
	char dir[256], path[300];
	struct dirty_map *m;
	struct child ch;
	struct runs r;

	tu_tmpdir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/ram", dir);
	make_file(path, len);
	child_start(&ch, path, NPAGES, _i, w, 6);
	m = open_ok(ch.pid, path, len);
	clear(ch.pid);
	collect(m, &r);
	ck_assert_int_eq(r.n, 0);
	child_write(&ch);
	collect(m, &r);
	assert_runs(&r, want, 4, len);
	/* Collecting does not clear. */
	collect(m, &r);
	assert_runs(&r, want, 4, len);
	clear(ch.pid);
	collect(m, &r);
	ck_assert_int_eq(r.n, 0);
	child_finish(&ch);
	dirty_close(m);
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
	struct dirty_map *m;
	struct child ch;
	struct runs r;

	tu_tmpdir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/ram", dir);
	make_file(path, NPAGES * ps);
	child_start(&ch, path, NPAGES, 1, w, 8);
	m = open_ok(ch.pid, path, len);
	ck_assert_uint_eq(m->nvmas, 2);
	clear(ch.pid);
	child_write(&ch);
	collect(m, &r);
	assert_runs(&r, want, 4, len);
	ck_assert_uint_eq(r.off[3] + r.len[3], len);
	child_finish(&ch);
	dirty_close(m);
	tu_rmdir(dir);
}
END_TEST

/* Before the first clear a fresh mapping reports everything: over-reporting
 * is the safe side. */
START_TEST(everything_dirty_before_first_clear)
{
	uint64_t len = NPAGES * (uint64_t)getpagesize();
	char dir[256], path[300];
	struct dirty_map *m;
	struct child ch;
	struct runs r;

	tu_tmpdir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/ram", dir);
	make_file(path, len);
	child_start(&ch, path, NPAGES, 0, NULL, 0);
	m = open_ok(ch.pid, path, len);
	collect(m, &r);
	ck_assert_int_eq(r.n, 1);
	ck_assert_uint_eq(r.off[0], 0);
	ck_assert_uint_eq(r.len[0], len);
	child_write(&ch);
	child_finish(&ch);
	dirty_close(m);
	tu_rmdir(dir);
}
END_TEST

/* ---- errors ------------------------------------------------------------------- */

static int open_fails(pid_t pid, const char *path, char *err, size_t errlen)
{
	struct dirty_map *m = (struct dirty_map *)1;
	int ret = open_pid(&m, pid, path, 1 << 20, err, errlen);

	ck_assert_ptr_null(m);
	fprintf(stderr, "dirty_open(%d, %s): %d %s\n", (int)pid, path, ret, err);
	return ret;
}

START_TEST(open_errors)
{
	char dir[256], path[300], missing[320], err[512], want[400];
	void *priv;
	int fd;

	tu_tmpdir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/ram", dir);
	snprintf(missing, sizeof(missing), "%s/nope", dir);
	make_file(path, 1 << 20);

	ck_assert_int_eq(open_fails(getpid(), path, err, sizeof(err)), -ENOENT);
	snprintf(want, sizeof(want), "process %d does not map %s", (int)getpid(), path);
	ck_assert_str_eq(err, want);

	ck_assert_int_eq(open_fails(getpid(), missing, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, missing));

	fd = open(path, O_RDWR);
	priv = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	ck_assert_ptr_ne(priv, MAP_FAILED);
	ck_assert_int_eq(open_fails(getpid(), path, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "only privately"));
	ck_assert_ptr_nonnull(strstr(err, path));
	munmap(priv, 1 << 20);
	close(fd);

	/* PIDs count up from a high one only after wrapping: this one is free. */
	ck_assert_int_eq(open_fails(0x3ffffff, path, err, sizeof(err)), -ESRCH);
	ck_assert_ptr_nonnull(strstr(err, "no process 67108863"));
	tu_rmdir(dir);
}
END_TEST

/* Pages dirtied through a mapping that was unmapped cannot be seen: the
 * change must fail the collect, not pass as "clean". */
START_TEST(mapping_change_and_exit_fail_collect)
{
	uint64_t len = NPAGES * (uint64_t)getpagesize();
	char dir[256], path[300], err[512];
	struct dirty_map *m;
	struct child ch;
	struct runs r;
	void *p;
	int fd, st;

	tu_tmpdir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/ram", dir);
	make_file(path, len);

	fd = open(path, O_RDWR);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	m = open_ok(getpid(), path, len);
	collect(m, &r);
	munmap(p, len);
	ck_assert_int_eq(dirty_collect(m, on_run, &r, err, sizeof(err)), -ESTALE);
	ck_assert_ptr_nonnull(strstr(err, "changed its mappings of"));
	dirty_close(m);
	close(fd);

	child_start(&ch, path, NPAGES, 0, NULL, 0);
	m = open_ok(ch.pid, path, len);
	kill(ch.pid, SIGKILL);
	ck_assert_int_eq(waitpid(ch.pid, &st, 0), ch.pid);
	ck_assert_int_eq(dirty_collect(m, on_run, &r, err, sizeof(err)), -ESRCH);
	ck_assert_ptr_nonnull(strstr(err, "exited"));
	dirty_close(m);
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

Suite *dirty_suite(void)
{
	Suite *s = suite_create("dirty");
	TCase *tc = tcase_create("softdirty");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, memload_random_rate);
	tcase_add_test(tc, memload_seq_one_run);
	tcase_add_loop_test(tc, exact_pages, 0, 2);
	tcase_add_test(tc, several_mappings_and_clipping);
	tcase_add_test(tc, everything_dirty_before_first_clear);
	tcase_add_test(tc, open_errors);
	tcase_add_test(tc, mapping_change_and_exit_fail_collect);
	tcase_add_test(tc, memload_digest_and_fill);
	suite_add_tcase(s, tc);
	return s;
}
