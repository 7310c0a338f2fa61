/* src_sweep: one round's sweep over the blocks' sending bitmaps: the dirty
 * pages of each block, in order, planned (plan.c) into WRITE ops for the
 * pipeline, ZERO_RANGES for pages that became zero, and PAGES messages for
 * short runs in chunks nobody registered (pack.c). */
#ifndef RDMIG_SRC_SWEEP_H
#define RDMIG_SRC_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rdmig_source;
struct rd_err;

/* Allocates the scratch of ZERO_RANGES and PAGES messages for frames of
 * the peer's @msg_max bytes.  This and the next run on the set-up thread:
 * failures go to @err, not the session's. */
int src_sweep_setup(struct rdmig_source *s, uint32_t msg_max, bool pages, struct rd_err *err);
/* Starts the zero-check helpers where they pay (zero detection on, and a
 * machine of several cores). */
int src_sweep_start_helpers(struct rdmig_source *s, struct rd_err *err);
void src_sweep_destroy(struct rdmig_source *s);
/* Stops the zero-check helpers (the migration ended: completed or failed). */
void src_sweep_stop(struct rdmig_source *s);
/* A round begins over what src_mem_freeze() froze (@bytes of it). */
void src_sweep_begin(struct rdmig_source *s, uint64_t bytes);
/* Plans into the WRITE window until it is full, the sweep is done, a
 * message cannot go, rd_now_us() passed @until_us, or the page data packed
 * into PAGES used up *@budget (UINT64_MAX: none).  *@moved tells whether
 * anything was planned or sent. */
int src_sweep_fill(struct rdmig_source *s, int64_t until_us, uint64_t *budget, bool *moved);
/* Every page planned and every message of it sent. */
bool src_sweep_done(const struct rdmig_source *s);
/* Page data that left, by WRITE or inside PAGES. */
void src_count_pages(struct rdmig_source *s, uint64_t pages, uint64_t bytes);

#endif
