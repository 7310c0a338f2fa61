/* QMP over a unix stream socket, one command at a time, every wait bounded
 * by a deadline.  QEMU writes each message as one JSON object ended by a
 * newline; bytes are read into a buffer that grows up to QMP_MAX_MSG and a
 * message is parsed from its front once a newline has arrived (a monitor
 * with pretty=on spreads one message over many lines, which parsing the
 * front of the buffer copes with too).
 *
 * What QEMU's RAM is made of is qemu_ram.c's: this is the protocol, and
 * the connection; who answers it is qmp_peer.c's, the commands over it
 * qmp_cmd.c's. */
#include "qmp.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clierr.h"
#include "qmp_int.h"
#include "qmp_peer.h"

#define BUF_MIN (64u << 10)

struct qmp {
	int fd;
	struct qmp_peer peer;   /* QEMU itself, from the socket's peer */
	int timeout_ms;
	int64_t next_id;
	char *buf; /* bytes read and not yet parsed */
	size_t len, cap;
	struct json_object *events[QMP_EVENTS_KEPT]; /* oldest first */
	size_t nevents;
};

/* QEMU's text, kept to one line as our messages are. */
void qmp_one_line(char *out, size_t len, const char *text)
{
	size_t i;

	snprintf(out, len, "%s", text);
	for (i = 0; out[i]; i++)
		if (iscntrl((unsigned char)out[i]))
			out[i] = ' ';
	for (; i > 0 && out[i - 1] == ' '; i--)
		out[i - 1] = '\0';
}

