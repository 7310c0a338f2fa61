#include "codec.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include "arena.h"
#include "msgcheck.h"
#include "pbscan.h"

struct ctrl_desc {
	const char *name;
	const ProtobufCMessageDescriptor *desc; /* NULL: header only */
	const struct pbscan_limit *limits;      /* top-level repeated fields */
};

static const struct pbscan_limit blocks_limits[] = {
	{ 1, "blocks", CTRL_BLOCKS_MAX }, { 0, NULL, 0 },
};
static const struct pbscan_limit register_req_limits[] = {
	{ 2, "chunks", CTRL_REGISTER_MAX }, { 3, "chunks", CTRL_REGISTER_MAX },
	{ 4, "releases", CTRL_REGISTER_MAX }, { 5, "releases", CTRL_REGISTER_MAX },
	{ 0, NULL, 0 },
};
static const struct pbscan_limit register_resp_limits[] = {
	{ 2, "rkeys", CTRL_REGISTER_MAX }, { 0, NULL, 0 },
};
static const struct pbscan_limit pin_keys_limits[] = {
	{ 1, "keys", CTRL_PIN_KEYS_MAX }, { 2, "keys", CTRL_PIN_KEYS_MAX },
	{ 3, "keys", CTRL_PIN_KEYS_MAX }, { 0, NULL, 0 },
};
static const struct pbscan_limit zero_ranges_limits[] = {
	{ 1, "ranges", CTRL_ZERO_RANGES_MAX }, { 2, "ranges", CTRL_ZERO_RANGES_MAX },
	{ 3, "ranges", CTRL_ZERO_RANGES_MAX }, { 0, NULL, 0 },
};
static const struct pbscan_limit pages_limits[] = {
	{ 1, "runs", CTRL_PAGES_RUNS_MAX }, { 2, "runs", CTRL_PAGES_RUNS_MAX },
	{ 3, "runs", CTRL_PAGES_RUNS_MAX }, { 0, NULL, 0 },
};
static const struct pbscan_limit pc_keys_limits[] = {
	{ 2, "keys", CTRL_PC_KEYS_MAX }, { 3, "keys", CTRL_PC_KEYS_MAX },
	{ 4, "keys", CTRL_PC_KEYS_MAX }, { 5, "keys", CTRL_PC_KEYS_MAX }, { 0, NULL, 0 },
};
static const struct pbscan_limit pc_ranges_limits[] = {
	{ 1, "ranges", CTRL_PC_RANGES_MAX }, { 2, "ranges", CTRL_PC_RANGES_MAX },
	{ 3, "ranges", CTRL_PC_RANGES_MAX }, { 0, NULL, 0 },
};
static const struct pbscan_limit complete_limits[] = {
	{ 3, "digests", CTRL_DIGESTS_MAX }, { 0, NULL, 0 },
};
static const struct pbscan_limit complete_ack_limits[] = {
	{ 2, "digests", CTRL_DIGESTS_MAX }, { 0, NULL, 0 },
};

/* One row per control message type; its stateless limits are msgcheck's
 * table.  A type without a row here is unknown to ctrl_hdr_get. */
