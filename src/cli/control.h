/* The control socket: a unix stream socket taking one JSON command per line
 * ({"command":"status"}, ...) and answering each with one JSON line, the way
 * QMP answers ({"return":...} or {"error":"..."}).  It runs on a libev loop
 * the caller owns; the handler runs on that loop's thread. */
#ifndef RDMIG_CLI_CONTROL_H
#define RDMIG_CLI_CONTROL_H

#include <stddef.h>
#include <ev.h>
#include <json-c/json.h>

#include "clierr.h"

struct ctl_server;

/* Returns the reply (ownership passes to the server), or NULL for an
 * unknown command.  @req is the whole request object. */
typedef struct json_object *(*ctl_handler_fn)(void *ctx, const char *command,
					      struct json_object *req);

/* Binds and listens on @path (a stale socket file nobody listens on is
 * replaced; anything else there is an error).  0 or -errno with @err set. */
int ctl_open(struct ctl_server **out, struct ev_loop *loop, const char *path,
	     ctl_handler_fn fn, void *ctx, struct cli_err *err);
/* Stops every watcher, closes the clients and removes the socket file.
 * Call on the loop's thread (or after the loop stopped).  NULL is fine. */
void ctl_close(struct ctl_server *s);

/* The parts of a client's handling that read untrusted bytes, apart from
 * any socket so they can be fuzzed.  ctl_lines() hands every complete,
 * non-empty line of @buf (*@len bytes; CR before LF dropped) to @fn and
 * keeps the unfinished rest at the front; -1 when @fn fails or a line fills
 * all @cap bytes.  ctl_dispatch() is the reply to one line: a JSON object
 * with a string "command", passed to @fn; never NULL. */
int ctl_lines(char *buf, size_t *len, size_t cap, int (*fn)(void *ctx, const char *line),
	      void *ctx);
struct json_object *ctl_dispatch(const char *line, ctl_handler_fn fn, void *ctx);

/* {"error": msg} */
struct json_object *ctl_error(const char *msg);
/* {"return": obj} (obj may be NULL: an empty object) */
struct json_object *ctl_return(struct json_object *obj);

#endif
