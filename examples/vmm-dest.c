/* vmm-dest: how a VMM receives a guest with rdmig from its own poll loop.
 *
 *   vmm-dest HOST PORT [--mib N] [--postcopy [--guest-threads N] [--storm]
 *            [--page-sums FILE] [--recover]] [--shared] [--auth-key KEY]
 *
 * The guest's RAM is anonymous private memory, never touched before the
 * migration (so the library knows it is zero and skips zero pages), or
 * with --shared shared memory (a memfd, as memory-backend-memfd,share=on).
 * The device state arrives in the state callback, in order, whenever the
 * source sends it; its buffer is only valid during the call, so it is
 * copied.  Once rdmig_dest_process() returns 1 the source holds the
 * confirmation: the guest could start here.  Prints "listening PORT" when
 * ready, then one "digest" line per region for a test to compare with
 * vmm-source's.
 *
 * With --postcopy the VMM takes a switch to post-copy: when the
 * postcopy_start callback says so, its guest starts before every page is
 * here; a thread of the library catches each first touch of a page that is
 * missing and reads it from the source, while the loop below goes on as
 * before.  The "guest" is --guest-threads threads (1) that touch random
 * pages they never touched before, each read whole first (its checksum
 * kept: what the guest saw), then written (a marker that must survive:
 * a page the NIC wrote after the guest did would lose it), until every
 * page is in.  Each first touch of a page that was absent from the guest's
 * page tables is timed.  --page-sums writes the checksum of every page as
 * the guest first saw it (the ones it never touched, as they are at the
 * end), for a test to hold against vmm-source's.  --storm makes the vCPUs
 * pick pages still absent from the page tables while there are any, so
 * every touch is a fault: the worst a guest can do to the background pass.
 * It prints "postcopy started" when its guest starts.
 *
 * --recover keeps the listener for the source's resume: should the link
 * break after the switch, the guest runs on, a vCPU that touches a page
 * not here waits, and the migration goes on where it stopped once the
 * source reconnects (rdmig_dest_keep_listener()).  --auth-key takes a key
 * (the same as the source's) for authentication.  SIGUSR1 cancels the
 * migration, as an operator would (rdmig_dest_cancel()): after the switch
 * the guest cannot go on, and the VMM stops.
 *
 * A real destination also sets auth_key (anyone who can reach the port may
 * otherwise send it a guest), max_image, and an admit callback that creates
 * nothing for a connection before it is called; see rdmig(3). */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <rdmig.h>

#define PAGE 4096u
#define GUEST_THREADS_MAX 16

struct vmm;

struct vcpu {
	struct vmm *v;
	pthread_t th;
	unsigned idx;
	uint32_t rng;
	int pagemap;            /* /proc/self/pagemap: was a page absent? */
	uint64_t touches, absent;
	uint64_t *lat_ns;       /* first touches of absent pages, timed */
	size_t nlat, cap;
};

struct vmm {
	uint8_t *ram;
	uint64_t ram_len, npages;
	uint64_t state_len, state_sum;
	/* post-copy's guest */
	unsigned nthreads;
	struct vcpu cpu[GUEST_THREADS_MAX];
	bool started;
	atomic_bool stop;
	bool storm;
	atomic_uchar *visited;  /* per page: a vCPU took its first touch */
	uint64_t *seen_sum;     /* per page: its checksum at the first touch */
	const char *page_sums;
};

static int on_state(void *ctx, const void *data, size_t len, char *err, size_t errlen)
{
	struct vmm *v = ctx;
	const uint8_t *p = data;
	size_t i;

	(void)err;
	(void)errlen;
	for (i = 0; i < len; i++)
		v->state_sum = v->state_sum * 31 + p[i];
	v->state_len += len;
	return 0;
}

