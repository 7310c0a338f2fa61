#include "src_pc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "privdata.h"
#include "src_chan.h"
#include "src_int.h"
#include "src_mem.h"

/* How often the post-copy channels' QPs are looked at while the
 * destination reads. */
#define SRC_PC_QP_CHECK_MS 100
/* Read pieces with the helpers at once, per helper (as pin-all's). */
#define SRC_PC_AHEAD 4

static bool pin_all(const struct rdmig_source *s)
{
	return s->pieces != NULL;
}

static struct ibv_mr *read_mr(const struct rdmig_source *s, uint64_t i)
{
	return pin_all(s) ? s->pieces[i].mr : s->pc.mr[i];
}

int src_pc_pin_access(const struct rdmig_source *s)
{
	return (s->ss.caps & PD_CAP_POSTCOPY) ? IBV_ACCESS_REMOTE_READ : 0;
}

int src_pc_setup(struct rdmig_source *s)
{
	struct src_pc *pc = &s->pc;
	size_t n;
	unsigned i;

	/* Pin-all's pieces are the read pieces; dynamic mode has its own. */
	pc->rp_shift = pin_all(s) ? s->slot_shift : SRC_PIECE_SHIFT;
	for (i = 0; i < s->nblocks; i++) {
		struct src_block *b = &s->blocks[i];

		b->rp_first = pc->n;
		b->rp_n = blk_nchunks(b->d.length, pc->rp_shift);
		pc->n += b->rp_n;
	}
	if (!pin_all(s) && !(pc->mr = calloc(pc->n, sizeof(*pc->mr))))
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	pc->keys_max = ctrl_pc_keys_max(s->peer_msg_max);
	pc->ranges_max = ctrl_pc_ranges_max(s->peer_msg_max);
	n = pc->keys_max > pc->ranges_max ? pc->keys_max : pc->ranges_max;
	pc->a32 = calloc(n, sizeof(*pc->a32));
	pc->b32 = calloc(n, sizeof(*pc->b32));
	pc->a64 = calloc(n, sizeof(*pc->a64));
	pc->b64 = calloc(n, sizeof(*pc->b64));
	pc->set = calloc(s->nblocks, sizeof(*pc->set));
	pc->npages = calloc(s->nblocks, sizeof(*pc->npages));
	if (!pc->a32 || !pc->b32 || !pc->a64 || !pc->b64 || !pc->set || !pc->npages)
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	return 0;
}

/* ---- read pieces (dynamic mode) --------------------------------------------------- */

static unsigned block_of_piece(const struct rdmig_source *s, uint64_t i)
{
	unsigned b = 0;

	while (b + 1 < s->nblocks && s->blocks[b + 1].rp_first <= i)
		b++;
	return b;
}

int src_pc_reg_step(struct rdmig_source *s)
{
	struct src_pc *pc = &s->pc;
	uint64_t ahead = SRC_PC_AHEAD * (uint64_t)regq_threads(&s->rq), off, len;
	const struct src_block *b;
	int rc;

	if (!pc->mr || s->state >= SRC_POSTCOPY)
		return 0;
	while (pc->sub < pc->n && pc->sub - pc->got < ahead) {
		b = &s->blocks[block_of_piece(s, pc->sub)];
		blk_chunk_span(b->d.length, pc->rp_shift, pc->sub - b->rp_first, &off, &len);
		/* Read access for the peer, nothing more; private memory is
		 * pinned for writing too, so copy-on-write is broken now and
		 * the NIC reads what the guest wrote (src_mem.c). */
		rc = regq_submit(&s->rq, b->host + off, len,
				 (b->cow ? IBV_ACCESS_LOCAL_WRITE : 0) | IBV_ACCESS_REMOTE_READ,
				 b->cow ? IBV_ACCESS_REMOTE_READ : -1,
				 SRC_REG_COOKIE(REG_READ, pc->sub), &s->ss.err);
		if (rc == -EAGAIN)
			break;
		if (rc)
			return rc;
		pc->sub++;
	}
	return 0;
}

int src_pc_reg_done(struct rdmig_source *s, const struct regq_job *j)
{
	struct src_pc *pc = &s->pc;
	uint64_t i = SRC_REG_N(j->cookie);

	if (j->rc)
		return src_mem_reg_failed(s, j);
	if (!pc->mr || i != pc->got)
		return rd_err_set(&s->ss.err, -EPROTO, "post-copy read piece %" PRIu64
				  " registered out of order", i);
	pc->mr[i] = j->mr;
	pc->got++;
	pc->pinned += j->len;
	return 0;
}

static bool reads_ready(const struct rdmig_source *s)
{
	return pin_all(s) ? s->pieces_local == s->nslots : s->pc.got == s->pc.n;
}

