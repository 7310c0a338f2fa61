#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "codec.h"
#include "suite.h"
#include "suites.h"

#define MSG_MAX 65536u

static uint8_t frame[MSG_MAX];
static struct rd_err e;

/* Encodes @m as @type with 5 credits and decodes it back with MSG_MAX. */
static int rt(unsigned type, const ProtobufCMessage *m, ProtobufCMessage **out)
{
	struct ctrl_hdr h;
	int len, rc;

	len = ctrl_encode(type, 5, m, frame, sizeof(frame), &e);
	ck_assert_msg(len >= CTRL_HDR_LEN, "encode %s: %d %s", ctrl_type_name(type),
		      len, e.msg);
	rc = ctrl_decode(frame, (size_t)len, MSG_MAX, NULL, &h, out, &e);
	if (rc == 0) {
		ck_assert_uint_eq(h.type, type);
		ck_assert_uint_eq(h.credits, 5);
		ck_assert_uint_eq(h.len, (uint32_t)len - CTRL_HDR_LEN);
	} else {
		ck_assert_ptr_null(*out);
	}
	return rc;
}

/* Expects decoding @m as @type to fail with -EPROTO and message @want. */
static void bad(unsigned type, const ProtobufCMessage *m, const char *want)
{
	ProtobufCMessage *out = (ProtobufCMessage *)&out;

	memset(e.msg, 0, sizeof(e.msg));
	ck_assert_int_eq(rt(type, m, &out), -EPROTO);
	ck_assert_str_eq(e.msg, want);
}

static void good(unsigned type, const ProtobufCMessage *m)
{
	ProtobufCMessage *out = NULL;

	ck_assert_msg(rt(type, m, &out) == 0, "%s: %s", ctrl_type_name(type), e.msg);
	ctrl_msg_free(NULL, out);
}

/* ---- header ------------------------------------------------------------- */

START_TEST(hdr_layout)
{
	struct ctrl_hdr h = { .len = 0x01020304, .type = CT_ZERO_RANGES, .credits = 0x0a0b }, g;
	static const uint8_t want[8] = { 1, 2, 3, 4, 0, 5, 0x0a, 0x0b };
	uint8_t buf[8];

	ctrl_hdr_put(buf, &h);
	ck_assert_mem_eq(buf, want, 8);
	h.len = 0;
	h.type = CT_KEEPALIVE;
	ctrl_hdr_put(buf, &h);
	ck_assert_int_eq(ctrl_hdr_get(buf, 8, CTRL_MSG_MIN, &g, &e), 0);
	ck_assert_uint_eq(g.len, 0);
	ck_assert_uint_eq(g.type, CT_KEEPALIVE);
	ck_assert_uint_eq(g.credits, 0x0a0b);
}
END_TEST

START_TEST(type_names)
{
	ck_assert_str_eq(ctrl_type_name(CT_BLOCK_MAP_REQ), "BLOCK_MAP_REQ");
	ck_assert_str_eq(ctrl_type_name(CT_REGISTER_REQ), "REGISTER_REQ");
	ck_assert_str_eq(ctrl_type_name(CT_KEEPALIVE), "KEEPALIVE");
	ck_assert_str_eq(ctrl_type_name(CT_AUTH_RESPONSE), "AUTH_RESPONSE");
	ck_assert_str_eq(ctrl_type_name(CT_POSTCOPY_KEYS), "POSTCOPY_KEYS");
	ck_assert_str_eq(ctrl_type_name(CT_POSTCOPY_RANGES), "POSTCOPY_RANGES");
	ck_assert_str_eq(ctrl_type_name(CT_POSTCOPY_DONE), "POSTCOPY_DONE");
	ck_assert_str_eq(ctrl_type_name(CT_POSTCOPY_RESUME), "POSTCOPY_RESUME");
	ck_assert_str_eq(ctrl_type_name(CT_POSTCOPY_RESUMED), "POSTCOPY_RESUMED");
	ck_assert_str_eq(ctrl_type_name(0), "unknown");
	ck_assert_str_eq(ctrl_type_name(CT_TYPE_MAX), "unknown");
}
END_TEST

