/* zerobench: zero-page scan rate against memory read bandwidth, natively.
 *
 *   zerobench [--size SIZE] [--zero-percent P] [--runs N]
 *
 * The migration's zero-page check (zero_is_zero, linked straight from
 * src/lib/memory) should run near the memory read bandwidth: DESIGN.md section 8
 * wants >= 0.8 of it.  Both are measured here on the same buffer, in the
 * same process, interleaved (read, scan, read, scan, ...) so that a noisy
 * neighbour hurts both alike, and the medians are compared.
 *
 * The buffer (default 1 GiB, anonymous memory, every page written first so
 * neither loop reads the shared zero page) has P percent zero pages (default
 * 90) spread like memload fill spreads them; the rest hold random bytes.
 *   read   a plain loop summing every u64 of the buffer;
 *   scan   zero_is_zero on every 4 KiB page, as the data path calls it;
 *   zero   the same scan after the whole buffer was zeroed: the pure
 *          bandwidth-bound case, where every byte must be read.
 * Output: one "key value" line per figure (GB/s are 10^9 bytes per second),
 * ending with the ratios; tools/bench parses it. */
#include "benchutil.h"
#include "zero.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PAGE 4096u
#define MAX_RUNS 101

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Four independent accumulators: one would chain every add on the previous
 * and measure the adder's latency, not the memory. */
static uint64_t read_sum(const uint64_t *p, size_t n)
{
	uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
	size_t i;

	for (i = 0; i + 4 <= n; i += 4) {
		a0 += p[i];
		a1 += p[i + 1];
		a2 += p[i + 2];
		a3 += p[i + 3];
	}
	for (; i < n; i++)
		a0 += p[i];
	return a0 + a1 + a2 + a3;
}

static size_t scan_pages(const unsigned char *p, size_t len)
{
	size_t off, zero = 0;

	for (off = 0; off < len; off += PAGE)
		zero += zero_is_zero(p + off, PAGE);
	return zero;
}

/* Every page gets random bytes; then a deterministic, evenly spread
 * @zero_pct percent of them are cleared (error diffusion over the pages). */
static size_t fill(unsigned char *buf, size_t len, unsigned zero_pct)
{
	uint64_t seed = 1, *w = (uint64_t *)(void *)buf;
	size_t i, pages = len / PAGE, zeros = 0, acc = 0;

	for (i = 0; i < len / sizeof(uint64_t); i++)
		w[i] = splitmix64(&seed) | 1;
	for (i = 0; i < pages; i++) {
		acc += zero_pct;
		if (acc >= 100) {
			acc -= 100;
			memset(buf + i * PAGE, 0, PAGE);
			zeros++;
		}
	}
	return zeros;
}

static int parse_size(const char *s, size_t *out)
{
	unsigned long long v;
	char *end;
	int shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end || v == 0 || v > (SIZE_MAX >> shift))
		return -1;
	*out = (size_t)v << shift;
	return 0;
}

static void usage(FILE *f)
{
	fputs("usage: zerobench [--size SIZE] [--zero-percent P] [--runs N]\n"
	      "  --size SIZE        buffer size, K/M/G suffixes (default 1G)\n"
	      "  --zero-percent P   percent of zero pages (default 90)\n"
	      "  --runs N           medians of N interleaved runs (default 5)\n", f);
}

struct opts {
	size_t size;
	unsigned zero_pct, runs;
};

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "zero-percent", required_argument, NULL, 'z' },
		{ "runs", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long v;
	char *end;
	int c;

	o->size = 1ull << 30;
	o->zero_pct = 90;
	o->runs = 5;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_size(optarg, &o->size) || o->size % PAGE) {
				fprintf(stderr, "zerobench: --size %s: need a positive multiple of 4096\n", optarg);
				return 2;
			}
			break;
		case 'z':
		case 'n':
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || *end || end == optarg || (c == 'z' ? v > 100 : v < 1 || v > MAX_RUNS)) {
				fprintf(stderr, "zerobench: %s %s: out of range\n",
					c == 'z' ? "--zero-percent" : "--runs", optarg);
				return 2;
			}
			*(c == 'z' ? &o->zero_pct : &o->runs) = (unsigned)v;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	double rd[MAX_RUNS], sc[MAX_RUNS], zr[MAX_RUNS], t, r, s, z;
	volatile uint64_t sink = 0;
	size_t zeros, found = 0;
	unsigned char *buf;
	struct opts o;
	unsigned i;
	int rc;

	rc = parse_args(argc, argv, &o);
	if (rc)
		return rc;
	buf = mmap(NULL, o.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		fprintf(stderr, "zerobench: cannot map %zu bytes: %s\n", o.size, strerror(errno));
		return 1;
	}
	zeros = fill(buf, o.size, o.zero_pct);

	/* One untimed pass each warms the TLB and page tables alike. */
	sink += read_sum((const uint64_t *)(void *)buf, o.size / 8);
	sink += scan_pages(buf, o.size);
	for (i = 0; i < o.runs; i++) {
		t = now_s();
		sink += read_sum((const uint64_t *)(void *)buf, o.size / 8);
		rd[i] = (double)o.size / (now_s() - t) / 1e9;
		t = now_s();
		found = scan_pages(buf, o.size);
		sc[i] = (double)o.size / (now_s() - t) / 1e9;
	}
	if (found != zeros) {
		fprintf(stderr, "zerobench: zero_is_zero found %zu zero pages, the buffer has %zu\n",
			found, zeros);
		return 1;
	}
	memset(buf, 0, o.size);
	for (i = 0; i < o.runs; i++) {
		t = now_s();
		found = scan_pages(buf, o.size);
		zr[i] = (double)o.size / (now_s() - t) / 1e9;
		if (found != o.size / PAGE) {
			fprintf(stderr, "zerobench: zero_is_zero missed zero pages in a zeroed buffer\n");
			return 1;
		}
	}
	r = bench_median(rd, o.runs);
	s = bench_median(sc, o.runs);
	z = bench_median(zr, o.runs);
	printf("size %zu\nzero_pages %zu\npages %zu\nruns %u\n", o.size, zeros, o.size / PAGE, o.runs);
	printf("read_gbs %.2f\nscan_gbs %.2f\nscan_allzero_gbs %.2f\n", r, s, z);
	printf("ratio_scan_read %.3f\nratio_allzero_read %.3f\n", s / r, z / r);
	printf("checksum %016" PRIx64 "\n", (uint64_t)sink);
	munmap(buf, o.size);
	return 0;
}
