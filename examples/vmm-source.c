/* vmm-source: how a VMM drives an rdmig source from its own poll loop.
 *
 *   vmm-source HOST PORT [--mib N] [--pin-all] [--budget BYTES]
 *              [--postcopy [--rounds N] [--page-sums FILE]] [--shared]
 *              [--auth-key KEY]
 *
 * The "guest" is N MiB (64) of anonymous private memory, the way QEMU
 * allocates guest RAM: some pages hold a pattern, some are never touched.
 * The VMM connects, sends a device-state "setup section" before the first
 * iteration, runs a first iteration while its guest keeps writing (dirty
 * pages are reported as a KVM-style bitmap), sends more device state
 * between iterations, then "pauses the guest", runs the last iteration,
 * sends the final device state and completes, with verify on.  Every call
 * into the library is non-blocking: the loop waits in poll() on the
 * library's fd, and each rdmig_source_step() gets this loop's own budget.
 *
 * It prints the longest rdmig_source_step() call it saw (wall clock and
 * CPU time), the statistics,
 * and one "digest" line per region (RAM, state) for a test to compare with
 * vmm-dest's.  Exit status 0 on success.
 *
 * --postcopy switches to post-copy after --rounds pre-copy rounds (1; 0
 * switches at once) instead of completing: with the guest paused and the
 * final device state sent, rdmig_source_postcopy() hands the guest to the
 * destination, which reads what it lacks from this side's memory.  Verify
 * is off then (the destination's guest changes the image before it is
 * whole): --page-sums writes a checksum of every page as of the pause,
 * for a test to hold vmm-dest's against.  --shared puts the guest's RAM in
 * shared memory (a memfd) instead of private anonymous memory.  Should the
 * link break once the destination runs the guest, and the destination
 * offers recovery, the library keeps this memory and reconnects by itself:
 * rdmig_source_postcopy() returns once the post-copy ended, however many
 * times it paused.  --auth-key takes a key (the same as the
 * destination's).  SIGUSR1 cancels the migration, as an operator would
 * (rdmig_source_cancel()). */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <rdmig.h>

#define PAGE 4096u
#define BITS (sizeof(unsigned long) * 8)

struct vmm {
	struct rdmig_source *s;
	uint8_t *ram;
	uint64_t ram_len, npages;
	unsigned long *dirty;   /* the "dirty log", one bit per page */
	uint64_t budget;
	uint64_t longest_us, steps;
	uint64_t longest_cpu_us; /* CPU time of that longest call */
	uint64_t max_cpu_us;     /* the most CPU time any call took */
	uint64_t slow_steps;    /* longer than twice the 10 ms step budget */
	uint64_t state_sum;
	uint32_t rng;
	int postcopy, rounds;
	const char *page_sums;
	const char *key;
};

static uint64_t clock_us(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static uint32_t next_rand(struct vmm *v)
{
	v->rng ^= v->rng << 13;
	v->rng ^= v->rng >> 17;
	v->rng ^= v->rng << 5;
	return v->rng;
}

/* The library's warnings, into the VMM's own log (here: stderr); its
 * debug log too with RDMIG_EXAMPLE_DEBUG set in the environment. */
static void on_log(void *ctx, int level, const char *msg)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };

	(void)ctx;
	fprintf(stderr, "vmm-source: %s: %s\n", names[level & 3], msg);
}

/* The guest writes a page: a pattern, and the page goes into the log. */
static void guest_write(struct vmm *v, uint64_t page)
{
	uint64_t *p = (uint64_t *)(v->ram + page * PAGE);
	unsigned i;

	for (i = 0; i < PAGE / 8; i++)
		p[i] = page * 0x9e3779b97f4a7c15ull + i + next_rand(v);
	v->dirty[page / BITS] |= 1ul << (page % BITS);
}

/* The operator's cancel (SIGUSR1), seen by the loop. */
static volatile sig_atomic_t cancel_asked;

static void on_usr1(int sig)
{
	(void)sig;
	cancel_asked = 1;
}

/* One step of the library, timed; then wait on its fd.  The thread's CPU
 * time beside the wall clock tells a step that worked long from one whose
 * thread was off the CPU (another process, the kernel's RDMA work). */
static int drive(struct vmm *v)
{
	struct pollfd pfd = { .fd = rdmig_source_fd(v->s), .events = POLLIN };
	uint64_t t0 = clock_us(CLOCK_MONOTONIC), c0 = clock_us(CLOCK_THREAD_CPUTIME_ID);
	int rc;

	if (cancel_asked) {
		cancel_asked = 0;
		rdmig_source_cancel(v->s);
	}
	rc = rdmig_source_step(v->s, v->budget, 0);
	uint64_t took = clock_us(CLOCK_MONOTONIC) - t0;
	uint64_t cpu = clock_us(CLOCK_THREAD_CPUTIME_ID) - c0;

	v->steps++;
	if (took > v->longest_us) {
		v->longest_us = took;
		v->longest_cpu_us = cpu;
	}
	if (cpu > v->max_cpu_us)
		v->max_cpu_us = cpu;
	if (took > 2 * 10000)
		v->slow_steps++;
	if (rc == 0)
		poll(&pfd, 1, rdmig_source_timeout(v->s));
	return rc;
}

