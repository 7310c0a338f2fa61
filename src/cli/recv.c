/* migrate-recv: receives RAM files (and device state) from migrate-send over
 * RDMA.  One libev loop drives the listener, every connection's fds and
 * timers, the control socket and the signals, so a daemon serves several
 * migrations at once without threads.  See migrate-recv(1).
 *
 * A connection is only a handshake until its source has proved itself (the
 * library's admit callback): until then it owns nothing on this host, no
 * file is created, truncated or marked, and a failure turns that one
 * connection away while migrate-recv keeps waiting for the real source.
 *
 * With --qmp the destination is a QEMU started with -incoming defer: its
 * shared RAM backends are the blocks, written straight into the files they
 * map, and the device state is fed to QEMU's own incoming migration; the
 * source hears "completed" only once that QEMU loaded it and runs.
 * Handshakes and migrations are counted against limits, so a peer that
 * connects and never authenticates costs a bounded slot for a bounded
 * time. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <poll.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ev.h>

#include "cli.h"
#include "control.h"
#include "devstate.h"
#include "ends.h"
#include "faultguard.h"
#include "image.h"
#include "rdmig.h"
#include "recv_int.h"
#include "recv_opts.h"
#include "recv_room.h"

/* A handshake older than this may be dropped to make room for a new
 * connection when every handshake slot is taken: an honest source
 * authenticates within a few round trips, a squatter does not. */
#define EVICT_AFTER_MS 1000

/* A directory files are made in must exist, be writable, and be safe from
 * other local users (image.h). */
static int check_dir(const char *what, const char *path, const char *dir)
{
	char err[4400];

	if (access(dir, W_OK | X_OK))
		return cli_usage("%s %s: directory %s: %s", what, path, dir, strerror(errno));
	if (img_safe_dir(dir, err, sizeof(err)))
		return cli_usage("%s %s: %s", what, path, err);
	return 0;
}

/* The same for the directory that will hold @path. */
static int check_dir_of(const char *what, const char *path)
{
	char tmp[4096];

	snprintf(tmp, sizeof(tmp), "%s", path);
	return check_dir(what, path, dirname(tmp));
}

