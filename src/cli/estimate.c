#include "estimate.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "workload.h"

#define PAGE 4096u
/* A sample long enough that freezing for its collect costs the workload
 * little, short enough that a workload sweeping a small working set does
 * not fill it within one sample (its rate would read low). */
#define SAMPLE_MS 250u
/* A link measured on less page data says more about setting up than
 * about the link. */
#define LINK_MIN_BYTES (1u << 20)

struct sampler {
	uint8_t **seen;          /* per block: a bit per page written so far */
	const uint64_t *lens;
	unsigned n;
	uint64_t ws;             /* bytes of the bits set */
};

struct round1 {
	struct rdmig_source *s;
	int rc;
	volatile bool done;
	uint64_t end_ms;         /* when it ended (cli_now_ms()) */
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static int mark(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	struct sampler *sp = ctx;
	uint64_t p, end;

	if (file >= sp->n || off > sp->lens[file] || len > sp->lens[file] - off)
		return -ERANGE;
	end = (off + len + PAGE - 1) / PAGE;
	for (p = off / PAGE; p < end; p++) {
		uint8_t bit = (uint8_t)(1u << (p % 8));

		if (!(sp->seen[file][p / 8] & bit)) {
			sp->seen[file][p / 8] |= bit;
			sp->ws += PAGE;
		}
	}
	return 0;
}

static void *run_round(void *arg)
{
	struct round1 *r = arg;

	r->rc = rdmig_source_iterate(r->s);
	r->end_ms = cli_now_ms();
	r->done = true;
	return NULL;
}

/* One sample: what the workload wrote since the last clear, then a clear;
 * frozen in between, as a round does it.  @bytes: what it wrote. */
static int sample(struct workload *w, struct sampler *sp, uint64_t *bytes, struct cli_err *err)
{
	int rc = wl_freeze(w, NULL, NULL, err);

	*bytes = 0;
	if (!rc && sp)
		rc = wl_collect_dirty(w, mark, sp, bytes, err);
	if (!rc)
		rc = wl_clear_dirty(w, err);
	wl_thaw(w);
	return rc;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return n ? v[n / 2] : 0;
}

/* Samples until @ms have passed since @t0 (or a signal); rates per sample
 * into @rates (room for @cap), the freeze-collect-clear times into
 * @costs. */
static int track(struct workload *w, struct sampler *sp, uint64_t t0, uint64_t ms,
		 uint64_t *rates, uint64_t *costs, unsigned cap, unsigned *n, struct cli_err *err)
{
	uint64_t last = t0;
	int rc;

	*n = 0;
	while (!interrupted && cli_now_ms() - t0 < ms) {
		uint64_t t1, t2, bytes, wait = SAMPLE_MS;

		if (cli_now_ms() - t0 + wait > ms)
			wait = ms - (cli_now_ms() - t0);
		usleep((useconds_t)(wait * 1000));
		t1 = cli_now_ms();
		rc = sample(w, sp, &bytes, err);
		if (rc)
			return rc;
		t2 = cli_now_ms();
		if (*n < cap && t2 > last) {
			rates[*n] = bytes * 1000 / (t2 - last);
			costs[*n] = t2 - t1;
			(*n)++;
		}
		last = t2;
	}
	return interrupted ? cli_err_set(err, -EINTR, "interrupted") : 0;
}

/* The first round's figures at the end: the link's rate, and how long the
 * whole round takes (measured, or at the rate it covered the image). */
static int link_figures(struct rdmig_source *s, uint64_t t0, const struct round1 *r,
			struct est_measure *m, struct cli_err *err)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	bool done = r->rc == 0;
	uint64_t wall = (done ? r->end_ms : cli_now_ms()) - t0, covered;