int qmp_qerr_text(struct cli_err *err, int code, const char *text)
{
	if (err)
		qmp_one_line(err->msg, sizeof(err->msg), text);
	return code;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct qmp_waitfor qmp_wait_for(const char *what, int ms)
{
	struct qmp_waitfor w = { what, now_ms() + (uint64_t)(ms > 0 ? ms : 0), ms };

	return w;
}

int qmp_ms_left(const struct qmp_waitfor *w)
{
	uint64_t now = now_ms();

	return now >= w->deadline ? 0 : (int)(w->deadline - now);
}

const char *qmp_jstr(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

/* ---- reading and writing ---------------------------------------------- */

/* 1 and *msg when a whole JSON object heads the buffer, 0 when more bytes
 * are needed. */
static int parse_front(struct qmp *q, struct json_object **msg, struct cli_err *err)
{
	struct json_tokener *tok;
	struct json_object *o;
	enum json_tokener_error je;
	size_t skip = 0, end;

	while (skip < q->len && isspace((unsigned char)q->buf[skip]))
		skip++;
	if (skip == q->len) {
		q->len = 0;
		return 0;
	}
	tok = json_tokener_new();
	if (!tok)
		return cli_err_set(err, -ENOMEM, "out of memory parsing QMP");
	o = json_tokener_parse_ex(tok, q->buf + skip, (int)(q->len - skip));
	je = json_tokener_get_error(tok);
	end = skip + json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (je == json_tokener_continue)
		return 0;
	if (je != json_tokener_success || !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return cli_err_set(err, -EPROTO,
				   "QEMU sent something that is not a QMP message: %s",
				   je != json_tokener_success ? json_tokener_error_desc(je) : "not an object");
	}
	memmove(q->buf, q->buf + end, q->len - end);
	q->len -= end;
	*msg = o;
	return 1;
}

static int grow(struct qmp *q, struct cli_err *err)
{
	size_t cap = q->cap ? q->cap * 2 : BUF_MIN;
	char *nb;

	if (q->cap >= QMP_MAX_MSG)
		return cli_err_set(err, -EMSGSIZE, "QEMU sent a QMP message longer than %u MiB",
				   QMP_MAX_MSG >> 20);
	if (cap > QMP_MAX_MSG)
		cap = QMP_MAX_MSG;
	nb = realloc(q->buf, cap);
	if (!nb)
		return cli_err_set(err, -ENOMEM, "out of memory for a %zu byte QMP message", cap);
	q->buf = nb;
	q->cap = cap;
	return 0;
}

/* Reads what QEMU has sent; 1 when a newline came with it (only then can a
 * message have been completed), else 0. */
static int read_more(struct qmp *q, const struct qmp_waitfor *w, struct cli_err *err)
{
	struct pollfd pfd = { .fd = q->fd, .events = POLLIN };
	ssize_t n;
	int r;

	if (q->len == q->cap && (r = grow(q, err)) < 0)
		return r;
	r = poll(&pfd, 1, qmp_ms_left(w));
	if (r < 0)
		return errno == EINTR ? 0 : cli_err_set(err, -errno, "poll on QMP: %s",
							strerror(errno));
	if (r == 0)
		return cli_err_set(err, -ETIMEDOUT,
				   "no %s from QEMU within %d ms (is QEMU stopped?)",
				   w->what, w->ms);
	n = read(q->fd, q->buf + q->len, q->cap - q->len);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (n < 0 && errno != ECONNRESET)
		return cli_err_set(err, -errno, "reading QMP: %s", strerror(errno));
	if (n <= 0)
		return cli_err_set(err, -ECONNRESET,
				   "QEMU closed the QMP connection while we waited for %s (has it exited?)",
				   w->what);
	q->len += (size_t)n;
	return memchr(q->buf + q->len - n, '\n', (size_t)n) != NULL;
}

static int read_msg(struct qmp *q, const struct qmp_waitfor *w, struct json_object **msg,
		    struct cli_err *err)
{
	int r = parse_front(q, msg, err);

	while (r == 0) {
		r = read_more(q, w, err);
		if (r == 1)
			r = parse_front(q, msg, err);
	}
	return r < 0 ? r : 0;
}

/* @fd, when not -1, travels with the first bytes: QEMU takes the fds that
 * arrive with a command as that command's. */
static int send_all(struct qmp *q, const char *data, size_t len, int fd,
		    const struct qmp_waitfor *w, struct cli_err *err)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct pollfd pfd = { .fd = q->fd, .events = POLLOUT };
	size_t off = 0;
	ssize_t n;

	while (off < len) {
		struct iovec iov = { (char *)data + off, len - off };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

		if (fd >= 0 && off == 0) {
			struct cmsghdr *c;

			memset(&ctl, 0, sizeof(ctl));
			mh.msg_control = ctl.buf;
			mh.msg_controllen = sizeof(ctl.buf);
			c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &fd, sizeof(int));
		}
		n = sendmsg(q->fd, &mh, MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
			return cli_err_set(err, -ECONNRESET,
					   "QEMU closed the QMP connection (has it exited?)");
		if (n < 0 && errno != EAGAIN)
			return cli_err_set(err, -errno, "Unable to send a QMP command: %s",
					   strerror(errno));
		if (poll(&pfd, 1, qmp_ms_left(w)) == 0)
			return cli_err_set(err, -ETIMEDOUT,
					   "QEMU took no command for %d ms (is QEMU stopped?)",
					   w->ms);
	}
	return 0;
}

/* ---- events and replies ----------------------------------------------- */

static void keep_event(struct qmp *q, struct json_object *ev)
{
	if (q->nevents == QMP_EVENTS_KEPT) {
		json_object_put(q->events[0]);
		memmove(q->events, q->events + 1, (QMP_EVENTS_KEPT - 1) * sizeof(q->events[0]));
		q->nevents--;
	}
	q->events[q->nevents++] = ev;
}

/* A reply is ours when it carries our id.  One without an id is ours too:
 * QEMU leaves the id out only when it could not read the request, and ours
 * is the only request in flight; a reply with another id answers a command
 * that timed out and is dropped. */
static int is_our_reply(struct json_object *msg, int64_t id)
{
	struct json_object *v;

	if (!json_object_object_get_ex(msg, "return", NULL) &&
	    !json_object_object_get_ex(msg, "error", NULL))
		return 0;
	if (!json_object_object_get_ex(msg, "id", &v))
		return 1;
	return json_object_is_type(v, json_type_int) && json_object_get_int64(v) == id;
}

static int await_reply(struct qmp *q, int64_t id, const struct qmp_waitfor *w,
		       struct json_object **reply, struct cli_err *err)
{
	struct json_object *msg;
	int r;

	for (;;) {
		r = read_msg(q, w, &msg, err);
		if (r < 0)
			return r;
		if (qmp_jstr(msg, "event")) {
			keep_event(q, msg);
			continue;
		}
		if (is_our_reply(msg, id)) {
			*reply = msg;
			return 0;
		}
		json_object_put(msg);
	}
}

static int unpack_reply(struct json_object *reply, const char *cmd,
			struct json_object **ret, struct cli_err *err)
{
	struct json_object *e, *v;
	const char *desc;

	if (json_object_object_get_ex(reply, "error", &e)) {
		desc = qmp_jstr(e, "desc");
		if (!desc)
			return cli_err_set(err, -EREMOTEIO, "QEMU refused %s without saying why",
					   cmd);
		return qmp_qerr_text(err, -EREMOTEIO, desc);
	}
	json_object_object_get_ex(reply, "return", &v);
	if (ret)
		*ret = json_object_get(v);
	return 0;
}

static int call(struct qmp *q, const char *cmd, struct json_object *args, int fd,
		struct json_object **ret, struct cli_err *err)
{
	struct json_object *req = json_object_new_object(), *reply = NULL;
	int64_t id = q->next_id++;
	struct qmp_waitfor w;
	char *line = NULL, what[96];
	int r;

	snprintf(what, sizeof(what), "answer to %s", cmd);
	w = qmp_wait_for(what, q->timeout_ms);

	if (ret)
		*ret = NULL;
	json_object_object_add(req, "execute", json_object_new_string(cmd));
	if (args)
		json_object_object_add(req, "arguments", args);
	json_object_object_add(req, "id", json_object_new_int64(id));
	if (asprintf(&line, "%s\n", json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN)) < 0) {
		json_object_put(req);
		return cli_err_set(err, -ENOMEM, "out of memory for QMP command %s", cmd);
	}
	json_object_put(req);
	r = send_all(q, line, strlen(line), fd, &w, err);
	free(line);
	if (r == 0)
		r = await_reply(q, id, &w, &reply, err);
	if (r == 0)
		r = unpack_reply(reply, cmd, ret, err);
	json_object_put(reply);
	return r;
}

