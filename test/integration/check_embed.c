/* The example VMMs of examples/ over Soft-RoCE: a source driven from its own
 * poll() loop, one rdmig_source_step() at a time, device state before,
 * between and after iterations, guest RAM in anonymous private memory
 * written after it was registered; a destination in its own loop.  Both
 * print digests of what they hold at the end, and the source the longest
 * step it saw while a 64 MiB iteration was in flight. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rdmig.h"
#include "runs.h"
#include "suite.h"
#include "suites.h"
#include "testutil.h"

/* rdmig(3): a step works for about step_us (10 ms by default) and starts
 * only what fits that time at the price it learned, so it returns within
 * twice that on the bed (the target), connecting, registering
 * (a helper thread's work), posting and hashing included. */
#define STEP_BUDGET_US 10000 /* step_us's default */
#define STEP_BOUND_US (2 * STEP_BUDGET_US)

struct pair {
	char dir[256], port[32], bin_src[512], bin_dst[512];
	struct tu_run src, dst;
};

static void run_pair(const char *mode)
{
	struct pair p;
	char ram_s[64], ram_d[64], st_s[64], st_d[64], longest[128];
	char *dargv[] = { p.bin_dst, (char *)tu_addr(), "0", NULL };
	char *sargv[] = { p.bin_src, (char *)tu_addr(), p.port, mode[0] ? (char *)mode : NULL,
			  NULL };
	unsigned long long us = 0, steps = 0, slow = ~0ull, cpu_longest = 0, cpu_max = 0;
	int dcode, scode;

	tu_tmpdir(p.dir, sizeof(p.dir));
	tu_build_path("bin/vmm-source", p.bin_src, sizeof(p.bin_src));
	tu_build_path("bin/vmm-dest", p.bin_dst, sizeof(p.bin_dst));
	tu_run_spawn(&p.dst, p.dir, "dest", dargv);
	if (tu_wait_line(p.dst.out, "listening ", p.port, sizeof(p.port), 20000)) {
		tu_run_dump(&p.dst, "vmm-dest");
		ck_abort_msg("vmm-dest did not start listening");
	}
	tu_run_spawn(&p.src, p.dir, "source", sargv);
	scode = tu_run_finish(&p.src, 120000);
	dcode = tu_run_finish(&p.dst, 30000);
	if (scode || dcode) {
		tu_run_dump(&p.src, "vmm-source");
		tu_run_dump(&p.dst, "vmm-dest");
	}
	ck_assert_msg(scode == 0, "vmm-source exited %d", scode);
	ck_assert_msg(dcode == 0, "vmm-dest exited %d", dcode);

	tu_field(p.src.out, "digest ram ", ram_s, sizeof(ram_s));
	tu_field(p.dst.out, "digest ram ", ram_d, sizeof(ram_d));
	tu_field(p.src.out, "digest state ", st_s, sizeof(st_s));
	tu_field(p.dst.out, "digest state ", st_d, sizeof(st_d));
	tu_field(p.src.out, "longest step: ", longest, sizeof(longest));
	sscanf(longest, "%llu us of %llu steps", &us, &steps);
	tu_field(p.src.out, "steps over 20 ms: ", longest, sizeof(longest));
	sscanf(longest, "%llu", &slow);
	tu_field(p.src.out, "step cpu: ", longest, sizeof(longest));
	sscanf(longest, "%llu us in the longest step, %llu", &cpu_longest, &cpu_max);
	printf("embed %s: longest step %llu us (cpu %llu us; most cpu in a step %llu us) of %llu "
	       "steps, %llu over %d us; ram %s/%s, state %s/%s\n", mode[0] ? mode : "dynamic", us,
	       cpu_longest, cpu_max, steps, slow, STEP_BOUND_US, ram_s, ram_d, st_s, st_d);
	fflush(stdout);
	ck_assert_msg(ram_s[0] && !strcmp(ram_s, ram_d), "the guest RAM differs: %s vs %s",
		      ram_s, ram_d);
	ck_assert_msg(st_s[0] && !strcmp(st_s, st_d), "the device state differs: %s vs %s",
		      st_s, st_d);
	/* Many steps, none long: the iterations really were cut up. */
	ck_assert_msg(steps >= 20, "only %llu steps for 64 MiB", steps);
	/* What this asserts is that no step does unbounded work: a step that
	 * posts a whole round, registers every chunk or hashes the image at
	 * once takes hundreds of milliseconds here, and one that misjudges
	 * every post is over twice the budget in most steps.  How close the
	 * steps keep to the budget is a figure (printed above;
	 * docs/performance.md), not an assertion: a host that takes the bed's virtual CPUs away (make
	 * check under a busy loop per core) stretches steps on the wall clock
	 * and on the guest's CPU clock alike (under emulation the guest
	 * counts the time its vCPU was off the host CPU as its own): in one
	 * such run 3 of 281 steps were over twice the budget, the longest
	 * 25.7 ms (pin-all: 2 of 228, 32 ms), by what no library can bound;
	 * in another (2026-11-28, the busy loops and a second test bed beside
	 * it) 19 of 260, the longest 68 ms with as much CPU (pin-all: 7 of
	 * 266, 75 ms).  So the share allowed is a quarter: a step that
	 * misjudges every post is over in most steps, loaded or not. */
	ck_assert_msg(slow * 4 <= steps, "%llu of %llu steps took more than %d us", slow,
		      steps, STEP_BOUND_US);
	ck_assert_msg(us > 0 && us <= 10 * STEP_BUDGET_US, "a step took %llu us (bound %d us)",
		      us, 10 * STEP_BUDGET_US);
	tu_rmdir(p.dir);
}

