/* src_pc: the source's side of post-copy (rdmig(7), POST-COPY).
 *
 * With POSTCOPY granted, every block is registered for remote reading
 * from the block map on (the destination proved the key by then, with
 * one), in the background by the registration helpers: pin-all's pieces
 * themselves (their access grows REMOTE_READ), or in dynamic mode pieces
 * of 16 MiB of their own.  The destination learns where they are only at
 * the switch.  rdmig_source_postcopy_async() freezes what was marked (the
 * page set); SRC_PC_SWITCH waits for every read piece, then sends their
 * keys in POSTCOPY_KEYS and the set in POSTCOPY_RANGES as credits allow,
 * the last of which starts the destination's guest (SRC_POSTCOPY).
 * POSTCOPY_DONE ends it: the destination's read access is revoked (the
 * read pieces deregistered) and completion follows (src_end).  While the
 * destination reads, the post-copy channels' QPs are watched: a READ our
 * NIC refused (outside what was announced) leaves them in the error
 * state, and no completion would say so (we post nothing there). */
#ifndef RDMIG_SRC_PC_H
#define RDMIG_SRC_PC_H

#include <stdbool.h>
#include <stdint.h>

#include "codec.h"

struct rdmig_source;
struct regq_job;

/* The block map was answered with POSTCOPY granted: the read pieces'
 * bookkeeping and the switch's scratch, sized now (@peer_msg_max frames). */
int src_pc_setup(struct rdmig_source *s);
/* The access pin-all's pieces are registered with besides their own: remote
 * read with POSTCOPY granted. */
int src_pc_pin_access(const struct rdmig_source *s);
/* Dynamic mode: submits the next read pieces to the helpers, a few per
 * helper ahead ... */
int src_pc_reg_step(struct rdmig_source *s);
/* ... which finished one (REG_READ, in order). */
int src_pc_reg_done(struct rdmig_source *s, const struct regq_job *j);
/* rdmig_source_postcopy_async(), with the dirty log taken: checks the
 * switch can be made, freezes the set, enters SRC_PC_SWITCH. */
int src_pc_begin(struct rdmig_source *s);
/* SRC_PC_SWITCH and SRC_POSTCOPY: sends keys and ranges until rd_now_us()
 * passes @until_us (1 when cut short with more to send now), watches the
 * post-copy channels; 0 while it waits, or a negative errno. */
int src_pc_step(struct rdmig_source *s, int64_t until_us);
/* POSTCOPY_DONE: 1 once post-copy ended (completion follows), or a
 * negative errno. */
int src_pc_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m);
/* POSTCOPY_RECOVER: whether failing with @rc should pause the post-copy
 * instead (switched, neither a cancel nor the destination's own ERROR). */
bool src_pc_may_pause(const struct rdmig_source *s, int rc);
/* The destination's ERROR, in any state: resuming, src_pc_on_error();
 * otherwise the peer's failure, and its word that its guest never ran is
 * kept when the peer proved the key on this connection (from SRC_MAP on,
 * see rdmig(7), THREAT MODEL). */
int src_pc_peer_error(struct rdmig_source *s, const Rdmig__Error *e);
/* SRC_PC_RESUMING: the destination's ERROR.  Whoever answers at the
 * destination's address gets this far, so before it proved the key the
 * ERROR is dropped with this connection; after, only its cancel is final.
 * Any other ends this try: the source pauses and tries again
 * (src_pc_may_pause). */
int src_pc_on_error(struct rdmig_source *s, const Rdmig__Error *e);
/* Resuming, the link up (and authenticated): POSTCOPY_RESUME. */
int src_pc_send_resume(struct rdmig_source *s);
/* POSTCOPY_RESUMED: where the post-copy stands; the channels come back. */
int src_pc_on_resumed(struct rdmig_source *s, const ProtobufCMessage *m);
/* Bytes of dynamic mode's read pieces registered now. */
uint64_t src_pc_pinned(const struct rdmig_source *s);
/* Milliseconds until the channels are looked at again (SRC_POSTCOPY), or
 * -1. */
int src_pc_wait_ms(const struct rdmig_source *s);
void src_pc_destroy(struct rdmig_source *s);

#endif