/* "DIR/BASE" with DIR resolved, so two spellings of one path compare equal. */
static int real_path_of(const char *dir, const char *base, char *out, size_t len)
{
	char real[PATH_MAX];

	if (!realpath(dir, real))
		return -errno;
	if ((size_t)snprintf(out, len, "%s/%s", real, base) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* A state file inside --ram-dir takes a name a block could have. */
static void reserve_state_name(struct app *a)
{
	char tmp[4096], tmp2[4096];

	if (!a->o.state_out || !strcmp(a->o.state_out, "-") || !a->o.ram_dir)
		return;
	snprintf(tmp, sizeof(tmp), "%s", a->o.state_out);
	snprintf(tmp2, sizeof(tmp2), "%s", a->o.state_out);
	if (real_path_of(dirname(tmp), basename(tmp2), a->state_real, sizeof(a->state_real)))
		a->state_real[0] = '\0';
}

/* The blocks that exist already (QEMU's, or --ram files with
 * --use-existing) are mapped now: their length is what the source must
 * announce.  Missing ones are created when an admitted source names them,
 * in directories no other user can replace them in. */
static int prepare_files(struct app *a)
{
	struct recv_opts *o = &a->o;
	struct dst_spec sp = {
		.qmp = o->qmp, .qemu = o->qemu, .use_existing = o->use_existing,
		.start = !o->no_start,
		.state_sink = o->state_out || o->daemon, .max_state = o->max_state,
		.timeout_ms = (int)(o->timeout_s * 1000),
	};
	char err[8192];
	int rc;

	rc = ends_open_dest(&a->e, &sp, o->rams, o->nrams, err, sizeof(err));
	/* The ends own the blocks now. */
	o->rams = NULL;
	o->nrams = 0;
	if (rc)
		return cli_usage("%s", err);
	if (o->ram_dir) {
		rc = check_dir("--ram-dir", o->ram_dir, o->ram_dir);
		if (rc)
			return rc;
	}
	reserve_state_name(a);
	if (o->state_out && strcmp(o->state_out, "-"))
		return check_dir_of("--state-out", o->state_out);
	return 0;
}

/* ---- files of one migration ------------------------------------------------ */

static struct cli_ram *mig_add_file(struct mig *m, const char *name, const char *path)
{
	struct cli_ram *n = realloc(m->files, (m->nfiles + 1) * sizeof(*n));

	if (!n)
		return NULL;
	m->files = n;
	n = &m->files[m->nfiles++];
	memset(n, 0, sizeof(*n));
	snprintf(n->name, sizeof(n->name), "%s", name);
	snprintf(n->path, sizeof(n->path), "%s", path);
	return n;
}

/* Whether the block file @real, or its marker, would be the state file
 * @state or its ".part". */
static bool names_state(const char *real, const char *state)
{
	size_t n = strlen(real), k = strlen(state);

	if (!strcmp(real, state))
		return true;
	if (k > n && !strncmp(real, state, n) && !strcmp(state + n, ".incomplete"))
		return true;
	return n > k && !strncmp(real, state, k) && !strcmp(real + k, ".part");
}

/* DIR/FILE for block @name, or why it cannot have one. */
static const char *dir_path(const struct mig *m, const char *name, char *path, size_t len)
{
	char file[NAME_MAX + 1], real[PATH_MAX + 8];

	if (cli_block_file_name(name, file, sizeof(file)))
		return "makes a file name longer than the filesystem allows";
	if (m->app->o.daemon && !strcmp(file, "state"))
		return "is reserved for the device state in --daemon mode";
	if (m->app->state_real[0] && !real_path_of(m->dir, file, real, sizeof(real)) &&
	    names_state(real, m->app->state_real))
		return "is the --state-out file's name";
	snprintf(path, len, "%s/%s", m->dir, file);
	return NULL;
}

static const struct cli_ram *find_ram(const struct dst_ends *e, const char *name)
{
	unsigned i;

	for (i = 0; i < e->nrams; i++)
		if (!strcmp(e->rams[i].name, name))
			return &e->rams[i];
	return NULL;
}

/* Watches the file's mapping: a page its filesystem cannot provide fails
 * this migration (faultguard.h). */
static int guard_file(struct mig *m, struct cli_ram *f, char *err, size_t errlen)
{
	int slot = fg_watch(f->host, f->len, f->pgsz, m);

	if (slot < 0)
		return cli_errf(err, errlen, slot, "too many block files at once to watch");
	f->guard = slot + 1;
	return 0;
}

/* Only called for an admitted source: every block it names gets a file. */
static int map_cb(void *ctx, const char *name, uint64_t length, uint32_t page_size,
		  void **host, int *zeroed, char *errbuf, size_t errlen)
{
	struct mig *m = ctx;
	struct cli_ram *f;
	char path[4096], dir[4096];
	const char *why;
	int rc;

	(void)page_size;
	m->usage_err = true; /* until it worked: every failure here is ours */
	if (m->dir[0]) {
		why = dir_path(m, name, path, sizeof(path));
		if (why) {
			snprintf(errbuf, errlen, "the name %s", why);
			return -EINVAL;
		}
	} else {
		const struct cli_ram *given = find_ram(&m->app->e, name);

		if (!given) {
			snprintf(errbuf, errlen, "not configured on the destination (no --ram %s=PATH)",
				 name);
			return -ENOENT;
		}
		snprintf(path, sizeof(path), "%s", given->path);
	}
	/* --ram-dir: the whole image was weighed at admission. */
	snprintf(dir, sizeof(dir), "%s", path);
	rc = m->dir[0] ? 0 : recv_room_check(m, dirname(dir), path, length, errbuf, errlen);
	if (rc)
		return rc;
	f = mig_add_file(m, name, path);
	if (!f) {
		snprintf(errbuf, errlen, "out of memory");
		return -ENOMEM;
	}
	/* Every file made here is new (O_EXCL): nobody else's, and known to be
	 * all zero, which spares sending zero pages. */
	rc = img_open(f, length, IMG_NEW, errbuf, errlen);
	if (!rc)
		rc = img_mark_incomplete(f, errbuf, errlen);
	if (!rc)
		rc = guard_file(m, f, errbuf, errlen);
	if (rc)
		return rc; /* the file goes with the migration (mig_free) */
	*host = f->host;
	*zeroed = f->zeroed;
	m->usage_err = false;
	return 0;
}

static int state_cb(void *ctx, const void *data, size_t len, char *err, size_t errlen)
{
	struct mig *m = ctx;

	if (!m->ds)
		return cli_errf(err, errlen, -EPROTO, "device state before the migration was "
				"admitted");
	return ds_write(m->ds, data, len, err, errlen);
}

/* Whether a page of this migration's files could not be provided
 * (faultguard.h): the image is not whole, the migration fails. */
static int check_faults(struct mig *m, char *err, size_t errlen)
{
	uint64_t off;
	unsigned i;

	for (i = 0; i < m->nfiles; i++)
		if (fg_faulted(m->files[i].guard - 1, &off))
			return cli_errf(err, errlen, -ENOSPC, "%s lost a page at offset %" PRIu64
					" (SIGBUS): its filesystem could not provide it (full?) or "
					"the file was cut short; the image is not whole",
					m->files[i].path, off);
	return 0;
}

/* Before the source is told: everything received is on stable storage, but
 * nothing says "usable" yet (markers stay, the state keeps its .part name),
 * so a confirmation that never reaches the source leaves no image that
 * looks complete next to a source that resumed. */
static int sync_files(struct mig *m, char *err, size_t errlen)
{
	unsigned i;
	int rc = check_faults(m, err, errlen);

	for (i = 0; !rc && i < m->nfiles; i++)
		rc = img_sync(&m->files[i], err, errlen);
	return rc;
}

/* The source holds the confirmation: the image becomes usable, the state
 * first, then the markers go. */
static int finish_files(struct mig *m, char *err, size_t errlen)
{
	unsigned i;
	int rc = ds_finish(m->ds, err, errlen);

	for (i = 0; !rc && i < m->nfiles; i++)
		rc = img_complete(&m->files[i], err, errlen);
	return rc;
}

/* The library calls this before it confirms completion to the source: what
 * cannot be saved (or a QEMU that cannot load the state and run) fails the
 * migration on both sides, so the source resumes its workload instead of
 * believing it moved. */
static int commit_cb(void *ctx, char *errbuf, size_t errlen)
{
	struct mig *m = ctx;
	int rc = sync_files(m, errbuf, errlen);

	return rc ? rc : ds_commit(m->ds, errbuf, errlen);
}

/* ---- one connection's lifetime -------------------------------------------------- */

static void mig_step(struct mig *m);

static void mig_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	mig_step(w->data);
}

static void mig_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	mig_step(w->data);
}

