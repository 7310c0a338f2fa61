/* migrate-send: pushes RAM files (and a state file) to a migrate-recv over
 * RDMA, cold or live.  Live: pre-copy while a process keeps writing its
 * mappings of the files, tracked with soft-dirty bits, then SIGSTOP it for
 * the last round.  With --qmp the workload is a QEMU guest: its shared RAM
 * backends are the blocks, the guest is paused with QMP stop for the last
 * round, and QEMU's own migration streams the device state into rdmig's
 * state stream.  See migrate-send(1). */
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "cli.h"
#include "opts.h"
#include "control.h"
#include "qmp.h"
#include "rdmig.h"
#include "vmstate.h"
#include "workload.h"

#define PAGE 4096u

static const char usage_text[] =
	"usage: migrate-send --connect HOST:PORT (--ram NAME=PATH... | --qmp SOCK) [options]\n"
	"\n"
	"Sends RAM files (and device state) to migrate-recv over RDMA.\n"
	"\n"
	"  -c, --connect HOST:PORT   the destination's migrate-recv ([V6ADDR]:PORT for IPv6)\n"
	"  -r, --ram NAME=PATH       a RAM block NAME backed by the file PATH (repeatable)\n"
	"  -s, --state-in FILE|-     device state to send after the memory\n"
	"      --pin-all             register whole blocks up front on both sides\n"
	"      --chunk-size SIZE     registration unit, power of two (default 1M)\n"
	"      --pinned-cap SIZE     dynamic registration: bytes pinned at most (default 256M; 0: none)\n"
	"      --channels N          stripe the writes over N connections, 1..64 (default 1)\n"
	"      --live                pre-copy while --pid keeps running, then stop it\n"
	"  -p, --pid PID             the process writing the RAM files (with --live)\n"
	"  -q, --qmp SOCK            migrate the QEMU guest whose QMP socket this is, live:\n"
	"                            its shared RAM backends and its device state\n"
	"      --max-downtime MS     stop the process once the rest fits in MS (default 300)\n"
	"      --max-iterations N    at most N rounds while it runs (default 30)\n"
	"      --max-bandwidth RATE  bytes per second at most, K/M/G suffixes (default 0: no limit)\n"
	"      --verify              compare digests of every block at the end\n"
	"      --auth-key FILE       shared key file; the destination must hold the same key\n"
	"      --trusted-fabric      allow --qmp without --auth-key: whatever answers at\n"
	"                            HOST:PORT then receives the guest\n"
	"  -j, --json                JSON events on stdout, one per line\n"
	"      --control SOCK        control socket (status, cancel, set)\n"
	"  -t, --timeout S           bound on every wait for the peer (default 30)\n"
	"  -v, --verbose             log what the library does\n"
	"  -V, --version             print the version and exit\n"
	"  -h, --help                print this help and exit\n"
	"\n"
	"SIZE and RATE take K, M, G, T suffixes (powers of 1024).\n";

enum {
	OPT_PIN_ALL = 256, OPT_CHUNK, OPT_CAP, OPT_LIVE, OPT_MAX_DOWNTIME,
	OPT_MAX_ITER, OPT_MAX_BW, OPT_CONTROL, OPT_VERIFY, OPT_AUTH_KEY, OPT_CHANNELS,
	OPT_TRUSTED,
};

