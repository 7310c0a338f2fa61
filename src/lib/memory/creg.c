#include "creg.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct creg_page {
	uint32_t used;
	struct creg_slot s[CREG_PAGE];
};

int creg_init(struct creg *c, uint64_t nslots, uint64_t cap_bytes)
{
	uint64_t ndir = (nslots + CREG_PAGE - 1) >> CREG_PAGE_SHIFT;

	memset(c, 0, sizeof(*c));
	c->lru_head = c->lru_tail = CREG_NIL;
	if (nslots > UINT64_MAX - CREG_PAGE || ndir > SIZE_MAX / sizeof(*c->dir))
		return -ENOMEM;
	if (ndir) {
		c->dir = calloc((size_t)ndir, sizeof(*c->dir));
		if (!c->dir)
			return -ENOMEM;
	}
	c->nslots = nslots;
	c->cap_bytes = cap_bytes;
	return 0;
}

void creg_fini(struct creg *c, void (*release)(void *ctx, void *mr), void *ctx)
{
	uint64_t p, ndir = (c->nslots + CREG_PAGE - 1) >> CREG_PAGE_SHIFT;
	unsigned i;

	for (p = 0; c->dir && p < ndir; p++) {
		if (!c->dir[p])
			continue;
		for (i = 0; release && i < CREG_PAGE; i++)
			if (c->dir[p]->s[i].state != CREG_NONE && c->dir[p]->s[i].mr)
				release(ctx, c->dir[p]->s[i].mr);
		free(c->dir[p]);
	}
	free(c->dir);
	memset(c, 0, sizeof(*c));
	c->lru_head = c->lru_tail = CREG_NIL;
}

/* Any slot of an allocated page, in use or not. */
static struct creg_slot *at(const struct creg *c, uint64_t slot)
{
	struct creg_page *pg;

	if (slot >= c->nslots)
		return NULL;
	pg = c->dir[slot >> CREG_PAGE_SHIFT];
	return pg ? &pg->s[slot & (CREG_PAGE - 1)] : NULL;
}

struct creg_slot *creg_slot(const struct creg *c, uint64_t slot)
{
	struct creg_slot *s = at(c, slot);

	return s && s->state != CREG_NONE ? s : NULL;
}

uint8_t creg_state(const struct creg *c, uint64_t slot)
{
	const struct creg_slot *s = at(c, slot);

	return s ? s->state : CREG_NONE;
}

/* Slots on the list are in use, so their pages exist. */
static void creg_unlink(struct creg *c, uint64_t slot)
{
	struct creg_slot *s = at(c, slot);

	if (s->prev == CREG_NIL && c->lru_head != slot)
		return; /* not on the list */
	if (s->prev != CREG_NIL)
		at(c, s->prev)->next = s->next;
	else
		c->lru_head = s->next;
	if (s->next != CREG_NIL)
		at(c, s->next)->prev = s->prev;
	else
		c->lru_tail = s->prev;
	s->prev = s->next = CREG_NIL;
}

static void creg_link_mru(struct creg *c, uint64_t slot)
{
	struct creg_slot *s = at(c, slot);

	s->prev = c->lru_tail;
	s->next = CREG_NIL;
	if (c->lru_tail != CREG_NIL)
		at(c, c->lru_tail)->next = slot;
	else
		c->lru_head = slot;
	c->lru_tail = slot;
}

static struct creg_page *page_new(void)
{
	struct creg_page *pg = calloc(1, sizeof(*pg));
	unsigned i;

	for (i = 0; pg && i < CREG_PAGE; i++)
		pg->s[i].prev = pg->s[i].next = CREG_NIL;
	return pg;
}