START_TEST(hdr_short)
{
	struct ctrl_hdr h;
	uint8_t buf[8] = { 0 };

	ck_assert_int_eq(ctrl_hdr_get(buf, 7, MSG_MAX, &h, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "control message of 7 bytes is shorter than its "
			 "8-byte header");
	ck_assert_int_eq(ctrl_hdr_get(NULL, 0, MSG_MAX, &h, &e), -EPROTO);
}
END_TEST

START_TEST(hdr_unknown_type)
{
	struct ctrl_hdr h = { .len = 0, .type = 0 };
	uint8_t buf[8];
	ProtobufCMessage *out;

	ctrl_hdr_put(buf, &h);
	ck_assert_int_eq(ctrl_hdr_get(buf, 8, MSG_MAX, &h, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "unknown control message type 0");
	h.type = CT_TYPE_MAX;
	ctrl_hdr_put(buf, &h);
	ck_assert_int_eq(ctrl_decode(buf, 8, MSG_MAX, NULL, &h, &out, &e), -EPROTO);
	ck_assert_ptr_null(out);
	ck_assert_str_eq(e.msg, "unknown control message type 27");
	h.type = 0xffff;
	ctrl_hdr_put(buf, &h);
	ck_assert_int_eq(ctrl_hdr_get(buf, 8, MSG_MAX, &h, &e), -EPROTO);
}
END_TEST

START_TEST(hdr_length_mismatch)
{
	Rdmig__IterEnd m = RDMIG__ITER_END__INIT;
	struct ctrl_hdr h;
	ProtobufCMessage *out;
	int len;

	m.iteration = 3;
	len = ctrl_encode(CT_ITER_END, 0, &m.base, frame, sizeof(frame), &e);
	ck_assert_int_eq(len, 8 + 2);
	ck_assert_int_eq(ctrl_decode(frame, (size_t)len + 1, MSG_MAX, NULL, &h, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "ITER_END: header says 2 payload bytes but the message has 3");
	ck_assert_int_eq(ctrl_decode(frame, (size_t)len - 1, MSG_MAX, NULL, &h, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "ITER_END: header says 2 payload bytes but the message has 1");
	/* A length that would wrap a 32-bit sum. */
	h = (struct ctrl_hdr){ .len = UINT32_MAX - 3, .type = CT_STATE };
	ctrl_hdr_put(frame, &h);
	ck_assert_int_eq(ctrl_hdr_get(frame, 4, MSG_MAX, &h, &e), -EPROTO);
	ck_assert_int_eq(ctrl_hdr_get(frame, 8, MSG_MAX, &h, &e), -EPROTO);
}
END_TEST

START_TEST(hdr_too_big)
{
	struct ctrl_hdr h = { .len = 4096 - 8 + 1, .type = CT_STATE };
	static uint8_t big[8192];

	ctrl_hdr_put(big, &h);
	ck_assert_int_eq(ctrl_hdr_get(big, 8 + h.len, 4096, &h, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "STATE: 4089-byte payload exceeds the 4088-byte limit");
	h = (struct ctrl_hdr){ .len = 4096 - 8, .type = CT_STATE };
	ctrl_hdr_put(big, &h);
	ck_assert_int_eq(ctrl_hdr_get(big, 4096, 4096, &h, &e), 0);
}
END_TEST

START_TEST(header_only_types)
{
	struct ctrl_hdr h = { .len = 1, .type = CT_CREDIT, .credits = 9 };
	ProtobufCMessage *out = (ProtobufCMessage *)&out;
	uint8_t buf[16] = { 0 };
	int len;

	len = ctrl_encode(CT_CREDIT, 9, NULL, buf, sizeof(buf), &e);
	ck_assert_int_eq(len, 8);
	ck_assert_int_eq(ctrl_decode(buf, 8, MSG_MAX, NULL, &h, &out, &e), 0);
	ck_assert_ptr_null(out);
	ck_assert_uint_eq(h.type, CT_CREDIT);
	ck_assert_uint_eq(h.credits, 9);
	ck_assert_int_eq(ctrl_encode(CT_KEEPALIVE, 0, NULL, buf, sizeof(buf), &e), 8);
	ck_assert_int_eq(ctrl_decode(buf, 8, MSG_MAX, NULL, &h, &out, &e), 0);
	ck_assert_uint_eq(h.type, CT_KEEPALIVE);
	/* With a payload. */
	h = (struct ctrl_hdr){ .len = 1, .type = CT_KEEPALIVE };
	ctrl_hdr_put(buf, &h);
	ck_assert_int_eq(ctrl_decode(buf, 9, MSG_MAX, NULL, &h, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "KEEPALIVE: header-only message carries a 1-byte payload");
}
END_TEST

/* proto3 omits default fields: a message of only defaults is an empty
 * payload.  It is valid when its limits allow the defaults, rejected by those
 * limits otherwise. */
START_TEST(empty_payloads)
{
	struct ctrl_hdr h = { .len = 0 };
	ProtobufCMessage *out;
	static const struct { unsigned type; const char *err; } cases[] = {
		{ CT_BLOCK_MAP_REQ, "BLOCK_MAP_REQ: no blocks" },
		{ CT_BLOCK_MAP_RESP, "BLOCK_MAP_RESP: no blocks" },
		{ CT_REGISTER_REQ, "REGISTER_REQ: no chunks and no releases" },
		{ CT_REGISTER_RESP, NULL },
		{ CT_ZERO_RANGES, "ZERO_RANGES: no ranges" },
		{ CT_ITER_END, NULL },
		{ CT_ITER_ACK, NULL },
		{ CT_STATE, NULL },
		{ CT_COMPLETE, NULL },
		{ CT_COMPLETE_ACK, NULL },
		{ CT_ERROR, NULL },
		{ CT_AUTH_CHALLENGE, "AUTH_CHALLENGE: nonce of 0 bytes, not 16..64" },
		{ CT_AUTH_RESPONSE, "AUTH_RESPONSE: mac of 0 bytes, not 16..64" },
		{ CT_PAGES, "PAGES: 0 runs, not 1..1024" },
		{ CT_POSTCOPY_KEYS, "POSTCOPY_KEYS: no keys" },
		{ CT_POSTCOPY_RANGES, "POSTCOPY_RANGES: no ranges" },
		{ CT_POSTCOPY_DONE, NULL },
		{ CT_POSTCOPY_RESUME, NULL },
		{ CT_POSTCOPY_RESUMED, NULL },
	};
	uint8_t buf[8];
	size_t i;

	for (i = 0; i < RD_ARRAY_SIZE(cases); i++) {
		h.type = (uint16_t)cases[i].type;
		ctrl_hdr_put(buf, &h);
		out = (ProtobufCMessage *)&out;
		if (cases[i].err) {
			ck_assert_int_eq(ctrl_decode(buf, 8, MSG_MAX, NULL, &h, &out, &e), -EPROTO);
			ck_assert_str_eq(e.msg, cases[i].err);
			ck_assert_ptr_null(out);
		} else {
			ck_assert_int_eq(ctrl_decode(buf, 8, MSG_MAX, NULL, &h, &out, &e), 0);
			ck_assert_ptr_nonnull(out);
			ctrl_msg_free(NULL, out);
		}
	}
}
END_TEST

START_TEST(encode_errors)
{
	Rdmig__State s = RDMIG__STATE__INIT;
	Rdmig__IterAck a = RDMIG__ITER_ACK__INIT;
	static uint8_t data[5000];
	uint8_t small[16];

	ck_assert_int_eq(ctrl_encode(0, 0, NULL, frame, sizeof(frame), &e), -EINVAL);
	ck_assert_str_eq(e.msg, "cannot encode unknown control message type 0");
	ck_assert_int_eq(ctrl_encode(CT_TYPE_MAX, 0, NULL, frame, sizeof(frame), &e), -EINVAL);
	ck_assert_int_eq(ctrl_encode(CT_STATE, 0, &a.base, frame, sizeof(frame), &e), -EINVAL);
	ck_assert_str_eq(e.msg, "STATE: message is a rdmig.IterAck, expected rdmig.State");
	ck_assert_int_eq(ctrl_encode(CT_STATE, 0, NULL, frame, sizeof(frame), &e), -EINVAL);
	ck_assert_str_eq(e.msg, "STATE: no message to encode");
	ck_assert_int_eq(ctrl_encode(CT_CREDIT, 0, &s.base, frame, sizeof(frame), &e), -EINVAL);
	ck_assert_str_eq(e.msg, "CREDIT: header-only message given a payload");
	ck_assert_int_eq(ctrl_encode(CT_KEEPALIVE, 0, NULL, small, 7, &e), -EMSGSIZE);
	s.data.data = data;
	s.data.len = sizeof(data);
	ck_assert_int_eq(ctrl_encode(CT_STATE, 0, &s.base, frame, 4096, &e), -EMSGSIZE);
	ck_assert_str_eq(e.msg, "STATE: 5011-byte message does not fit in a 4096-byte "
			 "control buffer");
	ck_assert_int_eq(ctrl_encode(CT_STATE, 0, &s.base, frame, 5011, &e), 5011);
	ck_assert_int_eq(ctrl_encode(CT_STATE, 0, &s.base, frame, 5010, &e), -EMSGSIZE);
}
END_TEST

START_TEST(truncated_protobuf)
{
	Rdmig__BlockDesc b = RDMIG__BLOCK_DESC__INIT, *bp = &b;
	Rdmig__BlockMapReq m = RDMIG__BLOCK_MAP_REQ__INIT;
	struct ctrl_hdr h;
	ProtobufCMessage *out = (ProtobufCMessage *)&out;
	int len;

	b.name = "ram0";
	b.length = 1 << 20;
	b.page_size = 4096;
	m.n_blocks = 1;
	m.blocks = &bp;
	m.chunk_shift = 20;
	len = ctrl_encode(CT_BLOCK_MAP_REQ, 0, &m.base, frame, sizeof(frame), &e);
	ck_assert_int_gt(len, 8);
	/* Cut inside the embedded BlockDesc, fixing up the header length. */
	h = (struct ctrl_hdr){ .len = (uint32_t)len - 8 - 3, .type = CT_BLOCK_MAP_REQ };
	ctrl_hdr_put(frame, &h);
	ck_assert_int_eq(ctrl_decode(frame, (size_t)len - 3, MSG_MAX, NULL, &h, &out, &e), -EBADMSG);
	ck_assert_ptr_null(out);
	ck_assert_str_eq(e.msg, "BLOCK_MAP_REQ: malformed protobuf payload (truncated field 1)");
	/* A 32-bit field with no room for its value. */
	frame[8] = (1 << 3) | 5;
	h.len = 1;
	ctrl_hdr_put(frame, &h);
	ck_assert_int_eq(ctrl_decode(frame, 9, MSG_MAX, NULL, &h, &out, &e), -EBADMSG);
	ck_assert_str_eq(e.msg, "BLOCK_MAP_REQ: malformed protobuf payload (truncated field 1)");
}
END_TEST

/* Frames that are well-formed protobuf on the surface but that protobuf-c
 * or the pre-scan refuse. */
static int decode_payload(unsigned type, const uint8_t *pl, size_t len)
{
	struct ctrl_hdr h = { .len = (uint32_t)len, .type = (uint16_t)type };
	ProtobufCMessage *out = (ProtobufCMessage *)&out;
	int rc;

	ctrl_hdr_put(frame, &h);
	memcpy(frame + 8, pl, len);
	rc = ctrl_decode(frame, 8 + len, MSG_MAX, NULL, &h, &out, &e);
	if (rc)
		ck_assert_ptr_null(out);
	ctrl_msg_free(NULL, out);
	return rc;
}

START_TEST(malformed_protobuf)
{
	static const uint8_t wrong_wire[] = { 0x0a, 1, 5 };     /* uint32 as bytes */
	static const uint8_t group[] = { 0x0b };                 /* wire type 3 */
	static const uint8_t long_tag[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
	static const uint8_t bad_varint[] = { 0x08, 0x80 };
	static const uint8_t bad_packed[] = { 0x12, 1, 0x80 };   /* rkeys */

	ck_assert_int_eq(decode_payload(CT_ITER_ACK, wrong_wire, sizeof(wrong_wire)), -EBADMSG);
	ck_assert_str_eq(e.msg, "ITER_ACK: malformed protobuf payload (3 bytes)");
	ck_assert_int_eq(decode_payload(CT_ITER_ACK, group, sizeof(group)), -EBADMSG);
	ck_assert_str_eq(e.msg, "ITER_ACK: malformed protobuf payload (bad wire type in field 1)");
	ck_assert_int_eq(decode_payload(CT_ITER_ACK, long_tag, sizeof(long_tag)), -EBADMSG);
	ck_assert_str_eq(e.msg, "ITER_ACK: malformed protobuf payload (bad tag at offset 0)");
	ck_assert_int_eq(decode_payload(CT_ITER_ACK, bad_varint, sizeof(bad_varint)), -EBADMSG);
	ck_assert_str_eq(e.msg, "ITER_ACK: malformed protobuf payload (bad varint in field 1)");
	ck_assert_int_eq(decode_payload(CT_REGISTER_RESP, bad_packed, sizeof(bad_packed)), -EBADMSG);
	ck_assert_str_eq(e.msg, "REGISTER_RESP: malformed protobuf payload (bad packed field 2)");
}
END_TEST

/* Unknown fields are allowed, but not as padding that protobuf-c would have
 * to keep a record for each of. */
START_TEST(unknown_field_cap)
{
	uint8_t pl[2 + 2 * 70];
	size_t i;

	pl[0] = 0x08;
	pl[1] = 7;
	for (i = 0; i < 70; i++) {
		pl[2 + 2 * i] = 0x48; /* field 9, varint */
		pl[3 + 2 * i] = 1;
	}
	/* One declared field, so 1 + 64 occurrences beyond the first pass. */
	ck_assert_int_eq(decode_payload(CT_ITER_ACK, pl, 2 + 2 * 64), 0);
	ck_assert_int_eq(decode_payload(CT_ITER_ACK, pl, 2 + 2 * 65), -EPROTO);
	ck_assert_str_eq(e.msg, "ITER_ACK: more than 65 unknown or repeated fields");
	/* Repeating the declared field counts too. */
	for (i = 0; i < 70; i++)
		pl[2 + 2 * i] = 0x08;
	ck_assert_int_eq(decode_payload(CT_ITER_ACK, pl, 2 + 2 * 65), -EPROTO);
}
END_TEST

START_TEST(unknown_field_cap_nested)
{
	/* BLOCK_MAP_REQ {chunk_shift 20, blocks {name "a", length 1,
	 * page_size 4096, N x field 9}}; the block's length prefix is always
	 * two bytes (non-minimal varints are valid). */
	uint8_t pl[5 + 8 + 2 * 70];
	size_t i, n = 0, inner;

	pl[n++] = 0x10;
	pl[n++] = 20;
	pl[n++] = 0x0a;
	n += 2;
	inner = n;
	memcpy(pl + n, "\x0a\x01" "a" "\x10\x01" "\x18\x80\x20", 8);
	n += 8;
	for (i = 0; i < 70; i++) {
		pl[n++] = 0x48;
		pl[n++] = 1;
		pl[inner - 2] = (uint8_t)(0x80 | ((n - inner) & 0x7f));
		pl[inner - 1] = (uint8_t)((n - inner) >> 7);
		/* Three declared fields: 3 + 64 occurrences are allowed. */
		ck_assert_int_eq(decode_payload(CT_BLOCK_MAP_REQ, pl, n), i < 64 ? 0 : -EPROTO);
	}
	ck_assert_str_eq(e.msg, "BLOCK_MAP_REQ: more than 67 unknown or repeated fields");
}
END_TEST

/* Count limits hold before unpacking: protobuf-c never sizes an array for
 * more elements than the limit (the parallel arrays here would otherwise
 * fail on their mismatch, after allocation). */
START_TEST(count_limit_before_unpack)
{
	static uint8_t f[8 + 4 + CTRL_ZERO_RANGES_MAX + 1];
	uint32_t len = CTRL_ZERO_RANGES_MAX + 1;
	struct ctrl_hdr h = { .len = 4 + len, .type = CT_ZERO_RANGES };
	ProtobufCMessage *out = (ProtobufCMessage *)&out;

	ctrl_hdr_put(f, &h);
	f[8] = 0x0a; /* block, packed */
	f[9] = (uint8_t)(0x80 | (len & 0x7f));
	f[10] = (uint8_t)(0x80 | ((len >> 7) & 0x7f));
	f[11] = (uint8_t)(len >> 14);
	ck_assert_int_eq(ctrl_decode(f, sizeof(f), sizeof(f), NULL, &h, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "ZERO_RANGES: 65537 ranges exceeds the limit of 65536");
	ck_assert_ptr_null(out);
	/* One fewer passes the pre-scan and fails on the parallel counts. */
	len--;
	h.len--;
	ctrl_hdr_put(f, &h);
	f[9] = (uint8_t)(0x80 | (len & 0x7f));
	f[10] = (uint8_t)(0x80 | ((len >> 7) & 0x7f));
	f[11] = (uint8_t)(len >> 14);
	ck_assert_int_eq(ctrl_decode(f, sizeof(f) - 1, sizeof(f), NULL, &h, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "ZERO_RANGES: 65536 blocks, 0 offsets and 0 lengths");
}
END_TEST

/* ---- round trips ----------------------------------------------------------- */

START_TEST(rt_block_map)
{
	Rdmig__BlockDesc b[2] = { RDMIG__BLOCK_DESC__INIT, RDMIG__BLOCK_DESC__INIT };
	Rdmig__BlockDesc *bp[2] = { &b[0], &b[1] };
	Rdmig__BlockMapReq m = RDMIG__BLOCK_MAP_REQ__INIT, *mo;
	Rdmig__BlockDest d[2] = { RDMIG__BLOCK_DEST__INIT, RDMIG__BLOCK_DEST__INIT };
	Rdmig__BlockDest *dp[2] = { &d[0], &d[1] };
	Rdmig__BlockMapResp r = RDMIG__BLOCK_MAP_RESP__INIT, *ro;
	ProtobufCMessage *out;

	b[0].name = "pc.ram";
	b[0].length = (1ull << 50);
	b[0].page_size = 1u << 30;
	b[1].name = "vga.vram ~!";
	b[1].length = 4097;
	b[1].page_size = 4096;
	m.n_blocks = 2;
	m.blocks = bp;
	m.chunk_shift = 30;
	ck_assert_int_eq(rt(CT_BLOCK_MAP_REQ, &m.base, &out), 0);
	mo = (Rdmig__BlockMapReq *)out;
	ck_assert_uint_eq(mo->n_blocks, 2);
	ck_assert_uint_eq(mo->chunk_shift, 30);
	ck_assert_str_eq(mo->blocks[0]->name, "pc.ram");
	ck_assert_uint_eq(mo->blocks[0]->length, 1ull << 50);
	ck_assert_uint_eq(mo->blocks[0]->page_size, 1u << 30);
	ck_assert_str_eq(mo->blocks[1]->name, "vga.vram ~!");
	ck_assert_uint_eq(mo->blocks[1]->length, 4097);
	ck_assert_uint_eq(mo->blocks[1]->page_size, 4096);
	ctrl_msg_free(NULL, out);

	d[0].base_addr = 0x7f0000000000ull;
	d[0].rkey = 0xdeadbeef;
	d[0].zeroed = 1;
	d[1].base_addr = 1;
	r.n_blocks = 2;
	r.blocks = dp;
	r.pinned_cap = UINT64_MAX;
	ck_assert_int_eq(rt(CT_BLOCK_MAP_RESP, &r.base, &out), 0);
	ro = (Rdmig__BlockMapResp *)out;
	ck_assert_uint_eq(ro->n_blocks, 2);
	ck_assert_uint_eq(ro->blocks[0]->base_addr, 0x7f0000000000ull);
	ck_assert_uint_eq(ro->blocks[0]->rkey, 0xdeadbeef);
	ck_assert(ro->blocks[0]->zeroed);
	ck_assert_uint_eq(ro->blocks[1]->base_addr, 1);
	ck_assert_uint_eq(ro->blocks[1]->rkey, 0);
	ck_assert(!ro->blocks[1]->zeroed);
	ck_assert_uint_eq(ro->pinned_cap, UINT64_MAX);
	ctrl_msg_free(NULL, out);
}
END_TEST

START_TEST(rt_register)
{
	uint32_t cb[3] = { 0, 7, UINT32_MAX }, rb[1] = { 2 }, keys[3] = { 1, 2, 0xffffffff };
	uint64_t ci[3] = { 0, 1, UINT64_MAX }, ri[1] = { 42 };
	Rdmig__RegisterReq q = RDMIG__REGISTER_REQ__INIT, *qo;
	Rdmig__RegisterResp r = RDMIG__REGISTER_RESP__INIT, *ro;
	ProtobufCMessage *out;

	q.req_id = 99;
	q.n_chunk_block = 3; q.chunk_block = cb;
	q.n_chunk_index = 3; q.chunk_index = ci;
	q.n_release_block = 1; q.release_block = rb;
	q.n_release_index = 1; q.release_index = ri;
	ck_assert_int_eq(rt(CT_REGISTER_REQ, &q.base, &out), 0);
	qo = (Rdmig__RegisterReq *)out;
	ck_assert_uint_eq(qo->req_id, 99);
	ck_assert_uint_eq(qo->n_chunk_block, 3);
	ck_assert_uint_eq(qo->n_chunk_index, 3);
	ck_assert_mem_eq(qo->chunk_block, cb, sizeof(cb));
	ck_assert_mem_eq(qo->chunk_index, ci, sizeof(ci));
	ck_assert_uint_eq(qo->n_release_block, 1);
	ck_assert_uint_eq(qo->release_block[0], 2);
	ck_assert_uint_eq(qo->release_index[0], 42);
	ctrl_msg_free(NULL, out);
	/* Releases only, and chunks only, are both fine. */
	q.n_chunk_block = q.n_chunk_index = 0;
	good(CT_REGISTER_REQ, &q.base);
	q.n_chunk_block = q.n_chunk_index = 3;
	q.n_release_block = q.n_release_index = 0;
	good(CT_REGISTER_REQ, &q.base);

	r.req_id = UINT64_MAX;
	r.n_rkeys = 3;
	r.rkeys = keys;
	ck_assert_int_eq(rt(CT_REGISTER_RESP, &r.base, &out), 0);
	ro = (Rdmig__RegisterResp *)out;
	ck_assert_uint_eq(ro->req_id, UINT64_MAX);
	ck_assert_uint_eq(ro->n_rkeys, 3);
	ck_assert_mem_eq(ro->rkeys, keys, sizeof(keys));
	ctrl_msg_free(NULL, out);
}
END_TEST

START_TEST(rt_zero_ranges)
{
	uint32_t blk[2] = { 1, 3 };
	uint64_t off[2] = { 0, UINT64_MAX - 1 }, len[2] = { 4096, 1 };
	Rdmig__ZeroRanges z = RDMIG__ZERO_RANGES__INIT, *zo;
	ProtobufCMessage *out;

	z.n_block = 2; z.block = blk;
	z.n_offset = 2; z.offset = off;
	z.n_length = 2; z.length = len;
	ck_assert_int_eq(rt(CT_ZERO_RANGES, &z.base, &out), 0);
	zo = (Rdmig__ZeroRanges *)out;
	ck_assert_uint_eq(zo->n_block, 2);
	ck_assert_mem_eq(zo->block, blk, sizeof(blk));
	ck_assert_mem_eq(zo->offset, off, sizeof(off));
	ck_assert_mem_eq(zo->length, len, sizeof(len));
	ctrl_msg_free(NULL, out);
}
END_TEST

START_TEST(rt_iterations)
{
	Rdmig__IterEnd ie = RDMIG__ITER_END__INIT, *ieo;
	Rdmig__IterAck ia = RDMIG__ITER_ACK__INIT, *iao;
	ProtobufCMessage *out;

	ie.iteration = 12;
	ie.bytes = 1ull << 40;
	ck_assert_int_eq(rt(CT_ITER_END, &ie.base, &out), 0);
	ieo = (Rdmig__IterEnd *)out;
	ck_assert_uint_eq(ieo->iteration, 12);
	ck_assert_uint_eq(ieo->bytes, 1ull << 40);
	ctrl_msg_free(NULL, out);
	ia.iteration = UINT32_MAX;
	ck_assert_int_eq(rt(CT_ITER_ACK, &ia.base, &out), 0);
	iao = (Rdmig__IterAck *)out;
	ck_assert_uint_eq(iao->iteration, UINT32_MAX);
	ctrl_msg_free(NULL, out);
}
END_TEST

START_TEST(rt_state)
{
	Rdmig__State s = RDMIG__STATE__INIT, *so;
	static uint8_t data[3000];
	ProtobufCMessage *out;
	size_t i;

	for (i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7);
	s.data.data = data;
	s.data.len = sizeof(data);
	ck_assert_int_eq(rt(CT_STATE, &s.base, &out), 0);
	so = (Rdmig__State *)out;
	ck_assert_uint_eq(so->data.len, sizeof(data));
	ck_assert_mem_eq(so->data.data, data, sizeof(data));
	ctrl_msg_free(NULL, out);
}
END_TEST

/* The ring the source writes device state into: an address, a power-of-two
 * size within the limits that does not wrap; writes of 1 byte at least. */
START_TEST(state_ring_limits)
{
	Rdmig__StateRing r = RDMIG__STATE_RING__INIT;
	Rdmig__StateWritten w = RDMIG__STATE_WRITTEN__INIT;
	Rdmig__StateTaken t = RDMIG__STATE_TAKEN__INIT;

	r.addr = 0x10000;
	r.rkey = 7;
	r.size = 4u << 20;
	good(CT_STATE_RING, &r.base);
	r.addr = 0;
	bad(CT_STATE_RING, &r.base, "STATE_RING: address 0");
	r.addr = 0x10000;
	r.size = (4u << 20) + 4096;
	bad(CT_STATE_RING, &r.base, "STATE_RING: size 4198400 is not a power of two in "
	    "65536..67108864");
	r.size = 32u << 10;
	bad(CT_STATE_RING, &r.base, "STATE_RING: size 32768 is not a power of two in "
	    "65536..67108864");
	r.size = 128u << 20;
	bad(CT_STATE_RING, &r.base, "STATE_RING: size 134217728 is not a power of two in "
	    "65536..67108864");
	r.size = 64u << 10;
	r.addr = UINT64_MAX - 4096;
	bad(CT_STATE_RING, &r.base, "STATE_RING: 65536 bytes at 0xffffffffffffefff wrap "
	    "the address space");
	w.length = 1;
	good(CT_STATE_WRITTEN, &w.base);
	w.length = 0;
	bad(CT_STATE_WRITTEN, &w.base, "STATE_WRITTEN: length 0 is not in 1..67108864");
	w.length = (64u << 20) + 1;
	bad(CT_STATE_WRITTEN, &w.base, "STATE_WRITTEN: length 67108865 is not in "
	    "1..67108864");
	t.taken = UINT64_MAX;
	good(CT_STATE_TAKEN, &t.base);
}
END_TEST

START_TEST(rt_complete)
{
	uint8_t d8[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, d64[64];
	ProtobufCBinaryData dig[2] = { { 8, d8 }, { 64, d64 } };
	Rdmig__Complete c = RDMIG__COMPLETE__INIT, *co;
	Rdmig__CompleteAck a = RDMIG__COMPLETE_ACK__INIT, *ao;
	ProtobufCMessage *out;

	memset(d64, 0xee, sizeof(d64));
	c.state_bytes = 123456789;
	c.iteration = 4;
	c.n_digests = 2;
	c.digests = dig;
	ck_assert_int_eq(rt(CT_COMPLETE, &c.base, &out), 0);
	co = (Rdmig__Complete *)out;
	ck_assert_uint_eq(co->state_bytes, 123456789);
	ck_assert_uint_eq(co->iteration, 4);
	ck_assert_uint_eq(co->n_digests, 2);
	ck_assert_uint_eq(co->digests[0].len, 8);
	ck_assert_mem_eq(co->digests[0].data, d8, 8);
	ck_assert_uint_eq(co->digests[1].len, 64);
	ck_assert_mem_eq(co->digests[1].data, d64, 64);
	ctrl_msg_free(NULL, out);
	a.ok = 1;
	a.n_digests = 1;
	a.digests = dig;
	ck_assert_int_eq(rt(CT_COMPLETE_ACK, &a.base, &out), 0);
	ao = (Rdmig__CompleteAck *)out;
	ck_assert(ao->ok);
	ck_assert_uint_eq(ao->n_digests, 1);
	ck_assert_mem_eq(ao->digests[0].data, d8, 8);
	ctrl_msg_free(NULL, out);
}
END_TEST

START_TEST(rt_error)
{
	Rdmig__Error m = RDMIG__ERROR__INIT, *mo;
	ProtobufCMessage *out;
	static char text[1026];

	m.code = -ENOSPC;
	m.message = "block \"ram1\": no space left";
	ck_assert_int_eq(rt(CT_ERROR, &m.base, &out), 0);
	mo = (Rdmig__Error *)out;
	ck_assert_int_eq(mo->code, -ENOSPC);
	ck_assert_str_eq(mo->message, "block \"ram1\": no space left");
	ck_assert(!mo->guest_never_ran);
	ctrl_msg_free(NULL, out);
	/* Control characters cannot reach the operator's terminal. */
	m.code = INT32_MIN;
	m.message = "bad\033[2Jthing\n\xc3\xa9";
	ck_assert_int_eq(rt(CT_ERROR, &m.base, &out), 0);
	mo = (Rdmig__Error *)out;
	ck_assert_int_eq(mo->code, INT32_MIN);
	ck_assert_str_eq(mo->message, "bad?[2Jthing???");
	ctrl_msg_free(NULL, out);
	memset(text, 'x', 1024);
	m.message = text;
	good(CT_ERROR, &m.base);
	text[1024] = 'x';
	bad(CT_ERROR, &m.base, "ERROR: message of 1025 bytes exceeds the limit of 1024");
}
END_TEST

/* A destination's word that its guest never ran, both ways; and its
 * absence, which is all an older destination sends, reads as "it may
 * have run". */
START_TEST(rt_error_guest_never_ran)
{
	/* An older destination's ERROR: code -5 (zigzag 9), message "x". */
	static const uint8_t old[] = { 0x08, 0x09, 0x12, 0x01, 'x' };
	Rdmig__Error m = RDMIG__ERROR__INIT, *mo;
	ProtobufCMessage *out;
	struct ctrl_hdr h;
	int with, without;

	m.code = -EIO;
	m.message = "the postcopy_start callback failed: the VMM did not read its state";
	m.guest_never_ran = 1;
	ck_assert_int_eq(rt(CT_ERROR, &m.base, &out), 0);
	mo = (Rdmig__Error *)out;
	ck_assert(mo->guest_never_ran);
	ck_assert_int_eq(mo->code, -EIO);
	ctrl_msg_free(NULL, out);
	with = ctrl_encode(CT_ERROR, 1, &m.base, frame, sizeof(frame), &e);
	m.guest_never_ran = 0;
	ck_assert_int_eq(rt(CT_ERROR, &m.base, &out), 0);
	ck_assert(!((Rdmig__Error *)out)->guest_never_ran);
	ctrl_msg_free(NULL, out);
	/* False is not sent at all: the bytes are an older destination's. */
	without = ctrl_encode(CT_ERROR, 1, &m.base, frame, sizeof(frame), &e);
	ck_assert_int_eq(with - without, 2);
	h = (struct ctrl_hdr){ .len = sizeof(old), .type = CT_ERROR, .credits = 1 };
	ctrl_hdr_put(frame, &h);
	memcpy(frame + CTRL_HDR_LEN, old, sizeof(old));
	ck_assert_int_eq(ctrl_decode(frame, CTRL_HDR_LEN + sizeof(old), MSG_MAX, NULL, &h, &out,
				     &e), 0);
	mo = (Rdmig__Error *)out;
	ck_assert_int_eq(mo->code, -5);
	ck_assert_str_eq(mo->message, "x");
	ck_assert(!mo->guest_never_ran);
	ctrl_msg_free(NULL, out);
}
END_TEST

START_TEST(rt_auth)
{
	uint8_t n[65];
	Rdmig__AuthChallenge c = RDMIG__AUTH_CHALLENGE__INIT, *co;
	Rdmig__AuthResponse r = RDMIG__AUTH_RESPONSE__INIT, *ro;
	ProtobufCMessage *out;

	memset(n, 0x5a, sizeof(n));
	c.nonce.data = n;
	c.nonce.len = 16;
	ck_assert_int_eq(rt(CT_AUTH_CHALLENGE, &c.base, &out), 0);
	co = (Rdmig__AuthChallenge *)out;
	ck_assert_uint_eq(co->nonce.len, 16);
	ck_assert_mem_eq(co->nonce.data, n, 16);
	ctrl_msg_free(NULL, out);
	r.mac.data = n;
	r.mac.len = 64;
	ck_assert_int_eq(rt(CT_AUTH_RESPONSE, &r.base, &out), 0);
	ro = (Rdmig__AuthResponse *)out;
	ck_assert_uint_eq(ro->mac.len, 64);
	ctrl_msg_free(NULL, out);
	c.nonce.len = 15;
	bad(CT_AUTH_CHALLENGE, &c.base, "AUTH_CHALLENGE: nonce of 15 bytes, not 16..64");
	r.mac.len = 65;
	bad(CT_AUTH_RESPONSE, &r.base, "AUTH_RESPONSE: mac of 65 bytes, not 16..64");
}
END_TEST

/* Unknown fields from a newer peer are skipped. */
START_TEST(unknown_fields_ignored)
{
	/* ITER_ACK {iteration=7, field 9 (varint) = 1} */
	static const uint8_t pl[] = { 0x08, 7, 0x48, 1 };
	struct ctrl_hdr h = { .len = sizeof(pl), .type = CT_ITER_ACK };
	ProtobufCMessage *out;

	ctrl_hdr_put(frame, &h);
	memcpy(frame + 8, pl, sizeof(pl));
	ck_assert_int_eq(ctrl_decode(frame, 8 + sizeof(pl), MSG_MAX, NULL, &h, &out, &e), 0);
	ck_assert_uint_eq(((Rdmig__IterAck *)out)->iteration, 7);
	ctrl_msg_free(NULL, out);
}
END_TEST

/* Field number 0 spelled as a two-byte tag: protobuf-c keeps it as an unknown
 * field it cannot re-encode (found by fuzz_codec). */
START_TEST(field_number_zero_rejected)
{
	/* ITER_ACK {iteration=7, field 0 (varint, tag 80 00) = 5} */
	static const uint8_t top[] = { 0x08, 7, 0x80, 0x00, 5 };
	/* BLOCK_MAP_REQ {blocks {name "a", length 1, page_size 4096, field 0 = 1},
	 * chunk_shift 20} */
	static const uint8_t nested[] = { 0x0a, 11, 0x0a, 1, 'a', 0x10, 1, 0x18, 0x80,
					  0x20, 0x80, 0x00, 1, 0x10, 20 };
	struct ctrl_hdr h = { .len = sizeof(top), .type = CT_ITER_ACK };
	ProtobufCMessage *out = (ProtobufCMessage *)&out;

	ctrl_hdr_put(frame, &h);
	memcpy(frame + 8, top, sizeof(top));
	ck_assert_int_eq(ctrl_decode(frame, 8 + sizeof(top), MSG_MAX, NULL, &h, &out, &e), -EBADMSG);
	ck_assert_str_eq(e.msg, "ITER_ACK: malformed protobuf payload (field number 0)");
	ck_assert_ptr_null(out);
	h = (struct ctrl_hdr){ .len = sizeof(nested), .type = CT_BLOCK_MAP_REQ };
	ctrl_hdr_put(frame, &h);
	memcpy(frame + 8, nested, sizeof(nested));
	ck_assert_int_eq(ctrl_decode(frame, 8 + sizeof(nested), MSG_MAX, NULL, &h, &out, &e), -EBADMSG);
	ck_assert_str_eq(e.msg, "BLOCK_MAP_REQ: malformed protobuf payload (field number 0)");
	/* The same two-byte tag spelling for field 9 is fine. */
	frame[8 + 10] = 0xc8;
	ck_assert_int_eq(ctrl_decode(frame, 8 + sizeof(nested), MSG_MAX, NULL, &h, &out, &e), 0);
	ck_assert_str_eq(((Rdmig__BlockMapReq *)out)->blocks[0]->name, "a");
	ctrl_msg_free(NULL, out);
}
END_TEST

/* ---- limits ---------------------------------------------------------------- */

struct bm {
	Rdmig__BlockDesc b[CTRL_BLOCKS_MAX + 1];
	Rdmig__BlockDesc *bp[CTRL_BLOCKS_MAX + 1];
	char names[CTRL_BLOCKS_MAX + 1][16];
	Rdmig__BlockMapReq m;
};

static struct bm *bm_new(size_t n)
{
	struct bm *x = calloc(1, sizeof(*x));
	size_t i;

	ck_assert_ptr_nonnull(x);
	x->m = (Rdmig__BlockMapReq)RDMIG__BLOCK_MAP_REQ__INIT;
	for (i = 0; i <= CTRL_BLOCKS_MAX; i++) {
		x->b[i] = (Rdmig__BlockDesc)RDMIG__BLOCK_DESC__INIT;
		snprintf(x->names[i], sizeof(x->names[i]), "ram%zu", i);
		x->b[i].name = x->names[i];
		x->b[i].length = 1 << 20;
		x->b[i].page_size = 4096;
		x->bp[i] = &x->b[i];
	}
	x->m.blocks = x->bp;
	x->m.n_blocks = n;
	x->m.chunk_shift = 20;
	return x;
}

START_TEST(block_map_req_limits)
{
	struct bm *x = bm_new(3);
	char name[300];

	good(CT_BLOCK_MAP_REQ, &x->m.base);
	x->m.chunk_shift = 11;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: chunk_shift 11 outside 12..30");
	x->m.chunk_shift = 31;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: chunk_shift 31 outside 12..30");
	x->m.chunk_shift = 12;
	good(CT_BLOCK_MAP_REQ, &x->m.base);

	/* QEMU's RAMBlock idstrs are names too. */
	x->b[2].name = "/rom@etc/acpi/tables";
	good(CT_BLOCK_MAP_REQ, &x->m.base);
	x->b[2].name = "0000:00:02.0/vga.vram";
	good(CT_BLOCK_MAP_REQ, &x->m.base);
	x->b[2].name = "a\x01";
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: block 2 name \"a\\x01\" contains "
	    "byte 0x01, not printable ASCII");
	x->b[2].name = "caf\xc3\xa9";
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: block 2 name \"caf\\xc3\\xa9\" "
	    "contains byte 0xc3, not printable ASCII");
	x->b[2].name = "";
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: block 2 has an empty name");
	memset(name, 'n', 255);
	name[255] = '\0';
	x->b[2].name = name;
	good(CT_BLOCK_MAP_REQ, &x->m.base);
	name[255] = 'n';
	name[256] = '\0';
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: block 2 name "
	    "\"nnnnnnnnnnnnnnnnnnnnnnnn...\" is 256 bytes, the limit is 255");
	x->b[2].name = x->names[2];

	x->b[1].length = 0;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: block 1 \"ram1\": length 0 "
	    "outside 1..2^50");
	x->b[1].length = (1ull << 50) + 1;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: block 1 \"ram1\": length "
	    "1125899906842625 outside 1..2^50");
	x->b[1].length = 1;
	good(CT_BLOCK_MAP_REQ, &x->m.base);

	x->b[0].page_size = 3 << 12;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: block 0 \"ram0\": page_size "
	    "12288 is not a power of two in 4096..1073741824");
	x->b[0].page_size = 2048;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: block 0 \"ram0\": page_size "
	    "2048 is not a power of two in 4096..1073741824");
	x->b[0].page_size = 1u << 31;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: block 0 \"ram0\": page_size "
	    "2147483648 is not a power of two in 4096..1073741824");
	x->b[0].page_size = 0;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: block 0 \"ram0\": page_size "
	    "0 is not a power of two in 4096..1073741824");
	x->b[0].page_size = 2u << 20;
	good(CT_BLOCK_MAP_REQ, &x->m.base);

	x->b[2].name = "ram0";
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: blocks 0 and 2 are both named \"ram0\"");
	x->b[2].name = x->names[2];

	/* pin-all pieces: at least a chunk and 1 MiB, at most 1 GiB. */
	x->m.piece_shift = 24;
	good(CT_BLOCK_MAP_REQ, &x->m.base);
	x->m.piece_shift = 19;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: piece_shift 19 outside 20..30");
	x->m.piece_shift = 31;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: piece_shift 31 outside 20..30");
	free(x);
}
END_TEST

