#include "dst_pc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include <sodium.h>

#include "bitmap.h"
#include "dst_int.h"
#include "pcd.h"
#include "privdata.h"

/* Engine registrations with the helpers at once. */
#define DST_PC_AHEAD 4

int dst_pc_views_whole(struct rdmig_dest *d, const unsigned *idx, unsigned n)
{
	const struct dst_block *with = NULL, *without = NULL;
	unsigned i;

	for (i = 0; i < n; i++) {
		const struct dst_block *b = &d->blocks[idx ? idx[i] : i];

		if (b->view && !with)
			with = b;
		if (!b->view && !without)
			without = b;
	}
	/* The engine would serve one block in the VMM's address space and
	 * another in ours, where no vCPU runs: its faults would never come. */
	if (with && without)
		return rd_err_set(&d->ss.err, -EINVAL, "block \"%s\" has a post-copy view and "
				  "block \"%s\" has none: a guest in another process needs a view "
				  "for every block (rdmig_dest_postcopy_view()), one in this "
				  "process none", with->d.name, without->d.name);
	return 0;
}

int dst_pc_setup(struct rdmig_dest *d)
{
	struct dst_pc *pc = &d->pc;
	struct pcd_block *pb;
	unsigned i;
	int rc;

	if (!d->ss.cfg.postcopy || !d->chans)
		return rd_err_set(&d->ss.err, -EPROTO, "post-copy granted without its set-up");
	/* Blocks the map_block callback added since accepting have no view. */
	rc = dst_pc_views_whole(d, d->map, d->nmap);
	if (rc)
		return rc;
	pc->set = calloc(d->nmap ? d->nmap : 1, sizeof(*pc->set));
	pc->npages = calloc(d->nmap ? d->nmap : 1, sizeof(*pc->npages));
	pc->length = calloc(d->nmap ? d->nmap : 1, sizeof(*pc->length));
	pb = calloc(d->nmap ? d->nmap : 1, sizeof(*pb));
	if (!pc->set || !pc->npages || !pc->length || !pb) {
		free(pb);
		return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
	}
	for (i = 0; i < d->nmap; i++) {
		struct dst_block *b = &d->blocks[d->map[i]];

		/* The set is in the source's pages: ours must be the same. */
		if (b->d.page_size != CFG_PAGE_SIZE) {
			free(pb);
			return rd_err_set(&d->ss.err, -EINVAL, "block \"%s\": post-copy needs "
					  "pages of %u bytes, the source's are %u", b->d.name,
					  CFG_PAGE_SIZE, b->d.page_size);
		}
		pc->npages[i] = blk_npages(b->d.length, b->d.page_size);
		pc->length[i] = b->d.length;
		pc->set[i] = bm_alloc(pc->npages[i]);
		if (!pc->set[i]) {
			free(pb);
			return rd_err_set(&d->ss.err, -ENOMEM, "out of memory");
		}
		pb[i] = (struct pcd_block){ b->d.name, b->host, b->d.length, b->view };
	}
	pcset_rx_init(&pc->rx, d->nmap, pc->npages, pc->set);
	pckeys_init(&pc->keys, d->nmap, pc->length);
	rc = pcd_create(&pc->eng, d->ss.conn->id->verbs, pb, d->nmap, d->ss.cfg.postcopy_uffd,
			d->ss.wake_fd, &d->ss.stats, &d->ss.err);
	free(pb);
	if (rc)
		return rc;
	chan_set_pc_cq(d->chans, pcd_cq(pc->eng), PCD_SQ_DEPTH);
	return 0;
}

int dst_pc_reg_step(struct rdmig_dest *d)
{
	struct dst_pc *pc = &d->pc;
	uint64_t len;
	void *addr;
	int rc;

	while (pc->eng && pc->reg_sub < pcd_nregs(pc->eng) &&
	       regq_pending(&d->rq) < DST_PC_AHEAD * regq_threads(&d->rq)) {
		pcd_reg_at(pc->eng, pc->reg_sub, &addr, &len);
		rc = regq_submit(&d->rq, addr, len, IBV_ACCESS_LOCAL_WRITE, -1,
				 DST_REG_COOKIE(DREG_PC, pc->reg_sub), &d->ss.err);
		if (rc == -EAGAIN)
			return 0;
		if (rc)
			return rc;
		pc->reg_sub++;
	}
	return 0;
}