static int admit_cb(void *ctx, uint64_t image_bytes, char *errbuf, size_t errlen);

static struct mig *mig_new(struct app *a)
{
	struct rdmig_config cfg;
	struct mig *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->app = a;
	ev_timer_init(&m->timer, mig_timer_cb, 0.0, 0.0);
	m->timer.data = m;
	rdmig_config_init(&cfg);
	cfg.timeout_ms = (int)(a->o.timeout_s * 1000);
	cfg.auth_key = a->o.key;
	cfg.auth_key_len = a->o.key_len;
	cfg.channels = (uint32_t)a->o.channels; /* 0: the library's default */
	cfg.pinned_cap = a->o.pinned_cap;
	cfg.max_image = a->o.max_image;
	/* Pin-all images are made present ahead of their pinning (the
	 * library's default); dynamic ones stay sparse where the source sends
	 * no data: populating all of a mostly-zero image in the background
	 * made it 1.4-2.6x slower in the bed.  recv_room_check() checked
	 * up front that the file system can hold the whole image. */
	cfg.admit = admit_cb;
	cfg.admit_ctx = m;
	cfg.commit = commit_cb;
	cfg.commit_ctx = m;
	cfg.log = cli_log;
	cfg.log_ctx = &a->bar;
	cfg.log_level = a->o.verbose > 1 ? RDMIG_LOG_DEBUG :
			a->o.verbose ? RDMIG_LOG_INFO : RDMIG_LOG_WARN;
	cfg.map_block = map_cb;
	cfg.map_ctx = m;
	/* Without a sink the library refuses state, naming the reason. */
	if (a->e.takes_state) {
		cfg.state = state_cb;
		cfg.state_ctx = m;
	}
	if (rdmig_dest_create(&m->d, &cfg)) {
		rdmig_dest_destroy(m->d);
		free(m);
		return NULL;
	}
	return m;
}

static void mig_free(struct mig *m)
{
	struct app *a = m->app;
	char err[1024] = "";
	struct mig **pp;
	int i;

	if (m->linked) {
		for (pp = &a->migs; *pp; pp = &(*pp)->next)
			if (*pp == m) {
				*pp = m->next;
				break;
			}
		if (m->admitted)
			a->admitted--;
		else
			a->handshakes--;
	}
	/* Never started before mig_watch(): stopping is a no-op then. */
	ev_io_stop(a->loop, &m->io);
	ev_timer_stop(a->loop, &m->timer);
	rdmig_dest_destroy(m->d);
	/* A half-written state never takes the final name. */
	/* What could not be put back is said, unless QEMU is gone. */
	i = ds_close(m->ds, err, sizeof(err));
	if (i && i != -ECONNRESET)
		cli_err("warning: %s", err);
	for (i = 0; i < (int)m->nfiles; i++) {
		fg_unwatch(m->files[i].guard - 1);
		img_close(&m->files[i], m->discard);
	}
	/* A daemon migration that failed before any block keeps no empty DIR/N. */
	if (a->o.daemon && m->id)
		rmdir(m->dir);
	free(m->files);
	free(m);
}

