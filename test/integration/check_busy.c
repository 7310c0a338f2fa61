/* Busy guests, from a VMM's side of rdmig(3): a source in this process
 * whose "guest" writes pages between and during rounds, with the dirty log
 * pushed (rdmig_source_mark_dirty() as pages are written) or pulled (the
 * dirty_sync callback hands the VMM's bitmap over), and a destination
 * thread that serves the migration with rdmig_dest_run().
 *
 * The guest pauses and the VMM completes without a last round of its own:
 * the destination must hold every page as of the pause, byte for byte.  A
 * guest that was not paused makes completion fail on both sides, saying
 * why, instead of succeeding with stale pages.  The figures after a round
 * (remaining, expected_downtime_ms) count what the guest wrote during it,
 * in the VMM's log or the library's.  A VMM that follows
 * rdmig_source_advice() with a guest that rewrites its image every round
 * throttles it until the migration fits the downtime, or, without
 * auto-converge, gives up on the stall. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdmig.h"
#include "suite.h"
#include "suites.h"
#include "testutil.h"

#define BUSY_PAGE 4096u
#define BUSY_MIB 8
#define LOG_BITS (sizeof(unsigned long) * 8)

/* The guest and the VMM's view of it. */
struct guest {
	uint8_t *ram;
	uint64_t len, npages;
	struct rdmig_source *s;
	bool pull;              /* the library pulls the log with dirty_sync */
	unsigned long *log;     /* the VMM's dirty log (pull), a bit per page */
	unsigned long *wrote;   /* the test's own record: pages written */
	pthread_mutex_t lock;   /* the log and the generator: a vCPU thread too */
	uint64_t x;
	unsigned syncs;
	unsigned runs_on;       /* pages it writes after each sync: not paused */
	atomic_bool stop;       /* the vCPU thread, when there is one */
};

struct dest_side {
	struct rdmig_listener *l;
	uint8_t *ram;
	uint64_t len;
	int rc;
	char err[512];
};

static uint64_t next(struct guest *g)
{
	g->x = g->x * 6364136223846793005ULL + 1442695040888963407ULL;
	return g->x >> 17;
}

/* The guest writes a page; the VMM's write tracking sees it. */
static void guest_write(struct guest *g)
{
	uint64_t page, seed;

	pthread_mutex_lock(&g->lock);
	page = next(g) % g->npages;
	seed = next(g);
	tu_fill_random(g->ram + page * BUSY_PAGE, BUSY_PAGE, seed);
	if (g->pull)
		g->log[page / LOG_BITS] |= 1ul << (page % LOG_BITS);
	g->wrote[page / LOG_BITS] |= 1ul << (page % LOG_BITS);
	pthread_mutex_unlock(&g->lock);
	if (!g->pull)
		ck_assert_int_eq(rdmig_source_mark_dirty(g->s, 0, page * BUSY_PAGE, BUSY_PAGE), 0);
}

static void guest_runs(struct guest *g, unsigned pages)
{
	while (pages--)
		guest_write(g);
}

/* rdmig(3), dirty_sync: the first sync is the whole image (QEMU's bitmap
 * starts all set), later ones hand over the log and clear it. */
static int pull_log(void *ctx, struct rdmig_source *s, char *err, size_t len)
{
	struct guest *g = ctx;
	int rc;

	(void)err;
	(void)len;
	pthread_mutex_lock(&g->lock);
	rc = g->syncs++ ? rdmig_source_mark_dirty_bitmap(s, 0, g->log, 0, g->npages) :
	     rdmig_source_mark_all(s);
	memset(g->log, 0, (g->npages + LOG_BITS - 1) / LOG_BITS * sizeof(*g->log));
	pthread_mutex_unlock(&g->lock);
	/* A guest that was not paused goes on writing. */
	if (!rc)
		guest_runs(g, g->runs_on);
	return rc;
}

static void *dest_thread(void *arg)
{
	struct dest_side *ds = arg;
	struct rdmig_config cfg;
	struct rdmig_dest *d;
	int rc;

	rdmig_config_init(&cfg);
	cfg.state = embed_drop_state;
	cfg.timeout_ms = 20000;
	rc = rdmig_dest_create(&d, &cfg);
	if (!rc)
		rc = rdmig_dest_add_block(d, "pc.ram", ds->ram, ds->len, 1) < 0 ? -EINVAL : 0;
	if (!rc)
		rc = rdmig_dest_accept(d, ds->l, 20000);
	if (!rc)
		rc = rdmig_dest_run(d);
	ds->rc = rc;
	snprintf(ds->err, sizeof(ds->err), "%s", rc ? rdmig_dest_error(d) : "");
	rdmig_dest_destroy(d);
	return NULL;
}

