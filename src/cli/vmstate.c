#include "vmstate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "cli.h"
#include "qmp.h"

#define FD_NAME "rdmig-state"
#define PIPE_ROOM (1 << 20)    /* the unprivileged pipe-max-size default */
/* QEMU's own part moves through a local pipe: its default 128 MiB/s would
 * only stretch the pre-copy of its RAM. */
#define SOURCE_BANDWIDTH (100ull << 30)
/* How long a cancelled QEMU migration may take to end. */
#define CANCEL_MS 10000
/* query-migrate between events, in case one was missed. */
#define QUERY_EVERY_MS 20
#define MAX_CHANGES 16

/* What a pipe migration needs on, and cannot have on: a one-way pipe
 * carries no return path, multifd or postcopy channels, and mapped-ram
 * wants a seekable file. */
static const char *const caps_on_both[] = { "x-ignore-shared", "events" };
static const char *const caps_off[] = {
	"return-path", "multifd", "mapped-ram", "postcopy-ram", "postcopy-preempt",
	"switchover-ack", "background-snapshot", "zero-copy-send", "x-colo", "block",
};

struct cap_change {
	const char *name;
	bool was;
};

struct vmstate {
	struct qmp *q;      /* borrowed */
	int fd;             /* our end of the pipe, -1 once closed */
	bool source;
	bool begun;         /* migrate / migrate-incoming went out */
	bool released;      /* migrate-continue went out */
	bool exit_on_error; /* QEMU 9.1+: migrate-incoming takes exit-on-error */
	struct cap_change caps[MAX_CHANGES];
	unsigned ncaps;
	struct json_object *params_was; /* the parameters we change, as they were */
	struct json_object *params_now; /* ... and as we set them */
	bool applied;       /* what was planned is set: restore() has work */
	uint64_t stop_ms, last_query_ms;
};

static bool in_list(const char *name, const char *const *list, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(name, list[i]))
			return true;
	return false;
}

/* ---- capabilities and parameters ---------------------------------------- */

static int set_caps(struct qmp *q, const struct cap_change *c, unsigned n, bool restore,
		    struct cli_err *err)
{
	struct json_object *list = json_object_new_array(), *a = json_object_new_object();
	unsigned i;

	for (i = 0; i < n; i++) {
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "capability", json_object_new_string(c[i].name));
		json_object_object_add(o, "state", json_object_new_boolean(restore ? c[i].was
										    : !c[i].was));
		json_object_array_add(list, o);
	}
	json_object_object_add(a, "capabilities", list);
	return qmp_call(q, "migrate-set-capabilities", a, NULL, err);
}

/* Our table's copy of @name (the reply's strings go with the reply). */
static const char *own_name(const char *name)
{
	static const char pbs[] = "pause-before-switchover";
	size_t i;

	for (i = 0; i < 2; i++)
		if (!strcmp(name, caps_on_both[i]))
			return caps_on_both[i];
	for (i = 0; i < sizeof(caps_off) / sizeof(caps_off[0]); i++)
		if (!strcmp(name, caps_off[i]))
			return caps_off[i];
	return !strcmp(name, pbs) ? pbs : NULL;
}

/* Each capability whose state must change, with the state it had.  All
 * change in one command: QEMU checks their dependencies on the result. */
static int plan_caps(struct vmstate *v, struct json_object *caps, struct cli_err *err)
{
	bool has_ignore = false;
	size_t i, n = json_object_array_length(caps);

	for (i = 0; i < n; i++) {
		struct json_object *c = json_object_array_get_idx(caps, i), *st, *nm;
		const char *name;
		bool on, want_on, want_off;

		if (!json_object_object_get_ex(c, "capability", &nm) ||
		    !json_object_object_get_ex(c, "state", &st))
			continue;
		name = json_object_get_string(nm);
		on = json_object_get_boolean(st);
		has_ignore |= !strcmp(name, "x-ignore-shared");
		want_on = in_list(name, caps_on_both, 2) ||
			  (v->source && !strcmp(name, "pause-before-switchover"));
		want_off = in_list(name, caps_off, sizeof(caps_off) / sizeof(caps_off[0])) ||
			   (!v->source && !strcmp(name, "pause-before-switchover"));
		if ((want_on && on) || (!want_on && !want_off) || (want_off && !on))
			continue;
		if (v->ncaps == MAX_CHANGES)
			return cli_err_set(err, -E2BIG, "too many capabilities to change");
		v->caps[v->ncaps].name = own_name(name);
		v->caps[v->ncaps++].was = on;
	}
	if (!has_ignore)
		return cli_err_set(err, -ENOTSUP, "this QEMU has no x-ignore-shared capability "
				   "(QEMU 4.0 or later is needed)");
	return 0;
}

