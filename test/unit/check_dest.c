/* The destination's handling of the source's data-path messages, driven
 * without a connection: a handle made through the API, put in the state
 * the block map leaves (one announced block), and given messages as the
 * control channel would deliver them. */
#include <check.h>
#include <poll.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "dst_data.h"
#include "dst_link.h"
#include "dst_pc.h"
#include "dst_state.h"
#include "dst_int.h"
#include "privdata.h"
#include "suite.h"
#include "suites.h"

/* A destination past its block map: @ram is block 0, @caps were granted. */
static struct rdmig_dest *running_dest(void *ram, size_t len, uint32_t caps)
{
	struct rdmig_dest *d;

	ck_assert_int_eq(rdmig_dest_create(&d, NULL), 0);
	ck_assert_int_eq(rdmig_dest_add_block(d, "ram", ram, len, 0), 0);
	d->map = calloc(1, sizeof(*d->map));
	ck_assert_ptr_nonnull(d->map);
	d->nmap = 1;
	d->blocks[0].announced = true;
	d->blocks[0].d.page_size = 4096;
	d->ss.caps = caps;
	d->state = DST_RUNNING;
	return d;
}

static bool all(const uint8_t *p, size_t len, uint8_t v)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != v)
			return false;
	return true;
}

/* A source that did not ask for ZERO_PAGES (or was not granted it) has no
 * business sending ZERO_RANGES: the migration fails naming the capability,
 * and nothing is cleared. */
START_TEST(zero_ranges_need_the_capability)
{
	static uint8_t ram[64 * 1024] __attribute__((aligned(4096)));
	struct ctrl_hdr h = { .type = CT_ZERO_RANGES };
	Rdmig__ZeroRanges z = RDMIG__ZERO_RANGES__INIT;
	uint32_t blk = 0;
	uint64_t off = 4096, len = 8192;
	struct rdmig_dest *d;

	z.n_block = z.n_offset = z.n_length = 1;
	z.block = &blk;
	z.offset = &off;
	z.length = &len;
	memset(ram, 0x5a, sizeof(ram));
	d = running_dest(ram, sizeof(ram), PD_CAP_PAGES);
	ck_assert_int_eq(dst_data_msg(d, &h, &z.base), -EPROTO);
	ck_assert_msg(strstr(rdmig_dest_error(d), "ZERO_RANGES") &&
		      strstr(rdmig_dest_error(d), "ZERO_PAGES"), "%s", rdmig_dest_error(d));
	ck_assert(all(ram, sizeof(ram), 0x5a));
	rdmig_dest_destroy(d);

	/* The control: granted, the same message clears its range. */
	d = running_dest(ram, sizeof(ram), PD_CAP_ZERO_PAGES);
	ck_assert_int_eq(dst_data_msg(d, &h, &z.base), 0);
	ck_assert_int_eq(dst_data_zero_step(d, 0), 1);
	ck_assert(all(ram + off, len, 0));
	ck_assert(all(ram, off, 0x5a) && all(ram + off + len, sizeof(ram) - off - len, 0x5a));
	rdmig_dest_destroy(d);
}
END_TEST

/* One ZERO_RANGES may cover 1 GiB: it is worked off in slices that fit the
 * step's time left at the learned price, one at least, so a step whose
 * time is up does one slice of the smallest size (64 KiB, or 16 ranges
 * shorter than a page) and leaves the rest for the next, in order. */
