/* memload: the workload and data generator for tests and benchmarks.
 *
 *   memload run FILE (--rate MIB_PER_S | --page-rate PAGES_PER_S) [--pattern random|seq]
 *               [--size SIZE] [--seconds N] [--touch] [--cpu]
 *   memload digest FILE
 *   memload fill FILE --size SIZE [--zero-percent P] [--seed N]
 *
 * `run` stands in for a VM: it maps a RAM file MAP_SHARED and keeps writing
 * into its pages at a known rate, so live migration has something to chase.
 * With --touch every page is mapped and writable first, as a guest's RAM is
 * after it has run a while: what the kernel walks to track writes is then
 * the whole file's page tables, not just the pages written so far.
 * With --cpu the rate is per second of CPU time it gets, spinning between
 * writes, as a guest's vCPU writes: slowed to a share of a CPU (a cgroup's
 * cpu.max, auto-converge's throttle), it writes that share of the rate.
 * `digest` is XXH64 (seed 0) of the whole file, the same value as
 * `xxhsum -H1 FILE`, so images can be compared without copying them.
 * `fill` makes a reproducible image with an exact number of zero pages.
 * Stand-alone on purpose: no librdmig, no libraries beyond libc. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EX_FAIL 1
#define EX_USAGE 2
#define SLICE_NS 10000000L   /* pacing granularity: 10 ms */
#define MAX_CATCHUP_S 0.1    /* after a SIGSTOP, do not burst to catch up */

static const char usage_text[] =
	"usage: memload run FILE (--rate MIB_PER_S | --page-rate PAGES_PER_S) [--pattern random|seq]\n"
	"                   [--size SIZE] [--seconds N] [--touch] [--cpu]\n"
	"       memload digest FILE\n"
	"       memload fill FILE --size SIZE [--zero-percent P] [--seed N]\n"
	"\n"
	"run     map FILE shared (created or resized to --size when given; otherwise\n"
	"        an existing non-empty FILE keeps its size), print\n"
	"        \"ready pid=PID size=BYTES\", then write 8 bytes into one page after\n"
	"        another at MIB_PER_S MiB of pages per second (decimals allowed, 0 =\n"
	"        idle), in random page order or sequentially with wrap-around, paced\n"
	"        in 10 ms slices.  Runs until SIGTERM/SIGINT or --seconds elapse, then\n"
	"        prints \"stopped writes=N\" and exits 0.  --page-rate gives the rate\n"
	"        in pages per second instead.  --touch first maps every page writable\n"
	"        (reading each page's first 8 bytes and writing them back: the\n"
	"        contents stay), before \"ready\".  --cpu paces by the CPU time it\n"
	"        gets instead of the clock: it spins, and writes the rate per second\n"
	"        of CPU time, so a process held to a share of a CPU writes that share\n"
	"        of it (as a guest's vCPU does).\n"
	"digest  print \"<16 hex digits>  FILE\": XXH64 (seed 0) of the contents,\n"
	"        equal to xxhsum -H1.\n"
	"fill    create FILE of SIZE bytes: random pages, of which P percent (rounded\n"
	"        to the nearest page, default 0) are all zero; the same --seed (default\n"
	"        1) gives the same bytes.  Prints \"filled FILE size=N pages=P\n"
	"        zero-pages=Z\".\n"
	"\n"
	"SIZE takes a K, M, G or T suffix (powers of 1024).\n"
	"Exit status: 0 success, 1 failure while running, 2 usage error or a FILE\n"
	"that cannot be opened.\n";

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