struct busy {
	struct guest g;
	struct dest_side ds;
	pthread_t dt;
	bool joined;
};

/* A destination thread listening, and a source connected to it whose
 * guest holds random data. */
static void busy_start_tuned(struct busy *b, bool pull, unsigned runs_on,
			     void (*tune)(struct rdmig_config *))
{
	struct rdmig_config cfg;
	char err[256], port[16];
	struct guest *g = &b->g;
	int rc;

	memset(b, 0, sizeof(*b));
	g->len = b->ds.len = (uint64_t)BUSY_MIB << 20;
	g->npages = g->len / BUSY_PAGE;
	g->pull = pull;
	g->runs_on = runs_on;
	g->x = 12345;
	pthread_mutex_init(&g->lock, NULL);
	g->ram = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	b->ds.ram = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			 0);
	g->log = calloc((g->npages + LOG_BITS - 1) / LOG_BITS, sizeof(*g->log));
	g->wrote = calloc((g->npages + LOG_BITS - 1) / LOG_BITS, sizeof(*g->wrote));
	ck_assert(g->ram != MAP_FAILED && b->ds.ram != MAP_FAILED && g->log && g->wrote);
	tu_fill_random(g->ram, g->len, 99);
	ck_assert_int_eq(rdmig_listener_create(&b->ds.l, tu_addr(), "0", err, sizeof(err)), 0);
	snprintf(port, sizeof(port), "%d", rdmig_listener_port(b->ds.l));
	ck_assert_int_eq(pthread_create(&b->dt, NULL, dest_thread, &b->ds), 0);
	rdmig_config_init(&cfg);
	cfg.timeout_ms = 20000;
	if (pull) {
		cfg.dirty_sync = pull_log;
		cfg.dirty_ctx = g;
	}
	if (tune)
		tune(&cfg);
	ck_assert_int_eq(rdmig_source_create(&g->s, &cfg), 0);
	ck_assert_int_ge(rdmig_source_add_block(g->s, "pc.ram", g->ram, g->len, BUSY_PAGE), 0);
	rc = rdmig_source_connect(g->s, tu_addr(), port);
	ck_assert_msg(rc == 0, "connect: %s", rdmig_source_error(g->s));
	if (!pull)
		ck_assert_int_eq(rdmig_source_mark_all(g->s), 0);
}

static void busy_start(struct busy *b, bool pull, unsigned runs_on)
{
	busy_start_tuned(b, pull, runs_on, NULL);
}

/* The destination's outcome. */
static void busy_join(struct busy *b)
{
	if (!b->joined)
		pthread_join(b->dt, NULL);
	b->joined = true;
}

/* Pages of the destination that differ from the source's. */
static uint64_t stale_pages(const struct busy *b)
{
	uint64_t n = 0, p;

	for (p = 0; p < b->g.npages; p++)
		n += memcmp(b->g.ram + p * BUSY_PAGE, b->ds.ram + p * BUSY_PAGE, BUSY_PAGE) != 0;
	return n;
}

static void busy_end(struct busy *b)
{
	busy_join(b);
	rdmig_source_destroy(b->g.s);
	rdmig_listener_destroy(b->ds.l);
	munmap(b->g.ram, b->g.len);
	munmap(b->ds.ram, b->ds.len);
	free(b->g.log);
	free(b->g.wrote);
	pthread_mutex_destroy(&b->g.lock);
}

/* ---- completion ----------------------------------------------------------------- */

/* One round, then 300 pages written, then the guest pauses and the VMM
 * completes at once: what it wrote must be on the destination. */