int dst_pc_reg_done(struct rdmig_dest *d, const struct regq_job *j)
{
	uint64_t i = DST_REG_N(j->cookie);

	if (!d->pc.eng || i >= pcd_nregs(d->pc.eng))
		return rd_err_set(&d->ss.err, -EPROTO, "a post-copy registration nobody asked for");
	if (j->rc) {
		fab_reg_error(&d->ss.err, j->rc, j->len);
		return rd_err_prefix(&d->ss.err, j->rc, "post-copy");
	}
	pcd_reg_done(d->pc.eng, (unsigned)i, j->mr);
	return 0;
}

static int on_keys(struct rdmig_dest *d, const Rdmig__PostcopyKeys *k)
{
	return pckeys_take(&d->pc.keys, k->piece_shift, k->block, k->piece, k->addr, k->rkey,
			   k->n_block, &d->ss.err);
}

static int on_ranges(struct rdmig_dest *d, const Rdmig__PostcopyRanges *r)
{
	int rc = pcset_take(&d->pc.rx, r->block, r->first, r->count, r->n_block, &d->ss.err);

	if (rc || !r->last)
		return rc;
	/* Every piece must be readable before any guest thread waits on
	 * one. */
	if (!pckeys_complete(&d->pc.keys))
		return rd_err_set(&d->ss.err, -EPROTO, "POSTCOPY_RANGES ended the set with %"
				  PRIu64 " of %" PRIu64 " keys sent", d->pc.keys.got,
				  d->pc.keys.npieces);
	d->pc.switching = true;
	d->job = (struct dst_job){ .kind = JOB_PC_BEGIN };
	return 0;
}

int dst_pc_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	if (!(d->ss.caps & PD_CAP_POSTCOPY) || !d->pc.eng)
		return rd_err_set(&d->ss.err, -EPROTO, "%s without the POSTCOPY capability",
				  ctrl_type_name(h->type));
	if (d->pc.switching)
		return rd_err_set(&d->ss.err, -EPROTO, "%s after the page set ended",
				  ctrl_type_name(h->type));
	if (h->type == CT_POSTCOPY_KEYS)
		return on_keys(d, (const Rdmig__PostcopyKeys *)m);
	return on_ranges(d, (const Rdmig__PostcopyRanges *)m);
}

static int tell_application(struct rdmig_dest *d)
{
	char msg[RD_ERRLEN] = "";
	struct cfg_cb_frame f;
	int rc;

	/* Without the callback the guest is this process's, free to run once
	 * the status says post-copy; with it, once it returned 0: a callback
	 * that failed did not start it (rdmig(3)), and the source, told so
	 * in our ERROR, may resume its own copy. */
	if (!d->ss.cfg.postcopy_start) {
		d->ss.guest_never_ran = false;
		return 0;
	}
	cfg_cb_enter(&f, &d->ss.cfg);
	rc = d->ss.cfg.postcopy_start(d->ss.cfg.postcopy_ctx, msg, sizeof(msg));
	cfg_cb_leave(&f);
	if (rc)
		return rd_err_set(&d->ss.err, rc < 0 ? rc : -EIO, "the postcopy_start callback "
				  "failed: %s", msg[0] ? msg : "no reason given");
	d->ss.guest_never_ran = false;
	return 0;
}