START_TEST(vmm_pair_dynamic)
{
	run_pair("");
}
END_TEST

/* Pin-all over private anonymous memory: the pages never touched before
 * registration (one in four) and written after it must arrive (verify is
 * on): registration must not have pinned the shared zero page. */
START_TEST(vmm_pair_pin_all)
{
	run_pair("--pin-all");
}
END_TEST

/* ---- cancel from another thread ------------------------------------------ */

/* How long a cancelled call may take to return after the cancel. */
#define CANCEL_BOUND_MS 500

struct canceller {
	struct rdmig_source *s;
	struct rdmig_dest *d;
	uint64_t when_pinned;  /* source: cancel once this much is pinned (0: now) */
	int delay_ms;
	uint64_t at_ms;        /* when it cancelled */
	uint64_t pinned_then;
};

static void *cancel_later(void *arg)
{
	struct canceller *c = arg;
	struct rdmig_stats st = { .size = sizeof(st) };

	usleep((useconds_t)c->delay_ms * 1000);
	while (c->s && c->when_pinned) {
		rdmig_source_stats(c->s, &st);
		if (st.pinned_bytes >= c->when_pinned)
			break;
		usleep(2000);
	}
	c->pinned_then = st.pinned_bytes;
	c->at_ms = tu_now_ms();
	if (c->s)
		rdmig_source_cancel(c->s);
	else
		rdmig_dest_cancel(c->d, "the operator changed plans");
	return NULL;
}

static struct rdmig_source *new_source(void *ram, uint64_t len, int pin_all)
{
	struct rdmig_source *s = NULL;
	struct rdmig_config cfg;

	rdmig_config_init(&cfg);
	cfg.pin_all = pin_all;
	cfg.pinned_cap = 0;
	cfg.timeout_ms = 20000;
	ck_assert_int_eq(rdmig_source_create(&s, &cfg), 0);
	ck_assert_int_ge(rdmig_source_add_block(s, "pc.ram", ram, len, 4096), 0);
	return s;
}

/* Address resolution of a host on the link that does not answer takes
 * seconds (ARP); cancel ends it at once. */
START_TEST(cancel_interrupts_resolution)
{
	static uint8_t ram[1 << 20] __attribute__((aligned(4096)));
	struct rdmig_source *s = new_source(ram, sizeof(ram), 0);
	struct canceller c = { .s = s, .delay_ms = 300 };
	pthread_t t;
	uint64_t t0 = tu_now_ms(), took;
	int rc;

	ck_assert_int_eq(pthread_create(&t, NULL, cancel_later, &c), 0);
	rc = rdmig_source_connect(s, "10.77.0.213", "4444");
	took = tu_now_ms() - c.at_ms;
	pthread_join(t, NULL);
	printf("cancel: connect to a silent host: %d after %" PRIu64 " ms, %" PRIu64
	       " ms after the cancel: %s\n", rc, tu_now_ms() - t0, took, rdmig_source_error(s));
	fflush(stdout);
	ck_assert_int_eq(rc, -ECANCELED);
	ck_assert_uint_le(took, CANCEL_BOUND_MS);
	rdmig_source_destroy(s);
}
END_TEST

