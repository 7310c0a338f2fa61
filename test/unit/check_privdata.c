#include <check.h>
#include <errno.h>
#include <string.h>
#include <stdint.h>

#include "privdata.h"
#include "suite.h"
#include "suites.h"

static const struct pd_request good_req = {
	.ver_min = 1, .ver_max = 1, .caps = PD_CAP_PIN_ALL | PD_CAP_VERIFY,
	.ctrl_depth = 64, .ctrl_msg_max = 65536,
	.session_id = 0x0123456789abcdefull, .channel = 2, .channels = 4,
};

/* A buffer rdma_cm would hand us: our bytes, then zero padding. */
static uint8_t pad[256];

static size_t enc_req(const struct pd_request *r)
{
	memset(pad, 0, sizeof(pad));
	return pd_encode_request(r, pad, sizeof(pad));
}

START_TEST(request_round_trip)
{
	struct pd_request out;
	struct rd_err e = { "" };

	ck_assert_uint_eq(enc_req(&good_req), PD_REQUEST_LEN);
	ck_assert_int_eq(pd_kind(pad, PD_REQUEST_LEN), PD_REQUEST);
	/* Padding beyond the fixed length is ignored. */
	ck_assert_int_eq(pd_decode_request(pad, sizeof(pad), &out, &e), 0);
	ck_assert_uint_eq(out.ver_min, 1);
	ck_assert_uint_eq(out.ver_max, 1);
	ck_assert_uint_eq(out.caps, PD_CAP_PIN_ALL | PD_CAP_VERIFY);
	ck_assert_uint_eq(out.ctrl_depth, 64);
	ck_assert_uint_eq(out.ctrl_msg_max, 65536);
	ck_assert_uint_eq(out.session_id, 0x0123456789abcdefull);
	ck_assert_uint_eq(out.channel, 2);
	ck_assert_uint_eq(out.channels, 4);
	ck_assert_int_eq(pd_decode_request(pad, PD_REQUEST_LEN, &out, &e), 0);
}
END_TEST

START_TEST(request_layout_is_network_order)
{
	static const uint8_t want[PD_REQUEST_LEN] = {
		0x52, 0x44, 0x4d, 0x47, 1, 0, 0, 0,   /* magic, kind, reserved */
		0, 1, 0, 1, 0, 0, 0, 5,               /* ver 1..1, caps */
		0, 0, 0, 64, 0, 1, 0, 0,              /* depth, msg_max */
		0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
		0, 2, 0, 4,
	};

	ck_assert_uint_eq(enc_req(&good_req), PD_REQUEST_LEN);
	ck_assert_mem_eq(pad, want, PD_REQUEST_LEN);
}
END_TEST

START_TEST(encoders_refuse_small_buffers)
{
	uint8_t buf[64];
	struct pd_accept a = { .version = 1 };
	struct pd_reject r = { .reason = PD_REJ_BUSY, .ver_min = 1, .ver_max = 1 };

	ck_assert_uint_eq(pd_encode_request(&good_req, buf, PD_REQUEST_LEN - 1), 0);
	ck_assert_uint_eq(pd_encode_accept(&a, buf, PD_ACCEPT_LEN - 1), 0);
	ck_assert_uint_eq(pd_encode_reject(&r, buf, PD_REJECT_LEN - 1), 0);
	ck_assert_uint_eq(pd_encode_accept(&a, buf, PD_ACCEPT_LEN), PD_ACCEPT_LEN);
	ck_assert_uint_eq(pd_encode_reject(&r, buf, PD_REJECT_LEN), PD_REJECT_LEN);
}
END_TEST

START_TEST(accept_round_trip)
{
	struct pd_accept a = { .version = 1, .caps = PD_CAP_ZERO_PAGES | PD_CAP_AUTH,
			       .ctrl_depth = 1024, .ctrl_msg_max = 16u << 20 }, out;
	struct rd_err e = { "" };
	unsigned i;

	for (i = 0; i < PD_NONCE_LEN; i++)
		a.nonce[i] = (uint8_t)(0xa0 + i);
	memset(pad, 0, sizeof(pad));
	ck_assert_uint_eq(pd_encode_accept(&a, pad, sizeof(pad)), PD_ACCEPT_LEN);
	ck_assert_int_eq(pd_kind(pad, sizeof(pad)), PD_ACCEPT);
	ck_assert_int_eq(pd_decode_accept(pad, 196, &out, &e), 0);
	ck_assert_uint_eq(out.version, 1);
	ck_assert_uint_eq(out.caps, PD_CAP_ZERO_PAGES | PD_CAP_AUTH);
	ck_assert_uint_eq(out.ctrl_depth, 1024);
	ck_assert_uint_eq(out.ctrl_msg_max, 16u << 20);
	/* The challenge travels last, byte for byte. */
	ck_assert_mem_eq(out.nonce, a.nonce, PD_NONCE_LEN);
	ck_assert_mem_eq(pad + PD_ACCEPT_LEN - PD_NONCE_LEN, a.nonce, PD_NONCE_LEN);
}
END_TEST