int dst_pc_begin_step(struct rdmig_dest *d)
{
	struct dst_pc *pc = &d->pc;
	struct fab_conn *fault = chan_set_pc_conn(d->chans, 0), *bg = chan_set_pc_conn(d->chans, 1);
	int rc;

	/* A pin in the helpers' hands would fault on the guest's memory
	 * once it is registered; the engine's own must be done. */
	if (regq_pending(&d->rq) || !pcd_ready(pc->eng))
		return DST_JOB_WAITING;
	if (!fault || !bg)
		return rd_err_set(&d->ss.err, -EPROTO, "the source switched to post-copy without "
				  "opening the post-copy channels");
	/* Nothing faults the guest's memory in behind the engine's back. */
	pop_stop(&d->pop);
	rc = pcd_begin(pc->eng, fault, bg, &pc->keys, pc->set, pc->rx.pages,
		       (d->ss.caps & PD_CAP_POSTCOPY_RECOVER) != 0, &d->ss.err);
	if (rc)
		return rc;
	dst_set_state(d, DST_POSTCOPY);
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.status = RDMIG_STATUS_POSTCOPY;
	pthread_mutex_unlock(&d->ss.stats.lock);
	cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "post-copy: the guest may run; %" PRIu64 " pages "
		"are read from the source as they are touched and in the background",
		pc->rx.pages);
	rc = tell_application(d);
	return rc ? rc : DST_JOB_DONE;
}

/* Resuming: the post-copy channels came back, the engine reads on.  With
 * every page in (the last READs completed while paused), none were
 * invited: POSTCOPY_DONE goes next (dst_pc_step). */
static int resume_step(struct rdmig_dest *d)
{
	struct fab_conn *fault = chan_set_pc_conn(d->chans, 0), *bg = chan_set_pc_conn(d->chans, 1);
	uint64_t f, b, left;

	if (!d->pc.resumed_sent)
		return 0;
	left = pcd_pending(d->pc.eng, &f, &b);
	if (left && (!fault || !bg))
		return 0;
	if (left)
		pcd_resume(d->pc.eng, fault, bg);
	dst_set_state(d, DST_POSTCOPY);
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.status = RDMIG_STATUS_POSTCOPY;
	pthread_mutex_unlock(&d->ss.stats.lock);
	cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "post-copy resumed: %" PRIu64 " pages left to read",
		left);
	return 0;
}

int dst_pc_step(struct rdmig_dest *d)
{
	Rdmig__PostcopyDone m = RDMIG__POSTCOPY_DONE__INIT;
	struct dst_pc *pc = &d->pc;
	int rc;

	if (d->state == DST_PC_RESUMING)
		return resume_step(d);
	if (d->state != DST_POSTCOPY || pc->done_sent)
		return 0;
	rc = pcd_poll(pc->eng, &m.fault_pages, &m.background_pages, &d->ss.err);
	/* A READ failed: the link broke under it (dst_step.c pauses). */
	if (rc == PCD_POLL_PAUSED)
		return -ECONNRESET;
	if (rc <= 0 || !ctrl_can_send(&d->ss.ch))
		return rc;
	m.pages = pc->rx.pages;
	rc = ctrl_send(&d->ss.ch, CT_POSTCOPY_DONE, &m.base);
	if (rc == -EAGAIN)
		return 0;
	if (rc)
		return rc;
	pc->done_sent = true;
	cfg_log(&d->ss.cfg, RDMIG_LOG_INFO, "post-copy: every page is in (%" PRIu64 " read on "
		"faults, %" PRIu64 " in the background)", m.fault_pages, m.background_pages);
	return 0;
}

void dst_pc_new_token(struct rdmig_dest *d)
{
	static const uint8_t zero[PD_TOKEN_LEN];

	do
		randombytes_buf(d->pc.token, PD_TOKEN_LEN);
	while (!sodium_memcmp(d->pc.token, zero, PD_TOKEN_LEN));
}

