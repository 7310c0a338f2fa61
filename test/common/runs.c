#include "runs.h"

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

void tu_run_spawn(struct tu_run *r, const char *dir, const char *tag, char *const argv[])
{
	pid_t parent = getpid(), pid;

	snprintf(r->out, sizeof(r->out), "%s/%s.out", dir, tag);
	snprintf(r->err, sizeof(r->err), "%s/%s.err", dir, tag);
	memset(&r->p, 0, sizeof(r->p));
	snprintf(r->p.out_path, sizeof(r->p.out_path), "%s", r->out);
	unlink(r->out);
	unlink(r->err);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int o = open(r->out, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		int e = open(r->err, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		int n = open("/dev/null", O_RDONLY);

		tu_die_with_parent(parent);
		setpgid(0, 0);
		if (o < 0 || e < 0 || n < 0)
			_exit(126);
		dup2(n, 0);
		dup2(o, 1);
		dup2(e, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	setpgid(pid, pid);
	r->p.pid = pid;
}

int tu_run_finish(struct tu_run *r, int timeout_ms)
{
	if (tu_wait(&r->p, timeout_ms))
		return -1;
	return tu_exit_code(&r->p);
}

void tu_run_dump(struct tu_run *r, const char *label)
{
	char l[64];

	snprintf(l, sizeof(l), "%s stdout", label);
	tu_dump(l, r->out);
	snprintf(l, sizeof(l), "%s stderr", label);
	tu_dump(l, r->err);
}

struct json_object *tu_event_in(const char *path, const char *event)
{
	char *text = tu_slurp(path, NULL), *line, *save = NULL;
	struct json_object *found = NULL;

	for (line = text ? strtok_r(text, "\n", &save) : NULL; line && !found;
	     line = strtok_r(NULL, "\n", &save)) {
		struct json_object *o = json_tokener_parse(line), *ev;

		if (o && json_object_object_get_ex(o, "event", &ev) &&
		    !strcmp(json_object_get_string(ev), event))
			found = o;
		else
			json_object_put(o);
	}
	free(text);
	return found;
}

int tu_each_event(const char *path, const char *event,
		  int (*fn)(void *ctx, struct json_object *ev), void *ctx)
{
	char *text = tu_slurp(path, NULL), *line, *save = NULL;
	int rc = 0;

	for (line = text ? strtok_r(text, "\n", &save) : NULL; line && !rc;
	     line = strtok_r(NULL, "\n", &save)) {
		struct json_object *o = json_tokener_parse(line), *ev;

		if (o && json_object_object_get_ex(o, "event", &ev) &&
		    !strcmp(json_object_get_string(ev), event))
			rc = fn(ctx, o);
		json_object_put(o);
	}
	free(text);
	return rc;
}

struct json_object *tu_control(const char *sock, const char *line)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char buf[4096] = "";
	size_t len = 0;
	ssize_t n;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	ck_assert_uint_lt(strlen(sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	ck_assert_int_ge(fd, 0);
	ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect %s: %s",
		      sock, strerror(errno));
	ck_assert_int_eq(write(fd, line, strlen(line)), (ssize_t)strlen(line));
	while (len < sizeof(buf) - 1 && !memchr(buf, '\n', len)) {
		n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	ck_assert_msg(len && buf[len - 1] == '\n', "no reply line to %s", line);
	return json_tokener_parse(buf);
}

int tu_has_event(const char *path, const char *event)
{
	struct json_object *o = tu_event_in(path, event);

	json_object_put(o);
	return o != NULL;
}

struct json_object *tu_wait_event(struct tu_run *r, const char *event, int timeout_ms)
{
	uint64_t end = tu_now_ms() + (uint64_t)timeout_ms;
	struct json_object *o;

	while (!(o = tu_event_in(r->out, event)) && tu_now_ms() < end)
		usleep(20000);
	return o;
}

uint64_t tu_jnum(struct json_object *o, const char *key)
{
	struct json_object *v;

	ck_assert_msg(o && json_object_object_get_ex(o, key, &v), "no \"%s\" in %s", key,
		      o ? json_object_to_json_string(o) : "(null)");
	return (uint64_t)json_object_get_int64(v);
}

void tu_recv_listen(struct tu_run *r, const char *dir, const char *bin,
		    const char *const *pre, const char *const *args, int timeout_ms,
		    char *port, size_t portlen, char *addr, size_t addrlen)
{
	enum { MAX = 48 };
	char listen[64], *argv[MAX + 1];
	struct json_object *ev;
	int n = 0;

	snprintf(listen, sizeof(listen), "%s:0", tu_addr());
	while (pre && *pre && n < MAX - 4)
		argv[n++] = (char *)*pre++;
	argv[n++] = (char *)bin;
	argv[n++] = "--listen";
	argv[n++] = listen;
	argv[n++] = "--json";
	while (args && *args) {
		ck_assert_msg(n < MAX, "too many arguments for migrate-recv");
		argv[n++] = (char *)*args++;
	}
	argv[n] = NULL;
	tu_run_spawn(r, dir, "recv", argv);
	ev = tu_wait_event(r, "listening", timeout_ms);
	if (!ev) {
		tu_run_dump(r, "recv");
		ck_abort_msg("migrate-recv did not start listening");
	}
	if (port)
		snprintf(port, portlen, "%" PRIu64, tu_jnum(ev, "port"));
	if (addr)
		snprintf(addr, addrlen, "%s:%" PRIu64, tu_addr(), tu_jnum(ev, "port"));
	json_object_put(ev);
}
