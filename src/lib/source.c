/* source: the sending side of a migration, as an explicit state machine.
 *
 * rdmig_source_process() handles what is pending (CM events, completions,
 * control messages, up to a bound: drain_cq), then advances the state it is
 * in within a bounded step, and returns 1 once the operation the caller started (connect,
 * iterate, complete) is done.  The blocking calls are that in a poll()
 * loop.  Connecting, authenticating, the block map, data channels and
 * pin-all pieces are src_link.c's; iterations, state and completion are
 * src_iter.c's; the WRITE pipeline (wpipe) and dynamic registration (dreg)
 * are modules of their own. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "bitmap.h"
#include "codec.h"
#include "privdata.h"
#include "rdmig.h"
#include "source.h"

/* ---- lifetime ----------------------------------------------------------- */

int rdmig_source_create(struct rdmig_source **out, const struct rdmig_config *cfg)
{
	struct rdmig_source *s = calloc(1, sizeof(*s));
	int rc;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->epfd = -1;
	rc = sess_init(&s->ss, cfg, "destination");
	if (!rc && !s->ss.cfg.channels)
		s->ss.cfg.channels = 1;
	s->chunk_shift = cfg_chunk_shift(&s->ss.cfg);
	atomic_store(&s->max_bandwidth, s->ss.cfg.max_bandwidth);
	if (!rc) {
		s->epfd = epoll_create1(EPOLL_CLOEXEC);
		rc = s->epfd < 0 ? rd_err_set(&s->ss.err, -errno, "epoll_create1: %s",
					      strerror(errno)) : src_watch(s, s->ss.wake_fd);
	}
	if (rc) {
		/* Report the configuration error through a half-made handle. */
		s->state = SRC_FAILED;
		s->result = rc;
	}
	*out = s;
	return rc;
}

const char *rdmig_source_error(const struct rdmig_source *s)
{
	/* Creation reports its failure through the handle, except for ENOMEM. */
	return s ? s->ss.err.msg : "out of memory";
}

int src_watch(struct rdmig_source *s, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) && errno != EEXIST)
		return rd_err_set(&s->ss.err, -errno, "epoll_ctl: %s", strerror(errno));
	return 0;
}

/* In a final state nothing more needs the connections' events: a caller
 * still watching the fd until it destroys the handle must not spin. */
void src_unwatch(struct rdmig_source *s)
{
	unsigned k;

	if (!s->ss.conn)
		return;
	if (fab_cq_fd(s->ss.conn) >= 0)
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, fab_cq_fd(s->ss.conn), NULL);
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, fab_cm_fd(s->ss.conn), NULL);
	for (k = 1; s->chans && k < s->nchans; k++)
		if (s->chans[k].conn)
			epoll_ctl(s->epfd, EPOLL_CTL_DEL, fab_cm_fd(s->chans[k].conn), NULL);
}

int rdmig_source_fd(const struct rdmig_source *s)
{
	return s->epfd;
}

void rdmig_source_destroy(struct rdmig_source *s)
{
	unsigned i;

	if (!s)
		return;
	src_iter_destroy(s);
	src_link_destroy(s);
	for (i = 0; i < s->nblocks; i++) {
		bm_free(s->blocks[i].dirty);
		bm_free(s->blocks[i].sending);
		bm_free(s->blocks[i].written);
	}
	sess_fini(&s->ss);
	if (s->epfd >= 0)
		close(s->epfd);
	free(s->blocks);
	free(s->dblocks);
	free(s);
}

/* ---- blocks and dirty pages ------------------------------------------------ */

/* Whether [host, host + len) lies in private (copy-on-write) mappings: such
 * memory is pinned with write access, which breaks copy-on-write at pin
 * time; a read-only pin of a never-written private page could hold the
 * shared zero page on kernels before 5.19/6.0, and later writes would never
 * reach the migration.  Shared memory is pinned read-only, so pinning does
 * not mark its pages written (soft-dirty tracking would see every pinned
 * chunk as dirty again). */
static bool private_memory(const void *host, uint64_t len)
{
	uintptr_t lo = (uintptr_t)host, hi = lo + len;
	unsigned long start, end;
	char perms[8], line[512];
	bool priv = false;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return true; /* write access is the safe choice */
	while (!priv && fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && start < hi &&
		    end > lo)
			priv = perms[3] == 'p';
	fclose(f);
	return priv;
}

