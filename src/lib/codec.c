#include "codec.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privdata.h"

typedef int (*check_fn)(const ProtobufCMessage *m, uint32_t msg_max,
			struct rd_err *err);

/* The limit on the element count of a repeated field, enforced before
 * unpacking (see scan_msg). */
struct count_limit {
	uint32_t field;   /* field number; 0 ends a table */
	const char *noun; /* what the elements are, for messages */
	uint32_t max;
};

#define COUNT_LIMITS_MAX 4

struct ctrl_desc {
	const char *name;
	const ProtobufCMessageDescriptor *desc; /* NULL: header only */
	check_fn check;                         /* NULL: nothing to check */
	const struct count_limit *limits;       /* top-level repeated fields */
};

static const struct count_limit blocks_limits[] = {
	{ 1, "blocks", CTRL_BLOCKS_MAX }, { 0, NULL, 0 },
};
static const struct count_limit register_req_limits[] = {
	{ 2, "chunks", CTRL_REGISTER_MAX }, { 3, "chunks", CTRL_REGISTER_MAX },
	{ 4, "releases", CTRL_REGISTER_MAX }, { 5, "releases", CTRL_REGISTER_MAX },
	{ 0, NULL, 0 },
};
static const struct count_limit register_resp_limits[] = {
	{ 2, "rkeys", CTRL_REGISTER_MAX }, { 0, NULL, 0 },
};
static const struct count_limit pin_keys_limits[] = {
	{ 1, "keys", CTRL_PIN_KEYS_MAX }, { 2, "keys", CTRL_PIN_KEYS_MAX },
	{ 3, "keys", CTRL_PIN_KEYS_MAX }, { 0, NULL, 0 },
};
static const struct count_limit zero_ranges_limits[] = {
	{ 1, "ranges", CTRL_ZERO_RANGES_MAX }, { 2, "ranges", CTRL_ZERO_RANGES_MAX },
	{ 3, "ranges", CTRL_ZERO_RANGES_MAX }, { 0, NULL, 0 },
};
static const struct count_limit complete_limits[] = {
	{ 3, "digests", CTRL_DIGESTS_MAX }, { 0, NULL, 0 },
};
static const struct count_limit complete_ack_limits[] = {
	{ 2, "digests", CTRL_DIGESTS_MAX }, { 0, NULL, 0 },
};

