#include "msgcheck.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privdata.h"
#include "rdmig.pb-c.h"
#include "wire.h"

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

static int msgcheck_block_map_req(const ProtobufCMessage *msg, uint32_t msg_max,
				  struct rd_err *err)
{
	const Rdmig__BlockMapReq *m = (const Rdmig__BlockMapReq *)msg;
	uint32_t piece_min;
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
	/* Pieces of at least 1 MiB: a destination keeps an MR pointer per
	 * piece and registers one per step. */
	piece_min = m->chunk_shift > CTRL_PIECE_SHIFT_MIN ? m->chunk_shift : CTRL_PIECE_SHIFT_MIN;
	if (m->piece_shift && (m->piece_shift < piece_min ||
			       m->piece_shift > CTRL_CHUNK_SHIFT_MAX))
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_REQ: piece_shift %" PRIu32
				  " outside %" PRIu32 "..%d", m->piece_shift, piece_min,
				  CTRL_CHUNK_SHIFT_MAX);
	for (i = 0; i < m->n_blocks; i++) {
		rc = check_block_desc(i, m->blocks[i], err);
		if (rc)
			return rc;
	}
	return check_unique_names(m, err);
}

static bool all_zero(const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static int msgcheck_block_map_resp(const ProtobufCMessage *msg, uint32_t msg_max,
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
	if (m->postcopy_channels && m->postcopy_channels != CTRL_PC_CHANNELS)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: %u post-copy channels, not 0 "
				  "or %d", m->postcopy_channels, CTRL_PC_CHANNELS);
	if (m->postcopy_channels && (!m->channel_port || m->channel_port > 65535 ||
				     !m->channel_token))
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: post-copy channels without a "
				  "valid port and token");
	if ((m->channels > 1 ? m->channels : 1) + m->postcopy_channels > PD_CHANNELS_MAX)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: %u channels and %u post-copy "
				  "channels exceed the limit of %d", m->channels,
				  m->postcopy_channels, PD_CHANNELS_MAX);
	if (m->resume_token.len && m->resume_token.len != CTRL_RESUME_TOKEN_LEN)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: a resume token of %zu bytes, "
				  "not %d", m->resume_token.len, CTRL_RESUME_TOKEN_LEN);
	if (m->resume_token.len && all_zero(m->resume_token.data, m->resume_token.len))
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: an all-zero resume token");
	if (m->resume_token.len && !m->postcopy_channels)
		return rd_err_set(err, -EPROTO, "BLOCK_MAP_RESP: a resume token without "
				  "post-copy");
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