static int run_until_done(struct vmm *v, int rc, int (*between)(struct vmm *))
{
	while (rc == 0) {
		rc = drive(v);
		if (rc == 0 && between)
			rc = between(v);
	}
	return rc < 0 ? rc : 0;
}

/* Device state goes in pieces as the control channel takes them. */
static int send_state(struct vmm *v, const char *what, size_t len)
{
	uint8_t *blob = malloc(len);
	size_t off = 0, i;
	ssize_t n;
	int rc = 0;

	if (!blob)
		return -ENOMEM;
	for (i = 0; i < len; i++) {
		blob[i] = (uint8_t)(next_rand(v) >> 8);
		v->state_sum = v->state_sum * 31 + blob[i];
	}
	while (off < len && !rc) {
		n = rdmig_source_write_state(v->s, blob + off, len - off);
		if (n < 0)
			rc = (int)n;
		else if (n == 0)
			rc = drive(v) < 0 ? -EIO : 0;
		else
			off += (size_t)n;
	}
	free(blob);
	printf("state %s: %zu bytes\n", what, len);
	return rc;
}

/* While the first iteration is in flight the guest runs on: it rewrites
 * pages, and writes pages it never touched before (every fourth), which
 * were registered while they were still unpopulated. */
static int guest_runs(struct vmm *v)
{
	unsigned i;

	for (i = 0; i < 4; i++) {
		guest_write(v, next_rand(v) % v->npages);
		guest_write(v, next_rand(v) % (v->npages / 4) * 4);
	}
	return 0;
}