/* The destination holds every page: it reads nothing more of ours. */
static void revoke(struct rdmig_source *s)
{
	uint64_t i, freed = 0;
	struct ibv_mr *mr;

	for (i = 0; i < s->pc.n; i++) {
		mr = read_mr(s, i);
		if (!mr)
			continue;
		freed += mr->length;
		ibv_dereg_mr(mr);
		if (pin_all(s))
			s->pieces[i].mr = NULL;
		else
			s->pc.mr[i] = NULL;
	}
	s->pc.pinned = 0;
	/* Pin-all's pieces count in the statistics themselves. */
	if (pin_all(s)) {
		pthread_mutex_lock(&s->ss.stats.lock);
		s->ss.stats.st.pinned_bytes -= freed < s->ss.stats.st.pinned_bytes ? freed :
					       s->ss.stats.st.pinned_bytes;
		pthread_mutex_unlock(&s->ss.stats.lock);
	}
}

uint64_t src_pc_pinned(const struct rdmig_source *s)
{
	return s->pc.pinned;
}

/* ---- the switch ------------------------------------------------------------------ */

int src_pc_begin(struct rdmig_source *s)
{
	unsigned i;

	if (!(s->ss.caps & PD_CAP_POSTCOPY))
		return rd_err_set(&s->ss.err, -ENOTSUP, s->ss.cfg.postcopy ?
				  "the destination does not take post-copy (not granted)" :
				  "post-copy was not asked for (config postcopy)");
	if (s->ss.caps & PD_CAP_VERIFY)
		return rd_err_set(&s->ss.err, -EINVAL, "post-copy cannot verify the image: the "
				  "destination's guest changes it before it is whole");
	if (s->npc != CTRL_PC_CHANNELS)
		return rd_err_set(&s->ss.err, -EPROTO, "the destination granted post-copy "
				  "without its channels");
	for (i = 0; i < s->nblocks; i++)
		if (s->blocks[i].d.page_size != CFG_PAGE_SIZE)
			return rd_err_set(&s->ss.err, -EINVAL, "block \"%s\": post-copy needs "
					  "pages of %u bytes, not %u", s->blocks[i].d.name,
					  CFG_PAGE_SIZE, s->blocks[i].d.page_size);
	/* What is marked now is what the destination lacks: frozen into the
	 * blocks' sending bitmaps, which no round uses any more. */
	src_mem_freeze(s, rd_now_ms());
	for (i = 0; i < s->nblocks; i++) {
		s->pc.set[i] = s->blocks[i].sending;
		s->pc.npages[i] = s->blocks[i].npages;
	}
	s->pc.cur = (struct pcset_cursor){ 0, 0 };
	s->pc.key_block = 0;
	s->pc.key_piece = 0;
	s->pc.pages = 0;
	src_set_state(s, SRC_PC_SWITCH);
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "switching to post-copy after %u iterations",
		s->iteration);
	return 0;
}

/* The key cursor on the next piece that has one to send (past the end
 * once every block's went). */
static void next_key(struct rdmig_source *s)
{
	struct src_pc *pc = &s->pc;

	while (pc->key_block < s->nblocks && pc->key_piece == s->blocks[pc->key_block].rp_n) {
		pc->key_block++;
		pc->key_piece = 0;
	}
}

/* One POSTCOPY_KEYS of the keys not sent yet (at least one is left); 1
 * while more are. */
static int send_keys(struct rdmig_source *s)
{
	Rdmig__PostcopyKeys k = RDMIG__POSTCOPY_KEYS__INIT;
	struct src_pc *pc = &s->pc;
	struct ibv_mr *mr;
	size_t n = 0;
	int rc;

	for (next_key(s); n < pc->keys_max && pc->key_block < s->nblocks; next_key(s)) {
		mr = read_mr(s, s->blocks[pc->key_block].rp_first + pc->key_piece);
		pc->a32[n] = pc->key_block;
		pc->a64[n] = pc->key_piece;
		pc->b64[n] = (uintptr_t)mr->addr;
		pc->b32[n] = mr->rkey;
		n++;
		pc->key_piece++;
	}
	k.piece_shift = pc->rp_shift;
	k.n_block = k.n_piece = k.n_addr = k.n_rkey = n;
	k.block = pc->a32;
	k.piece = pc->a64;
	k.addr = pc->b64;
	k.rkey = pc->b32;
	rc = ctrl_send(&s->ss.ch, CT_POSTCOPY_KEYS, &k.base);
	if (rc) {
		/* Not sent: the same keys go again. */
		pc->key_block = pc->a32[0];
		pc->key_piece = pc->a64[0];
		return rc;
	}
	next_key(s);
	return pc->key_block < s->nblocks;
}

/* One POSTCOPY_RANGES of the set; the one that ends it starts the
 * destination's guest (SRC_POSTCOPY). */
