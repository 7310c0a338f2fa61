/* pcd_int: the post-copy engine's private state, shared by its two files.
 *
 * pcd.c is the engine's face to the driving thread (pcd.h): set-up, the
 * switch, the requests and questions while it runs, teardown.  Below it,
 * pcd_thread.c is the engine's thread: faults read, READs posted and
 * completed, pages placed.  The thread never calls back up; the two share
 * this state, and the atomics and the semaphore below say who may touch
 * what when.  Nothing outside the engine includes it. */
#ifndef RDMIG_PCD_INT_H
#define RDMIG_PCD_INT_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "fabric.h"
#include "lathist.h"
#include "pcq.h"
#include "pcset.h"
#include "uffd.h"
#include "util.h"

#define PCD_PAGE 4096u
/* Faults read whose READ is not posted yet, or whose page is being read:
 * a thread faults on one page at a time, so this bounds the threads
 * waiting at once; past it the faults wait in the kernel. */
#define PCD_FAULTS 256
/* READs of faulted pages in flight, a page each: the fault channel's
 * whole send queue, PCD_SQ_DEPTH (pcd.c checks that the two agree: pcd.h
 * is the face above this header, which does not include it). */
#define PCD_FAULT_DEPTH 32
/* The background pass: READs in flight and pages in each.  Few and small
 * enough that the link is not queued far ahead of a fault's READ (on
 * Soft-RoCE both channels' packets share one queue). */
#define PCD_BG_DEPTH 2
#define PCD_BG_PAGES 32
/* Second mappings are registered in pieces of this many bytes. */
#define PCD_PIECE_SHIFT 24

enum { PCD_TAG_FAULT = 0x200, PCD_TAG_BG = 0x201 };
/* PAUSED (with recovery): a READ failed or the driving thread said the
 * link broke; nothing is posted, faults on pages here are still placed,
 * the others wait in the queue (and, once it is full, in the kernel)
 * until pcd_resume() hands over new queue pairs. */
enum pcd_state { PCD_IDLE, PCD_PULLING, PCD_PAUSED, PCD_DONE, PCD_FAILED };

struct pcd_read {
	struct fab_tag tag;     /* PCD_TAG_FAULT or PCD_TAG_BG */
	unsigned block;
	uint64_t page, npages;
	uint8_t *buf;           /* its staging (anonymous memory) */
	int64_t t_post;         /* ns */
	bool busy;
};

struct pcd_blk {
	const char *name;
	/* The guest's view: where faults come from and pages are placed.  In
	 * another process's address space for a foreign view: never read or
	 * written through here, only named to the userfaultfd. */
	uint8_t *host;
	uint8_t *alias;         /* shared: where the NIC writes */
	bool foreign;           /* alias is the caller's mapping, not ours */
	uint64_t length, npages;
	enum uffd_kind kind;
	uint64_t *have;         /* pages complete here */
	uint64_t *taken;        /* complete, or being read */
	unsigned reg_first;     /* shared: its first piece's registration */
	bool registered;        /* with the userfaultfd */
};

struct pcd_reg {
	void *addr;
	uint64_t len;
	struct ibv_mr *mr;
};

struct pcd {
	struct pcd_blk *b;
	unsigned n;
	int uffd;
	bool own_uffd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	unsigned cq_events;     /* got, to ack before destroying */
	struct ibv_qp *qp_fault, *qp_bg;
	struct pcd_reg *reg;
	unsigned nreg, staging_reg;
	uint8_t *staging;
	uint64_t staging_len;
	struct pcd_read fault[PCD_FAULT_DEPTH], bg[PCD_BG_DEPTH];
	struct pcq q;
	const struct pckeys *keys;
	uint64_t pending;       /* pages of the set not placed yet */
	bool recover;           /* a failed READ pauses rather than fails */
	atomic_uint busy;       /* READs posted and not completed */
	/* The driving thread's requests: pause (the link broke), resume on
	 * next_fault and next_bg (written before resume_req is set). */
	atomic_bool pause_req, resume_req;
	struct ibv_qp *next_fault, *next_bg;
	int kick_fd;
	struct rd_err pause_err; /* why it paused: the thread's, until PAUSED */
	unsigned bg_block;      /* where the background pass goes on */
	uint64_t bg_page;

	pthread_t th;
	bool started;
	sem_t go;
	int stop_fd;
	atomic_bool stop;
	int wake_fd;
	atomic_int state;       /* enum pcd_state */
	int rc;                 /* the thread's failure, once FAILED */
	struct rd_err err;      /* its message: the thread's until it ended */

	/* The figures: the thread's, published under the statistics' lock. */
	struct stats_box *stats;
	struct lathist hist;
	uint64_t fault_pages, bg_pages, faults, reads, read_ns;
	int64_t start_ms;
};

/* Removes every block's userfaultfd registration: faults are the
 * kernel's again. */
void pcd_unregister_all(struct pcd *p);
/* The thread (pthread_create's @arg is the engine): waits for pcd_begin()
 * or a stop, then serves faults and pulls pages until every page is in,
 * it fails, or it is stopped. */
void *pcd_thread(void *arg);

#endif