START_TEST(reject_round_trip)
{
	struct pd_reject r = { .reason = PD_REJ_CAPABILITY, .ver_min = 2, .ver_max = 7 }, out;
	struct rd_err e = { "" };

	memset(pad, 0, sizeof(pad));
	ck_assert_uint_eq(pd_encode_reject(&r, pad, sizeof(pad)), PD_REJECT_LEN);
	ck_assert_int_eq(pd_kind(pad, PD_REJECT_LEN), PD_REJECT);
	ck_assert_int_eq(pd_decode_reject(pad, 148, &out, &e), 0);
	ck_assert_uint_eq(out.reason, PD_REJ_CAPABILITY);
	ck_assert_uint_eq(out.ver_min, 2);
	ck_assert_uint_eq(out.ver_max, 7);
}
END_TEST

START_TEST(unknown_caps_and_reserved_are_ignored)
{
	struct pd_request r = good_req, out;
	struct pd_accept a = { .version = 1, .caps = 0xffffffffu, .ctrl_depth = 2,
			       .ctrl_msg_max = 4096 }, aout;

	r.caps = (0xffffffffu & ~PD_CAP_KNOWN) | PD_CAP_MULTI_CHANNEL;
	enc_req(&r);
	pad[5] = 0xaa; /* reserved bytes: a later version may use them */
	pad[6] = 0xbb;
	ck_assert_int_eq(pd_decode_request(pad, PD_REQUEST_LEN, &out, NULL), 0);
	ck_assert_uint_eq(out.caps, PD_CAP_MULTI_CHANNEL);
	pd_encode_accept(&a, pad, sizeof(pad));
	ck_assert_int_eq(pd_decode_accept(pad, PD_ACCEPT_LEN, &aout, NULL), 0);
	ck_assert_uint_eq(aout.caps, PD_CAP_KNOWN);
}
END_TEST