static int check_block_map_req(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_block_map_resp(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_register_req(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_register_resp(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_zero_ranges(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_state(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_complete(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_complete_ack(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_error(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_auth_challenge(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_auth_response(const ProtobufCMessage *, uint32_t, struct rd_err *);
static int check_pin_keys(const ProtobufCMessage *, uint32_t, struct rd_err *);

static const struct ctrl_desc types[CT_TYPE_MAX] = {
	[CT_BLOCK_MAP_REQ] = { "BLOCK_MAP_REQ", &rdmig__block_map_req__descriptor,
			       check_block_map_req, blocks_limits },
	[CT_BLOCK_MAP_RESP] = { "BLOCK_MAP_RESP", &rdmig__block_map_resp__descriptor,
				check_block_map_resp, blocks_limits },
	[CT_REGISTER_REQ] = { "REGISTER_REQ", &rdmig__register_req__descriptor,
			      check_register_req, register_req_limits },
	[CT_REGISTER_RESP] = { "REGISTER_RESP", &rdmig__register_resp__descriptor,
			       check_register_resp, register_resp_limits },
	[CT_ZERO_RANGES] = { "ZERO_RANGES", &rdmig__zero_ranges__descriptor,
			     check_zero_ranges, zero_ranges_limits },
	[CT_ITER_END] = { "ITER_END", &rdmig__iter_end__descriptor, NULL, NULL },
	[CT_ITER_ACK] = { "ITER_ACK", &rdmig__iter_ack__descriptor, NULL, NULL },
	[CT_STATE] = { "STATE", &rdmig__state__descriptor, check_state, NULL },
	[CT_COMPLETE] = { "COMPLETE", &rdmig__complete__descriptor, check_complete,
			  complete_limits },
	[CT_COMPLETE_ACK] = { "COMPLETE_ACK", &rdmig__complete_ack__descriptor,
			      check_complete_ack, complete_ack_limits },
	[CT_ERROR] = { "ERROR", &rdmig__error__descriptor, check_error, NULL },
	[CT_CREDIT] = { "CREDIT", NULL, NULL, NULL },
	[CT_KEEPALIVE] = { "KEEPALIVE", NULL, NULL, NULL },
	[CT_AUTH_CHALLENGE] = { "AUTH_CHALLENGE", &rdmig__auth_challenge__descriptor,
				check_auth_challenge, NULL },
	[CT_AUTH_RESPONSE] = { "AUTH_RESPONSE", &rdmig__auth_response__descriptor,
			       check_auth_response, NULL },
	[CT_PIN_KEYS] = { "PIN_KEYS", &rdmig__pin_keys__descriptor, check_pin_keys,
			  pin_keys_limits },
};

static const struct ctrl_desc *type_desc(unsigned type)
{
	if (type == 0 || type >= CT_TYPE_MAX)
		return NULL;
	return &types[type];
}

const char *ctrl_type_name(unsigned type)
{
	const struct ctrl_desc *d = type_desc(type);

	return d ? d->name : "unknown";
}

void ctrl_hdr_put(void *buf, const struct ctrl_hdr *h)
{
	uint8_t *p = buf;
	uint32_t len = htobe32(h->len);
	uint16_t type = htobe16(h->type), credits = htobe16(h->credits);

	memcpy(p, &len, 4);
	memcpy(p + 4, &type, 2);
	memcpy(p + 6, &credits, 2);
}

static void hdr_read(const uint8_t *p, struct ctrl_hdr *h)
{
	uint32_t len;
	uint16_t type, credits;

	memcpy(&len, p, 4);
	memcpy(&type, p + 4, 2);
	memcpy(&credits, p + 6, 2);
	h->len = be32toh(len);
	h->type = be16toh(type);
	h->credits = be16toh(credits);
}

int ctrl_hdr_get(const void *buf, size_t byte_len, uint32_t msg_max,
		 struct ctrl_hdr *h, struct rd_err *err)
{
	uint32_t limit = msg_max > CTRL_HDR_LEN ? msg_max - CTRL_HDR_LEN : 0;
	const struct ctrl_desc *d;
	struct ctrl_hdr hh;

	if (!buf || byte_len < CTRL_HDR_LEN)
		return rd_err_set(err, -EPROTO, "control message of %zu bytes is "
				  "shorter than its %d-byte header",
				  buf ? byte_len : 0, CTRL_HDR_LEN);
	hdr_read(buf, &hh);
	d = type_desc(hh.type);
	if (!d)
		return rd_err_set(err, -EPROTO, "unknown control message type %u",
				  hh.type);
	/* 64-bit sum: len near UINT32_MAX must not wrap. */
	if ((uint64_t)hh.len + CTRL_HDR_LEN != byte_len)
		return rd_err_set(err, -EPROTO, "%s: header says %" PRIu32 " payload "
				  "bytes but the message has %zu", d->name, hh.len,
				  byte_len - CTRL_HDR_LEN);
	if (hh.len > limit)
		return rd_err_set(err, -EPROTO, "%s: %" PRIu32 "-byte payload exceeds "
				  "the %" PRIu32 "-byte limit", d->name, hh.len, limit);
	if (!d->desc && hh.len)
		return rd_err_set(err, -EPROTO, "%s: header-only message carries a "
				  "%" PRIu32 "-byte payload", d->name, hh.len);
	*h = hh;
	return 0;
}

int ctrl_encode(unsigned type, uint16_t credits, const ProtobufCMessage *msg,
		void *buf, size_t cap, struct rd_err *err)
{
	const struct ctrl_desc *d = type_desc(type);
	struct ctrl_hdr h = { .type = (uint16_t)type, .credits = credits };
	size_t size = 0, limit = cap > INT_MAX ? INT_MAX : cap;

	if (!d)
		return rd_err_set(err, -EINVAL, "cannot encode unknown control "
				  "message type %u", type);
	if (!d->desc != !msg)
		return rd_err_set(err, -EINVAL, "%s: %s", d->name, msg ?
				  "header-only message given a payload" :
				  "no message to encode");
	if (msg && msg->descriptor != d->desc)
		return rd_err_set(err, -EINVAL, "%s: message is a %s, expected %s",
				  d->name, msg->descriptor->name, d->desc->name);
	if (msg)
		size = protobuf_c_message_get_packed_size(msg);
	if (limit < CTRL_HDR_LEN || size > limit - CTRL_HDR_LEN)
		return rd_err_set(err, -EMSGSIZE, "%s: %zu-byte message does not fit "
				  "in a %zu-byte control buffer", d->name,
				  size + CTRL_HDR_LEN, cap);
	if (msg && protobuf_c_message_pack(msg, (uint8_t *)buf + CTRL_HDR_LEN) != size)
		return rd_err_set(err, -EINVAL, "%s: protobuf packing produced an "
				  "unexpected size", d->name);
	h.len = (uint32_t)size;
	ctrl_hdr_put(buf, &h);
	return (int)(size + CTRL_HDR_LEN);
}

/* Peer text is printed by the receiver: control bytes could drive the
 * operator's terminal, so they are masked rather than trusted. */
static void sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			*s = '?';
}

/* ---- pre-scan ---------------------------------------------------------------
 * protobuf-c allocates while it parses: 32 bytes of bookkeeping per field
 * occurrence, an array per repeated field sized by the elements present and
 * a record per unknown field, all before any limit of ours can be checked.
 * A 16 MiB frame of two-byte fields made it allocate over 800 MiB.  This walk
 * over the encoding allocates nothing: it enforces the count limits and caps
 * unknown and repeated non-repeated fields first, so unpacking only ever
 * allocates what a valid message needs.  It follows protobuf-c's parsing
 * rules so that both count the same elements.  It also rejects field number
 * 0, which protobuf-c accepts when the tag is spelled in two bytes, keeps as
 * an unknown field and re-encodes as a tag it then refuses (found by
 * fuzz_codec). */

/* Occurrences of unknown fields, or repeats of a non-repeated field, one
 * message may carry beyond one per declared field: room for fields from a
 * newer peer, not for padding. */
#define SCAN_EXTRA_MAX 64
#define SCAN_DEPTH_MAX 4

static bool read_varint(const uint8_t *p, size_t len, size_t max_bytes,
			uint64_t *v, size_t *used)
{
	size_t i, n = len < max_bytes ? len : max_bytes;
	uint64_t r = 0;

	for (i = 0; i < n; i++) {
		r |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			*v = r;
			*used = i + 1;
			return true;
		}
	}
	return false;
}

/* Elements of a packed array of @t, counted as protobuf-c counts them. */
static bool packed_count(ProtobufCType t, const uint8_t *p, size_t len, size_t *n)
{
	size_t i, c = 0;

	switch (t) {
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_FIXED32:
	case PROTOBUF_C_TYPE_FLOAT:
		*n = len / 4;
		return len % 4 == 0;
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		*n = len / 8;
		return len % 8 == 0;
	case PROTOBUF_C_TYPE_BOOL:
		*n = len;
		return true;
	default: /* varints: one element per terminating byte */
		for (i = 0; i < len; i++)
			c += !(p[i] & 0x80);
		*n = c;
		return !len || !(p[len - 1] & 0x80);
	}
}

static bool packable(ProtobufCType t)
{
	return t != PROTOBUF_C_TYPE_STRING && t != PROTOBUF_C_TYPE_BYTES &&
	       t != PROTOBUF_C_TYPE_MESSAGE;
}

static int malformed(const char *type, const char *what, uint32_t field,
		     struct rd_err *err)
{
	return rd_err_set(err, -EBADMSG, "%s: malformed protobuf payload (%s %"
			  PRIu32 ")", type, what, field);
}

/* Reads one field's tag and skips its value; for a length-delimited field,
 * @val and @vlen return its payload. */
static int next_field(const uint8_t *p, size_t len, size_t *off, uint32_t *num,
		      unsigned *wt, const uint8_t **val, size_t *vlen,
		      const char *type, struct rd_err *err)
{
	uint64_t v;
	size_t used, rem;

	/* protobuf-c reads tags of up to 5 bytes, keeping 32 bits of v >> 3. */
	if (!read_varint(p + *off, len - *off, 5, &v, &used))
		return malformed(type, "bad tag at offset", (uint32_t)*off, err);
	*num = (uint32_t)(v >> 3);
	*wt = v & 7;
	*off += used;
	rem = len - *off;
	*val = NULL;
	*vlen = 0;
	if (*num == 0)
		return rd_err_set(err, -EBADMSG, "%s: malformed protobuf payload "
				  "(field number 0)", type);
	switch (*wt) {
	case PROTOBUF_C_WIRE_TYPE_VARINT:
		if (!read_varint(p + *off, rem, 10, &v, &used))
			return malformed(type, "bad varint in field", *num, err);
		*off += used;
		return 0;
	case PROTOBUF_C_WIRE_TYPE_64BIT:
	case PROTOBUF_C_WIRE_TYPE_32BIT:
		used = *wt == PROTOBUF_C_WIRE_TYPE_64BIT ? 8 : 4;
		if (rem < used)
			return malformed(type, "truncated field", *num, err);
		*off += used;
		return 0;
	case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED:
		if (!read_varint(p + *off, rem, 5, &v, &used) || v > rem - used)
			return malformed(type, "truncated field", *num, err);
		*val = p + *off + used;
		*vlen = (size_t)v;
		*off += used + (size_t)v;
		return 0;
	default:
		return malformed(type, "bad wire type in field", *num, err);
	}
}

static int scan_msg(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
		    size_t len, const struct count_limit *lim, unsigned depth,
		    const char *type, struct rd_err *err)
{
	size_t counts[COUNT_LIMITS_MAX] = { 0 }, extra = 0, off = 0, n = 0, i;
	const ProtobufCFieldDescriptor *f;
	const uint8_t *val = NULL;
	uint32_t num = 0;
	unsigned wt = 0;
	int rc;

	while (off < len) {
		rc = next_field(p, len, &off, &num, &wt, &val, &n, type, err);
		if (rc)
			return rc;
		f = protobuf_c_message_descriptor_get_field(desc, num);
		if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
		    wt == PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED) {
			if (depth >= SCAN_DEPTH_MAX)
				return malformed(type, "nesting too deep in field", num, err);
			rc = scan_msg(f->descriptor, val, n, NULL, depth + 1, type, err);
			if (rc)
				return rc;
		}
		for (i = 0; lim && lim[i].field && lim[i].field != num; i++)
			;
		if (!f || f->label != PROTOBUF_C_LABEL_REPEATED || !lim || !lim[i].field) {
			if (++extra > desc->n_fields + SCAN_EXTRA_MAX)
				return rd_err_set(err, -EPROTO, "%s: more than %zu unknown "
						  "or repeated fields", type,
						  (size_t)desc->n_fields + SCAN_EXTRA_MAX);
			continue;
		}
		if (wt == PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED && packable(f->type)) {
			if (!packed_count(f->type, val, n, &n))
				return malformed(type, "bad packed field", num, err);
		} else {
			n = 1;
		}
		counts[i] += n;
		if (counts[i] > lim[i].max)
			return rd_err_set(err, -EPROTO, "%s: %zu %s exceeds the limit of %"
					  PRIu32, type, counts[i], lim[i].noun, lim[i].max);
	}
	return 0;
}

int ctrl_decode(const void *buf, size_t byte_len, uint32_t msg_max,
		struct ctrl_hdr *h, ProtobufCMessage **out, struct rd_err *err)
{
	const struct ctrl_desc *d;
	const uint8_t *payload;
	ProtobufCMessage *m;
	struct ctrl_hdr hh;
	int rc;

	*out = NULL;
	rc = ctrl_hdr_get(buf, byte_len, msg_max, &hh, err);
	if (rc)
		return rc;
	if (h)
		*h = hh;
	d = type_desc(hh.type);
	if (!d->desc)
		return 0;
	payload = (const uint8_t *)buf + CTRL_HDR_LEN;
	rc = scan_msg(d->desc, payload, hh.len, d->limits, 0, d->name, err);
	if (rc)
		return rc;
	m = protobuf_c_message_unpack(d->desc, NULL, hh.len, payload);
	if (!m)
		return rd_err_set(err, -EBADMSG, "%s: malformed protobuf payload "
				  "(%" PRIu32 " bytes)", d->name, hh.len);
	rc = ctrl_msg_check(hh.type, m, msg_max, err);
	if (rc) {
		ctrl_msg_free(m);
		return rc;
	}
	if (hh.type == CT_ERROR)
		sanitize(((Rdmig__Error *)m)->message);
	*out = m;
	return 0;
}

int ctrl_msg_check(unsigned type, const ProtobufCMessage *msg, uint32_t msg_max,
		   struct rd_err *err)
{
	const struct ctrl_desc *d = type_desc(type);

	if (!d)
		return rd_err_set(err, -EPROTO, "unknown control message type %u",
				  type);
	if (!d->desc != !msg || (msg && msg->descriptor != d->desc))
		return rd_err_set(err, -EPROTO, "%s: wrong message kind", d->name);
	return d->check ? d->check(msg, msg_max, err) : 0;
}

void ctrl_msg_free(ProtobufCMessage *m)
{
	if (m)
		protobuf_c_message_free_unpacked(m, NULL);
}

/* ---- per-message limits ------------------------------------------------ */

/* Quotes peer text for an error message: at most 24 characters, non-printable
 * bytes as \xNN. */
static const char *quote(const char *s, char *buf, size_t len)
{
	size_t used = 0, n = 0;

	for (; *s && n < 24 && used + 5 < len; s++, n++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c <= 0x7e && c != '"' && c != '\\')
			buf[used++] = (char)c;
		else
			used += (size_t)snprintf(buf + used, len - used, "\\x%02x", c);
	}
	if (*s && used + 4 <= len) {
		memcpy(buf + used, "...", 3);
		used += 3;
	}
	buf[used] = '\0';
	return buf;
}

static int check_name(size_t i, const char *name, struct rd_err *err)
{
	size_t len = strlen(name), j;
	char q[128];

	if (!len)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: block %zu has an empty "
				  "name", i);
	if (len > CTRL_NAME_MAX)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: block %zu name \"%s\" "
				  "is %zu bytes, the limit is %d", i,
				  quote(name, q, sizeof(q)), len, CTRL_NAME_MAX);
	for (j = 0; j < len; j++) {
		unsigned char c = (unsigned char)name[j];

		if (c < 0x20 || c > 0x7e)
			return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: block %zu name "
					  "\"%s\" contains byte 0x%02x, not printable "
					  "ASCII", i, quote(name, q, sizeof(q)), c);
	}
	return 0;
}

static int check_block_desc(size_t i, const Rdmig__BlockDesc *b,
			    struct rd_err *err)
{
	int rc = check_name(i, b->name, err);

	if (rc)
		return rc;
	if (b->length < 1 || b->length > CTRL_BLOCK_LEN_MAX)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: block %zu \"%s\": "
				  "length %" PRIu64 " outside 1..2^50", i, b->name,
				  b->length);
	if (!rd_is_pow2(b->page_size) || b->page_size < CTRL_PAGE_MIN ||
	    b->page_size > CTRL_PAGE_MAX)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: block %zu \"%s\": "
				  "page_size %" PRIu32 " is not a power of two in "
				  "%u..%u", i, b->name, b->page_size, CTRL_PAGE_MIN,
				  CTRL_PAGE_MAX);
	return 0;
}

static int cmp_block_name(const void *a, const void *b, void *arg)
{
	Rdmig__BlockDesc *const *blocks = arg;
	uint16_t ia = *(const uint16_t *)a, ib = *(const uint16_t *)b;
	int c = strcmp(blocks[ia]->name, blocks[ib]->name);

	return c ? c : (ia > ib) - (ia < ib);
}

/* Sorting indices keeps this O(n log n) for the 1024-block worst case. */
static int check_unique_names(const Rdmig__BlockMapReq *m, struct rd_err *err)
{
	uint16_t idx[CTRL_BLOCKS_MAX];
	size_t i;

	for (i = 0; i < m->n_blocks; i++)
		idx[i] = (uint16_t)i;
	qsort_r(idx, m->n_blocks, sizeof(idx[0]), cmp_block_name, m->blocks);
	for (i = 1; i < m->n_blocks; i++)
		if (!strcmp(m->blocks[idx[i - 1]]->name, m->blocks[idx[i]]->name))
			return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: blocks %u and "
					  "%u are both named \"%s\"", idx[i - 1],
					  idx[i], m->blocks[idx[i]]->name);
	return 0;
}

