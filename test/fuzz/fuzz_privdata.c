/* libFuzzer target: connect private data from an untrusted peer.  Every
 * decoder must reject or accept without reading past @size, and what it
 * accepts must satisfy the limits, re-encode to the same fields and negotiate
 * to a consistent answer.  Build with test/fuzz/build.sh. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "privdata.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) do { if (!(c)) abort(); } while (0)

static void request(const uint8_t *data, size_t size)
{
	static const uint16_t ranges[][2] = { { 1, 1 }, { 2, 5 }, { 1, 65535 } };
	struct pd_request r, r2;
	struct pd_accept acc;
	struct pd_reject rej;
	struct rd_err e;
	uint8_t buf[64];
	char caps[128];
	size_t i;
	int rc;

	static const uint8_t zero[PD_TOKEN_LEN];
	size_t len;

	if (pd_decode_request(data, size, &r, &e))
		return;
	/* A RESUME is a REQUEST with a token, in version 3 or later. */
	CHECK(pd_kind(data, size) == (r.resume ? PD_RESUME : PD_REQUEST));
	CHECK(!(r.caps & ~PD_CAP_KNOWN));
	CHECK(r.ver_min >= 1 && r.ver_min <= r.ver_max);
	CHECK(r.ctrl_depth >= PD_DEPTH_MIN && r.ctrl_depth <= PD_DEPTH_MAX);
	CHECK(r.ctrl_msg_max >= PD_MSG_MAX_MIN && r.ctrl_msg_max <= PD_MSG_MAX_MAX);
	CHECK(r.channel < r.channels && r.channels <= PD_CHANNELS_MAX);
	if (r.resume) {
		CHECK(r.ver_max >= PD_VERSION_RECOVER && r.channel == 0 && r.channels == 1);
		CHECK(memcmp(r.token, zero, PD_TOKEN_LEN) != 0);
	} else {
		CHECK(memcmp(r.token, zero, PD_TOKEN_LEN) == 0);
	}
	len = r.resume ? PD_RESUME_LEN : PD_REQUEST_LEN;
	CHECK(size >= len);
	CHECK(pd_encode_request(&r, buf, sizeof(buf)) == len);
	CHECK(pd_decode_request(buf, len, &r2, &e) == 0);
	CHECK(r.ver_min == r2.ver_min && r.ver_max == r2.ver_max &&
	      r.caps == r2.caps && r.ctrl_depth == r2.ctrl_depth &&
	      r.ctrl_msg_max == r2.ctrl_msg_max && r.session_id == r2.session_id &&
	      r.channel == r2.channel && r.channels == r2.channels &&
	      r.resume == r2.resume && !memcmp(r.token, r2.token, PD_TOKEN_LEN));
	pd_caps_str(r.caps, caps, sizeof(caps));
	for (i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		uint16_t lo = ranges[i][0], hi = ranges[i][1];

		rc = pd_negotiate(&r, lo, hi, PD_CAP_PIN_ALL | PD_CAP_VERIFY, 16,
				  65536, &acc, &rej, &e);
		if (rc == 0) {
			CHECK(acc.version >= lo && acc.version <= hi);
			CHECK(acc.version >= r.ver_min && acc.version <= r.ver_max);
			CHECK(!(acc.caps & ~r.caps));
			CHECK(!(acc.caps & ~(PD_CAP_PIN_ALL | PD_CAP_VERIFY)));
			rc = pd_negotiate(&r, lo, hi, PD_CAP_KNOWN, 16, 65536, &acc, &rej, &e);
			CHECK(rc == 0);
			/* Recovery only with post-copy, in version 3 or later. */
			CHECK(!(acc.caps & PD_CAP_POSTCOPY_RECOVER) ||
			      ((acc.caps & PD_CAP_POSTCOPY) && acc.version >= PD_VERSION_RECOVER));
		} else {
			CHECK(rc == -EPROTONOSUPPORT);
			CHECK(rej.reason == PD_REJ_VERSION);
			CHECK(r.ver_max < lo || r.ver_min > hi);
			CHECK(pd_reject_error(&rej, r.ver_min, r.ver_max, &e) ==
			      -EPROTONOSUPPORT);
		}
	}
}

static void accept_(const uint8_t *data, size_t size)
{
	struct pd_accept a, a2;
	struct rd_err e;
	uint8_t buf[64];
	char caps[16];

	if (pd_decode_accept(data, size, &a, &e))
		return;
	CHECK(pd_kind(data, size) == PD_ACCEPT);
	CHECK(a.version >= 1 && !(a.caps & ~PD_CAP_KNOWN));
	CHECK(pd_encode_accept(&a, buf, sizeof(buf)) == PD_ACCEPT_LEN);
	CHECK(pd_decode_accept(buf, PD_ACCEPT_LEN, &a2, &e) == 0);
	CHECK(a.version == a2.version && a.caps == a2.caps &&
	      a.ctrl_depth == a2.ctrl_depth && a.ctrl_msg_max == a2.ctrl_msg_max);
	pd_caps_str(a.caps, caps, sizeof(caps)); /* deliberately small */
}

static void reject(const uint8_t *data, size_t size)
{
	struct pd_reject j, j2;
	struct rd_err e;
	uint8_t buf[64];

	if (pd_decode_reject(data, size, &j, &e))
		return;
	CHECK(pd_kind(data, size) == PD_REJECT);
	CHECK(pd_encode_reject(&j, buf, sizeof(buf)) == PD_REJECT_LEN);
	CHECK(pd_decode_reject(buf, PD_REJECT_LEN, &j2, &e) == 0);
	CHECK(j.reason == j2.reason && j.ver_min == j2.ver_min &&
	      j.ver_max == j2.ver_max);
	CHECK(pd_reject_error(&j, 1, 1, &e) < 0 && e.msg[0]);
	CHECK(pd_reason_str(j.reason)[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int k = pd_kind(data, size);

	CHECK(k == -EPROTO || (k >= PD_REQUEST && k <= PD_RESUME));
	request(data, size);
	accept_(data, size);
	reject(data, size);
	return 0;
}
