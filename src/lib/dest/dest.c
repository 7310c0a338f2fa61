/* dest: the receiving side of a migration, as a non-blocking state
 * machine; its API.
 *
 * rdmig_dest_process() runs one step of the driver (dst_step.h) and
 * returns; rdmig_dest_run() is that in a poll() loop.  The destination
 * never writes its memory itself except to clear zero ranges and copy
 * PAGES: the source's RDMA WRITEs do that, into memory this side
 * registered.  The migration only counts as complete when COMPLETE arrives
 * with counters matching what was received, and is reported so once the
 * confirmation reached the source.  What each state does is in the files
 * below this one (dst_int.h lists them). */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dst_data.h"
#include "dst_int.h"
#include "dst_link.h"
#include "dst_map.h"
#include "dst_pc.h"
#include "dst_state.h"
#include "dst_step.h"
#include "rdmig.h"

#define DEST_CHANNELS_DEFAULT 8

/* ---- setup ------------------------------------------------------------ */

int rdmig_dest_create(struct rdmig_dest **out, const struct rdmig_config *cfg)
{
	struct rdmig_dest *d = calloc(1, sizeof(*d));
	int rc;

	*out = NULL;
	if (!d)
		return -ENOMEM;
	d->state_max = RDMIG_STATE_UNSAID; /* until the block map says */
	rc = sess_init(&d->ss, cfg, "source");
	/* Until the switch lets it run (dst_pc.c): a failure before then
	 * tells the source its copy is still the guest. */
	d->ss.guest_never_ran = true;
	if (!rc)
		rc = dst_state_init(d);
	if (!d->ss.cfg.channels)
		d->ss.cfg.channels = DEST_CHANNELS_DEFAULT;
	/* First guesses, before anything was measured: XXH3 and clearing
	 * memory under emulation. */
	cost_init(&d->hash_cost, 3.0);
	cost_init(&d->zero_cost, 1.0);
	if (rc) {
		/* Not through the setter: create calls nothing back. */
		d->state = DST_FAILED;
		d->result = rc;
	}
	*out = d;
	return rc;
}

const char *rdmig_dest_error(const struct rdmig_dest *d)
{
	/* Creation reports its failure through the handle, except for ENOMEM. */
	return d ? d->ss.err.msg : "out of memory";
}

int rdmig_dest_error_class(const struct rdmig_dest *d)
{
	return d->state == DST_FAILED ? sess_error_class(&d->ss, d->result) : RDMIG_ERROR_NONE;
}

int rdmig_dest_add_block(struct rdmig_dest *d, const char *name, void *host,
			 uint64_t length, int zeroed)
{
	unsigned i;
	int rc;

	if (sess_reentered(&d->ss))
		return -EDEADLK;
	if (d->state != DST_NEW)
		return rd_err_set(&d->ss.err, -EINVAL, "blocks must be added before accepting");
	rc = blk_name_valid(name, &d->ss.err);
	if (rc)
		return rc;
	if (d->nblocks >= BLK_MAX)
		return rd_err_set(&d->ss.err, -E2BIG, "too many blocks (limit %d)", BLK_MAX);
	for (i = 0; i < d->nblocks; i++)
		if (!strcmp(d->blocks[i].d.name, name))
			return rd_err_set(&d->ss.err, -EEXIST, "block \"%s\" added twice", name);
	return dst_map_add(d, name, host, length, zeroed);
}

/* Where the VMM's view of a block may be: page-aligned, not wrapping, and
 * clear of every other block's view (a fault address names one block). */
static int check_view(struct rdmig_dest *d, unsigned idx, uint64_t view)
{
	const struct dst_block *b = &d->blocks[idx];
	unsigned i;

	if (!view || view % 4096 || b->d.length % 4096 || !b->d.length ||
	    view > UINT64_MAX - b->d.length)
		return rd_err_set(&d->ss.err, -EINVAL, "block \"%s\": a "
				  "post-copy view at 0x%" PRIx64 " of %" PRIu64 " bytes is not whole "
				  "4 KiB pages of an address space", b->d.name, view, b->d.length);
	for (i = 0; i < d->nblocks; i++) {
		const struct dst_block *o = &d->blocks[i];

		if (i == idx || !o->view)
			continue;
		if (view < o->view + o->d.length && o->view < view + b->d.length)
			return rd_err_set(&d->ss.err, -EINVAL, "block \"%s\": its "
					  "post-copy view at 0x%" PRIx64 " overlaps block \"%s\"'s at "
					  "0x%" PRIx64, b->d.name, view, o->d.name, o->view);
	}
	return 0;
}

int rdmig_dest_postcopy_view(struct rdmig_dest *d, const char *name, uint64_t view_addr)
{
	unsigned i;
	int rc;

	if (sess_reentered(&d->ss))
		return -EDEADLK;
	if (d->state != DST_NEW)
		return rd_err_set(&d->ss.err, -EINVAL, "post-copy views are set before accepting");
	if (!d->ss.cfg.postcopy || d->ss.cfg.postcopy_uffd < 0)
		return rd_err_set(&d->ss.err, -EINVAL, "a post-copy view needs postcopy and the "
				  "VMM's postcopy_uffd in the config");
	for (i = 0; i < d->nblocks; i++)
		if (!strcmp(d->blocks[i].d.name, name))
			break;
	if (i == d->nblocks)
		return rd_err_set(&d->ss.err, -ENOENT, "block \"%s\": no such block for a "
				  "post-copy view (add it first)", name);
	rc = check_view(d, i, view_addr);
	if (rc)
		return rc;
	d->blocks[i].view = view_addr;
	return 0;
}