	rdmig_source_stats(s, &st);
	covered = st.normal_bytes + st.zero_pages * PAGE;
	if (st.normal_bytes < LINK_MIN_BYTES || !wall)
		return cli_err_set(err, -EAGAIN, "the link was not measured: %llu bytes of "
				   "page data moved in %llu ms; give --estimate more time",
				   (unsigned long long)st.normal_bytes, (unsigned long long)wall);
	m->link_rate = st.normal_bytes * 1000 / (st.data_time_ms ? st.data_time_ms : wall);
	m->first_round_done = done;
	m->first_round_ms = done || covered >= m->image ? wall :
			    (uint64_t)((double)wall * (double)m->image / (double)covered);
	return 0;
}

static int measure(struct rdmig_source *s, struct workload *w, struct sampler *sp,
		   const char *host, const char *port, uint64_t ms, struct est_measure *m,
		   struct cli_err *err)
{
	unsigned cap = (unsigned)(ms / SAMPLE_MS) + 2, n = 0;
	uint64_t *rates = calloc(cap, sizeof(*rates)), *costs = calloc(cap, sizeof(*costs));
	struct round1 r = { .s = s };
	pthread_t th;
	uint64_t t0, dummy;
	int rc;

	if (!rates || !costs) {
		rc = cli_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	rc = rdmig_source_connect(s, host, port);
	if (rc) {
		rc = cli_err_set(err, rc, "%s", rdmig_source_error(s));
		goto out;
	}
	m->connected = 1;
	/* Tracking starts from a clear, the workload frozen, as a first round
	 * does. */
	rc = sample(w, NULL, &dummy, err);
	if (rc)
		goto out;
	rdmig_source_mark_all(s);
	t0 = cli_now_ms();
	rc = pthread_create(&th, NULL, run_round, &r);
	if (rc) {
		rc = cli_err_set(err, -rc, "cannot start the first round: %s", strerror(rc));
		goto out;
	}
	rc = track(w, sp, t0, ms, rates, costs, cap, &n, err);
	if (!r.done)
		rdmig_source_cancel(s);
	pthread_join(th, NULL);
	if (!rc && r.rc && r.rc != -ECANCELED)
		rc = cli_err_set(err, r.rc, "the first round failed: %s",
				 rdmig_source_error(s));
	if (!rc && !n)
		rc = cli_err_set(err, -EAGAIN, "no sample taken; give --estimate more time");
	if (!rc)
		rc = link_figures(s, t0, &r, m, err);
	if (rc)
		goto out;
	m->duration_ms = cli_now_ms() - t0;
	m->samples = n;
	m->working_set = sp->ws;
	m->round_cost_ms = median(costs, n);
	m->dirty_rate = median(rates, n);
	m->dirty_min = rates[0];
	m->dirty_max = rates[n - 1];
out:
	free(rates);
	free(costs);
	return rc;
}

int est_measure(struct rdmig_source *s, struct workload *w, const uint64_t *lens, unsigned n,
		const char *host, const char *port, uint64_t ms, struct est_measure *m,
		struct cli_err *err)
{
	struct sampler sp = { .lens = lens, .n = n };
	struct sigaction sa = { .sa_handler = on_signal }, old[2];
	unsigned i;
	int rc = 0;