static struct json_object *mig_json(struct mig *m, const char *event)
{
	struct json_object *o = event ? cli_event(event) : json_object_new_object();

	if (m->id) {
		cli_json_u64(o, "id", m->id);
		cli_json_str(o, "dir", m->dir);
	}
	return o;
}

/* A connection that never became a migration: one line, and migrate-recv
 * goes on waiting for the source it is meant for. */
static void report_turned_away(struct mig *m, int rc, const char *msg)
{
	struct app *a = m->app;
	const char *peer = m->peer[0] ? m->peer : "an unknown peer";

	cli_bar_clear(&a->bar);
	cli_err("turned away a connection from %s: %s; still waiting", peer, msg);
	if (a->o.json) {
		struct json_object *o = cli_event("refused");

		cli_json_str(o, "peer", peer);
		cli_json_str(o, "error", msg);
		json_object_object_add(o, "exit-code",
				       json_object_new_int(cli_exit_code(rc, CLI_PHASE_CONNECT, msg)));
		cli_emit(o);
	}
}

static void turn_away(struct mig *m, int rc, const char *msg)
{
	report_turned_away(m, rc, msg);
	mig_free(m);
}

/* Ends an admitted migration: the exit code of a single-mode run, and one
 * report. */
static void mig_end(struct mig *m, int code, const char *msg)
{
	struct app *a = m->app;
	struct json_object *o = NULL;
	char line[6144];

	cli_bar_clear(&a->bar);
	if (code) {
		if (m->id)
			snprintf(line, sizeof(line), "Migration %u into %s failed: %s", m->id,
				 m->dir, msg);
		else
			snprintf(line, sizeof(line), "Migration failed: %s", msg);
		if (a->o.json)
			o = mig_json(m, NULL);
	}
	if (!a->o.daemon) {
		a->exit_code = code;
		a->ended = true;
		ev_break(a->loop, EVBREAK_ALL);
	}
	/* A source that fails on purpose, again and again, must not fill the
	 * daemon's filesystem with partial images. */
	m->discard = code != CLI_EX_OK && a->o.daemon && !m->handed_over;
	mig_free(m);
	/* Said once it is so: the failed migration's files are gone and its
	 * room given back when a script reads "failed". */
	if (code) {
		cli_err("%s", line);
		if (o)
			cli_emit_failed(line, code, o);
	}
}

static void report_done(struct mig *m)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	char a[32], b[32];

	rdmig_dest_stats(m->d, &st);
	if (m->app->o.json) {
		struct json_object *o = mig_json(m, "completed");

		cli_json_str(o, "status", "completed");
		cli_json_stats(o, &st);
		if (ds_guest(m->ds))
			cli_json_str(o, "guest", ds_guest(m->ds));
		cli_emit(o);
		return;
	}
	cli_err("migration%s%s completed in %.2f s: %s in %" PRIu64 " iteration%s (%s written), "
		"state %" PRIu64 " bytes%s", m->id ? " into " : "",
		m->id ? m->dir : "", (double)(cli_now_ms() - m->t0) / 1000.0,
		cli_fmt_bytes(st.total, a, sizeof(a)), st.iterations,
		st.iterations == 1 ? "" : "s", cli_fmt_bytes(st.normal_bytes, b, sizeof(b)),
		st.state_bytes, m->ds ? ds_outcome(m->ds) : "");
}

static int failure_code(struct mig *m, int rc, const char *msg)
{
	if (m->usage_err)
		return CLI_EX_USAGE;
	/* The block lists of the two command lines do not match. */
	if ((rc == -EINVAL || rc == -ENOENT) && !strncmp(msg, "block \"", 7))
		return CLI_EX_USAGE;
	if (!m->app->o.state_out && !m->app->o.daemon && strstr(msg, "no state sink"))
		return CLI_EX_USAGE;
	return cli_exit_code(rc, CLI_PHASE_TRANSFER, msg);
}

/* After the block map: every --ram block must have been announced. */
static int check_set(struct mig *m, char *err, size_t errlen)
{
	const struct recv_opts *o = &m->app->o;
	struct rdmig_stats st = { .size = sizeof(st) };
	unsigned i, j;

	if (m->set_checked || o->ram_dir || !m->admitted)
		return 0;
	rdmig_dest_stats(m->d, &st);
	if (!st.total)
		return 0;
	m->set_checked = true;
	for (i = 0; i < m->app->e.nrams; i++) {
		const char *name = m->app->e.rams[i].name;

		for (j = 0; j < m->nfiles; j++)
			if (!strcmp(m->files[j].name, name))
				break;
		if (j == m->nfiles) {
			snprintf(err, errlen, "block \"%s\" was not sent by the source", name);
			return -ENOENT;
		}
	}
	return 0;
}

