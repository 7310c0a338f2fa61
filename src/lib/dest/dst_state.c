#include "dst_state.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dst_int.h"
#include "privdata.h"

/* Ring bytes handed to the callback at once: a step's time is read
 * between calls, so a slow callback is cut at this granularity. */
#define RING_SLICE (256u << 10)

/* The state callback takes @len bytes at @data, unless they run past what
 * the source announced: the application may have reserved no more room
 * than that. */
static int deliver(struct rdmig_dest *d, const void *data, size_t len)
{
	char msg[RD_ERRLEN] = "";
	struct cfg_cb_frame f;
	int rc;

	if (d->state_max != RDMIG_STATE_UNSAID && len > d->state_max - d->state_bytes)
		return rd_err_set(&d->ss.err, -EPROTO, "the source sent more device state than "
				  "the %" PRIu64 " bytes it announced", d->state_max);
	cfg_cb_enter(&f, &d->ss.cfg);
	rc = d->ss.cfg.state(d->ss.cfg.state_ctx, data, len, msg, sizeof(msg));
	cfg_cb_leave(&f);
	if (rc)
		return rd_err_set(&d->ss.err, rc < 0 ? rc : -EIO, "the device state could not "
				  "be taken: %s", msg[0] ? msg : strerror(rc < 0 ? -rc : EIO));
	d->state_bytes += len;
	pthread_mutex_lock(&d->ss.stats.lock);
	d->ss.stats.st.state_bytes = d->state_bytes;
	pthread_mutex_unlock(&d->ss.stats.lock);
	return 0;
}

static int on_state(struct rdmig_dest *d, const Rdmig__State *st)
{
	if (!d->ss.cfg.state)
		return rd_err_set(&d->ss.err, -EPROTO, "the source sent device state but the "
				  "destination has no state sink");
	/* Paused: it waits in hand, and the frames behind it with it. */
	if (atomic_load(&d->state_paused)) {
		d->job = (struct dst_job){ .kind = JOB_STATE, .state = st };
		return 0;
	}
	return deliver(d, st->data.data, st->data.len);
}

/* STATE_WRITTEN: the bytes are in the ring already (the WRITE came before
 * this message on the same queue pair); where they start is where the
 * last ones ended.  Only their length comes from the source, and it must
 * not run past the ring's end: the callback never reads outside it. */
static int on_written(struct rdmig_dest *d, const Rdmig__StateWritten *w)
{
	struct dst_sring *r = &d->sring;
	uint64_t off = r->written & (DST_STATE_RING - 1);

	if (!d->ss.cfg.state)
		return rd_err_set(&d->ss.err, -EPROTO, "the source sent device state but the "
				  "destination has no state sink");
	if (!(d->ss.caps & PD_CAP_STATE_RING) || !r->announced)
		return rd_err_set(&d->ss.err, -EPROTO, "STATE_WRITTEN before this destination "
				  "offered its state ring");
	if (w->length > DST_STATE_RING - off)
		return rd_err_set(&d->ss.err, -EPROTO, "STATE_WRITTEN: %" PRIu32 " bytes at ring "
				  "offset %" PRIu64 " run past the ring's %u bytes", w->length,
				  off, DST_STATE_RING);
	r->written += w->length;
	d->job = (struct dst_job){ .kind = JOB_RING, .off = off, .ring_left = w->length };
	return 0;
}

int dst_state_msg(struct rdmig_dest *d, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	if (h->type == CT_STATE)
		return on_state(d, (const Rdmig__State *)m);
	return on_written(d, (const Rdmig__StateWritten *)m);
}

/* Ring bytes to the callback, a slice at a time until the time is up. */
static int ring_step(struct rdmig_dest *d, int64_t until_us)
{
	struct dst_job *j = &d->job;
	size_t n;
	int rc;

	while (j->ring_left) {
		/* The callback may pause the stream (it is full): the next
		 * slice waits, as a whole STATE would. */
		if (atomic_load(&d->state_paused))
			return DST_JOB_WAITING;
		n = j->ring_left < RING_SLICE ? j->ring_left : RING_SLICE;
		rc = deliver(d, d->sring.buf + j->off, n);
		if (rc)
			return rc;
		j->off += n;
		j->ring_left -= n;
		d->sring.taken += n;
		if (j->ring_left && rd_now_us() > until_us)
			return DST_JOB_CUT;
	}
	return DST_JOB_DONE;
}

