/* qmp_cmd: the QMP commands the commands and the tests use, each one
 * qmp_call() and a look at its answer (qmp.h documents them). */
#include "qmp.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clierr.h"
#include "qmp_int.h"

/* Between two query-migrate polls: the device state of a small guest moves
 * in a few milliseconds, and a query costs QEMU's main loop next to nothing.
 * The wait is the guest's downtime on both sides, so it starts short and
 * grows only for a migration that takes its time. */
#define MIG_POLL_FIRST_MS 1
#define MIG_POLL_MS 20

/* ---- commands ---------------------------------------------------------- */

static struct json_object *args1(const char *key, struct json_object *val)
{
	struct json_object *a = json_object_new_object();

	json_object_object_add(a, key, val);
	return a;
}

int qmp_getfd(struct qmp *q, int fd, const char *name, struct cli_err *err)
{
	return qmp_call_fd(q, "getfd", args1("fdname", json_object_new_string(name)), fd, NULL,
			   err);
}

int qmp_closefd(struct qmp *q, const char *name, struct cli_err *err)
{
	return qmp_call(q, "closefd", args1("fdname", json_object_new_string(name)), NULL,
			err);
}

int qmp_status(struct qmp *q, char *status, size_t len, struct cli_err *err)
{
	struct json_object *ret;
	const char *s;
	int r = qmp_call(q, "query-status", NULL, &ret, err);

	if (r < 0)
		return r;
	s = qmp_jstr(ret, "status");
	if (s)
		snprintf(status, len, "%s", s);
	json_object_put(ret);
	return s ? 0 : cli_err_set(err, -EPROTO, "query-status answered without a status");
}

int qmp_stop(struct qmp *q, struct cli_err *err)
{
	return qmp_call(q, "stop", NULL, NULL, err);
}

int qmp_cont(struct qmp *q, struct cli_err *err)
{
	return qmp_call(q, "cont", NULL, NULL, err);
}

int qmp_migrate_cap_get(struct qmp *q, const char *cap, bool *on,
			struct cli_err *err)
{
	struct json_object *ret, *c, *state;
	size_t i, n;
	int r = qmp_call(q, "query-migrate-capabilities", NULL, &ret, err);

	if (r < 0)
		return r;
	n = json_object_is_type(ret, json_type_array) ? json_object_array_length(ret) : 0;
	for (i = 0, r = -ENOENT; i < n && r == -ENOENT; i++) {
		c = json_object_array_get_idx(ret, i);
		if (!qmp_jstr(c, "capability") || strcmp(qmp_jstr(c, "capability"), cap) ||
		    !json_object_object_get_ex(c, "state", &state))
			continue;
		*on = json_object_get_boolean(state);
		r = 0;
	}
	json_object_put(ret);
	if (r == -ENOENT)
		return cli_err_set(err, r, "QEMU has no migration capability %s", cap);
	return 0;
}

int qmp_migrate_cap_set(struct qmp *q, const char *cap, bool on,
			struct cli_err *err)
{
	struct json_object *c = json_object_new_object(), *list = json_object_new_array();

	json_object_object_add(c, "capability", json_object_new_string(cap));
	json_object_object_add(c, "state", json_object_new_boolean(on));
	json_object_array_add(list, c);
	return qmp_call(q, "migrate-set-capabilities", args1("capabilities", list), NULL,
			err);
}

int qmp_migrate(struct qmp *q, const char *uri, struct cli_err *err)
{
	return qmp_call(q, "migrate", args1("uri", json_object_new_string(uri)), NULL, err);
}

int qmp_migrate_incoming(struct qmp *q, const char *uri, struct cli_err *err)
{
	return qmp_call(q, "migrate-incoming", args1("uri", json_object_new_string(uri)), NULL,
			err);
}

int qmp_migrate_cancel(struct qmp *q, struct cli_err *err)
{
	return qmp_call(q, "migrate_cancel", NULL, NULL, err);
}

int qmp_migrate_query(struct qmp *q, struct qmp_migration *m,
		      struct cli_err *err)
{
	struct json_object *ret;
	const char *s;
	int r = qmp_call(q, "query-migrate", NULL, &ret, err);

	if (r < 0)
		return r;
	s = qmp_jstr(ret, "status");
	snprintf(m->status, sizeof(m->status), "%s", s ? s : "none");
	s = qmp_jstr(ret, "error-desc");
	qmp_one_line(m->error, sizeof(m->error), s ? s : "");
	json_object_put(ret);
	return 0;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

int qmp_migrate_wait(struct qmp *q, int timeout_ms, struct qmp_migration *m,
		     struct cli_err *err)
{
	struct qmp_waitfor w = qmp_wait_for("migration", timeout_ms);
	int r, step = MIG_POLL_FIRST_MS;