static void complete_after_pause(bool pull)
{
	struct busy b;
	uint64_t stale;
	int rc;

	busy_start(&b, pull, 0);
	rc = rdmig_source_iterate(b.g.s);
	ck_assert_msg(rc == 0, "iterate: %s", rdmig_source_error(b.g.s));
	guest_runs(&b.g, 300);
	/* The guest pauses here; no round of the VMM's own. */
	rc = rdmig_source_complete(b.g.s);
	busy_join(&b);
	stale = stale_pages(&b);
	printf("complete (%s): source %d (%s), destination %d (%s), %llu stale pages of %llu\n",
	       pull ? "pull" : "push", rc, rc ? rdmig_source_error(b.g.s) : "ok", b.ds.rc,
	       b.ds.rc ? b.ds.err : "ok", (unsigned long long)stale,
	       (unsigned long long)b.g.npages);
	fflush(stdout);
	ck_assert_msg(rc == 0, "complete: %s", rdmig_source_error(b.g.s));
	ck_assert_msg(b.ds.rc == 0, "destination: %s", b.ds.err);
	ck_assert_msg(stale == 0, "both sides succeeded with %llu pages stale on the "
		      "destination", (unsigned long long)stale);
	busy_end(&b);
}

START_TEST(complete_sends_what_was_pushed)
{
	complete_after_pause(false);
}
END_TEST

START_TEST(complete_pulls_the_log)
{
	complete_after_pause(true);
}
END_TEST

/* A vCPU that was not paused: it writes (and its writes are marked) until
 * told to stop. */
static void *vcpu(void *arg)
{
	struct guest *g = arg;

	while (!atomic_load(&g->stop)) {
		guest_write(g);
		usleep(200);
	}
	return NULL;
}

/* The VMM forgot to pause its guest: completion must not report success
 * with pages the destination never got. */
static void complete_while_running(bool pull)
{
	struct busy b;
	pthread_t t;
	const char *msg;
	int rc;

	busy_start(&b, pull, pull ? 50 : 0);
	rc = rdmig_source_iterate(b.g.s);
	ck_assert_msg(rc == 0, "iterate: %s", rdmig_source_error(b.g.s));
	if (!pull)
		ck_assert_int_eq(pthread_create(&t, NULL, vcpu, &b.g), 0);
	guest_runs(&b.g, 300);
	rc = rdmig_source_complete(b.g.s);
	if (!pull) {
		atomic_store(&b.g.stop, true);
		pthread_join(t, NULL);
	}
	busy_join(&b);
	msg = rdmig_source_error(b.g.s);
	printf("complete while the guest runs (%s): source %d (%s), destination %d (%s), "
	       "%llu stale pages\n", pull ? "pull" : "push", rc, rc ? msg : "ok", b.ds.rc,
	       b.ds.rc ? b.ds.err : "ok", (unsigned long long)stale_pages(&b));
	fflush(stdout);
	ck_assert_msg(rc == -EBUSY, "complete returned %d (%s), not -EBUSY", rc, msg);
	ck_assert_msg(strstr(msg, "pause"), "the message does not say to pause: %s", msg);
	ck_assert_msg(b.ds.rc < 0, "the destination succeeded");
	ck_assert_int_eq(rdmig_source_error_class(b.g.s), RDMIG_ERROR_LOCAL);
	busy_end(&b);
}

START_TEST(complete_refuses_a_running_guest_push)
{
	complete_while_running(false);
}
END_TEST

START_TEST(complete_refuses_a_running_guest_pull)
{
	complete_while_running(true);
}
END_TEST

/* ---- the figures after a round ----------------------------------------------------- */

static unsigned popcount_log(const unsigned long *log, uint64_t npages)
{
	uint64_t i;
	unsigned n = 0;

	for (i = 0; i < (npages + LOG_BITS - 1) / LOG_BITS; i++)
		n += (unsigned)__builtin_popcountl(log[i]);
	return n;
}

/* The log pulled (dirty_sync): the guest writes while a round runs, from
 * the VMM's loop between steps.  When the round is done, the statistics
 * count what it wrote (the VMM's log holds it, not the library's), and
 * the expected downtime is that at the round's bandwidth. */