/* Reads QEMU's capabilities and plans what must change (v->caps); nothing
 * is set yet. */
static int read_caps(struct vmstate *v, struct cli_err *err)
{
	struct json_object *ret;
	struct cli_err why;
	int rc = qmp_call(v->q, "query-migrate-capabilities", NULL, &ret, &why);

	if (rc)
		return cli_err_set(err, rc, "cannot read QEMU's migration capabilities: %s",
				   why.msg);
	rc = json_object_is_type(ret, json_type_array) ? plan_caps(v, ret, err) :
		cli_err_set(err, -EPROTO, "query-migrate-capabilities answered no list");
	json_object_put(ret);
	return rc;
}

/* The parameters to change: the old values kept in params_was, the new ones
 * in params_now (NULL when none). */
static void plan_params(struct vmstate *v, struct json_object *cur)
{
	struct json_object *now = json_object_new_object(), *x;

	v->params_was = json_object_new_object();
	if (json_object_object_get_ex(cur, "mode", &x) &&
	    strcmp(json_object_get_string(x), "normal")) {
		json_object_object_add(v->params_was, "mode", json_object_get(x));
		json_object_object_add(now, "mode", json_object_new_string("normal"));
	}
	if (v->source && json_object_object_get_ex(cur, "max-bandwidth", &x) &&
	    (uint64_t)json_object_get_int64(x) < SOURCE_BANDWIDTH) {
		json_object_object_add(v->params_was, "max-bandwidth", json_object_get(x));
		json_object_object_add(now, "max-bandwidth",
				       json_object_new_int64((int64_t)SOURCE_BANDWIDTH));
	}
	if (!json_object_object_length(now)) {
		json_object_put(now);
		now = NULL;
	}
	v->params_now = now;
}

static int read_params(struct vmstate *v, struct cli_err *err)
{
	struct json_object *cur;
	struct cli_err why;
	int rc = qmp_call(v->q, "query-migrate-parameters", NULL, &cur, &why);

	if (rc)
		return cli_err_set(err, rc, "cannot read QEMU's migration parameters: %s", why.msg);
	plan_params(v, cur);
	json_object_put(cur);
	return 0;
}

/* What was planned is set, all capabilities in one command (QEMU checks
 * their dependencies on the result).  Only from here on is anything to be
 * put back. */
static int apply(struct vmstate *v, struct cli_err *err)
{
	struct cli_err why;
	int rc = 0;

	if (v->applied)
		return 0;
	v->applied = true;
	if (v->ncaps)
		rc = set_caps(v->q, v->caps, v->ncaps, false, &why);
	if (rc) {
		v->ncaps = 0;
		return cli_err_set(err, rc, "cannot set QEMU's migration capabilities for a "
				   "pipe migration: %s", why.msg);
	}
	if (v->params_now)
		rc = qmp_call(v->q, "migrate-set-parameters", json_object_get(v->params_now), NULL,
			      &why);
	if (rc) {
		json_object_put(v->params_was);
		v->params_was = NULL;
		return cli_err_set(err, rc, "cannot set QEMU's migration parameters: %s", why.msg);
	}
	return 0;
}

/* Everything back as it was; what could not be is said in @err. */
static int restore(struct vmstate *v, struct cli_err *err)
{
	struct cli_err why;
	int rc = 0, r;

	if (!v->applied)
		return 0;
	if (v->ncaps) {
		r = set_caps(v->q, v->caps, v->ncaps, true, &why);
		if (r)
			rc = cli_err_set(err, r, "QEMU's migration capabilities could not be "
					 "restored: %s", why.msg);
		else
			v->ncaps = 0;
	}
	if (v->params_was && json_object_object_length(v->params_was)) {
		r = qmp_call(v->q, "migrate-set-parameters", json_object_get(v->params_was), NULL,
			     &why);
		if (r && !rc)
			rc = cli_err_set(err, r, "QEMU's migration parameters could not be "
					 "restored: %s", why.msg);
	}
	json_object_put(v->params_was);
	json_object_put(v->params_now);
	v->params_was = v->params_now = NULL;
	v->applied = false;
	return rc;
}

