/* source: the sending side of a migration, as an explicit state machine;
 * its API.
 *
 * rdmig_source_process() runs one step of the driver (src_step.h) and
 * returns 1 once the operation the caller started (connect, iterate,
 * complete) is done.  The blocking calls are that in a poll() loop.  This
 * file starts the operations and checks what the caller may do when; what
 * each state does is in the files below (src_int.h lists them). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>

#include "rdmig.h"
#include "src_conv.h"
#include "src_end.h"
#include "src_int.h"
#include "src_iter.h"
#include "src_link.h"
#include "src_mem.h"
#include "src_pc.h"
#include "src_state.h"
#include "src_stats.h"
#include "src_step.h"

/* ---- lifetime ----------------------------------------------------------- */

int rdmig_source_create(struct rdmig_source **out, const struct rdmig_config *cfg)
{
	struct rdmig_source *s = calloc(1, sizeof(*s));
	int rc;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	src_mem_init(s);
	rc = sess_init(&s->ss, cfg, "destination");
	if (!rc && !s->ss.cfg.channels)
		s->ss.cfg.channels = 1;
	/* Here rather than in the first connection step, which must be short. */
	if (!rc)
		fab_warm_up();
	if (!rc)
		rc = src_state_init(s);
	pace_init(&s->pace, s->ss.cfg.max_bandwidth);
	src_conv_init(s);
	if (rc) {
		/* Report the configuration error through a half-made handle.
		 * Not through the setter: create calls nothing back. */
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

int rdmig_source_error_class(const struct rdmig_source *s)
{
	return s->state == SRC_FAILED ? sess_error_class(&s->ss, s->result) : RDMIG_ERROR_NONE;
}

int rdmig_source_guest_never_ran(const struct rdmig_source *s)
{
	return s && s->state == SRC_FAILED && s->pc.peer_never_ran;
}

int rdmig_source_fd(const struct rdmig_source *s)
{
	return s->ss.epfd;
}

void rdmig_source_destroy(struct rdmig_source *s)
{
	/* Kept for its PD after a post-copy pause: it goes last. */
	struct fab_conn *conn0 = s && s->conn0 != s->ss.conn ? s->conn0 : NULL;

	if (!s)
		return;
	/* The helper first: it may be registering, and what it registered and
	 * nobody reaped goes with it. */
	regq_fini(&s->rq);
	src_end_destroy(s);
	src_pc_destroy(s);
	src_state_destroy(s);
	src_iter_destroy(s);
	src_link_destroy(s);
	src_mem_destroy(s);
	sess_fini(&s->ss);
	fab_conn_destroy(conn0);
	free(s->dblocks);
	free(s);
}

/* ---- blocks and dirty pages ------------------------------------------------ */

int rdmig_source_add_block(struct rdmig_source *s, const char *name, void *host,
			   uint64_t length, uint32_t page_size)
{
	if (sess_reentered(&s->ss))
		return -EDEADLK;
	if (s->state != SRC_NEW)
		return rd_err_set(&s->ss.err, -EINVAL, "blocks must be added before connecting");
	return src_mem_add(s, name, host, length, page_size);
}

int rdmig_source_mark_dirty(struct rdmig_source *s, unsigned block, uint64_t offset,
			    uint64_t length)
{
	return src_mem_mark(s, block, offset, length);
}

int rdmig_source_mark_dirty_bitmap(struct rdmig_source *s, unsigned block,
				   const unsigned long *bitmap, uint64_t first_page,
				   uint64_t npages)
{
	return src_mem_mark_bitmap(s, block, bitmap, first_page, npages);
}

int rdmig_source_mark_all(struct rdmig_source *s)
{
	src_mem_mark_all(s);
	return 0;
}

/* ---- stepping ----------------------------------------------------------------- */

/* A step that leaves a finished operation for the caller to see. */
static int step_keep(struct rdmig_source *s)
{
	if (s->state == SRC_FAILED)
		return s->result;
	if (s->state == SRC_NEW)
		return 0;
	return src_step_report(s, s->ss.cfg.step_bytes, s->ss.cfg.step_us);
}

int rdmig_source_step(struct rdmig_source *s, uint64_t max_bytes, unsigned max_us)
{
	int rc;

	if (sess_reentered(&s->ss))
		return -EDEADLK;
	if (s->state == SRC_FAILED) {
		/* A late cancel must not leave the fd readable. */
		sess_woken(&s->ss);
		return s->result;
	}
	if (s->state == SRC_NEW) {
		sess_woken(&s->ss);
		return rd_err_set(&s->ss.err, -ENOTCONN, "not connected");
	}
	rc = src_step_report(s, max_bytes ? max_bytes : s->ss.cfg.step_bytes,
			     max_us ? max_us : s->ss.cfg.step_us);
	if (rc < 0 || s->goal != GOAL_REACHED)
		return rc;
	s->goal = GOAL_NONE;
	return 1;
}

int rdmig_source_process(struct rdmig_source *s)
{
	return rdmig_source_step(s, 0, 0);
}

int rdmig_source_timeout(const struct rdmig_source *s)
{
	/* A finished operation the caller has not seen yet. */
	if (s->goal == GOAL_REACHED && s->state != SRC_FAILED)
		return 0;
	return src_step_wait_ms(s);
}

/* ---- starting operations, and the blocking calls over them ----------------- */

static int start(struct rdmig_source *s, enum src_goal goal, enum src_state need)
{
	if (s->state == SRC_FAILED)
		return s->result;
	if (s->goal != GOAL_NONE && s->goal != GOAL_REACHED)
		return rd_err_set(&s->ss.err, -EBUSY, "another operation is in progress");
	if (s->state != need)
		return rd_err_set(&s->ss.err, need == SRC_READY ? -ENOTCONN : -EISCONN,
				  need == SRC_READY ? "not connected, or busy" :
				  "already connected");
	s->goal = goal;
	/* Nothing may make the fd readable before a step begins the work:
	 * the timeout says to call at once. */
	s->step_end = STEP_KICK;
	return 0;
}

/* An operation that could not start: the migration fails, unless nothing
 * was started (the caller's mistake leaves the handle as it was). */
static int start_failed(struct rdmig_source *s, int rc)
{
	return rc < 0 && s->goal != GOAL_NONE && s->goal != GOAL_REACHED &&
	       s->state != SRC_FAILED ? src_fail(s, rc) : rc;
}

int rdmig_source_connect_async(struct rdmig_source *s, const char *host, const char *port)
{
	int rc;

	/* From a callback: refused, and the migration goes on as it was. */
	if (sess_reentered(&s->ss))
		return -EDEADLK;
	rc = start(s, GOAL_CONNECTED, SRC_NEW);
	/* Whoever connects drives the handle from now on. */
	if (!rc)
		src_mem_set_driver(s);
	if (!rc && !s->nblocks)
		rc = rd_err_set(&s->ss.err, -EINVAL, "no RAM blocks were added");
	if (!rc)
		rc = src_link_prepare(s, host, port);
	/* Before anything pins (the rounds' set-up is its job). */
	if (!rc)
		rc = src_iter_setup_start(s);
	return start_failed(s, rc);
}

int rdmig_source_iterate_async(struct rdmig_source *s)
{
	int rc;

	if (sess_reentered(&s->ss))
		return -EDEADLK;
	rc = start(s, GOAL_ITERATED, SRC_READY);
	/* What was dirtied since the last round ended (the VMM sent device
	 * state meanwhile, say) goes into this one. */
	if (!rc)
		rc = src_mem_sync(s);
	if (!rc)
		rc = src_iter_begin(s);
	return start_failed(s, rc);
}

/* The last operation, with the guest paused: its log, once more, holds its
 * last pages; @begin completes or switches to post-copy with them. */
static int start_last(struct rdmig_source *s, int (*begin)(struct rdmig_source *s))
{
	int rc;

	if (sess_reentered(&s->ss))
		return -EDEADLK;
	rc = start(s, GOAL_COMPLETED, SRC_READY);
	if (!rc)
		rc = src_mem_sync(s);
	if (!rc)
		rc = begin(s);
	return rc;
}

int rdmig_source_complete_async(struct rdmig_source *s)
{
	int rc = start_last(s, src_end_begin);

	return rc == -EDEADLK ? rc : start_failed(s, rc);
}

int rdmig_source_postcopy_async(struct rdmig_source *s)
{
	int rc = start_last(s, src_pc_begin);

	/* A switch that cannot be made leaves the migration as it was: the
	 * VMM may complete instead, or resume its guest. */
	if ((rc == -ENOTSUP || rc == -EINVAL) && s->goal == GOAL_COMPLETED &&
	    s->state == SRC_READY) {
		s->goal = GOAL_NONE;
		s->step_end = STEP_IDLE;
		return rc;
	}
	return rc == -EDEADLK ? rc : start_failed(s, rc);
}

static int run(struct rdmig_source *s, int rc)
{
	struct pollfd pfd = { .fd = s->ss.epfd, .events = POLLIN };

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

int rdmig_source_postcopy(struct rdmig_source *s)
{
	return run(s, rdmig_source_postcopy_async(s));
}

ssize_t rdmig_source_write_state(struct rdmig_source *s, const void *data, size_t len)
{
	ssize_t n;

	if (sess_reentered(&s->ss))
		return -EDEADLK;
	if (s->state == SRC_FAILED)
		return s->result;
	n = src_state_write(s, data, len);
	s->state_blocked = n == 0 && len;
	/* A send that failed fails the migration; not being connected does
	 * not. */
	return n < 0 && n != -ENOTCONN ? src_fail(s, (int)n) : n;
}

int rdmig_source_send_state(struct rdmig_source *s, const void *data, size_t len)
{
	struct pollfd pfd = { .fd = s->ss.epfd, .events = POLLIN };
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
			poll(&pfd, 1, src_step_wait_ms(s));
		}
	}
	return 0;
}

int rdmig_source_poll(struct rdmig_source *s)
{
	if (sess_reentered(&s->ss))
		return -EDEADLK;
	return step_keep(s);
}

int rdmig_source_advice(struct rdmig_source *s, struct rdmig_advice *a)
{
	if (sess_reentered(&s->ss))
		return -EDEADLK;
	if (s->state == SRC_FAILED)
		return s->result;
	if (s->state < SRC_READY)
		return rd_err_set(&s->ss.err, -ENOTCONN, "not connected");
	if (s->state != SRC_READY || (s->goal != GOAL_NONE && s->goal != GOAL_REACHED))
		return rd_err_set(&s->ss.err, -EBUSY, "advice comes between operations, after an "
				  "iteration");
	return src_conv_advice(s, a);
}

void rdmig_source_set_max_bandwidth(struct rdmig_source *s, uint64_t bytes_per_s)
{
	pace_set(&s->pace, bytes_per_s);
	/* A loop asleep for the old limit looks again. */
	sess_wake(&s->ss);
}

int rdmig_source_set_limit(struct rdmig_source *s, enum rdmig_limit limit, uint64_t value)
{
	int rc = src_conv_set_limit(s, (unsigned)limit, value);

	/* The statistics' expected downtime reads it at the next step. */
	if (!rc)
		sess_wake(&s->ss);
	return rc;
}

void rdmig_source_cancel(struct rdmig_source *s)
{
	sess_cancel(&s->ss, NULL);
}

/* ---- statistics ------------------------------------------------------------- */

void rdmig_source_stats(struct rdmig_source *s, struct rdmig_stats *st)
{
	struct rdmig_stats all;

	src_stats_fill(s, &all);
	sess_stats_out(&all, st);
}