START_TEST(figures_after_a_round_pull)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	struct pollfd pfd;
	struct busy b;
	uint64_t steps = 0, bw, want, wrote;
	unsigned in_log;
	int rc;

	busy_start(&b, true, 0);
	pfd = (struct pollfd){ .fd = rdmig_source_fd(b.g.s), .events = POLLIN };
	rc = rdmig_source_iterate_async(b.g.s);
	while (rc == 0) {
		/* Two pages a step, as the guest runs. */
		guest_runs(&b.g, 2);
		poll(&pfd, 1, rdmig_source_timeout(b.g.s));
		rc = rdmig_source_process(b.g.s);
		steps++;
	}
	ck_assert_msg(rc == 1, "iterate: %s", rdmig_source_error(b.g.s));
	pthread_mutex_lock(&b.g.lock);
	wrote = (uint64_t)popcount_log(b.g.wrote, b.g.npages) * BUSY_PAGE;
	in_log = popcount_log(b.g.log, b.g.npages);
	pthread_mutex_unlock(&b.g.lock);
	rdmig_source_stats(b.g.s, &st);
	bw = st.last_iter_ms ? st.last_iter_bytes * 1000 / st.last_iter_ms : 0;
	want = bw ? st.remaining * 1000 / bw : 0;
	printf("figures (pull): %llu steps, the guest wrote %llu bytes, %u pages still in the "
	       "VMM's log; remaining %llu, expected downtime %llu ms (round: %llu bytes in %llu "
	       "ms)\n", (unsigned long long)steps, (unsigned long long)wrote, in_log,
	       (unsigned long long)st.remaining, (unsigned long long)st.expected_downtime_ms,
	       (unsigned long long)st.last_iter_bytes, (unsigned long long)st.last_iter_ms);
	fflush(stdout);
	ck_assert_uint_ge(steps, 10);
	/* The library took the log when the round ended, and counts all the
	 * guest wrote meanwhile. */
	ck_assert_uint_eq(in_log, 0);
	ck_assert_uint_eq(st.remaining, wrote);
	ck_assert_uint_gt(st.expected_downtime_ms, 0);
	ck_assert_uint_eq(st.expected_downtime_ms, want);
	ck_assert_int_eq(rdmig_source_iterate(b.g.s), 0);
	ck_assert_int_eq(rdmig_source_complete(b.g.s), 0);
	busy_join(&b);
	ck_assert_int_eq(b.ds.rc, 0);
	ck_assert_uint_eq(stale_pages(&b), 0);
	busy_end(&b);
}
END_TEST

/* ---- the advice --------------------------------------------------------------------- */

/* A guest that rewrites its whole image in a round: 256 pages (1 MiB)
 * between two steps, when its vCPUs get all their time. */
#define HEAVY_PAGES 256
/* Below what rewriting 8 MiB a round leaves at the bed's 20-60 MB/s. */
#define TIGHT_DOWNTIME_MS 50

/* rdmig(3), Convergence: after each iteration, ask; go on, throttle the
 * guest (its vCPUs get 100 - throttle_pct percent of their time, so it
 * writes that share of its pages), or stop there.  The figures of the
 * advice are those of the statistics.  The last advice in @a. */
static int vmm_rounds(struct busy *b, struct rdmig_advice *a, unsigned *rounds,
		      unsigned *first_throttle)
{
	struct pollfd pfd = { .fd = rdmig_source_fd(b->g.s), .events = POLLIN };
	struct rdmig_stats st = { .size = sizeof(st) };
	unsigned throttle = 0;
	int rc;

	for (*rounds = 1; *rounds <= 40; (*rounds)++) {
		rc = rdmig_source_iterate_async(b->g.s);
		while (rc == 0) {
			guest_runs(&b->g, HEAVY_PAGES * (100 - throttle) / 100);
			poll(&pfd, 1, rdmig_source_timeout(b->g.s));
			rc = rdmig_source_process(b->g.s);
		}
		if (rc < 0)
			return rc;
		a->size = sizeof(*a);
		rc = rdmig_source_advice(b->g.s, a);
		if (rc)
			return rc;
		rdmig_source_stats(b->g.s, &st);
		printf("advice after round %u: %u (reason %u), throttle %u %%, remaining %llu "
		       "(stats %llu), downtime %llu ms (stats %llu): %s\n", *rounds, a->decision,
		       a->reason, a->throttle_pct, (unsigned long long)a->remaining,
		       (unsigned long long)st.remaining,
		       (unsigned long long)a->expected_downtime_ms,
		       (unsigned long long)st.expected_downtime_ms, a->text);
		ck_assert_uint_eq(a->iteration, *rounds);
		ck_assert_uint_eq(a->remaining, st.remaining);
		ck_assert_uint_eq(a->expected_downtime_ms, st.expected_downtime_ms);
		if (a->decision == RDMIG_THROTTLE && !throttle)
			*first_throttle = a->throttle_pct;
		throttle = a->throttle_pct;
		if (a->decision != RDMIG_NEXT_ROUND && a->decision != RDMIG_THROTTLE)
			return 0;
	}
	return -ETIMEDOUT;
}