int creg_add(struct creg *c, uint64_t slot, uint64_t bytes, uint8_t state)
{
	struct creg_page **pp;
	struct creg_slot *s;
	uint64_t pinned;

	if (slot >= c->nslots || (state != CREG_PENDING && state != CREG_READY))
		return -EINVAL;
	if (creg_slot(c, slot))
		return -EEXIST;
	if (rd_add_overflow_u64(c->pinned_bytes, bytes, &pinned) ||
	    (c->cap_bytes && pinned > c->cap_bytes))
		return -ENOSPC;
	pp = &c->dir[slot >> CREG_PAGE_SHIFT];
	if (!*pp) {
		*pp = page_new();
		if (!*pp)
			return -ENOMEM;
		c->pages++;
	}
	(*pp)->used++;
	s = &(*pp)->s[slot & (CREG_PAGE - 1)];
	s->state = state;
	s->bytes = bytes;
	s->inflight = 0;
	s->mr = NULL;
	s->rkey = s->lkey = 0;
	c->pinned_bytes = pinned;
	if (pinned > c->peak_bytes)
		c->peak_bytes = pinned;
	if (state == CREG_READY)
		creg_link_mru(c, slot);
	return 0;
}

void creg_set_mr(struct creg *c, uint64_t slot, void *mr, uint32_t lkey)
{
	struct creg_slot *s = creg_slot(c, slot);

	if (s) {
		s->mr = mr;
		s->lkey = lkey;
	}
}

void creg_set_ready(struct creg *c, uint64_t slot, uint32_t rkey, void *mr)
{
	struct creg_slot *s = creg_slot(c, slot);

	if (!s)
		return;
	s->rkey = rkey;
	s->mr = mr;
	if (s->state == CREG_READY)
		creg_unlink(c, slot);
	s->state = CREG_READY;
	creg_link_mru(c, slot);
}

void creg_touch(struct creg *c, uint64_t slot)
{
	struct creg_slot *s = creg_slot(c, slot);

	if (!s || s->state != CREG_READY || c->lru_tail == slot)
		return;
	creg_unlink(c, slot);
	creg_link_mru(c, slot);
}

void creg_get(struct creg *c, uint64_t slot)
{
	struct creg_slot *s = creg_slot(c, slot);

	if (s && s->inflight < UINT32_MAX)
		s->inflight++;
}

void creg_put(struct creg *c, uint64_t slot)
{
	struct creg_slot *s = creg_slot(c, slot);

	if (s && s->inflight)
		s->inflight--;
}

int creg_victims(struct creg *c, uint64_t need, uint64_t *out, size_t max,
		 struct rd_err *err)
{
	uint64_t left = c->pinned_bytes, idle = 0, i;
	size_t n = 0;

	if (!c->cap_bytes)
		return 0;
	if (max > INT_MAX)
		max = INT_MAX; /* the count is returned as an int */
	if (need > c->cap_bytes)
		return rd_err_set(err, -ENOSPC, "cannot pin %" PRIu64 " bytes: the cap is %" PRIu64
				  " bytes", need, c->cap_bytes);
	/* Walks on past @max only to tell "room after another round" from
	 * "no room at all". */
	for (i = c->lru_head; i != CREG_NIL && left > c->cap_bytes - need; i = at(c, i)->next) {
		const struct creg_slot *s = at(c, i);

		if (s->inflight)
			continue;
		left -= s->bytes;
		idle += s->bytes;
		if (n < max)
			out[n++] = i;
	}
	if (left > c->cap_bytes - need)
		return rd_err_set(err, -ENOSPC, "cannot pin %" PRIu64 " more bytes under the %" PRIu64
				  "-byte cap: %" PRIu64 " bytes are pinned, only %" PRIu64
				  " of them by idle chunks", need, c->cap_bytes, c->pinned_bytes, idle);
	return (int)n;
}

void creg_remove(struct creg *c, uint64_t slot)
{
	struct creg_slot *s = creg_slot(c, slot);
	struct creg_page **pp;

	if (!s)
		return;
	creg_unlink(c, slot);
	c->pinned_bytes -= s->bytes;
	memset(s, 0, sizeof(*s));
	s->prev = s->next = CREG_NIL;
	pp = &c->dir[slot >> CREG_PAGE_SHIFT];
	if (--(*pp)->used == 0) {
		free(*pp);
		*pp = NULL;
		c->pages--;
	}
}
