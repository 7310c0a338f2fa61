/* migrate-send: pushes RAM (and device state) to a migrate-recv over RDMA,
 * cold or live.  Live: pre-copy rounds while the workload keeps writing,
 * its writes tracked with soft-dirty bits, then the workload stops for the
 * last round.  What the workload is (a process writing RAM files, or a
 * QEMU guest) and where the device state comes from (a file, or QEMU's own
 * migration) is ends.h's: this file drives them without knowing which.
 *
 * This file is the driver: it sets up, and one libev loop drives
 * everything: the library's fd and timer, the device-state endpoint's fd,
 * the control socket and the signals.  The migration is a state machine
 * (enum phase, send_phase.c), advanced by the callbacks here; send_int.h
 * lists the other parts.  See migrate-send(1). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "cli.h"
#include "control.h"
#include "devstate.h"
#include "ends.h"
#include "estimate.h"
#include "rdmig.h"
#include "send_ctl.h"
#include "send_end.h"
#include "send_events.h"
#include "send_int.h"
#include "send_loop.h"
#include "send_opts.h"
#include "send_phase.h"

/* ---- the loop: each callback steps the library or hands an event on ------------------ */

/* One step of the library: what finished goes to the phase machine, then
 * the device state that may go now, then the wait the library asks for. */
static void src_step(struct sender *x)
{
	int rc;

	x->kicked = false;
	rc = rdmig_source_process(x->s);
	if (x->ph == PH_DONE)
		return;
	if (rc < 0) {
		send_lib_fail(x, rc, x->ph == PH_CONNECT ? CLI_PHASE_CONNECT : CLI_PHASE_TRANSFER);
		return;
	}
	if (rc == 1)
		send_op_done(x);
	else if (x->ph == PH_PREPARED)
		send_say_prepared(x);
	else if (x->need_prepare && x->ph == PH_ROUND)
		send_prepare_state(x);
	/* Credits may have come back for device state waiting to go. */
	if (x->ph != PH_DONE)
		send_pump_state(x);
	if (x->ph != PH_DONE && !x->kicked)
		send_arm_src_timer(x);
}

static void src_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	src_step(w->data);
}

static void src_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	src_step(w->data);
}

/* Waits with a deadline: for the workload to stop, then for the device
 * state to keep coming. */
static void stop_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sender *x = w->data;
	struct cli_err err;

	(void)loop;
	(void)revents;
	if (x->ph != PH_STATE) {
		send_check_stopped(x);
		return;
	}
	if (x->cancelled) {
		send_local_fail(x, -ECANCELED, "cancelled");
	} else if (cli_now_ms() > x->state_deadline) {
		cli_err_set(&err, -ETIMEDOUT, "the device state did not move for %" PRIu64 " s "
			    "(--timeout): its source stalled", x->o.timeout_s);
		send_local_fail(x, -ETIMEDOUT, err.msg);
	}
}

static void ds_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	send_pump_state(w->data);
}

static void signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	(void)loop;
	(void)revents;
	send_cancel(w->data);
}

/* ---- main ---------------------------------------------------------------------------- */

/* The library's config as the options set it. */
static void source_config(struct sender *x, struct rdmig_config *c)
{
	struct rdmig_config cfg;

	rdmig_config_init(&cfg);
	cfg.pin_all = x->o.pin_all;
	cfg.timeout_ms = (int)(x->o.timeout_s * 1000);
	cfg.verify = x->o.verify;
	cfg.postcopy = x->o.postcopy;
	cfg.channels = (uint32_t)x->o.channels;
	cfg.auth_key = x->o.key;
	cfg.auth_key_len = x->o.key_len;
	if (x->o.have_chunk)
		cfg.chunk_size = (uint32_t)x->o.chunk_size;
	if (x->o.have_cap)
		cfg.pinned_cap = x->o.pinned_cap;
	cfg.log = cli_log;
	cfg.log_ctx = &x->bar;
	cfg.log_level = x->o.verbose > 1 ? RDMIG_LOG_DEBUG :
			x->o.verbose ? RDMIG_LOG_INFO : RDMIG_LOG_WARN;
	/* --estimate's round runs on a thread of its own, without a bar. */
	cfg.progress = x->o.estimate_s ? NULL : send_on_progress;
	cfg.progress_ctx = x;
	cfg.progress_ms = 100;
	cfg.max_bandwidth = x->o.max_bandwidth;
	cfg.switchover_bandwidth = x->o.switch_bw;
	/* The convergence policy; the time limits are set when the first
	 * round begins (send_set_time_limits), the switch-over's cost once
	 * measured (send_note_prepare, send_note_freeze). */
	cfg.max_downtime_ms = (uint32_t)x->o.max_downtime_ms;
	cfg.max_iterations = (uint32_t)x->o.max_iterations;
	cfg.auto_converge = x->o.auto_converge;
	cfg.on_limit = x->o.on_timeout;
	/* Said up front: a destination reserves room for it. */
	cfg.state_max = ds_bytes(x->e.ds);
	*c = cfg;
}

static int create_source(struct sender *x)
{
	struct rdmig_config cfg;
	unsigned i;
	int rc;

	source_config(x, &cfg);
	rc = rdmig_source_create(&x->s, &cfg);
	if (rc)
		return cli_usage("%s", x->s ? rdmig_source_error(x->s) : strerror(-rc));
	for (i = 0; i < x->e.nrams; i++) {
		rc = rdmig_source_add_block(x->s, x->e.rams[i].name, x->e.rams[i].host,
					    x->e.rams[i].len, PAGE);
		if (rc < 0)
			return cli_usage("--ram %s: %s", x->e.rams[i].name,
					 rdmig_source_error(x->s));
	}
	return 0;
}

