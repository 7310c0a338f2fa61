/* api_peer: drives librdmig through its public API only, one side per
 * process, with RAM blocks backed by files the test compares afterwards.
 *
 *   api_peer dest ADDR --dir D [--block NAME:SIZE]... [--map] [--state-out F]
 *   api_peer src ADDR PORT --dir D --block NAME:SIZE[:KIND]... [--pin-all]
 *            [--iterations N] [--redirty PAGES] [--state-in F] [--forever]
 *            [--page BYTES]
 *   common:  [--timeout MS] [--chunk BYTES] [--cap BYTES] [--seed N]
 *            [--key STRING] [--verify]; dest only: [--corrupt-on-state]
 *
 * Block files are D/src-NAME and D/dst-NAME.  KIND is random (default),
 * zero (all zero) or sparse (one random page in 64, the rest zero).  The
 * destination prints "port N" once listening; both sides print "stat KEY V"
 * lines from the library's own counters and "error: MSG" on failure.  The
 * source times each iteration ("iteration N done in MS ms") and the state
 * ("time state BYTES bytes MS ms"), for make bench's state row. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdmig.h"
#include "testutil.h"

#define PAGE 4096u
#define MAX_BLOCKS 8

struct blockspec {
	char name[65];
	uint64_t size;
	char kind[16];
	void *host;
};

struct opts {
	const char *role, *addr, *port, *dir, *state_in, *state_out;
	struct blockspec blocks[MAX_BLOCKS];
	int nblocks, pin_all, map, forever, iterations, timeout_ms, verify, corrupt;
	const char *key;
	uint64_t redirty, chunk, cap, seed;
	uint64_t page;          /* the source's page size (dirty unit), 4 KiB */
};

/* Maps the file at an address aligned to @align: a block's host address
 * starts a page of its page size, which may be a huge page's. */