static int check_block_map_req(const ProtobufCMessage *msg, uint32_t msg_max,
			       struct rd_err *err)
{
	const Rdmig__BlockMapReq *m = (const Rdmig__BlockMapReq *)msg;
	size_t i;
	int rc;

	(void)msg_max;
	if (!m->n_blocks)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: no blocks");
	if (m->n_blocks > CTRL_BLOCKS_MAX)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: %zu blocks exceeds the "
				  "limit of %d", m->n_blocks, CTRL_BLOCKS_MAX);
	if (m->chunk_shift < CTRL_CHUNK_SHIFT_MIN || m->chunk_shift > CTRL_CHUNK_SHIFT_MAX)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: chunk_shift %" PRIu32
				  " outside %d..%d", m->chunk_shift,
				  CTRL_CHUNK_SHIFT_MIN, CTRL_CHUNK_SHIFT_MAX);
	if (m->piece_shift && (m->piece_shift < m->chunk_shift ||
			       m->piece_shift > CTRL_CHUNK_SHIFT_MAX))
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: piece_shift %" PRIu32
				  " outside %" PRIu32 "..%d", m->piece_shift, m->chunk_shift,
				  CTRL_CHUNK_SHIFT_MAX);
	for (i = 0; i < m->n_blocks; i++) {
		rc = check_block_desc(i, m->blocks[i], err);
		if (rc)
			return rc;
	}
	return check_unique_names(m, err);
}