/* The heavy guest over a source tuned by @tune, up to the advice that
 * ends the rounds. */
static void heavy_rounds(struct busy *b, void (*tune)(struct rdmig_config *),
			 struct rdmig_advice *a, unsigned *first_throttle)
{
	unsigned rounds = 0;
	int rc;

	busy_start_tuned(b, true, 0, tune);
	rc = vmm_rounds(b, a, &rounds, first_throttle);
	fflush(stdout);
	ck_assert_msg(rc == 0, "rounds: %d %s", rc, rdmig_source_error(b->g.s));
	ck_assert_msg(a->decision == RDMIG_SWITCH_OVER || a->decision == RDMIG_GIVE_UP,
		      "after %u rounds: %s", rounds, a->text);
}

static void heavy_auto_converge(struct rdmig_config *cfg)
{
	cfg->max_downtime_ms = TIGHT_DOWNTIME_MS;
	cfg->auto_converge = 1;
}

/* The guest dirties its image faster than the link drains it: the advice
 * throttles it, QEMU's way, until what is left fits the downtime, then
 * says switch over; the VMM pauses and completes, and the destination
 * holds every page. */
START_TEST(advice_throttles_until_it_fits)
{
	struct rdmig_advice a;
	unsigned first = 0;
	struct busy b;

	heavy_rounds(&b, heavy_auto_converge, &a, &first);
	ck_assert_msg(a.decision == RDMIG_SWITCH_OVER, "%s", a.text);
	ck_assert_int_eq(a.reason, RDMIG_REASON_CONVERGED);
	ck_assert_uint_le(a.expected_downtime_ms, TIGHT_DOWNTIME_MS);
	ck_assert_uint_eq(first, 20);
	ck_assert_uint_gt(a.throttle_pct, 20);
	/* The guest pauses; completion sends what is left. */
	ck_assert_int_eq(rdmig_source_complete(b.g.s), 0);
	busy_join(&b);
	ck_assert_int_eq(b.ds.rc, 0);
	ck_assert_uint_eq(stale_pages(&b), 0);
	busy_end(&b);
}
END_TEST

static void heavy_no_throttle(struct rdmig_config *cfg)
{
	cfg->max_downtime_ms = TIGHT_DOWNTIME_MS;
	cfg->stall_rounds = 3;
}

/* The same guest without auto-converge: the rounds stop shrinking, the
 * advice gives up saying so, and the VMM cancels; the destination hears
 * of it. */
START_TEST(advice_gives_up_on_a_stall)
{
	struct rdmig_advice a;
	unsigned first = 0;
	struct busy b;

	heavy_rounds(&b, heavy_no_throttle, &a, &first);
	ck_assert_msg(a.decision == RDMIG_GIVE_UP, "%s", a.text);
	ck_assert_int_eq(a.reason, RDMIG_REASON_STALL);
	ck_assert_uint_gt(a.expected_downtime_ms, TIGHT_DOWNTIME_MS);
	ck_assert_ptr_nonnull(strstr(a.text, "giving up"));
	ck_assert_uint_eq(first, 0);
	rdmig_source_cancel(b.g.s);
	ck_assert_int_eq(rdmig_source_process(b.g.s), -ECANCELED);
	busy_join(&b);
	ck_assert_msg(b.ds.rc < 0, "the destination did not hear of the cancel");
	busy_end(&b);
}
END_TEST

void embed_busy_cases(Suite *s)
{
	TCase *tc = tu_case(s, "busy", 120);

	tcase_add_test(tc, complete_sends_what_was_pushed);
	tcase_add_test(tc, complete_pulls_the_log);
	tcase_add_test(tc, complete_refuses_a_running_guest_push);
	tcase_add_test(tc, complete_refuses_a_running_guest_pull);
	tcase_add_test(tc, figures_after_a_round_pull);
	tcase_add_test(tc, advice_throttles_until_it_fits);
	tcase_add_test(tc, advice_gives_up_on_a_stall);
}
