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
#include "recv_listen.h"
#include "recv_mig.h"
#include "recv_opts.h"
#include "recv_room.h"

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
	return recv_listen_start(a);
}

static void teardown(struct app *a)
{
	unsigned i;

	while (a->migs)
		recv_mig_free(a->migs);
	recv_listen_stop(a);
	ctl_close(a->ctl);
	if (a->loop) {
		for (i = 0; i < 3; i++)
			ev_signal_stop(a->loop, &a->sigs[i]);
	}
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