static const struct option long_opts[] = {
	{ "connect", required_argument, NULL, 'c' },
	{ "ram", required_argument, NULL, 'r' },
	{ "state-in", required_argument, NULL, 's' },
	{ "pin-all", no_argument, NULL, OPT_PIN_ALL },
	{ "chunk-size", required_argument, NULL, OPT_CHUNK },
	{ "pinned-cap", required_argument, NULL, OPT_CAP },
	{ "channels", required_argument, NULL, OPT_CHANNELS },
	{ "live", no_argument, NULL, OPT_LIVE },
	{ "pid", required_argument, NULL, 'p' },
	{ "qmp", required_argument, NULL, 'q' },
	{ "max-downtime", required_argument, NULL, OPT_MAX_DOWNTIME },
	{ "max-iterations", required_argument, NULL, OPT_MAX_ITER },
	{ "max-bandwidth", required_argument, NULL, OPT_MAX_BW },
	{ "json", no_argument, NULL, 'j' },
	{ "control", required_argument, NULL, OPT_CONTROL },
	{ "verify", no_argument, NULL, OPT_VERIFY },
	{ "auth-key", required_argument, NULL, OPT_AUTH_KEY },
	{ "trusted-fabric", no_argument, NULL, OPT_TRUSTED },
	{ "timeout", required_argument, NULL, 't' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "version", no_argument, NULL, 'V' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

struct send_opts {
	char host[256], port[16];
	int have_addr;
	struct cli_ram *rams;
	unsigned nrams;
	const char *state_in, *qmp;
	int pin_all, live, json, verbose;
	uint64_t chunk_size, pinned_cap, timeout_s;
	int have_chunk, have_cap;
	pid_t pid;
	uint64_t max_downtime_ms, max_iterations, max_bandwidth, channels;
	const char *control;
	int verify, trusted;
	uint8_t *key;
	size_t key_len;
};

/* What the control socket reports as "status". */
enum send_status {
	ST_SETUP, ST_ACTIVE, ST_DEVICE, ST_COMPLETED, ST_FAILED, ST_CANCELLING, ST_CANCELLED,
};
static const char *const status_names[] = {
	[ST_SETUP] = "setup", [ST_ACTIVE] = "active", [ST_DEVICE] = "device",
	[ST_COMPLETED] = "completed", [ST_FAILED] = "failed", [ST_CANCELLING] = "cancelling",
	[ST_CANCELLED] = "cancelled",
};

struct sender {
	struct send_opts o;
	struct rdmig_source *s;
	struct qmp *q;          /* --qmp */
	struct workload *wl;    /* --live or --qmp */
	struct vmstate *vms;    /* --qmp: QEMU saving its device state */
	void *state;
	size_t state_len;
	struct cli_bar bar;

	/* Shared with the control and signal threads. */
	atomic_uint_fast64_t max_bandwidth;
	atomic_uint_fast64_t max_downtime;
	atomic_int status;
	atomic_bool cancelled;
	atomic_uint_fast64_t downtime_ms;

	uint64_t stop_ms;       /* when the workload was last stopped */
	/* The downtime's parts (ms): stopping and the last scan, the last
	 * round, the device state, the destination's confirmation. */
	uint64_t dt_stop, dt_round, dt_state, dt_confirm;
	bool resumed;           /* after a failure: the workload runs again */
	char resume_err[512];   /* ... or why it could not */

	/* progress bar of the current iteration */
	uint64_t iter_base, iter_planned, iter_t0, bar_ms;

	/* last iteration, for convergence and the events */
	uint64_t last_bytes, last_ms, bw;     /* bw: bytes per second */
	uint64_t switch_ms;     /* --qmp: the switch-over's own cost, estimated */

	struct ev_loop *ctl_loop;
	ev_async ctl_stop;
	struct ctl_server *ctl;
	pthread_t ctl_thread, sig_thread;
	bool ctl_running;
	/* Held by the signal thread while it cancels, and by main while it
	 * destroys the source. */
	pthread_mutex_t sig_lock;
};

/* ---- command line ---------------------------------------------------- */

static int one_opt(void *opts, int c, const char *arg)
{
	struct send_opts *o = opts;
	uint64_t v;
	int rc = 0;

	switch (c) {
	case 'c':
		o->have_addr = 1;
		return cli_opt_addr(arg, o->host, sizeof(o->host), o->port, sizeof(o->port));
	case 'r': return cli_opt_ram(&o->rams, &o->nrams, arg, 0);
	case 's': o->state_in = arg; return 0;
	case 'q': o->qmp = arg; return 0;
	case OPT_PIN_ALL: o->pin_all = 1; return 0;
	case OPT_CHUNK:
		o->have_chunk = 1;
		rc = cli_opt_size("--chunk-size", arg, &o->chunk_size);
		if (!rc && (o->chunk_size > (1u << 30) || o->chunk_size < 4096 ||
			    (o->chunk_size & (o->chunk_size - 1))))
			rc = cli_usage("bad --chunk-size '%s': expected a power of two from 4K to 1G",
				       arg);
		return rc;
	case OPT_CAP: o->have_cap = 1; return cli_opt_size("--pinned-cap", arg, &o->pinned_cap);
	case OPT_CHANNELS: return cli_opt_num("--channels", arg, 1, 64, &o->channels);
	case OPT_LIVE: o->live = 1; return 0;
	case 'p':
		rc = cli_opt_num("--pid", arg, 1, INT32_MAX, &v);
		o->pid = (pid_t)v;
		return rc;
	case OPT_MAX_DOWNTIME:
		return cli_opt_num("--max-downtime", arg, 0, 3600000, &o->max_downtime_ms);
	case OPT_MAX_ITER: return cli_opt_num("--max-iterations", arg, 1, 100000, &o->max_iterations);
	case OPT_MAX_BW: return cli_opt_size("--max-bandwidth", arg, &o->max_bandwidth);
	case 'j': o->json = 1; return 0;
	case OPT_CONTROL: o->control = arg; return 0;
	case OPT_VERIFY: o->verify = 1; return 0;
	case OPT_AUTH_KEY: return cli_opt_key(&o->key, &o->key_len, arg);
	case OPT_TRUSTED: o->trusted = 1; return 0;
	case 't': return cli_opt_num("--timeout", arg, 1, 86400, &o->timeout_s);
	case 'v': o->verbose = 1; return 0;
	default: return CLI_EX_INTERNAL;
	}
}

/* Returns -1 to go on, or the exit code. */
static int parse_args(struct send_opts *o, int argc, char **argv)
{
	static const struct cli_cmd cmd = { "c:r:s:p:q:jt:vVh", long_opts, usage_text, one_opt };
	int rc;

	o->timeout_s = 30;
	o->channels = 1;
	o->max_downtime_ms = 300;
	o->max_iterations = 30;
	rc = cli_getopt(&cmd, o, argc, argv);
	if (rc >= 0)
		return rc;
	if (!o->have_addr)
		return cli_usage("--connect HOST:PORT is required");
	if (!o->nrams && !o->qmp)
		return cli_usage("at least one --ram NAME=PATH (or --qmp SOCK) is required");
	if (o->qmp && (o->pid || o->state_in))
		return cli_usage("--qmp takes the pid and the device state from QEMU: drop %s",
				 o->pid ? "--pid" : "--state-in");
	/* Without a key, whoever answers at HOST:PORT gets the guest's memory
	 * and device state. */
	if (o->qmp && !o->key && !o->trusted)
		return cli_usage("--qmp without --auth-key would hand the guest to whatever answers "
				 "at %s:%s: give --auth-key FILE (the destination's key), or "
				 "--trusted-fabric if nobody else can reach that address", o->host,
				 o->port);
	if (o->qmp)
		o->live = 1;
	if (o->live && !o->pid && !o->qmp)
		return cli_usage("--live needs --pid PID (the process writing the RAM files)");
	if (o->pid && !o->live)
		return cli_usage("--pid is only used with --live");
	if (o->state_in && !strcmp(o->state_in, "-") && isatty(0))
		return cli_usage("--state-in -: standard input is a terminal");
	return -1;
}

/* ---- preparation --------------------------------------------------------- */

static int read_all(int fd, void **out, size_t *outlen)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap), *nb;
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (len == cap) {
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			n = -errno;
			free(buf);
			return (int)n;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*out = buf;
	*outlen = len;
	return 0;
}

static int load_state(struct sender *x)
{
	const char *path = x->o.state_in;
	int fd, rc;

	if (!path)
		return 0;
	fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
	if (fd < 0)
		return cli_usage("cannot open state file %s: %s", path, strerror(errno));
	rc = read_all(fd, &x->state, &x->state_len);
	if (fd)
		close(fd);
	if (rc)
		return cli_usage("cannot read state file %s: %s", path, strerror(-rc));
	return 0;
}

static int map_rams(struct sender *x)
{
	char err[512];
	unsigned i;

	for (i = 0; i < x->o.nrams; i++)
		if (cli_ram_map_ro(&x->o.rams[i], err, sizeof(err)))
			return cli_usage("--ram %s: %s", x->o.rams[i].name, err);
	return 0;
}

/* --qmp without --ram: the guest's RAM backends are the blocks, named by
 * their ids as QEMU names the RAMBlocks.  RAM that is not shared would
 * not be skipped by x-ignore-shared: refused before anything is sent. */
static int discover_blocks(struct sender *x)
{
	struct qmp_backend *b = NULL;
	char err[1024];
	size_t n = 0, i;
	int rc;

	rc = qmp_backends(x->q, &b, &n, err, sizeof(err));
	if (!rc)
		rc = qmp_guest_ram_shared(x->q, b, n, err, sizeof(err));
	for (i = 0; !rc && i < n; i++) {
		struct cli_ram *r;

		if (!b[i].in_guest)
			continue;
		r = realloc(x->o.rams, (x->o.nrams + 1) * sizeof(*r));
		if (!r) {
			rc = -ENOMEM;
			snprintf(err, sizeof(err), "out of memory");
			break;
		}
		x->o.rams = r;
		r = &r[x->o.nrams++];
		memset(r, 0, sizeof(*r));
		snprintf(r->name, sizeof(r->name), "%s", b[i].id);
		snprintf(r->path, sizeof(r->path), "%s", b[i].path);
	}
	free(b);
	if (!rc && !x->o.nrams)
		return cli_usage("--qmp %s: QEMU has no guest RAM in a shared memory backend",
				 x->o.qmp);
	return rc ? cli_usage("--qmp %s: %s", x->o.qmp, err) : 0;
}

static int open_qemu(struct sender *x)
{
	char err[1024];

	if (!x->o.qmp)
		return 0;
	if (qmp_open(&x->q, x->o.qmp, (int)(x->o.timeout_s * 1000), err, sizeof(err)))
		return cli_usage("--qmp %s: %s", x->o.qmp, err);
	x->o.pid = qmp_pid(x->q);
	if (!x->o.pid)
		return cli_usage("--qmp %s: QEMU runs in another pid namespace: its writes "
				 "cannot be tracked from here", x->o.qmp);
	return x->o.nrams ? 0 : discover_blocks(x);
}

static int open_workload(struct sender *x)
{
	struct proc_ref own = PROC_REF_INIT;
	const struct proc_ref *proc = &own;
	const char **paths;
	uint64_t *lens;
	char err[1024];
	unsigned i;
	int rc;

	if (!x->o.live)
		return 0;
	/* Held by identity from here on: a pid reused by another process must
	 * not get our SIGSTOPs (proc.h). */
	if (x->q)
		proc = qmp_proc(x->q);
	else if (proc_open(&own, x->o.pid, err, sizeof(err)))
		return cli_usage("--pid %d: %s", (int)x->o.pid, err);
	paths = calloc(x->o.nrams, sizeof(*paths));
	lens = calloc(x->o.nrams, sizeof(*lens));
	rc = paths && lens ? 0 : -ENOMEM;
	for (i = 0; !rc && i < x->o.nrams; i++) {
		paths[i] = x->o.rams[i].path;
		lens[i] = x->o.rams[i].len;
	}
	if (!rc)
		rc = wl_open(&x->wl, proc, x->q, paths, lens, x->o.nrams,
			     (int)(x->o.timeout_s * 1000), err, sizeof(err));
	proc_close(&own);
	free(paths);
	free(lens);
	if (rc == -ENOMEM)
		return cli_usage("out of memory");
	return rc ? cli_usage("cannot track the writes of %s %d: %s", x->q ? "QEMU" :
			      "process", (int)x->o.pid, err) : 0;
}

static void on_progress(void *ctx, const struct rdmig_stats *st);

static int create_source(struct sender *x)
{
	struct rdmig_config cfg;
	unsigned i;
	int rc;

	rdmig_config_init(&cfg);
	cfg.pin_all = x->o.pin_all;
	cfg.timeout_ms = (int)(x->o.timeout_s * 1000);
	cfg.verify = x->o.verify;
	cfg.channels = (uint32_t)x->o.channels;
	cfg.auth_key = x->o.key;
	cfg.auth_key_len = x->o.key_len;
	if (x->o.have_chunk)
		cfg.chunk_size = (uint32_t)x->o.chunk_size;
	if (x->o.have_cap)
		cfg.pinned_cap = x->o.pinned_cap;
	cfg.log = cli_log;
	cfg.log_ctx = &x->bar;
	cfg.log_level = x->o.verbose ? RDMIG_LOG_INFO : RDMIG_LOG_WARN;
	cfg.progress = on_progress;
	cfg.progress_ctx = x;
	cfg.progress_ms = 100;
	cfg.max_bandwidth = x->o.max_bandwidth;
	rc = rdmig_source_create(&x->s, &cfg);
	if (rc)
		return cli_usage("%s", x->s ? rdmig_source_error(x->s) : strerror(-rc));
	for (i = 0; i < x->o.nrams; i++) {
		rc = rdmig_source_add_block(x->s, x->o.rams[i].name, x->o.rams[i].host,
					    x->o.rams[i].len, PAGE);
		if (rc < 0)
			return cli_usage("--ram %s: %s", x->o.rams[i].name,
					 rdmig_source_error(x->s));
	}
	return 0;
}

/* ---- progress (library callback, main thread) ------------------------------ */

static void draw_bar(struct sender *x, const struct rdmig_stats *st)
{
	uint64_t done = st->normal_bytes - x->iter_base, ms = cli_now_ms() - x->iter_t0;

	if (done + st->remaining > x->iter_planned)
		x->iter_planned = done + st->remaining;
	if (!x->bar.enabled || cli_now_ms() - x->bar_ms < 100)
		return;
	x->bar_ms = cli_now_ms();
	cli_bar_draw(&x->bar, x->iter_planned ? (double)done / (double)x->iter_planned : 0,
		     ms ? (double)done * 1000.0 / (double)ms : 0, st->iterations + 1);
}

static void on_progress(void *ctx, const struct rdmig_stats *st)
{
	struct sender *x = ctx;

	draw_bar(x, st);
}

/* ---- the workload: stop, continue, dirty pages ----------------------------- */

struct failure {
	enum cli_phase phase;
	bool local;             /* not the library's: the workload or its tracking */
	int rc;
	char msg[1100];
};

static int lib_fail(struct sender *x, struct failure *f, int rc, enum cli_phase phase)
{
	f->rc = rc;
	f->phase = phase;
	snprintf(f->msg, sizeof(f->msg), "%s", rc == -ECANCELED ? "cancelled" :
		 rdmig_source_error(x->s));
	return rc;
}

static int local_fail(struct failure *f, int rc, const char *msg)
{
	f->rc = rc;
	f->phase = CLI_PHASE_TRANSFER;
	f->local = true;
	snprintf(f->msg, sizeof(f->msg), "%s", msg);
	return rc ? rc : -EIO;
}

static int check_cancel(struct sender *x, struct failure *f)
{
	return atomic_load(&x->cancelled) ? local_fail(f, -ECANCELED, "cancelled") : 0;
}

static int poll_source(void *ctx)
{
	struct sender *x = ctx;

	return rdmig_source_poll(x->s);
}

static int freeze_workload(struct sender *x, struct failure *f)
{
	char err[1024] = "";
	int rc;

	x->stop_ms = cli_now_ms();
	rc = wl_freeze(x->wl, poll_source, x, err, sizeof(err));
	if (rc && !err[0])
		return lib_fail(x, f, rc, CLI_PHASE_TRANSFER);
	return rc ? local_fail(f, rc, err) : 0;
}

static int mark_range(void *ctx, unsigned block, uint64_t off, uint64_t len)
{
	struct sender *x = ctx;

	return rdmig_source_mark_dirty(x->s, block, off, len);
}

/* With the workload stopped: marks what it wrote since the last clear. */
static int collect_dirty(struct sender *x, uint64_t *bytes, struct failure *f)
{
	char err[1024];
	int rc;

	*bytes = 0;
	rc = wl_collect_dirty(x->wl, mark_range, x, bytes, err, sizeof(err));
	return rc ? local_fail(f, rc, err) : 0;
}

/* After a failure: the workload runs again, or the report says why not. */
static void resume_workload(struct sender *x)
{
	/* A frozen QEMU answers no QMP: thawed first, or each command below
	 * would wait --timeout while the guest stays frozen. */
	if (x->wl)
		wl_thaw(x->wl);
	vms_close(x->vms);
	x->vms = NULL;
	if (!x->wl)
		return;
	x->resumed = !wl_resume(x->wl, x->resume_err, sizeof(x->resume_err));
	/* A guest paused before we came stays paused: say so, and how it is
	 * left (after QEMU's own `migrate` completed, in postmigrate). */
	if (x->resumed && x->q && !wl_was_running(x->wl)) {
		char st[32] = "unknown";

		qmp_status(x->q, st, sizeof(st), NULL, 0);
		x->resumed = false;
		snprintf(x->resume_err, sizeof(x->resume_err), "the guest was paused before "
			 "the migration and stays paused on the source (QEMU status %s%s)", st,
			 strcmp(st, "postmigrate") ? "" : "; `cont` resumes it there");
	}
}

/* ---- events ---------------------------------------------------------------- */

static void set_status(struct sender *x, enum send_status st)
{
	atomic_store(&x->status, (int)st);
}

static void emit_setup(struct sender *x)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	struct json_object *o;

	if (!x->o.json)
		return;
	rdmig_source_stats(x->s, &st);
	o = cli_event("setup");
	cli_json_u64(o, "setup-time", st.setup_time_ms);
	cli_json_u64(o, "total", st.total);
	cli_emit(o);
}