static int send_ranges(struct rdmig_source *s)
{
	Rdmig__PostcopyRanges r = RDMIG__POSTCOPY_RANGES__INIT;
	struct src_pc *pc = &s->pc;
	struct pcset_cursor was = pc->cur;
	uint64_t pages = 0;
	size_t n;
	int rc;

	n = pcset_cut(pc->set, pc->npages, s->nblocks, &pc->cur, pc->a32, pc->a64, pc->b64,
		      pc->ranges_max, &pages);
	r.n_block = r.n_first = r.n_count = n;
	r.block = pc->a32;
	r.first = pc->a64;
	r.count = pc->b64;
	/* A set that ends with the message before needs one more, empty. */
	r.last = pc->cur.block == s->nblocks;
	rc = ctrl_send(&s->ss.ch, CT_POSTCOPY_RANGES, &r.base);
	if (rc) {
		pc->cur = was;
		return rc;
	}
	pc->pages += pages;
	if (!r.last)
		return 1;
	src_set_state(s, SRC_POSTCOPY);
	pc->start_ms = rd_now_ms();
	pc->qp_check_ms = pc->start_ms;
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.status = RDMIG_STATUS_POSTCOPY;
	s->ss.stats.st.postcopy_pages = pc->pages;
	pthread_mutex_unlock(&s->ss.stats.lock);
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "post-copy: the destination runs the guest and "
		"lacks %" PRIu64 " pages", pc->pages);
	return 0;
}

static int switch_step(struct rdmig_source *s, int64_t until_us)
{
	int rc = 0;

	/* Every piece has its key before the first goes: a destination must
	 * never wait for a key the guest's first touch needs. */
	if (!reads_ready(s))
		return 0;
	while (s->state == SRC_PC_SWITCH) {
		if (rd_now_us() > until_us)
			return 1;
		if (!ctrl_can_send(&s->ss.ch))
			return 0;
		rc = s->pc.key_block < s->nblocks ? send_keys(s) : send_ranges(s);
		if (rc == -EAGAIN)
			return 0;
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* A READ our NIC refused put the channel's QP in the error state; nothing
 * else says so (we post no work there). */
static int watch_channels(struct rdmig_source *s)
{
	int64_t now = rd_now_ms();
	unsigned k;

	if (now - s->pc.qp_check_ms < SRC_PC_QP_CHECK_MS)
		return 0;
	s->pc.qp_check_ms = now;
	for (k = s->nchans; k < s->nchans + s->npc; k++)
		if (fab_qp_broken(s->chans[k].conn))
			return rd_err_set(&s->ss.err, -EIO, "post-copy channel %u failed: the "
					  "destination's RDMA READ was refused (outside the memory "
					  "it may read?)", k - s->nchans);
	return 0;
}

/* Back in post-copy, whether the destination reads on or already holds
 * every page: the status and the log say so either way. */
static void resumed(struct rdmig_source *s, uint64_t left)
{
	src_set_state(s, SRC_POSTCOPY);
	s->pc.qp_check_ms = rd_now_ms();
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.status = RDMIG_STATUS_POSTCOPY;
	pthread_mutex_unlock(&s->ss.stats.lock);
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "post-copy resumed: the destination lacks %" PRIu64
		" pages", left);
}

/* Resuming: the post-copy channels came back, the destination reads on. */
static int resume_channels_step(struct rdmig_source *s)
{
	int rc;

	if (s->pc.resume != RS_CHANNELS)
		return 0;
	rc = src_chan_step(s);
	if (rc != SRC_LINK_UP)
		return rc == SRC_LINK_AGAIN ? 1 : rc;
	resumed(s, s->pc.left_at_resume);
	return 0;
}

int src_pc_step(struct rdmig_source *s, int64_t until_us)
{
	if (s->state == SRC_PC_SWITCH)
		return switch_step(s, until_us);
	if (s->state == SRC_PC_RESUMING)
		return resume_channels_step(s);
	return s->state == SRC_POSTCOPY ? watch_channels(s) : 0;
}

bool src_pc_may_pause(const struct rdmig_source *s, int rc)
{
	return (s->ss.caps & PD_CAP_POSTCOPY_RECOVER) && rc != -ECANCELED && !s->ss.peer_said &&
	       (s->state == SRC_POSTCOPY || s->state == SRC_PC_PAUSED ||
		s->state == SRC_PC_RESUMING);
}

int src_pc_on_error(struct rdmig_source *s, const Rdmig__Error *e)
{
	bool proved = !(s->ss.caps & PD_CAP_AUTH) || s->pc.resume >= RS_RESUME;
	const char *why = e->message ? e->message : "no reason given";

	if (!proved)
		return rd_err_set(&s->ss.err, -EACCES, "the peer sent ERROR before proving the "
				  "key (not taken as the destination's word): %s", why);
	if (e->code == -ECANCELED)
		return sess_peer_error(&s->ss, e);
	return rd_err_set(&s->ss.err, -ECONNABORTED, "the destination refused the resume: %s",
			  why);
}

int src_pc_peer_error(struct rdmig_source *s, const Rdmig__Error *e)
{
	/* Resuming, it ends this try, not the migration; its guest ran
	 * before the link broke, whatever it says now. */
	if (s->state == SRC_PC_RESUMING)
		return src_pc_on_error(s, e);
	/* Before SRC_MAP the peer has not proved the key: its word would be
	 * anyone's. */
	/* Nor after a pause: a resumed connection's guest ran before it,
	 * and whoever answered the resume has not said otherwise in a way
	 * the docs let it. */
	if (e->guest_never_ran && s->state >= SRC_MAP && s->state != SRC_PC_PAUSED &&
	    !s->pc.pauses)
		s->pc.peer_never_ran = true;
	return sess_peer_error(&s->ss, e);
}

int src_pc_send_resume(struct rdmig_source *s)
{
	Rdmig__PostcopyResume q = RDMIG__POSTCOPY_RESUME__INIT;

	q.pages = s->pc.pages;
	s->pc.resume = RS_RESUME;
	return sess_send(&s->ss, CT_POSTCOPY_RESUME, &q.base, "send POSTCOPY_RESUME");
}

int src_pc_on_resumed(struct rdmig_source *s, const ProtobufCMessage *m)
{
	const Rdmig__PostcopyResumed *a = (const Rdmig__PostcopyResumed *)m;
	int rc;

	if (s->state != SRC_PC_RESUMING || s->pc.resume != RS_RESUME)
		return rd_err_set(&s->ss.err, -EPROTO, "unexpected POSTCOPY_RESUMED");
	/* Checked on arrival: the three do not overflow. */
	if (a->pages_left + a->fault_pages + a->background_pages != s->pc.pages)
		return rd_err_set(&s->ss.err, -EPROTO, "POSTCOPY_RESUMED: %" PRIu64 " pages left, %"
				  PRIu64 " and %" PRIu64 " in, of a set of %" PRIu64,
				  a->pages_left, a->fault_pages, a->background_pages, s->pc.pages);
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "post-copy resuming: the destination lacks %"
		PRIu64 " of %" PRIu64 " pages", a->pages_left, s->pc.pages);
	if (!a->pages_left) {
		/* Every page is in (the last READs finished while paused):
		 * no channel comes back, POSTCOPY_DONE follows. */
		resumed(s, 0);
		return 0;
	}
	rc = src_chan_reopen_pc(s, a->channel_port, a->channel_token);
	if (rc)
		return rc;
	s->pc.left_at_resume = a->pages_left;
	s->pc.resume = RS_CHANNELS;
	return 0;
}

