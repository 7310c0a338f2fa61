#include "creg.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int creg_init(struct creg *c, uint64_t nslots, uint64_t cap_bytes)
{
	uint64_t i;

	memset(c, 0, sizeof(*c));
	c->lru_head = c->lru_tail = CREG_NIL;
	if (nslots > SIZE_MAX / sizeof(*c->slots))
		return -ENOMEM;
	if (nslots) {
		c->slots = calloc((size_t)nslots, sizeof(*c->slots));
		if (!c->slots)
			return -ENOMEM;
	}
	for (i = 0; i < nslots; i++)
		c->slots[i].prev = c->slots[i].next = CREG_NIL;
	c->nslots = nslots;
	c->cap_bytes = cap_bytes;
	return 0;
}

void creg_fini(struct creg *c)
{
	free(c->slots);
	memset(c, 0, sizeof(*c));
	c->lru_head = c->lru_tail = CREG_NIL;
}

static struct creg_slot *creg_used(struct creg *c, uint64_t slot)
{
	if (slot >= c->nslots || c->slots[slot].state == CREG_NONE)
		return NULL;
	return &c->slots[slot];
}

static void creg_unlink(struct creg *c, uint64_t slot)
{
	struct creg_slot *s = &c->slots[slot];

	if (s->prev == CREG_NIL && c->lru_head != slot)
		return; /* not on the list */
	if (s->prev != CREG_NIL)
		c->slots[s->prev].next = s->next;
	else
		c->lru_head = s->next;
	if (s->next != CREG_NIL)
		c->slots[s->next].prev = s->prev;
	else
		c->lru_tail = s->prev;
	s->prev = s->next = CREG_NIL;
}

static void creg_link_mru(struct creg *c, uint64_t slot)
{
	struct creg_slot *s = &c->slots[slot];

	s->prev = c->lru_tail;
	s->next = CREG_NIL;
	if (c->lru_tail != CREG_NIL)
		c->slots[c->lru_tail].next = slot;
	else
		c->lru_head = slot;
	c->lru_tail = slot;
}

int creg_add(struct creg *c, uint64_t slot, uint64_t bytes, uint8_t state)
{
	struct creg_slot *s;
	uint64_t pinned;

	if (slot >= c->nslots || (state != CREG_PENDING && state != CREG_READY))
		return -EINVAL;
	s = &c->slots[slot];
	if (s->state != CREG_NONE)
		return -EEXIST;
	if (rd_add_overflow_u64(c->pinned_bytes, bytes, &pinned) ||
	    (c->cap_bytes && pinned > c->cap_bytes))
		return -ENOSPC;
	s->state = state;
	s->bytes = bytes;
	s->inflight = 0;
	c->pinned_bytes = pinned;
	if (pinned > c->peak_bytes)
		c->peak_bytes = pinned;
	if (state == CREG_READY)
		creg_link_mru(c, slot);
	return 0;
}

void creg_set_ready(struct creg *c, uint64_t slot, uint32_t rkey, void *mr)
{
	struct creg_slot *s = creg_used(c, slot);

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
	struct creg_slot *s = creg_used(c, slot);

	if (!s || s->state != CREG_READY || c->lru_tail == slot)
		return;
	creg_unlink(c, slot);
	creg_link_mru(c, slot);
}

void creg_get(struct creg *c, uint64_t slot)
{
	struct creg_slot *s = creg_used(c, slot);

	if (s && s->inflight < UINT32_MAX)
		s->inflight++;
}

void creg_put(struct creg *c, uint64_t slot)
{
	struct creg_slot *s = creg_used(c, slot);

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
	for (i = c->lru_head; i != CREG_NIL && left > c->cap_bytes - need; i = c->slots[i].next) {
		const struct creg_slot *s = &c->slots[i];

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
	struct creg_slot *s = creg_used(c, slot);

	if (!s)
		return;
	creg_unlink(c, slot);
	c->pinned_bytes -= s->bytes;
	memset(s, 0, sizeof(*s));
	s->prev = s->next = CREG_NIL;
}