START_TEST(block_map_req_counts)
{
	struct bm *x = bm_new(CTRL_BLOCKS_MAX);

	good(CT_BLOCK_MAP_REQ, &x->m.base);
	/* A duplicate far apart in a maximal map is still found. */
	x->b[1000].name = x->names[3];
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: blocks 3 and 1000 are both named \"ram3\"");
	x->b[1000].name = x->names[1000];
	x->m.n_blocks = CTRL_BLOCKS_MAX + 1;
	bad(CT_BLOCK_MAP_REQ, &x->m.base, "BLOCK_MAP_REQ: 1025 blocks exceeds the limit of 1024");
	free(x);
}
END_TEST

START_TEST(block_map_resp_limits)
{
	static Rdmig__BlockDest d[CTRL_BLOCKS_MAX + 1];
	static Rdmig__BlockDest *dp[CTRL_BLOCKS_MAX + 1];
	Rdmig__BlockMapResp r = RDMIG__BLOCK_MAP_RESP__INIT;
	size_t i;

	for (i = 0; i <= CTRL_BLOCKS_MAX; i++) {
		d[i] = (Rdmig__BlockDest)RDMIG__BLOCK_DEST__INIT;
		d[i].base_addr = 0x1000 * (i + 1);
		dp[i] = &d[i];
	}
	r.blocks = dp;
	r.n_blocks = CTRL_BLOCKS_MAX;
	good(CT_BLOCK_MAP_RESP, &r.base);
	r.n_blocks = CTRL_BLOCKS_MAX + 1;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: 1025 blocks exceeds the limit of 1024");
	r.n_blocks = 4;
	d[3].base_addr = 0;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: block 3 has base address 0");
	d[3].base_addr = 0x4000;
	r.channels = 64;
	r.channel_port = 65535;
	r.channel_token = 1;
	good(CT_BLOCK_MAP_RESP, &r.base);
	r.channels = 65;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: 65 channels exceeds the limit of 64");
	r.channels = 2;
	r.channel_port = 65536;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: 2 channels without a valid port "
	    "and token");
	r.channel_port = 0;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: 2 channels without a valid port "
	    "and token");
	r.channel_port = 4000;
	r.channel_token = 0;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: 2 channels without a valid port "
	    "and token");
	r.channels = 1; /* one channel: port and token mean nothing */
	good(CT_BLOCK_MAP_RESP, &r.base);
	/* Post-copy's channels: two, with a port and a token, and within the
	 * limit with the data channels. */
	r.postcopy_channels = 2;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: post-copy channels without a valid "
	    "port and token");
	r.channel_token = 7;
	good(CT_BLOCK_MAP_RESP, &r.base);
	r.postcopy_channels = 3;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: 3 post-copy channels, not 0 or 2");
	r.postcopy_channels = 2;
	r.channels = 63;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: 63 channels and 2 post-copy channels "
	    "exceed the limit of 64");
	r.channels = 62;
	good(CT_BLOCK_MAP_RESP, &r.base);
}
END_TEST

