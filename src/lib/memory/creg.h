/* Bookkeeping for chunks registered on demand (dynamic registration), on
 * both sides: which chunks are pinned, how many bytes that pins against a
 * cap, and which idle chunks to unregister first (least recently used).
 * The caller does the ibv_reg_mr/ibv_dereg_mr; this only keeps the books,
 * indexed by the caller's global chunk number.
 *
 * Slots live in pages of CREG_PAGE slots allocated when a chunk of theirs is
 * first registered and freed when their last one goes, so the memory this
 * costs follows what is registered, not what the peer announced: a 1 TiB
 * block in 4 KiB chunks costs a directory of 2 MiB, not 15 GiB of slots. */
#ifndef RDMIG_CREG_H
#define RDMIG_CREG_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

enum creg_state {
	CREG_NONE = 0, /* not registered */
	CREG_PENDING,  /* registration asked for, not yet usable; pins bytes */
	CREG_READY,    /* registered: rkey/mr valid, on the LRU list */
};

#define CREG_NIL UINT64_MAX
#define CREG_PAGE_SHIFT 10
#define CREG_PAGE (1u << CREG_PAGE_SHIFT)

struct creg_slot {
	uint8_t state;     /* enum creg_state */
	uint32_t rkey;
	uint32_t lkey;     /* the caller's MR's, when it needs one */
	void *mr;          /* the caller's MR (struct ibv_mr *) */
	uint32_t inflight; /* operations using the registration: never a victim */
	uint64_t bytes;    /* pinned by this slot */
	uint64_t prev, next; /* LRU links, CREG_NIL when unlinked */
};

struct creg_page;

struct creg {
	struct creg_page **dir; /* one entry per CREG_PAGE slots, NULL if unused */
	uint64_t nslots;
	uint64_t cap_bytes;    /* 0: unlimited */
	uint64_t pinned_bytes; /* PENDING and READY slots */
	uint64_t peak_bytes;   /* highest pinned_bytes seen */
	uint64_t lru_head, lru_tail; /* head = least recently used READY slot */
	uint64_t pages;        /* pages allocated now */
};

/* 0, or -ENOMEM. */
int creg_init(struct creg *c, uint64_t nslots, uint64_t cap_bytes);
/* Calls @release (when not NULL) with @ctx and every MR still recorded,
 * then frees everything; safe on a zeroed or already finished struct creg. */
void creg_fini(struct creg *c, void (*release)(void *ctx, void *mr), void *ctx);

/* The slot's record, or NULL when it is not in use (CREG_NONE) or out of
 * range.  Valid until the slot is removed. */
struct creg_slot *creg_slot(const struct creg *c, uint64_t slot);
/* CREG_NONE for unused or out-of-range slots. */
uint8_t creg_state(const struct creg *c, uint64_t slot);

/* Accounts @bytes pinned by @slot, now PENDING or READY (READY slots go to
 * the most recently used end).  -EINVAL for a bad slot or state, -EEXIST when
 * the slot is already in use, -ENOSPC when it would exceed the cap (make
 * room with creg_victims first), -ENOMEM when its page cannot be allocated. */
int creg_add(struct creg *c, uint64_t slot, uint64_t bytes, uint8_t state);
/* Records the caller's MR of a slot in use (it is handed to creg_fini's
 * release if the slot is still in use then). */
void creg_set_mr(struct creg *c, uint64_t slot, void *mr, uint32_t lkey);
/* A PENDING (or READY) slot becomes READY with its keys, most recently used.
 * Ignored for a slot not in use. */
void creg_set_ready(struct creg *c, uint64_t slot, uint32_t rkey, void *mr);
/* Moves a READY slot to the most recently used end. */
void creg_touch(struct creg *c, uint64_t slot);
/* inflight++ / inflight--: a slot with operations in flight is never chosen
 * as a victim. */
void creg_get(struct creg *c, uint64_t slot);
void creg_put(struct creg *c, uint64_t slot);

/* Chooses idle READY slots, least recently used first, whose removal makes
 * pinned_bytes + @need <= cap; writes up to @max of them to @out and returns
 * how many (0 when there is room already or no cap; when @max cuts the list
 * short, call again after removing these).  -ENOSPC when even every idle
 * slot is not enough.  Nothing is removed: the caller unregisters each victim
 * and calls creg_remove. */
int creg_victims(struct creg *c, uint64_t need, uint64_t *out, size_t max,
		 struct rd_err *err);
/* Back to CREG_NONE: unlinked, bytes no longer pinned, its page freed when
 * it was the page's last slot in use.  Ignored for a slot not in use. */
void creg_remove(struct creg *c, uint64_t slot);

#endif
