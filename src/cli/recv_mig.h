/* recv_mig: one connection's lifetime, a handshake and then a migration
 * (recv_int.h says where it fits). */
#ifndef RDMIG_CLI_RECV_MIG_H
#define RDMIG_CLI_RECV_MIG_H

#include <json-c/json.h>

#include "recv_int.h"

/* A handle ready to accept a connection with this run's configuration, or
 * NULL (out of memory, or the library refused the configuration). */
struct mig *recv_mig_new(struct app *a);
/* Takes an accepted @m on: counted as a handshake, its fd watched, and its
 * first step taken, which may end it. */
void recv_mig_start(struct mig *m);
/* Uncounts, unwatches and frees @m with its handle and files, silently;
 * fine for one never started. */
void recv_mig_free(struct mig *m);
/* A connection that never became a migration: one line (and a "refused"
 * event), and migrate-recv goes on waiting; @m stays. */
void recv_mig_report_turned_away(struct mig *m, int rc, const char *msg);
/* The same, and @m is freed. */
void recv_mig_turn_away(struct mig *m, int rc, const char *msg);
/* Ends an admitted migration with exit code @code (CLI_EX_OK, or a failure
 * said with @msg once its files are gone); in single mode the run ends
 * with it. */
void recv_mig_end(struct mig *m, int code, const char *msg);
/* An admitted migration as the control socket's status shows it. */
struct json_object *recv_mig_status(struct mig *m);

#endif