int src_pc_wait_ms(const struct rdmig_source *s)
{
	int64_t left;

	if (s->state != SRC_POSTCOPY)
		return -1;
	left = s->pc.qp_check_ms + SRC_PC_QP_CHECK_MS - rd_now_ms();
	return left < 0 ? 0 : (int)left;
}

static int on_done(struct rdmig_source *s, const Rdmig__PostcopyDone *m)
{
	int64_t took;

	if (s->state != SRC_POSTCOPY)
		return rd_err_set(&s->ss.err, -EPROTO, "unexpected POSTCOPY_DONE");
	if (m->pages != s->pc.pages)
		return rd_err_set(&s->ss.err, -EPROTO, "POSTCOPY_DONE counts %" PRIu64 " pages, "
				  "the set had %" PRIu64, m->pages, s->pc.pages);
	took = rd_now_ms() - s->pc.start_ms;
	revoke(s);
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.postcopy_fault_pages = m->fault_pages;
	s->ss.stats.st.postcopy_background_pages = m->background_pages;
	s->ss.stats.st.postcopy_ms = (uint64_t)took;
	pthread_mutex_unlock(&s->ss.stats.lock);
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "post-copy: every page is in after %" PRId64
		" ms (%" PRIu64 " read on faults, %" PRIu64 " in the background)", took,
		m->fault_pages, m->background_pages);
	return 1;
}

int src_pc_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	(void)h;
	return on_done(s, (const Rdmig__PostcopyDone *)m);
}

void src_pc_destroy(struct rdmig_source *s)
{
	struct src_pc *pc = &s->pc;
	uint64_t i;

	for (i = 0; pc->mr && i < pc->n; i++)
		if (pc->mr[i])
			ibv_dereg_mr(pc->mr[i]);
	free(pc->mr);
	free(pc->a32);
	free(pc->b32);
	free(pc->a64);
	free(pc->b64);
	free(pc->set);
	free(pc->npages);
	*pc = (struct src_pc){ .rp_shift = 0 };
}