static const struct ctrl_desc types[CT_TYPE_MAX] = {
	[CT_BLOCK_MAP_REQ] = { "BLOCK_MAP_REQ", &rdmig__block_map_req__descriptor,
			       blocks_limits },
	[CT_BLOCK_MAP_RESP] = { "BLOCK_MAP_RESP", &rdmig__block_map_resp__descriptor,
				blocks_limits },
	[CT_REGISTER_REQ] = { "REGISTER_REQ", &rdmig__register_req__descriptor,
			      register_req_limits },
	[CT_REGISTER_RESP] = { "REGISTER_RESP", &rdmig__register_resp__descriptor,
			       register_resp_limits },
	[CT_ZERO_RANGES] = { "ZERO_RANGES", &rdmig__zero_ranges__descriptor,
			     zero_ranges_limits },
	[CT_ITER_END] = { "ITER_END", &rdmig__iter_end__descriptor, NULL },
	[CT_ITER_ACK] = { "ITER_ACK", &rdmig__iter_ack__descriptor, NULL },
	[CT_STATE] = { "STATE", &rdmig__state__descriptor, NULL },
	[CT_COMPLETE] = { "COMPLETE", &rdmig__complete__descriptor, complete_limits },
	[CT_COMPLETE_ACK] = { "COMPLETE_ACK", &rdmig__complete_ack__descriptor,
			      complete_ack_limits },
	[CT_ERROR] = { "ERROR", &rdmig__error__descriptor, NULL },
	[CT_CREDIT] = { "CREDIT", NULL, NULL },
	[CT_KEEPALIVE] = { "KEEPALIVE", NULL, NULL },
	[CT_AUTH_CHALLENGE] = { "AUTH_CHALLENGE", &rdmig__auth_challenge__descriptor,
				NULL },
	[CT_AUTH_RESPONSE] = { "AUTH_RESPONSE", &rdmig__auth_response__descriptor, NULL },
	[CT_PIN_KEYS] = { "PIN_KEYS", &rdmig__pin_keys__descriptor, pin_keys_limits },
	[CT_PAGES] = { "PAGES", &rdmig__pages__descriptor, pages_limits },
	[CT_PROGRESS] = { "PROGRESS", &rdmig__progress__descriptor, NULL },
	[CT_STATE_RING] = { "STATE_RING", &rdmig__state_ring__descriptor, NULL },
	[CT_STATE_WRITTEN] = { "STATE_WRITTEN", &rdmig__state_written__descriptor, NULL },
	[CT_STATE_TAKEN] = { "STATE_TAKEN", &rdmig__state_taken__descriptor, NULL },
	[CT_POSTCOPY_KEYS] = { "POSTCOPY_KEYS", &rdmig__postcopy_keys__descriptor,
			       pc_keys_limits },
	[CT_POSTCOPY_RANGES] = { "POSTCOPY_RANGES", &rdmig__postcopy_ranges__descriptor,
				 pc_ranges_limits },
	[CT_POSTCOPY_DONE] = { "POSTCOPY_DONE", &rdmig__postcopy_done__descriptor, NULL },
	[CT_POSTCOPY_RESUME] = { "POSTCOPY_RESUME", &rdmig__postcopy_resume__descriptor,
				 NULL },
	[CT_POSTCOPY_RESUMED] = { "POSTCOPY_RESUMED", &rdmig__postcopy_resumed__descriptor,
				  NULL },
};

