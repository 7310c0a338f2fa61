#include "control.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>


/* A request line longer than this is refused and the client dropped: the
 * commands are a few dozen bytes. */
#define CTL_LINE_MAX 4096
/* Clients beyond this are refused at accept. */
#define CTL_CLIENTS_MAX 16

struct ctl_client {
	ev_io io;               /* first: the watcher is the client */
	struct ctl_server *srv;
	struct ctl_client *next;
	size_t len;
	char buf[CTL_LINE_MAX];
};

struct ctl_server {
	ev_io io;
	struct ev_loop *loop;
	int fd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	ctl_handler_fn fn;
	void *ctx;
	struct ctl_client *clients;
	unsigned nclients;
};

struct json_object *ctl_error(const char *msg)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "error", json_object_new_string(msg));
	return o;
}

struct json_object *ctl_return(struct json_object *obj)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "return", obj ? obj : json_object_new_object());
	return o;
}

static void client_free(struct ctl_client *c)
{
	struct ctl_server *s = c->srv;
	struct ctl_client **pp;

	for (pp = &s->clients; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	s->nclients--;
	ev_io_stop(s->loop, &c->io);
	close(c->io.fd);
	free(c);
}

/* Replies are small; a client that does not read them is dropped. */
static int reply(struct ctl_client *c, struct json_object *o)
{
	const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	size_t len = strlen(text), off = 0;
	ssize_t n;
	int rc = 0;

	while (off < len + 1) {
		const char *p = off < len ? text + off : "\n";
		size_t want = off < len ? len - off : 1;

		n = send(c->io.fd, p, want, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = -1;
			break;
		}
		off += (size_t)n;
	}
	json_object_put(o);
	return rc;
}

struct json_object *ctl_dispatch(const char *line, ctl_handler_fn fn, void *ctx)
{
	struct json_object *req, *cmd, *rep;

	req = json_tokener_parse(line);
	if (!req || !json_object_is_type(req, json_type_object)) {
		json_object_put(req);
		return ctl_error("not a JSON object");
	}
	if (!json_object_object_get_ex(req, "command", &cmd) ||
	    !json_object_is_type(cmd, json_type_string)) {
		json_object_put(req);
		return ctl_error("missing \"command\"");
	}
	rep = fn(ctx, json_object_get_string(cmd), req);
	json_object_put(req);
	return rep ? rep : ctl_error("unknown command");
}

int ctl_lines(char *buf, size_t *len, size_t cap, int (*fn)(void *ctx, const char *line),
	      void *ctx)
{
	char *nl;

	while ((nl = memchr(buf, '\n', *len))) {
		size_t used = (size_t)(nl - buf) + 1;

		*nl = '\0';
		if (nl > buf && nl[-1] == '\r')
			nl[-1] = '\0';
		/* A NUL inside the line ends what JSON sees: harmless. */
		if (buf[0] && fn(ctx, buf))
			return -1;
		memmove(buf, buf + used, *len - used);
		*len -= used;
	}
	return *len == cap ? -1 : 0;
}

static int client_line(void *ctx, const char *line)
{
	struct ctl_client *c = ctx;

	return reply(c, ctl_dispatch(line, c->srv->fn, c->srv->ctx));
}

/* Handles every complete line in the buffer; 0, or -1 to drop the client. */
static int handle_lines(struct ctl_client *c)
{
	if (!ctl_lines(c->buf, &c->len, sizeof(c->buf), client_line, c))
		return 0;
	if (c->len == sizeof(c->buf))
		reply(c, ctl_error("request line too long"));
	return -1;
}

static void client_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctl_client *c = (struct ctl_client *)w;
	ssize_t n;

	(void)loop;
	(void)revents;
	n = recv(w->fd, c->buf + c->len, sizeof(c->buf) - c->len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		client_free(c);
		return;
	}
	c->len += (size_t)n;
	if (handle_lines(c))
		client_free(c);
}