static int check_block_map_resp(const ProtobufCMessage *msg, uint32_t msg_max,
				struct rd_err *err)
{
	const Rdmig__BlockMapResp *m = (const Rdmig__BlockMapResp *)msg;
	size_t i;

	(void)msg_max;
	if (!m->n_blocks)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: no blocks");
	if (m->n_blocks > CTRL_BLOCKS_MAX)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: %zu blocks exceeds "
				  "the limit of %d", m->n_blocks, CTRL_BLOCKS_MAX);
	for (i = 0; i < m->n_blocks; i++)
		if (!m->blocks[i]->base_addr)
			return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: block %zu has "
					  "base address 0", i);
	if (m->channels > PD_CHANNELS_MAX)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: %u channels exceeds the "
				  "limit of %d", m->channels, PD_CHANNELS_MAX);
	if (m->channels > 1 && (!m->channel_port || m->channel_port > 65535 ||
				!m->channel_token))
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: %u channels without a "
				  "valid port and token", m->channels);
	return 0;
}

/* A parallel-array pair: (what)s counted by @n_a and @n_b must agree and stay
 * within @max. */
static int check_pair(const char *type, const char *what, size_t n_a, size_t n_b,
		      size_t max, struct rd_err *err)
{
	if (n_a != n_b)
		return rd_err_set(err, -EPROTO, "%s: %zu %s blocks but %zu %s indexes",
				  type, n_a, what, n_b, what);
	if (n_a > max)
		return rd_err_set(err, -EPROTO, "%s: %zu %ss exceeds the limit of %zu",
				  type, n_a, what, max);
	return 0;
}