int qmp_call(struct qmp *q, const char *cmd, struct json_object *args,
	     struct json_object **ret, struct cli_err *err)
{
	return call(q, cmd, args, -1, ret, err);
}

int qmp_call_fd(struct qmp *q, const char *cmd, struct json_object *args,
		int fd, struct json_object **ret, struct cli_err *err)
{
	if (fd < 0) {
		json_object_put(args);
		return cli_err_set(err, -EBADF, "no fd to pass with %s", cmd);
	}
	return call(q, cmd, args, fd, ret, err);
}

int qmp_event_take(struct qmp *q, const char *name, struct json_object **ev)
{
	size_t i;

	for (i = 0; i < q->nevents; i++) {
		const char *e = qmp_jstr(q->events[i], "event");

		if (!e || strcmp(e, name))
			continue;
		if (ev)
			*ev = q->events[i];
		else
			json_object_put(q->events[i]);
		memmove(q->events + i, q->events + i + 1, (q->nevents - i - 1) * sizeof(q->events[0]));
		q->nevents--;
		return 1;
	}
	return 0;
}

/* Reads one message outside a command: events are kept, a late reply to a
 * command that timed out is dropped. */
static int read_one(struct qmp *q, const struct qmp_waitfor *w, struct cli_err *err)
{
	struct json_object *msg;
	int r = read_msg(q, w, &msg, err);

	if (r < 0)
		return r;
	if (qmp_jstr(msg, "event"))
		keep_event(q, msg);
	else
		json_object_put(msg);
	return 0;
}

int qmp_event_wait(struct qmp *q, const char *name, int timeout_ms,
		   struct json_object **ev, struct cli_err *err)
{
	char what[96];
	struct qmp_waitfor w;
	int r;