static void *map_file(const char *dir, const char *prefix, const char *name,
		      uint64_t size, int create, uint64_t align)
{
	char path[1024];
	uint8_t *area, *at;
	uint64_t span;
	void *p;
	int fd;

	snprintf(path, sizeof(path), "%s/%s-%s", dir, prefix, name);
	fd = open(path, O_RDWR | (create ? O_CREAT | O_TRUNC : 0), 0644);
	if (fd < 0 || ftruncate(fd, (off_t)size)) {
		fprintf(stderr, "error: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	area = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED) {
		fprintf(stderr, "error: mmap of %" PRIu64 " bytes: %s\n", size + align,
			strerror(errno));
		exit(1);
	}
	at = (uint8_t *)(((uintptr_t)area + align - 1) & ~(uintptr_t)(align - 1));
	p = mmap(at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	close(fd);
	/* The reservation around it goes back. */
	if (at > area)
		munmap(area, (size_t)(at - area));
	span = (size + PAGE - 1) & ~(uint64_t)(PAGE - 1);
	if (area + size + align > at + span)
		munmap(at + span, (size_t)(area + size + align - (at + span)));
	if (p == MAP_FAILED) {
		fprintf(stderr, "error: mmap %s: %s\n", path, strerror(errno));
		exit(1);
	}
	return p;
}

static void fill(struct blockspec *b, uint64_t seed)
{
	uint64_t pg, npages = (b->size + PAGE - 1) / PAGE;

	if (!strcmp(b->kind, "zero"))
		return;
	if (!strcmp(b->kind, "sparse")) {
		for (pg = 0; pg < npages; pg += 64) {
			uint64_t len = b->size - pg * PAGE < PAGE ? b->size - pg * PAGE : PAGE;

			tu_fill_random((uint8_t *)b->host + pg * PAGE, len, seed + pg);
		}
		return;
	}
	tu_fill_random(b->host, b->size, seed);
}

/* Rewrites @n random pages of random blocks (some with zeros, so pages that
 * turn zero later are exercised) and marks them dirty. */
static int redirty(struct rdmig_source *s, struct opts *o, uint64_t n, uint64_t seed)
{
	uint64_t x = seed, i;
	int rc;

	for (i = 0; i < n; i++) {
		struct blockspec *b;
		uint64_t pg, off, len;

		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		b = &o->blocks[(x >> 33) % (uint64_t)o->nblocks];
		pg = (x >> 17) % ((b->size + PAGE - 1) / PAGE);
		off = pg * PAGE;
		len = b->size - off < PAGE ? b->size - off : PAGE;
		if (i % 5 == 0)
			memset((uint8_t *)b->host + off, 0, len);
		else
			tu_fill_random((uint8_t *)b->host + off, len, x);
		rc = rdmig_source_mark_dirty(s, (unsigned)(b - o->blocks), off, len);
		if (rc)
			return rc;
	}
	return 0;
}

static void print_stats(const struct rdmig_stats *st)
{
	printf("stat total %" PRIu64 "\n", st->total);
	printf("stat normal_bytes %" PRIu64 "\n", st->normal_bytes);
	printf("stat normal_pages %" PRIu64 "\n", st->normal_pages);
	printf("stat zero_pages %" PRIu64 "\n", st->zero_pages);
	printf("stat zero_pages_skipped %" PRIu64 "\n", st->zero_pages_skipped);
	printf("stat writes %" PRIu64 "\n", st->writes);
	printf("stat iterations %" PRIu64 "\n", st->iterations);
	printf("stat register_requests %" PRIu64 "\n", st->register_requests);
	printf("stat chunks_registered %" PRIu64 "\n", st->chunks_registered);
	printf("stat state_bytes %" PRIu64 "\n", st->state_bytes);
	printf("stat pinned_peak %" PRIu64 "\n", st->pinned_peak);
	printf("stat pinned_bytes %" PRIu64 "\n", st->pinned_bytes);
	printf("stat ctrl_sent %" PRIu64 "\n", st->ctrl_sent);
	printf("stat setup_time_ms %" PRIu64 "\n", st->setup_time_ms);
	printf("stat mbps %.1f\n", st->mbps);
}

static void config(struct rdmig_config *cfg, const struct opts *o)
{
	rdmig_config_init(cfg);
	cfg->pin_all = o->pin_all;
	if (o->timeout_ms)
		cfg->timeout_ms = o->timeout_ms;
	if (o->chunk)
		cfg->chunk_size = (uint32_t)o->chunk;
	if (o->cap)
		cfg->pinned_cap = o->cap;
	if (o->key) {
		cfg->auth_key = o->key;
		cfg->auth_key_len = strlen(o->key);
	}
	cfg->verify = o->verify;
}

/* Prints how long sending took, for make bench's state row. */
static int send_state(struct rdmig_source *s, const char *path)
{
	size_t len;
	char *data = tu_slurp(path, &len);
	uint64_t t0;
	int rc;

	if (!data) {
		fprintf(stderr, "error: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	t0 = tu_now_ms();
	rc = rdmig_source_send_state(s, data, len);
	if (!rc)
		printf("time state %zu bytes %" PRIu64 " ms\n", len, tu_now_ms() - t0);
	free(data);
	return rc;
}

static int run_src(struct opts *o)
{
	struct rdmig_source *s;
	struct rdmig_config cfg;
	struct rdmig_stats st = { .size = sizeof(st) };
	int i, rc;

	config(&cfg, o);
	rc = rdmig_source_create(&s, &cfg);
	for (i = 0; !rc && i < o->nblocks; i++) {
		struct blockspec *b = &o->blocks[i];

		b->host = map_file(o->dir, "src", b->name, b->size, 1, o->page);
		fill(b, o->seed + (uint64_t)i * 1000003);
		rc = rdmig_source_add_block(s, b->name, b->host, b->size, (uint32_t)o->page);
		rc = rc < 0 ? rc : 0;
	}
	if (!rc)
		rc = rdmig_source_connect(s, o->addr, o->port);
	if (!rc) {
		printf("connected\n");
		fflush(stdout);
		rc = rdmig_source_mark_all(s);
	}
	for (i = 0; !rc && (i < o->iterations || o->forever); i++) {
		uint64_t t0 = tu_now_ms();

		rc = rdmig_source_iterate(s);
		if (!rc) {
			printf("iteration %d done in %" PRIu64 " ms\n", i + 1, tu_now_ms() - t0);
			fflush(stdout);
		}
		if (!rc && (i + 1 < o->iterations || o->forever))
			rc = o->forever ? rdmig_source_mark_all(s) :
			     redirty(s, o, o->redirty, o->seed * 31 + (uint64_t)i);
	}
	if (!rc && o->state_in)
		rc = send_state(s, o->state_in);
	if (!rc)
		rc = rdmig_source_complete(s);
	rdmig_source_stats(s, &st);
	print_stats(&st);
	if (rc)
		fprintf(stderr, "error: %s\n", rdmig_source_error(s));
	else
		printf("completed\n");
	rdmig_source_destroy(s);
	return rc ? 1 : 0;
}

/* The state is kept in memory as it comes and written to --state-out at
 * the end, as a VMM takes it into its devices: the callback's cost is one
 * copy, not a write(2) per stdio buffer, so make bench's state row times
 * the transport. */
#define STATE_KEEP_MAX (1ull << 30)

struct dest_ctx {
	struct opts *o;
	uint8_t *state;         /* NULL: no --state-out */
	uint64_t state_len;
};

static int map_cb(void *ctx, const char *name, uint64_t length, uint32_t page_size,
		  void **host, int *zeroed, char *errbuf, size_t errlen)
{
	struct dest_ctx *dc = ctx;

	(void)page_size;
	(void)errbuf;
	(void)errlen;
	*host = map_file(dc->o->dir, "dst", name, length, 1, PAGE);
	*zeroed = 1;
	return 0;
}

static int state_cb(void *ctx, const void *data, size_t len, char *err, size_t errlen)
{
	struct dest_ctx *dc = ctx;

	if (!dc->state || len > STATE_KEEP_MAX - dc->state_len) {
		snprintf(err, errlen, dc->state ? "more state than %llu bytes" :
			 "no --state-out for the state", (unsigned long long)STATE_KEEP_MAX);
		return -EIO;
	}
	memcpy(dc->state + dc->state_len, data, len);
	dc->state_len += len;
	/* Simulates memory going bad behind the transfer's back. */
	if (dc->o->corrupt && dc->o->nblocks) {
		((volatile uint8_t *)dc->o->blocks[0].host)[12345] ^= 0x5a;
		dc->o->corrupt = 0;
	}
	return 0;
}

static int run_dest(struct opts *o)
{
	struct dest_ctx dc = { .o = o };
	struct rdmig_listener *l = NULL;
	struct rdmig_dest *d = NULL;
	struct rdmig_config cfg;
	struct rdmig_stats st = { .size = sizeof(st) };
	char err[256] = "";
	int i, rc;

	config(&cfg, o);
	cfg.state = state_cb;
	cfg.state_ctx = &dc;
	if (o->map) {
		cfg.map_block = map_cb;
		cfg.map_ctx = &dc;
	}
	if (o->state_out) {
		dc.state = mmap(NULL, STATE_KEEP_MAX, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (dc.state == MAP_FAILED)
			dc.state = NULL;
	}
	rc = rdmig_listener_create(&l, o->addr, "0", err, sizeof(err));
	if (rc) {
		fprintf(stderr, "error: %s\n", err);
		return 1;
	}
	printf("port %d\n", rdmig_listener_port(l));
	fflush(stdout);
	rc = rdmig_dest_create(&d, &cfg);
	for (i = 0; !rc && i < o->nblocks; i++) {
		struct blockspec *b = &o->blocks[i];

		b->host = map_file(o->dir, "dst", b->name, b->size, 1, PAGE);
		rc = rdmig_dest_add_block(d, b->name, b->host, b->size, 1);
		rc = rc < 0 ? rc : 0;
	}
	if (!rc)
		rc = rdmig_dest_accept(d, l, o->timeout_ms ? o->timeout_ms : 30000);
	if (!rc) {
		printf("accepted\n");
		fflush(stdout);
		rc = rdmig_dest_run(d);
	}
	if (dc.state) {
		FILE *f = fopen(o->state_out, "wb");

		if (!f || fwrite(dc.state, 1, dc.state_len, f) != dc.state_len) {
			fprintf(stderr, "error: cannot write %s: %s\n", o->state_out,
				strerror(errno));
			rc = rc ? rc : -EIO;
		}
		if (f)
			fclose(f);
		munmap(dc.state, STATE_KEEP_MAX);
	}
	rdmig_dest_stats(d, &st);
	print_stats(&st);
	if (rc)
		fprintf(stderr, "error: %s\n", rdmig_dest_error(d));
	else
		printf("completed\n");
	rdmig_dest_destroy(d);
	rdmig_listener_destroy(l);
	return rc ? 1 : 0;
}

static void parse_block(struct opts *o, const char *spec)
{
	struct blockspec *b = &o->blocks[o->nblocks++];
	char *c1, *c2, tmp[128];

	snprintf(tmp, sizeof(tmp), "%s", spec);
	c1 = strchr(tmp, ':');
	if (!c1 || o->nblocks > MAX_BLOCKS) {
		fprintf(stderr, "error: bad --block %s\n", spec);
		exit(2);
	}
	*c1++ = '\0';
	c2 = strchr(c1, ':');
	if (c2)
		*c2++ = '\0';
	snprintf(b->name, sizeof(b->name), "%.64s", tmp);
	b->size = strtoull(c1, NULL, 0);
	snprintf(b->kind, sizeof(b->kind), "%s", c2 ? c2 : "random");
}

int main(int argc, char **argv)
{
	struct opts o = { .iterations = 1, .seed = 42, .page = PAGE };
	int i, pos = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--dir") && v)
			o.dir = argv[++i];
		else if (!strcmp(a, "--block") && v)
			parse_block(&o, argv[++i]);
		else if (!strcmp(a, "--pin-all"))
			o.pin_all = 1;
		else if (!strcmp(a, "--map"))
			o.map = 1;
		else if (!strcmp(a, "--verify"))
			o.verify = 1;
		else if (!strcmp(a, "--corrupt-on-state"))
			o.corrupt = 1;
		else if (!strcmp(a, "--key") && v)
			o.key = argv[++i];
		else if (!strcmp(a, "--forever"))
			o.forever = 1;
		else if (!strcmp(a, "--iterations") && v)
			o.iterations = atoi(argv[++i]);
		else if (!strcmp(a, "--redirty") && v)
			o.redirty = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(a, "--timeout") && v)
			o.timeout_ms = atoi(argv[++i]);
		else if (!strcmp(a, "--chunk") && v)
			o.chunk = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(a, "--page") && v)
			o.page = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(a, "--cap") && v)
			o.cap = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(a, "--seed") && v)
			o.seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(a, "--state-in") && v)
			o.state_in = argv[++i];
		else if (!strcmp(a, "--state-out") && v)
			o.state_out = argv[++i];
		else if (pos == 0)
			o.role = a, pos++;
		else if (pos == 1)
			o.addr = a, pos++;
		else if (pos == 2)
			o.port = a, pos++;
	}
	if (o.page < PAGE || o.page > (1u << 30) || (o.page & (o.page - 1))) {
		fprintf(stderr, "error: --page %" PRIu64 " is not a power of two from 4096 to "
			"1 GiB\n", o.page);
		return 2;
	}
	if (o.role && o.addr && o.dir && !strcmp(o.role, "dest"))
		return run_dest(&o);
	if (o.role && o.addr && o.port && o.dir && !strcmp(o.role, "src"))
		return run_src(&o);
	fprintf(stderr, "usage: see the comment at the top of api_peer.c\n");
	return 2;
}