/* @dirty: bytes found dirty for the next round (live), @dirty_ms: over how
 * long they were written. */
static void emit_iteration(struct sender *x, uint64_t dirty, uint64_t dirty_ms)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	struct json_object *o;
	uint64_t pages = x->last_bytes / PAGE;

	if (!x->o.json)
		return;
	rdmig_source_stats(x->s, &st);
	o = cli_event("iteration");
	cli_json_str(o, "status", status_names[atomic_load(&x->status)]);
	cli_json_stats(o, &st);
	cli_json_u64(o, "remaining", dirty);
	cli_json_u64(o, "dirty-pages-rate", dirty_ms ? dirty / PAGE * 1000 / dirty_ms : 0);
	cli_json_u64(o, "pages-per-second", x->last_ms ? pages * 1000 / x->last_ms : pages * 1000);
	cli_json_u64(o, "iteration-bytes", x->last_bytes);
	cli_json_u64(o, "iteration-time", x->last_ms);
	cli_emit(o);
}

/* ---- the migration ---------------------------------------------------------- */

static int iterate(struct sender *x)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	uint64_t t0 = cli_now_ms();
	int rc;

	rdmig_source_stats(x->s, &st);
	x->iter_base = st.normal_bytes;
	x->iter_planned = 0;
	x->iter_t0 = t0;
	rc = rdmig_source_iterate(x->s);
	cli_bar_clear(&x->bar);
	if (rc)
		return rc;
	rdmig_source_stats(x->s, &st);
	x->last_bytes = st.normal_bytes - x->iter_base;
	x->last_ms = cli_now_ms() - t0;
	/* Too little to time: keep the last estimate. */
	if (x->last_bytes >= (1u << 20) && x->last_ms)
		x->bw = x->last_bytes * 1000 / x->last_ms;
	return 0;
}