START_TEST(resume_token_limits)
{
	static Rdmig__BlockDest d = RDMIG__BLOCK_DEST__INIT;
	static Rdmig__BlockDest *dp[1] = { &d };
	Rdmig__BlockMapResp r = RDMIG__BLOCK_MAP_RESP__INIT;
	uint8_t tok[CTRL_RESUME_TOKEN_LEN + 1];

	memset(tok, 0x5a, sizeof(tok));
	d.base_addr = 0x1000;
	r.blocks = dp;
	r.n_blocks = 1;
	r.postcopy_channels = 2;
	r.channel_port = 4000;
	r.channel_token = 7;
	r.resume_token.data = tok;
	r.resume_token.len = CTRL_RESUME_TOKEN_LEN;
	good(CT_BLOCK_MAP_RESP, &r.base);
	r.resume_token.len = CTRL_RESUME_TOKEN_LEN + 1;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: a resume token of 17 bytes, not 16");
	r.resume_token.len = 1;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: a resume token of 1 bytes, not 16");
	r.resume_token.len = CTRL_RESUME_TOKEN_LEN;
	memset(tok, 0, sizeof(tok));
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: an all-zero resume token");
	tok[15] = 1;
	good(CT_BLOCK_MAP_RESP, &r.base);
	r.postcopy_channels = 0;
	bad(CT_BLOCK_MAP_RESP, &r.base, "BLOCK_MAP_RESP: a resume token without post-copy");
	/* No token: no recovery, which is not an error. */
	r.resume_token.len = 0;
	good(CT_BLOCK_MAP_RESP, &r.base);
}
END_TEST

