#include "pack.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"

int pack_init(struct pack *p, uint32_t msg_max, struct rd_err *err)
{
	size_t runs = msg_max / 4096;

	memset(p, 0, sizeof(*p));
	/* About a run per page the message can carry: a run is a page or more. */
	if (runs > CTRL_PAGES_RUNS_MAX)
		runs = CTRL_PAGES_RUNS_MAX;
	if (!runs)
		runs = 1;
	p->runs_max = runs;
	p->data_max = ctrl_pages_data_max(msg_max, runs);
	if (p->data_max < PACK_RUN_MAX)
		return 0; /* too small a frame to carry a run: never fits */
	p->block = calloc(runs, sizeof(*p->block));
	p->offset = calloc(runs, sizeof(*p->offset));
	p->length = calloc(runs, sizeof(*p->length));
	p->data = malloc(p->data_max);
	if (!p->block || !p->offset || !p->length || !p->data) {
		pack_fini(p);
		return rd_err_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

void pack_fini(struct pack *p)
{
	free(p->block);
	free(p->offset);
	free(p->length);
	free(p->data);
	memset(p, 0, sizeof(*p));
}

bool pack_fits(const struct pack *p, uint64_t len)
{
	return p->data && p->n < p->runs_max && len <= p->data_max - p->len;
}

void pack_add(struct pack *p, uint32_t block, uint64_t offset, const uint8_t *src,
	      uint64_t len)
{
	/* A run that continues the last one merges with it. */
	if (p->n && p->block[p->n - 1] == block &&
	    p->offset[p->n - 1] + p->length[p->n - 1] == offset) {
		p->length[p->n - 1] += len;
	} else {
		p->block[p->n] = block;
		p->offset[p->n] = offset;
		p->length[p->n] = len;
		p->n++;
	}
	memcpy(p->data + p->len, src, len);
	p->len += len;
}

void pack_msg(const struct pack *p, Rdmig__Pages *m)
{
	rdmig__pages__init(m);
	m->n_block = m->n_offset = m->n_length = p->n;
	m->block = p->block;
	m->offset = p->offset;
	m->length = p->length;
	m->data.data = p->data;
	m->data.len = p->len;
}

void pack_reset(struct pack *p)
{
	p->n = 0;
	p->len = 0;
}