START_TEST(not_an_rdmig_peer)
{
	struct pd_request out;
	struct rd_err e = { "" };

	memset(pad, 0, sizeof(pad));
	/* What a peer without private data leaves: zeros. */
	ck_assert_int_eq(pd_kind(pad, sizeof(pad)), -EPROTO);
	ck_assert_int_eq(pd_decode_request(pad, sizeof(pad), &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "not an rdmig peer: private data starts with "
			 "0x00000000, not the magic 0x52444d47");
	ck_assert_int_eq(pd_kind(NULL, 0), -EPROTO);
	ck_assert_int_eq(pd_decode_request(NULL, 0, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "not an rdmig peer: 0 bytes of private data, an "
			 "rdmig REQUEST has 36");
	enc_req(&good_req);
	ck_assert_int_eq(pd_kind(pad, 7), -EPROTO);
	ck_assert_int_eq(pd_kind(pad, 8), PD_REQUEST);
	pad[4] = 9;
	ck_assert_int_eq(pd_kind(pad, PD_REQUEST_LEN), -EPROTO);
	ck_assert_int_eq(pd_decode_request(pad, PD_REQUEST_LEN, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "expected an rdmig REQUEST, got unknown kind 9");
}
END_TEST

START_TEST(short_and_wrong_kind)
{
	struct pd_request out;
	struct pd_accept aout;
	struct pd_reject rout;
	struct rd_err e = { "" };

	enc_req(&good_req);
	ck_assert_int_eq(pd_decode_request(pad, PD_REQUEST_LEN - 1, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "rdmig REQUEST too short: 35 bytes, needs 36");
	ck_assert_int_eq(pd_decode_accept(pad, PD_REQUEST_LEN, &aout, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "expected an rdmig ACCEPT, got REQUEST");
	ck_assert_int_eq(pd_decode_reject(pad, PD_REQUEST_LEN, &rout, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "expected an rdmig REJECT, got REQUEST");
	pd_encode_accept(&(struct pd_accept){ .version = 1, .ctrl_depth = 2,
					      .ctrl_msg_max = 4096 }, pad, sizeof(pad));
	ck_assert_int_eq(pd_decode_accept(pad, PD_ACCEPT_LEN - 1, &aout, &e), -EPROTO);
	ck_assert_int_eq(pd_decode_request(pad, PD_ACCEPT_LEN, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "expected an rdmig REQUEST, got ACCEPT");
	pd_encode_reject(&(struct pd_reject){ .reason = 1, .ver_min = 1, .ver_max = 1 },
			 pad, sizeof(pad));
	ck_assert_int_eq(pd_decode_reject(pad, PD_REJECT_LEN - 1, &rout, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "rdmig REJECT too short: 15 bytes, needs 16");
}
END_TEST

/* Encodes @r, decodes it and returns the decoder's result and message. */
static int req_rc(struct pd_request r, struct rd_err *e)
{
	struct pd_request out;

	enc_req(&r);
	return pd_decode_request(pad, PD_REQUEST_LEN, &out, e);
}

START_TEST(request_limits)
{
	struct pd_request r;
	struct rd_err e = { "" };

	r = good_req; r.ver_min = 0; r.ver_max = 0;
	ck_assert_int_eq(req_rc(r, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "REQUEST: invalid protocol version range 0..0");
	r = good_req; r.ver_min = 3; r.ver_max = 2;
	ck_assert_int_eq(req_rc(r, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "REQUEST: invalid protocol version range 3..2");
	r = good_req; r.ctrl_depth = 1;
	ck_assert_int_eq(req_rc(r, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "REQUEST: control ring depth 1 outside 2..1024");
	r.ctrl_depth = 1025;
	ck_assert_int_eq(req_rc(r, &e), -EINVAL);
	r.ctrl_depth = 2;
	ck_assert_int_eq(req_rc(r, &e), 0);
	r.ctrl_depth = 1024;
	ck_assert_int_eq(req_rc(r, &e), 0);
	r = good_req; r.ctrl_msg_max = 4095;
	ck_assert_int_eq(req_rc(r, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "REQUEST: control message size 4095 outside 4096..16777216");
	r.ctrl_msg_max = (16u << 20) + 1;
	ck_assert_int_eq(req_rc(r, &e), -EINVAL);
	r.ctrl_msg_max = 4097; /* no alignment required */
	ck_assert_int_eq(req_rc(r, &e), 0);
	r = good_req; r.channels = 0; r.channel = 0;
	ck_assert_int_eq(req_rc(r, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "REQUEST: 0 channels outside 1..64");
	r.channels = 65;
	ck_assert_int_eq(req_rc(r, &e), -EINVAL);
	r.channels = 64; r.channel = 64;
	ck_assert_int_eq(req_rc(r, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "REQUEST: channel 64 of 64 channels");
	r.channel = 63;
	ck_assert_int_eq(req_rc(r, &e), 0);
}
END_TEST

START_TEST(accept_and_reject_limits)
{
	struct pd_accept a = { .version = 0, .ctrl_depth = 2, .ctrl_msg_max = 4096 }, aout;
	struct pd_reject r = { .reason = PD_REJ_BUSY, .ver_min = 0, .ver_max = 1 }, rout;
	struct rd_err e = { "" };

	pd_encode_accept(&a, pad, sizeof(pad));
	ck_assert_int_eq(pd_decode_accept(pad, PD_ACCEPT_LEN, &aout, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "ACCEPT: invalid protocol version 0");
	a.version = 1; a.ctrl_depth = 2000;
	pd_encode_accept(&a, pad, sizeof(pad));
	ck_assert_int_eq(pd_decode_accept(pad, PD_ACCEPT_LEN, &aout, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "ACCEPT: control ring depth 2000 outside 2..1024");
	a.ctrl_depth = 2; a.ctrl_msg_max = 100;
	pd_encode_accept(&a, pad, sizeof(pad));
	ck_assert_int_eq(pd_decode_accept(pad, PD_ACCEPT_LEN, &aout, &e), -EINVAL);
	pd_encode_reject(&r, pad, sizeof(pad));
	ck_assert_int_eq(pd_decode_reject(pad, PD_REJECT_LEN, &rout, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "REJECT: invalid protocol version range 0..1");
	/* An unknown reason decodes: the source reports it as such. */
	r = (struct pd_reject){ .reason = 999, .ver_min = 1, .ver_max = 1 };
	pd_encode_reject(&r, pad, sizeof(pad));
	ck_assert_int_eq(pd_decode_reject(pad, PD_REJECT_LEN, &rout, &e), 0);
	ck_assert_uint_eq(rout.reason, 999);
}
END_TEST

START_TEST(negotiate_overlap)
{
	struct pd_request r = good_req;
	struct pd_accept acc;
	struct pd_reject rej;
	struct rd_err e = { "" };

	r.ver_min = 1; r.ver_max = 5;
	r.caps = PD_CAP_PIN_ALL | PD_CAP_VERIFY | PD_CAP_AUTH;
	ck_assert_int_eq(pd_negotiate(&r, 2, 3, PD_CAP_PIN_ALL | PD_CAP_ZERO_PAGES |
				      PD_CAP_AUTH, 128, 8192, &acc, &rej, &e), 0);
	ck_assert_uint_eq(acc.version, 3);
	ck_assert_uint_eq(acc.caps, PD_CAP_PIN_ALL | PD_CAP_AUTH);
	ck_assert_uint_eq(acc.ctrl_depth, 128);
	ck_assert_uint_eq(acc.ctrl_msg_max, 8192);
	r.ver_min = 3; r.ver_max = 3;
	ck_assert_int_eq(pd_negotiate(&r, 2, 3, 0, 128, 8192, &acc, &rej, &e), 0);
	ck_assert_uint_eq(acc.version, 3);
	ck_assert_uint_eq(acc.caps, 0);
	r.ver_min = 1; r.ver_max = 2;
	ck_assert_int_eq(pd_negotiate(&r, 2, 9, 0, 128, 8192, &acc, &rej, &e), 0);
	ck_assert_uint_eq(acc.version, 2);
}
END_TEST

START_TEST(negotiate_no_overlap)
{
	struct pd_request r = good_req;
	struct pd_accept acc;
	struct pd_reject rej;
	struct rd_err e = { "" };

	r.ver_min = 2; r.ver_max = 3;
	ck_assert_int_eq(pd_negotiate(&r, 1, 1, PD_CAP_KNOWN, 64, 4096, &acc, &rej, &e),
			 -EPROTONOSUPPORT);
	ck_assert_str_eq(e.msg, "protocol version mismatch: this side speaks 1..1, "
			 "the peer speaks 2..3");
	ck_assert_uint_eq(rej.reason, PD_REJ_VERSION);
	ck_assert_uint_eq(rej.ver_min, 1);
	ck_assert_uint_eq(rej.ver_max, 1);
	r.ver_min = 1; r.ver_max = 1;
	ck_assert_int_eq(pd_negotiate(&r, 4, 6, 0, 64, 4096, &acc, &rej, &e),
			 -EPROTONOSUPPORT);
	ck_assert_str_eq(e.msg, "protocol version mismatch: this side speaks 4..6, "
			 "the peer speaks 1..1");
}
END_TEST

START_TEST(reject_messages)
{
	struct pd_reject r = { .reason = PD_REJ_VERSION, .ver_min = 2, .ver_max = 3 };
	struct rd_err e = { "" };

	ck_assert_int_eq(pd_reject_error(&r, 1, 1, &e), -EPROTONOSUPPORT);
	ck_assert_str_eq(e.msg, "destination rejected the connection: protocol "
			 "version mismatch: this side speaks 1..1, the destination "
			 "speaks 2..3");
	r.reason = PD_REJ_UNAUTHORIZED;
	ck_assert_int_eq(pd_reject_error(&r, 1, 1, &e), -EACCES);
	ck_assert_str_eq(e.msg, "destination rejected the connection: unauthorized");
	r.reason = PD_REJ_BUSY;
	ck_assert_int_eq(pd_reject_error(&r, 1, 1, &e), -EBUSY);
	ck_assert_str_eq(e.msg, "destination rejected the connection: busy");
	r.reason = PD_REJ_BAD_REQUEST;
	ck_assert_int_eq(pd_reject_error(&r, 1, 1, &e), -ECONNREFUSED);
	ck_assert_str_eq(e.msg, "destination rejected the connection: bad request");
	r.reason = PD_REJ_NO_RESOURCES;
	ck_assert_int_eq(pd_reject_error(&r, 1, 1, &e), -ECONNREFUSED);
	r.reason = PD_REJ_CAPABILITY;
	ck_assert_int_eq(pd_reject_error(&r, 1, 1, &e), -ECONNREFUSED);
	ck_assert_str_eq(e.msg, "destination rejected the connection: a required "
			 "capability is missing");
	r.reason = 77;
	ck_assert_int_eq(pd_reject_error(&r, 1, 1, &e), -ECONNREFUSED);
	ck_assert_str_eq(e.msg, "destination rejected the connection: unknown reason 77");
	ck_assert_str_eq(pd_reason_str(0), "unknown reason");
	ck_assert_str_eq(pd_reason_str(PD_REJ_BUSY), "busy");
	ck_assert_str_eq(pd_reason_str(65535), "unknown reason");
}
END_TEST

START_TEST(caps_strings)
{
	char buf[128], small[12];

	ck_assert_str_eq(pd_caps_str(0, buf, sizeof(buf)), "none");
	ck_assert_str_eq(pd_caps_str(PD_CAP_PIN_ALL | PD_CAP_ZERO_PAGES, buf, sizeof(buf)),
			 "pin-all,zero-pages");
	ck_assert_str_eq(pd_caps_str(PD_CAP_KNOWN, buf, sizeof(buf)),
			 "pin-all,zero-pages,verify,auth,multi-channel,pages,progress,state-ring,"
			 "state-bound,postcopy,postcopy-recover");
	ck_assert_str_eq(pd_caps_str(PD_CAP_AUTH | (1u << 11) | (1u << 31), buf, sizeof(buf)),
			 "auth,0x800,0x80000000");
	/* Truncates without overrunning. */
	ck_assert_str_eq(pd_caps_str(PD_CAP_KNOWN, small, sizeof(small)), "pin-all,zer");
}
END_TEST

/* A RESUME: a REQUEST of version 3 or later, channel 0 of 1, then the
 * token. */
static const struct pd_request good_resume = {
	.ver_min = 2, .ver_max = 3, .caps = PD_CAP_AUTH | PD_CAP_POSTCOPY |
	PD_CAP_POSTCOPY_RECOVER, .ctrl_depth = 64, .ctrl_msg_max = 65536,
	.session_id = 7, .channel = 0, .channels = 1, .resume = true,
	.token = { 0xa0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xaf },
};

static int resume_rc(struct pd_request r, struct rd_err *e)
{
	struct pd_request out;

	enc_req(&r);
	return pd_decode_request(pad, PD_RESUME_LEN, &out, e);
}

START_TEST(resume_round_trip)
{
	struct pd_request out;
	struct rd_err e = { "" };

	ck_assert_uint_eq(enc_req(&good_resume), PD_RESUME_LEN);
	ck_assert_uint_le(PD_RESUME_LEN, 56); /* the IB CM REQ's private data */
	ck_assert_int_eq(pd_kind(pad, PD_RESUME_LEN), PD_RESUME);
	ck_assert_int_eq(pd_decode_request(pad, sizeof(pad), &out, &e), 0);
	ck_assert(out.resume);
	ck_assert_mem_eq(out.token, good_resume.token, PD_TOKEN_LEN);
	ck_assert_uint_eq(out.ver_max, 3);
	ck_assert_uint_eq(out.caps, good_resume.caps);
	ck_assert_uint_eq(out.channels, 1);
	/* The token follows the REQUEST's fields, as sent. */
	ck_assert_uint_eq(pad[4], PD_RESUME);
	ck_assert_mem_eq(pad + PD_REQUEST_LEN, good_resume.token, PD_TOKEN_LEN);
	/* A plain REQUEST decodes with resume clear and no token, even when
	 * rdma_cm's padding is where a token would be. */
	enc_req(&good_req);
	memset(out.token, 0x55, sizeof(out.token));
	ck_assert_int_eq(pd_decode_request(pad, sizeof(pad), &out, &e), 0);
	ck_assert(!out.resume);
	ck_assert_uint_eq(out.token[0], 0);
}
END_TEST

START_TEST(resume_limits)
{
	struct pd_request r, out;
	struct pd_accept aout;
	struct rd_err e = { "" };

	ck_assert_int_eq(resume_rc(good_resume, &e), 0);
	/* Cut anywhere inside the token: too short. */
	enc_req(&good_resume);
	ck_assert_int_eq(pd_decode_request(pad, PD_RESUME_LEN - 1, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "rdmig RESUME too short: 51 bytes, needs 52");
	ck_assert_int_eq(pd_decode_request(pad, PD_REQUEST_LEN, &out, &e), -EPROTO);
	ck_assert_int_eq(pd_decode_accept(pad, PD_ACCEPT_LEN, &aout, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "expected an rdmig ACCEPT, got RESUME");
	r = good_resume; r.ver_max = 2;
	ck_assert_int_eq(resume_rc(r, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "RESUME: protocol versions 2..2, a resume needs 3 or later");
	r = good_resume; r.channels = 3; r.channel = 1;
	ck_assert_int_eq(resume_rc(r, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "RESUME: channel 1 of 3, a resume is channel 0 of 1");
	r.channel = 0;
	ck_assert_int_eq(resume_rc(r, &e), -EINVAL);
	r = good_resume; memset(r.token, 0, sizeof(r.token));
	ck_assert_int_eq(resume_rc(r, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "RESUME: an all-zero token");
	/* The REQUEST's own limits hold for a RESUME too. */
	r = good_resume; r.ctrl_depth = 1;
	ck_assert_int_eq(resume_rc(r, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "REQUEST: control ring depth 1 outside 2..1024");
	/* An unknown kind past RESUME is still unknown. */
	enc_req(&good_resume);
	pad[4] = PD_RESUME + 1;
	ck_assert_int_eq(pd_kind(pad, PD_RESUME_LEN), -EPROTO);
	ck_assert_int_eq(pd_decode_request(pad, PD_RESUME_LEN, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "expected an rdmig REQUEST, got unknown kind 5");
}
END_TEST

START_TEST(negotiate_recover)
{
	struct pd_request r = good_req;
	struct pd_accept acc;
	struct pd_reject rej;
	struct rd_err e = { "" };
	uint32_t pc = PD_CAP_POSTCOPY | PD_CAP_POSTCOPY_RECOVER;

	r.ver_min = 2; r.ver_max = 3; r.caps = pc;
	ck_assert_int_eq(pd_negotiate(&r, 2, 3, pc, 64, 4096, &acc, &rej, &e), 0);
	ck_assert_uint_eq(acc.version, 3);
	ck_assert_uint_eq(acc.caps, pc);
	/* A version 2 peer, on either side, gets post-copy without recovery. */
	r.ver_max = 2;
	ck_assert_int_eq(pd_negotiate(&r, 2, 3, pc, 64, 4096, &acc, &rej, &e), 0);
	ck_assert_uint_eq(acc.caps, PD_CAP_POSTCOPY);
	r.ver_max = 3;
	ck_assert_int_eq(pd_negotiate(&r, 2, 2, pc, 64, 4096, &acc, &rej, &e), 0);
	ck_assert_uint_eq(acc.caps, PD_CAP_POSTCOPY);
	/* Recovery is post-copy's: never granted without it. */
	r.caps = PD_CAP_POSTCOPY_RECOVER;
	ck_assert_int_eq(pd_negotiate(&r, 2, 3, pc, 64, 4096, &acc, &rej, &e), 0);
	ck_assert_uint_eq(acc.caps, 0);
	r.caps = pc;
	ck_assert_int_eq(pd_negotiate(&r, 2, 3, PD_CAP_POSTCOPY_RECOVER, 64, 4096, &acc, &rej,
				      &e), 0);
	ck_assert_uint_eq(acc.caps, 0);
}
END_TEST

void privdata_cases(Suite *s)
{
	TCase *tc = tu_case(s, "privdata", 0);

	tcase_add_test(tc, request_round_trip);
	tcase_add_test(tc, request_layout_is_network_order);
	tcase_add_test(tc, encoders_refuse_small_buffers);
	tcase_add_test(tc, accept_round_trip);
	tcase_add_test(tc, reject_round_trip);
	tcase_add_test(tc, unknown_caps_and_reserved_are_ignored);
	tcase_add_test(tc, not_an_rdmig_peer);
	tcase_add_test(tc, short_and_wrong_kind);
	tcase_add_test(tc, request_limits);
	tcase_add_test(tc, accept_and_reject_limits);
	tcase_add_test(tc, negotiate_overlap);
	tcase_add_test(tc, negotiate_no_overlap);
	tcase_add_test(tc, reject_messages);
	tcase_add_test(tc, caps_strings);
	tcase_add_test(tc, resume_round_trip);
	tcase_add_test(tc, resume_limits);
	tcase_add_test(tc, negotiate_recover);
}
