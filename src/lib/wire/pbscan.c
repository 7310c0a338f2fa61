#include "pbscan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>

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
		    size_t len, const struct pbscan_limit *lim, unsigned depth,
		    const char *type, struct rd_err *err)
{
	size_t counts[PBSCAN_LIMITS_MAX] = { 0 }, extra = 0, off = 0, n = 0, i;
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

int pbscan_msg(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len,
	       const struct pbscan_limit *lim, const char *type, struct rd_err *err)
{
	return scan_msg(desc, p, len, lim, 0, type, err);
}
