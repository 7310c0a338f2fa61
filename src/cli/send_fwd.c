/* Device-state forwarding (send_fwd.h). */
#include <errno.h>
#include <stddef.h>
#include <sys/types.h>

#include <ev.h>

#include "cli.h"
#include "devstate.h"
#include "rdmig.h"
#include "send_end.h"
#include "send_fwd.h"
#include "send_int.h"
#include "send_loop.h"

int send_fwd_state(struct sender *x)
{
	struct cli_err err;
	ssize_t n;

	for (;;) {
		if (x->fwd_off == x->fwd_len) {
			if (x->ds_eof)
				break;
			n = ds_read(x->e.ds, x->fwd, FWD_BUF, &err);
			if (n == -EAGAIN)
				break;
			if (n < 0)
				return send_local_fail(x, (int)n, err.msg);
			x->fwd_off = 0;
			x->fwd_len = (size_t)n;
			x->ds_eof = n == 0;
			continue;
		}
		n = rdmig_source_write_state(x->s, x->fwd + x->fwd_off, x->fwd_len - x->fwd_off);
		if (n < 0)
			return send_lib_fail(x, (int)n, CLI_PHASE_TRANSFER);
		if (n == 0)
			break;
		x->fwd_off += (size_t)n;
		x->state_deadline = cli_now_ms() + x->o.timeout_s * 1000;
	}
	/* A full buffer waits for credits, not for the fd. */
	if (x->fwd_off < x->fwd_len || x->ds_eof)
		ev_io_stop(x->loop, &x->ds_io);
	else
		send_watch_state(x);
	return x->ds_eof && x->fwd_off == x->fwd_len;
}