__attribute__((format(printf, 2, 3), noreturn))
static void die(int code, const char *fmt, ...)
{
	va_list ap;

	fputs("memload: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	unsigned long long v;
	const char *u;
	char *end;
	int shift;

	errno = 0;
	if (*s < '0' || *s > '9')
		return -1;
	v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	shift = 0;
	if (*end) {
		u = strchr(units, *end & ~0x20);
		if (!u || !*u)
			return -1;
		shift = 10 * (int)(u - units + 1);
		end++;
		if (!strcmp(end, "iB") || !strcmp(end, "B"))
			end += strlen(end);
		if (*end)
			return -1;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	if (*s < '0' || *s > '9')
		return -1;
	*out = strtoull(s, &end, 0);
	return errno || *end ? -1 : 0;
}

static double parse_number(const char *opt, const char *s, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0) || v > max)
		die(EX_USAGE, "%s: invalid value `%s' (a number from 0 to %g)", opt, s, max);
	return v;
}

static uint64_t size_arg(const char *opt, const char *s)
{
	uint64_t v;

	if (parse_size(s, &v) || !v)
		die(EX_USAGE, "%s: invalid size `%s' (bytes, or with a K, M, G or T suffix)", opt, s);
	return v;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* ---- run ------------------------------------------------------------------ */

struct run_opts {
	const char *file;
	double rate_mib, page_rate, seconds;
	int seq, touch, cpu;
	uint64_t size;
};

static int open_sized(const struct run_opts *o, uint64_t *size)
{
	struct stat st;
	int fd = open(o->file, O_RDWR | O_CREAT | O_CLOEXEC, 0644);

	if (fd < 0)
		die(EX_USAGE, "cannot open %s: %s", o->file, strerror(errno));
	if (fstat(fd, &st))
		die(EX_FAIL, "cannot stat %s: %s", o->file, strerror(errno));
	if (o->size) {
		if ((uint64_t)st.st_size != o->size && ftruncate(fd, (off_t)o->size))
			die(EX_FAIL, "cannot resize %s to %" PRIu64 " bytes: %s", o->file,
			    o->size, strerror(errno));
		*size = o->size;
	} else {
		if (st.st_size <= 0)
			die(EX_USAGE, "%s is empty: give --size", o->file);
		*size = (uint64_t)st.st_size;
	}
	return fd;
}

static void install_stop_handlers(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	/* No SA_RESTART: the sleep must end so the loop sees the flag. */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}

static void dirty_one(unsigned char *base, uint64_t size, uint64_t page, uint64_t psz,
		      uint64_t *counter)
{
	uint64_t off = page * psz, c = *counter, v = splitmix64(&c);
	size_t n = size - off < 8 ? (size_t)(size - off) : 8;

	memcpy(base + off, &v, n);
	(*counter)++;
}

static int cmd_run(const struct run_opts *o)
{
	uint64_t size, psz = (uint64_t)sysconf(_SC_PAGESIZE), npages, writes = 0, page = 0;
	uint64_t rng, start, last, now, next, end;
	double pps, credit = 0, dt;
	struct timespec ts;
	unsigned char *base;
	int fd;

	fd = open_sized(o, &size);
	npages = size / psz + (size % psz != 0);
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		die(EX_FAIL, "cannot map %s (%" PRIu64 " bytes): %s", o->file, size, strerror(errno));
	close(fd);
	install_stop_handlers();
	/* Same bytes back: the page is present and writable, its data as it was. */
	for (page = 0; o->touch && page < npages; page++) {
		volatile uint64_t *w = (volatile uint64_t *)(base + page * psz);
		uint64_t v;

		if (size - page * psz < 8)
			break;
		v = *w;
		*w = v;
	}
	page = 0;
	rng = (uint64_t)getpid() ^ now_ns();
	pps = o->page_rate > 0 ? o->page_rate : o->rate_mib * 1048576.0 / (double)psz;
	printf("ready pid=%d size=%" PRIu64 "\n", (int)getpid(), size);
	fflush(stdout);

	start = next = now_ns();
	last = o->cpu ? clock_ns(CLOCK_THREAD_CPUTIME_ID) : start;
	end = o->seconds > 0 ? start + (uint64_t)(o->seconds * 1e9) : UINT64_MAX;
	while (!stop_requested) {
		now = now_ns();
		if (now >= end)
			break;
		if (o->cpu) {
			/* Spinning: the credit grows with the CPU time we get. */
			now = clock_ns(CLOCK_THREAD_CPUTIME_ID);
			credit += (double)(now - last) / 1e9 * pps;
			last = now;
			for (; credit >= 1 && !stop_requested; credit -= 1) {
				page = o->seq ? (writes ? (page + 1) % npages : 0) :
				       splitmix64(&rng) % npages;
				dirty_one(base, size, page, psz, &writes);
			}
			continue;
		}
		dt = (double)(now - last) / 1e9;
		credit += (dt < MAX_CATCHUP_S ? dt : MAX_CATCHUP_S) * pps;
		last = now;
		for (; credit >= 1 && !stop_requested; credit -= 1) {
			page = o->seq ? (writes ? (page + 1) % npages : 0) : splitmix64(&rng) % npages;
			dirty_one(base, size, page, psz, &writes);
		}
		next += SLICE_NS;
		if (next < now)
			next = now + SLICE_NS;
		if (next > end)
			next = end;
		ts.tv_sec = (time_t)(next / 1000000000ull);
		ts.tv_nsec = (long)(next % 1000000000ull);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
	munmap(base, size);
	printf("stopped writes=%" PRIu64 "\n", writes);
	return 0;
}

/* ---- digest: XXH64 --------------------------------------------------------- */

#define P1 0x9e3779b185ebca87ull
#define P2 0xc2b2ae3d27d4eb4full
#define P3 0x165667b19e3779f9ull
#define P4 0x85ebca77c2b2ae63ull
#define P5 0x27d4eb2f165667c5ull

static uint64_t rotl64(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static uint32_t rd32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t xxh_round(uint64_t acc, uint64_t in)
{
	return rotl64(acc + in * P2, 31) * P1;
}

static uint64_t xxh_merge(uint64_t h, uint64_t v)
{
	return (h ^ xxh_round(0, v)) * P1 + P4;
}

static uint64_t xxh64(const unsigned char *p, uint64_t len)
{
	uint64_t h, i = 0, v[4] = { P1 + P2, P2, 0, -P1 };
	int k;

	if (len >= 32) {
		for (; len - i >= 32; i += 32)
			for (k = 0; k < 4; k++)
				v[k] = xxh_round(v[k], rd64(p + i + 8 * k));
		h = rotl64(v[0], 1) + rotl64(v[1], 7) + rotl64(v[2], 12) + rotl64(v[3], 18);
		for (k = 0; k < 4; k++)
			h = xxh_merge(h, v[k]);
	} else {
		h = P5;
	}
	h += len;
	for (; len - i >= 8; i += 8)
		h = rotl64(h ^ xxh_round(0, rd64(p + i)), 27) * P1 + P4;
	if (len - i >= 4) {
		h = rotl64(h ^ (uint64_t)rd32(p + i) * P1, 23) * P2 + P3;
		i += 4;
	}
	for (; i < len; i++)
		h = rotl64(h ^ p[i] * P5, 11) * P1;
	h ^= h >> 33;
	h *= P2;
	h ^= h >> 29;
	h *= P3;
	return h ^ (h >> 32);
}

static int cmd_digest(const char *file)
{
	static const unsigned char empty[1];
	const unsigned char *base = empty;
	struct stat st;
	int fd = open(file, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		die(EX_USAGE, "cannot open %s: %s", file, strerror(errno));
	if (fstat(fd, &st))
		die(EX_FAIL, "cannot stat %s: %s", file, strerror(errno));
	if (st.st_size > 0) {
		base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (base == MAP_FAILED)
			die(EX_FAIL, "cannot map %s: %s", file, strerror(errno));
		madvise((void *)base, (size_t)st.st_size, MADV_SEQUENTIAL);
	}
	close(fd);
	printf("%016" PRIx64 "  %s\n", xxh64(base, (uint64_t)st.st_size), file);
	if (st.st_size > 0)
		munmap((void *)base, (size_t)st.st_size);
	return 0;
}

/* ---- fill ------------------------------------------------------------------ */

#define FILL_BUF (1u << 20)

static int cmd_fill(const char *file, uint64_t size, double zero_pct, uint64_t seed)
{
	uint64_t psz = (uint64_t)sysconf(_SC_PAGESIZE), npages = size / psz + (size % psz != 0);
	uint64_t zeros = (uint64_t)((double)npages * zero_pct / 100.0 + 0.5);
	uint64_t need = zeros, sel = seed ^ 0x5eed5eed5eed5eedull, pg, st, n, off = 0, i;
	unsigned char *buf = malloc(FILL_BUF);
	size_t used = 0;
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		die(EX_USAGE, "cannot create %s: %s", file, strerror(errno));
	if (!buf)
		die(EX_FAIL, "out of memory");
	for (pg = 0; pg < npages; pg++) {
		n = size - pg * psz < psz ? size - pg * psz : psz;
		/* Selection sampling (Knuth's algorithm S): exactly @zeros pages,
		 * spread at random, in one pass without a page list. */
		if (need && splitmix64(&sel) % (npages - pg) < need) {
			memset(buf + used, 0, n);
			need--;
		} else {
			st = seed * 0x100000001b3ull + pg;
			for (i = 0; i < n; i += 8) {
				uint64_t w = splitmix64(&st);

				memcpy(buf + used + i, &w, n - i < 8 ? n - i : 8);
			}
			buf[used] |= 1; /* never all zero by chance */
		}
		used += n;
		if (used + psz > FILL_BUF || pg + 1 == npages) {
			if (pwrite(fd, buf, used, (off_t)off) != (ssize_t)used)
				die(EX_FAIL, "cannot write %s: %s", file, strerror(errno));
			off += used;
			used = 0;
		}
	}
	if (close(fd))
		die(EX_FAIL, "cannot write %s: %s", file, strerror(errno));
	free(buf);
	printf("filled %s size=%" PRIu64 " pages=%" PRIu64 " zero-pages=%" PRIu64 "\n", file, size,
	       npages, zeros);
	return 0;
}

/* ---- command line ------------------------------------------------------------ */

enum { OPT_RATE = 'r', OPT_PATTERN = 'p', OPT_SIZE = 's', OPT_SECONDS = 't',
       OPT_ZERO = 'z', OPT_SEED = 'e', OPT_HELP = 'h', OPT_PAGE_RATE = 'P', OPT_TOUCH = 'T',
       OPT_CPU = 'C' };

static const struct option long_opts[] = {
	{ "rate", required_argument, NULL, OPT_RATE },
	{ "page-rate", required_argument, NULL, OPT_PAGE_RATE },
	{ "touch", no_argument, NULL, OPT_TOUCH },
	{ "cpu", no_argument, NULL, OPT_CPU },
	{ "pattern", required_argument, NULL, OPT_PATTERN },
	{ "size", required_argument, NULL, OPT_SIZE },
	{ "seconds", required_argument, NULL, OPT_SECONDS },
	{ "zero-percent", required_argument, NULL, OPT_ZERO },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

struct args {
	const char *cmd, *file;
	const char *rate, *pattern, *size, *seconds, *zero, *seed, *page_rate, *touch, *cpu;
};

/* Options of another command are refused rather than silently ignored. */
static void only_for(const struct args *a, const char *allowed)
{
	const struct { const char *name, *val; } all[] = {
		{ "rate", a->rate }, { "pattern", a->pattern }, { "size", a->size },
		{ "seconds", a->seconds }, { "zero-percent", a->zero }, { "seed", a->seed },
		{ "page-rate", a->page_rate }, { "touch", a->touch }, { "cpu", a->cpu },
	};
	char key[32];
	size_t i;

	for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		snprintf(key, sizeof(key), " %s ", all[i].name);
		if (all[i].val && !strstr(allowed, key))
			die(EX_USAGE, "%s: --%s does not apply (see memload --help)", a->cmd,
			    all[i].name);
	}
}

static void parse_args(int argc, char **argv, struct args *a)
{
	int c;

	memset(a, 0, sizeof(*a));
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(usage_text, stdout);
		exit(0);
	}
	if (argc < 2 || argv[1][0] == '-')
		die(EX_USAGE, "missing command: run, digest or fill (see memload --help)");
	a->cmd = argv[1];
	/* GNU getopt permutes, so FILE may come before or after the options. */
	optind = 2;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_RATE: a->rate = optarg; break;
		case OPT_PATTERN: a->pattern = optarg; break;
		case OPT_SIZE: a->size = optarg; break;
		case OPT_SECONDS: a->seconds = optarg; break;
		case OPT_ZERO: a->zero = optarg; break;
		case OPT_SEED: a->seed = optarg; break;
		case OPT_PAGE_RATE: a->page_rate = optarg; break;
		case OPT_TOUCH: a->touch = "yes"; break;
		case OPT_CPU: a->cpu = "yes"; break;
		case OPT_HELP: fputs(usage_text, stdout); exit(0);
		default:
			die(EX_USAGE, "%s: unknown option or missing value in `%s' (see memload --help)",
			    a->cmd, argv[optind - 1]);
		}
	}
	if (optind < argc)
		a->file = argv[optind++];
	if (optind < argc)
		die(EX_USAGE, "%s: unexpected argument `%s'", a->cmd, argv[optind]);
	if (!a->file)
		die(EX_USAGE, "%s: missing FILE (see memload --help)", a->cmd);
}

int main(int argc, char **argv)
{
	struct run_opts ro = { 0 };
	uint64_t size, seed = 1;
	struct args a;

	parse_args(argc, argv, &a);
	if (!strcmp(a.cmd, "digest")) {
		only_for(&a, "");
		return cmd_digest(a.file);
	}
	if (!strcmp(a.cmd, "fill")) {
		only_for(&a, " size zero-percent seed ");
		if (!a.size)
			die(EX_USAGE, "fill: --size is required");
		size = size_arg("--size", a.size);
		if (a.seed && parse_u64(a.seed, &seed))
			die(EX_USAGE, "--seed: invalid value `%s' (an unsigned integer)", a.seed);
		return cmd_fill(a.file, size, a.zero ? parse_number("--zero-percent", a.zero, 100) : 0,
				seed);
	}
	if (!strcmp(a.cmd, "run")) {
		only_for(&a, " rate page-rate pattern size seconds touch cpu ");
		if (!a.rate == !a.page_rate)
			die(EX_USAGE, "run: one of --rate MIB_PER_S or --page-rate PAGES_PER_S is required");
		ro.file = a.file;
		ro.rate_mib = a.rate ? parse_number("--rate", a.rate, 1e6) : 0;
		ro.page_rate = a.page_rate ? parse_number("--page-rate", a.page_rate, 1e9) : 0;
		ro.touch = a.touch != NULL;
		ro.cpu = a.cpu != NULL;
		if (a.pattern && strcmp(a.pattern, "random") && strcmp(a.pattern, "seq"))
			die(EX_USAGE, "--pattern: `%s' is neither random nor seq", a.pattern);
		ro.seq = a.pattern && !strcmp(a.pattern, "seq");
		ro.size = a.size ? size_arg("--size", a.size) : 0;
		ro.seconds = a.seconds ? parse_number("--seconds", a.seconds, 1e9) : 0;
		return cmd_run(&ro);
	}
	die(EX_USAGE, "unknown command `%s': run, digest or fill (see memload --help)", a.cmd);
}
