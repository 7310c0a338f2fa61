/* pbscan: an allocation-free walk over a protobuf encoding, run before
 * protobuf-c unpacks anything.
 *
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
#ifndef RDMIG_PBSCAN_H
#define RDMIG_PBSCAN_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "util.h"

/* The limit on the element count of a repeated field, enforced before
 * unpacking. */
struct pbscan_limit {
	uint32_t field;   /* field number; 0 ends a table */
	const char *noun; /* what the elements are, for messages */
	uint32_t max;
};

/* Entries a table may hold before its terminator. */
#define PBSCAN_LIMITS_MAX 4

/* Walks @len bytes at @p as a @desc message (nested messages included):
 * -EBADMSG when the encoding is malformed, -EPROTO when a repeated field
 * named in @lim (top level only; NULL for none) holds more than its max or
 * the message carries more than 64 unknown or repeated non-repeated fields
 * beyond one per declared field.  @type names the message in @err. */
int pbscan_msg(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len,
	       const struct pbscan_limit *lim, const char *type, struct rd_err *err);

#endif
