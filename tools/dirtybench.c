/* dirtybench: what one round of write tracking costs, by size and method.
 *
 *   dirtybench FILE --size SIZE [--percent P] [--rounds N]
 *              [--mode auto|wp-async|soft-dirty] [--threads N]
 *
 * A child process maps FILE (tmpfs; created or resized to SIZE) shared and
 * makes every page present and writable, as a guest's RAM is after it ran a
 * while.  This process then tracks it with src/cli/dirty.h, as migrate-send
 * --live does, and times each round: the child writes P percent of the
 * pages (distinct, at random; not timed), then one collect and one clear are
 * timed apart.  Every page the child wrote must be reported, or dirtybench
 * fails: the figures are for a tracker that works.  Output, one "key value"
 * per line: method, threads, pages, written (per round), open_ms (set-up,
 * including wp-async's injection and registration), arm_ms (the first
 * clear), then per round "round I collect_ms C clear_ms L reported R", and
 * the medians collect_ms, clear_ms, round_ms (collect + clear).
 * Exit status: 0, 1 when tracking failed or missed a page, 2 on misuse. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "cli.h"
#include "dirty.h"
#include "opts.h"

#define MAX_ROUNDS 100

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void usage(void)
{
	fputs("usage: dirtybench FILE --size SIZE [--percent P] [--rounds N]\n"
	      "                  [--mode auto|wp-async|soft-dirty] [--threads N]\n", stderr);
	exit(2);
}

/* The child: maps, touches, then for every byte it reads writes the pages
 * of the next round and answers. */
static void child(int fd, uint64_t size, uint64_t psz, uint64_t per_round, uint64_t *marks,
		  int in, int out)
{
	uint64_t npages = size / psz, i, seed = 42, pg;
	unsigned char *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	char c;

	if (base == MAP_FAILED)
		_exit(10);
	for (i = 0; i < npages; i++) {
		volatile uint64_t *w = (volatile uint64_t *)(base + i * psz);
		uint64_t v = *w;

		*w = v;
	}
	if (write(out, "R", 1) != 1)
		_exit(11);
	while (read(in, &c, 1) == 1 && c == 'W') {
		memset(marks, 0, (npages / 64 + 1) * 8);
		for (i = 0; i < per_round;) {
			pg = splitmix64(&seed) % npages;
			if (marks[pg / 64] & (1ull << (pg % 64)))
				continue;
			marks[pg / 64] |= 1ull << (pg % 64);
			base[pg * psz + 16]++;
			i++;
		}
		if (write(out, "D", 1) != 1)
			_exit(12);
	}
	_exit(0);
}

struct seen {
	uint64_t *bits, psz, reported;
};

static int on_run(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	struct seen *s = ctx;
	uint64_t p;

	(void)file;
	for (p = off / s->psz; p < (off + len + s->psz - 1) / s->psz; p++)
		s->bits[p / 64] |= 1ull << (p % 64);
	s->reported += (len + s->psz - 1) / s->psz;
	return 0;
}