/* ---- the pipe ----------------------------------------------------------- */

static int hand_pipe(struct vmstate *v, struct cli_err *err)
{
	int p[2], theirs, rc;
	struct cli_err why;

	if (pipe2(p, O_CLOEXEC))
		return cli_err_set(err, -errno, "pipe: %s", strerror(errno));
	v->fd = v->source ? p[0] : p[1];
	theirs = v->source ? p[1] : p[0];
	fcntl(v->fd, F_SETFL, fcntl(v->fd, F_GETFL) | O_NONBLOCK);
	/* Room for a small guest's whole device state: QEMU's save need not
	 * wait for us.  Best effort (the default 64 KiB works too). */
	if (v->source)
		fcntl(v->fd, F_SETPIPE_SZ, PIPE_ROOM);
	rc = qmp_getfd(v->q, theirs, FD_NAME, &why);
	/* QEMU holds its own copy now: ours would hide the end of stream. */
	close(theirs);
	return rc ? cli_err_set(err, rc, "QEMU refused the device state's pipe: %s", why.msg) : 0;
}

int vms_prepare(struct vmstate **out, struct qmp *q, bool source, struct cli_err *err)
{
	struct vmstate *v = calloc(1, sizeof(*v));
	struct qmp_version ver;
	int rc;

	*out = NULL;
	if (!v)
		return cli_err_set(err, -ENOMEM, "out of memory");
	v->q = q;
	v->fd = -1;
	v->source = source;
	rc = qmp_version(q, &ver, err);
	if (!rc) {
		v->exit_on_error = qmp_version_ge(&ver, 9, 1);
		rc = read_caps(v, err);
	}
	if (!rc)
		rc = read_params(v, err);
	/* A source QEMU keeps its own settings until its migration starts: a
	 * migrate-send killed before that leaves nothing changed behind. */
	if (!rc && !source)
		rc = apply(v, err);
	if (!rc)
		rc = hand_pipe(v, err);
	if (rc) {
		vms_close(v, NULL);
		return rc;
	}
	*out = v;
	return 0;
}

int vms_begin(struct vmstate *v, struct cli_err *err)
{
	struct json_object *a;
	struct cli_err why;
	int rc;

	if (v->begun)
		return 0;
	rc = apply(v, err);
	if (rc)
		return rc;
	a = json_object_new_object();
	json_object_object_add(a, "uri", json_object_new_string("fd:" FD_NAME));
	if (!v->source && v->exit_on_error)
		json_object_object_add(a, "exit-on-error", json_object_new_boolean(false));
	rc = qmp_call(v->q, v->source ? "migrate" : "migrate-incoming", a, NULL, &why);
	if (rc)
		return cli_err_set(err, rc, "QEMU refused to %s the device state: %s",
				   v->source ? "save" : "load", why.msg);
	v->begun = true;
	return 0;
}

/* QEMU's STOP event stamps the moment in wall-clock time: ours is monotonic. */
static void note_stop(struct vmstate *v, struct json_object *ev)
{
	struct json_object *ts, *x;
	struct timespec real;
	int64_t at_us, now_us;

	clock_gettime(CLOCK_REALTIME, &real);
	v->stop_ms = cli_now_ms();
	if (!json_object_object_get_ex(ev, "timestamp", &ts) ||
	    !json_object_object_get_ex(ts, "seconds", &x))
		return;
	at_us = json_object_get_int64(x) * 1000000;
	if (json_object_object_get_ex(ts, "microseconds", &x))
		at_us += json_object_get_int64(x);
	now_us = (int64_t)real.tv_sec * 1000000 + real.tv_nsec / 1000;
	if (at_us <= now_us && now_us - at_us < 60000000)
		v->stop_ms -= (uint64_t)((now_us - at_us) / 1000);
}

/* The status QEMU's migration is in, from its events, else (now and then)
 * from query-migrate; "" when nothing new is known. */