/* Whether the dirty bytes found can go out within the allowed downtime. */
static bool converged(struct sender *x, uint64_t dirty)
{
	uint64_t max_ms = atomic_load(&x->max_downtime), rate = atomic_load(&x->max_bandwidth);
	uint64_t bw = x->bw;

	if (!dirty)
		return true;
	if (rate && (!bw || rate < bw))
		bw = rate;
	if (!bw)
		return false;
	/* The fixed cost of switching over counts against the downtime too,
	 * but at most half of it: one slow monitor answer while it was timed
	 * must not keep the pre-copy from ever converging. */
	return dirty * 1000 / bw + (x->switch_ms < max_ms / 2 ? x->switch_ms : max_ms / 2) <=
	       max_ms;
}

/* Converged, but would one more round still pay?  The workload dirties at
 * the rate the last round saw; a round as long as sending @dirty (plus the
 * scan, which the last round's overhead approximates) should leave less
 * than half of it.  Worth it: the downtime is the part the guest feels,
 * and a round this short adds little to the total. */
static bool another_round_pays(struct sender *x, uint64_t dirty, uint64_t round_ms)
{
	uint64_t bw = x->bw, send_ms, overhead_ms, next_ms;

	if (!dirty || !bw || !round_ms)
		return false;
	send_ms = dirty * 1000 / bw;
	/* Data worth less than the fixed switch-over cost: no measurable gain. */
	if (send_ms * 2 <= x->switch_ms || send_ms < 10)
		return false;
	overhead_ms = x->last_ms < round_ms ? round_ms - x->last_ms : 0;
	next_ms = send_ms + overhead_ms;
	/* dirty / round_ms is the dirtying rate; the next round's share of it: */
	return dirty / round_ms * next_ms < dirty / 2;
}