START_TEST(zero_ranges_in_slices)
{
	enum { MIB = 1 << 20, SLICE = 64 << 10, TINY = 1000 };
	const size_t size = 6 * MIB;
	uint8_t *ram = aligned_alloc(4096, size);
	struct ctrl_hdr h = { .type = CT_ZERO_RANGES };
	Rdmig__ZeroRanges z = RDMIG__ZERO_RANGES__INIT;
	uint32_t blk[TINY] = { 0 };
	uint64_t off[TINY], len[TINY];
	struct rdmig_dest *d;
	int steps, i;

	ck_assert_ptr_nonnull(ram);
	memset(ram, 0x5a, size);
	d = running_dest(ram, size, PD_CAP_ZERO_PAGES);
	/* 4.5 MiB from offset 1 MiB - 100: 72 slices. */
	off[0] = MIB - 100;
	len[0] = 4 * MIB + MIB / 2;
	z.n_block = z.n_offset = z.n_length = 1;
	z.block = blk;
	z.offset = off;
	z.length = len;
	ck_assert_int_eq(dst_data_msg(d, &h, &z.base), 0);
	ck_assert_msg(all(ram, size, 0x5a), "cleared before any step");
	for (steps = 1; !dst_data_zero_step(d, 0); steps++) {
		ck_assert_msg(ram[off[0] + (size_t)steps * SLICE] == 0x5a, "step %d went past "
			      "its slice", steps);
		ck_assert_int_le(steps, 72);
	}
	ck_assert_int_eq(steps, 72);
	ck_assert(all(ram + off[0], len[0], 0));
	ck_assert(all(ram, off[0], 0x5a));
	ck_assert(all(ram + off[0] + len[0], size - off[0] - len[0], 0x5a));
	ck_assert_uint_eq(d->job.i, 1); /* every range worked off */

	/* A thousand ranges of 16 bytes: 16 per slice, 63 steps. */
	memset(ram, 0x5a, size);
	for (i = 0; i < TINY; i++) {
		off[i] = (uint64_t)i * 4096;
		len[i] = 16;
	}
	z.n_block = z.n_offset = z.n_length = TINY;
	ck_assert_int_eq(dst_data_msg(d, &h, &z.base), 0);
	for (steps = 1; !dst_data_zero_step(d, 0); steps++)
		ck_assert_int_le(steps, 63);
	ck_assert_int_eq(steps, 63);
	for (i = 0; i < TINY; i++)
		ck_assert(all(ram + off[i], 16, 0) && ram[off[i] + 16] == 0x5a);

	/* With time to spare a step does it all. */
	memset(ram, 0x5a, size);
	z.n_block = z.n_offset = z.n_length = 1;
	off[0] = 0;
	len[0] = size;
	ck_assert_int_eq(dst_data_msg(d, &h, &z.base), 0);
	ck_assert_int_eq(dst_data_zero_step(d, INT64_MAX), 1);
	ck_assert(all(ram, size, 0));
	rdmig_dest_destroy(d);
	free(ram);
}
END_TEST

/* The destination's counters while a pass runs: what the source said
 * landed (PROGRESS) and the zero pages it skipped or sent as ranges, at
 * once, not at the iteration's end; a counter that goes down is a broken
 * source, and PROGRESS without the capability too. */
START_TEST(progress_counts_what_landed)
{
	static uint8_t ram[64 * 1024] __attribute__((aligned(4096)));
	struct ctrl_hdr h = { .type = CT_PROGRESS }, hz = { .type = CT_ZERO_RANGES };
	Rdmig__Progress p = RDMIG__PROGRESS__INIT;
	Rdmig__ZeroRanges z = RDMIG__ZERO_RANGES__INIT;
	struct rdmig_stats st = { .size = sizeof(st) };
	uint32_t blk = 0;
	uint64_t off = 4096, len = 8192;
	struct rdmig_dest *d;

	d = running_dest(ram, sizeof(ram), PD_CAP_PROGRESS | PD_CAP_ZERO_PAGES);
	p.normal_bytes = 3 * 4096;
	p.normal_pages = 3;
	p.zero_pages_skipped = 5;
	ck_assert_int_eq(dst_data_msg(d, &h, &p.base), 0);
	rdmig_dest_stats(d, &st);
	ck_assert_uint_eq(st.normal_bytes, 3 * 4096);
	ck_assert_uint_eq(st.normal_pages, 3);
	ck_assert_uint_eq(st.transferred, 3 * 4096);
	ck_assert_uint_eq(st.zero_pages_skipped, 5);
	ck_assert_uint_eq(st.zero_pages, 5);
	/* Two zero pages sent as a range count as soon as they came. */
	z.n_block = z.n_offset = z.n_length = 1;
	z.block = &blk;
	z.offset = &off;
	z.length = &len;
	ck_assert_int_eq(dst_data_msg(d, &hz, &z.base), 0);
	ck_assert_int_eq(dst_data_zero_step(d, INT64_MAX), DST_JOB_DONE);
	rdmig_dest_stats(d, &st);
	ck_assert_uint_eq(st.zero_pages, 7);
	p.normal_bytes = 4096;
	ck_assert_int_eq(dst_data_msg(d, &h, &p.base), -EPROTO);
	ck_assert_ptr_nonnull(strstr(rdmig_dest_error(d), "PROGRESS went down"));
	rdmig_dest_destroy(d);

	d = running_dest(ram, sizeof(ram), PD_CAP_ZERO_PAGES);
	ck_assert_int_eq(dst_data_msg(d, &h, &p.base), -EPROTO);
	ck_assert_str_eq(rdmig_dest_error(d), "PROGRESS without the capability");
	rdmig_dest_destroy(d);
}
END_TEST