static int check_block(struct rdmig_source *s, const char *name, void *host,
		       uint64_t length, uint32_t page_size)
{
	unsigned i;
	int rc = blk_name_valid(name, &s->ss.err);

	if (rc)
		return rc;
	if (!host || !length || length > (1ull << 50))
		return rd_err_set(&s->ss.err, -EINVAL, "block \"%s\": bad address or length %"
				  PRIu64, name, length);
	if (!rd_is_pow2(page_size) || page_size < 4096 || page_size > (1u << 30))
		return rd_err_set(&s->ss.err, -EINVAL, "block \"%s\": page size %u must be a "
				  "power of two from 4096 to 1 GiB", name, page_size);
	if (s->nblocks >= BLK_MAX)
		return rd_err_set(&s->ss.err, -E2BIG, "too many blocks (limit %d)", BLK_MAX);
	for (i = 0; i < s->nblocks; i++)
		if (!strcmp(s->blocks[i].d.name, name))
			return rd_err_set(&s->ss.err, -EEXIST, "block \"%s\" added twice", name);
	return 0;
}

int rdmig_source_add_block(struct rdmig_source *s, const char *name, void *host,
			   uint64_t length, uint32_t page_size)
{
	struct src_block *b, *nb;
	int rc;

	if (s->state != SRC_NEW)
		return rd_err_set(&s->ss.err, -EINVAL, "blocks must be added before connecting");
	if (!page_size)
		page_size = CFG_PAGE_SIZE;
	rc = check_block(s, name, host, length, page_size);
	if (rc)
		return rc;
	nb = realloc(s->blocks, (s->nblocks + 1) * sizeof(*nb));
	if (!nb)
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	s->blocks = nb;
	b = &s->blocks[s->nblocks];
	memset(b, 0, sizeof(*b));
	snprintf(b->d.name, sizeof(b->d.name), "%s", name);
	b->d.length = length;
	b->d.page_size = page_size;
	b->host = host;
	b->npages = blk_npages(length, page_size);
	b->cow = private_memory(host, length);
	b->dirty = bm_alloc(b->npages);
	b->sending = bm_alloc(b->npages);
	b->written = bm_alloc(b->npages);
	if (!b->dirty || !b->sending || !b->written) {
		bm_free(b->dirty);
		bm_free(b->sending);
		bm_free(b->written);
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory for the dirty bitmaps");
	}
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.total += length;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return (int)s->nblocks++;
}

static void mark_pages(struct rdmig_source *s, struct src_block *b, uint64_t first,
		       uint64_t n)
{
	uint64_t fresh = n - bm_count_range(b->dirty, first, n);

	bm_set_range(b->dirty, first, n);
	s->dirty_bytes += fresh * b->d.page_size;
	s->marked_since += fresh * b->d.page_size;
}

int rdmig_source_mark_dirty(struct rdmig_source *s, unsigned block, uint64_t offset,
			    uint64_t length)
{
	struct src_block *b;
	uint64_t first, end;

	if (block >= s->nblocks)
		return rd_err_set(&s->ss.err, -EINVAL, "block index %u out of range", block);
	b = &s->blocks[block];
	if (!length)
		return 0;
	if (rd_add_overflow_u64(offset, length, &end) || end > b->d.length)
		return rd_err_set(&s->ss.err, -ERANGE, "block \"%s\": range %" PRIu64 "+%"
				  PRIu64 " is outside its %" PRIu64 " bytes", b->d.name, offset,
				  length, b->d.length);
	first = offset / b->d.page_size;
	mark_pages(s, b, first, (end - 1) / b->d.page_size - first + 1);
	return 0;
}