/* Pre-copy rounds while the workload runs; returns with it stopped and the
 * last dirty pages marked. */
static int precopy(struct sender *x, struct failure *f)
{
	char err[512];
	uint64_t t_clear, dirty, iterations = 0;
	int rc;

	for (;;) {
		rc = wl_clear_dirty(x->wl, err, sizeof(err));
		if (rc)
			return local_fail(f, rc, err);
		t_clear = cli_now_ms();
		wl_thaw(x->wl);
		rc = iterate(x);
		if (rc)
			return lib_fail(x, f, rc, CLI_PHASE_TRANSFER);
		iterations++;
		rc = check_cancel(x, f);
		if (!rc)
			rc = freeze_workload(x, f);
		if (!rc)
			rc = collect_dirty(x, &dirty, f);
		if (rc)
			return rc;
		/* The scan took a while: keep the destination from timing out. */
		rc = rdmig_source_poll(x->s);
		if (rc)
			return lib_fail(x, f, rc, CLI_PHASE_TRANSFER);
		emit_iteration(x, dirty, x->stop_ms - t_clear);
		if (iterations >= x->o.max_iterations)
			return 0;
		if (converged(x, dirty) &&
		    !another_round_pays(x, dirty, x->stop_ms - t_clear))
			return 0;
	}
}

/* The downtime starts here.  A frozen process stays frozen; a guest is
 * paused with QMP stop (its monitor must keep answering), and what it wrote
 * between the freeze and the stop is collected on top (the bits were not
 * cleared since). */
