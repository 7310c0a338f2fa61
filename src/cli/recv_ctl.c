/* Cancellation from outside: a signal fails every migration and ends the
 * run; the control socket's "cancel" fails one (by id) or all, and its
 * "status" shows the migrations in progress (migrate-recv(1)). */
#include "recv_ctl.h"

#include <signal.h>
#include <string.h>

#include "control.h"
#include "recv_mig.h"

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
	a->signalled = true;
	if (cancel_migrations(a, 0) && a->o.daemon)
		a->exit_code = CLI_EX_CANCELLED;
	ev_break(loop, EVBREAK_ALL);
}

int recv_ctl_start(struct app *a)
{
	static const int signals[] = { SIGINT, SIGTERM, SIGHUP };
	struct cli_err err;
	unsigned i;

	for (i = 0; i < 3; i++) {
		ev_signal_init(&a->sigs[i], signal_cb, signals[i]);
		a->sigs[i].data = a;
		ev_signal_start(a->loop, &a->sigs[i]);
	}
	if (a->o.control &&
	    ctl_open(&a->ctl, a->loop, a->o.control, on_command, a, &err))
		return cli_usage("%s", err.msg);
	return 0;
}

void recv_ctl_stop(struct app *a)
{
	unsigned i;

	ctl_close(a->ctl);
	a->ctl = NULL;
	if (!a->loop)
		return;
	for (i = 0; i < 3; i++)
		ev_signal_stop(a->loop, &a->sigs[i]);
}