static int migration_status(struct vmstate *v, char *st, size_t len, struct cli_err *err)
{
	struct json_object *ev, *data, *s;
	struct qmp_migration m;
	int rc = qmp_pump(v->q, err);

	st[0] = '\0';
	if (rc)
		return rc;
	while (qmp_event_take(v->q, "STOP", &ev)) {
		note_stop(v, ev);
		json_object_put(ev);
	}
	while (qmp_event_take(v->q, "MIGRATION", &ev)) {
		if (json_object_object_get_ex(ev, "data", &data) &&
		    json_object_object_get_ex(data, "status", &s))
			snprintf(st, len, "%s", json_object_get_string(s));
		json_object_put(ev);
	}
	if (st[0] || cli_now_ms() - v->last_query_ms < QUERY_EVERY_MS)
		return 0;
	v->last_query_ms = cli_now_ms();
	rc = qmp_migrate_query(v->q, &m, err);
	if (!rc)
		snprintf(st, len, "%s", m.status);
	return rc;
}

int vms_stopped(struct vmstate *v, uint64_t *stop_ms, struct cli_err *err)
{
	struct qmp_migration m;
	char st[32];
	int rc = migration_status(v, st, sizeof(st), err);

	if (rc)
		return rc;
	if (!strcmp(st, "pre-switchover")) {
		*stop_ms = v->stop_ms ? v->stop_ms : cli_now_ms();
		return 1;
	}
	if (!strcmp(st, "failed") || !strcmp(st, "cancelled") || !strcmp(st, "cancelling")) {
		if (!qmp_migrate_query(v->q, &m, NULL) && m.error[0])
			return cli_err_set(err, -EIO, "QEMU's own migration %s: %s", st, m.error);
		return cli_err_set(err, -EIO, "QEMU's own migration %s", st);
	}
	return 0;
}

int vms_release(struct vmstate *v, struct cli_err *err)
{
	struct json_object *a = json_object_new_object();
	struct cli_err why;
	int rc;

	json_object_object_add(a, "state", json_object_new_string("pre-switchover"));
	rc = qmp_call(v->q, "migrate-continue", a, NULL, &why);
	if (rc)
		return cli_err_set(err, rc, "QEMU would not go on with its switch-over: %s",
				   why.msg);
	v->released = true;
	return 0;
}

int vms_fd(const struct vmstate *v)
{
	return v->fd;
}

ssize_t vms_read(struct vmstate *v, void *buf, size_t len, struct cli_err *err)
{
	ssize_t n;

	do
		n = read(v->fd, buf, len);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno == EAGAIN)
		return -EAGAIN;
	if (n < 0)
		return cli_err_set(err, -errno, "reading QEMU's device state: %s",
				   strerror(errno));
	return n;
}

static bool final_status(const char *st)
{
	return !strcmp(st, "completed") || !strcmp(st, "failed") || !strcmp(st, "cancelled");
}

/* Until QEMU's migration ended, told by its MIGRATION events (on while we
 * drive it): polling query-migrate would add its interval to the
 * downtime.  0 on "completed", -EIO with QEMU's reason otherwise. */
static int wait_end(struct vmstate *v, int timeout_ms, struct cli_err *err)
{
	uint64_t end = cli_now_ms() + (uint64_t)timeout_ms;
	struct json_object *ev, *data, *st;
	struct qmp_migration m;
	char status[32];
	int rc = qmp_migrate_query(v->q, &m, err);

	snprintf(status, sizeof(status), "%s", m.status);
	while (!rc && !final_status(status)) {
		uint64_t now = cli_now_ms();

		if (now >= end)
			return cli_err_set(err, -ETIMEDOUT, "migration still %s after %d ms",
					   status, timeout_ms);
		/* Asked again now and then, should an event not come. */
		rc = qmp_event_wait(v->q, "MIGRATION", end - now < 50 ? (int)(end - now) : 50, &ev,
				    err);
		if (rc == -ETIMEDOUT) {
			rc = qmp_migrate_query(v->q, &m, err);
			snprintf(status, sizeof(status), "%s", m.status);
			continue;
		}
		if (!rc && json_object_object_get_ex(ev, "data", &data) &&
			 json_object_object_get_ex(data, "status", &st))
			snprintf(status, sizeof(status), "%s", json_object_get_string(st));
		if (!rc)
			json_object_put(ev);
	}
	if (rc == -ECONNRESET)
		return cli_err_set(err, rc, "QEMU closed its QMP socket during the migration "
				   "(a destination QEMU exits when loading fails: see its output)");
	if (rc || !strcmp(status, "completed"))
		return rc;
	if (!qmp_migrate_query(v->q, &m, NULL) && m.error[0])
		return cli_err_set(err, -EIO, "%s", m.error);
	return cli_err_set(err, -EIO, "migration %s%s", status, strcmp(status, "failed") ?
			   "" : " (QEMU gave no reason)");
}