static int final_stop(struct sender *x, struct failure *f)
{
	char err[1024];
	uint64_t more;
	int rc;

	if (!x->q)
		return 0;
	x->stop_ms = cli_now_ms();
	rc = wl_stop(x->wl, err, sizeof(err));
	/* QEMU writes its device state into the pipe while the last pages go
	 * out: the guest is stopped and x-ignore-shared keeps QEMU off the
	 * RAM we send, and the destination feeds QEMU only after the pages. */
	if (!rc && x->vms)
		rc = vms_begin(x->vms, err, sizeof(err));
	if (rc)
		return local_fail(f, rc, err);
	return collect_dirty(x, &more, f);
}

/* QEMU writes its device state into a pipe as its own migration runs; each
 * piece goes on rdmig's state stream as it comes. */
static int stream_device_state(struct sender *x, struct failure *f)
{
	static char buf[256 << 10];
	struct pollfd pfd;
	char err[1024];
	ssize_t n;
	int rc;

	rc = vms_begin(x->vms, err, sizeof(err));
	if (rc)
		return local_fail(f, rc, err);
	pfd = (struct pollfd){ .fd = vms_fd(x->vms), .events = POLLIN };
	for (;;) {
		n = vms_read(x->vms, buf, sizeof(buf), err, sizeof(err));
		if (n > 0)
			rc = rdmig_source_send_state(x->s, buf, (size_t)n);
		else if (n == -EAGAIN)
			rc = poll(&pfd, 1, 50) < 0 && errno != EINTR ? -errno : rdmig_source_poll(x->s);
		else
			break;
		if (rc)
			return lib_fail(x, f, rc, CLI_PHASE_TRANSFER);
		rc = check_cancel(x, f);
		if (rc)
			return rc;
	}
	if (n < 0)
		return local_fail(f, (int)n, err);
	rc = vms_save_finish(x->vms, (int)(x->o.timeout_s * 1000), err, sizeof(err));
	return rc ? local_fail(f, rc, err) : 0;
}

static int send_state(struct sender *x, struct failure *f)
{
	int rc;

	if (x->q)
		return stream_device_state(x, f);
	rc = x->state_len ? rdmig_source_send_state(x->s, x->state, x->state_len) : 0;
	return rc ? lib_fail(x, f, rc, CLI_PHASE_TRANSFER) : 0;
}

/* --qmp: everything of QEMU's own migration but `migrate` itself is done
 * while the guest runs, so the downtime holds one QMP command, not four.
 * Those three commands also time QEMU's monitor: the switch-over costs
 * about six such round trips on the two sides (migrate, its completion,
 * migrate-incoming, its completion, cont, the confirmation). */
static int prepare_device_state(struct sender *x, struct failure *f)
{
	uint64_t t0 = cli_now_ms();
	char err[1024];
	int rc = vms_prepare(&x->vms, x->q, true, err, sizeof(err));

	if (rc)
		return local_fail(f, rc, err);
	x->switch_ms = 2 * (cli_now_ms() - t0) + 1;
	return 0;
}

static int migrate(struct sender *x, struct failure *f)
{
	uint64_t t;
	int rc;

	rc = check_cancel(x, f);
	if (rc)
		return rc;
	rc = rdmig_source_connect(x->s, x->o.host, x->o.port);
	if (rc)
		return lib_fail(x, f, rc, CLI_PHASE_CONNECT);
	set_status(x, ST_ACTIVE);
	emit_setup(x);
	if (x->q) {
		rc = prepare_device_state(x, f);
		if (rc)
			return rc;
	}
	rdmig_source_mark_all(x->s);
	if (x->o.live) {
		/* The first clear happens with the workload stopped too, so its
		 * first round starts from a known point. */
		rc = freeze_workload(x, f);
		if (!rc)
			rc = precopy(x, f);
		if (!rc)
			rc = final_stop(x, f);
		if (rc)
			return rc;
		set_status(x, ST_DEVICE);
	}
	t = cli_now_ms();
	if (x->o.live)
		x->dt_stop = t - x->stop_ms;
	rc = iterate(x);
	if (rc)
		return lib_fail(x, f, rc, CLI_PHASE_TRANSFER);
	if (!x->o.live)
		emit_iteration(x, 0, 0);
	x->dt_round = cli_now_ms() - t;
	t += x->dt_round;
	rc = send_state(x, f);
	if (rc)
		return rc;
	x->dt_state = cli_now_ms() - t;
	t += x->dt_state;
	rc = rdmig_source_complete(x->s);
	if (rc)
		return lib_fail(x, f, rc, CLI_PHASE_TRANSFER);
	x->dt_confirm = cli_now_ms() - t;
	if (x->o.live)
		atomic_store(&x->downtime_ms, cli_now_ms() - x->stop_ms);
	set_status(x, ST_COMPLETED);
	return 0;
}

/* ---- reporting ---------------------------------------------------------------- */