/* Pin-all of 256 MiB of anonymous memory is cut short: the iteration that
 * waits for the pieces returns -ECANCELED soon after the cancel, the
 * destination hears of it and fails, nothing is left pinned. */
START_TEST(cancel_interrupts_pin_all)
{
	const uint64_t len = 256ull << 20;
	char bin[512], port[32], dir[256], mib[16];
	char *dargv[] = { bin, (char *)tu_addr(), "0", "--mib", mib, NULL };
	struct rdmig_stats st = { .size = sizeof(st) };
	struct rdmig_source *s;
	struct canceller c = { .when_pinned = 32ull << 20 };
	struct tu_run dst;
	pthread_t t;
	uint64_t took;
	void *ram;
	int rc, dcode;
	char *err;

	snprintf(mib, sizeof(mib), "%" PRIu64, len >> 20);
	tu_tmpdir(dir, sizeof(dir));
	tu_build_path("bin/vmm-dest", bin, sizeof(bin));
	tu_run_spawn(&dst, dir, "dest", dargv);
	ck_assert_int_eq(tu_wait_line(dst.out, "listening ", port, sizeof(port), 20000), 0);
	ram = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(ram, MAP_FAILED);
	s = new_source(ram, len, 1);
	c.s = s;
	rc = rdmig_source_connect(s, tu_addr(), port);
	ck_assert_msg(rc == 0, "connect: %s", rdmig_source_error(s));
	ck_assert_int_eq(rdmig_source_mark_all(s), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, cancel_later, &c), 0);
	rc = rdmig_source_iterate(s);
	took = tu_now_ms() - c.at_ms;
	pthread_join(t, NULL);
	rdmig_source_stats(s, &st);
	dcode = tu_run_finish(&dst, 30000);
	err = tu_slurp(dst.err, NULL);
	printf("cancel: pin-all of 256 MiB at %" PRIu64 " MiB pinned: %d %" PRIu64 " ms after "
	       "the cancel (%s); destination exit %d: %s", c.pinned_then >> 20, rc, took,
	       rdmig_source_error(s), dcode, err ? err : "\n");
	fflush(stdout);
	ck_assert_int_eq(rc, -ECANCELED);
	ck_assert_uint_le(took, CANCEL_BOUND_MS);
	ck_assert_uint_lt(c.pinned_then, len);
	ck_assert_int_eq(dcode, 1);
	ck_assert_msg(err && strstr(err, "cancel"), "the destination did not hear of the cancel");
	rdmig_source_destroy(s);
	munmap(ram, len);
	free(err);
	tu_rmdir(dir);
}
END_TEST

int embed_drop_state(void *ctx, const void *data, size_t len, char *err, size_t errlen)
{
	(void)ctx; (void)data; (void)len; (void)err; (void)errlen;
	return 0;
}

/* A destination served by rdmig_dest_run() in this thread is cancelled
 * from another one; the source (vmm-source) reports the reason. */
START_TEST(cancel_dest_from_another_thread)
{
	char bin[512], dir[256], port[16], err[512];
	char *sargv[] = { bin, (char *)tu_addr(), port, "--mib", "256", NULL };
	struct rdmig_listener *l = NULL;
	struct rdmig_dest *d = NULL;
	struct rdmig_config cfg;
	struct canceller c = { .delay_ms = 1500 };
	struct tu_run src;
	const uint64_t len = 256ull << 20;
	pthread_t t;
	uint64_t took;
	void *ram;
	char *serr;
	int rc, scode;

	tu_tmpdir(dir, sizeof(dir));
	tu_build_path("bin/vmm-source", bin, sizeof(bin));
	ram = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(ram, MAP_FAILED);
	rdmig_config_init(&cfg);
	cfg.timeout_ms = 20000;
	cfg.state = embed_drop_state;
	ck_assert_int_eq(rdmig_listener_create(&l, tu_addr(), "0", err, sizeof(err)), 0);
	snprintf(port, sizeof(port), "%d", rdmig_listener_port(l));
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), 0);
	ck_assert_int_eq(rdmig_dest_add_block(d, "pc.ram", ram, len, 1), 0);
	tu_run_spawn(&src, dir, "source", sargv);
	rc = rdmig_dest_accept(d, l, 20000);
	ck_assert_msg(rc == 0, "accept: %s", rdmig_dest_error(d));
	c.d = d;
	ck_assert_int_eq(pthread_create(&t, NULL, cancel_later, &c), 0);
	rc = rdmig_dest_run(d);
	took = tu_now_ms() - c.at_ms;
	pthread_join(t, NULL);
	scode = tu_run_finish(&src, 30000);
	serr = tu_slurp(src.err, NULL);
	printf("cancel: destination cancelled from another thread: %d %" PRIu64 " ms after "
	       "(%s); vmm-source exit %d: %s", rc, took, rdmig_dest_error(d), scode,
	       serr ? serr : "\n");
	fflush(stdout);
	ck_assert_int_eq(rc, -ECANCELED);
	ck_assert_uint_le(took, CANCEL_BOUND_MS);
	ck_assert_int_eq(scode, 1);
	ck_assert_msg(serr && strstr(serr, "the operator changed plans"),
		      "the source did not hear the reason");
	rdmig_dest_destroy(d);
	rdmig_listener_destroy(l);
	munmap(ram, len);
	free(serr);
	tu_rmdir(dir);
}
END_TEST

