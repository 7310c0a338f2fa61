#include "src_end.h"

#include <errno.h>
#include <stdlib.h>

#include "privdata.h"
#include "src_conv.h"
#include "src_int.h"
#include "src_iter.h"
#include "src_mem.h"

/* Bytes hashed per slice for VERIFY at most, and at least: a slice is what
 * fits the step's time left at the learned price. */
#define DIGEST_STEP (1u << 20)
#define DIGEST_MIN (64u << 10)

/* Pages marked after the last round began to be sent: the guest still
 * runs, or its dirty log was not all taken before completing. */
static int still_dirty(struct rdmig_source *s, uint64_t bytes, const char *when)
{
	return rd_err_set(&s->ss.err, -EBUSY, "%llu bytes were marked dirty %s: pause the "
			  "guest, and take the last of its dirty log, before completing",
			  (unsigned long long)bytes, when);
}

/* The image is final: hash it (VERIFY), then COMPLETE. */
static int begin_hashing(struct rdmig_source *s)
{
	/* Every WRITE went and completed with the last round: the posting
	 * and zero-check threads are done. */
	src_iter_stop_threads(s);
	/* XXH3 runs at memory speed natively, about 3 ns a byte emulated. */
	cost_init(&s->hash_cost, 3.0);
	src_set_state(s, SRC_HASHING);
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.status = RDMIG_STATUS_COMPLETING;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return 0;
}

int src_end_begin(struct rdmig_source *s)
{
	uint64_t sw_bw = src_conv_switchover_bw(s);

	/* The guest is paused: its last pages go at the bandwidth granted to
	 * the switch-over, as the policy predicted them. */
	if (sw_bw)
		pace_set(&s->pace, sw_bw);
	/* Success must mean the destination holds every page as of the
	 * pause: what was marked since the last round goes first. */
	if (src_mem_dirty_bytes(s))
		return src_iter_begin(s);
	return begin_hashing(s);
}

int src_end_final_done(struct rdmig_source *s)
{
	uint64_t more = src_mem_dirty_bytes(s);

	return more ? still_dirty(s, more, "during the final round of completion") :
	       begin_hashing(s);
}

/* VERIFY: one digest per block of the final image, @max bytes (at most
 * DIGEST_STEP) per call; 1 once all are done. */
static int digest_step(struct rdmig_source *s, uint64_t max)
{
	const struct src_block *b;
	int64_t t0 = rd_now_us();
	uint64_t n;

	if (!(s->ss.caps & PD_CAP_VERIFY) || s->dig_block == s->nblocks)
		return 1;
	if (!s->digests && !(s->digests = calloc(s->nblocks, DIGEST_LEN)))
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	if (!s->dig && !(s->dig = auth_digest_begin()))
		return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
	b = &s->blocks[s->dig_block];
	n = b->d.length - s->dig_off < max ? b->d.length - s->dig_off : max;
	auth_digest_more(s->dig, b->host + s->dig_off, n);
	cost_learn(&s->hash_cost, n, (rd_now_us() - t0) * 1000);
	s->dig_off += n;
	if (s->dig_off == b->d.length) {
		auth_digest_end(s->dig, s->digests + (size_t)s->dig_block * DIGEST_LEN);
		s->dig = NULL;
		s->dig_block++;
		s->dig_off = 0;
	}
	return s->dig_block == s->nblocks;
}

static int send_complete(struct rdmig_source *s)
{
	Rdmig__Complete c = RDMIG__COMPLETE__INIT;
	ProtobufCBinaryData *d = NULL;
	uint64_t more;
	unsigned i;
	int rc;

	if (!ctrl_can_send(&s->ss.ch))
		return 0;
	/* Marked from another thread since the final round ended. */
	more = src_mem_dirty_bytes(s);
	if (more)
		return still_dirty(s, more, "while completing, after the final round");
	pthread_mutex_lock(&s->ss.stats.lock);
	c.state_bytes = s->ss.stats.st.state_bytes;
	pthread_mutex_unlock(&s->ss.stats.lock);
	c.iteration = s->iteration;
	if (s->digests) {
		d = calloc(s->nblocks, sizeof(*d));
		if (!d)
			return rd_err_set(&s->ss.err, -ENOMEM, "out of memory");
		for (i = 0; i < s->nblocks; i++)
			d[i] = (ProtobufCBinaryData){ DIGEST_LEN, s->digests + i * DIGEST_LEN };
		c.digests = d;
		c.n_digests = s->nblocks;
	}
	rc = ctrl_send(&s->ss.ch, CT_COMPLETE, &c.base);
	free(d);
	if (rc == -EAGAIN)
		return 0;
	if (!rc)
		src_set_state(s, SRC_COMPLETING);
	return rc;
}

int src_end_step(struct rdmig_source *s, int64_t until)
{
	uint64_t slice;
	int rc = 0, first = 1;

	for (;;) {
		slice = cost_bytes(&s->hash_cost, until - rd_now_us(), DIGEST_STEP);
		if (slice < DIGEST_MIN) {
			if (!first)
				break;
			slice = DIGEST_MIN;
		}
		first = 0;
		rc = digest_step(s, slice);
		if (rc)
			break;
	}
	/* Out of time with digests left: come back at once. */
	if (rc == 0)
		return 1;
	return rc < 0 ? rc : send_complete(s);
}

static int on_complete_ack(struct rdmig_source *s, const Rdmig__CompleteAck *a)
{
	if (s->state != SRC_COMPLETING)
		return rd_err_set(&s->ss.err, -EPROTO, "unexpected COMPLETE_ACK");
	if (!a->ok)
		return rd_err_set(&s->ss.err, -EIO, "the destination did not accept the image");
	/* The driver tears the connections down: whatever we still had
	 * queued cannot change the outcome. */
	src_set_state(s, SRC_COMPLETED);
	pthread_mutex_lock(&s->ss.stats.lock);
	stats_refresh(&s->ss.stats);
	s->ss.stats.st.status = RDMIG_STATUS_COMPLETED;
	pthread_mutex_unlock(&s->ss.stats.lock);
	cfg_log(&s->ss.cfg, RDMIG_LOG_INFO, "migration completed after %u iterations",
		s->iteration);
	return 0;
}

int src_end_msg(struct rdmig_source *s, const struct ctrl_hdr *h, ProtobufCMessage *m)
{
	(void)h;
	return on_complete_ack(s, (const Rdmig__CompleteAck *)m);
}

void src_end_destroy(struct rdmig_source *s)
{
	if (s->dig) {
		uint8_t junk[DIGEST_LEN];

		auth_digest_end(s->dig, junk);
		s->dig = NULL;
	}
	free(s->digests);
	s->digests = NULL;
}