static int open_ends(struct sender *x)
{
	struct src_spec sp = {
		.qmp = x->o.qmp, .qemu = x->o.qemu, .state_in = x->o.state_in, .pid = x->o.pid,
		.live = x->o.live, .timeout_ms = (int)(x->o.timeout_s * 1000),
		.track = { .mode = x->o.track }, .throttle = x->o.auto_converge,
	};
	struct cli_err err;
	int rc = ends_open_source(&x->e, &sp, x->o.rams, x->o.nrams, &err);

	/* The ends own the blocks now. */
	x->o.rams = NULL;
	x->o.nrams = 0;
	return rc ? cli_usage("%s", err.msg) : 0;
}

static void watch(struct sender *x)
{
	static const int signals[] = { SIGINT, SIGTERM, SIGHUP };
	unsigned i;

	ev_io_init(&x->src_io, src_io_cb, rdmig_source_fd(x->s), EV_READ);
	ev_timer_init(&x->src_timer, src_timer_cb, 0.0, 0.0);
	ev_timer_init(&x->stop_timer, stop_timer_cb, 0.0, STOP_POLL_S);
	ev_io_init(&x->ds_io, ds_io_cb, -1, EV_READ);
	x->src_io.data = x->src_timer.data = x->stop_timer.data = x->ds_io.data = x;
	ev_io_start(x->loop, &x->src_io);
	for (i = 0; i < 3; i++) {
		ev_signal_init(&x->sigs[i], signal_cb, signals[i]);
		x->sigs[i].data = x;
		ev_signal_start(x->loop, &x->sigs[i]);
	}
}

static int prepare(struct sender *x)
{
	struct cli_err err;
	int rc;

	cli_bar_init(&x->bar, x->o.json);
	x->max_bandwidth = x->o.max_bandwidth;
	x->max_downtime = x->o.max_downtime_ms;
	x->downtime_promised = x->o.have_downtime;
	x->max_time_s = x->o.max_time_s;
	x->max_time_gib_s = x->o.max_time_gib_s;
	x->sw_reason = RDMIG_REASON_CONVERGED;
	x->status = ST_SETUP;
	x->fwd = malloc(FWD_BUF);
	if (!x->fwd)
		return cli_usage("out of memory");
	rc = open_ends(x);
	if (!rc)
		rc = create_source(x);
	if (rc)
		return rc;
	x->loop = ev_default_loop(EVFLAG_AUTO);
	if (!x->loop)
		return cli_usage("cannot create the event loop");
	signal(SIGPIPE, SIG_IGN);
	watch(x);
	if (x->o.control &&
	    ctl_open(&x->ctl, x->loop, x->o.control, send_on_command, x, &err))
		return cli_usage("%s", err.msg);
	return 0;
}

static void cleanup(struct sender *x)
{
	unsigned i;

	ctl_close(x->ctl);
	if (x->loop) {
		ev_io_stop(x->loop, &x->src_io);
		ev_io_stop(x->loop, &x->ds_io);
		ev_timer_stop(x->loop, &x->src_timer);
		ev_timer_stop(x->loop, &x->stop_timer);
		for (i = 0; i < 3; i++)
			ev_signal_stop(x->loop, &x->sigs[i]);
	}
	ends_close_source(&x->e);
	rdmig_source_destroy(x->s);
	free(x->o.rams);
	cli_free_key(x->o.key, x->o.key_len);
	free(x->fwd);
	if (x->loop)
		ev_loop_destroy(x->loop);
}

/* --estimate: measures and forecasts instead of migrating. */
static int estimate(struct sender *x)
{
	struct rdmig_config cfg;
	struct est_measure m;
	uint64_t *lens = calloc(x->e.nrams, sizeof(*lens));
	struct cli_err err;
	unsigned i;
	int rc;

	if (!lens)
		return cli_usage("out of memory");
	for (i = 0; i < x->e.nrams; i++)
		lens[i] = x->e.rams[i].len;
	rc = est_measure(x->s, x->e.wl, lens, x->e.nrams, x->o.host, x->o.port,
			 x->o.estimate_s * 1000, &m, &err);
	free(lens);
	if (rc) {
		int code = rc == -EINTR ? CLI_EX_CANCELLED :
			   m.connected ? CLI_EX_TRANSFER : CLI_EX_CONNECT;

		cli_err("estimate: %s (the workload runs on, untouched)", err.msg);
		if (x->o.json)
			cli_emit_failed(err.msg, code, NULL);
		return code;
	}
	source_config(x, &cfg);
	cfg.max_time_ms = x->o.max_time_s * 1000;
	cfg.max_time_per_gib_ms = x->o.max_time_gib_s * 1000;
	return est_report(&m, &cfg, x->o.json);
}

int main(int argc, char **argv)
{
	static struct sender x;
	int rc;

	cli_set_prog("migrate-send");
	setvbuf(stdout, NULL, _IOLBF, 0);
	rc = send_parse_args(&x.o, argc, argv);
	if (rc >= 0) {
		free(x.o.rams);
		cli_free_key(x.o.key, x.o.key_len);
		return rc;
	}
	/* The RDMA devices are found while the ends are opened. */
	cli_warm_rdma();
	rc = prepare(&x);
	if (rc) {
		cleanup(&x);
		return rc;
	}
	if (x.o.estimate_s) {
		rc = estimate(&x);
		cleanup(&x);
		return rc;
	}
	send_connect(&x);
	if (x.ph != PH_DONE)
		ev_run(x.loop, 0);
	cleanup(&x);
	return x.exit_code;
}