static int check_register_req(const ProtobufCMessage *msg, uint32_t msg_max,
			      struct rd_err *err)
{
	const Rdmig__RegisterReq *m = (const Rdmig__RegisterReq *)msg;
	int rc;

	(void)msg_max;
	rc = check_pair("REGISTER_REQ", "chunk", m->n_chunk_block, m->n_chunk_index,
			CTRL_REGISTER_MAX, err);
	if (!rc)
		rc = check_pair("REGISTER_REQ", "release", m->n_release_block,
				m->n_release_index, CTRL_REGISTER_MAX, err);
	if (rc)
		return rc;
	if (!m->n_chunk_block && !m->n_release_block)
		return rd_err_set(err, -EPROTO, "REGISTER_REQ: no chunks and no "
				  "releases");
	return 0;
}

static int check_register_resp(const ProtobufCMessage *msg, uint32_t msg_max,
			       struct rd_err *err)
{
	const Rdmig__RegisterResp *m = (const Rdmig__RegisterResp *)msg;

	(void)msg_max;
	if (m->n_rkeys > CTRL_REGISTER_MAX)
		return rd_err_set(err, -EPROTO, "REGISTER_RESP: %zu rkeys exceeds the "
				  "limit of %d", m->n_rkeys, CTRL_REGISTER_MAX);
	return 0;
}