int rdmig_source_mark_dirty_bitmap(struct rdmig_source *s, unsigned block,
				   const unsigned long *bitmap, uint64_t first_page,
				   uint64_t npages)
{
	const unsigned bits = sizeof(unsigned long) * 8;
	struct src_block *b;
	uint64_t i, end;

	if (block >= s->nblocks)
		return rd_err_set(&s->ss.err, -EINVAL, "block index %u out of range", block);
	b = &s->blocks[block];
	if (rd_add_overflow_u64(first_page, npages, &end) || end > b->npages)
		return rd_err_set(&s->ss.err, -ERANGE, "block \"%s\": pages %" PRIu64 "+%"
				  PRIu64 " are outside its %" PRIu64 " pages", b->d.name,
				  first_page, npages, b->npages);
	/* Word at a time, run by run: a clean word costs one test. */
	for (i = 0; i < npages; ) {
		unsigned long w = bitmap[i / bits] >> (i % bits);
		uint64_t left = bits - i % bits, skip, run;

		if (left > npages - i)
			left = npages - i;
		if (!w) {
			i += left;
			continue;
		}
		skip = (uint64_t)__builtin_ctzl(w);
		if (skip >= left) {
			i += left;
			continue;
		}
		w >>= skip;
		run = ~w ? (uint64_t)__builtin_ctzl(~w) : bits;
		if (run > left - skip)
			run = left - skip;
		mark_pages(s, b, first_page + i + skip, run);
		i += skip + run;
	}
	return 0;
}

int rdmig_source_mark_all(struct rdmig_source *s)
{
	unsigned i;

	for (i = 0; i < s->nblocks; i++)
		mark_pages(s, &s->blocks[i], 0, s->blocks[i].npages);
	return 0;
}

/* ---- failing ------------------------------------------------------------- */

int src_fail(struct rdmig_source *s, int rc)
{
	unsigned k;

	if (s->state == SRC_FAILED)
		return s->result;
	s->state = SRC_FAILED;
	s->goal_done = false;
	s->result = sess_fail(&s->ss, rc);
	/* No thread may post on the channels from here on, nor register. */
	src_iter_stop_threads(s);
	rp_stop(&s->reg);
	for (k = 1; s->chans && k < s->nchans; k++)
		fab_disconnect(s->chans[k].conn);
	src_unwatch(s);
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.status = s->result == -ECANCELED ? RDMIG_STATUS_CANCELLED :
				RDMIG_STATUS_FAILED;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return s->result;
}

/* ---- one step ------------------------------------------------------------ */

static int handle_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	switch (h->type) {
	case CT_CREDIT:
	case CT_KEEPALIVE:
		return 0;
	case CT_ERROR:
		return sess_peer_error(&s->ss, (const Rdmig__Error *)m);
	case CT_PIN_KEYS:
		return src_on_pin_keys(s, (const Rdmig__PinKeys *)m);
	case CT_AUTH_RESPONSE:
	case CT_BLOCK_MAP_RESP:
		return src_link_msg(s, h, m);
	default:
		return src_iter_msg(s, h, m);
	}
}

static int handle_wc(struct rdmig_source *s, const struct ibv_wc *wc)
{
	struct ctrl_hdr h;
	ProtobufCMessage *m;
	int rc;

	s->last_wc_ms = rd_now_ms();
	/* Confirmed: our disconnect flushes what was still posted. */
	if (s->state == SRC_COMPLETED)
		return 0;
	if (!ctrl_owns(wc))
		return src_write_done(s, wc);
	rc = ctrl_complete(&s->ss.ch, wc, &h, &m);
	if (rc <= 0)
		return rc;
	rc = handle_msg(s, &h, m);
	ctrl_msg_done(&s->ss.ch, m);
	return rc;
}

/* Completions one step handles at most: a ring's worth of the
 * destination's messages and the WRITE completions of several windows.  A
 * destination that keeps the CQ from emptying must not keep the caller's
 * loop; the rest waits for the next step, at once (the timeout is 0).  See
 * rdmig(3), "Bounded steps". */
#define SRC_STEP_WCS 256

/* Completions until the CQ is empty (then re-armed for the fd), or
 * SRC_STEP_WCS of them, or the step's time is up after a batch:
 * s->cq_more says which. */
static int drain_cq(struct rdmig_source *s, int64_t until)
{
	struct ibv_wc wc[32];
	unsigned done = 0, want;
	int n, i, rc;

	s->cq_more = false;
	if (!s->ss.conn || !s->ss.conn->cq)
		return 0;
	for (;;) {
		if (done == SRC_STEP_WCS || (done && rd_now_us() > until)) {
			s->cq_more = true;
			return 0;
		}
		/* Never more than the cap leaves room for: what is polled is
		 * handled now. */
		want = SRC_STEP_WCS - done < RD_ARRAY_SIZE(wc) ? SRC_STEP_WCS - done :
		       (unsigned)RD_ARRAY_SIZE(wc);
		n = fab_poll(s->ss.conn, wc, (int)want);
		if (n == 0) {
			rc = fab_cq_rearm(s->ss.conn);
			if (rc)
				return sess_conn_err(&s->ss, rc);
			n = fab_poll(s->ss.conn, wc, (int)want);
			if (n == 0)
				return 0;
		}
		if (n < 0)
			return sess_conn_err(&s->ss, n);
		for (i = 0; i < n; i++) {
			rc = handle_wc(s, &wc[i]);
			if (rc < 0)
				return rc;
		}
		done += (unsigned)n;
	}
}

