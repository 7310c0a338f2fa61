/* The trial as a test: a VMM-shaped source and destination written
 * from rdmig(3) alone, over Soft-RoCE.  Three blocks (memfd and anonymous
 * memory), a writer thread that dirties pages and keeps its own bitmap,
 * the library pulling it at the start and the end of every round
 * (dirty_sync), each side in its own epoll loop, a bandwidth cap on the
 * first pass, statistics read from another thread all along, device state,
 * and a second migration cancelled half-way.  The images must come out
 * identical, the cap must hold, the destination's counters must move during
 * the first pass, and both sides must say what the cancel was. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rdmig.h"
#include "suite.h"
#include "suites.h"
#include "testutil.h"

#define PAGE 4096u
#define NBLK 3
#define MiB (1ull << 20)
#define CAP (8 * MiB)           /* first pass, bytes per second: below the bed's rate */
#define STATE_LEN (256u << 10)
#define BIG_STATE (4u << 20)    /* pre-copy device state, timed */
/* Written while the destination is paused: more than its 4 MiB state ring
 * holds, so the source must wait for the pause to end. */
#define PAUSED_STATE (8u << 20)
#define PAUSE_MS 300            /* the destination pauses state this long */
#define MAX_ROUNDS 10

/* The longest call of each library function on either side, over the
 * whole migration (rdmig(3), Bounded steps: about step_us, 10 ms), and the
 * thread's CPU time in that call: a long call with little CPU time spent
 * its time off the CPU, not working. */
struct calltime {
	const char *name;
	uint64_t max_us, cpu_us, n;
};
static struct calltime calls[16];
static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t clock_us(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static uint64_t now_us(void)
{
	return clock_us(CLOCK_MONOTONIC);
}

static void record_call(const char *name, uint64_t us, uint64_t cpu)
{
	unsigned i;

	pthread_mutex_lock(&calls_lock);
	for (i = 0; i < 16 && calls[i].name && strcmp(calls[i].name, name); i++)
		;
	if (i < 16) {
		calls[i].name = name;
		calls[i].n++;
		if (us > calls[i].max_us) {
			calls[i].max_us = us;
			calls[i].cpu_us = cpu;
		}
	}
	pthread_mutex_unlock(&calls_lock);
}

#define TIMED(name, expr) ({ uint64_t t_ = now_us(), c_ = clock_us(CLOCK_THREAD_CPUTIME_ID); \
			     __typeof__(expr) r_ = (expr); \
			     record_call(name, now_us() - t_, clock_us(CLOCK_THREAD_CPUTIME_ID) - c_); \
			     r_; })

/* The library's account of a step over twice its budget: printed, so a
 * long call above comes with where its time went. */
static void long_step_log(void *ctx, int level, const char *msg)
{
	(void)ctx;
	(void)level;
	if (strstr(msg, " took "))
		printf("trial: %s\n", msg);
}

static const char *const names[NBLK] = { "pc.ram", "memfd.ram", "vga.vram" };
static const uint64_t sizes[NBLK] = { 24 * MiB, 16 * MiB, 4 * MiB };

struct blocks {
	uint8_t *host[NBLK];
	int memfd;
};

/* The VMM's own dirty log: one bit per page, set by the writer after it
 * wrote the page, taken (and cleared) word by word by dirty_sync. */
struct dirty_log {
	_Atomic unsigned long *bits[NBLK];
	unsigned long *scratch;
	uint64_t npages[NBLK];
	int first;              /* the first round takes everything */
	unsigned syncs;
};

struct writer {
	struct blocks *b;
	struct dirty_log *log;
	atomic_bool stop;
	uint64_t writes;
};

/* Statistics from another thread, all along. */
struct watcher {
	struct rdmig_source *_Atomic s;
	struct rdmig_dest *_Atomic d;
	atomic_bool stop;
	uint64_t dest_bytes_first_pass; /* the destination's bytes seen in pass 1 */
	uint64_t src_last, dst_last;
	int went_down;
	uint64_t samples;
};