bool dst_pc_may_pause(struct rdmig_dest *d, int rc)
{
	uint64_t f, b;
	struct rd_err e;
	int st;

	/* A switch that failed before the guest ran (the postcopy_start
	 * callback) is no pause: the guest is whole on the source, which
	 * must hear that in our ERROR rather than wait to resume. */
	if (!(d->ss.caps & PD_CAP_POSTCOPY_RECOVER) || !d->resume_l || !d->pc.eng ||
	    rc == -ECANCELED || d->ss.peer_said || d->ss.guest_never_ran)
		return false;
	if (d->state != DST_POSTCOPY && d->state != DST_PC_RESUMING)
		return false;
	/* The engine itself broke (the userfaultfd): nothing to wait for.
	 * Every page in but POSTCOPY_DONE not sent: the source still waits for
	 * it, and a resume answers pages_left 0 and sends it. */
	st = pcd_poll(d->pc.eng, &f, &b, &e);
	return st == 0 || st == PCD_POLL_PAUSED || (st == 1 && !d->pc.done_sent);
}

void dst_pc_pause(struct rdmig_dest *d)
{
	pcd_pause(d->pc.eng);
	d->pc.pauses++;
	d->pc.resumed_sent = false;
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.status = RDMIG_STATUS_POSTCOPY_PAUSED;
	pthread_mutex_unlock(&d->ss.stats.lock);
}

int dst_pc_on_resume(struct rdmig_dest *d, const ProtobufCMessage *m)
{
	const Rdmig__PostcopyResume *q = (const Rdmig__PostcopyResume *)m;
	Rdmig__PostcopyResumed a = RDMIG__POSTCOPY_RESUMED__INIT;
	int rc;

	if (q->pages != d->pc.rx.pages)
		return rd_err_set(&d->ss.err, -EPROTO, "POSTCOPY_RESUME for a set of %" PRIu64
				  " pages, this post-copy's has %" PRIu64, q->pages,
				  d->pc.rx.pages);
	a.pages_left = pcd_pending(d->pc.eng, &a.fault_pages, &a.background_pages);
	if (a.pages_left) {
		/* The channels are invited as at the block map, beside the new
		 * control connection, with a new token; the engine's CQ takes
		 * their completions again. */
		rc = chan_set_open(&d->chans, d->ss.conn, 1, &d->ss.err);
		if (rc)
			return rd_err_prefix(&d->ss.err, rc, "post-copy channels");
		chan_set_grant(d->chans, 1, CHAN_PC, &a.channel_port, &a.channel_token);
		chan_set_pc_cq(d->chans, pcd_cq(d->pc.eng), PCD_SQ_DEPTH);
		rc = sess_watch(&d->ss, chan_set_fd(d->chans));
		if (rc)
			return rc;
	}
	rc = sess_send(&d->ss, CT_POSTCOPY_RESUMED, &a.base, "answer POSTCOPY_RESUME");
	if (rc)
		return rc;
	d->pc.resumed_sent = true;
	d->pc.done_sent = false;
	return 0;
}

int dst_pc_on_error(struct rdmig_dest *d, const Rdmig__Error *e)
{
	/* Anyone who learnt the token gets this far: heard as the source's
	 * word (sess_peer_error), its ERROR would end a post-copy it could not
	 * resume, and the guest with it. */
	if (!d->pc.authed)
		return rd_err_set(&d->ss.err, -EACCES, "authentication required: the resumer "
				  "sent ERROR instead");
	if (e->code == -ECANCELED)
		return sess_peer_error(&d->ss, e);
	/* The source gave up this try, not the migration: it tries again. */
	return rd_err_set(&d->ss.err, -ECONNABORTED, "the source gave up this resume: %s",
			  e->message ? e->message : "no reason given");
}

bool dst_pc_done(const struct rdmig_dest *d)
{
	return d->pc.done_sent;
}

void dst_pc_stop(struct rdmig_dest *d)
{
	pcd_stop(d->pc.eng);
}

void dst_pc_destroy(struct rdmig_dest *d)
{
	struct dst_pc *pc = &d->pc;
	unsigned i;

	pcd_destroy(pc->eng);
	pckeys_fini(&pc->keys);
	for (i = 0; pc->set && i < d->nmap; i++)
		bm_free(pc->set[i]);
	free(pc->set);
	free(pc->npages);
	free(pc->length);
	*pc = (struct dst_pc){ .eng = NULL };
}
