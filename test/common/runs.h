/* Commands run by the integration tests with stdout and stderr in separate
 * files, and the JSON event lines they print on stdout. */
#ifndef RDMIG_TEST_RUNS_H
#define RDMIG_TEST_RUNS_H

#include <json-c/json.h>
#include <stdint.h>

#include "testutil.h"

struct tu_run {
	struct tu_proc p;
	char out[512], err[512];
};

/* A command line put together from lists of words. */
struct tu_argv {
	char *v[64];
	int n;
};

/* Appends the NULL-terminated @words (nothing when @words is NULL); the
 * test fails past the words argv holds.  a->v stays NULL-terminated. */
void tu_argv_add(struct tu_argv *a, const char *const *words);

/* Starts @argv in its own process group with stdout in DIR/TAG.out and
 * stderr in DIR/TAG.err (both emptied first, so an earlier process's output
 * is never mistaken for this one's). */
void tu_run_spawn(struct tu_run *r, const char *dir, const char *tag, char *const argv[]);
/* tu_run_spawn of the words of @head, then those of @args (both lists
 * NULL-terminated; @args may be NULL). */
void tu_run_cmd(struct tu_run *r, const char *dir, const char *tag, const char *const *head,
		const char *const *args);
/* The exit code (128 + signal when killed), or -1 on timeout. */
int tu_run_finish(struct tu_run *r, int timeout_ms);
/* Prints both files, headed by @label. */
void tu_run_dump(struct tu_run *r, const char *label);
/* Whether @r still runs; one that exited is reaped, its status kept for
 * tu_run_finish. */
int tu_run_running(struct tu_run *r);
/* Teardown: @r's process group, stopped or not, is killed and reaped
 * (nothing happens to a run never started or already reaped). */
void tu_run_stop(struct tu_run *r);

/* The first JSON line of @path whose "event" is @event, or NULL. */
struct json_object *tu_event_in(const char *path, const char *event);
int tu_has_event(const char *path, const char *event);
/* tu_event_in on @r's stdout, retried until @timeout_ms. */
struct json_object *tu_wait_event(struct tu_run *r, const char *event, int timeout_ms);
/* tu_wait_event, failing the test (with @r's output, headed by @label)
 * when the event does not come. */
void tu_must_see(struct tu_run *r, const char *label, const char *event, int timeout_ms);
/* The integer @key of @o; fails the test when it is missing. */
uint64_t tu_jnum(struct json_object *o, const char *key);
/* The string member @key of @o, or "". */
const char *tu_jstr(struct json_object *o, const char *key);

/* The phase migrate-send's --json entered right after its policy said
 * switch over (the "state" event after the "iteration" whose "decision"
 * is "switch-over"), into @out; "" when there is none. */
void tu_phase_after_switch(const char *path, char *out, size_t len);
/* Calls @fn with each JSON line of @path whose "event" is @event, in
 * order, until it returns non-zero (which is returned); 0 after the last. */
int tu_each_event(const char *path, const char *event,
		  int (*fn)(void *ctx, struct json_object *ev), void *ctx);
/* One command line on the control socket @sock; its reply, parsed (the
 * test fails without one). */
struct json_object *tu_control(const char *sock, const char *line);
/* tu_control whose reply must carry @key ("return" or "error"): that
 * member; the whole reply in *@whole, for the caller to put. */
struct json_object *tu_control_get(const char *sock, const char *line, const char *key,
				   struct json_object **whole);
/* tu_control_get for a reply that is only checked for @key. */
void tu_control_expect(const char *sock, const char *line, const char *key);
/* One command line on @sock, the reply line (without its newline) in
 * @out; the test fails when @sock does not take the connection.  Returns
 * how long the answer took in ms, or -1 when no whole line came within
 * @timeout_ms (a daemon whose loop is held answers nothing). */
long tu_control_line(const char *sock, const char *line, char *out, size_t len, int timeout_ms);

/* Starts `[@pre...] @bin --listen TESTADDR:0 --json [@args...]` (both lists
 * NULL-terminated, either may be NULL) and waits @timeout_ms for its
 * listening event: the test fails, with both outputs shown, if it does
 * not come.  @port gets the port, @addr HOST:PORT (either may be NULL). */
void tu_recv_listen(struct tu_run *r, const char *dir, const char *bin,
		    const char *const *pre, const char *const *args, int timeout_ms,
		    char *port, size_t portlen, char *addr, size_t addrlen);

/* memload @bin fills @file with @size bytes of random data, then runs on
 * it with @args (NULL-terminated; "--rate", "4" say) in @r until it says
 * it is ready; the test fails if it does not start. */
void tu_memload(struct tu_run *r, const char *dir, const char *bin, const char *file,
		const char *size, const char *seed, const char *const *args);

#endif