/* ---- the event-loop contract ---------------------------------------------- */

/* A vmm-dest of @mib MiB; its port in @port. */
static void start_vmm_dest(struct tu_run *dst, char *dir, size_t dirlen, char *port,
			   size_t portlen, const char *mib)
{
	char bin[512];
	char *argv[] = { bin, (char *)tu_addr(), "0", "--mib", (char *)mib, NULL };

	tu_tmpdir(dir, dirlen);
	tu_build_path("bin/vmm-dest", bin, sizeof(bin));
	tu_run_spawn(dst, dir, "dest", argv);
	ck_assert_int_eq(tu_wait_line(dst->out, "listening ", port, portlen, 20000), 0);
}

/* An iteration that ends inside rdmig_source_poll() (or a blocking
 * send_state) is still reported by the caller's next process call, and a
 * cancel after the destination confirmed changes nothing. */
START_TEST(finished_operation_is_reported_once)
{
	const uint64_t len = 4ull << 20;
	struct rdmig_stats st = { .size = sizeof(st) };
	struct rdmig_source *s;
	struct tu_run dst;
	char dir[256], port[32];
	uint8_t *ram;
	int rc = 0, polls = 0;

	start_vmm_dest(&dst, dir, sizeof(dir), port, sizeof(port), "4");
	ram = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(ram, MAP_FAILED);
	memset(ram, 0x5a, len);
	s = new_source(ram, len, 0);
	ck_assert_msg(rdmig_source_connect(s, tu_addr(), port) == 0, "%s", rdmig_source_error(s));
	ck_assert_int_eq(rdmig_source_mark_all(s), 0);
	ck_assert_int_eq(rdmig_source_iterate_async(s), 0);
	do {
		ck_assert_int_eq(rdmig_source_poll(s), 0);
		rdmig_source_stats(s, &st);
		usleep(1000);
	} while (st.iterations < 1 && ++polls < 20000);
	ck_assert_uint_eq(st.iterations, 1);
	/* It ended inside poll: the next process says so, once. */
	ck_assert_int_eq(rdmig_source_timeout(s), 0);
	ck_assert_int_eq(rdmig_source_process(s), 1);
	ck_assert_int_eq(rdmig_source_process(s), 0);
	ck_assert_int_eq(rdmig_source_complete(s), 0);
	rdmig_source_cancel(s);
	rc = rdmig_source_process(s);
	rdmig_source_stats(s, &st);
	printf("api: iteration finished inside poll after %d polls, reported by the next "
	       "process; cancel after completion: process %d, status %u\n", polls, rc, st.status);
	fflush(stdout);
	ck_assert_int_ge(rc, 0);
	ck_assert_uint_eq(st.status, RDMIG_STATUS_COMPLETED);
	ck_assert_int_eq(tu_run_finish(&dst, 30000), 0);
	rdmig_source_destroy(s);
	munmap(ram, len);
	tu_rmdir(dir);
}
END_TEST

/* While a connection request waits for a destination that does not take
 * it, the timeout keeps the caller asleep: no busy loop once a keepalive
 * would be due. */