static int check_pin_keys(const ProtobufCMessage *msg, uint32_t msg_max,
			  struct rd_err *err)
{
	const Rdmig__PinKeys *m = (const Rdmig__PinKeys *)msg;
	int rc;

	(void)msg_max;
	rc = check_pair("PIN_KEYS", "block/piece", m->n_block, m->n_piece, CTRL_PIN_KEYS_MAX,
			err);
	if (!rc && m->n_rkey != m->n_block)
		rc = rd_err_set(err, -EPROTO, "PIN_KEYS: %zu rkeys for %zu pieces", m->n_rkey,
				m->n_block);
	if (!rc && !m->n_block)
		rc = rd_err_set(err, -EPROTO, "PIN_KEYS: no keys");
	return rc;
}

static int check_zero_ranges(const ProtobufCMessage *msg, uint32_t msg_max,
			     struct rd_err *err)
{
	const Rdmig__ZeroRanges *m = (const Rdmig__ZeroRanges *)msg;
	uint64_t end;
	size_t i;

	(void)msg_max;
	if (m->n_block != m->n_offset || m->n_block != m->n_length)
		return rd_err_set(err, -EPROTO, "ZERO_RANGES: %zu blocks, %zu offsets "
				  "and %zu lengths", m->n_block, m->n_offset,
				  m->n_length);
	if (!m->n_block)
		return rd_err_set(err, -EPROTO, "ZERO_RANGES: no ranges");
	if (m->n_block > CTRL_ZERO_RANGES_MAX)
		return rd_err_set(err, -EPROTO, "ZERO_RANGES: %zu ranges exceeds the "
				  "limit of %d", m->n_block, CTRL_ZERO_RANGES_MAX);
	for (i = 0; i < m->n_block; i++) {
		if (!m->length[i])
			return rd_err_set(err, -EPROTO, "ZERO_RANGES: range %zu has "
					  "length 0", i);
		if (rd_add_overflow_u64(m->offset[i], m->length[i], &end))
			return rd_err_set(err, -EPROTO, "ZERO_RANGES: range %zu offset %"
					  PRIu64 " + length %" PRIu64 " overflows", i,
					  m->offset[i], m->length[i]);
	}
	return 0;
}

