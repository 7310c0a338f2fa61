/* src_iter: rounds (iterations), in bounded steps.
 *
 * A round freezes what was marked dirty and sweeps it (src_sweep) into the
 * WRITE window.  Each step plans while the window has room, asks for
 * registrations ahead (dynamic mode), posts what is ready within the step's
 * budget and the bandwidth limit, and once every WRITE of the round
 * completed sends ITER_END; ITER_ACK ends the round. */
#ifndef RDMIG_SRC_ITER_H
#define RDMIG_SRC_ITER_H

#include <stdint.h>

#include <infiniband/verbs.h>

#include "codec.h"

struct rdmig_source;

/* Starts the set-up thread (rdmig_source_connect_async, before anything
 * pins). */
int src_iter_setup_start(struct rdmig_source *s);
/* SRC_PREPARING, once connected: hands the posting threads, the WRITE
 * pipeline, dynamic registration's bookkeeping, the sweep's scratch and
 * the zero-check threads (enum src_prep) to the set-up thread, and in a
 * later step reaps them.  1 once all are set up, 0 while they are out (the
 * thread wakes the fd when done), or a negative errno naming the part
 * that failed. */
int src_iter_prepare(struct rdmig_source *s);
void src_iter_destroy(struct rdmig_source *s);
/* Stops the threads that post and check for zeros (the migration ended:
 * every WRITE completed, or it failed): none touches a queue pair or the
 * memory after this. */
void src_iter_stop_threads(struct rdmig_source *s);
int src_iter_begin(struct rdmig_source *s);
/* SRC_ITERATING and SRC_DRAINING: works until rd_now_us() passes @until_us
 * or @max_bytes (0: none) of page data went, then finishes the operation in
 * hand.  1 when it stopped with work it could do at once, 0 when it waits
 * for something, or a negative errno. */
int src_iter_step(struct rdmig_source *s, uint64_t max_bytes, int64_t until_us);
/* REGISTER_RESP and ITER_ACK. */
int src_iter_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m);
/* Our registration of a dynamic chunk finished (the helper's job). */
struct regq_job;
int src_iter_reg_done(struct rdmig_source *s, const struct regq_job *j);
/* A completion that is not the control channel's: a WRITE's. */
int src_write_done(struct rdmig_source *s, const struct ibv_wc *wc);
/* Milliseconds until the bandwidth limit lets pages go again (0: now). */
int src_iter_wait_ms(const struct rdmig_source *s);

#endif