static void mig_arm_timer(struct mig *m)
{
	int t = rdmig_dest_timeout(m->d);

	ev_timer_stop(m->app->loop, &m->timer);
	if (t < 0)
		return;
	ev_timer_set(&m->timer, (double)t / 1000.0, 0.0);
	ev_timer_start(m->app->loop, &m->timer);
}

static void mig_failed(struct mig *m, int rc)
{
	const char *msg = rdmig_dest_error(m->d);
	char err[8192];
	int code;

	if (!m->admitted && !(m->final && !m->app->o.daemon)) {
		snprintf(err, sizeof(err), "%s", msg);
		turn_away(m, rc, err);
		return;
	}
	code = failure_code(m, rc, msg);
	snprintf(err, sizeof(err), "%s%s", msg, code == CLI_EX_USAGE &&
		 strstr(msg, "no state sink") ? " (give --state-out FILE)" : "");
	/* The source was not told it completed: what was started here must
	 * not run on beside what it resumes. */
	if (m->ds) {
		char note[600];

		ds_abort(m->ds, note, sizeof(note));
		snprintf(err + strlen(err), sizeof(err) - strlen(err), "%s", note);
	}
	mig_end(m, code, err);
}

static void mig_step(struct mig *m)
{
	char err[8192];
	int rc = rdmig_dest_process(m->d);

	if (rc >= 0 && check_faults(m, err, sizeof(err))) {
		rdmig_dest_cancel(m->d, err);
		mig_end(m, CLI_EX_TRANSFER, err);
		return;
	}

	if (rc == 0) {
		rc = check_set(m, err, sizeof(err));
		if (rc) {
			rdmig_dest_cancel(m->d, err); /* the source learns why */
			mig_end(m, CLI_EX_USAGE, err);
			return;
		}
		mig_arm_timer(m);
		return;
	}
	if (rc < 0) {
		mig_failed(m, rc);
		return;
	}
	/* The source holds the confirmation: only now is the image usable. */
	m->handed_over = true;
	rc = finish_files(m, err, sizeof(err));
	if (rc) {
		char line[8400];

		snprintf(line, sizeof(line), "the source handed over, but the image cannot be "
			 "marked complete: %s", err);
		mig_end(m, CLI_EX_INTERNAL, line);
		return;
	}
	report_done(m);
	mig_end(m, CLI_EX_OK, NULL);
}

/* ---- admission ------------------------------------------------------------------- */

static void drop_handshakes(struct app *a, const struct mig *keep, const char *why)
{
	struct mig *m, *next;

	for (m = a->migs; m; m = next) {
		next = m->next;
		if (m == keep || m->admitted)
			continue;
		rdmig_dest_cancel(m->d, why);
		turn_away(m, -EBUSY, why);
	}
}

