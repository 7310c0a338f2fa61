/* Control-message framing and validation, no verbs: an 8-byte header
 * {u32 len, u16 type, u16 credits} in network order, then `len` bytes of a
 * protobuf message from proto/rdmig.proto.  The decoder checks every
 * stateless limit of rdmig(7); checks that need session state (a block index
 * below the number of blocks, an rkey count equal to the request's) are the
 * state machines' job. */
#ifndef RDMIG_CODEC_H
#define RDMIG_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "rdmig.pb-c.h"
#include "util.h"
#include "wire.h"

struct arena;

#define CTRL_HDR_LEN 8
#define CTRL_MSG_MIN 4096
#define CTRL_MSG_MAX (16u << 20)

struct ctrl_hdr {
	uint32_t len;     /* payload bytes after the header */
	uint16_t type;    /* enum ctrl_type */
	uint16_t credits; /* receive buffers re-posted since the sender's last message */
};

/* "REGISTER_REQ", or "unknown". */
const char *ctrl_type_name(unsigned type);

void ctrl_hdr_put(void *buf, const struct ctrl_hdr *h);

/* Checks a received SEND of @byte_len bytes: header present,
 * byte_len == 8 + len, len <= msg_max - 8, known type, and no payload for
 * header-only types.  0 or -EPROTO. */
int ctrl_hdr_get(const void *buf, size_t byte_len, uint32_t msg_max,
		 struct ctrl_hdr *h, struct rd_err *err);

/* Packs @msg (NULL for CREDIT/KEEPALIVE) behind a header.  Returns the frame
 * length, -EMSGSIZE when it exceeds @cap (err names the message and sizes), or
 * -EINVAL when @msg's descriptor does not match @type.  Does not check the
 * limits: use ctrl_msg_check for that. */
int ctrl_encode(unsigned type, uint16_t credits, const ProtobufCMessage *msg,
		void *buf, size_t cap, struct rd_err *err);

/* Parses and validates a received frame: ctrl_hdr_get; an allocation-free
 * scan of the payload that enforces the count limits, and at most 64 unknown
 * or repeated non-repeated fields per message, before protobuf-c allocates
 * anything; protobuf unpack with the type's descriptor; then ctrl_msg_check.
 * The message is unpacked into @a (see arena.h; one of ctrl_arena_size(msg_max)
 * bytes makes the data path's messages allocation-free), or with malloc when
 * @a is NULL.  *out is NULL for header-only types; free it with ctrl_msg_free
 * and the same @a.  Returns 0, -EPROTO (header or limits) or -EBADMSG
 * (payload does not parse); on failure nothing is leaked and *out is NULL.
 * Control characters in an ERROR's message are replaced by '?' so it can be
 * printed safely. */
int ctrl_decode(const void *buf, size_t byte_len, uint32_t msg_max, struct arena *a,
		struct ctrl_hdr *h, ProtobufCMessage **out, struct rd_err *err);

/* The stateless limits for a message of @type (NULL for header-only types);
 * 0 or -EPROTO with a message naming the type and the field. */
int ctrl_msg_check(unsigned type, const ProtobufCMessage *msg, uint32_t msg_max,
		   struct rd_err *err);

/* Frees what ctrl_decode(..., @a, ...) returned (@m may be NULL); once no
 * message decoded into @a is left, @a is reused whole. */
void ctrl_msg_free(struct arena *a, ProtobufCMessage *m);

/* The decode arena for frames of @msg_max bytes: enough for the largest
 * REGISTER_REQ, REGISTER_RESP, STATE, ZERO_RANGES, PIN_KEYS, POSTCOPY_KEYS
 * or POSTCOPY_RANGES that fits,
 * at most 2 MiB (codec.c says how it is worked out). */
size_t ctrl_arena_size(uint32_t msg_max);

/* Largest STATE data payload that still fits one frame of @msg_max bytes. */
size_t ctrl_state_max(uint32_t msg_max);

/* Largest number of chunk references (chunks plus releases) per REGISTER_REQ,
 * and of ranges per ZERO_RANGES, that surely fit a frame of @msg_max bytes
 * whatever the values (worst-case varints), capped by the protocol limits
 * (4096 / 65536).  A REGISTER_RESP for that many chunks is smaller than the
 * request and fits the same size. */
size_t ctrl_register_max(uint32_t msg_max);
size_t ctrl_pin_keys_max(uint32_t msg_max);
size_t ctrl_zero_ranges_max(uint32_t msg_max);
/* The same for POSTCOPY_KEYS entries and POSTCOPY_RANGES ranges (capped by
 * 4096 and 65536). */
size_t ctrl_pc_keys_max(uint32_t msg_max);
size_t ctrl_pc_ranges_max(uint32_t msg_max);
/* Data bytes a PAGES message of @runs runs surely fits in a frame of
 * @msg_max bytes (0 when not even the runs fit). */
size_t ctrl_pages_data_max(uint32_t msg_max, size_t runs);

#endif
