/* dst_pc: the destination's side of post-copy (rdmig(7), POST-COPY).
 *
 * With POSTCOPY granted, the block map makes the post-copy engine (pcd.h:
 * what each block's memory is, the second mappings, the staging area, the
 * post-copy channels' completion queue, the userfaultfd and the thread)
 * and asks the registration helpers for what it needs.  POSTCOPY_KEYS and
 * POSTCOPY_RANGES are checked as they come (pcset.h) and kept; the last
 * POSTCOPY_RANGES is the switch (JOB_PC_BEGIN): once no registration is in
 * the helpers' hands and the engine's are done, the populate helper stops,
 * the engine begins, the application hears of it (postcopy_start) and the
 * guest runs (DST_POSTCOPY).  Once the engine has every page,
 * POSTCOPY_DONE goes; COMPLETE follows as after the rounds. */
#ifndef RDMIG_DST_PC_H
#define RDMIG_DST_PC_H

#include <stdbool.h>

#include "codec.h"
#include "regq.h"

struct rdmig_dest;

/* A guest runs in one process: every block of @idx (@n of d->blocks; all
 * of them for NULL) has a post-copy view, or none does.  0, or -EINVAL
 * naming a block with a view and one without. */
int dst_pc_views_whole(struct rdmig_dest *d, const unsigned *idx, unsigned n);
/* At the block map, POSTCOPY granted (before the answer: the post-copy
 * channels need the engine's completion queue when they come). */
int dst_pc_setup(struct rdmig_dest *d);
/* The engine's registrations to the helpers ... */
int dst_pc_reg_step(struct rdmig_dest *d);
/* ... which finished one (DREG_PC). */
int dst_pc_reg_done(struct rdmig_dest *d, const struct regq_job *j);
/* POSTCOPY_KEYS and POSTCOPY_RANGES (DST_RUNNING). */
int dst_pc_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m);
/* JOB_PC_BEGIN: DST_JOB_WAITING until it can switch, then DST_JOB_DONE in
 * DST_POSTCOPY, or a negative errno. */
int dst_pc_begin_step(struct rdmig_dest *d);
/* DST_POSTCOPY: POSTCOPY_DONE once the engine has every page (and a
 * credit is free); the engine's failure is the migration's, and its pause
 * (a READ failed) is returned as -ECONNRESET.  DST_PC_RESUMING: once the
 * post-copy channels are back, the engine reads on (DST_POSTCOPY). */
int dst_pc_step(struct rdmig_dest *d);
/* POSTCOPY_RECOVER granted: the resume token, random, never all zero. */
void dst_pc_new_token(struct rdmig_dest *d);
/* Whether failing with @rc (ss.err saying why) should pause the post-copy
 * instead: recovery granted with a listener kept, switched and
 * POSTCOPY_DONE not sent (every page may be in: a resume then answers
 * pages_left 0 and sends it), the engine sound, and neither a cancel nor
 * the source's own word (its ERROR outside a resume, its cancel in one). */
bool dst_pc_may_pause(struct rdmig_dest *d, int rc);
/* The link is gone (the caller tore it down): the engine pauses. */
void dst_pc_pause(struct rdmig_dest *d);
/* DST_PC_RESUMING, authenticated: POSTCOPY_RESUME.  Answers where the
 * post-copy stands and, with pages left, invites the post-copy channels
 * again. */
int dst_pc_on_resume(struct rdmig_dest *d, const ProtobufCMessage *m);
/* DST_PC_RESUMING: the resumer's ERROR.  Before it proved the key it is
 * one more unauthenticated frame; after, only its cancel is final.  Either
 * way the result is a negative errno: the cancel fails the migration, any
 * other drops this connection and pauses again (dst_pc_may_pause). */
int dst_pc_on_error(struct rdmig_dest *d, const Rdmig__Error *e);
/* POSTCOPY_DONE went: COMPLETE may come. */
bool dst_pc_done(const struct rdmig_dest *d);
/* The migration failed: the engine posts nothing more; the guest's
 * memory stays registered (a thread that touches a missing page waits). */
void dst_pc_stop(struct rdmig_dest *d);
/* After the post-copy channels are gone. */
void dst_pc_destroy(struct rdmig_dest *d);

#endif