static int check_state(const ProtobufCMessage *msg, uint32_t msg_max,
		       struct rd_err *err)
{
	const Rdmig__State *m = (const Rdmig__State *)msg;

	if (m->data.len > msg_max)
		return rd_err_set(err, -EPROTO, "STATE: %zu data bytes exceeds the "
				  "limit of %" PRIu32, m->data.len, msg_max);
	return 0;
}

static int check_digests(const char *type, size_t n,
			 const ProtobufCBinaryData *d, struct rd_err *err)
{
	size_t i;

	if (n > CTRL_DIGESTS_MAX)
		return rd_err_set(err, -EPROTO, "%s: %zu digests exceeds the limit of "
				  "%d", type, n, CTRL_DIGESTS_MAX);
	for (i = 0; i < n; i++)
		if (d[i].len < CTRL_DIGEST_MIN || d[i].len > CTRL_DIGEST_MAX)
			return rd_err_set(err, -EPROTO, "%s: digest %zu is %zu bytes, "
					  "not %d..%d", type, i, d[i].len,
					  CTRL_DIGEST_MIN, CTRL_DIGEST_MAX);
	return 0;
}

static int check_complete(const ProtobufCMessage *msg, uint32_t msg_max,
			  struct rd_err *err)
{
	const Rdmig__Complete *m = (const Rdmig__Complete *)msg;