/* Connection events once connected: a disconnect is reported only after
 * the CQ drained, since the peer's last message (an ERROR) may be there. */
static int cm_events(struct rdmig_source *s)
{
	int rc = 0, r, i;
	unsigned k;

	if (s->state <= SRC_CONNECTING || s->state >= SRC_COMPLETED)
		return 0;
	for (i = 0; i < 4 && !rc; i++)
		rc = fab_cm_process(s->ss.conn);
	for (k = 1; s->chans && k < s->nchans; k++)
		if (s->chans[k].up && (r = fab_cm_process(s->chans[k].conn)) && !rc)
			rc = rd_err_prefix(&s->chans[k].conn->err, r, "data channel %u", k);
	return rc;
}

/* Only the destination's own messages prove it alive: the NIC (or rxe in
 * the kernel) completes WRITEs into a process that is frozen or hung, and
 * the destination sends keepalives while it has nothing else to say. */
static int check_silence(struct rdmig_source *s)
{
	if (s->state < SRC_AUTH || s->state >= SRC_COMPLETED)
		return 0;
	if (rd_now_ms() - s->ss.ch.last_recv_ms <= s->ss.cfg.timeout_ms)
		return 0;
	return rd_err_set(&s->ss.err, -ETIMEDOUT, "the destination did not respond within "
			  "%d ms", s->ss.cfg.timeout_ms);
}

static bool goal_reached(const struct rdmig_source *s)
{
	switch (s->goal) {
	case GOAL_CONNECTED:
	case GOAL_ITERATED:
		return s->state == SRC_READY;
	case GOAL_COMPLETED:
		return s->state == SRC_COMPLETED;
	default:
		return false;
	}
}

static int advance(struct rdmig_source *s, uint64_t max_bytes, int64_t until)
{
	switch (s->state) {
	case SRC_CONNECTING:
	case SRC_AUTH:
	case SRC_MAP:
	case SRC_CHANNELS:
		return src_link_step(s);
	case SRC_ITERATING:
		return src_iter_step(s, max_bytes, until);
	case SRC_COMPLETING:
		return src_complete_step(s, until);
	default:
		return 0;
	}
}

static int step(struct rdmig_source *s, uint64_t max_bytes, unsigned max_us)
{
	int64_t until = rd_now_us() + max_us;
	uint64_t buf;
	int rc, cm;

	if (read(s->ss.wake_fd, &buf, sizeof(buf)) < 0) {
		/* Nothing to read: not cancelled. */
	}
	/* Completions first: a COMPLETE_ACK already here decides the outcome,
	 * whatever a cancel says.  Once COMPLETE went, the destination may be
	 * running the guest already: the cancel waits for its answer (bounded
	 * by the silence timeout) instead of contradicting it. */
	cm = cm_events(s);
	if (cm && !s->cm_rc)
		s->cm_rc = cm;
	rc = drain_cq(s, until);
	if (!rc && s->state != SRC_COMPLETED &&
	    !(s->state == SRC_COMPLETING && s->complete_sent))
		rc = sess_check_cancel(&s->ss);
	/* The destination disconnects once its confirmation went out: the
	 * completions before the event are handled first, over as many
	 * steps as that takes. */
	cm = s->cq_more ? 0 : s->cm_rc;
	if (!rc && cm && s->state != SRC_COMPLETED)
		rc = cm == -ECONNRESET ? rd_err_set(&s->ss.err, cm, "the destination disconnected") :
		     sess_conn_err(&s->ss, cm);
	if (!rc)
		rc = advance(s, max_bytes, until);
	if (!rc && s->state > SRC_CONNECTING)
		rc = src_pin_step(s, until);
	if (!rc && s->ss.ctrl_ready && s->state > SRC_CONNECTING && s->state < SRC_COMPLETED)
		rc = ctrl_return_credits(&s->ss.ch, false);
	if (!rc && s->state > SRC_CONNECTING && s->state < SRC_COMPLETED)
		rc = sess_keepalive(&s->ss);
	if (!rc)
		rc = check_silence(s);
	if (rc < 0)
		return src_fail(s, rc);
	src_publish(s);
	sess_progress(&s->ss, &s->last_progress_ms, false, src_fill_stats, s);
	if (!goal_reached(s))
		return 0;
	/* Latched until the caller's own process call sees it: an internal
	 * one (send_state, poll) must not swallow it. */
	s->goal = GOAL_NONE;
	s->goal_done = true;
	return 1;
}