static size_t got_state;

static int take_state(void *ctx, const void *data, size_t len, char *err, size_t errlen)
{
	(void)ctx; (void)data; (void)err; (void)errlen;
	got_state += len;
	return 0;
}

/* A state callback that tries to drive its own handle: refused. */
static struct rdmig_dest *reenter_d;
static int reenter_process, reenter_add;

static int reenter_state(void *ctx, const void *data, size_t len, char *err, size_t errlen)
{
	static uint8_t more[4096] __attribute__((aligned(4096)));

	(void)ctx; (void)data; (void)err; (void)errlen;
	reenter_process = rdmig_dest_process(reenter_d);
	reenter_add = rdmig_dest_add_block(reenter_d, "more", more, sizeof(more), 0);
	/* Allowed from a callback: pausing the state stream. */
	rdmig_dest_pause_state(reenter_d, 0);
	got_state += len;
	return 0;
}

/* rdmig(3), Threads: a callback that calls rdmig_dest_process() on its
 * own handle gets -EDEADLK, and the state it was given still counts. */
START_TEST(state_callback_may_not_process)
{
	static uint8_t ram[64 * 1024] __attribute__((aligned(4096)));
	static uint8_t bytes[100];
	struct ctrl_hdr h = { .type = CT_STATE };
	Rdmig__State st = RDMIG__STATE__INIT;
	struct rdmig_config cfg;

	rdmig_config_init(&cfg);
	cfg.state = reenter_state;
	ck_assert_int_eq(rdmig_dest_create(&reenter_d, &cfg), 0);
	ck_assert_int_eq(rdmig_dest_add_block(reenter_d, "ram", ram, sizeof(ram), 0), 0);
	reenter_d->state = DST_RUNNING;
	st.data.data = bytes;
	st.data.len = sizeof(bytes);
	got_state = 0;
	reenter_process = reenter_add = 0;
	ck_assert_int_eq(dst_data_msg(reenter_d, &h, &st.base), 0);
	ck_assert_int_eq(reenter_process, -EDEADLK);
	ck_assert_int_eq(reenter_add, -EDEADLK);
	ck_assert_uint_eq(got_state, sizeof(bytes));
	ck_assert_uint_eq(reenter_d->state_bytes, sizeof(bytes));
	ck_assert_int_eq(reenter_d->state, DST_RUNNING);
	ck_assert_uint_eq(reenter_d->nblocks, 1);
	rdmig_dest_destroy(reenter_d);
}
END_TEST

/* rdmig_dest_pause_state(): while paused a STATE waits in hand (the frames
 * behind it wait too, so the source runs out of credits), the callback is
 * not called and the source's silence is not timed; resuming wakes the fd
 * and the next step hands it over. */