static void report_success(struct sender *x)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	char a[32], b[32], c[32];
	double secs, rate;

	rdmig_source_stats(x->s, &st);
	if (x->o.json) {
		struct json_object *o = cli_event("completed");

		cli_json_str(o, "status", "completed");
		cli_json_stats(o, &st);
		if (x->o.live) {
			struct json_object *parts = json_object_new_object();

			cli_json_u64(o, "downtime", atomic_load(&x->downtime_ms));
			cli_json_u64(parts, "stop", x->dt_stop);
			cli_json_u64(parts, "last-round", x->dt_round);
			cli_json_u64(parts, "device-state", x->dt_state);
			cli_json_u64(parts, "confirm", x->dt_confirm);
			json_object_object_add(o, "downtime-parts", parts);
		}
		cli_emit(o);
		return;
	}
	secs = (double)st.total_time_ms / 1000.0;
	rate = st.data_time_ms ? (double)st.normal_bytes * 1000.0 / (double)st.data_time_ms : 0;
	cli_err("migration to %s:%s completed in %.2f s: %s in %" PRIu64 " iteration%s",
		x->o.host, x->o.port, secs, cli_fmt_bytes(st.total, a, sizeof(a)), st.iterations,
		st.iterations == 1 ? "" : "s");
	fprintf(stderr, "  sent %s at %s/s; %" PRIu64 " zero pages (%s) not sent as data; "
		"state %" PRIu64 " bytes\n", cli_fmt_bytes(st.normal_bytes, b, sizeof(b)),
		cli_fmt_bytes((uint64_t)rate, c, sizeof(c)), st.zero_pages,
		cli_fmt_bytes(st.zero_pages * PAGE, a, sizeof(a)), st.state_bytes);
	fprintf(stderr, "  setup %" PRIu64 " ms", st.setup_time_ms);
	if (x->q)
		fprintf(stderr, ", downtime %" PRIu64 " ms; the guest stays paused here: it now "
			"runs on the destination", atomic_load(&x->downtime_ms));
	else if (x->o.live)
		fprintf(stderr, ", downtime %" PRIu64 " ms; process %d stays stopped: it now "
			"lives on the destination", atomic_load(&x->downtime_ms), (int)x->o.pid);
	fputc('\n', stderr);
}

/* What became of the workload after a failure, for the one line. */
static const char *workload_fate(struct sender *x, char *buf, size_t len)
{
	buf[0] = '\0';
	if (!x->o.live)
		return buf;
	if (!x->resumed)
		snprintf(buf, len, "; %s", x->resume_err);
	else
		snprintf(buf, len, "; %s", x->q ? "the guest runs on the source again" :
			 "the process keeps running here");
	return buf;
}

static int report_failure(struct sender *x, const struct failure *f)
{
	int code = cli_exit_code(f->rc, f->phase, f->msg);
	char line[2048], fate[600];
	struct json_object *o;

	if (f->local && code == CLI_EX_TRANSFER)
		code = CLI_EX_INTERNAL;
	if (f->rc == -ECANCELED || atomic_load(&x->cancelled))
		code = CLI_EX_CANCELLED;
	workload_fate(x, fate, sizeof(fate));
	if (code == CLI_EX_CANCELLED)
		snprintf(line, sizeof(line), "Migration to %s:%s cancelled%s", x->o.host,
			 x->o.port, fate);
	else if (f->phase == CLI_PHASE_CONNECT && code != CLI_EX_TRANSFER)
		snprintf(line, sizeof(line), "Unable to connect to %s:%s: %s", x->o.host,
			 x->o.port, f->msg);
	else
		snprintf(line, sizeof(line), "Migration to %s:%s failed: %s%s", x->o.host,
			 x->o.port, f->msg, fate);
	cli_bar_clear(&x->bar);
	cli_err("%s", line);
	if (!x->o.json)
		return code;
	o = cli_event("failed");
	/* Whether the workload runs here again, for a script to act on. */
	if (x->o.live)
		json_object_object_add(o, x->q ? "guest-running" : "workload-running",
				       json_object_new_boolean(x->resumed));
	cli_emit_failed(line, code, o);
	return code;
}

/* ---- control socket and signals (their own threads) -------------------------- */

static struct json_object *status_reply(struct sender *x)
{
	struct json_object *o = json_object_new_object();
	struct rdmig_stats st = { .size = sizeof(st) };
	int status = atomic_load(&x->status);

	rdmig_source_stats(x->s, &st);
	cli_json_str(o, "status", status_names[status]);
	cli_json_stats(o, &st);
	if (status == ST_COMPLETED && x->o.live)
		cli_json_u64(o, "downtime", atomic_load(&x->downtime_ms));
	cli_json_u64(o, "max-bandwidth", atomic_load(&x->max_bandwidth));
	cli_json_u64(o, "max-downtime", atomic_load(&x->max_downtime));
	return ctl_return(o);
}

static void cancel(struct sender *x)
{
	int st = ST_ACTIVE;

	atomic_store(&x->cancelled, true);
	if (!atomic_compare_exchange_strong(&x->status, &st, ST_CANCELLING)) {
		st = ST_SETUP;
		if (!atomic_compare_exchange_strong(&x->status, &st, ST_CANCELLING)) {
			st = ST_DEVICE;
			atomic_compare_exchange_strong(&x->status, &st, ST_CANCELLING);
		}
	}
	if (x->s)
		rdmig_source_cancel(x->s);
}

static int get_limit(struct json_object *req, const char *key, uint64_t *v, int *have)
{
	struct json_object *j;

	if (!json_object_object_get_ex(req, key, &j))
		return 0;
	if (!json_object_is_type(j, json_type_int) || json_object_get_int64(j) < 0)
		return -1;
	*v = (uint64_t)json_object_get_int64(j);
	*have = 1;
	return 0;
}

static struct json_object *set_reply(struct sender *x, struct json_object *req)
{
	uint64_t dt = 0, bw = 0;
	int have_dt = 0, have_bw = 0;

