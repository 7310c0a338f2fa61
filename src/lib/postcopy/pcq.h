/* pcq: the post-copy thread's faults, from the userfaultfd message to the
 * page placed.
 *
 * Each fault waits here with the time it was read.  A fault whose page no
 * READ fetches yet needs one: those are taken oldest first, ahead of any
 * background READ (pcq_next), and once one is posted for a page no fault
 * on that page needs another (pcq_posted).  When a page is placed, every
 * fault on it leaves with its latency (pcq_done), which is what the
 * statistics count: from the fault read to the page placed, as QEMU's
 * postcopy blocktime measures it.
 *
 * Fixed capacity, allocated at setup: a full queue makes the thread stop
 * reading faults until pages come in (the faulting threads wait in the
 * kernel meanwhile, nothing is lost).  A thread faults on one page at a
 * time, so the capacity bounds the threads waiting at once, not the
 * faults of a migration.  Keys are the caller's: PCQ_KEY(block, page).
 * Pure, one thread's. */
#ifndef RDMIG_PCQ_H
#define RDMIG_PCQ_H

#include <stdbool.h>
#include <stdint.h>

/* Pages of a block fit in 48 bits (2^50 bytes of 4 KiB pages), blocks in
 * the 16 above. */
#define PCQ_KEY(block, page) ((uint64_t)(block) << 48 | (uint64_t)(page))

struct pcq_ent {
	uint64_t key;
	int64_t t_ns;           /* when the fault was read */
	uint64_t seq;           /* arrival order */
	bool used;
	bool need;              /* no READ fetches its page yet */
};

struct pcq {
	struct pcq_ent *e;
	unsigned cap, n;
	uint64_t seq;
};

/* 0 or -ENOMEM. */
int pcq_init(struct pcq *q, unsigned cap);
void pcq_fini(struct pcq *q);
bool pcq_full(const struct pcq *q);
unsigned pcq_len(const struct pcq *q);
/* A fault on @key read at @t_ns; @need: no READ fetches its page yet.
 * 0, or -ENOSPC when full. */
int pcq_push(struct pcq *q, uint64_t key, int64_t t_ns, bool need);
/* The key of the oldest fault that needs a READ: true, or false when none
 * does. */
bool pcq_next(const struct pcq *q, uint64_t *key);
/* A READ for @key's page was posted: no fault on it needs one now. */
void pcq_posted(struct pcq *q, uint64_t key);
/* The READ of keys [@lo, @hi) failed (its link broke): every fault on
 * those pages needs a READ again, which pcq_next() offers once more, with
 * the time the fault was first read. */
void pcq_repost(struct pcq *q, uint64_t lo, uint64_t hi);
/* The pages of keys [@lo, @hi) were placed: every fault on them leaves,
 * @fn called with its latency (@now_ns less when it was read, at least 0).
 * Returns how many left. */
unsigned pcq_done(struct pcq *q, uint64_t lo, uint64_t hi, int64_t now_ns,
		  void (*fn)(void *arg, uint64_t ns), void *arg);

#endif
