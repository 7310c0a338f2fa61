/* src_stats: the source's statistics.  The driving thread publishes its
 * counters into the session's box after each step; any thread reads the
 * box (rdmig_source_stats()). */
#include "src_stats.h"

#include "rdmig.h"
#include "src_conv.h"
#include "src_int.h"
#include "src_mem.h"
#include "src_pc.h"

/* The driving thread's counters, into the box other threads read. */
void src_stats_publish(struct rdmig_source *s)
{
	struct stats_box *b = &s->ss.stats;
	uint64_t dirty = src_mem_dirty_bytes(s);
	struct conv_policy p;

	pthread_mutex_lock(&b->lock);
	if (!s->prep_out && s->dreg_ready) {
		/* Post-copy's read pieces beside the chunks. */
		b->st.pinned_bytes = s->dreg.creg.pinned_bytes + src_pc_pinned(s);
		if (b->st.pinned_peak < s->dreg.creg.peak_bytes + src_pc_pinned(s))
			b->st.pinned_peak = s->dreg.creg.peak_bytes + src_pc_pinned(s);
		b->st.register_requests = s->dreg.requests;
		b->st.chunks_registered = s->dreg.chunks;
	}
	b->st.ctrl_sent = s->ss.ch.sent;
	b->st.ctrl_received = s->ss.ch.received;
	b->st.remaining = dirty + (s->sweep.planned_bytes > s->iter_bytes ?
					    s->sweep.planned_bytes - s->iter_bytes : 0);
	/* The advice's prediction: at the limit when there is one (the last
	 * pages are paced too), plus the VMM's switch-over cost. */
	src_conv_policy(s, &p);
	b->st.expected_downtime_ms = conv_downtime_ms(&p, b->st.remaining, s->bw);
	b->st.dirty_rate = s->dirty_rate;
	b->st.first_write_ms = s->first_write_ms > 0 && b->start_ms ?
			       (uint64_t)(s->first_write_ms - b->start_ms) : 0;
	b->ctrl_bytes = s->ss.ch.bytes_sent;
	pthread_mutex_unlock(&b->lock);
}

void src_stats_fill(void *role, struct rdmig_stats *st)
{
	struct rdmig_source *s = role;
	struct stats_box *b = &s->ss.stats;

	pthread_mutex_lock(&b->lock);
	if (b->st.status != RDMIG_STATUS_COMPLETED)
		stats_refresh(b);
	*st = b->st;
	st->transferred += b->ctrl_bytes;
	pthread_mutex_unlock(&b->lock);
}
