/* send_ctl: migrate-send's control socket commands (migrate-send(1),
 * CONTROL SOCKET): status, cancel, set (the limits, as they apply from
 * now) and start (--defer).  control.h serves the socket; these answer. */
#ifndef RDMIG_CLI_SEND_CTL_H
#define RDMIG_CLI_SEND_CTL_H

#include <json-c/json.h>

#include "send_int.h"

/* cancel, and SIGINT, SIGTERM, SIGHUP: the library cancels what it does
 * (the destination is told), and the migration fails as cancelled at its
 * next step. */
void send_cancel(struct sender *x);
/* control.h's handler (@ctx: the sender). */
struct json_object *send_on_command(void *ctx, const char *cmd, struct json_object *req);

#endif