/* Files, markers and the state file: only for a source that proved itself. */
static int claim_files(struct mig *m, char *err, size_t errlen)
{
	struct app *a = m->app;
	unsigned i;
	int rc;

	if (a->o.daemon) {
		for (;;) {
			m->id = ++a->next_id;
			snprintf(m->dir, sizeof(m->dir), "%s/%u", a->o.ram_dir, m->id);
			if (!mkdir(m->dir, 0700))
				break;
			if (errno != EEXIST) {
				snprintf(err, errlen, "cannot create %s: %s", m->dir, strerror(errno));
				m->id = 0;
				return -errno;
			}
		}
	} else if (a->o.ram_dir) {
		snprintf(m->dir, sizeof(m->dir), "%s", a->o.ram_dir);
	}
	for (i = 0; i < m->nfiles; i++) {
		rc = a->e.markers ? img_mark_incomplete(&m->files[i], err, errlen) : 0;
		if (!rc)
			rc = guard_file(m, &m->files[i], err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

/* Where this migration's device state goes: DIR/N/state for a daemon, else
 * --state-out, or the destination QEMU (which must be waiting for it). */
static int claim_state(struct mig *m, char *err, size_t errlen)
{
	char path[2100];
	const char *p = m->app->o.state_out;
	int rc;

	if (m->app->o.daemon) {
		snprintf(path, sizeof(path), "%s/state", m->dir);
		p = path;
	}
	rc = ends_dest_state(&m->app->e, p, &m->ds, err, errlen);
	return rc ? rc : ds_prepare(m->ds, err, errlen);
}

static int admit_cb(void *ctx, uint64_t image_bytes, char *errbuf, size_t errlen)
{
	struct mig *m = ctx;
	struct app *a = m->app;
	char state_dir[PATH_MAX];
	int rc;

	recv_room_measure(m, image_bytes, state_dir, sizeof(state_dir));
	if (!a->o.daemon && a->admitted) {
		snprintf(errbuf, errlen, "busy: another source is migrating to this destination");
		return -EBUSY;
	}
	if (a->o.daemon && a->admitted >= a->o.max_migrations) {
		snprintf(errbuf, errlen, "busy: %u migrations are in progress (--max-migrations)",
			 a->admitted);
		return -EBUSY;
	}
	rc = recv_room_weigh(m, state_dir, errbuf, errlen);
	if (rc) {
		/* The source this run waits for sent an image that cannot be
		 * taken here: waiting on would not change that. */
		m->final = m->usage_err = true;
		return rc;
	}
	/* This side's to get ready: failing that, waiting on for another
	 * source would fail the same way.  The files first: the daemon's
	 * DIR/N holds the state too. */
	rc = claim_files(m, errbuf, errlen);
	if (!rc)
		rc = claim_state(m, errbuf, errlen);
	if (rc) {
		m->final = m->usage_err = true;
		return rc;
	}
	/* No more than its room: the library stops a source that passes what
	 * it announced, this one that passes what was reserved for it. */
	if (m->state_room)
		ds_limit(m->ds, m->state_room);
	m->admitted = true;
	a->handshakes--;
	a->admitted++;
	if (!a->o.daemon)
		drop_handshakes(a, m, "another source was admitted first");
	if (a->o.json) {
		struct json_object *o = mig_json(m, "setup");

		cli_json_str(o, "status", "setup");
		cli_json_str(o, "peer", m->peer);
		cli_emit(o);
	}
	return 0;
}

/* ---- connections ------------------------------------------------------------------ */

/* Single mode: the existing --ram files, lent to each connection. */
static int lend_files(struct mig *m)
{
	struct app *a = m->app;
	unsigned i;

	for (i = 0; i < a->e.nrams; i++) {
		struct cli_ram *r = &a->e.rams[i], *f;

		if (!r->host)
			continue;
		f = mig_add_file(m, r->name, r->path);
		if (!f || rdmig_dest_add_block(m->d, r->name, r->host, r->len, 0) < 0) {
			cli_err("--ram %s: %s", r->name, f ? rdmig_dest_error(m->d) : "out of memory");
			return -1;
		}
		*f = *r;
		f->borrowed = 1;
	}
	return 0;
}

/* The oldest handshake that has had its chance, or NULL. */
static struct mig *stale_handshake(struct app *a)
{
	struct mig *m, *old = NULL;
	uint64_t now = cli_now_ms();

	for (m = a->migs; m; m = m->next)
		if (!m->admitted && now - m->t0 >= EVICT_AFTER_MS && (!old || m->t0 < old->t0))
			old = m;
	return old;
}

/* Why a new connection cannot be taken now, or NULL; makes room by dropping
 * a stale handshake when that is what stands in the way. */
static const char *busy_reason(struct app *a, char *buf, size_t len)
{
	struct mig *old;

	if (!a->o.daemon && a->admitted)
		return "busy: a migration is in progress";
	if (a->o.daemon && a->admitted >= a->o.max_migrations) {
		snprintf(buf, len, "busy: %u migrations in progress (--max-migrations)",
			 a->admitted);
		return buf;
	}
	if (a->handshakes < a->o.max_handshakes)
		return NULL;
	old = stale_handshake(a);
	if (!old) {
		snprintf(buf, len, "busy: %u connections are still authenticating "
			 "(--max-handshakes)", a->handshakes);
		return buf;
	}
	rdmig_dest_cancel(old->d, "dropped: it did not authenticate in time for the next one");
	turn_away(old, -ETIMEDOUT, "dropped to make room: it did not authenticate within "
		  "1 s while every handshake slot was taken");
	return NULL;
}

static void mig_watch(struct mig *m)
{
	ev_io_init(&m->io, mig_io_cb, rdmig_dest_fd(m->d), EV_READ);
	m->io.data = m;
	ev_io_start(m->app->loop, &m->io);
}

/* Whether a connection request waits on the listener (without taking it). */
static bool request_pending(const struct app *a)
{
	struct pollfd pfd = { .fd = rdmig_listener_fd(a->l), .events = POLLIN };

	return poll(&pfd, 1, 0) > 0;
}

/* 1 when a pending request was handled, 0 when there was none. */
static int take_request(struct app *a)
{
	char buf[256];
	const char *busy;
	struct mig *m;
	int rc;

	/* Making room drops a handshake: only for a request in hand. */
	if (!request_pending(a))
		return 0;
	busy = busy_reason(a, buf, sizeof(buf));

	if (busy) {
		if (rdmig_listener_refuse(a->l))
			return 0;
		cli_err("turned away a connection: %s", busy);
		return 1;
	}
	m = a->spare;
	a->spare = NULL;
	if (!m) {
		m = mig_new(a);
		if (!m || (!a->o.daemon && lend_files(m))) {
			if (m)
				mig_free(m);
			return rdmig_listener_refuse(a->l) ? 0 : 1;
		}
	}
	rc = rdmig_dest_accept(m->d, a->l, 0);
	if (rc == -EAGAIN) {
		mig_free(m);
		return 0;
	}
	rdmig_dest_peer(m->d, m->peer, sizeof(m->peer));
	if (rc) {
		char err[8192];

		snprintf(err, sizeof(err), "%s", rdmig_dest_error(m->d));
		/* The device went away under the listener: migrations in
		 * progress fail on their own connections; no new ones can come. */
		if (rc == -ENODEV && a->migs) {
			ev_io_stop(a->loop, &a->listen_w);
			mig_free(m);
			return 0;
		}
		/* What the peer asked for is its problem; failing to accept at
		 * all (memory, pinning) is ours and would fail every source. */
		if ((rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EACCES) &&
		    rdmig_dest_error_class(m->d) == RDMIG_ERROR_NONE) {
			report_turned_away(m, rc, err);
			m->peer[0] = '\0';
			a->spare = m;
		} else if (rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EACCES ||
			   a->o.daemon) {
			turn_away(m, rc, err);
		} else {
			mig_end(m, cli_exit_code(rc, CLI_PHASE_CONNECT, err), err);
		}
		return 1;
	}
	m->t0 = cli_now_ms();
	m->linked = true;
	m->next = a->migs;
	a->migs = m;
	a->handshakes++;
	mig_watch(m);
	mig_step(m);
	return 1;
}

static void listen_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct app *a = w->data;
	int i;

	(void)loop;
	(void)revents;
	/* The migration ended in this same wake-up (a device removal reaches
	 * the listener too): its outcome is the run's. */
	if (a->ended)
		return;
	/* Level-triggered: a few per wake-up keep a flood from starving the
	 * migrations in progress. */
	for (i = 0; i < 8 && take_request(a); i++)
		;
	if (a->spare && !request_pending(a)) {
		mig_free(a->spare);
		a->spare = NULL;
	}
}

/* ---- cancellation, control socket, signals ------------------------------------- */

/* Fails every migration (id 0: all, and every handshake); returns how many
 * migrations (single mode: 1 when it ends the run). */
static int cancel_migrations(struct app *a, unsigned id)
{
	struct mig *m, *next;
	int n = 0;

	for (m = a->migs; m; m = next) {
		next = m->next;
		if (id && m->id != id)
			continue;
		rdmig_dest_cancel(m->d, "migrate-recv was cancelled");
		/* A handshake was never a migration: nothing to report. */
		if (!m->admitted) {
			mig_free(m);
			continue;
		}
		mig_end(m, CLI_EX_CANCELLED, "cancelled");
		n++;
	}
	if (!a->o.daemon && !id) {
		if (!n)
			cli_err("Migration failed: cancelled before a source connected");
		a->exit_code = CLI_EX_CANCELLED;
		ev_break(a->loop, EVBREAK_ALL);
		n++;
	}
	return n;
}

static struct json_object *mig_status(struct mig *m)
{
	struct json_object *o = mig_json(m, NULL);
	struct rdmig_stats st = { .size = sizeof(st) };

	rdmig_dest_stats(m->d, &st);
	cli_json_str(o, "status", "active");
	cli_json_str(o, "peer", m->peer);
	cli_json_stats(o, &st);
	return o;
}

static struct json_object *status_reply(struct app *a)
{
	struct json_object *o, *list;
	struct mig *m;

	if (!a->o.daemon) {
		for (m = a->migs; m; m = m->next)
			if (m->admitted)
				return ctl_return(mig_status(m));
	}
	o = json_object_new_object();
	cli_json_str(o, "status", "listening");
	cli_json_u64(o, "handshakes", a->handshakes);
	if (!a->o.daemon)
		return ctl_return(o);
	list = json_object_new_array();
	for (m = a->migs; m; m = m->next)
		if (m->admitted)
			json_object_array_add(list, mig_status(m));
	json_object_object_add(o, "migrations", list);
	return ctl_return(o);
}

static struct json_object *on_command(void *ctx, const char *cmd, struct json_object *req)
{
	struct app *a = ctx;
	struct json_object *jid;
	unsigned id = 0;

	if (!strcmp(cmd, "status"))
		return status_reply(a);
	if (strcmp(cmd, "cancel"))
		return NULL;
	if (json_object_object_get_ex(req, "id", &jid)) {
		if (!json_object_is_type(jid, json_type_int) || json_object_get_int64(jid) <= 0)
			return ctl_error("id must be a positive integer");
		id = (unsigned)json_object_get_int64(jid);
	}
	if (!cancel_migrations(a, id) && id)
		return ctl_error("no such migration");
	return ctl_return(NULL);
}

static void signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct app *a = w->data;

	(void)revents;
	if (cancel_migrations(a, 0) && a->o.daemon)
		a->exit_code = CLI_EX_CANCELLED;
	ev_break(loop, EVBREAK_ALL);
}

/* ---- main ------------------------------------------------------------------------ */

static int start_listening(struct app *a)
{
	char err[8192];
	int rc;

	rc = rdmig_listener_create(&a->l, a->o.host, a->o.port, err, sizeof(err));
	if (rc) {
		cli_err("Unable to listen on %s:%s: %s", a->o.host, a->o.port, err);
		return rc == -ETIMEDOUT ? CLI_EX_TIMEOUT : CLI_EX_CONNECT;
	}
	ev_io_init(&a->listen_w, listen_cb, rdmig_listener_fd(a->l), EV_READ);
	a->listen_w.data = a;
	ev_io_start(a->loop, &a->listen_w);
	if (a->o.json) {
		struct json_object *o = cli_event("listening");

		cli_json_str(o, "host", a->o.host);
		cli_json_u64(o, "port", (uint64_t)rdmig_listener_port(a->l));
		json_object_object_add(o, "auth-key", json_object_new_boolean(a->o.key != NULL));
		cli_emit(o);
	} else {
		cli_err("listening on %s:%d%s", a->o.host, rdmig_listener_port(a->l),
			a->o.key ? "" : " (no --auth-key: any host that reaches it may migrate "
			"into it)");
	}
	return 0;
}

static int setup(struct app *a)
{
	static const int signals[] = { SIGINT, SIGTERM, SIGHUP };
	char err[8192];
	unsigned i;
	int rc;

	cli_bar_init(&a->bar, a->o.json);
	/* A migration has at most 1024 blocks (rdmig(7)). */
	if (fg_install((unsigned)(a->o.daemon ? a->o.max_migrations : 1) * 1024 + a->o.nrams + 1,
		       err, sizeof(err)))
		return cli_usage("%s", err);
	rc = prepare_files(a);
	if (rc)
		return rc;
	a->loop = ev_default_loop(EVFLAG_AUTO);
	if (!a->loop)
		return cli_usage("cannot create the event loop");
	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < 3; i++) {
		ev_signal_init(&a->sigs[i], signal_cb, signals[i]);
		a->sigs[i].data = a;
		ev_signal_start(a->loop, &a->sigs[i]);
	}
	if (a->o.control &&
	    ctl_open(&a->ctl, a->loop, a->o.control, on_command, a, err, sizeof(err)))
		return cli_usage("%s", err);
	return start_listening(a);
}

static void teardown(struct app *a)
{
	unsigned i;

	while (a->migs)
		mig_free(a->migs);
	if (a->spare)
		mig_free(a->spare);
	ctl_close(a->ctl);
	if (a->loop) {
		ev_io_stop(a->loop, &a->listen_w);
		for (i = 0; i < 3; i++)
			ev_signal_stop(a->loop, &a->sigs[i]);
	}
	rdmig_listener_destroy(a->l);
	ends_close_dest(&a->e);
	recv_opts_free(&a->o);
	if (a->loop)
		ev_loop_destroy(a->loop);
}

int main(int argc, char **argv)
{
	static struct app a;
	int rc;

	cli_set_prog("migrate-recv");
	setvbuf(stdout, NULL, _IOLBF, 0);
	rc = recv_opts_parse(&a.o, argc, argv);
	if (rc >= 0) {
		recv_opts_free(&a.o);
		return rc;
	}
	/* The RDMA devices are found while QEMU and the files are looked at. */
	cli_warm_rdma();
	rc = setup(&a);
	if (!rc) {
		ev_run(a.loop, 0);
		rc = a.exit_code;
	}
	teardown(&a);
	return rc;
}