static uint64_t sum(const uint8_t *p, uint64_t n)
{
	uint64_t h = 1469598103934665603ull, i;

	for (i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* A page's checksum, a word at a time: cheap enough to take at every
 * first touch. */
static uint64_t page_sum(const uint8_t *p)
{
	uint64_t h = 1469598103934665603ull, w;
	unsigned i;

	for (i = 0; i < PAGE; i += 8) {
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 1099511628211ull;
	}
	return h;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

/* The library's warnings, into the VMM's own log (here: stderr); its
 * debug log too with RDMIG_EXAMPLE_DEBUG set in the environment. */
static void on_log(void *ctx, int level, const char *msg)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };

	(void)ctx;
	fprintf(stderr, "vmm-dest: %s: %s\n", names[level & 3], msg);
}

/* ---- post-copy's guest ------------------------------------------------------ */

static uint32_t next_rand(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* The marker a vCPU writes into the first 8 bytes of a page it touched. */
static uint64_t marker(uint64_t page)
{
	return page * 0x9e3779b97f4a7c15ull ^ 0x5eed5eed5eed5eedull;
}

/* Whether the page is in our page tables (pagemap bit 63): a touch of one
 * that is not faults (to the library, when it is missing). */
static bool present(const struct vcpu *c, const void *addr)
{
	uint64_t e = 0;

	if (pread(c->pagemap, &e, sizeof(e), (off_t)((uintptr_t)addr / PAGE * 8)) != sizeof(e))
		return true;
	return (e >> 63) & 1;
}

/* A vCPU: touches pages it never touched (nor any other vCPU), at random,
 * each read whole first (the guest sees the page as it came), then
 * written.  Until the loop says every page is in. */
static void *vcpu_run(void *arg)
{
	struct vcpu *c = arg;
	struct vmm *v = c->v;
	uint64_t page, t0, tries;
	volatile uint8_t *p;
	unsigned char no = 0;
	bool absent;

	while (!atomic_load(&v->stop)) {
		for (tries = 0; tries < 64; tries++) {
			page = next_rand(&c->rng) % v->npages;
			/* A storm goes for the pages not here yet, while it
			 * finds some. */
			if (v->storm && tries < 48 && present(c, v->ram + page * PAGE))
				continue;
			no = 0;
			if (atomic_compare_exchange_strong(&v->visited[page], &no, 1))
				break;
		}
		if (tries == 64)
			continue;
		p = v->ram + page * PAGE;
		absent = !present(c, (const void *)p);
		t0 = now_ns();
		(void)p[0];     /* the first touch: a fault, if the page is missing */
		t0 = now_ns() - t0;
		v->seen_sum[page] = page_sum((const uint8_t *)p);
		*(volatile uint64_t *)p = marker(page);
		c->touches++;
		if (absent) {
			c->absent++;
			if (c->nlat < c->cap)
				c->lat_ns[c->nlat++] = t0;
		}
	}
	return NULL;
}

/* rdmig calls this once the guest may run: its vCPUs start. */
static int on_postcopy(void *ctx, char *err, size_t errlen)
{
	struct vmm *v = ctx;
	unsigned i;
	int rc;

	/* A VMM that cannot start its guest fails the callback before any
	 * vCPU ran: the source is told its guest never ran and may resume
	 * it (rdmig_source_guest_never_ran()).  RDMIG_EXAMPLE_REFUSE_START
	 * plays that VMM. */
	if (getenv("RDMIG_EXAMPLE_REFUSE_START")) {
		snprintf(err, errlen, "the VMM refused to start its guest "
			 "(RDMIG_EXAMPLE_REFUSE_START)");
		return -EIO;
	}

	for (i = 0; i < v->nthreads; i++) {
		struct vcpu *c = &v->cpu[i];

		rc = pthread_create(&c->th, NULL, vcpu_run, c);
		if (rc) {
			snprintf(err, errlen, "cannot start vCPU %u: %s", i, strerror(rc));
			atomic_store(&v->stop, true);
			while (i--)
				pthread_join(v->cpu[i].th, NULL);
			return -rc;
		}
	}
	v->started = true;
	printf("postcopy started\n");
	fflush(stdout);
	return 0;
}

static int setup_guest(struct vmm *v)
{
	unsigned i;

	v->visited = calloc(v->npages, sizeof(*v->visited));
	v->seen_sum = calloc(v->npages, sizeof(*v->seen_sum));
	if (!v->visited || !v->seen_sum)
		return -ENOMEM;
	for (i = 0; i < v->nthreads; i++) {
		struct vcpu *c = &v->cpu[i];

		c->v = v;
		c->idx = i;
		c->rng = 0x9e3779b9u * (i + 1);
		c->cap = v->npages;
		c->lat_ns = calloc(c->cap, sizeof(*c->lat_ns));
		c->pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
		if (!c->lat_ns || c->pagemap < 0)
			return -ENOMEM;
	}
	return 0;
}

static void free_guest(struct vmm *v)
{
	unsigned i;

	for (i = 0; i < v->nthreads; i++) {
		free(v->cpu[i].lat_ns);
		if (v->cpu[i].pagemap > 0)
			close(v->cpu[i].pagemap);
	}
	free(v->visited);
	free(v->seen_sum);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The vCPUs stop; what they saw is checked and written. */
static int finish_guest(struct vmm *v)
{
	uint64_t touches = 0, absent = 0, lost = 0, page, n = 0, *all, i;
	FILE *f = NULL;
	unsigned k;
	int rc = 0;

	atomic_store(&v->stop, true);
	for (k = 0; v->started && k < v->nthreads; k++)
		pthread_join(v->cpu[k].th, NULL);
	for (k = 0; k < v->nthreads; k++) {
		touches += v->cpu[k].touches;
		absent += v->cpu[k].absent;
		n += v->cpu[k].nlat;
	}
	all = calloc(n ? n : 1, sizeof(*all));
	if (!all)
		return -ENOMEM;
	for (n = 0, k = 0; k < v->nthreads; k++)
		for (i = 0; i < v->cpu[k].nlat; i++)
			all[n++] = v->cpu[k].lat_ns[i];
	qsort(all, n, sizeof(*all), cmp_u64);
	/* A page first seen whole keeps the marker written after: a page
	 * placed after the guest wrote it would have lost it. */
	for (page = 0; page < v->npages; page++) {
		if (v->visited[page]) {
			if (*(const uint64_t *)(v->ram + page * PAGE) != marker(page))
				lost++;
		} else {
			v->seen_sum[page] = page_sum(v->ram + page * PAGE);
		}
	}
	printf("guest: %u vCPUs, %" PRIu64 " first touches, %" PRIu64 " of absent pages: "
	       "p50 %" PRIu64 " us p99 %" PRIu64 " us max %" PRIu64 " us; %" PRIu64
	       " writes lost\n", v->nthreads, touches, absent, n ? all[n / 2] / 1000 : 0,
	       n ? all[(n * 99) / 100] / 1000 : 0, n ? all[n - 1] / 1000 : 0, lost);
	free(all);
	if (v->page_sums) {
		f = fopen(v->page_sums, "we");
		if (!f || fwrite(v->seen_sum, sizeof(*v->seen_sum), v->npages, f) != v->npages)
			rc = -EIO;
		if (f && fclose(f) && !rc)
			rc = -EIO;
	}
	return rc ? rc : lost ? -EILSEQ : 0;
}

static void print_postcopy(const struct rdmig_stats *st)
{
	unsigned i;

	printf("postcopy: %" PRIu64 " pages lacked, %" PRIu64 " read on faults, %" PRIu64
	       " in the background, all in after %" PRIu64 " ms\n", st->postcopy_pages,
	       st->postcopy_fault_pages, st->postcopy_background_pages, st->postcopy_ms);
	printf("faults: %" PRIu64 " remote, mean %" PRIu64 " us, max %" PRIu64 " us, blocked %"
	       PRIu64 " ms, read round trip %" PRIu64 " us\n", st->postcopy_faults,
	       st->postcopy_latency_ns / 1000, st->postcopy_latency_max_ns / 1000,
	       st->postcopy_blocked_ms, st->postcopy_read_ns / 1000);
	printf("latency-dist:");
	for (i = 0; i < RDMIG_LATENCY_BUCKETS; i++)
		printf(" %" PRIu64, st->postcopy_latency_dist[i]);
	printf("\n");
}

/* ---- the loop ------------------------------------------------------------------ */

/* The operator's cancel (SIGUSR1), seen by the loop. */
static volatile sig_atomic_t cancel_asked;

static void on_usr1(int sig)
{
	(void)sig;
	cancel_asked = 1;
}

/* Waits in the loop, not in the library, for a request it can accept: a
 * malformed or keyless one is turned away and the next one awaited. */
static int accept_one(struct rdmig_dest *d, struct rdmig_listener *l)
{
	struct pollfd pfd = { .fd = rdmig_listener_fd(l), .events = POLLIN };
	int rc;

	for (;;) {
		/* The VMM's own loop would watch its devices here too. */
		if (poll(&pfd, 1, 60000) == 0)
			return -ETIMEDOUT;
		rc = rdmig_dest_accept(d, l, 0);
		if (rc == -EAGAIN)
			continue;
		if (rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EACCES) {
			fprintf(stderr, "vmm-dest: turned away a source: %s\n",
				rdmig_dest_error(d));
			continue;
		}
		return rc;
	}
}

/* rdmig(3), "The event loop": wait for the one fd or the timeout, then
 * process; the VMM's own fds would be in the same poll set. */
static int serve(struct rdmig_dest *d, struct rdmig_listener *l)
{
	struct pollfd pfd = { .fd = rdmig_dest_fd(d), .events = POLLIN };
	int rc;

	rc = accept_one(d, l);
	while (!rc) {
		poll(&pfd, 1, rdmig_dest_timeout(d));
		if (cancel_asked) {
			cancel_asked = 0;
			rdmig_dest_cancel(d, "the operator cancelled");
		}
		rc = rdmig_dest_process(d);
	}
	return rc < 0 ? rc : 0;
}

static int map_ram(struct vmm *v, int shared)
{
	int fd = -1;

	if (shared) {
		fd = memfd_create("guest-ram", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, (off_t)v->ram_len))
			return -errno;
	}
	v->ram = mmap(NULL, v->ram_len, PROT_READ | PROT_WRITE,
		      shared ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
	if (fd >= 0)
		close(fd);
	return v->ram == MAP_FAILED ? -ENOMEM : 0;
}

int main(int argc, char **argv)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	struct rdmig_listener *l = NULL;
	struct rdmig_dest *d = NULL;
	struct rdmig_config cfg;
	struct vmm v = { .nthreads = 1 };
	char err[512];
	uint64_t mib = 64;
	int i, rc, postcopy = 0, shared = 0, recover = 0;
	const char *key = NULL;

	if (argc < 3) {
		fprintf(stderr, "usage: vmm-dest HOST PORT [--mib N] [--postcopy [--guest-threads N]\n"
			"                [--storm] [--page-sums FILE] [--recover]] [--shared]\n"
			"                [--auth-key KEY]\n");
		return 2;
	}
	for (i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--mib") && i + 1 < argc) {
			mib = strtoull(argv[++i], NULL, 10);
		} else if (!strcmp(argv[i], "--postcopy")) {
			postcopy = 1;
		} else if (!strcmp(argv[i], "--shared")) {
			shared = 1;
		} else if (!strcmp(argv[i], "--recover")) {
			recover = 1;
		} else if (!strcmp(argv[i], "--auth-key") && i + 1 < argc) {
			key = argv[++i];
		} else if (!strcmp(argv[i], "--storm")) {
			v.storm = true;
		} else if (!strcmp(argv[i], "--guest-threads") && i + 1 < argc) {
			v.nthreads = (unsigned)atoi(argv[++i]);
			if (v.nthreads < 1 || v.nthreads > GUEST_THREADS_MAX) {
				fprintf(stderr, "vmm-dest: 1..%d guest threads\n", GUEST_THREADS_MAX);
				return 2;
			}
		} else if (!strcmp(argv[i], "--page-sums") && i + 1 < argc) {
			v.page_sums = argv[++i];
		} else {
			fprintf(stderr, "vmm-dest: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	v.ram_len = mib << 20;
	v.npages = v.ram_len / PAGE;
	signal(SIGUSR1, on_usr1);
	if (map_ram(&v, shared) || (postcopy && setup_guest(&v)))
		return 1;
	rdmig_config_init(&cfg);
	cfg.state = on_state;
	cfg.state_ctx = &v;
	cfg.timeout_ms = 10000;
	cfg.postcopy = postcopy;
	cfg.postcopy_start = on_postcopy;
	cfg.postcopy_ctx = &v;
	cfg.auth_key = key;
	cfg.auth_key_len = key ? strlen(key) : 0;
	cfg.log = on_log;
	cfg.log_level = getenv("RDMIG_EXAMPLE_DEBUG") ? RDMIG_LOG_DEBUG :
			getenv("RDMIG_EXAMPLE_INFO") ? RDMIG_LOG_INFO : RDMIG_LOG_WARN;
	rc = rdmig_listener_create(&l, argv[1], argv[2], err, sizeof(err));
	if (rc) {
		fprintf(stderr, "vmm-dest: %s\n", err);
		return 1;
	}
	printf("listening %d\n", rdmig_listener_port(l));
	fflush(stdout);
	rc = rdmig_dest_create(&d, &cfg);
	if (!rc)
		rc = rdmig_dest_add_block(d, "pc.ram", v.ram, v.ram_len, 1) < 0 ? -EINVAL : 0;
	/* The listener stays until the handle is destroyed, below. */
	if (!rc && recover)
		rc = rdmig_dest_keep_listener(d, l);
	if (!rc)
		rc = serve(d, l);
	if (rc) {
		const char *why = d ? rdmig_dest_error(d) : "";

		fprintf(stderr, "vmm-dest: %s\n", why[0] ? why : strerror(-rc));
		/* The guest ran and its memory is incomplete: it must not go
		 * on (a vCPU on a missing page waits in the kernel, and
		 * destroying the handle would let it see zeros), so the whole
		 * VMM stops here. */
		if (v.started) {
			fflush(stdout);
			_exit(1);
		}
	} else {
		rdmig_dest_stats(d, &st);
		printf("received %" PRIu64 " bytes in %" PRIu64 " iterations, %" PRIu64
		       " state bytes, %.1f Mbit/s\n", st.normal_bytes, st.iterations,
		       v.state_len, st.mbps);
		if (postcopy) {
			print_postcopy(&st);
			rc = finish_guest(&v);
			if (rc)
				fprintf(stderr, "vmm-dest: the guest's view: %s\n", strerror(-rc));
		}
		printf("digest ram %016" PRIx64 "\n", sum(v.ram, v.ram_len));
		printf("digest state %016" PRIx64 "\n", v.state_sum);
	}
	rdmig_dest_destroy(d);
	rdmig_listener_destroy(l);
	if (postcopy)
		free_guest(&v);
	return rc ? 1 : 0;
}