static const struct ctrl_desc *type_desc(unsigned type)
{
	if (type == 0 || type >= CT_TYPE_MAX || !types[type].name)
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

int ctrl_decode(const void *buf, size_t byte_len, uint32_t msg_max, struct arena *a,
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
	rc = pbscan_msg(d->desc, payload, hh.len, d->limits, d->name, err);
	if (rc)
		return rc;
	if (a)
		arena_hold(a);
	m = protobuf_c_message_unpack(d->desc, a ? &a->pc : NULL, hh.len, payload);
	if (!m) {
		if (a)
			arena_release(a);
		return rd_err_set(err, -EBADMSG, "%s: malformed protobuf payload "
				  "(%" PRIu32 " bytes)", d->name, hh.len);
	}
	rc = ctrl_msg_check(hh.type, m, msg_max, err);
	if (rc) {
		ctrl_msg_free(a, m);
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
	return msgcheck(type, msg, msg_max, err);
}

void ctrl_msg_free(struct arena *a, ProtobufCMessage *m)
{
	if (!m)
		return;
	protobuf_c_message_free_unpacked(m, a ? &a->pc : NULL);
	if (a)
		arena_release(a);
}

/* ---- decode arena -----------------------------------------------------------
 * What protobuf-c 1.x's unpack allocates for a message with an L-byte
 * payload, and so what an arena must hold for the data path's messages
 * (REGISTER_REQ/RESP, STATE, ZERO_RANGES, PIN_KEYS, and post-copy's
 * POSTCOPY_KEYS and POSTCOPY_RANGES) to need no malloc:
 * - the message struct: under 128 bytes for any of ours;
 * - one array per repeated field present, sized by its element count.  A
 *   packed element takes at least one wire byte and unpacks to at most 8
 *   (a uint64), and bytes and strings are copied as they are (len, +1 for a
 *   string's NUL, never more than their own wire bytes), so no payload
 *   unpacks to more than 8 L.  The count limits, which the pre-scan enforces
 *   before unpacking, also cap the arrays: at most ARENA_ARRAYS_MAX bytes
 *   (ZERO_RANGES, the largest), plus at most L of copied bytes;
 * - per field occurrence beyond the first 16 (kept on its stack), 32 bytes
 *   of scanned-member slabs that double from 32 entries; unpack frees them
 *   at the end, which in an arena means they stay until it is reused.  Our
 *   encoder packs repeated fields, and the pre-scan allows at most 64
 *   unknown or repeated non-repeated fields beyond one per declared field,
 *   so 16 + 32 + 64 + 128 = 240 occurrences (7 KiB of slabs) cover them;
 * - a 24-byte record per unknown field (at most ~70: under 2 KiB);
 * - up to 15 bytes of padding per piece for 16-byte alignment (~150 pieces
 *   at most: under 3 KiB).
 * ARENA_SLACK covers the last four with room to spare.  ARENA_CAP binds
 * only for a ctrl_msg_max over about 750 KiB, and then only a STATE of more
 * than the cap less the slack takes the malloc fallback; so does anything
 * sent unpacked, which is legal protobuf but not what we send. */
#define ARENA_SLACK (16u << 10)
#define ARENA_CAP (2u << 20)
#define ARENA_ARRAYS_MAX ((size_t)CTRL_ZERO_RANGES_MAX * \
			  (sizeof(uint32_t) + 2 * sizeof(uint64_t)))

_Static_assert(2 * (size_t)CTRL_REGISTER_MAX * (sizeof(uint32_t) + sizeof(uint64_t)) <=
	       ARENA_ARRAYS_MAX, "REGISTER_REQ's arrays outgrew ARENA_ARRAYS_MAX");
_Static_assert((size_t)CTRL_PIN_KEYS_MAX * (2 * sizeof(uint32_t) + sizeof(uint64_t)) <=
	       ARENA_ARRAYS_MAX, "PIN_KEYS's arrays outgrew ARENA_ARRAYS_MAX");
_Static_assert((size_t)CTRL_PC_KEYS_MAX * (2 * sizeof(uint32_t) + 2 * sizeof(uint64_t)) <=
	       ARENA_ARRAYS_MAX, "POSTCOPY_KEYS's arrays outgrew ARENA_ARRAYS_MAX");
_Static_assert((size_t)CTRL_PC_RANGES_MAX * (sizeof(uint32_t) + 2 * sizeof(uint64_t)) <=
	       ARENA_ARRAYS_MAX, "POSTCOPY_RANGES's arrays outgrew ARENA_ARRAYS_MAX");
_Static_assert(ARENA_SLACK + ARENA_ARRAYS_MAX <= ARENA_CAP,
	       "the largest ZERO_RANGES no longer fits under ARENA_CAP");

size_t ctrl_arena_size(uint32_t msg_max)
{
	size_t payload = msg_max > CTRL_HDR_LEN ? msg_max - CTRL_HDR_LEN : 0;
	size_t need = 8 * payload;

	if (need > ARENA_ARRAYS_MAX + payload)
		need = ARENA_ARRAYS_MAX + payload;
	need += ARENA_SLACK;
	return need < ARENA_CAP ? need : ARENA_CAP;
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

size_t ctrl_pages_data_max(uint32_t msg_max, size_t runs)
{
	size_t fixed = 3 * PACKED_OVERHEAD + runs * (VARINT32_MAX + 2 * VARINT64_MAX) +
		       1 + VARINT32_MAX;

	return fit(msg_max, fixed, 1, SIZE_MAX);
}

size_t ctrl_zero_ranges_max(uint32_t msg_max)
{
	return fit(msg_max, 3 * PACKED_OVERHEAD,
		   VARINT32_MAX + 2 * VARINT64_MAX, CTRL_ZERO_RANGES_MAX);
}

size_t ctrl_pc_keys_max(uint32_t msg_max)
{
	/* piece_shift, then four packed arrays. */
	return fit(msg_max, 1 + VARINT32_MAX + 4 * PACKED_OVERHEAD,
		   2 * VARINT32_MAX + 2 * VARINT64_MAX, CTRL_PC_KEYS_MAX);
}

size_t ctrl_pc_ranges_max(uint32_t msg_max)
{
	/* Three packed arrays, then last. */
	return fit(msg_max, 3 * PACKED_OVERHEAD + 2, VARINT32_MAX + 2 * VARINT64_MAX,
		   CTRL_PC_RANGES_MAX);
}