static int hand_dirty_log(struct vmm *v)
{
	int rc = rdmig_source_mark_dirty_bitmap(v->s, 0, v->dirty, 0, v->npages);

	memset(v->dirty, 0, (v->npages + BITS - 1) / BITS * sizeof(*v->dirty));
	return rc;
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

/* One checksum per page as of the pause: what the destination's guest
 * must find in each page, whichever way it came. */
static int write_page_sums(const struct vmm *v)
{
	FILE *f = fopen(v->page_sums, "we");
	uint64_t page, h;
	int rc = 0;

	if (!f)
		return -errno;
	for (page = 0; page < v->npages && !rc; page++) {
		h = page_sum(v->ram + page * PAGE);
		if (fwrite(&h, sizeof(h), 1, f) != 1)
			rc = -EIO;
	}
	if (fclose(f) && !rc)
		rc = -EIO;
	return rc;
}

/* Connects, sends a setup section of device state, and marks every page
 * for the first iteration (the dirty log restarts). */
static int start(struct vmm *v, const char *host, const char *port)
{
	int rc = run_until_done(v, rdmig_source_connect_async(v->s, host, port), NULL);

	if (!rc)
		rc = send_state(v, "setup", 100000);
	if (!rc) {
		rc = rdmig_source_mark_all(v->s);
		memset(v->dirty, 0, (v->npages + BITS - 1) / BITS * sizeof(*v->dirty));
	}
	return rc;
}

/* Pre-copy rounds while the guest runs, then the switch: the guest pauses,
 * the last of its dirty log and its device state go, and the destination
 * takes the guest over, reading what it lacks from here. */
static int migrate_postcopy(struct vmm *v, const char *host, const char *port)
{
	int rc = start(v, host, port), r;

	for (r = 0; !rc && r < v->rounds; r++) {
		rc = run_until_done(v, rdmig_source_iterate_async(v->s), guest_runs);
		if (!rc)
			rc = hand_dirty_log(v);
	}
	/* The guest pauses: what it wrote since the last round is what the
	 * destination lacks, with what was never sent. */
	if (!rc)
		rc = hand_dirty_log(v);
	if (!rc && v->page_sums)
		rc = write_page_sums(v);
	if (!rc)
		rc = send_state(v, "final", 200000);
	if (!rc)
		rc = run_until_done(v, rdmig_source_postcopy_async(v->s), NULL);
	return rc;
}

static int migrate(struct vmm *v, const char *host, const char *port)
{
	int rc = start(v, host, port);

	if (!rc)
		rc = run_until_done(v, rdmig_source_iterate_async(v->s), guest_runs);
	if (!rc)
		rc = send_state(v, "pre-copy", 50000);
	/* The guest pauses: its last writes go in the final round. */
	if (!rc)
		rc = hand_dirty_log(v);
	if (!rc)
		rc = run_until_done(v, rdmig_source_iterate_async(v->s), NULL);
	if (!rc)
		rc = send_state(v, "final", 200000);
	if (!rc)
		rc = run_until_done(v, rdmig_source_complete_async(v->s), NULL);
	return rc;
}

static int setup(struct vmm *v, uint64_t mib, int pin_all, int shared)
{
	struct rdmig_config cfg;
	uint64_t page;
	int fd = -1;

	v->ram_len = mib << 20;
	v->npages = v->ram_len / PAGE;
	v->rng = 2463534242u;
	/* Guest RAM as QEMU allocates it: private and anonymous, or shared
	 * (memory-backend-memfd,share=on). */
	if (shared) {
		fd = memfd_create("guest-ram", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, (off_t)v->ram_len))
			return -errno;
	}
	v->ram = mmap(NULL, v->ram_len, PROT_READ | PROT_WRITE,
		      shared ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
	if (fd >= 0)
		close(fd);
	v->dirty = calloc((v->npages + BITS - 1) / BITS, sizeof(*v->dirty));
	if (v->ram == MAP_FAILED || !v->dirty)
		return -ENOMEM;
	/* Three pages in four hold data; the rest were never touched. */
	for (page = 0; page < v->npages; page++)
		if (page % 4)
			guest_write(v, page);
	rdmig_config_init(&cfg);
	/* Post-copy's image is whole only on the destination, whose guest
	 * changes it meanwhile: nothing to verify. */
	cfg.verify = !v->postcopy;
	cfg.postcopy = v->postcopy;
	cfg.auth_key = v->key;
	cfg.auth_key_len = v->key ? strlen(v->key) : 0;
	cfg.pin_all = pin_all;
	cfg.log = on_log;
	cfg.log_level = getenv("RDMIG_EXAMPLE_DEBUG") ? RDMIG_LOG_DEBUG :
			getenv("RDMIG_EXAMPLE_INFO") ? RDMIG_LOG_INFO : RDMIG_LOG_WARN;
	cfg.timeout_ms = 10000;
	if (rdmig_source_create(&v->s, &cfg))
		return -EINVAL;
	return rdmig_source_add_block(v->s, "pc.ram", v->ram, v->ram_len, PAGE) < 0 ? -EINVAL : 0;
}

int main(int argc, char **argv)
{
	struct vmm v = { .budget = 4u << 20 };
	struct rdmig_stats st = { .size = sizeof(st) };
	uint64_t mib = 64;
	int pin_all = 0, shared = 0, i, rc;

	v.rounds = 1;
	if (argc < 3) {
		fprintf(stderr, "usage: vmm-source HOST PORT [--mib N] [--pin-all] [--budget BYTES]\n"
			"                  [--postcopy [--rounds N] [--page-sums FILE]] [--shared]\n"
			"                  [--auth-key KEY]\n");
		return 2;
	}
	for (i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--pin-all"))
			pin_all = 1;
		else if (!strcmp(argv[i], "--postcopy"))
			v.postcopy = 1;
		else if (!strcmp(argv[i], "--shared"))
			shared = 1;
		else if (!strcmp(argv[i], "--auth-key") && i + 1 < argc)
			v.key = argv[++i];
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			v.rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--page-sums") && i + 1 < argc)
			v.page_sums = argv[++i];
		else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			mib = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--budget") && i + 1 < argc)
			v.budget = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "vmm-source: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	signal(SIGUSR1, on_usr1);
	rc = setup(&v, mib, pin_all, shared);
	if (!rc)
		rc = v.postcopy ? migrate_postcopy(&v, argv[1], argv[2]) :
				  migrate(&v, argv[1], argv[2]);
	if (rc) {
		fprintf(stderr, "vmm-source: %s\n", v.s ? rdmig_source_error(v.s) : strerror(-rc));
		/* After a switch the guest stays paused here unless the
		 * destination said its own never ran: then it resumes here. */
		if (v.postcopy && v.s && rdmig_source_guest_never_ran(v.s))
			fprintf(stderr, "vmm-source: the destination's guest never ran: "
				"the guest resumes here\n");
		rdmig_source_destroy(v.s);
		free(v.dirty);
		return 1;
	}
	rdmig_source_stats(v.s, &st);
	printf("longest step: %" PRIu64 " us of %" PRIu64 " steps\n", v.longest_us, v.steps);
	printf("steps over 20 ms: %" PRIu64 "\n", v.slow_steps);
	printf("step cpu: %" PRIu64 " us in the longest step, %" PRIu64 " us at most\n",
	       v.longest_cpu_us, v.max_cpu_us);
	printf("iterations %" PRIu64 ", %" PRIu64 " bytes written, %" PRIu64 " zero pages, "
	       "first write after %" PRIu64 " ms\n", st.iterations, st.normal_bytes,
	       st.zero_pages, st.first_write_ms);
	if (v.postcopy)
		printf("postcopy: %" PRIu64 " pages lacked, %" PRIu64 " read on faults, %" PRIu64
		       " in the background, all in after %" PRIu64 " ms\n", st.postcopy_pages,
		       st.postcopy_fault_pages, st.postcopy_background_pages, st.postcopy_ms);
	printf("digest ram %016" PRIx64 "\n", sum(v.ram, v.ram_len));
	printf("digest state %016" PRIx64 "\n", v.state_sum);
	rdmig_source_destroy(v.s);
	free(v.dirty);
	return 0;
}