	(void)msg_max;
	return check_digests("COMPLETE", m->n_digests, m->digests, err);
}

static int check_complete_ack(const ProtobufCMessage *msg, uint32_t msg_max,
			      struct rd_err *err)
{
	const Rdmig__CompleteAck *m = (const Rdmig__CompleteAck *)msg;

	(void)msg_max;
	return check_digests("COMPLETE_ACK", m->n_digests, m->digests, err);
}

static int check_error(const ProtobufCMessage *msg, uint32_t msg_max,
		       struct rd_err *err)
{
	const Rdmig__Error *m = (const Rdmig__Error *)msg;
	size_t len = strlen(m->message);

	(void)msg_max;
	if (len > CTRL_ERROR_MSG_MAX)
		return rd_err_set(err, -EPROTO, "ERROR: message of %zu bytes exceeds "
				  "the limit of %d", len, CTRL_ERROR_MSG_MAX);
	return 0;
}

static int check_auth(const char *type, const char *field, size_t len,
		      struct rd_err *err)
{
	if (len < CTRL_AUTH_MIN || len > CTRL_AUTH_MAX)
		return rd_err_set(err, -EPROTO, "%s: %s of %zu bytes, not %d..%d",
				  type, field, len, CTRL_AUTH_MIN, CTRL_AUTH_MAX);
	return 0;
}

static int check_auth_challenge(const ProtobufCMessage *msg, uint32_t msg_max,
				struct rd_err *err)
{
	(void)msg_max;
	return check_auth("AUTH_CHALLENGE", "nonce",
			  ((const Rdmig__AuthChallenge *)msg)->nonce.len, err);
}

static int check_auth_response(const ProtobufCMessage *msg, uint32_t msg_max,
			       struct rd_err *err)
{
	(void)msg_max;
	return check_auth("AUTH_RESPONSE", "mac",
			  ((const Rdmig__AuthResponse *)msg)->mac.len, err);
}

/* ---- sizing -------------------------------------------------------------- */

static size_t varint_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* Worst-case encodings: a u32 varint takes 5 bytes, a u64 10, a field tag 1
 * (all our field numbers are below 16), a packed field's length prefix at
 * most 5. */
#define VARINT32_MAX 5
#define VARINT64_MAX 10
#define PACKED_OVERHEAD (1 + 5)

size_t ctrl_state_max(uint32_t msg_max)
{
	size_t avail, k;

	/* Frame: header, tag of field 1, varint length, data. */
	if (msg_max < CTRL_HDR_LEN + 2)
		return 0;
	avail = msg_max - CTRL_HDR_LEN - 1;
	/* n + varint_len(n) grows with n: the first k (smallest, so largest n)
	 * whose n = avail - k needs at most k length bytes is the answer. */
	for (k = 1; k < avail; k++)
		if (varint_len(avail - k) <= k)
			return avail - k;
	return 0;
}

static size_t fit(uint32_t msg_max, size_t fixed, size_t per_item, size_t cap)
{
	size_t n;

	if (msg_max < CTRL_HDR_LEN + fixed)
		return 0;
	n = (msg_max - CTRL_HDR_LEN - fixed) / per_item;
	return n < cap ? n : cap;
}

size_t ctrl_register_max(uint32_t msg_max)
{
	/* req_id, then four packed arrays; each ref is a block and an index. */
	return fit(msg_max, 1 + VARINT64_MAX + 4 * PACKED_OVERHEAD,
		   VARINT32_MAX + VARINT64_MAX, CTRL_REGISTER_MAX);
}

size_t ctrl_pin_keys_max(uint32_t msg_max)
{
	return fit(msg_max, 3 * PACKED_OVERHEAD, 2 * VARINT32_MAX + VARINT64_MAX,
		   CTRL_PIN_KEYS_MAX);
}

size_t ctrl_zero_ranges_max(uint32_t msg_max)
{
	return fit(msg_max, 3 * PACKED_OVERHEAD,
		   VARINT32_MAX + 2 * VARINT64_MAX, CTRL_ZERO_RANGES_MAX);
}
