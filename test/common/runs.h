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

/* Starts @argv in its own process group with stdout in DIR/TAG.out and
 * stderr in DIR/TAG.err (both emptied first, so an earlier process's output
 * is never mistaken for this one's). */
void tu_run_spawn(struct tu_run *r, const char *dir, const char *tag, char *const argv[]);
/* The exit code (128 + signal when killed), or -1 on timeout. */
int tu_run_finish(struct tu_run *r, int timeout_ms);
/* Prints both files, headed by @label. */
void tu_run_dump(struct tu_run *r, const char *label);

/* The first JSON line of @path whose "event" is @event, or NULL. */
struct json_object *tu_event_in(const char *path, const char *event);
int tu_has_event(const char *path, const char *event);
/* tu_event_in on @r's stdout, retried until @timeout_ms. */
struct json_object *tu_wait_event(struct tu_run *r, const char *event, int timeout_ms);
/* The integer @key of @o; fails the test when it is missing. */
uint64_t tu_jnum(struct json_object *o, const char *key);

/* Calls @fn with each JSON line of @path whose "event" is @event, in
 * order, until it returns non-zero (which is returned); 0 after the last. */
int tu_each_event(const char *path, const char *event,
		  int (*fn)(void *ctx, struct json_object *ev), void *ctx);
/* One command line on the control socket @sock; its reply, parsed (the
 * test fails without one). */
struct json_object *tu_control(const char *sock, const char *line);

/* Starts `[@pre...] @bin --listen TESTADDR:0 --json [@args...]` (both lists
 * NULL-terminated, either may be NULL) and waits @timeout_ms for its
 * listening event: the test fails, with both outputs shown, if it does
 * not come.  @port gets the port, @addr HOST:PORT (either may be NULL). */
void tu_recv_listen(struct tu_run *r, const char *dir, const char *bin,
		    const char *const *pre, const char *const *args, int timeout_ms,
		    char *port, size_t portlen, char *addr, size_t addrlen);

#endif