START_TEST(state_waits_while_paused)
{
	static uint8_t ram[64 * 1024] __attribute__((aligned(4096)));
	static uint8_t bytes[1000];
	struct ctrl_hdr h = { .type = CT_STATE };
	Rdmig__State st = RDMIG__STATE__INIT;
	struct rdmig_config cfg;
	struct pollfd p;
	struct rdmig_dest *d;

	rdmig_config_init(&cfg);
	cfg.state = take_state;
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), 0);
	ck_assert_int_eq(rdmig_dest_add_block(d, "ram", ram, sizeof(ram), 0), 0);
	d->state = DST_RUNNING;
	st.data.data = bytes;
	st.data.len = sizeof(bytes);
	got_state = 0;

	rdmig_dest_pause_state(d, 1);
	ck_assert_int_eq(dst_data_msg(d, &h, &st.base), 0);
	ck_assert_uint_eq(got_state, 0);
	ck_assert_int_eq(d->job.kind, JOB_STATE);
	ck_assert_int_eq(dst_state_step(d, INT64_MAX), DST_JOB_WAITING);
	ck_assert_uint_eq(got_state, 0);
	/* Long past the source's silence: not timed while paused. */
	d->ss.ch.last_recv_ms -= 10 * (int64_t)cfg.timeout_ms;
	ck_assert_int_gt(rdmig_dest_timeout(d), 0);

	p = (struct pollfd){ .fd = rdmig_dest_fd(d), .events = POLLIN };
	sess_woken(&d->ss);
	ck_assert_int_eq(poll(&p, 1, 0), 0);
	rdmig_dest_pause_state(d, 0);
	ck_assert_int_eq(poll(&p, 1, 0), 1);
	ck_assert_int_eq(dst_state_step(d, INT64_MAX), DST_JOB_DONE);
	ck_assert_uint_eq(got_state, sizeof(bytes));
	ck_assert_uint_eq(d->state_bytes, sizeof(bytes));
	d->job = (struct dst_job){ .kind = JOB_NONE };

	/* Not paused: handed over at once. */
	ck_assert_int_eq(dst_data_msg(d, &h, &st.base), 0);
	ck_assert_uint_eq(got_state, 2 * sizeof(bytes));
	ck_assert_int_eq(d->job.kind, JOB_NONE);
	rdmig_dest_destroy(d);
}
END_TEST

/* What the state callback got, in order. */
static uint8_t *ring_got;
static size_t ring_got_len, ring_calls;

static struct rdmig_dest *pause_in_cb; /* the callback pauses this one */

static int keep_state(void *ctx, const void *data, size_t len, char *err, size_t errlen)
{
	(void)ctx; (void)err; (void)errlen;
	memcpy(ring_got + ring_got_len, data, len);
	ring_got_len += len;
	ring_calls++;
	if (pause_in_cb)
		rdmig_dest_pause_state(pause_in_cb, 1);
	return 0;
}

static int written(struct rdmig_dest *d, uint32_t len)
{
	struct ctrl_hdr h = { .type = CT_STATE_WRITTEN };
	Rdmig__StateWritten w = RDMIG__STATE_WRITTEN__INIT;

	w.length = len;
	return dst_data_msg(d, &h, &w.base);
}

/* STATE_WRITTEN: the bytes are taken from the ring where the last ones
 * ended, in slices with the step's clock read between them, held while
 * paused, and a length that would run past the ring's end (or any before
 * the ring was offered) fails the migration with nothing handed over. */