int rdmig_dest_accept(struct rdmig_dest *d, struct rdmig_listener *l, int timeout_ms)
{
	int rc;

	if (sess_reentered(&d->ss))
		return -EDEADLK;
	if (d->state != DST_NEW)
		return d->state == DST_FAILED ? d->result :
		       rd_err_set(&d->ss.err, -EISCONN, "already accepted a connection");
	/* The source resumes where it first connected: a resume watched for
	 * on another address or port would never come. */
	if (d->resume_l && d->resume_l != l)
		return rd_err_set(&d->ss.err, -EINVAL, "the listener kept for a resume is not the "
				  "one accepted on (the source resumes where it connected)");
	rc = dst_pc_views_whole(d, NULL, d->nblocks);
	if (rc)
		return rc;
	rc = dst_link_accept(d, l, timeout_ms);
	if (!rc)
		rc = dst_watch(d);
	return rc && d->ss.conn ? dst_fail(d, rc) : rc;
}

/* ---- driving ---------------------------------------------------------- */

int rdmig_dest_process(struct rdmig_dest *d)
{
	if (sess_reentered(&d->ss))
		return -EDEADLK;
	if (d->state == DST_FAILED)
		return d->result;
	if (d->state == DST_DONE)
		return 1;
	if (d->state == DST_NEW) {
		sess_woken(&d->ss);
		return rd_err_set(&d->ss.err, -ENOTCONN, "no connection accepted");
	}
	return dst_step_report(d);
}

int rdmig_dest_fd(const struct rdmig_dest *d)
{
	return d->ss.epfd;
}

int rdmig_dest_fds(const struct rdmig_dest *d, int *fds, int max)
{
	if (max < 1 || !fds)
		return -EINVAL;
	fds[0] = d->ss.epfd;
	return 1;
}


int rdmig_dest_timeout(const struct rdmig_dest *d)
{
	return dst_step_wait_ms(d);
}

int rdmig_dest_run(struct rdmig_dest *d)
{
	struct pollfd pfd = { .fd = d->ss.epfd, .events = POLLIN };
	int rc;

	for (;;) {
		rc = rdmig_dest_process(d);
		if (rc)
			return rc > 0 ? 0 : rc;
		poll(&pfd, 1, rdmig_dest_timeout(d));
	}
}

void rdmig_dest_stats(struct rdmig_dest *d, struct rdmig_stats *st)
{
	struct rdmig_stats all;

	pthread_mutex_lock(&d->ss.stats.lock);
	if (d->ss.stats.st.status != RDMIG_STATUS_COMPLETED)
		stats_refresh(&d->ss.stats);
	all = d->ss.stats.st;
	pthread_mutex_unlock(&d->ss.stats.lock);
	sess_stats_out(&all, st);
}

void rdmig_dest_cancel(struct rdmig_dest *d, const char *reason)
{
	sess_cancel(&d->ss, reason ? reason : "no reason given");
}

void rdmig_dest_pause_state(struct rdmig_dest *d, int pause)
{
	/* Resuming must be seen: the STATE in hand waits for a step. */
	if (atomic_exchange(&d->state_paused, pause != 0) && !pause)
		sess_wake(&d->ss);
}

int rdmig_dest_nblocks(const struct rdmig_dest *d)
{
	return (int)d->nblocks;
}

int rdmig_dest_block(const struct rdmig_dest *d, unsigned idx, const char **name,
		     void **host, uint64_t *length)
{
	if (idx >= d->nblocks)
		return -EINVAL;
	*name = d->blocks[idx].d.name;
	*host = d->blocks[idx].host;
	*length = d->blocks[idx].d.length;
	return 0;
}

int rdmig_dest_peer(const struct rdmig_dest *d, char *buf, size_t len)
{
	if (!d->peer[0] || !len)
		return -ENOTCONN;
	snprintf(buf, len, "%s", d->peer);
	return 0;
}

int rdmig_dest_keep_listener(struct rdmig_dest *d, struct rdmig_listener *l)
{
	if (sess_reentered(&d->ss))
		return -EDEADLK;
	if (d->state != DST_NEW)
		return rd_err_set(&d->ss.err, -EINVAL, "the listener for a resume is given before "
				  "accepting");
	if (!d->ss.cfg.postcopy)
		return rd_err_set(&d->ss.err, -EINVAL, "a listener for a resume without post-copy "
				  "(config postcopy)");
	d->resume_l = l;
	return 0;
}

void rdmig_dest_destroy(struct rdmig_dest *d)
{
	struct fab_conn *conn0;

	if (!d)
		return;
	/* The first control connection, kept for its PD after a resume: it
	 * goes last, once nothing is registered on it. */
	conn0 = d->pc.conn0 != d->ss.conn ? d->pc.conn0 : NULL;
	/* The helper first: it may be registering, and what it registered and
	 * nobody reaped goes with it. */
	regq_fini(&d->rq);
	/* The channels' QPs use the control connection's PD and CQ (the
	 * post-copy engine's, post-copy's). */
	chan_set_destroy(d->chans);
	dst_pc_destroy(d);
	fab_disconnect(d->ss.conn);
	if (d->job.msg)
		ctrl_msg_done(&d->ss.ch, d->job.msg);
	dst_data_destroy(d);
	dst_state_destroy(d);
	dst_map_destroy(d);
	sess_fini(&d->ss);
	fab_conn_destroy(conn0);
	free(d->blocks);
	free(d->map);
	free(d);
}
