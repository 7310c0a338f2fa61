#include "src_chan.h"

#include "chan.h"
#include "src_int.h"

int src_chan_step(struct rdmig_source *s)
{
	unsigned k;
	int rc, again = 0;

	for (k = 1; k < s->nchans + s->npc; k++) {
		if (s->chans[k].up)
			continue;
		rc = fab_connect_step(s->chans[k].conn);
		if (rc == FAB_STEP_AGAIN)
			again = SRC_LINK_AGAIN;
		if (!rc || rc == FAB_STEP_AGAIN)
			continue;
		rc = chan_connect_finish(s->chans[k].conn, k, k >= s->nchans, rc, &s->ss.err);
		if (rc)
			return rc;
		s->chans[k].up = true;
		s->chans_up++;
	}
	if (again)
		return again;
	return s->chans_up == s->nchans + s->npc ? SRC_LINK_UP : 0;
}

int src_chan_reopen_pc(struct rdmig_source *s, uint32_t port, uint64_t token)
{
	unsigned k;
	int rc;

	/* Indexes 1 and 2 of 3 on the wire: no data channel comes back. */
	for (k = s->nchans; k < s->nchans + s->npc; k++) {
		rc = chan_connect_start(&s->chans[k].conn, s->ss.conn, port, token,
					1 + k - s->nchans, 1 + s->npc, 1, true,
					rd_deadline(s->ss.cfg.timeout_ms), &s->ss.err);
		if (!rc)
			rc = sess_watch(&s->ss, fab_cm_fd(s->chans[k].conn));
		if (rc)
			return rc;
	}
	return 0;
}