/* Whether QEMU finished, and how; everything goes back either way. */
static int finish(struct vmstate *v, int timeout_ms, struct cli_err *err)
{
	struct cli_err why;
	int rc = wait_end(v, timeout_ms, &why);

	if (rc == -ECONNRESET)
		return cli_err_set(err, rc, "QEMU exited while %s the device state%s",
				   v->source ? "saving" : "loading",
				   v->source ? "" : ": it rejected "
				   "it (another machine type, devices or RAM layout than the source's?)");
	if (rc)
		return cli_err_set(err, rc, "QEMU could not %s the device state: %s",
				   v->source ? "save" : "load", why.msg);
	return restore(v, err);
}

int vms_save_finish(struct vmstate *v, int timeout_ms, struct cli_err *err)
{
	return finish(v, timeout_ms, err);
}

/* The destination QEMU closed the pipe: it gave up loading.  From 9.1 on it
 * stays (exit-on-error off) and says why. */
static int rejected(struct vmstate *v, struct cli_err *err)
{
	struct qmp_migration m;

	if (!qmp_migrate_query(v->q, &m, NULL) && m.error[0])
		return cli_err_set(err, -EPIPE, "QEMU rejected the device state: %s", m.error);
	return cli_err_set(err, -EPIPE, "QEMU stopped reading the device state (it "
			   "rejected it: another machine type, devices or RAM layout than the "
			   "source's?)");
}

int vms_write(struct vmstate *v, const void *data, size_t len, int timeout_ms,
	      struct cli_err *err)
{
	uint64_t deadline = cli_now_ms() + (uint64_t)timeout_ms;
	const char *p = data;
	struct pollfd pfd = { .fd = v->fd, .events = POLLOUT };
	ssize_t n;

	while (len) {
		n = write(v->fd, p, len);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EPIPE)
			return rejected(v, err);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return cli_err_set(err, -errno, "writing the device state to QEMU: %s",
					   strerror(errno));
		if (cli_now_ms() >= deadline)
			return cli_err_set(err, -ETIMEDOUT, "QEMU did not read the device state "
					   "within %d ms", timeout_ms);
		poll(&pfd, 1, 100);
	}
	return 0;
}

int vms_load_finish(struct vmstate *v, int timeout_ms, struct cli_err *err)
{
	/* End of stream: QEMU knows the state is whole only from EOF. */
	close(v->fd);
	v->fd = -1;
	return finish(v, timeout_ms, err);
}

/* A source QEMU's migration in any state but a final one is cancelled, and
 * waited for: capabilities cannot change while it runs. */
static void cancel(struct vmstate *v)
{
	struct qmp_migration m;

	if (!v->source || !v->begun || qmp_migrate_query(v->q, &m, NULL))
		return;
	if (!strcmp(m.status, "completed") || !strcmp(m.status, "failed") ||
	    !strcmp(m.status, "cancelled") || !strcmp(m.status, "none"))
		return;
	if (strcmp(m.status, "cancelling"))
		qmp_migrate_cancel(v->q, NULL);
	qmp_migrate_wait(v->q, CANCEL_MS, &m, NULL);
}

int vms_close(struct vmstate *v, struct cli_err *err)
{
	int rc;

	if (!v)
		return 0;
	if (v->fd >= 0)
		close(v->fd);
	/* Prepared, never used: QEMU would keep the fd for good. */
	if (!v->begun)
		qmp_closefd(v->q, FD_NAME, NULL);
	cancel(v);
	/* A destination's incoming migration cannot be cancelled, but the
	 * closed pipe ends it; its settings can change only after that. */
	if (!v->source && v->begun)
		wait_end(v, CANCEL_MS, NULL);
	rc = restore(v, err);
	free(v);
	return rc;
}
