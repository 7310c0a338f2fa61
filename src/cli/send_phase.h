/* send_phase: the phase machine (enum phase, send_int.h).  Each phase
 * waits for one thing: the library's operation in hand (connecting, a
 * round, COMPLETE's confirmation), the workload to stop, or the device
 * state to come to its end.  The driver hands each event here; a phase
 * ends by starting the next, which says what it waits for, or by the end
 * (send_end.h).  Every change of phase goes through send_set_phase(). */
#ifndef RDMIG_CLI_SEND_PHASE_H
#define RDMIG_CLI_SEND_PHASE_H

#include "send_int.h"

/* PH_CONNECT: starts connecting to --connect. */
void send_connect(struct sender *x);
/* The library finished the operation in hand: the phase that waited for
 * it goes on. */
void send_op_done(struct sender *x);
/* --defer: says "prepared" once connected and, with --pin-all, once the
 * source's own memory is pinned too (called at each step until then). */
void send_say_prepared(struct sender *x);
/* Readies the device-state end: before a cold migration's round, or once
 * a live one's first round is under way (x->need_prepare).  0, or the
 * negative errno it failed the migration with. */
int send_prepare_state(struct sender *x);
/* The first round (PH_ROUND), or a cold migration's only one: at once, or
 * with --defer when start comes. */
void send_begin(struct sender *x);
/* Forwards device state (send_fwd.h); in PH_STATE its end starts COMPLETE. */
void send_pump_state(struct sender *x);
/* The stop timer before PH_STATE, every STOP_POLL_S while the workload
 * is being stopped: has it stopped, is a round due meanwhile, is it late. */
void send_check_stopped(struct sender *x);

#endif