	for (;;) {
		r = qmp_migrate_query(q, m, err);
		if (r == -ECONNRESET)
			return cli_err_set(err, r,
					   "QEMU closed its QMP socket during the migration "
					   "(a destination QEMU exits when loading fails: see its output)");
		if (r < 0)
			return r;
		if (!strcmp(m->status, "completed"))
			return 0;
		if (!strcmp(m->status, "failed"))
			return *m->error ? qmp_qerr_text(err, -EIO, m->error)
					 : cli_err_set(err, -EIO,
						       "migration failed (QEMU gave no reason)");
		if (!strcmp(m->status, "cancelled"))
			return cli_err_set(err, -EIO, "migration was cancelled");
		if (!qmp_ms_left(&w))
			return cli_err_set(err, -ETIMEDOUT, "migration still %s after %d ms",
					   m->status, timeout_ms);
		sleep_ms(qmp_ms_left(&w) < step ? qmp_ms_left(&w) : step);
		step = step * 2 > MIG_POLL_MS ? MIG_POLL_MS : step * 2;
	}
}

/* ---- monitor commands --------------------------------------------------- */

int qmp_hmp(struct qmp *q, const char *line, char **out, struct cli_err *err)
{
	struct json_object *ret;
	int r = qmp_call(q, "human-monitor-command",
			 args1("command-line", json_object_new_string(line)), &ret, err);

	if (r < 0)
		return r;
	*out = json_object_is_type(ret, json_type_string) ? strdup(json_object_get_string(ret)) : NULL;
	json_object_put(ret);
	return *out ? 0 : cli_err_set(err, -EPROTO, "HMP %s returned no text", line);
}

int qmp_version(struct qmp *q, struct qmp_version *v, struct cli_err *err)
{
	struct json_object *ret, *qemu, *n;
	int r = qmp_call(q, "query-version", NULL, &ret, err);

	if (r < 0)
		return r;
	memset(v, 0, sizeof(*v));
	if (!json_object_object_get_ex(ret, "qemu", &qemu)) {
		json_object_put(ret);
		return cli_err_set(err, -EPROTO, "query-version answered without a version");
	}
	if (json_object_object_get_ex(qemu, "major", &n))
		v->major = json_object_get_int(n);
	if (json_object_object_get_ex(qemu, "minor", &n))
		v->minor = json_object_get_int(n);
	if (json_object_object_get_ex(qemu, "micro", &n))
		v->micro = json_object_get_int(n);
	json_object_put(ret);
	return 0;
}

int qmp_uuid(struct qmp *q, char *uuid, size_t len, struct cli_err *err)
{
	struct json_object *ret, *u;
	const char *s;
	size_t i;
	int r = qmp_call(q, "query-uuid", NULL, &ret, err);

	if (r < 0)
		return r;
	s = json_object_object_get_ex(ret, "UUID", &u) ? json_object_get_string(u) : NULL;
	if (!s || strlen(s) != 36) {
		json_object_put(ret);
		return cli_err_set(err, -EPROTO, "query-uuid answered without a UUID");
	}
	for (i = 0; s[i] && i + 1 < len; i++)
		uuid[i] = (char)tolower((unsigned char)s[i]);
	if (len)
		uuid[i] = '\0';
	json_object_put(ret);
	return 0;
}

int qmp_vcpu_threads(struct qmp *q, pid_t *tids, unsigned max, unsigned *n, struct cli_err *err)
{
	struct json_object *ret, *cpu, *tid;
	size_t i, len;
	unsigned k;
	int64_t v;
	int r = qmp_call(q, "query-cpus-fast", NULL, &ret, err);

	*n = 0;
	if (r < 0)
		return r;
	if (!json_object_is_type(ret, json_type_array)) {
		json_object_put(ret);
		return cli_err_set(err, -EPROTO, "query-cpus-fast answered without a list");
	}
	len = json_object_array_length(ret);
	for (i = 0; i < len; i++) {
		cpu = json_object_array_get_idx(ret, i);
		if (!json_object_object_get_ex(cpu, "thread-id", &tid) ||
		    !json_object_is_type(tid, json_type_int) ||
		    (v = json_object_get_int64(tid)) <= 0 || v > INT32_MAX) {
			json_object_put(ret);
			return cli_err_set(err, -EPROTO, "query-cpus-fast: vCPU %zu has no "
					   "thread-id", i);
		}
		for (k = 0; k < *n && tids[k] != (pid_t)v; k++)
			;
		if (k < *n)
			continue;
		if (*n == max) {
			json_object_put(ret);
			return cli_err_set(err, -E2BIG, "more than %u vCPU threads", max);
		}
		tids[(*n)++] = (pid_t)v;
	}
	json_object_put(ret);
	return *n ? 0 : cli_err_set(err, -EPROTO, "query-cpus-fast: no vCPU");
}