START_TEST(resume_limits)
{
	Rdmig__PostcopyResume q = RDMIG__POSTCOPY_RESUME__INIT;
	Rdmig__PostcopyResumed a = RDMIG__POSTCOPY_RESUMED__INIT;

	/* Any size of set: the destination compares it with its own. */
	q.pages = UINT64_MAX;
	good(CT_POSTCOPY_RESUME, &q.base);
	/* Every page in: no channels needed. */
	a.fault_pages = 4; a.background_pages = 6;
	good(CT_POSTCOPY_RESUMED, &a.base);
	/* Pages left: the channels' port and token, valid. */
	a.pages_left = 5;
	bad(CT_POSTCOPY_RESUMED, &a.base, "POSTCOPY_RESUMED: 5 pages left without a valid "
	    "port and token for the post-copy channels");
	a.channel_port = 65536; a.channel_token = 9;
	bad(CT_POSTCOPY_RESUMED, &a.base, "POSTCOPY_RESUMED: 5 pages left without a valid "
	    "port and token for the post-copy channels");
	a.channel_port = 4791; a.channel_token = 0;
	bad(CT_POSTCOPY_RESUMED, &a.base, "POSTCOPY_RESUMED: 5 pages left without a valid "
	    "port and token for the post-copy channels");
	a.channel_token = 9;
	good(CT_POSTCOPY_RESUMED, &a.base);
	/* The counts add up without wrapping. */
	a.fault_pages = UINT64_MAX; a.background_pages = 1;
	bad(CT_POSTCOPY_RESUMED, &a.base, "POSTCOPY_RESUMED: 18446744073709551615 + 1 + 5 "
	    "pages overflow");
	a.fault_pages = UINT64_MAX - 5;
	bad(CT_POSTCOPY_RESUMED, &a.base, "POSTCOPY_RESUMED: 18446744073709551610 + 1 + 5 "
	    "pages overflow");
	a.fault_pages = UINT64_MAX - 6; /* exactly UINT64_MAX in all */
	good(CT_POSTCOPY_RESUMED, &a.base);
}
END_TEST