START_TEST(no_busy_loop_while_connecting)
{
	static uint8_t ram[1 << 20] __attribute__((aligned(4096)));
	struct rdmig_listener *l = NULL;
	struct rdmig_source *s;
	struct rdmig_config cfg;
	char err[512], port[16];
	uint64_t t0;
	int loops = 0, rc = 0, t;

	ck_assert_int_eq(rdmig_listener_create(&l, tu_addr(), "0", err, sizeof(err)), 0);
	snprintf(port, sizeof(port), "%d", rdmig_listener_port(l));
	rdmig_config_init(&cfg);
	cfg.timeout_ms = 2000; /* keepalives would be due after 500 ms */
	ck_assert_int_eq(rdmig_source_create(&s, &cfg), 0);
	ck_assert_int_ge(rdmig_source_add_block(s, "pc.ram", ram, sizeof(ram), 4096), 0);
	ck_assert_int_eq(rdmig_source_connect_async(s, tu_addr(), port), 0);
	t0 = tu_now_ms();
	while (!rc && tu_now_ms() - t0 < 1500) {
		struct pollfd pfd = { .fd = rdmig_source_fd(s), .events = POLLIN };

		rc = rdmig_source_process(s);
		t = rdmig_source_timeout(s);
		poll(&pfd, 1, t);
		loops++;
	}
	printf("api: 1.5 s waiting for an unanswered connection request: %d process calls\n",
	       loops);
	fflush(stdout);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_lt(loops, 200);
	rdmig_source_destroy(s);
	rdmig_listener_destroy(l);
}
END_TEST

/* ---- both sides driven as rdmig(3) says ----------------------------------- */

/* Rounds of an 8 MiB block, all of it marked each time. */
#define LOOP_MIB 8
#define LOOP_ROUNDS 6

struct loop_dest {
	struct rdmig_listener *l;
	uint8_t *ram;
	int blocking;
	int rc;
};

/* rdmig(3)'s destination loop: wait until the fd is readable or the
 * timeout passed, then process; nothing else. */
