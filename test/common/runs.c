#include "runs.h"

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
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
		tu_die_with_parent(parent);
		setpgid(0, 0);
		tu_child_stdio(r->out, r->err);
		execv(argv[0], argv);
		_exit(127);
	}
	setpgid(pid, pid);
	r->p.pid = pid;
}

void tu_argv_add(struct tu_argv *a, const char *const *words)
{
	int max = (int)(sizeof(a->v) / sizeof(a->v[0])) - 1;

	while (words && *words) {
		ck_assert_msg(a->n < max, "more than %d words for %s", max, a->v[0]);
		a->v[a->n++] = (char *)*words++;
	}
	a->v[a->n] = NULL;
}

void tu_run_cmd(struct tu_run *r, const char *dir, const char *tag, const char *const *head,
		const char *const *args)
{
	struct tu_argv a = { .n = 0 };

	tu_argv_add(&a, head);
	tu_argv_add(&a, args);
	tu_run_spawn(r, dir, tag, a.v);
}

int tu_run_running(struct tu_run *r)
{
	return r->p.pid > 0 && !tu_reap(&r->p);
}

void tu_run_stop(struct tu_run *r)
{
	if (r->p.pid > 0 && !r->p.reaped) {
		kill(-r->p.pid, SIGCONT);
		kill(-r->p.pid, SIGKILL);
		tu_wait(&r->p, 5000);
	}
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

void tu_phase_after_switch(const char *path, char *out, size_t len)
{
	char *text = tu_slurp(path, NULL), *line, *save = NULL;
	bool switched = false;

	out[0] = '\0';
	for (line = text ? strtok_r(text, "\n", &save) : NULL; line && !out[0];
	     line = strtok_r(NULL, "\n", &save)) {
		struct json_object *o = json_tokener_parse(line);
		const char *ev = tu_jstr(o, "event");

		if (!strcmp(ev, "iteration") && !strcmp(tu_jstr(o, "decision"), "switch-over"))
			switched = true;
		else if (switched && !strcmp(ev, "state"))
			snprintf(out, len, "%s", tu_jstr(o, "phase"));
		json_object_put(o);
	}
	free(text);
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

long tu_control_line(const char *sock, const char *line, char *out, size_t len, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = timeout_ms % 1000 * 1000 };
	uint64_t t0 = tu_now_ms();
	size_t got = 0;
	ssize_t n;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	ck_assert_uint_lt(strlen(sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect %s: %s",
		      sock, strerror(errno));
	ck_assert_int_eq(write(fd, line, strlen(line)), (ssize_t)strlen(line));
	out[0] = '\0';
	while (got < len - 1 && !memchr(out, '\n', got) &&
	       tu_now_ms() < t0 + (uint64_t)timeout_ms) {
		n = read(fd, out + got, len - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		out[got] = '\0';
	}
	close(fd);
	n = memchr(out, '\n', got) ? (ssize_t)(tu_now_ms() - t0) : -1;
	out[strcspn(out, "\n")] = '\0';
	return (long)n;
}

struct json_object *tu_control(const char *sock, const char *line)
{
	char buf[4096];

	ck_assert_msg(tu_control_line(sock, line, buf, sizeof(buf), 60000) >= 0,
		      "no reply line to %s", line);
	return json_tokener_parse(buf);
}

struct json_object *tu_control_get(const char *sock, const char *line, const char *key,
				   struct json_object **whole)
{
	struct json_object *v = NULL;

	*whole = tu_control(sock, line);
	ck_assert_msg(*whole && json_object_object_get_ex(*whole, key, &v),
		      "reply without \"%s\": %s", key,
		      *whole ? json_object_to_json_string(*whole) : "(unparsable)");
	return v;
}

void tu_control_expect(const char *sock, const char *line, const char *key)
{
	struct json_object *whole;

	tu_control_get(sock, line, key, &whole);
	json_object_put(whole);
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

void tu_must_see(struct tu_run *r, const char *label, const char *event, int timeout_ms)
{
	struct json_object *o = tu_wait_event(r, event, timeout_ms);

	if (!o) {
		tu_run_dump(r, label);
		ck_abort_msg("%s: no \"%s\" event within %d ms", label, event, timeout_ms);
	}
	json_object_put(o);
}

const char *tu_jstr(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
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
	struct tu_argv a = { .n = 0 };
	struct json_object *ev;
	char listen[64];

	snprintf(listen, sizeof(listen), "%s:0", tu_addr());
	tu_argv_add(&a, pre);
	tu_argv_add(&a, (const char *[]){ bin, "--listen", listen, "--json", NULL });
	tu_argv_add(&a, args);
	tu_run_spawn(r, dir, "recv", a.v);
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

void tu_memload(struct tu_run *r, const char *dir, const char *bin, const char *file,
		const char *size, const char *seed, const char *const *args)
{
	struct tu_run fill = { .p.pid = 0 };
	struct tu_argv a = { .n = 0 };

	tu_run_spawn(&fill, dir, "fill", (char *[]){ (char *)bin, "fill", (char *)file, "--size",
						     (char *)size, "--seed", (char *)seed, NULL });
	ck_assert_int_eq(tu_run_finish(&fill, 30000), 0);
	tu_argv_add(&a, (const char *[]){ bin, "run", file, NULL });
	tu_argv_add(&a, args);
	tu_run_spawn(r, dir, "load", a.v);
	if (tu_wait_line(r->out, "ready", NULL, 0, 20000)) {
		tu_run_dump(r, "memload");
		ck_abort_msg("memload did not start");
	}
}
