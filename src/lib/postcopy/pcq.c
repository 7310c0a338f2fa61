#include "pcq.h"

#include <errno.h>
#include <stdlib.h>

int pcq_init(struct pcq *q, unsigned cap)
{
	*q = (struct pcq){ .cap = cap };
	q->e = calloc(cap ? cap : 1, sizeof(*q->e));
	return q->e ? 0 : -ENOMEM;
}

void pcq_fini(struct pcq *q)
{
	free(q->e);
	q->e = NULL;
	q->cap = q->n = 0;
}

bool pcq_full(const struct pcq *q)
{
	return q->n == q->cap;
}

unsigned pcq_len(const struct pcq *q)
{
	return q->n;
}

int pcq_push(struct pcq *q, uint64_t key, int64_t t_ns, bool need)
{
	unsigned i;

	if (q->n == q->cap)
		return -ENOSPC;
	for (i = 0; q->e[i].used; i++)
		;
	q->e[i] = (struct pcq_ent){ .key = key, .t_ns = t_ns, .seq = q->seq++, .used = true,
				    .need = need };
	q->n++;
	return 0;
}

bool pcq_next(const struct pcq *q, uint64_t *key)
{
	const struct pcq_ent *best = NULL;
	unsigned i;

	for (i = 0; i < q->cap; i++)
		if (q->e[i].used && q->e[i].need && (!best || q->e[i].seq < best->seq))
			best = &q->e[i];
	if (best)
		*key = best->key;
	return best != NULL;
}

void pcq_posted(struct pcq *q, uint64_t key)
{
	unsigned i;

	for (i = 0; i < q->cap; i++)
		if (q->e[i].used && q->e[i].key == key)
			q->e[i].need = false;
}

void pcq_repost(struct pcq *q, uint64_t lo, uint64_t hi)
{
	unsigned i;

	for (i = 0; i < q->cap; i++)
		if (q->e[i].used && q->e[i].key >= lo && q->e[i].key < hi)
			q->e[i].need = true;
}

unsigned pcq_done(struct pcq *q, uint64_t lo, uint64_t hi, int64_t now_ns,
		  void (*fn)(void *arg, uint64_t ns), void *arg)
{
	unsigned i, n = 0;

	for (i = 0; i < q->cap && q->n; i++) {
		struct pcq_ent *e = &q->e[i];

		if (!e->used || e->key < lo || e->key >= hi)
			continue;
		if (fn)
			fn(arg, now_ns > e->t_ns ? (uint64_t)(now_ns - e->t_ns) : 0);
		e->used = false;
		q->n--;
		n++;
	}
	return n;
}