int main(int argc, char **argv)
{
	struct dirty_opts o = { .mode = DIRTY_AUTO };
	const char *file = NULL;
	uint64_t size = 0, psz = (uint64_t)sysconf(_SC_PAGESIZE), npages, per_round, *marks, w;
	double percent = 1, coll[MAX_ROUNDS], clr[MAX_ROUNDS], tot[MAX_ROUNDS], t0, t1, t2;
	int rounds = 5, i, fd, down[2], up[2], st, rc = 0;
	struct cli_err err = { "" };
	char c;
	struct dirty_set *s;
	struct proc_ref pr;
	struct seen seen;
	pid_t pid;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--size") && i + 1 < argc)
		{
			if (cli_parse_size(argv[++i], &size) || !size)
				usage();
		}
		else if (!strcmp(argv[i], "--percent") && i + 1 < argc)
			percent = atof(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			o.threads = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
			if (dirty_mode_parse(argv[++i], &o.mode))
				usage();
		} else if (argv[i][0] != '-' && !file)
			file = argv[i];
		else
			usage();
	}
	if (!file || !size || rounds < 1 || rounds > MAX_ROUNDS || percent < 0 || percent > 100)
		usage();
	npages = size / psz;
	per_round = (uint64_t)((double)npages * percent / 100.0 + 0.5);
	fd = open(file, O_RDWR | O_CREAT, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)size)) {
		fprintf(stderr, "dirtybench: cannot make %s of %" PRIu64 " bytes: %s\n", file, size,
			strerror(errno));
		return 2;
	}
	/* The child's record of what it wrote, shared so we can check it. */
	marks = mmap(NULL, (npages / 64 + 1) * 8, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		     -1, 0);
	seen.bits = calloc(npages / 64 + 1, 8);
	if (marks == MAP_FAILED || !seen.bits || pipe(down) || pipe(up) || (pid = fork()) < 0) {
		fprintf(stderr, "dirtybench: cannot set up: %s\n", strerror(errno));
		free(seen.bits);
		return 1;
	}
	seen.psz = psz;
	if (pid == 0) {
		close(down[1]);
		close(up[0]);
		child(fd, size, psz, per_round, marks, down[0], up[1]);
	}
	close(down[0]);
	close(up[1]);
	if (read(up[0], &c, 1) != 1) {
		fprintf(stderr, "dirtybench: the child did not start\n");
		free(seen.bits);
		return 1;
	}
	t0 = now_ms();
	rc = proc_open(&pr, pid, &err);
	if (!rc)
		rc = dirty_open(&s, &pr, (const char *const[]){ file }, &size, 1, &o, &err);
	proc_close(&pr);
	if (rc) {
		fprintf(stderr, "dirtybench: %s\n", err.msg);
		kill(pid, SIGKILL);
		free(seen.bits);
		return 1;
	}
	t1 = now_ms();
	printf("method %s\nthreads %u\npages %" PRIu64 "\nwritten %" PRIu64 "\nopen_ms %.3f\n",
	       dirty_method(s), dirty_threads(s), npages, per_round, t1 - t0);
	if (dirty_why_not(s)[0])
		printf("why_not %s\n", dirty_why_not(s));
	rc = dirty_clear(s, &err);
	printf("arm_ms %.3f\n", now_ms() - t1);
	for (i = 0; !rc && i < rounds; i++) {
		if (write(down[1], "W", 1) != 1 || read(up[0], &c, 1) != 1) {
			fprintf(stderr, "dirtybench: the child died\n");
			rc = 1;
			break;
		}
		memset(seen.bits, 0, (npages / 64 + 1) * 8);
		seen.reported = 0;
		t0 = now_ms();
		rc = dirty_collect(s, on_run, &seen, &err);
		t1 = now_ms();
		if (!rc)
			rc = dirty_clear(s, &err);
		t2 = now_ms();
		if (rc)
			break;
		for (w = 0; w < npages / 64 + 1; w++)
			if (marks[w] & ~seen.bits[w]) {
				fprintf(stderr, "dirtybench: round %d: page %" PRIu64 " was written and "
					"not reported (%s)\n", i, w * 64 + (uint64_t)__builtin_ctzll(
					marks[w] & ~seen.bits[w]), dirty_method(s));
				rc = 1;
				break;
			}
		coll[i] = t1 - t0;
		clr[i] = t2 - t1;
		tot[i] = t2 - t0;
		printf("round %d collect_ms %.3f clear_ms %.3f reported %" PRIu64 "\n", i, coll[i],
		       clr[i], seen.reported);
	}
	if (rc && err.msg[0] && rc != 1)
		fprintf(stderr, "dirtybench: %s\n", err.msg);
	if (!rc)
		printf("collect_ms %.3f\nclear_ms %.3f\nround_ms %.3f\n", bench_median(coll, rounds),
		       bench_median(clr, rounds), bench_median(tot, rounds));
	dirty_close(s);
	if (write(down[1], "Q", 1) != 1)
		kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(fd);
	free(seen.bits);
	return rc ? 1 : 0;
}