START_TEST(postcopy_limits)
{
	static uint32_t b32[CTRL_PC_RANGES_MAX + 1];
	static uint64_t f64[CTRL_PC_RANGES_MAX + 1], c64[CTRL_PC_RANGES_MAX + 1];
	static uint8_t big[2u << 20];
	Rdmig__PostcopyKeys k = RDMIG__POSTCOPY_KEYS__INIT;
	Rdmig__PostcopyRanges r = RDMIG__POSTCOPY_RANGES__INIT;
	Rdmig__PostcopyDone d = RDMIG__POSTCOPY_DONE__INIT;
	ProtobufCMessage *out = NULL;
	size_t i;
	int n;

	for (i = 0; i <= CTRL_PC_RANGES_MAX; i++) {
		f64[i] = 2 * i;
		c64[i] = 1;
	}
	/* Keys: four arrays of one count, the piece size in 20..30. */
	k.block = b32; k.piece = f64; k.addr = c64; k.rkey = b32;
	k.n_block = k.n_piece = k.n_addr = k.n_rkey = 3;
	k.piece_shift = 24;
	good(CT_POSTCOPY_KEYS, &k.base);
	k.n_rkey = 2;
	bad(CT_POSTCOPY_KEYS, &k.base, "POSTCOPY_KEYS: 3 addresses and 2 rkeys for 3 pieces");
	k.n_rkey = 3;
	k.n_piece = 4;
	bad(CT_POSTCOPY_KEYS, &k.base, "POSTCOPY_KEYS: 3 block/piece blocks but 4 "
	    "block/piece indexes");
	k.n_piece = 3;
	k.piece_shift = 19;
	bad(CT_POSTCOPY_KEYS, &k.base, "POSTCOPY_KEYS: piece_shift 19 outside 20..30");
	k.piece_shift = 31;
	bad(CT_POSTCOPY_KEYS, &k.base, "POSTCOPY_KEYS: piece_shift 31 outside 20..30");
	k.piece_shift = 30;
	good(CT_POSTCOPY_KEYS, &k.base);
	/* Ranges: three arrays of one count, no page count 0, no overflow;
	 * empty only when it is the last message. */
	r.block = b32; r.first = f64; r.count = c64;
	r.n_block = r.n_first = r.n_count = 2;
	good(CT_POSTCOPY_RANGES, &r.base);
	r.n_count = 1;
	bad(CT_POSTCOPY_RANGES, &r.base, "POSTCOPY_RANGES: 2 blocks, 2 firsts and 1 counts");
	r.n_count = 2;
	c64[1] = 0;
	bad(CT_POSTCOPY_RANGES, &r.base, "POSTCOPY_RANGES: range 1, 0 pages from 2, is empty "
	    "or overflows");
	c64[1] = 1;
	f64[1] = UINT64_MAX;
	bad(CT_POSTCOPY_RANGES, &r.base, "POSTCOPY_RANGES: range 1, 1 pages from "
	    "18446744073709551615, is empty or overflows");
	f64[1] = 2;
	r.n_block = r.n_first = r.n_count = 0;
	r.last = 1;
	good(CT_POSTCOPY_RANGES, &r.base);
	r.last = 0;
	/* The count limit, before anything is unpacked. */
	r.n_block = r.n_first = r.n_count = CTRL_PC_RANGES_MAX + 1;
	n = ctrl_encode(CT_POSTCOPY_RANGES, 0, &r.base, big, sizeof(big), &e);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(ctrl_decode(big, (size_t)n, sizeof(big), NULL, NULL, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "POSTCOPY_RANGES: 65537 ranges exceeds the limit of 65536");
	/* Done: the two parts make the whole. */
	d.pages = 10; d.fault_pages = 3; d.background_pages = 7;
	good(CT_POSTCOPY_DONE, &d.base);
	d.background_pages = 6;
	bad(CT_POSTCOPY_DONE, &d.base, "POSTCOPY_DONE: 3 pages by faults and 6 by the "
	    "background pass do not make 10");
	d.fault_pages = UINT64_MAX;
	d.pages = 5;
	bad(CT_POSTCOPY_DONE, &d.base, "POSTCOPY_DONE: 18446744073709551615 pages by faults and "
	    "6 by the background pass do not make 5");
}
END_TEST

START_TEST(postcopy_max_fits)
{
	static const uint32_t sizes[] = { 4096, 8192, 65536, 1u << 20, CTRL_MSG_MAX };
	static uint32_t b32[CTRL_PC_RANGES_MAX];
	static uint64_t a64[CTRL_PC_RANGES_MAX];
	Rdmig__PostcopyKeys k = RDMIG__POSTCOPY_KEYS__INIT;
	Rdmig__PostcopyRanges r = RDMIG__POSTCOPY_RANGES__INIT;
	uint8_t *buf = malloc(CTRL_MSG_MAX);
	size_t i, n;

	ck_assert_ptr_nonnull(buf);
	for (i = 0; i < CTRL_PC_RANGES_MAX; i++) {
		b32[i] = UINT32_MAX;
		a64[i] = UINT64_MAX;
	}
	k.block = k.rkey = b32; k.piece = k.addr = a64; k.piece_shift = 30;
	r.block = b32; r.first = r.count = a64; r.last = 1;
	ck_assert_uint_eq(ctrl_pc_ranges_max(CTRL_MSG_MAX), CTRL_PC_RANGES_MAX);
	ck_assert_uint_eq(ctrl_pc_keys_max(CTRL_MSG_MAX), CTRL_PC_KEYS_MAX);
	for (i = 0; i < RD_ARRAY_SIZE(sizes); i++) {
		n = ctrl_pc_keys_max(sizes[i]);
		ck_assert_uint_gt(n, 0);
		k.n_block = k.n_piece = k.n_addr = k.n_rkey = n;
		ck_assert_int_gt(ctrl_encode(CT_POSTCOPY_KEYS, 0, &k.base, buf, sizes[i], &e), 0);
		n = ctrl_pc_ranges_max(sizes[i]);
		ck_assert_uint_gt(n, 0);
		r.n_block = r.n_first = r.n_count = n;
		ck_assert_int_gt(ctrl_encode(CT_POSTCOPY_RANGES, 0, &r.base, buf, sizes[i], &e), 0);
	}
	free(buf);
}
END_TEST

START_TEST(register_limits)
{
	static uint32_t b32[CTRL_REGISTER_MAX + 1];
	static uint64_t i64[CTRL_REGISTER_MAX + 1];
	Rdmig__RegisterReq q = RDMIG__REGISTER_REQ__INIT;
	Rdmig__RegisterResp r = RDMIG__REGISTER_RESP__INIT;

	q.chunk_block = q.release_block = b32;
	q.chunk_index = q.release_index = i64;
	q.n_chunk_block = 3;
	q.n_chunk_index = 2;
	bad(CT_REGISTER_REQ, &q.base, "REGISTER_REQ: 3 chunk blocks but 2 chunk indexes");
	q.n_chunk_block = q.n_chunk_index = 2;
	q.n_release_index = 1;
	bad(CT_REGISTER_REQ, &q.base, "REGISTER_REQ: 0 release blocks but 1 release indexes");
	q.n_release_index = 0;
	q.n_chunk_block = q.n_chunk_index = CTRL_REGISTER_MAX + 1;
	bad(CT_REGISTER_REQ, &q.base, "REGISTER_REQ: 4097 chunks exceeds the limit of 4096");
	q.n_chunk_block = q.n_chunk_index = CTRL_REGISTER_MAX;
	q.n_release_block = q.n_release_index = CTRL_REGISTER_MAX;
	good(CT_REGISTER_REQ, &q.base);
	q.n_release_block = q.n_release_index = CTRL_REGISTER_MAX + 1;
	bad(CT_REGISTER_REQ, &q.base, "REGISTER_REQ: 4097 releases exceeds the limit of 4096");

	r.rkeys = b32;
	r.n_rkeys = CTRL_REGISTER_MAX;
	good(CT_REGISTER_RESP, &r.base);
	r.n_rkeys = CTRL_REGISTER_MAX + 1;
	bad(CT_REGISTER_RESP, &r.base, "REGISTER_RESP: 4097 rkeys exceeds the limit of 4096");
}
END_TEST

START_TEST(zero_ranges_limits)
{
	static uint32_t blk[CTRL_ZERO_RANGES_MAX + 1];
	static uint64_t off[CTRL_ZERO_RANGES_MAX + 1], len[CTRL_ZERO_RANGES_MAX + 1];
	static uint8_t big[1u << 20];
	Rdmig__ZeroRanges z = RDMIG__ZERO_RANGES__INIT;
	ProtobufCMessage *out = NULL;
	size_t i;
	int n;

	for (i = 0; i <= CTRL_ZERO_RANGES_MAX; i++)
		len[i] = 1;
	z.block = blk; z.offset = off; z.length = len;
	z.n_block = 2; z.n_offset = 2; z.n_length = 1;
	bad(CT_ZERO_RANGES, &z.base, "ZERO_RANGES: 2 blocks, 2 offsets and 1 lengths");
	z.n_length = 3;
	bad(CT_ZERO_RANGES, &z.base, "ZERO_RANGES: 2 blocks, 2 offsets and 3 lengths");
	z.n_length = 2;
	len[1] = 0;
	bad(CT_ZERO_RANGES, &z.base, "ZERO_RANGES: range 1 has length 0");
	len[1] = 1;
	off[1] = UINT64_MAX;
	bad(CT_ZERO_RANGES, &z.base, "ZERO_RANGES: range 1 offset 18446744073709551615 "
	    "+ length 1 overflows");
	off[1] = UINT64_MAX - 1;
	good(CT_ZERO_RANGES, &z.base);
	off[1] = 0;
	/* One message covers at most 1 GiB: the destination's work per
	 * message is bounded. */
	len[0] = CTRL_ZERO_BYTES_MAX;
	bad(CT_ZERO_RANGES, &z.base, "ZERO_RANGES: the ranges cover more than 1073741824 bytes");
	len[0] = CTRL_ZERO_BYTES_MAX - 1;
	good(CT_ZERO_RANGES, &z.base);
	len[0] = 1;
	/* The count limit needs a frame bigger than MSG_MAX. */
	z.n_block = z.n_offset = z.n_length = CTRL_ZERO_RANGES_MAX + 1;
	n = ctrl_encode(CT_ZERO_RANGES, 0, &z.base, big, sizeof(big), &e);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(ctrl_decode(big, (size_t)n, sizeof(big), NULL, NULL, &out, &e), -EPROTO);
	ck_assert_str_eq(e.msg, "ZERO_RANGES: 65537 ranges exceeds the limit of 65536");
	z.n_block = z.n_offset = z.n_length = CTRL_ZERO_RANGES_MAX;
	n = ctrl_encode(CT_ZERO_RANGES, 0, &z.base, big, sizeof(big), &e);
	ck_assert_int_eq(ctrl_decode(big, (size_t)n, sizeof(big), NULL, NULL, &out, &e), 0);
	ctrl_msg_free(NULL, out);
}
END_TEST

START_TEST(pages_limits)
{
	static uint8_t data[3 * 4096];
	uint32_t blk[2] = { 0, 1 };
	uint64_t off[2] = { 0, 8192 }, len[2] = { 4096, 8192 };
	Rdmig__Pages m = RDMIG__PAGES__INIT;
	ProtobufCMessage *out = NULL;
	const Rdmig__Pages *got;

	m.block = blk; m.offset = off; m.length = len;
	m.n_block = m.n_offset = m.n_length = 2;
	m.data.data = data;
	m.data.len = sizeof(data);
	data[4096] = 7;
	ck_assert_int_eq(rt(CT_PAGES, &m.base, &out), 0);
	got = (const Rdmig__Pages *)out;
	ck_assert_uint_eq(got->n_block, 2);
	ck_assert_uint_eq(got->length[1], 8192);
	ck_assert_uint_eq(got->data.len, sizeof(data));
	ck_assert_uint_eq(got->data.data[4096], 7);
	ctrl_msg_free(NULL, out);
	m.data.len = sizeof(data) - 1;
	bad(CT_PAGES, &m.base, "PAGES: runs of 12288 bytes with 12287 bytes of data");
	m.data.len = sizeof(data);
	m.n_length = 1;
	bad(CT_PAGES, &m.base, "PAGES: 2 blocks, 2 offsets and 1 lengths");
	m.n_length = 2;
	len[0] = 0;
	bad(CT_PAGES, &m.base, "PAGES: run 0 has length 0");
	len[0] = 4096;
	off[1] = UINT64_MAX - 100;
	bad(CT_PAGES, &m.base, "PAGES: run 1 offset 18446744073709551515 + length 8192 "
	    "overflows");
	/* Lengths whose sum wraps to the data's size are refused too. */
	off[1] = 0;
	len[0] = 4096 + 1;
	len[1] = UINT64_MAX;
	m.data.len = 4096;
	bad(CT_PAGES, &m.base, "PAGES: run 1 offset 0 + length 18446744073709551615 overflows");
}
END_TEST

/* The largest PAGES a sender gathers for a frame size fits that frame. */
START_TEST(pages_max_fits)
{
	static uint8_t data[65536];
	static uint32_t blk[16];
	static uint64_t off[16], len[16];
	Rdmig__Pages m = RDMIG__PAGES__INIT;
	size_t runs = 16, max = ctrl_pages_data_max(MSG_MAX, runs), i;

	ck_assert_uint_gt(max, 60000);
	for (i = 0; i < runs; i++) {
		blk[i] = UINT32_MAX;
		off[i] = UINT64_MAX / 2;
		len[i] = max / runs;
	}
	len[runs - 1] += max % runs;
	m.block = blk; m.offset = off; m.length = len;
	m.n_block = m.n_offset = m.n_length = runs;
	m.data.data = data;
	m.data.len = max;
	ck_assert_int_gt(ctrl_encode(CT_PAGES, 0xffff, &m.base, frame, MSG_MAX, &e), 0);
	ck_assert_uint_eq(ctrl_pages_data_max(100, 16), 0);
}
END_TEST

START_TEST(digest_limits)
{
	static uint8_t d[65];
	static ProtobufCBinaryData dig[CTRL_DIGESTS_MAX + 1];
	Rdmig__Complete c = RDMIG__COMPLETE__INIT;
	Rdmig__CompleteAck a = RDMIG__COMPLETE_ACK__INIT;
	size_t i;

	for (i = 0; i <= CTRL_DIGESTS_MAX; i++)
		dig[i] = (ProtobufCBinaryData){ 32, d };
	c.digests = a.digests = dig;
	c.n_digests = a.n_digests = CTRL_DIGESTS_MAX;
	good(CT_COMPLETE, &c.base);
	good(CT_COMPLETE_ACK, &a.base);
	c.n_digests = a.n_digests = CTRL_DIGESTS_MAX + 1;
	bad(CT_COMPLETE, &c.base, "COMPLETE: 1025 digests exceeds the limit of 1024");
	bad(CT_COMPLETE_ACK, &a.base, "COMPLETE_ACK: 1025 digests exceeds the limit of 1024");
	c.n_digests = a.n_digests = 3;
	dig[2].len = 7;
	bad(CT_COMPLETE, &c.base, "COMPLETE: digest 2 is 7 bytes, not 8..64");
	dig[2].len = 65;
	bad(CT_COMPLETE_ACK, &a.base, "COMPLETE_ACK: digest 2 is 65 bytes, not 8..64");
	dig[2].len = 0;
	bad(CT_COMPLETE, &c.base, "COMPLETE: digest 2 is 0 bytes, not 8..64");
}
END_TEST

START_TEST(check_rejects_wrong_kind)
{
	Rdmig__IterAck a = RDMIG__ITER_ACK__INIT;

	ck_assert_int_eq(ctrl_msg_check(CT_STATE, &a.base, MSG_MAX, &e), -EPROTO);
	ck_assert_int_eq(ctrl_msg_check(CT_ITER_ACK, &a.base, MSG_MAX, &e), 0);
	ck_assert_int_eq(ctrl_msg_check(CT_CREDIT, NULL, MSG_MAX, &e), 0);
	ck_assert_int_eq(ctrl_msg_check(CT_ITER_ACK, NULL, MSG_MAX, &e), -EPROTO);
	ck_assert_int_eq(ctrl_msg_check(99, NULL, MSG_MAX, &e), -EPROTO);
}
END_TEST

/* ---- sizing ------------------------------------------------------------------ */

/* The bound is exact: the largest STATE fits, one byte more does not. */
START_TEST(state_max_is_exact)
{
	Rdmig__State s = RDMIG__STATE__INIT;
	static uint8_t dummy[1];
	uint32_t m;
	size_t n;

	s.data.data = dummy; /* get_packed_size never reads the bytes */
	for (m = 10; m < 300000; m++) {
		n = ctrl_state_max(m);
		s.data.len = n;
		ck_assert_uint_le(CTRL_HDR_LEN + protobuf_c_message_get_packed_size(&s.base), m);
		s.data.len = n + 1;
		ck_assert_uint_gt(CTRL_HDR_LEN + protobuf_c_message_get_packed_size(&s.base), m);
	}
	ck_assert_uint_eq(ctrl_state_max(4096), 4096 - 8 - 1 - 2);
	ck_assert_uint_eq(ctrl_state_max(CTRL_MSG_MAX), CTRL_MSG_MAX - 8 - 1 - 4);
	ck_assert_uint_eq(ctrl_state_max(0), 0);
	ck_assert_uint_eq(ctrl_state_max(9), 0);
}
END_TEST

START_TEST(state_max_encodes)
{
	static const uint32_t sizes[] = { 4096, 16394, 16395, 16396, 65536 };
	Rdmig__State s = RDMIG__STATE__INIT;
	static uint8_t data[65536], buf[65536];
	ProtobufCMessage *out;
	size_t i;
	int n;

	s.data.data = data;
	for (i = 0; i < RD_ARRAY_SIZE(sizes); i++) {
		s.data.len = ctrl_state_max(sizes[i]);
		n = ctrl_encode(CT_STATE, 0, &s.base, buf, sizes[i], &e);
		ck_assert_int_gt(n, 0);
		ck_assert_int_le(n, (int)sizes[i]);
		ck_assert_int_eq(ctrl_decode(buf, (size_t)n, sizes[i], NULL, NULL, &out, &e), 0);
		ctrl_msg_free(NULL, out);
		s.data.len++;
		ck_assert_int_eq(ctrl_encode(CT_STATE, 0, &s.base, buf, sizes[i], &e), -EMSGSIZE);
	}
}
END_TEST

/* Fills a REGISTER_REQ of @n refs (split between chunks and releases) with
 * worst-case values and returns its frame size. */
static size_t register_frame(size_t n, size_t n_chunks, uint8_t *buf, size_t cap)
{
	static uint32_t b32[CTRL_REGISTER_MAX + 8];
	static uint64_t i64[CTRL_REGISTER_MAX + 8];
	Rdmig__RegisterReq q = RDMIG__REGISTER_REQ__INIT;
	size_t i;
	int len;

	for (i = 0; i < RD_ARRAY_SIZE(b32); i++) {
		b32[i] = UINT32_MAX;
		i64[i] = UINT64_MAX;
	}
	q.req_id = UINT64_MAX;
	q.chunk_block = q.release_block = b32;
	q.chunk_index = q.release_index = i64;
	q.n_chunk_block = q.n_chunk_index = n_chunks;
	q.n_release_block = q.n_release_index = n - n_chunks;
	len = ctrl_encode(CT_REGISTER_REQ, 0, &q.base, buf, cap, &e);
	ck_assert_msg(len > 0, "%s", e.msg);
	return (size_t)len;
}

START_TEST(register_max_fits)
{
	static const uint32_t sizes[] = { 4096, 8192, 32768, 65536, 65537, 1u << 20 };
	static uint8_t buf[1u << 20];
	size_t i, n;

	ck_assert_uint_eq(ctrl_register_max(4096), 270);
	ck_assert_uint_eq(ctrl_register_max(1u << 20), CTRL_REGISTER_MAX);
	ck_assert_uint_eq(ctrl_register_max(0), 0);
	for (i = 0; i < RD_ARRAY_SIZE(sizes); i++) {
		n = ctrl_register_max(sizes[i]);
		ck_assert_uint_gt(n, 0);
		ck_assert_uint_le(n, CTRL_REGISTER_MAX);
		ck_assert_uint_le(register_frame(n, n, buf, sizeof(buf)), sizes[i]);
		ck_assert_uint_le(register_frame(n, 0, buf, sizeof(buf)), sizes[i]);
		ck_assert_uint_le(register_frame(n, n / 2, buf, sizeof(buf)), sizes[i]);
		ck_assert_uint_le(register_frame(n, 1, buf, sizeof(buf)), sizes[i]);
	}
}
END_TEST

START_TEST(zero_ranges_max_fits)
{
	static const uint32_t sizes[] = { 4096, 8192, 65536, 1u << 20, CTRL_MSG_MAX };
	static uint32_t blk[CTRL_ZERO_RANGES_MAX];
	static uint64_t off[CTRL_ZERO_RANGES_MAX], len[CTRL_ZERO_RANGES_MAX];
	Rdmig__ZeroRanges z = RDMIG__ZERO_RANGES__INIT;
	uint8_t *buf = malloc(CTRL_MSG_MAX);
	size_t i, n;

	ck_assert_ptr_nonnull(buf);
	for (i = 0; i < CTRL_ZERO_RANGES_MAX; i++) {
		blk[i] = UINT32_MAX;
		off[i] = UINT64_MAX;
		len[i] = UINT64_MAX;
	}
	z.block = blk; z.offset = off; z.length = len;
	ck_assert_uint_eq(ctrl_zero_ranges_max(4096), 162);
	ck_assert_uint_eq(ctrl_zero_ranges_max(CTRL_MSG_MAX), CTRL_ZERO_RANGES_MAX);
	for (i = 0; i < RD_ARRAY_SIZE(sizes); i++) {
		n = ctrl_zero_ranges_max(sizes[i]);
		ck_assert_uint_gt(n, 0);
		z.n_block = z.n_offset = z.n_length = n;
		ck_assert_int_gt(ctrl_encode(CT_ZERO_RANGES, 0, &z.base, buf, sizes[i], &e), 0);
	}
	free(buf);
}
END_TEST

/* ---- decode arena ------------------------------------------------------------ */

/* The smallest msg_max, the default, and one where the arena is capped. */
static const uint32_t arena_msg_max[] = { 4096, 65536, 1u << 20 };
static uint8_t aframe[1u << 20];
static struct arena ar;

/* Encodes @m as @type in a frame of at most @msg_max bytes and decodes it
 * through ar. */
static ProtobufCMessage *arena_decode(unsigned type, const ProtobufCMessage *m,
				      uint32_t msg_max)
{
	ProtobufCMessage *out = NULL;
	int n = ctrl_encode(type, 0, m, aframe, msg_max, &e);

	ck_assert_msg(n > 0, "encode %s: %s", ctrl_type_name(type), e.msg);
	ck_assert_msg(ctrl_decode(aframe, (size_t)n, msg_max, &ar, NULL, &out, &e) == 0,
		      "decode %s: %s", ctrl_type_name(type), e.msg);
	return out;
}

/* The largest count in 1..@max with which @m (its arrays resized by @set)
 * still fits a frame of @msg_max bytes. */
static size_t fill_to(ProtobufCMessage *m, void (*set)(ProtobufCMessage *, size_t),
		      size_t max, uint32_t msg_max)
{
	size_t lo = 1, hi = max, mid;

	while (lo < hi) {
		mid = lo + (hi - lo + 1) / 2;
		set(m, mid);
		if (CTRL_HDR_LEN + protobuf_c_message_get_packed_size(m) <= msg_max)
			lo = mid;
		else
			hi = mid - 1;
	}
	set(m, lo);
	return lo;
}

static void set_register_req(ProtobufCMessage *m, size_t n)
{
	Rdmig__RegisterReq *q = (Rdmig__RegisterReq *)m;

	q->n_chunk_block = q->n_chunk_index = q->n_release_block = q->n_release_index = n;
}

static void set_register_resp(ProtobufCMessage *m, size_t n)
{
	((Rdmig__RegisterResp *)m)->n_rkeys = n;
}

static void set_zero_ranges(ProtobufCMessage *m, size_t n)
{
	Rdmig__ZeroRanges *z = (Rdmig__ZeroRanges *)m;

	z->n_block = z->n_offset = z->n_length = n;
}

static void set_pc_keys(ProtobufCMessage *m, size_t n)
{
	Rdmig__PostcopyKeys *k = (Rdmig__PostcopyKeys *)m;

	k->n_block = k->n_piece = k->n_addr = k->n_rkey = n;
}

static void set_pc_ranges(ProtobufCMessage *m, size_t n)
{
	Rdmig__PostcopyRanges *r = (Rdmig__PostcopyRanges *)m;

	r->n_block = r->n_first = r->n_count = n;
}

static void set_pin_keys(ProtobufCMessage *m, size_t n)
{
	Rdmig__PinKeys *k = (Rdmig__PinKeys *)m;

	k->n_block = k->n_piece = k->n_rkey = n;
}

/* Elements of one byte on the wire unpack to the most memory per frame
 * byte: the largest message of each kind that fits, as far as the arena is
 * concerned. */
static uint32_t a32[CTRL_ZERO_RANGES_MAX];
static uint64_t a64[CTRL_ZERO_RANGES_MAX], ones[CTRL_ZERO_RANGES_MAX];
static uint8_t state_data[1u << 20];

static void arena_fill_inputs(void)
{
	size_t i;

	for (i = 0; i < CTRL_ZERO_RANGES_MAX; i++) {
		a32[i] = (uint32_t)(i & 0x7f);
		a64[i] = i & 0x7f;
		ones[i] = 1;
	}
	for (i = 0; i < sizeof(state_data); i++)
		state_data[i] = (uint8_t)(i * 7 + 3);
}

#define ck_assert_in_arena(p) ck_assert_msg(arena_owns(&ar, (p)), "%s outside the arena", #p)

START_TEST(arena_data_path_no_malloc)
{
	Rdmig__RegisterReq q = RDMIG__REGISTER_REQ__INIT;
	Rdmig__RegisterResp r = RDMIG__REGISTER_RESP__INIT;
	Rdmig__ZeroRanges z = RDMIG__ZERO_RANGES__INIT;
	Rdmig__PinKeys k = RDMIG__PIN_KEYS__INIT;
	Rdmig__PostcopyKeys pk = RDMIG__POSTCOPY_KEYS__INIT;
	Rdmig__PostcopyRanges pr = RDMIG__POSTCOPY_RANGES__INIT;
	Rdmig__State st = RDMIG__STATE__INIT;
	const Rdmig__RegisterReq *dq;
	const Rdmig__State *ds;
	ProtobufCMessage *out;
	size_t i, n;

	arena_fill_inputs();
	q.req_id = r.req_id = UINT64_MAX;
	q.chunk_block = q.release_block = r.rkeys = k.block = k.rkey = z.block = a32;
	q.chunk_index = q.release_index = k.piece = z.offset = a64;
	z.length = ones;
	pk.block = pk.rkey = pr.block = a32;
	pk.piece = pk.addr = pr.first = a64;
	pr.count = ones;
	pk.piece_shift = 20;
	st.data.data = state_data;
	for (i = 0; i < RD_ARRAY_SIZE(arena_msg_max); i++) {
		uint32_t mm = arena_msg_max[i];

		ck_assert_int_eq(arena_init(&ar, ctrl_arena_size(mm), &e), 0);

		n = fill_to(&q.base, set_register_req, CTRL_REGISTER_MAX, mm);
		out = arena_decode(CT_REGISTER_REQ, &q.base, mm);
		dq = (const Rdmig__RegisterReq *)out;
		ck_assert_uint_eq(dq->n_release_index, n);
		ck_assert_in_arena(out);
		ck_assert_in_arena(dq->chunk_block);
		ck_assert_in_arena(dq->chunk_index);
		ck_assert_in_arena(dq->release_block);
		ck_assert_in_arena(dq->release_index);
		ck_assert_uint_eq(dq->release_index[n - 1], a64[n - 1]);
		ctrl_msg_free(&ar, out);

		n = fill_to(&r.base, set_register_resp, CTRL_REGISTER_MAX, mm);
		out = arena_decode(CT_REGISTER_RESP, &r.base, mm);
		ck_assert_uint_eq(((Rdmig__RegisterResp *)out)->n_rkeys, n);
		ck_assert_in_arena(((Rdmig__RegisterResp *)out)->rkeys);
		ctrl_msg_free(&ar, out);

		n = fill_to(&z.base, set_zero_ranges, CTRL_ZERO_RANGES_MAX, mm);
		out = arena_decode(CT_ZERO_RANGES, &z.base, mm);
		ck_assert_uint_eq(((Rdmig__ZeroRanges *)out)->n_length, n);
		ck_assert_in_arena(((Rdmig__ZeroRanges *)out)->length);
		ctrl_msg_free(&ar, out);

		n = fill_to(&pk.base, set_pc_keys, CTRL_PC_KEYS_MAX, mm);
		out = arena_decode(CT_POSTCOPY_KEYS, &pk.base, mm);
		ck_assert_uint_eq(((Rdmig__PostcopyKeys *)out)->n_addr, n);
		ck_assert_in_arena(((Rdmig__PostcopyKeys *)out)->addr);
		ctrl_msg_free(&ar, out);

		n = fill_to(&pr.base, set_pc_ranges, CTRL_PC_RANGES_MAX, mm);
		out = arena_decode(CT_POSTCOPY_RANGES, &pr.base, mm);
		ck_assert_uint_eq(((Rdmig__PostcopyRanges *)out)->n_count, n);
		ck_assert_in_arena(((Rdmig__PostcopyRanges *)out)->count);
		ctrl_msg_free(&ar, out);

		n = fill_to(&k.base, set_pin_keys, CTRL_PIN_KEYS_MAX, mm);
		out = arena_decode(CT_PIN_KEYS, &k.base, mm);
		ck_assert_uint_eq(((Rdmig__PinKeys *)out)->n_piece, n);
		ck_assert_in_arena(((Rdmig__PinKeys *)out)->piece);
		ctrl_msg_free(&ar, out);

		st.data.len = ctrl_state_max(mm);
		out = arena_decode(CT_STATE, &st.base, mm);
		ds = (const Rdmig__State *)out;
		ck_assert_uint_eq(ds->data.len, st.data.len);
		ck_assert_in_arena(out);
		ck_assert_in_arena(ds->data.data);
		ck_assert_in_arena(ds->data.data + ds->data.len - 1);
		ck_assert(!memcmp(ds->data.data, state_data, ds->data.len));
		ctrl_msg_free(&ar, out);

		ck_assert_msg(ar.fallbacks == 0, "msg_max %u: %llu mallocs", mm,
			      (unsigned long long)ar.fallbacks);
		ck_assert_uint_eq(ar.used, 0);
		arena_fini(&ar);
	}
}
END_TEST

/* What does not fit comes from malloc, transparently: a STATE and a
 * REGISTER_REQ larger than a small arena, and a setup-time BLOCK_MAP_REQ of
 * 1024 blocks, larger than the arena of the smallest msg_max. */
START_TEST(arena_fallback)
{
	static Rdmig__BlockDesc bd[CTRL_BLOCKS_MAX], *bdp[CTRL_BLOCKS_MAX];
	static char names[CTRL_BLOCKS_MAX][16];
	Rdmig__BlockMapReq bm = RDMIG__BLOCK_MAP_REQ__INIT;
	Rdmig__RegisterReq q = RDMIG__REGISTER_REQ__INIT;
	Rdmig__State st = RDMIG__STATE__INIT;
	const Rdmig__BlockMapReq *dbm;
	const Rdmig__RegisterReq *dq;
	const Rdmig__State *ds;
	ProtobufCMessage *out;
	size_t i;

	arena_fill_inputs();
	ck_assert_int_eq(arena_init(&ar, 4096, &e), 0);
	st.data.data = state_data;
	st.data.len = 60000;
	out = arena_decode(CT_STATE, &st.base, MSG_MAX);
	ds = (const Rdmig__State *)out;
	ck_assert_in_arena(out);
	ck_assert(!arena_owns(&ar, ds->data.data));
	ck_assert_uint_eq(ds->data.len, 60000);
	ck_assert(!memcmp(ds->data.data, state_data, 60000));
	ctrl_msg_free(&ar, out);
	ck_assert_uint_eq(ar.fallbacks, 1);

	q.chunk_block = q.release_block = a32;
	q.chunk_index = q.release_index = a64;
	set_register_req(&q.base, CTRL_REGISTER_MAX);
	out = arena_decode(CT_REGISTER_REQ, &q.base, MSG_MAX);
	dq = (const Rdmig__RegisterReq *)out;
	ck_assert_uint_eq(dq->n_chunk_block, CTRL_REGISTER_MAX);
	for (i = 0; i < CTRL_REGISTER_MAX; i++) {
		ck_assert_uint_eq(dq->chunk_block[i], a32[i]);
		ck_assert_uint_eq(dq->chunk_index[i], a64[i]);
		ck_assert_uint_eq(dq->release_block[i], a32[i]);
		ck_assert_uint_eq(dq->release_index[i], a64[i]);
	}
	ctrl_msg_free(&ar, out);
	ck_assert_uint_gt(ar.fallbacks, 1);
	ck_assert_uint_eq(ar.used, 0);
	arena_fini(&ar);

	ck_assert_int_eq(arena_init(&ar, ctrl_arena_size(4096), &e), 0);
	for (i = 0; i < CTRL_BLOCKS_MAX; i++) {
		Rdmig__BlockDesc b = RDMIG__BLOCK_DESC__INIT;

		snprintf(names[i], sizeof(names[i]), "ram%zu", i);
		b.name = names[i];
		b.length = 4096;
		b.page_size = 4096;
		bd[i] = b;
		bdp[i] = &bd[i];
	}
	bm.blocks = bdp;
	bm.n_blocks = CTRL_BLOCKS_MAX;
	bm.chunk_shift = 20;
	out = arena_decode(CT_BLOCK_MAP_REQ, &bm.base, MSG_MAX);
	dbm = (const Rdmig__BlockMapReq *)out;
	ck_assert_uint_eq(dbm->n_blocks, CTRL_BLOCKS_MAX);
	for (i = 0; i < CTRL_BLOCKS_MAX; i++)
		ck_assert_str_eq(dbm->blocks[i]->name, names[i]);
	ck_assert_uint_gt(ar.fallbacks, 0);
	ctrl_msg_free(&ar, out);
	ck_assert_uint_eq(ar.used, 0);
	arena_fini(&ar);
}
END_TEST

/* Decode and free, again and again: the same bytes of the arena serve
 * every message, and nothing else is ever allocated. */
START_TEST(arena_reused)
{
	Rdmig__RegisterReq q = RDMIG__REGISTER_REQ__INIT;
	Rdmig__State st = RDMIG__STATE__INIT;
	ProtobufCMessage *out, *first = NULL;
	size_t used = 0, size;
	int i;

	arena_fill_inputs();
	ck_assert_int_eq(arena_init(&ar, ctrl_arena_size(MSG_MAX), &e), 0);
	size = ar.size;
	q.chunk_block = q.release_block = a32;
	q.chunk_index = q.release_index = a64;
	fill_to(&q.base, set_register_req, CTRL_REGISTER_MAX, MSG_MAX);
	st.data.data = state_data;
	st.data.len = ctrl_state_max(MSG_MAX);
	for (i = 0; i < 200; i++) {
		out = arena_decode(CT_REGISTER_REQ, &q.base, MSG_MAX);
		if (!first) {
			first = out;
			used = ar.used;
		}
		ck_assert_ptr_eq(out, first);
		ck_assert_uint_eq(ar.used, used);
		ctrl_msg_free(&ar, out);
		ck_assert_uint_eq(ar.used, 0);
		out = arena_decode(CT_STATE, &st.base, MSG_MAX);
		ck_assert_ptr_eq(out, first);
		ctrl_msg_free(&ar, out);
	}
	ck_assert_uint_eq(ar.fallbacks, 0);
	ck_assert_uint_eq(ar.size, size);
	arena_fini(&ar);
}
END_TEST

/* A message decoded while another still lives in the arena never lands on
 * it, and freeing the second leaves the first whole. */
START_TEST(arena_two_live)
{
	Rdmig__RegisterReq q = RDMIG__REGISTER_REQ__INIT;
	Rdmig__State st = RDMIG__STATE__INIT;
	const Rdmig__RegisterReq *dq;
	ProtobufCMessage *m1, *m2;
	size_t used1, used2, i;

	arena_fill_inputs();
	ck_assert_int_eq(arena_init(&ar, ctrl_arena_size(MSG_MAX), &e), 0);
	q.chunk_block = q.release_block = a32;
	q.chunk_index = q.release_index = a64;
	set_register_req(&q.base, 1000);
	m1 = arena_decode(CT_REGISTER_REQ, &q.base, MSG_MAX);
	used1 = ar.used;
	st.data.data = state_data;
	st.data.len = 20000;
	m2 = arena_decode(CT_STATE, &st.base, MSG_MAX);
	ck_assert_in_arena(m2);
	ck_assert((const uint8_t *)m2 >= ar.buf + used1);
	used2 = ar.used;
	ctrl_msg_free(&ar, m2);
	ck_assert_uint_eq(ar.used, used2); /* m1 still lives there */
	dq = (const Rdmig__RegisterReq *)m1;
	for (i = 0; i < 1000; i++)
		ck_assert_uint_eq(dq->chunk_index[i], a64[i]);
	ctrl_msg_free(&ar, m1);
	ck_assert_uint_eq(ar.used, 0);
	ck_assert_uint_eq(ar.fallbacks, 0);
	arena_fini(&ar);
}
END_TEST

/* A message that unpacks but fails its checks gives its space back. */
START_TEST(arena_failed_decode)
{
	Rdmig__RegisterReq q = RDMIG__REGISTER_REQ__INIT;
	ProtobufCMessage *out = NULL;
	int n;

	arena_fill_inputs();
	ck_assert_int_eq(arena_init(&ar, ctrl_arena_size(MSG_MAX), &e), 0);
	q.chunk_block = a32;
	q.chunk_index = a64;
	q.n_chunk_block = 3;
	q.n_chunk_index = 2;
	n = ctrl_encode(CT_REGISTER_REQ, 0, &q.base, aframe, MSG_MAX, &e);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(ctrl_decode(aframe, (size_t)n, MSG_MAX, &ar, NULL, &out, &e), -EPROTO);
	ck_assert_ptr_null(out);
	ck_assert_uint_eq(ar.used, 0);
	ck_assert_uint_eq(ar.holders, 0);
	arena_fini(&ar);
}
END_TEST

START_TEST(arena_size_bounds)
{
	uint32_t m;
	size_t prev = 0, n;

	/* Below the cap every payload byte is allowed 8 bytes unpacked. */
	ck_assert_uint_ge(ctrl_arena_size(4096), 8 * (4096 - CTRL_HDR_LEN));
	ck_assert_uint_ge(ctrl_arena_size(65536), 8 * (65536 - CTRL_HDR_LEN));
	ck_assert_uint_eq(ctrl_arena_size(CTRL_MSG_MAX), 2u << 20);
	for (m = CTRL_MSG_MIN; m <= CTRL_MSG_MAX; m += 4093) {
		n = ctrl_arena_size(m);
		ck_assert_uint_ge(n, prev);
		ck_assert_uint_le(n, 2u << 20);
		prev = n;
	}
}
END_TEST

void codec_cases(Suite *s)
{
	TCase *tc = tu_case(s, "header", 0);

	tcase_add_test(tc, hdr_layout);
	tcase_add_test(tc, type_names);
	tcase_add_test(tc, hdr_short);
	tcase_add_test(tc, hdr_unknown_type);
	tcase_add_test(tc, hdr_length_mismatch);
	tcase_add_test(tc, hdr_too_big);
	tcase_add_test(tc, header_only_types);
	tcase_add_test(tc, empty_payloads);
	tcase_add_test(tc, encode_errors);
	tcase_add_test(tc, truncated_protobuf);
	tcase_add_test(tc, malformed_protobuf);
	tcase_add_test(tc, unknown_field_cap);
	tcase_add_test(tc, unknown_field_cap_nested);
	tcase_add_test(tc, count_limit_before_unpack);
	tc = tu_case(s, "round trip", 0);
	tcase_add_test(tc, rt_block_map);
	tcase_add_test(tc, rt_register);
	tcase_add_test(tc, rt_zero_ranges);
	tcase_add_test(tc, rt_iterations);
	tcase_add_test(tc, rt_state);
	tcase_add_test(tc, state_ring_limits);
	tcase_add_test(tc, rt_complete);
	tcase_add_test(tc, rt_error);
	tcase_add_test(tc, rt_error_guest_never_ran);
	tcase_add_test(tc, rt_auth);
	tcase_add_test(tc, unknown_fields_ignored);
	tcase_add_test(tc, field_number_zero_rejected);
	tc = tu_case(s, "limits", 0);
	tcase_add_test(tc, block_map_req_limits);
	tcase_add_test(tc, block_map_req_counts);
	tcase_add_test(tc, block_map_resp_limits);
	tcase_add_test(tc, register_limits);
	tcase_add_test(tc, zero_ranges_limits);
	tcase_add_test(tc, pages_limits);
	tcase_add_test(tc, digest_limits);
	tcase_add_test(tc, check_rejects_wrong_kind);
	tcase_add_test(tc, postcopy_limits);
	tcase_add_test(tc, resume_token_limits);
	tcase_add_test(tc, resume_limits);
	tc = tu_case(s, "sizing", 60);
	tcase_add_test(tc, state_max_is_exact);
	tcase_add_test(tc, state_max_encodes);
	tcase_add_test(tc, register_max_fits);
	tcase_add_test(tc, zero_ranges_max_fits);
	tcase_add_test(tc, pages_max_fits);
	tcase_add_test(tc, postcopy_max_fits);
	tc = tu_case(s, "decode arena", 60);
	tcase_add_test(tc, arena_data_path_no_malloc);
	tcase_add_test(tc, arena_fallback);
	tcase_add_test(tc, arena_reused);
	tcase_add_test(tc, arena_two_live);
	tcase_add_test(tc, arena_failed_decode);
	tcase_add_test(tc, arena_size_bounds);
}