START_TEST(state_ring_in_order_and_bounded)
{
	static uint8_t ram[64 * 1024] __attribute__((aligned(4096)));
	const size_t R = DST_STATE_RING;
	struct rdmig_config cfg;
	struct rdmig_dest *d;
	size_t i;

	rdmig_config_init(&cfg);
	cfg.state = keep_state;
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), 0);
	ck_assert_int_eq(rdmig_dest_add_block(d, "ram", ram, sizeof(ram), 0), 0);
	d->state = DST_RUNNING;
	d->ss.caps = PD_CAP_STATE_RING;
	ring_got = malloc(3 * R);
	ck_assert_ptr_nonnull(ring_got);
	ring_got_len = ring_calls = 0;

	/* Not offered yet. */
	ck_assert_int_eq(written(d, 10), -EPROTO);
	ck_assert_str_eq(rdmig_dest_error(d), "STATE_WRITTEN before this destination offered "
			 "its state ring");
	/* Mapped at create, since a state callback is set. */
	ck_assert_ptr_nonnull(d->sring.buf);
	d->sring.announced = true;
	for (i = 0; i < R; i++)
		d->sring.buf[i] = (uint8_t)(i * 31 + (i >> 12));

	/* 1 MiB with the time up: one slice per step. */
	ck_assert_int_eq(written(d, 1u << 20), 0);
	ck_assert_int_eq(d->job.kind, JOB_RING);
	ck_assert_int_eq(dst_state_step(d, 0), DST_JOB_CUT);
	ck_assert_uint_eq(ring_got_len, 256u << 10);
	ck_assert_int_eq(dst_state_step(d, INT64_MAX), DST_JOB_DONE);
	ck_assert_uint_eq(ring_got_len, 1u << 20);
	ck_assert_uint_eq(d->sring.taken, 1u << 20);
	ck_assert_mem_eq(ring_got, d->sring.buf, 1u << 20);

	/* Paused: held, nothing handed over. */
	rdmig_dest_pause_state(d, 1);
	ck_assert_int_eq(written(d, (uint32_t)(R - (1u << 20))), 0);
	ck_assert_int_eq(dst_state_step(d, INT64_MAX), DST_JOB_WAITING);
	ck_assert_uint_eq(ring_got_len, 1u << 20);
	rdmig_dest_pause_state(d, 0);
	ck_assert_int_eq(dst_state_step(d, INT64_MAX), DST_JOB_DONE);
	ck_assert_uint_eq(d->sring.taken, R);
	ck_assert_mem_eq(ring_got, d->sring.buf, R);

	/* Around: the next bytes start at the ring's start again. */
	ck_assert_int_eq(written(d, 4096), 0);
	ck_assert_int_eq(dst_state_step(d, INT64_MAX), DST_JOB_DONE);
	ck_assert_mem_eq(ring_got + R, d->sring.buf, 4096);
	ck_assert_uint_eq(d->state_bytes, R + 4096);

	/* The callback pauses (its buffer is full): not one slice more
	 * until resumed. */
	pause_in_cb = d;
	ck_assert_int_eq(written(d, 1u << 20), 0);
	ck_assert_int_eq(dst_state_step(d, INT64_MAX), DST_JOB_WAITING);
	ck_assert_uint_eq(ring_got_len, R + 4096 + (256u << 10));
	pause_in_cb = NULL;
	rdmig_dest_pause_state(d, 0);
	ck_assert_int_eq(dst_state_step(d, INT64_MAX), DST_JOB_DONE);
	ck_assert_uint_eq(ring_got_len, R + 4096 + (1u << 20));
	ck_assert_mem_eq(ring_got + R + 4096, d->sring.buf + 4096, 1u << 20);

	/* One byte past the end: refused, nothing handed over. */
	ck_assert_int_eq(written(d, (uint32_t)(R - 4096 - (1u << 20) + 1)), -EPROTO);
	ck_assert_str_eq(rdmig_dest_error(d), "STATE_WRITTEN: 3141633 bytes at ring offset "
			 "1052672 run past the ring's 4194304 bytes");
	ck_assert_uint_eq(ring_got_len, R + 4096 + (1u << 20));
	ck_assert_uint_eq(d->sring.written, R + 4096 + (1u << 20));
	free(ring_got);
	d->job = (struct dst_job){ .kind = JOB_NONE };
	rdmig_dest_destroy(d);
}
END_TEST

/* A destination whose post-copy paused, with a new connection that sent a
 * RESUME with the right token: nothing but the key's proof is taken first,
 * a wrong proof gains nothing, and nothing moves it out of resuming. */
