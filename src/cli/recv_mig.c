/* One connection's lifetime: a handshake (counted against the limits, owning
 * nothing on this host), then, once the library admitted its source, a
 * migration with its files, driven a step at a time by its fd and its
 * timer until it ends: completed, failed, cancelled or turned away, each
 * said once (a line on stderr, an event with --json) and its handle and
 * files gone by the time it is said. */
#include "recv_mig.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devstate.h"
#include "recv_admit.h"
#include "recv_files.h"
#include "recv_pcsock.h"

/* ---- the handle ------------------------------------------------------------------- */

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

struct mig *recv_mig_new(struct app *a)
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
	cfg.log = cli_log;
	cfg.log_ctx = &a->bar;
	cfg.log_level = a->o.verbose > 1 ? RDMIG_LOG_DEBUG :
			a->o.verbose ? RDMIG_LOG_INFO : RDMIG_LOG_WARN;
	recv_files_hook(m, &cfg);
	recv_pcsock_hook(m, &cfg);
	if (rdmig_dest_create(&m->d, &cfg)) {
		rdmig_dest_destroy(m->d);
		free(m);
		return NULL;
	}
	return m;
}

void recv_mig_free(struct mig *m)
{
	struct app *a = m->app;
	struct mig **pp;

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
	/* Never started before recv_mig_start(): stopping is a no-op then. */
	ev_io_stop(a->loop, &m->io);
	ev_timer_stop(a->loop, &m->timer);
	rdmig_dest_destroy(m->d);
	recv_files_release(m);
	free(m);
}

/* ---- ends, each said once --------------------------------------------------------- */

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
void recv_mig_report_turned_away(struct mig *m, int rc, const char *msg)
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

void recv_mig_turn_away(struct mig *m, int rc, const char *msg)
{
	recv_mig_report_turned_away(m, rc, msg);
	recv_mig_free(m);
}

/* Ends an admitted migration: the exit code of a single-mode run, and one
 * report. */
void recv_mig_end(struct mig *m, int code, const char *msg)
{
	struct app *a = m->app;
	struct json_object *o = NULL;
	char line[6144];

	cli_bar_clear(&a->bar);
	code = recv_pcsock_code(a, code);
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
	recv_mig_free(m);
	/* The VMM hears it once the handle is gone: nothing serves its
	 * faults any more. */
	if (!a->o.daemon)
		recv_pcsock_end(a, code, msg);
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

/* ---- steps ------------------------------------------------------------------------ */

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
		recv_mig_turn_away(m, rc, err);
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
	recv_mig_end(m, code, err);
}

static void mig_step(struct mig *m)
{
	struct cli_err err;
	int rc = rdmig_dest_process(m->d);

	if (rc >= 0 && recv_files_check_faults(m, &err)) {
		rdmig_dest_cancel(m->d, err.msg);
		recv_mig_end(m, CLI_EX_TRANSFER, err.msg);
		return;
	}

	if (rc == 0) {
		rc = recv_files_check_set(m, &err);
		if (rc) {
			rdmig_dest_cancel(m->d, err.msg); /* the source learns why */
			recv_mig_end(m, CLI_EX_USAGE, err.msg);
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
	rc = recv_files_finish(m, &err);
	if (rc) {
		char line[8400];

		snprintf(line, sizeof(line), "the source handed over, but the image cannot be "
			 "marked complete: %s", err.msg);
		recv_mig_end(m, CLI_EX_INTERNAL, line);
		return;
	}
	report_done(m);
	recv_mig_end(m, CLI_EX_OK, NULL);
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
		recv_mig_turn_away(m, -EBUSY, why);
	}
}

/* The library asks once the source proved itself: admitted, it is the only
 * one a single run waits for, and the operator hears of it. */
static int admit_cb(void *ctx, uint64_t image_bytes, char *errbuf, size_t errlen)
{
	struct mig *m = ctx;
	struct app *a = m->app;
	struct cli_err err = { .msg = "" };
	int rc = recv_admit(m, image_bytes, &err);

	if (rc)
		return cli_err_give(rc, &err, errbuf, errlen);
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

/* ---- taken on, and shown ---------------------------------------------------------- */

void recv_mig_start(struct mig *m)
{
	struct app *a = m->app;

	m->t0 = cli_now_ms();
	m->linked = true;
	m->next = a->migs;
	a->migs = m;
	a->handshakes++;
	ev_io_init(&m->io, mig_io_cb, rdmig_dest_fd(m->d), EV_READ);
	m->io.data = m;
	ev_io_start(a->loop, &m->io);
	mig_step(m);
}

struct json_object *recv_mig_status(struct mig *m)
{
	struct json_object *o = mig_json(m, NULL);
	struct rdmig_stats st = { .size = sizeof(st) };

	rdmig_dest_stats(m->d, &st);
	cli_json_str(o, "status", "active");
	cli_json_str(o, "peer", m->peer);
	cli_json_stats(o, &st);
	return o;
}
