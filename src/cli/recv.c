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
 * time.
 *
 * This file is the driver: set-up, the loop, teardown.  Each job is a
 * module of its own below it (recv_int.h lists them). */
#include <signal.h>
#include <stdio.h>

#include <ev.h>

#include "cli.h"
#include "ends.h"
#include "faultguard.h"
#include "recv_ctl.h"
#include "recv_files.h"
#include "recv_int.h"
#include "recv_listen.h"
#include "recv_mig.h"
#include "recv_opts.h"
#include "recv_pcsock.h"

/* Everything before the loop runs: 0, or the exit code after saying why. */
static int setup(struct app *a)
{
	struct cli_err err;
	int rc;

	cli_bar_init(&a->bar, a->o.json);
	/* A migration has at most 1024 blocks (rdmig(7)). */
	if (fg_install((unsigned)(a->o.daemon ? a->o.max_migrations : 1) * 1024 + a->o.nrams + 1,
		       &err))
		return cli_usage("%s", err.msg);
	rc = recv_files_prepare(a);
	if (rc)
		return rc;
	a->loop = ev_default_loop(EVFLAG_AUTO);
	if (!a->loop)
		return cli_usage("cannot create the event loop");
	signal(SIGPIPE, SIG_IGN);
	rc = recv_ctl_start(a);
	/* The VMM's memory is the blocks: it comes before any source may. */
	if (!rc)
		rc = recv_pcsock_attach(a);
	return rc ? rc : recv_listen_start(a);
}

/* Undoes what setup() did, as far as it got; the migrations still in
 * progress (cancelled, or a daemon stopped) go first. */
static void teardown(struct app *a)
{
	while (a->migs)
		recv_mig_free(a->migs);
	recv_listen_stop(a);
	recv_ctl_stop(a);
	recv_pcsock_close(a);
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
