/* The listener: each connection request is refused while the run is busy,
 * or taken as a handshake (recv_mig.h) within --max-handshakes.  When
 * every handshake slot is taken, the oldest one that has had its chance
 * makes room, so a peer that connects and never authenticates costs a
 * bounded slot for a bounded time. */
#include "recv_listen.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>

#include "recv_files.h"
#include "recv_mig.h"
#include "recv_pcsock.h"

/* A handshake older than this may be dropped to make room for a new
 * connection when every handshake slot is taken: an honest source
 * authenticates within a few round trips, a squatter does not. */
#define EVICT_AFTER_MS 1000

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
	recv_mig_turn_away(old, -ETIMEDOUT, "dropped to make room: it did not authenticate "
			   "within 1 s while every handshake slot was taken");
	return NULL;
}

/* Whether a connection request waits on the listener (without taking it). */
static bool request_pending(const struct app *a)
{
	struct pollfd pfd = { .fd = rdmig_listener_fd(a->l), .events = POLLIN };

	return poll(&pfd, 1, 0) > 0;
}

/* The handle for the next connection: the spare one, or a new one (single
 * mode: with the --ram files lent to it); NULL when none can be made. */
static struct mig *next_handle(struct app *a)
{
	struct mig *m = a->spare;

	a->spare = NULL;
	if (m)
		return m;
	m = recv_mig_new(a);
	if (m && !a->o.daemon && (recv_files_lend(m) || recv_pcsock_views(m))) {
		recv_mig_free(m);
		m = NULL;
	}
	return m;
}

/* A request @m could not accept (@rc): 1 when it was handled, 0 when no
 * more can come. */
static int accept_failed(struct app *a, struct mig *m, int rc)
{
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
	} else if (rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EACCES || a->o.daemon) {
		recv_mig_turn_away(m, rc, err);
	} else {
		recv_mig_end(m, cli_exit_code(rc, CLI_PHASE_CONNECT, err), err);
	}
	return 1;
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
	m = next_handle(a);
	if (!m)
		return rdmig_listener_refuse(a->l) ? 0 : 1;
	rc = rdmig_dest_accept(m->d, a->l, 0);
	if (rc == -EAGAIN) {
		recv_mig_free(m);
		return 0;
	}
	rdmig_dest_peer(m->d, m->peer, sizeof(m->peer));
	if (rc)
		return accept_failed(a, m, rc);
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

int recv_listen_start(struct app *a)
{
	struct cli_err err;
	int rc;

	rc = rdmig_listener_create(&a->l, a->o.host, a->o.port, err.msg, sizeof(err.msg));
	if (rc) {
		cli_err("Unable to listen on %s:%s: %s", a->o.host, a->o.port, err.msg);
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

void recv_listen_stop(struct app *a)
{
	if (a->spare)
		recv_mig_free(a->spare);
	a->spare = NULL;
	if (a->loop)
		ev_io_stop(a->loop, &a->listen_w);
	rdmig_listener_destroy(a->l);
	a->l = NULL;
}