struct dest_side {
	struct rdmig_listener *l;
	struct blocks mem;
	struct watcher *w;
	uint8_t state[STATE_LEN + BIG_STATE + PAUSED_STATE];
	size_t state_len;
	int rc, cls;
	struct rdmig_stats end;
	struct rdmig_dest *d;       /* destroyed by the test, after the watcher */
};

static void map_blocks(struct blocks *b, int fill)
{
	unsigned i;

	b->memfd = memfd_create("trial", MFD_CLOEXEC);
	ck_assert_int_ge(b->memfd, 0);
	ck_assert_int_eq(ftruncate(b->memfd, (off_t)sizes[1]), 0);
	for (i = 0; i < NBLK; i++) {
		b->host[i] = i == 1 ?
			     mmap(NULL, sizes[i], PROT_READ | PROT_WRITE, MAP_SHARED, b->memfd, 0) :
			     mmap(NULL, sizes[i], PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ck_assert(b->host[i] != MAP_FAILED);
		/* Three pages in four hold data; the rest stay zero. */
		if (fill) {
			uint64_t p;

			for (p = 0; p < sizes[i] / PAGE; p++)
				if (p % 4)
					tu_fill_random(b->host[i] + p * PAGE, PAGE, p * 7 + i);
		}
	}
}

static void unmap_blocks(struct blocks *b)
{
	unsigned i;

	for (i = 0; i < NBLK; i++)
		munmap(b->host[i], sizes[i]);
	close(b->memfd);
}

static void *writer_thread(void *arg)
{
	struct writer *w = arg;
	const unsigned bits = sizeof(unsigned long) * 8;
	uint64_t x = 88172645463325252ull;

	while (!atomic_load(&w->stop)) {
		unsigned blk;
		uint64_t page;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		blk = (unsigned)(x % NBLK);
		page = (x >> 8) % w->log->npages[blk];
		/* The page first, then its bit: a round that takes the bit
		 * sends what was written. */
		memcpy(w->b->host[blk] + page * PAGE + (x >> 40) % (PAGE - 8), &x, 8);
		atomic_fetch_or(&w->log->bits[blk][page / bits], 1ul << (page % bits));
		w->writes++;
		usleep(200);
	}
	return NULL;
}

/* rdmig(3), dirty_sync: mark what changed since the last round. */
static int dirty_sync(void *ctx, struct rdmig_source *s, char *err, size_t errlen)
{
	struct dirty_log *log = ctx;
	const unsigned bits = sizeof(unsigned long) * 8;
	unsigned i;
	uint64_t w, words;
	int rc;

	log->syncs++;
	if (log->first) {
		log->first = 0;
		return rdmig_source_mark_all(s);
	}
	for (i = 0; i < NBLK; i++) {
		words = (log->npages[i] + bits - 1) / bits;
		for (w = 0; w < words; w++)
			log->scratch[w] = atomic_exchange(&log->bits[i][w], 0);
		rc = rdmig_source_mark_dirty_bitmap(s, i, log->scratch, 0, log->npages[i]);
		if (rc) {
			snprintf(err, errlen, "marking block %u: %d", i, rc);
			return rc;
		}
	}
	return 0;
}

static void *watch_thread(void *arg)
{
	struct watcher *w = arg;

	while (!atomic_load(&w->stop)) {
		struct rdmig_stats ss = { .size = sizeof(ss) }, ds = { .size = sizeof(ds) };
		struct rdmig_source *s = atomic_load(&w->s);
		struct rdmig_dest *d = atomic_load(&w->d);

		if (s)
			rdmig_source_stats(s, &ss);
		if (d)
			rdmig_dest_stats(d, &ds);
		if (s && d) {
			w->samples++;
			if (ss.normal_bytes < w->src_last || ds.normal_bytes < w->dst_last)
				w->went_down = 1;
			w->src_last = ss.normal_bytes;
			w->dst_last = ds.normal_bytes;
			if (ss.iterations == 0 && ds.normal_bytes > w->dest_bytes_first_pass)
				w->dest_bytes_first_pass = ds.normal_bytes;
		}
		usleep(5000);
	}
	return NULL;
}

static int keep_state(void *ctx, const void *data, size_t len, char *err, size_t errlen)
{
	struct dest_side *ds = ctx;

	if (ds->state_len + len > sizeof(ds->state)) {
		snprintf(err, errlen, "more state than expected");
		return -EMSGSIZE;
	}
	memcpy(ds->state + ds->state_len, data, len);
	ds->state_len += len;
	return 0;
}

/* rdmig(3)'s destination in its own epoll loop. */
static void *dest_thread(void *arg)
{
	struct dest_side *ds = arg;
	struct epoll_event ev = { .events = EPOLLIN };
	struct rdmig_config cfg;
	struct rdmig_dest *d;
	unsigned i;
	int ep = epoll_create1(EPOLL_CLOEXEC), rc;

	rdmig_config_init(&cfg);
	cfg.state = keep_state;
	cfg.state_ctx = ds;
	cfg.timeout_ms = 20000;
	cfg.log = long_step_log;
	cfg.log_level = RDMIG_LOG_DEBUG;
	rc = rdmig_dest_create(&d, &cfg);
	for (i = 0; !rc && i < NBLK; i++)
		rc = rdmig_dest_add_block(d, names[i], ds->mem.host[i], sizes[i], 1) < 0;
	ev.data.fd = rdmig_dest_fd(d);
	if (!rc)
		rc = epoll_ctl(ep, EPOLL_CTL_ADD, rdmig_dest_fd(d), &ev);
	if (!rc)
		atomic_store(&ds->w->d, d);
	/* Accepted from the loop too, without waiting in the call: the
	 * accept's own work is timed like every other call. */
	ev.data.fd = rdmig_listener_fd(ds->l);
	if (!rc)
		rc = epoll_ctl(ep, EPOLL_CTL_ADD, ev.data.fd, &ev);
	for (i = 0; !rc && i < 2000; i++) {
		struct epoll_event got[4];

		epoll_wait(ep, got, 4, 10);
		rc = TIMED("dest_accept", rdmig_dest_accept(d, ds->l, 0));
		if (rc != -EAGAIN)
			break;
		rc = 0;
	}
	if (!rc && i == 2000)
		rc = -ETIMEDOUT;
	if (!rc)
		epoll_ctl(ep, EPOLL_CTL_DEL, rdmig_listener_fd(ds->l), NULL);
	while (!rc) {
		struct epoll_event got[4];

		epoll_wait(ep, got, 4, rdmig_dest_timeout(d));
		rc = TIMED("dest_process", rdmig_dest_process(d));
	}
	ds->rc = rc < 0 ? rc : 0;
	ds->cls = rdmig_dest_error_class(d);
	ds->end.size = sizeof(ds->end);
	rdmig_dest_stats(d, &ds->end);
	if (ds->rc)
		fprintf(stderr, "trial destination: %s\n", rdmig_dest_error(d));
	/* Other threads may still read its statistics: the test destroys it
	 * once they are done. */
	ds->d = d;
	close(ep);
	return NULL;
}

/* Another thread of the destination's VMM: device state waits PAUSE_MS. */
static void *pause_thread(void *arg)
{
	struct watcher *w = arg;
	struct rdmig_dest *d = atomic_load(&w->d);

	rdmig_dest_pause_state(d, 1);
	usleep(PAUSE_MS * 1000);
	rdmig_dest_pause_state(d, 0);
	return NULL;
}

/* rdmig(3)'s way to write device state from a loop: write what it takes;
 * when it takes nothing, wait for the fd or the timeout and process. */
static int loop_write_state(int ep, struct rdmig_source *s, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = TIMED("source_write_state", rdmig_source_write_state(s, p, len));
		int rc;

		if (n < 0)
			return (int)n;
		p += n;
		len -= (size_t)n;
		if (!n) {
			struct epoll_event got[4];

			epoll_wait(ep, got, 4, rdmig_source_timeout(s));
			rc = TIMED("source_process", rdmig_source_process(s));
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* rdmig(3)'s source loop for one operation, in its own epoll set. */
static int drive(int ep, struct rdmig_source *s, int rc)
{
	while (rc == 0) {
		struct epoll_event got[4];

		epoll_wait(ep, got, 4, rdmig_source_timeout(s));
		rc = TIMED("source_process", rdmig_source_process(s));
	}
	return rc < 0 ? rc : 0;
}

START_TEST(vmm_trial)
{
	static struct dest_side ds;
	struct blocks src;
	struct dirty_log log = { .first = 1 };
	struct writer wr = { .b = &src, .log = &log };
	struct watcher w = { 0 };
	struct epoll_event ev = { .events = EPOLLIN };
	struct rdmig_stats st = { .size = sizeof(st) };
	struct rdmig_config cfg;
	struct rdmig_source *s;
	static uint8_t state[STATE_LEN + BIG_STATE + PAUSED_STATE];
	pthread_t dt, wt, ct, pt;
	char err[256], port[16];
	uint64_t t0, pass_ms = 0, pass_bytes = 0, remaining = 0, state_ms = 0, before;
	uint64_t paused_ms = 0;
	unsigned i, round, rounds = 0;
	int ep = epoll_create1(EPOLL_CLOEXEC), rc;

	memset(&ds, 0, sizeof(ds));
	ds.w = &w;
	map_blocks(&src, 1);
	map_blocks(&ds.mem, 0);
	for (i = 0; i < NBLK; i++) {
		log.npages[i] = sizes[i] / PAGE;
		log.bits[i] = calloc(log.npages[i] / 8 + 8, 1);
		ck_assert_ptr_nonnull(log.bits[i]);
	}
	log.scratch = calloc(log.npages[0] / 8 + 8, 1);
	ck_assert_int_eq(rdmig_listener_create(&ds.l, tu_addr(), "0", err, sizeof(err)), 0);
	snprintf(port, sizeof(port), "%d", rdmig_listener_port(ds.l));
	ck_assert_int_eq(pthread_create(&dt, NULL, dest_thread, &ds), 0);

	rdmig_config_init(&cfg);
	cfg.timeout_ms = 20000;
	cfg.max_bandwidth = CAP;
	cfg.dirty_sync = dirty_sync;
	cfg.dirty_ctx = &log;
	cfg.log = long_step_log;
	cfg.log_level = RDMIG_LOG_DEBUG;
	ck_assert_int_eq(rdmig_source_create(&s, &cfg), 0);
	for (i = 0; i < NBLK; i++)
		ck_assert_int_eq(rdmig_source_add_block(s, names[i], src.host[i], sizes[i], PAGE),
				 (int)i);
	ev.data.fd = rdmig_source_fd(s);
	ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_ADD, rdmig_source_fd(s), &ev), 0);
	atomic_store(&w.s, s);
	ck_assert_int_eq(pthread_create(&ct, NULL, watch_thread, &w), 0);
	rc = drive(ep, s, TIMED("source_connect_async",
				 rdmig_source_connect_async(s, tu_addr(), port)));
	ck_assert_msg(rc == 0, "connect: %s", rdmig_source_error(s));
	ck_assert_int_eq(pthread_create(&wt, NULL, writer_thread, &wr), 0);

	/* Device state before the first round, as QEMU's setup sections. */
	tu_fill_random(state, sizeof(state), 99);
	ck_assert_int_eq(rdmig_source_send_state(s, state, STATE_LEN / 2), 0);
	for (round = 0; round < MAX_ROUNDS; round++) {
		t0 = tu_now_ms();
		rdmig_source_stats(s, &st);
		before = st.normal_bytes;
		rc = drive(ep, s, TIMED("source_iterate_async",
					 rdmig_source_iterate_async(s)));
		ck_assert_msg(rc == 0, "round %u: %s", round + 1, rdmig_source_error(s));
		rounds++;
		rdmig_source_stats(s, &st);
		/* The round's own counters: its page data, its zero pages at
		 * most the round's pages, its time within the caller's. */
		ck_assert_uint_eq(st.last_iter_bytes, st.normal_bytes - before);
		ck_assert_uint_le(st.last_iter_ms, tu_now_ms() - t0);
		if (round == 0) {
			pass_ms = tu_now_ms() - t0;
			pass_bytes = st.normal_bytes - before;
			ck_assert_uint_gt(st.last_iter_zero_pages, 0);
			/* The cap is lifted from another thread's point of view:
			 * the call may come from anywhere. */
			rdmig_source_set_max_bandwidth(s, 0);
			/* Pre-copy device state between rounds (VFIO's), written
			 * from the loop: no wait beyond what the credits take. */
			t0 = tu_now_ms();
			rc = loop_write_state(ep, s, state + STATE_LEN / 2, BIG_STATE);
			state_ms = tu_now_ms() - t0;
			ck_assert_msg(rc == 0, "state: %s", rdmig_source_error(s));
			/* The destination pauses state for PAUSE_MS from another
			 * thread: the source's writes wait (its credits run out)
			 * and go on once it resumes. */
			ck_assert_int_eq(pthread_create(&pt, NULL, pause_thread, &w), 0);
			usleep(20000);
			t0 = tu_now_ms();
			rc = loop_write_state(ep, s, state + STATE_LEN / 2 + BIG_STATE,
					      PAUSED_STATE);
			paused_ms = tu_now_ms() - t0;
			pthread_join(pt, NULL);
			ck_assert_msg(rc == 0, "paused state: %s", rdmig_source_error(s));
		}
		remaining = st.remaining;
		if (round >= 2 && remaining < 2 * MiB)
			break;
	}
	/* Stop the guest: the last round takes what the writer did last. */
	atomic_store(&wr.stop, true);
	pthread_join(wt, NULL);
	rc = drive(ep, s, TIMED("source_iterate_async", rdmig_source_iterate_async(s)));
	ck_assert_msg(rc == 0, "last round: %s", rdmig_source_error(s));
	rounds++;
	ck_assert_int_eq(rdmig_source_send_state(s, state + STATE_LEN / 2 + BIG_STATE +
						 PAUSED_STATE,
						 STATE_LEN / 2), 0);
	rc = drive(ep, s, TIMED("source_complete_async",
				 rdmig_source_complete_async(s)));
	ck_assert_msg(rc == 0, "complete: %s", rdmig_source_error(s));
	pthread_join(dt, NULL);
	rdmig_source_stats(s, &st);
	atomic_store(&w.stop, true);
	pthread_join(ct, NULL);

	printf("trial: %u rounds (%u syncs), %" PRIu64 " pages written by the guest; first pass "
	       "%" PRIu64 " bytes in %" PRIu64 " ms = %.2f MiB/s under a cap of %llu MiB/s; "
	       "destination saw %" PRIu64 " bytes land during it; %" PRIu64 " stats samples; "
	       "zero pages skipped %" PRIu64 "/%" PRIu64 ", normal bytes %" PRIu64 "/%" PRIu64
	       "; %u KiB of device state from the loop in %" PRIu64 " ms = %.1f MiB/s, the "
	       "same with the destination paused for %d ms: %" PRIu64 " ms\n",
	       rounds, log.syncs, wr.writes, pass_bytes, pass_ms,
	       pass_ms ? (double)pass_bytes / MiB * 1000.0 / (double)pass_ms : 0.0,
	       (unsigned long long)(CAP / MiB), w.dest_bytes_first_pass, w.samples,
	       st.zero_pages_skipped, ds.end.zero_pages_skipped, st.normal_bytes,
	       ds.end.normal_bytes, BIG_STATE >> 10, state_ms,
	       state_ms ? (double)BIG_STATE / MiB * 1000.0 / (double)state_ms : 0.0, PAUSE_MS,
	       paused_ms);
	printf("trial: longest call of each function over the migration (step_us 10 ms):");
	for (i = 0; i < 16 && calls[i].name; i++)
		printf(" %s %.1f ms (cpu %.1f) of %" PRIu64 ";", calls[i].name,
		       calls[i].max_us / 1000.0, calls[i].cpu_us / 1000.0, calls[i].n);
	printf("\n");
	fflush(stdout);
	ck_assert_int_eq(ds.rc, 0);
	for (i = 0; i < NBLK; i++)
		ck_assert_msg(!memcmp(src.host[i], ds.mem.host[i], sizes[i]), "block \"%s\" differs",
			      names[i]);
	ck_assert_uint_eq(ds.state_len, sizeof(state));
	ck_assert(!memcmp(ds.state, state, sizeof(state)));
	/* Written from the loop, state goes as fast as the credits come back
	 * (a loop that slept its timeout after a step that got them back ran
	 * at about 1 MiB/s). */
	ck_assert_msg(BIG_STATE * 1000ull >= 4 * MiB * state_ms, "device state from the loop "
		      "went at %.1f MiB/s", (double)BIG_STATE / MiB * 1000.0 / (double)state_ms);
	/* 8 MiB is more than the destination's state ring holds (4 MiB):
	 * the paused destination held the source's writes. */
	ck_assert_msg(paused_ms + 20 >= PAUSE_MS, "state went on while paused (%" PRIu64 " ms)",
		      paused_ms);
	/* The library pulled the log at the start and the end of every
	 * round, and once more to complete (rdmig(3), dirty_sync). */
	ck_assert_uint_eq(log.syncs, 2 * rounds + 1);
	/* The cap held: 1 %, and 100 ms worth for the bucket's first burst
	 * (50 ms) and what one WRITE or PAGES takes on credit. */
	ck_assert_msg(pass_bytes * 1000 <= (CAP + CAP / 100) * pass_ms + CAP / 10 * 1000,
		      "first pass ran above the cap");
	/* Counters: never down, the destination's moving during the first
	 * pass, and both sides agreeing at the end. */
	ck_assert(!w.went_down);
	ck_assert_uint_gt(w.dest_bytes_first_pass, 0);
	ck_assert_uint_eq(ds.end.zero_pages_skipped, st.zero_pages_skipped);
	ck_assert_uint_gt(st.zero_pages_skipped, 0);
	ck_assert_uint_eq(ds.end.normal_bytes, st.normal_bytes);
	/* Both sides name the same last round. */
	ck_assert_uint_eq(ds.end.last_iter_bytes, st.last_iter_bytes);
	ck_assert_uint_eq(ds.end.last_iter_zero_pages, st.last_iter_zero_pages);
	ck_assert_int_eq(rdmig_source_error_class(s), RDMIG_ERROR_NONE);
	rdmig_source_destroy(s);
	rdmig_dest_destroy(ds.d);
	rdmig_listener_destroy(ds.l);
	unmap_blocks(&src);
	unmap_blocks(&ds.mem);
	for (i = 0; i < NBLK; i++)
		free((void *)log.bits[i]);
	free(log.scratch);
	close(ep);
}
END_TEST

/* ---- cancelled half-way --------------------------------------------------- */

struct canceller {
	struct rdmig_source *s;
	struct rdmig_dest *_Atomic *d;
	uint64_t at_ms, dest_bytes;
};

/* Cancels once the destination's own counters say 8 MiB landed: they must
 * move before the first pass ends. */
static void *cancel_thread(void *arg)
{
	struct canceller *c = arg;
	uint64_t deadline = tu_now_ms() + 30000;

	while (tu_now_ms() < deadline) {
		struct rdmig_stats st = { .size = sizeof(st) };
		struct rdmig_dest *d = atomic_load(c->d);

		if (d) {
			rdmig_dest_stats(d, &st);
			if (st.normal_bytes >= 8 * MiB) {
				c->dest_bytes = st.normal_bytes;
				break;
			}
		}
		usleep(2000);
	}
	c->at_ms = tu_now_ms();
	rdmig_source_cancel(c->s);
	return NULL;
}

START_TEST(vmm_trial_cancel)
{
	static struct dest_side ds;
	struct blocks src;
	struct watcher w = { 0 };
	struct epoll_event ev = { .events = EPOLLIN };
	struct rdmig_config cfg;
	struct rdmig_source *s;
	struct canceller c = { .d = &w.d };
	pthread_t dt, ct;
	char err[256], port[16];
	uint64_t took;
	unsigned i;
	int ep = epoll_create1(EPOLL_CLOEXEC), rc;

	memset(&ds, 0, sizeof(ds));
	ds.w = &w;
	map_blocks(&src, 1);
	map_blocks(&ds.mem, 0);
	ck_assert_int_eq(rdmig_listener_create(&ds.l, tu_addr(), "0", err, sizeof(err)), 0);
	snprintf(port, sizeof(port), "%d", rdmig_listener_port(ds.l));
	ck_assert_int_eq(pthread_create(&dt, NULL, dest_thread, &ds), 0);
	rdmig_config_init(&cfg);
	cfg.timeout_ms = 20000;
	cfg.max_bandwidth = 16 * MiB; /* a pass of 2.5 s: time to cancel in it */
	ck_assert_int_eq(rdmig_source_create(&s, &cfg), 0);
	for (i = 0; i < NBLK; i++)
		ck_assert_int_ge(rdmig_source_add_block(s, names[i], src.host[i], sizes[i], PAGE), 0);
	ev.data.fd = rdmig_source_fd(s);
	ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_ADD, rdmig_source_fd(s), &ev), 0);
	rc = drive(ep, s, TIMED("source_connect_async",
				 rdmig_source_connect_async(s, tu_addr(), port)));
	ck_assert_msg(rc == 0, "connect: %s", rdmig_source_error(s));
	ck_assert_int_eq(rdmig_source_mark_all(s), 0);
	c.s = s;
	ck_assert_int_eq(pthread_create(&ct, NULL, cancel_thread, &c), 0);
	rc = drive(ep, s, TIMED("source_iterate_async", rdmig_source_iterate_async(s)));
	took = tu_now_ms() - c.at_ms;
	pthread_join(ct, NULL);
	pthread_join(dt, NULL);
	printf("trial: cancelled at %" PRIu64 " bytes landed (destination's count): %d %" PRIu64
	       " ms after the cancel, classes %d/%d; destination: %d, %" PRIu64 " bytes landed "
	       "at the end\n", c.dest_bytes, rc, took, rdmig_source_error_class(s), ds.cls,
	       ds.rc, ds.end.normal_bytes);
	fflush(stdout);
	ck_assert_int_eq(rc, -ECANCELED);
	ck_assert_uint_le(took, 200);
	ck_assert_uint_ge(c.dest_bytes, 8 * MiB);
	ck_assert_int_eq(rdmig_source_error_class(s), RDMIG_ERROR_CANCELLED);
	ck_assert_int_eq(ds.rc, -ECANCELED);
	ck_assert_int_eq(ds.cls, RDMIG_ERROR_CANCELLED);
	ck_assert_uint_ge(ds.end.normal_bytes, 8 * MiB);
	rdmig_source_destroy(s);
	rdmig_dest_destroy(ds.d);
	rdmig_listener_destroy(ds.l);
	unmap_blocks(&src);
	unmap_blocks(&ds.mem);
	close(ep);
}
END_TEST

void embed_trial_cases(Suite *s)
{
	TCase *tc = tu_case(s, "trial", 180);

	tcase_add_test(tc, vmm_trial);
	tcase_add_test(tc, vmm_trial_cancel);
}