int dst_state_step(struct rdmig_dest *d, int64_t until_us)
{
	int rc;

	if (atomic_load(&d->state_paused))
		return DST_JOB_WAITING;
	/* The source's silence is timed again from now: it had nowhere to
	 * send while we were not reading. */
	d->ss.ch.last_recv_ms = rd_now_ms();
	if (d->job.kind == JOB_RING)
		return ring_step(d, until_us);
	rc = deliver(d, d->job.state->data.data, d->job.state->data.len);
	return rc ? rc : DST_JOB_DONE;
}

static int ring_submit(struct rdmig_dest *d)
{
	struct dst_sring *r = &d->sring;
	int rc;

	rc = regq_submit(&d->rq, r->buf, DST_STATE_RING,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, -1,
			 DST_REG_COOKIE(DREG_RING, 0), &d->ss.err);
	r->submitted = rc == 0;
	/* The helpers' queue is full of pin-all pieces: the next step. */
	return rc == -EAGAIN ? 0 : rc;
}

int dst_state_ring_done(struct rdmig_dest *d, const struct regq_job *j)
{
	struct rd_err e;

	if (!j->rc) {
		d->sring.mr = j->mr;
		return 0;
	}
	/* Not fatal: without the ring, state comes in control messages
	 * (a tight RLIMIT_MEMLOCK must not fail a migration that carries
	 * none). */
	fab_reg_error(&e, j->rc, j->len);
	cfg_log(&d->ss.cfg, RDMIG_LOG_WARN, "device state will come in control messages: "
		"the state ring could not be registered: %s", e.msg);
	d->sring.failed = true;
	return 0;
}

int dst_state_ring_step(struct rdmig_dest *d)
{
	struct dst_sring *r = &d->sring;
	Rdmig__StateRing ring = RDMIG__STATE_RING__INIT;
	Rdmig__StateTaken t = RDMIG__STATE_TAKEN__INIT;
	int rc;

	if (!(d->ss.caps & PD_CAP_STATE_RING) || d->state != DST_RUNNING || r->failed)
		return 0;
	if (!r->submitted)
		return ring_submit(d);
	if (!r->mr || !ctrl_can_send(&d->ss.ch))
		return 0;
	if (!r->announced) {
		ring.addr = (uintptr_t)r->buf;
		ring.rkey = r->mr->rkey;
		ring.size = DST_STATE_RING;
		rc = ctrl_send(&d->ss.ch, CT_STATE_RING, &ring.base);
		r->announced = rc == 0;
		return rc == -EAGAIN ? 0 : rc;
	}
	if (r->taken == r->told)
		return 0;
	t.taken = r->taken;
	rc = ctrl_send(&d->ss.ch, CT_STATE_TAKEN, &t.base);
	if (!rc)
		r->told = r->taken;
	return rc == -EAGAIN ? 0 : rc;
}

int dst_state_init(struct rdmig_dest *d)
{
	void *p;

	if (!d->ss.cfg.state)
		return 0;
	/* Address space only (the helper's registration brings the pages). */
	p = mmap(NULL, DST_STATE_RING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return rd_err_set(&d->ss.err, -ENOMEM, "cannot map the %u-byte device-state "
				  "ring", DST_STATE_RING);
	d->sring.buf = p;
	return 0;
}

void dst_state_destroy(struct rdmig_dest *d)
{
	struct dst_sring *r = &d->sring;

	if (r->mr)
		ibv_dereg_mr(r->mr);
	if (r->buf)
		munmap(r->buf, DST_STATE_RING);
	*r = (struct dst_sring){ 0 };
}
