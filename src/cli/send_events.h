/* send_events: what migrate-send says while it runs: the progress bar on
 * a terminal, and with --json the setup, state and iteration events on
 * standard output, one object a line.  Each reads the sender and changes
 * nothing but what it said (the bar, the phases said). */
#ifndef RDMIG_CLI_SEND_EVENTS_H
#define RDMIG_CLI_SEND_EVENTS_H

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "rdmig.h"
#include "send_int.h"

/* The names the control socket's status and the events give them. */
const char *send_status_name(enum send_status st);
const char *send_phase_name(enum phase ph);
/* The library's figures, without the time a --defer migration waited for
 * start: nothing moved then, and a manager's clock starts with start. */
void send_stats(struct sender *x, struct rdmig_stats *st);
/* The library's progress callback (@ctx: the sender): the round's bar. */
void send_on_progress(void *ctx, const struct rdmig_stats *st);
/* Every change of x->ph goes through here, so a --json reader sees each. */
void send_set_phase(struct sender *x, enum phase ph);
/* --json, once connected: the setup event, with the tracking and the
 * throttle the workload got. */
void send_emit_setup(struct sender *x);
/* The throttle in force and the time spent throttled, live. */
void send_json_throttle(struct sender *x, struct json_object *o, bool now);
/* @dirty: bytes found dirty for the next round (live), @dirty_ms: over how
 * long they were written; @a: the advice after it (NULL: a round that
 * asked for none). */
void send_emit_iteration(struct sender *x, uint64_t dirty, uint64_t dirty_ms,
			const struct rdmig_advice *a);

#endif