START_TEST(resume_authenticates_first)
{
	static uint8_t ram[64 * 1024] __attribute__((aligned(4096)));
	static const char key[] = "a key of more than sixteen bytes";
	struct ctrl_hdr h = { .type = CT_POSTCOPY_RESUME };
	Rdmig__PostcopyResume q = RDMIG__POSTCOPY_RESUME__INIT;
	Rdmig__AuthChallenge ch = RDMIG__AUTH_CHALLENGE__INIT;
	Rdmig__AuthResponse r = RDMIG__AUTH_RESPONSE__INIT;
	uint8_t nonce[AUTH_NONCE_LEN], mac[AUTH_MAC_LEN];
	struct rdmig_config cfg;
	struct rdmig_dest *d;

	rdmig_config_init(&cfg);
	cfg.postcopy = 1;
	cfg.auth_key = key;
	cfg.auth_key_len = sizeof(key) - 1;
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), 0);
	ck_assert_int_eq(rdmig_dest_add_block(d, "ram", ram, sizeof(ram), 0), 0);
	d->ss.caps = PD_CAP_AUTH | PD_CAP_POSTCOPY | PD_CAP_POSTCOPY_RECOVER;
	d->state = DST_PC_RESUMING;
	d->pc.authed = false;
	auth_nonce(d->nonce);
	d->bind.req_len = PD_RESUME_LEN;
	/* POSTCOPY_RESUME before any proof. */
	ck_assert_int_eq(dst_link_auth(d, &h, &q.base), -EACCES);
	ck_assert_str_eq(rdmig_dest_error(d), "authentication required: the source sent "
			 "POSTCOPY_RESUME instead");
	ck_assert(!d->pc.authed);
	/* A challenge, then an answer made without the key. */
	auth_nonce(nonce);
	ch.nonce.data = nonce;
	ch.nonce.len = sizeof(nonce);
	h.type = CT_AUTH_CHALLENGE;
	ck_assert_int_eq(dst_link_auth(d, &h, &ch.base), 0);
	memset(mac, 0x5a, sizeof(mac));
	r.mac.data = mac;
	r.mac.len = sizeof(mac);
	h.type = CT_AUTH_RESPONSE;
	ck_assert_int_eq(dst_link_auth(d, &h, &r.base), -EACCES);
	/* An answer made with the key for the same bytes taken as a plain
	 * REQUEST (another connection): refused too. */
	d->bind.req_len = PD_REQUEST_LEN;
	auth_mac(key, sizeof(key) - 1, AUTH_SOURCE, &d->bind, mac);
	d->bind.req_len = PD_RESUME_LEN;
	ck_assert_int_eq(dst_link_auth(d, &h, &r.base), -EACCES);
	ck_assert(!d->pc.authed);
	ck_assert_int_eq(d->state, DST_PC_RESUMING);
	rdmig_dest_destroy(d);
}
END_TEST

/* POSTCOPY_RESUME names the set's size: another set is another migration. */
START_TEST(resume_of_another_set)
{
	static uint8_t ram[64 * 1024] __attribute__((aligned(4096)));
	Rdmig__PostcopyResume q = RDMIG__POSTCOPY_RESUME__INIT;
	struct rdmig_dest *d = running_dest(ram, sizeof(ram), PD_CAP_POSTCOPY |
					    PD_CAP_POSTCOPY_RECOVER);

	d->state = DST_PC_RESUMING;
	d->pc.authed = true;
	d->pc.rx.pages = 12;
	q.pages = 13;
	ck_assert_int_eq(dst_pc_on_resume(d, &q.base), -EPROTO);
	ck_assert_str_eq(rdmig_dest_error(d), "POSTCOPY_RESUME for a set of 13 pages, this "
			 "post-copy's has 12");
	ck_assert(!d->pc.resumed_sent);
	rdmig_dest_destroy(d);
}
END_TEST

/* A token to resume with: 16 random bytes, another each time. */
START_TEST(resume_tokens)
{
	static uint8_t ram[4096] __attribute__((aligned(4096)));
	static const uint8_t zero[PD_TOKEN_LEN];
	struct rdmig_dest *d = running_dest(ram, sizeof(ram), 0);
	uint8_t first[PD_TOKEN_LEN];

	dst_pc_new_token(d);
	ck_assert(memcmp(d->pc.token, zero, PD_TOKEN_LEN));
	memcpy(first, d->pc.token, PD_TOKEN_LEN);
	dst_pc_new_token(d);
	ck_assert(memcmp(d->pc.token, first, PD_TOKEN_LEN));
	/* Recovery is never offered without somewhere to take the resume. */
	ck_assert(!dst_pc_may_pause(d, -ECONNRESET));
	rdmig_dest_destroy(d);
}
END_TEST

void dest_cases(Suite *s)
{
	TCase *tc = tu_case(s, "messages", 0);

	tcase_add_test(tc, zero_ranges_need_the_capability);
	tcase_add_test(tc, zero_ranges_in_slices);
	tcase_add_test(tc, progress_counts_what_landed);
	tcase_add_test(tc, state_waits_while_paused);
	tcase_add_test(tc, state_callback_may_not_process);
	tcase_add_test(tc, state_ring_in_order_and_bounded);
	tcase_add_test(tc, resume_authenticates_first);
	tcase_add_test(tc, resume_of_another_set);
	tcase_add_test(tc, resume_tokens);
}