	if (get_limit(req, "max-downtime", &dt, &have_dt))
		return ctl_error("max-downtime must be a non-negative integer (ms)");
	if (get_limit(req, "max-bandwidth", &bw, &have_bw))
		return ctl_error("max-bandwidth must be a non-negative integer (bytes/s)");
	if (!have_dt && !have_bw)
		return ctl_error("set needs max-downtime or max-bandwidth");
	if (have_dt)
		atomic_store(&x->max_downtime, dt);
	if (have_bw) {
		atomic_store(&x->max_bandwidth, bw);
		/* The library paces the WRITEs itself, from any thread's word. */
		if (x->s)
			rdmig_source_set_max_bandwidth(x->s, bw);
	}
	return ctl_return(NULL);
}

static struct json_object *on_command(void *ctx, const char *cmd, struct json_object *req)
{
	struct sender *x = ctx;

	if (!strcmp(cmd, "status"))
		return status_reply(x);
	if (!strcmp(cmd, "cancel")) {
		cancel(x);
		return ctl_return(NULL);
	}
	if (!strcmp(cmd, "set"))
		return set_reply(x, req);
	return NULL;
}

static void ctl_stop_cb(struct ev_loop *loop, ev_async *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

static void *ctl_main(void *arg)
{
	struct sender *x = arg;

	ev_run(x->ctl_loop, 0);
	ctl_close(x->ctl);
	x->ctl = NULL;
	return NULL;
}

static int start_control(struct sender *x)
{
	char err[512];
	int rc;

	if (!x->o.control)
		return 0;
	x->ctl_loop = ev_loop_new(EVFLAG_AUTO);
	if (!x->ctl_loop)
		return cli_usage("cannot create an event loop for the control socket");
	rc = ctl_open(&x->ctl, x->ctl_loop, x->o.control, on_command, x, err, sizeof(err));
	if (rc)
		return cli_usage("%s", err);
	ev_async_init(&x->ctl_stop, ctl_stop_cb);
	ev_async_start(x->ctl_loop, &x->ctl_stop);
	if (pthread_create(&x->ctl_thread, NULL, ctl_main, x)) {
		ctl_close(x->ctl);
		return cli_usage("cannot start the control thread");
	}
	x->ctl_running = true;
	return 0;
}

static void stop_control(struct sender *x)
{
	if (x->ctl_running) {
		ev_async_send(x->ctl_loop, &x->ctl_stop);
		pthread_join(x->ctl_thread, NULL);
		x->ctl_running = false;
	}
	if (x->ctl_loop)
		ev_loop_destroy(x->ctl_loop);
	x->ctl_loop = NULL;
}

/* rdmig_source_cancel is not async-signal-safe: signals are taken by a
 * thread of their own with sigwait(). */
static void *sig_main(void *arg)
{
	struct sender *x = arg;
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	for (;;) {
		if (sigwait(&set, &sig))
			continue;
		pthread_mutex_lock(&x->sig_lock);
		cancel(x);
		pthread_mutex_unlock(&x->sig_lock);
	}
	return NULL;
}

static int start_signals(struct sender *x)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (pthread_create(&x->sig_thread, NULL, sig_main, x))
		return cli_usage("cannot start the signal thread");
	pthread_detach(x->sig_thread);
	return 0;
}

/* ---- main ------------------------------------------------------------------- */

static void cleanup(struct sender *x)
{
	unsigned i;

	stop_control(x);
	vms_close(x->vms);
	wl_close(x->wl);
	qmp_close(x->q);
	pthread_mutex_lock(&x->sig_lock);
	rdmig_source_destroy(x->s);
	x->s = NULL;
	pthread_mutex_unlock(&x->sig_lock);
	for (i = 0; i < x->o.nrams; i++)
		cli_ram_unmap(&x->o.rams[i]);
	free(x->o.rams);
	cli_free_key(x->o.key, x->o.key_len);
	free(x->state);
}

static int prepare(struct sender *x)
{
	int rc;

	cli_bar_init(&x->bar, x->o.json);
	atomic_store(&x->max_bandwidth, x->o.max_bandwidth);
	atomic_store(&x->max_downtime, x->o.max_downtime_ms);
	set_status(x, ST_SETUP);
	rc = open_qemu(x);
	if (!rc)
		rc = map_rams(x);
	if (!rc)
		rc = load_state(x);
	if (!rc)
		rc = open_workload(x);
	if (!rc)
		rc = create_source(x);
	if (!rc)
		rc = start_signals(x);
	if (!rc)
		rc = start_control(x);
	return rc;
}

int main(int argc, char **argv)
{
	static struct sender x;
	struct failure f;
	int rc;

	cli_set_prog("migrate-send");
	pthread_mutex_init(&x.sig_lock, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	rc = parse_args(&x.o, argc, argv);
	if (rc >= 0) {
		free(x.o.rams);
		cli_free_key(x.o.key, x.o.key_len);
		return rc;
	}
	rc = prepare(&x);
	if (rc) {
		cleanup(&x);
		return rc;
	}
	memset(&f, 0, sizeof(f));
	rc = migrate(&x, &f);
	if (rc) {
		/* Nothing is lost: the workload goes on here. */
		resume_workload(&x);
		set_status(&x, atomic_load(&x.cancelled) ? ST_CANCELLED : ST_FAILED);
		rc = report_failure(&x, &f);
	} else {
		report_success(&x);
	}
	cleanup(&x);
	return rc;
}