	memset(m, 0, sizeof(*m));
	sp.seen = calloc(n, sizeof(*sp.seen));
	for (i = 0; sp.seen && i < n; i++) {
		m->image += lens[i];
		sp.seen[i] = calloc(lens[i] / PAGE / 8 + 1, 1);
		if (!sp.seen[i])
			rc = -ENOMEM;
	}
	if (!sp.seen || rc) {
		rc = cli_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	/* A signal ends the tracking with the workload thawed, never between
	 * a freeze and its thaw. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old[0]);
	sigaction(SIGTERM, &sa, &old[1]);
	rc = measure(s, w, &sp, host, port, ms, m, err);
	sigaction(SIGINT, &old[0], NULL);
	sigaction(SIGTERM, &old[1], NULL);
out:
	for (i = 0; sp.seen && i < n; i++)
		free(sp.seen[i]);
	free(sp.seen);
	return rc;
}

static void report_json(const struct est_measure *m, const struct rdmig_config *cfg,
			const struct rdmig_forecast *f)
{
	struct json_object *o = cli_event("estimate");

	cli_json_u64(o, "duration", m->duration_ms);
	cli_json_u64(o, "samples", m->samples);
	cli_json_u64(o, "dirty-rate", m->dirty_rate);
	cli_json_u64(o, "dirty-rate-min", m->dirty_min);
	cli_json_u64(o, "dirty-rate-max", m->dirty_max);
	cli_json_u64(o, "dirty-pages-rate", m->dirty_rate / PAGE);
	cli_json_u64(o, "working-set", m->working_set);
	cli_json_u64(o, "round-cost", m->round_cost_ms);
	cli_json_u64(o, "link-rate", m->link_rate);
	cli_json_u64(o, "first-round-time", m->first_round_ms);
	json_object_object_add(o, "first-round-measured",
			       json_object_new_boolean(m->first_round_done));
	cli_json_u64(o, "total", m->image);
	json_object_object_add(o, "converges", json_object_new_boolean(f->within_limit));
	cli_json_str(o, "decision", cli_decision_name(f->decision));
	cli_json_str(o, "reason", cli_reason_name(f->reason));
	cli_json_u64(o, "rounds", f->rounds);
	cli_json_u64(o, "cpu-throttle-percentage", f->throttle_pct);
	cli_json_u64(o, "expected-downtime", f->downtime_ms);
	cli_json_u64(o, "expected-time", f->total_ms);
	cli_json_u64(o, "max-downtime", cfg->max_downtime_ms);
	if (cfg->switchover_bandwidth)
		cli_json_u64(o, "switchover-bandwidth", cfg->switchover_bandwidth);
	json_object_object_add(o, "auto-converge", json_object_new_boolean(cfg->auto_converge));
	cli_json_str(o, "text", f->text);
	cli_emit(o);
}

static void report_text(const struct est_measure *m, const struct rdmig_config *cfg,
			const struct rdmig_forecast *f)
{
	char ws[32], img[32];

	printf("estimate over %.1f s (%u samples):\n", (double)m->duration_ms / 1000.0,
	       m->samples);
	printf("  writes:  %.1f MB/s (median; %.1f to %.1f), working set %s\n",
	       (double)m->dirty_rate / 1e6, (double)m->dirty_min / 1e6,
	       (double)m->dirty_max / 1e6, cli_fmt_bytes(m->working_set, ws, sizeof(ws)));
	printf("  link:    %.1f MB/s; the first round of %s %s %.1f s\n",
	       (double)m->link_rate / 1e6, cli_fmt_bytes(m->image, img, sizeof(img)),
	       m->first_round_done ? "took" : "would take", (double)m->first_round_ms / 1000.0);
	printf("  with --max-downtime %u ms%s%s: %s\n", cfg->max_downtime_ms,
	       cfg->auto_converge ? " and --auto-converge" : "",
	       cfg->switchover_bandwidth ? ", the last pages at --switchover-bandwidth" : "",
	       f->text);
	if (!f->within_limit && !cfg->auto_converge)
		printf("  --auto-converge would throttle the workload until it fits, or add "
		       "bandwidth, or allow more downtime\n");
}

int est_report(const struct est_measure *m, const struct rdmig_config *cfg, int json)
{
	struct rdmig_forecast_in in = {
		.size = sizeof(in), .image_bytes = m->image, .bandwidth = m->link_rate,
		.first_round_ms = m->first_round_ms, .dirty_rate = m->dirty_rate,
		.working_set = m->working_set, .round_cost_ms = m->round_cost_ms,
	};
	struct rdmig_forecast f = { .size = sizeof(f) };
	struct cli_err err;

	if (rdmig_forecast(cfg, &in, &f, err.msg, sizeof(err.msg))) {
		cli_err("cannot forecast: %s", err.msg);
		return CLI_EX_INTERNAL;
	}
	if (json)
		report_json(m, cfg, &f);
	else
		report_text(m, cfg, &f);
	if (f.decision == RDMIG_GIVE_UP)
		return CLI_EX_GAVE_UP;
	return f.within_limit ? CLI_EX_OK : CLI_EX_OVER_LIMIT;
}