/* A step that leaves a finished operation for the caller to see. */
static int step_keep(struct rdmig_source *s)
{
	if (s->state == SRC_FAILED)
		return s->result;
	if (s->state == SRC_NEW)
		return 0;
	return step(s, s->ss.cfg.step_bytes, s->ss.cfg.step_us) < 0 ? s->result : 0;
}

int rdmig_source_step(struct rdmig_source *s, uint64_t max_bytes, unsigned max_us)
{
	uint64_t buf;

	if (s->state == SRC_FAILED) {
		/* A late cancel must not leave the fd readable. */
		if (read(s->ss.wake_fd, &buf, sizeof(buf)) < 0) {
			/* nothing was pending */
		}
		return s->result;
	}
	if (s->state == SRC_NEW)
		return rd_err_set(&s->ss.err, -ENOTCONN, "not connected");
	if (step(s, max_bytes ? max_bytes : s->ss.cfg.step_bytes,
		 max_us ? max_us : s->ss.cfg.step_us) < 0)
		return s->result;
	if (!s->goal_done)
		return 0;
	s->goal_done = false;
	return 1;
}

int rdmig_source_process(struct rdmig_source *s)
{
	return rdmig_source_step(s, 0, 0);
}

/* How long the library can wait for its fd; internal loops (send_state)
 * ignore the latch of a finished operation, which is the caller's to see. */
static int wait_ms(const struct rdmig_source *s)
{
	int64_t now = rd_now_ms(), t = 1000;
	int wait = -1;

	if (s->state == SRC_NEW || s->state >= SRC_COMPLETED)
		return -1;
	/* Completions left in the CQ by a step at its cap. */
	if (s->cq_more)
		return 0;
	/* Pin-all pieces to take (or the helpers to start); they write the
	 * wake fd for the pieces still to come. */
	if (src_pin_ready(s))
		return 0;
	if (s->state == SRC_ITERATING)
		wait = src_pacing_wait(s);
	/* The last step ran out of budget with work left. */
	if (wait <= 0 && s->more && (s->state == SRC_ITERATING || s->state == SRC_COMPLETING))
		return 0;
	if (wait > 0 && wait < t)
		t = wait;
	/* Keepalives start once connected, and one that has no credit to go
	 * waits for the fd (credits come back as completions). */
	if (s->ss.ctrl_ready && s->state > SRC_CONNECTING && ctrl_can_send(&s->ss.ch) &&
	    s->ss.ch.last_send_ms + s->ss.cfg.keepalive_ms - now < t)
		t = s->ss.ch.last_send_ms + s->ss.cfg.keepalive_ms - now;
	return t < 0 ? 0 : (int)t;
}

int rdmig_source_timeout(const struct rdmig_source *s)
{
	/* A finished operation the caller has not seen yet. */
	if (s->goal_done && s->state != SRC_FAILED)
		return 0;
	return wait_ms(s);
}

/* ---- starting operations, and the blocking calls over them ----------------- */

static int start(struct rdmig_source *s, enum src_goal goal, enum src_state need)
{
	if (s->state == SRC_FAILED)
		return s->result;
	if (s->goal != GOAL_NONE)
		return rd_err_set(&s->ss.err, -EBUSY, "another operation is in progress");
	if (s->state != need)
		return rd_err_set(&s->ss.err, need == SRC_READY ? -ENOTCONN : -EISCONN,
				  need == SRC_READY ? "not connected, or busy" :
				  "already connected");
	s->goal = goal;
	s->goal_done = false;
	return 0;
}

int rdmig_source_connect_async(struct rdmig_source *s, const char *host, const char *port)
{
	int rc = start(s, GOAL_CONNECTED, SRC_NEW);

	if (!rc && !s->nblocks)
		rc = rd_err_set(&s->ss.err, -EINVAL, "no RAM blocks were added");
	if (!rc)
		rc = src_link_start(s, host, port);
	if (rc && s->state != SRC_FAILED && s->goal != GOAL_NONE)
		return src_fail(s, rc);
	return rc;
}

