/* The dirty-page glue (send_dirty.h). */
#include <stdint.h>
#include <time.h>

#include "cli.h"
#include "rdmig.h"
#include "send_dirty.h"
#include "send_end.h"
#include "send_int.h"
#include "workload.h"

static int poll_source(void *ctx)
{
	struct sender *x = ctx;

	return rdmig_source_poll(x->s);
}

int send_freeze(struct sender *x)
{
	struct cli_err err = { "" };
	int rc = wl_freeze(x->e.wl, poll_source, x, &err);

	if (rc && !err.msg[0])
		return send_lib_fail(x, rc, CLI_PHASE_TRANSFER);
	return rc ? send_local_fail(x, rc, err.msg) : 0;
}

static int mark_range(void *ctx, unsigned block, uint64_t off, uint64_t len)
{
	struct sender *x = ctx;

	return rdmig_source_mark_dirty(x->s, block, off, len);
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int send_collect(struct sender *x, uint64_t *bytes)
{
	uint64_t t0 = now_us();
	struct cli_err err;
	int rc;

	*bytes = 0;
	rc = wl_collect_dirty(x->e.wl, mark_range, x, bytes, &err);
	x->collect_us = now_us() - t0;
	return rc ? send_local_fail(x, rc, err.msg) : 0;
}

int send_clear_and_thaw(struct sender *x)
{
	uint64_t t0 = now_us();
	struct cli_err err;
	int rc = wl_clear_dirty(x->e.wl, &err);

	x->clear_us = now_us() - t0;
	if (rc)
		return send_local_fail(x, rc, err.msg);
	x->t_clear = cli_now_ms();
	wl_thaw(x->e.wl);
	return 0;
}
