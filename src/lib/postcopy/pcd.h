/* pcd: the destination's post-copy engine, a thread of the library that
 * serves the guest's faults and pulls every other page it lacks.
 *
 * Made at the block map (pcd_create): for each block, what its memory is
 * (uffd.h: private anonymous or shared), a second mapping of shared memory
 * for the NIC to write through, a staging area for anonymous memory, a
 * completion queue of its own for the post-copy channels, a userfaultfd
 * (ours or the VMM's), the bitmaps, the fault queue, and the thread, which
 * waits.  What it needs registered is listed (pcd_nregs, pcd_reg_at) for
 * the registration helpers; it may begin once they are done.
 *
 * At the switch (pcd_begin, on the driving thread, the guest not yet
 * running): every block is registered with the userfaultfd, the pages of
 * the set are made absent from the guest's view (MADV_DONTNEED: a stale
 * copy from an earlier round, or a page pinned for RDMA, would otherwise
 * be seen), and the thread starts.  It reads each fault, RDMA READs a
 * faulted page on the fault channel at once (ahead of anything else), and
 * keeps a few larger READs of the pages after the last fault going on the
 * background channel; each READ lands where the guest does not look (the
 * staging area, or the second mapping) and the pages are placed whole
 * (UFFDIO_COPY, UFFDIO_CONTINUE), which wakes whoever waits on them.  A
 * fault on a page that is here but not mapped (never written, or not in
 * the guest's page tables) is placed at once.  Once every page is in,
 * the blocks are unregistered (faults are the kernel's again) and the
 * thread ends; a READ that fails ends it too, with the registration left
 * in place: the guest's threads that touch a missing page wait rather
 * than see a page that is not the source's.
 *
 * With recovery (POSTCOPY_RECOVER), a READ that fails pauses the thread
 * instead, and so does the driving thread when it sees the link break
 * (pcd_pause): nothing is posted; a fault on a page that is here is still
 * placed at once, the others wait; the pages of the failed READs are
 * read again later.  Once every READ of the broken link came back (they
 * flush when its QPs are disconnected: pcd_quiet), the driving thread
 * hands over the new post-copy channels (pcd_resume) and the thread goes
 * on where it stopped.
 *
 * The driving thread asks how it goes (pcd_poll); the thread writes the
 * handle's wake fd when it ended, either way.  The figures (pages by
 * faults and by the background, fault latencies in QEMU's buckets) go
 * into the statistics under their lock as they happen. */
#ifndef RDMIG_PCD_H
#define RDMIG_PCD_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "config.h"
#include "fabric.h"
#include "pcset.h"
#include "util.h"

struct pcd;

struct pcd_block {
	const char *name;
	uint8_t *host;          /* the guest's mapping, or ours of its memory */
	uint64_t length;
	/* Not 0: the guest's mapping is at this address in the userfaultfd's
	 * process, and @host is this process's shared mapping of the same
	 * memory (a foreign view: rdmig_dest_postcopy_view()). */
	uint64_t view;
};

/* READs each post-copy channel holds at most: its send queue's depth. */
#define PCD_SQ_DEPTH 32

/* @uffd: the VMM's userfaultfd, or -1 for one of our own.  @stats: where
 * the postcopy_* figures go.  0, or a negative errno with @err set (a
 * block of memory post-copy cannot serve, no userfaultfd). */
int pcd_create(struct pcd **out, struct ibv_context *verbs, const struct pcd_block *blocks,
	       unsigned n, int uffd, int wake_fd, struct stats_box *stats, struct rd_err *err);
/* The completion queue the post-copy channels must use. */
struct ibv_cq *pcd_cq(const struct pcd *p);
/* The memory to register for local writing, in any order: registration
 * @i of pcd_nregs(); pcd_reg_done() hands the result over (@mr is then
 * the engine's). */
unsigned pcd_nregs(const struct pcd *p);
void pcd_reg_at(const struct pcd *p, unsigned i, void **addr, uint64_t *len);
void pcd_reg_done(struct pcd *p, unsigned i, struct ibv_mr *mr);
bool pcd_ready(const struct pcd *p);
/* The switch: @set[b] the pages block b lacks (@pages of them), @keys
 * complete, @fault and @bg the post-copy channels, @recover: a failed READ
 * pauses.  0 once the thread pulls, or a negative errno (nothing is left
 * registered then). */
int pcd_begin(struct pcd *p, struct fab_conn *fault, struct fab_conn *bg,
	      const struct pckeys *keys, uint64_t *const *set, uint64_t pages, bool recover,
	      struct rd_err *err);
/* 0 while it pulls, 1 once every page is in (the pages read on faults and
 * in the background in *@fault_pages and *@bg_pages), PCD_POLL_PAUSED
 * once it paused (why in @err), or the thread's negative errno with its
 * message in @err. */
#define PCD_POLL_PAUSED 2
int pcd_poll(struct pcd *p, uint64_t *fault_pages, uint64_t *bg_pages, struct rd_err *err);
/* With recovery, from the driving thread: the link broke, post nothing
 * more.  pcd_quiet() once it paused and no READ is outstanding, or once
 * every page is in (READs that completed while paused may bring in the
 * last ones: then there is nothing to resume but POSTCOPY_DONE). */
void pcd_pause(struct pcd *p);
bool pcd_quiet(const struct pcd *p);
/* Quiet: the pages not in yet, 0 once every page is (the figures so far
 * in *@fault_pages and *@bg_pages). */
uint64_t pcd_pending(const struct pcd *p, uint64_t *fault_pages, uint64_t *bg_pages);
/* Paused: go on with READs on the new post-copy channels @fault and @bg
 * (their QPs on the same PD and CQ as the first ones'). */
void pcd_resume(struct pcd *p, struct fab_conn *fault, struct fab_conn *bg);
/* Stops the thread (it posts nothing more); the userfaultfd registration
 * stays. */
void pcd_stop(struct pcd *p);
/* Stops, deregisters, and frees; the post-copy channels' QPs must be
 * gone.  Our own userfaultfd is closed: a block still registered then
 * gives its missing pages to the kernel (zero, or the page cache's). */
void pcd_destroy(struct pcd *p);

#endif
