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
#include "recv_admit.h"
#include "recv_files.h"
#include "recv_int.h"
#include "recv_mig.h"
#include "recv_opts.h"
#include "recv_room.h"

/* A handshake older than this may be dropped to make room for a new
 * connection when every handshake slot is taken: an honest source
 * authenticates within a few round trips, a squatter does not. */
#define EVICT_AFTER_MS 1000

/* ---- connections ------------------------------------------------------------------ */

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
	recv_mig_turn_away(old, -ETIMEDOUT, "dropped to make room: it did not authenticate within "
		  "1 s while every handshake slot was taken");
	return NULL;
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
		m = recv_mig_new(a);
		if (!m || (!a->o.daemon && recv_files_lend(m))) {
			if (m)
				recv_mig_free(m);
			return rdmig_listener_refuse(a->l) ? 0 : 1;
		}
	}
	rc = rdmig_dest_accept(m->d, a->l, 0);
	if (rc == -EAGAIN) {
		recv_mig_free(m);
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
			recv_mig_free(m);
			return 0;
		}
		/* What the peer asked for is its problem; failing to accept at
		 * all (memory, pinning) is ours and would fail every source. */
		if ((rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EACCES) &&
		    rdmig_dest_error_class(m->d) == RDMIG_ERROR_NONE) {
			recv_mig_report_turned_away(m, rc, err);
			m->peer[0] = '\0';
			a->spare = m;
		} else if (rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EACCES ||
			   a->o.daemon) {
			recv_mig_turn_away(m, rc, err);
		} else {
			recv_mig_end(m, cli_exit_code(rc, CLI_PHASE_CONNECT, err), err);
		}
		return 1;
	}
	recv_mig_start(m);
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
		recv_mig_free(a->spare);
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
			recv_mig_free(m);
			continue;
		}
		recv_mig_end(m, CLI_EX_CANCELLED, "cancelled");
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

static struct json_object *status_reply(struct app *a)
{
	struct json_object *o, *list;
	struct mig *m;

	if (!a->o.daemon) {
		for (m = a->migs; m; m = m->next)
			if (m->admitted)
				return ctl_return(recv_mig_status(m));
	}
	o = json_object_new_object();
	cli_json_str(o, "status", "listening");
	cli_json_u64(o, "handshakes", a->handshakes);
	if (!a->o.daemon)
		return ctl_return(o);
	list = json_object_new_array();
	for (m = a->migs; m; m = m->next)
		if (m->admitted)
			json_object_array_add(list, recv_mig_status(m));
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
	rc = recv_files_prepare(a);
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
		recv_mig_free(a->migs);
	if (a->spare)
		recv_mig_free(a->spare);
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