/* Cancel and set change a migration: only its owner (or root) may.  The
 * socket file's mode says so too; the peer's credentials are what the
 * kernel vouches for, whatever the file's mode or directory. */
static bool peer_allowed(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) || len != sizeof(cred))
		return false;
	return cred.uid == 0 || cred.uid == geteuid();
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctl_server *s = (struct ctl_server *)w;
	struct ctl_client *c;
	int fd;

	(void)revents;
	fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (!peer_allowed(fd)) {
		static const char no[] = "{\"error\":\"permission denied: not the owner of "
					 "this migration\"}\n";

		if (send(fd, no, sizeof(no) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
			/* Dropped either way. */
		}
		close(fd);
		return;
	}
	if (s->nclients >= CTL_CLIENTS_MAX || !(c = calloc(1, sizeof(*c)))) {
		close(fd);
		return;
	}
	c->srv = s;
	c->next = s->clients;
	s->clients = c;
	s->nclients++;
	ev_io_init(&c->io, client_cb, fd, EV_READ);
	ev_io_start(loop, &c->io);
}

/* A socket file left by a process that is gone may be replaced; a live one
 * or any other file may not. */
static int clear_stale(const struct sockaddr_un *sa, struct cli_err *err)
{
	struct stat st;
	int fd, rc;

	if (lstat(sa->sun_path, &st)) {
		if (errno == ENOENT)
			return 0;
		return cli_err_set(err, -errno, "cannot use control socket %s: %s", sa->sun_path,
				   strerror(errno));
	}
	if (!S_ISSOCK(st.st_mode))
		return cli_err_set(err, -EEXIST, "control socket %s: a file that is not a socket "
				   "is in the way", sa->sun_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	close(fd);
	if (rc == 0)
		return cli_err_set(err, -EADDRINUSE,
				   "control socket %s is in use by another process",
				   sa->sun_path);
	unlink(sa->sun_path);
	return 0;
}

int ctl_open(struct ctl_server **out, struct ev_loop *loop, const char *path,
	     ctl_handler_fn fn, void *ctx, struct cli_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ctl_server *s;
	mode_t old_mask;
	int rc;

	*out = NULL;
	if (strlen(path) >= sizeof(sa.sun_path))
		return cli_err_set(err, -ENAMETOOLONG,
				   "control socket path %s is longer than %zu bytes", path,
				   sizeof(sa.sun_path) - 1);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	rc = clear_stale(&sa, err);
	if (rc)
		return rc;
	s = calloc(1, sizeof(*s));
	if (!s)
		return cli_err_set(err, -ENOMEM, "out of memory");
	s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->fd < 0)
		goto fail_errno;
	/* Created 0600 whatever the umask: no window where others may
	 * connect (the credential check stands behind it anyway). */
	old_mask = umask(0177);
	rc = bind(s->fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old_mask);
	if (rc || chmod(path, 0600)) {
		if (!rc)
			unlink(path);
		goto fail_close;
	}
	if (listen(s->fd, 8)) {
		unlink(path);
		goto fail_close;
	}
	snprintf(s->path, sizeof(s->path), "%s", path);
	s->loop = loop;
	s->fn = fn;
	s->ctx = ctx;
	ev_io_init(&s->io, accept_cb, s->fd, EV_READ);
	ev_io_start(loop, &s->io);
	*out = s;
	return 0;

fail_close:
	rc = -errno;
	close(s->fd);
	free(s);
	return cli_err_set(err, rc, "cannot listen on control socket %s: %s", path, strerror(-rc));
fail_errno:
	rc = -errno;
	free(s);
	return cli_err_set(err, rc, "cannot create control socket %s: %s", path, strerror(-rc));
}

void ctl_close(struct ctl_server *s)
{
	if (!s)
		return;
	while (s->clients)
		client_free(s->clients);
	ev_io_stop(s->loop, &s->io);
	close(s->fd);
	unlink(s->path);
	free(s);
}