static void *loop_dest_thread(void *arg)
{
	struct loop_dest *ld = arg;
	struct rdmig_config cfg;
	struct rdmig_dest *d;
	int rc, fds[RDMIG_DEST_MAX_FDS], n, i;

	rdmig_config_init(&cfg);
	cfg.state = embed_drop_state;
	cfg.timeout_ms = 20000;
	rc = rdmig_dest_create(&d, &cfg);
	if (!rc)
		rc = rdmig_dest_add_block(d, "pc.ram", ld->ram, (uint64_t)LOOP_MIB << 20, 1) < 0;
	if (!rc)
		rc = rdmig_dest_accept(d, ld->l, 20000);
	if (!rc && ld->blocking)
		rc = rdmig_dest_run(d);
	while (!rc && !ld->blocking) {
		struct pollfd pfd[RDMIG_DEST_MAX_FDS];

		n = rdmig_dest_fds(d, fds, RDMIG_DEST_MAX_FDS);
		for (i = 0; i < n; i++)
			pfd[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		poll(pfd, (nfds_t)n, rdmig_dest_timeout(d));
		rc = rdmig_dest_process(d);
	}
	ld->rc = rc < 0 ? rc : 0;
	if (ld->rc)
		fprintf(stderr, "loop dest: %s\n", rdmig_dest_error(d));
	rdmig_dest_destroy(d);
	return NULL;
}

/* rdmig(3)'s source loop for one operation: start it, then wait for the
 * fd or the timeout and process until it returns non-zero. */
static int loop_until_done(struct rdmig_source *s, int rc)
{
	struct pollfd pfd = { .fd = rdmig_source_fd(s), .events = POLLIN };

	while (rc == 0) {
		poll(&pfd, 1, rdmig_source_timeout(s));
		rc = rdmig_source_process(s);
	}
	return rc < 0 ? rc : 0;
}

/* One migration of LOOP_ROUNDS rounds; each round's time into @ms. */
static void loop_migration(int blocking, uint64_t *ms)
{
	const uint64_t len = (uint64_t)LOOP_MIB << 20;
	struct loop_dest ld = { .blocking = blocking };
	struct rdmig_source *s;
	struct rdmig_config cfg;
	char err[256], port[16];
	pthread_t t;
	uint8_t *ram;
	int r, rc;

	ram = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ld.ram = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert(ram != MAP_FAILED && ld.ram != MAP_FAILED);
	tu_fill_random(ram, len, 7);
	ck_assert_int_eq(rdmig_listener_create(&ld.l, tu_addr(), "0", err, sizeof(err)), 0);
	snprintf(port, sizeof(port), "%d", rdmig_listener_port(ld.l));
	ck_assert_int_eq(pthread_create(&t, NULL, loop_dest_thread, &ld), 0);
	rdmig_config_init(&cfg);
	cfg.timeout_ms = 20000;
	ck_assert_int_eq(rdmig_source_create(&s, &cfg), 0);
	ck_assert_int_ge(rdmig_source_add_block(s, "pc.ram", ram, len, 4096), 0);
	rc = blocking ? rdmig_source_connect(s, tu_addr(), port) :
	     loop_until_done(s, rdmig_source_connect_async(s, tu_addr(), port));
	for (r = 0; !rc && r < LOOP_ROUNDS; r++) {
		uint64_t t0 = tu_now_ms();

		rc = rdmig_source_mark_all(s);
		if (!rc)
			rc = blocking ? rdmig_source_iterate(s) :
			     loop_until_done(s, rdmig_source_iterate_async(s));
		ms[r] = tu_now_ms() - t0;
	}
	if (!rc)
		rc = blocking ? rdmig_source_complete(s) :
		     loop_until_done(s, rdmig_source_complete_async(s));
	ck_assert_msg(rc == 0, "%s: %s", blocking ? "blocking" : "loop", rdmig_source_error(s));
	pthread_join(t, NULL);
	ck_assert_int_eq(ld.rc, 0);
	ck_assert_msg(!memcmp(ram, ld.ram, len), "the image differs");
	rdmig_source_destroy(s);
	rdmig_listener_destroy(ld.l);
	munmap(ram, len);
	munmap(ld.ram, len);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The trial: after rdmig_source_iterate_async() the timeout was a
 * second and the fd quiet, so a loop that waits first (as rdmig(3) says)
 * stalled every round.  Both sides are driven that way here, and their
 * rounds must be as fast as those of the blocking calls. */
START_TEST(loop_rounds_as_fast_as_blocking)
{
	uint64_t blk[LOOP_ROUNDS], loop[LOOP_ROUNDS], mb, ml;
	char line[512];
	int r, n = 0;

	loop_migration(1, blk);
	loop_migration(0, loop);
	n = snprintf(line, sizeof(line), "loop: rounds of %d MiB, blocking / event loop (ms):",
		     LOOP_MIB);
	for (r = 0; r < LOOP_ROUNDS; r++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, " %" PRIu64 "/%" PRIu64,
			      blk[r], loop[r]);
	qsort(blk, LOOP_ROUNDS, sizeof(blk[0]), cmp_u64);
	qsort(loop, LOOP_ROUNDS, sizeof(loop[0]), cmp_u64);
	mb = blk[LOOP_ROUNDS / 2];
	ml = loop[LOOP_ROUNDS / 2];
	printf("%s; medians %" PRIu64 " / %" PRIu64 " ms\n", line, mb, ml);
	fflush(stdout);
	ck_assert_msg(ml <= mb * 3 / 2 + 50, "event-loop rounds take %" PRIu64 " ms, blocking "
		      "ones %" PRIu64 " ms", ml, mb);
	ck_assert_msg(loop[LOOP_ROUNDS - 1] <= blk[LOOP_ROUNDS - 1] * 2 + 100, "the slowest "
		      "event-loop round took %" PRIu64 " ms", loop[LOOP_ROUNDS - 1]);
}
END_TEST

void embed_cases(Suite *s)
{
	TCase *tc = tu_case(s, "vmm", 240);

	tcase_add_test(tc, vmm_pair_dynamic);
	tcase_add_test(tc, vmm_pair_pin_all);
	tc = tu_case(s, "cancel", 120);
	tcase_add_test(tc, cancel_interrupts_resolution);
	tcase_add_test(tc, cancel_interrupts_pin_all);
	tcase_add_test(tc, cancel_dest_from_another_thread);
	tc = tu_case(s, "api", 120);
	tcase_add_test(tc, finished_operation_is_reported_once);
	tcase_add_test(tc, no_busy_loop_while_connecting);
	tcase_add_test(tc, loop_rounds_as_fast_as_blocking);
	embed_trial_cases(s);
	embed_busy_cases(s);
	embed_postcopy_cases(s);
	embed_postcopy_recover_cases(s);
}