int rdmig_source_iterate_async(struct rdmig_source *s)
{
	int rc = start(s, GOAL_ITERATED, SRC_READY);

	if (!rc)
		rc = src_iter_begin(s);
	return rc < 0 && s->goal != GOAL_NONE ? src_fail(s, rc) : rc;
}

int rdmig_source_complete_async(struct rdmig_source *s)
{
	int rc = start(s, GOAL_COMPLETED, SRC_READY);

	if (!rc)
		rc = src_complete_begin(s);
	return rc < 0 && s->goal != GOAL_NONE ? src_fail(s, rc) : rc;
}

static int run(struct rdmig_source *s, int rc)
{
	struct pollfd pfd = { .fd = s->epfd, .events = POLLIN };

	while (!rc) {
		rc = rdmig_source_process(s);
		if (!rc)
			poll(&pfd, 1, rdmig_source_timeout(s));
	}
	return rc > 0 ? 0 : rc;
}

int rdmig_source_connect(struct rdmig_source *s, const char *host, const char *port)
{
	return run(s, rdmig_source_connect_async(s, host, port));
}

int rdmig_source_iterate(struct rdmig_source *s)
{
	return run(s, rdmig_source_iterate_async(s));
}

int rdmig_source_complete(struct rdmig_source *s)
{
	return run(s, rdmig_source_complete_async(s));
}

int rdmig_source_send_state(struct rdmig_source *s, const void *data, size_t len)
{
	struct pollfd pfd = { .fd = s->epfd, .events = POLLIN };
	ssize_t n;
	int rc;

	while (len) {
		n = rdmig_source_write_state(s, data, len);
		if (n < 0)
			return (int)n;
		data = (const uint8_t *)data + n;
		len -= (size_t)n;
		if (!n) {
			rc = step_keep(s);
			if (rc < 0)
				return rc;
			poll(&pfd, 1, wait_ms(s));
		}
	}
	return 0;
}

int rdmig_source_poll(struct rdmig_source *s)
{
	return step_keep(s);
}

void rdmig_source_set_max_bandwidth(struct rdmig_source *s, uint64_t bytes_per_s)
{
	atomic_store(&s->max_bandwidth, bytes_per_s);
}

void rdmig_source_cancel(struct rdmig_source *s)
{
	sess_cancel(&s->ss, NULL);
}

/* ---- statistics ------------------------------------------------------------- */

/* The driving thread's counters, into the box other threads read. */
void src_publish(struct rdmig_source *s)
{
	struct stats_box *b = &s->ss.stats;
	uint64_t bw = s->last_iter_ms ? s->last_iter_bytes * 1000 / s->last_iter_ms : 0;

	pthread_mutex_lock(&b->lock);
	if (s->dreg_ready) {
		b->st.pinned_bytes = s->dreg.creg.pinned_bytes;
		b->st.pinned_peak = s->dreg.creg.peak_bytes;
		b->st.register_requests = s->dreg.requests;
		b->st.chunks_registered = s->dreg.chunks;
	}
	b->st.ctrl_sent = s->ss.ch.sent;
	b->st.ctrl_received = s->ss.ch.received;
	b->st.remaining = s->dirty_bytes + (s->sweep.planned_bytes > s->iter_bytes ?
					    s->sweep.planned_bytes - s->iter_bytes : 0);
	b->st.expected_downtime_ms = bw ? b->st.remaining * 1000 / bw : 0;
	b->st.dirty_rate = s->dirty_rate;
	b->st.first_write_ms = s->first_write_ms > 0 && b->start_ms ?
			       (uint64_t)(s->first_write_ms - b->start_ms) : 0;
	s->ctrl_bytes_seen = s->ss.ch.bytes_sent;
	b->ctrl_bytes = s->ctrl_bytes_seen;
	pthread_mutex_unlock(&b->lock);
}

void src_fill_stats(void *role, struct rdmig_stats *st)
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

void rdmig_source_stats(struct rdmig_source *s, struct rdmig_stats *st)
{
	struct rdmig_stats all;

	src_fill_stats(s, &all);
	sess_stats_out(&all, st);
}