	snprintf(what, sizeof(what), "event %s", name);
	w = qmp_wait_for(what, timeout_ms);
	while (!qmp_event_take(q, name, ev)) {
		r = read_one(q, &w, err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* What one qmp_pump() takes at most: a QEMU flooding events must not hold
 * the caller's loop. */
#define PUMP_MAX 64

int qmp_pump(struct qmp *q, struct cli_err *err)
{
	struct qmp_waitfor w = qmp_wait_for("event", 0);
	int r, n = 0;

	do
		r = read_one(q, &w, err);
	while (!r && ++n < PUMP_MAX);
	if (!r)
		return 0;
	if (r != -ETIMEDOUT)
		return r;
	if (err)
		err->msg[0] = '\0';
	return 0; /* all there was */
}

int qmp_fd(const struct qmp *q)
{
	return q->fd;
}

/* ---- connection ---------------------------------------------------------- */

static int connect_unix(const char *path, int *out, struct cli_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, e;

	if (strlen(path) >= sizeof(sa.sun_path))
		return cli_err_set(err, -ENAMETOOLONG,
				   "QMP socket path %s is longer than %zu bytes",
				   path, sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return cli_err_set(err, -errno, "socket: %s", strerror(errno));
	/* A unix connect does not wait even on a blocking socket: it succeeds
	 * into the listen backlog (even of a stopped QEMU) or fails at once. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		e = errno;
		close(fd);
		return cli_err_set(err, -e, "Unable to connect to QMP socket %s: %s", path,
				   strerror(e));
	}
	*out = fd;
	return 0;
}

/* The greeting, then a check that it came from the process held, then
 * command mode. */
static int greet(struct qmp *q, const char *path, struct cli_err *err)
{
	struct qmp_waitfor w = qmp_wait_for("QMP greeting", q->timeout_ms);
	struct json_object *msg = NULL;
	int r = read_msg(q, &w, &msg, err);

	if (r == -EPROTO)
		return cli_err_set(err, r, "%s does not speak QMP (an HMP monitor?)", path);
	if (r == -ETIMEDOUT)
		return cli_err_set(err, r,
				   "no QMP greeting on %s within %d ms (QEMU stopped, or another client connected?)",
				   path, q->timeout_ms);
	if (r < 0)
		return r;
	r = json_object_object_get_ex(msg, "QMP", NULL);
	json_object_put(msg);
	if (!r)
		return cli_err_set(err, -EPROTO, "%s does not speak QMP: no greeting", path);
	r = qmp_peer_accepted_by(&q->peer, q->fd, path, err);
	return r ? r : qmp_call(q, "qmp_capabilities", NULL, NULL, err);
}

int qmp_open(struct qmp **out, const char *path, int timeout_ms,
	     struct cli_err *err)
{
	return qmp_open_as(out, path, 0, 0, timeout_ms, err);
}

int qmp_open_as(struct qmp **out, const char *path, pid_t expect, unsigned long long start,
		int timeout_ms, struct cli_err *err)
{
	struct qmp *q = calloc(1, sizeof(*q));
	int r;

	*out = NULL;
	if (!q)
		return cli_err_set(err, -ENOMEM, "out of memory");
	q->fd = -1;
	q->peer = (struct qmp_peer)QMP_PEER_INIT;
	q->timeout_ms = timeout_ms;
	q->next_id = 1;
	r = connect_unix(path, &q->fd, err);
	if (r == 0) {
		qmp_peer_hold(&q->peer, q->fd);
		r = qmp_peer_expect(&q->peer, q->fd, path, expect, err);
		if (!r)
			r = qmp_peer_started_at(&q->peer, path, start, err);
		if (!r)
			r = greet(q, path, err);
	}
	if (r < 0) {
		qmp_close(q);
		return r;
	}
	*out = q;
	return 0;
}

void qmp_close(struct qmp *q)
{
	if (!q)
		return;
	if (q->fd >= 0)
		close(q->fd);
	qmp_peer_release(&q->peer);
	while (q->nevents)
		json_object_put(q->events[--q->nevents]);
	free(q->buf);
	free(q);
}

pid_t qmp_pid(const struct qmp *q)
{
	return q->peer.pid;
}

const struct proc_ref *qmp_proc(const struct qmp *q)
{
	return q->peer.pid > 0 ? &q->peer.proc : NULL;
}

void qmp_set_timeout(struct qmp *q, int timeout_ms)
{
	q->timeout_ms = timeout_ms;
}