static int msgcheck_register_req(const ProtobufCMessage *msg, uint32_t msg_max,
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

static int msgcheck_register_resp(const ProtobufCMessage *msg, uint32_t msg_max,
				  struct rd_err *err)
{
	const Rdmig__RegisterResp *m = (const Rdmig__RegisterResp *)msg;

	(void)msg_max;
	if (m->n_rkeys > CTRL_REGISTER_MAX)
		return rd_err_set(err, -EPROTO, "REGISTER_RESP: %zu rkeys exceeds the "
				  "limit of %d", m->n_rkeys, CTRL_REGISTER_MAX);
	return 0;
}

static int msgcheck_pin_keys(const ProtobufCMessage *msg, uint32_t msg_max,
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

static int msgcheck_zero_ranges(const ProtobufCMessage *msg, uint32_t msg_max,
				struct rd_err *err)
{
	const Rdmig__ZeroRanges *m = (const Rdmig__ZeroRanges *)msg;
	uint64_t end, total = 0;
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
		if (rd_add_overflow_u64(total, m->length[i], &total) ||
		    total > CTRL_ZERO_BYTES_MAX)
			return rd_err_set(err, -EPROTO, "ZERO_RANGES: the ranges cover more "
					  "than %llu bytes", (unsigned long long)CTRL_ZERO_BYTES_MAX);
	}
	return 0;
}

static int msgcheck_pages(const ProtobufCMessage *msg, uint32_t msg_max, struct rd_err *err)
{
	const Rdmig__Pages *m = (const Rdmig__Pages *)msg;
	uint64_t sum = 0, end;
	size_t i;

	(void)msg_max;
	if (m->n_block != m->n_offset || m->n_block != m->n_length)
		return rd_err_set(err, -EPROTO, "PAGES: %zu blocks, %zu offsets and %zu "
				  "lengths", m->n_block, m->n_offset, m->n_length);
	if (!m->n_block || m->n_block > CTRL_PAGES_RUNS_MAX)
		return rd_err_set(err, -EPROTO, "PAGES: %zu runs, not 1..%d", m->n_block,
				  CTRL_PAGES_RUNS_MAX);
	for (i = 0; i < m->n_block; i++) {
		if (!m->length[i])
			return rd_err_set(err, -EPROTO, "PAGES: run %zu has length 0", i);
		if (rd_add_overflow_u64(m->offset[i], m->length[i], &end) ||
		    rd_add_overflow_u64(sum, m->length[i], &sum))
			return rd_err_set(err, -EPROTO, "PAGES: run %zu offset %" PRIu64
					  " + length %" PRIu64 " overflows", i, m->offset[i],
					  m->length[i]);
	}
	if (sum != m->data.len)
		return rd_err_set(err, -EPROTO, "PAGES: runs of %" PRIu64 " bytes with %zu "
				  "bytes of data", sum, m->data.len);
	return 0;
}

static int msgcheck_state(const ProtobufCMessage *msg, uint32_t msg_max,
			  struct rd_err *err)
{
	const Rdmig__State *m = (const Rdmig__State *)msg;

	if (m->data.len > msg_max)
		return rd_err_set(err, -EPROTO, "STATE: %zu data bytes exceeds the "
				  "limit of %" PRIu32, m->data.len, msg_max);
	return 0;
}

static int msgcheck_state_ring(const ProtobufCMessage *msg, uint32_t msg_max,
			       struct rd_err *err)
{
	const Rdmig__StateRing *m = (const Rdmig__StateRing *)msg;

	(void)msg_max;
	if (!m->addr)
		return rd_err_set(err, -EPROTO, "STATE_RING: address 0");
	if (m->size < CTRL_STATE_RING_MIN || m->size > CTRL_STATE_RING_MAX ||
	    (m->size & (m->size - 1)))
		return rd_err_set(err, -EPROTO, "STATE_RING: size %" PRIu32 " is not a power "
				  "of two in %u..%u", m->size, CTRL_STATE_RING_MIN,
				  CTRL_STATE_RING_MAX);
	if (m->addr > UINT64_MAX - m->size)
		return rd_err_set(err, -EPROTO, "STATE_RING: %" PRIu32 " bytes at 0x%" PRIx64
				  " wrap the address space", m->size, m->addr);
	return 0;
}

static int msgcheck_state_written(const ProtobufCMessage *msg, uint32_t msg_max,
				  struct rd_err *err)
{
	const Rdmig__StateWritten *m = (const Rdmig__StateWritten *)msg;

	(void)msg_max;
	if (!m->length || m->length > CTRL_STATE_RING_MAX)
		return rd_err_set(err, -EPROTO, "STATE_WRITTEN: length %" PRIu32 " is not in "
				  "1..%u", m->length, CTRL_STATE_RING_MAX);
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

static int msgcheck_complete(const ProtobufCMessage *msg, uint32_t msg_max,
			     struct rd_err *err)
{
	const Rdmig__Complete *m = (const Rdmig__Complete *)msg;

	(void)msg_max;
	return check_digests("COMPLETE", m->n_digests, m->digests, err);
}

static int msgcheck_complete_ack(const ProtobufCMessage *msg, uint32_t msg_max,
				 struct rd_err *err)
{
	const Rdmig__CompleteAck *m = (const Rdmig__CompleteAck *)msg;

	(void)msg_max;
	return check_digests("COMPLETE_ACK", m->n_digests, m->digests, err);
}

static int msgcheck_error(const ProtobufCMessage *msg, uint32_t msg_max,
			  struct rd_err *err)
{
	const Rdmig__Error *m = (const Rdmig__Error *)msg;
	size_t len = strlen(m->message);

	/* guest_never_ran: either value is acceptable here; whose word it
	 * is, the source decides (src_pc_peer_error). */
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

static int msgcheck_auth_challenge(const ProtobufCMessage *msg, uint32_t msg_max,
				   struct rd_err *err)
{
	(void)msg_max;
	return check_auth("AUTH_CHALLENGE", "nonce",
			  ((const Rdmig__AuthChallenge *)msg)->nonce.len, err);
}

static int msgcheck_auth_response(const ProtobufCMessage *msg, uint32_t msg_max,
				  struct rd_err *err)
{
	(void)msg_max;
	return check_auth("AUTH_RESPONSE", "mac",
			  ((const Rdmig__AuthResponse *)msg)->mac.len, err);
}

static int msgcheck_postcopy_keys(const ProtobufCMessage *msg, uint32_t msg_max,
				  struct rd_err *err)
{
	const Rdmig__PostcopyKeys *m = (const Rdmig__PostcopyKeys *)msg;
	int rc;

	(void)msg_max;
	rc = check_pair("POSTCOPY_KEYS", "block/piece", m->n_block, m->n_piece,
			CTRL_PC_KEYS_MAX, err);
	if (!rc && (m->n_addr != m->n_block || m->n_rkey != m->n_block))
		rc = rd_err_set(err, -EPROTO, "POSTCOPY_KEYS: %zu addresses and %zu rkeys for "
				"%zu pieces", m->n_addr, m->n_rkey, m->n_block);
	if (!rc && !m->n_block)
		rc = rd_err_set(err, -EPROTO, "POSTCOPY_KEYS: no keys");
	if (!rc && (m->piece_shift < CTRL_PC_SHIFT_MIN || m->piece_shift > CTRL_PC_SHIFT_MAX))
		rc = rd_err_set(err, -EPROTO, "POSTCOPY_KEYS: piece_shift %" PRIu32 " outside "
				"%d..%d", m->piece_shift, CTRL_PC_SHIFT_MIN, CTRL_PC_SHIFT_MAX);
	return rc;
}

static int msgcheck_postcopy_ranges(const ProtobufCMessage *msg, uint32_t msg_max,
				    struct rd_err *err)
{
	const Rdmig__PostcopyRanges *m = (const Rdmig__PostcopyRanges *)msg;
	uint64_t end;
	size_t i;

	(void)msg_max;
	if (m->n_block != m->n_first || m->n_block != m->n_count)
		return rd_err_set(err, -EPROTO, "POSTCOPY_RANGES: %zu blocks, %zu firsts and "
				  "%zu counts", m->n_block, m->n_first, m->n_count);
	if (m->n_block > CTRL_PC_RANGES_MAX)
		return rd_err_set(err, -EPROTO, "POSTCOPY_RANGES: %zu ranges exceeds the limit "
				  "of %d", m->n_block, CTRL_PC_RANGES_MAX);
	/* Only the last may be empty: a set with nothing in it, or one that
	 * ended with the message before. */
	if (!m->n_block && !m->last)
		return rd_err_set(err, -EPROTO, "POSTCOPY_RANGES: no ranges");
	for (i = 0; i < m->n_block; i++)
		if (!m->count[i] || rd_add_overflow_u64(m->first[i], m->count[i], &end))
			return rd_err_set(err, -EPROTO, "POSTCOPY_RANGES: range %zu, %" PRIu64
					  " pages from %" PRIu64 ", is empty or overflows", i,
					  m->count[i], m->first[i]);
	return 0;
}

static int msgcheck_postcopy_resumed(const ProtobufCMessage *msg, uint32_t msg_max,
				     struct rd_err *err)
{
	const Rdmig__PostcopyResumed *m = (const Rdmig__PostcopyResumed *)msg;
	uint64_t sum;

	(void)msg_max;
	if (rd_add_overflow_u64(m->fault_pages, m->background_pages, &sum) ||
	    rd_add_overflow_u64(sum, m->pages_left, &sum))
		return rd_err_set(err, -EPROTO, "POSTCOPY_RESUMED: %" PRIu64 " + %" PRIu64 " + %"
				  PRIu64 " pages overflow", m->fault_pages, m->background_pages,
				  m->pages_left);
	if (m->pages_left && (!m->channel_port || m->channel_port > 65535 || !m->channel_token))
		return rd_err_set(err, -EPROTO, "POSTCOPY_RESUMED: %" PRIu64 " pages left without "
				  "a valid port and token for the post-copy channels",
				  m->pages_left);
	return 0;
}

static int msgcheck_postcopy_done(const ProtobufCMessage *msg, uint32_t msg_max,
				  struct rd_err *err)
{
	const Rdmig__PostcopyDone *m = (const Rdmig__PostcopyDone *)msg;
	uint64_t sum;

	(void)msg_max;
	if (rd_add_overflow_u64(m->fault_pages, m->background_pages, &sum) || sum != m->pages)
		return rd_err_set(err, -EPROTO, "POSTCOPY_DONE: %" PRIu64 " pages by faults and %"
				  PRIu64 " by the background pass do not make %" PRIu64,
				  m->fault_pages, m->background_pages, m->pages);
	return 0;
}

/* Types whose every field value is acceptable once it parses (header-only
 * ones get no message at all): what they may mean depends on the session,
 * and the state machines check that.  A row naming this is a decision; a
 * missing row is none, and msgcheck() refuses the type. */
static int msgcheck_nothing(const ProtobufCMessage *msg, uint32_t msg_max,
			    struct rd_err *err)
{
	(void)msg;
	(void)msg_max;
	(void)err;
	return 0;
}

typedef int (*check_fn)(const ProtobufCMessage *msg, uint32_t msg_max,
			struct rd_err *err);

static const check_fn checks[CT_TYPE_MAX] = {
	[CT_BLOCK_MAP_REQ] = msgcheck_block_map_req,
	[CT_BLOCK_MAP_RESP] = msgcheck_block_map_resp,
	[CT_REGISTER_REQ] = msgcheck_register_req,
	[CT_REGISTER_RESP] = msgcheck_register_resp,
	[CT_ZERO_RANGES] = msgcheck_zero_ranges,
	[CT_ITER_END] = msgcheck_nothing,
	[CT_ITER_ACK] = msgcheck_nothing,
	[CT_STATE] = msgcheck_state,
	[CT_COMPLETE] = msgcheck_complete,
	[CT_COMPLETE_ACK] = msgcheck_complete_ack,
	[CT_ERROR] = msgcheck_error,
	[CT_CREDIT] = msgcheck_nothing,
	[CT_KEEPALIVE] = msgcheck_nothing,
	[CT_AUTH_CHALLENGE] = msgcheck_auth_challenge,
	[CT_AUTH_RESPONSE] = msgcheck_auth_response,
	[CT_PIN_KEYS] = msgcheck_pin_keys,
	[CT_PAGES] = msgcheck_pages,
	[CT_PROGRESS] = msgcheck_nothing,
	[CT_STATE_RING] = msgcheck_state_ring,
	[CT_STATE_WRITTEN] = msgcheck_state_written,
	[CT_STATE_TAKEN] = msgcheck_nothing,
	[CT_POSTCOPY_KEYS] = msgcheck_postcopy_keys,
	[CT_POSTCOPY_RANGES] = msgcheck_postcopy_ranges,
	[CT_POSTCOPY_DONE] = msgcheck_postcopy_done,
	[CT_POSTCOPY_RESUME] = msgcheck_nothing,
	[CT_POSTCOPY_RESUMED] = msgcheck_postcopy_resumed,
};

int msgcheck(unsigned type, const ProtobufCMessage *msg, uint32_t msg_max,
	     struct rd_err *err)
{
	/* Fail closed: a type added to wire.h without a row here would
	 * otherwise be accepted with no limit checked at all. */
	if (type >= CT_TYPE_MAX || !checks[type])
		return rd_err_set(err, -EPROTO, "control message type %u has no "
				  "limits in msgcheck.c", type);
	return checks[type](msg, msg_max, err);
}
