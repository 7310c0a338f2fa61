#include "privdata.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Byte offsets of the layouts in rdmig(7).  Common prefix: magic, kind and
 * three reserved bytes, so every kind's fields start 4-byte aligned. */
enum {
	OFF_MAGIC = 0, OFF_KIND = 4, OFF_BODY = 8,
	/* REQUEST */
	OFF_RQ_VER_MIN = 8, OFF_RQ_VER_MAX = 10, OFF_RQ_CAPS = 12,
	OFF_RQ_DEPTH = 16, OFF_RQ_MSG_MAX = 20, OFF_RQ_SESSION = 24,
	OFF_RQ_CHANNEL = 32, OFF_RQ_CHANNELS = 34,
	/* RESUME: a REQUEST, then */
	OFF_RS_TOKEN = 36,
	/* ACCEPT */
	OFF_AC_VERSION = 8, OFF_AC_CAPS = 12, OFF_AC_DEPTH = 16, OFF_AC_MSG_MAX = 20,
	OFF_AC_NONCE = 24,
	/* REJECT */
	OFF_RJ_REASON = 8, OFF_RJ_VER_MIN = 10, OFF_RJ_VER_MAX = 12,
};

_Static_assert(OFF_RQ_CHANNELS + 2 == PD_REQUEST_LEN, "request layout");
_Static_assert(OFF_AC_NONCE + PD_NONCE_LEN == PD_ACCEPT_LEN, "accept layout");
_Static_assert(PD_ACCEPT_LEN <= 196, "IB CM REP private data limit");
_Static_assert(OFF_RJ_VER_MAX + 4 == PD_REJECT_LEN, "reject layout");
_Static_assert(PD_REQUEST_LEN <= 56, "IB CM REQ private data limit");
_Static_assert(OFF_RS_TOKEN + PD_TOKEN_LEN == PD_RESUME_LEN, "resume layout");
_Static_assert(PD_RESUME_LEN <= 56, "IB CM REQ private data limit");

static const char *const kind_names[] = {
	[PD_REQUEST] = "REQUEST", [PD_ACCEPT] = "ACCEPT", [PD_REJECT] = "REJECT",
	[PD_RESUME] = "RESUME",
};

static void put16(uint8_t *p, size_t off, uint16_t v)
{
	v = htobe16(v);
	memcpy(p + off, &v, sizeof(v));
}

static void put32(uint8_t *p, size_t off, uint32_t v)
{
	v = htobe32(v);
	memcpy(p + off, &v, sizeof(v));
}

static void put64(uint8_t *p, size_t off, uint64_t v)
{
	v = htobe64(v);
	memcpy(p + off, &v, sizeof(v));
}

static uint16_t get16(const uint8_t *p, size_t off)
{
	uint16_t v;

	memcpy(&v, p + off, sizeof(v));
	return be16toh(v);
}

static uint32_t get32(const uint8_t *p, size_t off)
{
	uint32_t v;

	memcpy(&v, p + off, sizeof(v));
	return be32toh(v);
}

static uint64_t get64(const uint8_t *p, size_t off)
{
	uint64_t v;

	memcpy(&v, p + off, sizeof(v));
	return be64toh(v);
}

/* Zeroes the whole layout first so reserved fields go out as 0. */
static uint8_t *put_prefix(void *buf, size_t cap, size_t need, enum pd_kind kind)
{
	uint8_t *p = buf;

	if (cap < need)
		return NULL;
	memset(p, 0, need);
	put32(p, OFF_MAGIC, PD_MAGIC);
	p[OFF_KIND] = (uint8_t)kind;
	return p;
}

size_t pd_encode_request(const struct pd_request *r, void *buf, size_t cap)
{
	uint8_t *p = put_prefix(buf, cap, r->resume ? PD_RESUME_LEN : PD_REQUEST_LEN,
				r->resume ? PD_RESUME : PD_REQUEST);

	if (!p)
		return 0;
	put16(p, OFF_RQ_VER_MIN, r->ver_min);
	put16(p, OFF_RQ_VER_MAX, r->ver_max);
	put32(p, OFF_RQ_CAPS, r->caps);
	put32(p, OFF_RQ_DEPTH, r->ctrl_depth);
	put32(p, OFF_RQ_MSG_MAX, r->ctrl_msg_max);
	put64(p, OFF_RQ_SESSION, r->session_id);
	put16(p, OFF_RQ_CHANNEL, r->channel);
	put16(p, OFF_RQ_CHANNELS, r->channels);
	if (!r->resume)
		return PD_REQUEST_LEN;
	memcpy(p + OFF_RS_TOKEN, r->token, PD_TOKEN_LEN);
	return PD_RESUME_LEN;
}

size_t pd_encode_accept(const struct pd_accept *a, void *buf, size_t cap)
{
	uint8_t *p = put_prefix(buf, cap, PD_ACCEPT_LEN, PD_ACCEPT);

	if (!p)
		return 0;
	put16(p, OFF_AC_VERSION, a->version);
	put32(p, OFF_AC_CAPS, a->caps);
	put32(p, OFF_AC_DEPTH, a->ctrl_depth);
	put32(p, OFF_AC_MSG_MAX, a->ctrl_msg_max);
	memcpy(p + OFF_AC_NONCE, a->nonce, PD_NONCE_LEN);
	return PD_ACCEPT_LEN;
}

size_t pd_encode_reject(const struct pd_reject *r, void *buf, size_t cap)
{
	uint8_t *p = put_prefix(buf, cap, PD_REJECT_LEN, PD_REJECT);

	if (!p)
		return 0;
	put16(p, OFF_RJ_REASON, r->reason);
	put16(p, OFF_RJ_VER_MIN, r->ver_min);
	put16(p, OFF_RJ_VER_MAX, r->ver_max);
	return PD_REJECT_LEN;
}

int pd_kind(const void *buf, size_t len)
{
	const uint8_t *p = buf;

	if (!buf || len < OFF_BODY || get32(p, OFF_MAGIC) != PD_MAGIC)
		return -EPROTO;
	if (p[OFF_KIND] < PD_REQUEST || p[OFF_KIND] > PD_RESUME)
		return -EPROTO;
	return p[OFF_KIND];
}

/* Checks the prefix and length for @kind, explaining what is wrong. */
static int check_prefix(const void *buf, size_t len, enum pd_kind kind,
			size_t need, struct rd_err *err)
{
	const uint8_t *p = buf;
	int k;

	if (!buf || len < OFF_BODY)
		return rd_err_set(err, -EPROTO, "not an rdmig peer: %zu bytes of "
				  "private data, an rdmig %s has %zu",
				  buf ? len : 0, kind_names[kind], need);
	if (get32(p, OFF_MAGIC) != PD_MAGIC)
		return rd_err_set(err, -EPROTO, "not an rdmig peer: private data "
				  "starts with 0x%08x, not the magic 0x%08x",
				  get32(p, OFF_MAGIC), PD_MAGIC);
	k = p[OFF_KIND];
	/* A RESUME is a kind of REQUEST: the caller asked for either. */
	if (kind == PD_REQUEST && k == PD_RESUME)
		kind = PD_RESUME;
	if (k != (int)kind && k >= PD_REQUEST && k <= PD_RESUME)
		return rd_err_set(err, -EPROTO, "expected an rdmig %s, got %s",
				  kind_names[kind], kind_names[k]);
	if (k != (int)kind)
		return rd_err_set(err, -EPROTO, "expected an rdmig %s, got unknown "
				  "kind %d", kind_names[kind], k);
	if (kind == PD_RESUME)
		need = PD_RESUME_LEN;
	if (len < need)
		return rd_err_set(err, -EPROTO, "rdmig %s too short: %zu bytes, "
				  "needs %zu", kind_names[kind], len, need);
	return 0;
}

static int check_versions(const char *what, uint16_t lo, uint16_t hi,
			  struct rd_err *err)
{
	if (lo < 1 || lo > hi)
		return rd_err_set(err, -EINVAL, "%s: invalid protocol version range "
				  "%u..%u", what, lo, hi);
	return 0;
}

static int check_ring(const char *what, uint32_t depth, uint32_t msg_max,
		      struct rd_err *err)
{
	if (depth < PD_DEPTH_MIN || depth > PD_DEPTH_MAX)
		return rd_err_set(err, -EINVAL, "%s: control ring depth %u outside "
				  "%u..%u", what, depth, PD_DEPTH_MIN, PD_DEPTH_MAX);
	if (msg_max < PD_MSG_MAX_MIN || msg_max > PD_MSG_MAX_MAX)
		return rd_err_set(err, -EINVAL, "%s: control message size %u outside "
				  "%u..%u", what, msg_max, PD_MSG_MAX_MIN,
				  PD_MSG_MAX_MAX);
	return 0;
}

int pd_decode_request(const void *buf, size_t len, struct pd_request *out,
		      struct rd_err *err)
{
	const uint8_t *p = buf;
	struct pd_request r;
	int rc;

	static const uint8_t zero[PD_TOKEN_LEN];

	rc = check_prefix(buf, len, PD_REQUEST, PD_REQUEST_LEN, err);
	if (rc)
		return rc;
	memset(&r, 0, sizeof(r));
	r.resume = p[OFF_KIND] == PD_RESUME;
	r.ver_min = get16(p, OFF_RQ_VER_MIN);
	r.ver_max = get16(p, OFF_RQ_VER_MAX);
	r.caps = get32(p, OFF_RQ_CAPS) & PD_CAP_KNOWN;
	r.ctrl_depth = get32(p, OFF_RQ_DEPTH);
	r.ctrl_msg_max = get32(p, OFF_RQ_MSG_MAX);
	r.session_id = get64(p, OFF_RQ_SESSION);
	r.channel = get16(p, OFF_RQ_CHANNEL);
	r.channels = get16(p, OFF_RQ_CHANNELS);
	rc = check_versions("REQUEST", r.ver_min, r.ver_max, err);
	if (!rc)
		rc = check_ring("REQUEST", r.ctrl_depth, r.ctrl_msg_max, err);
	if (rc)
		return rc;
	if (r.channels < 1 || r.channels > PD_CHANNELS_MAX)
		return rd_err_set(err, -EINVAL, "REQUEST: %u channels outside 1..%u",
				  r.channels, PD_CHANNELS_MAX);
	if (r.channel >= r.channels)
		return rd_err_set(err, -EINVAL, "REQUEST: channel %u of %u channels",
				  r.channel, r.channels);
	if (!r.resume) {
		*out = r;
		return 0;
	}
	/* A resume opens the control connection of a migration that exists:
	 * in a version that knows it, alone, naming a migration. */
	memcpy(r.token, p + OFF_RS_TOKEN, PD_TOKEN_LEN);
	if (r.ver_max < PD_VERSION_RECOVER)
		return rd_err_set(err, -EINVAL, "RESUME: protocol versions %u..%u, a resume "
				  "needs %u or later", r.ver_min, r.ver_max, PD_VERSION_RECOVER);
	if (r.channel || r.channels != 1)
		return rd_err_set(err, -EINVAL, "RESUME: channel %u of %u, a resume is channel "
				  "0 of 1", r.channel, r.channels);
	if (!memcmp(r.token, zero, PD_TOKEN_LEN))
		return rd_err_set(err, -EINVAL, "RESUME: an all-zero token");
	*out = r;
	return 0;
}

int pd_decode_accept(const void *buf, size_t len, struct pd_accept *out,
		     struct rd_err *err)
{
	const uint8_t *p = buf;
	struct pd_accept a;
	int rc;

	rc = check_prefix(buf, len, PD_ACCEPT, PD_ACCEPT_LEN, err);
	if (rc)
		return rc;
	a.version = get16(p, OFF_AC_VERSION);
	a.caps = get32(p, OFF_AC_CAPS) & PD_CAP_KNOWN;
	a.ctrl_depth = get32(p, OFF_AC_DEPTH);
	a.ctrl_msg_max = get32(p, OFF_AC_MSG_MAX);
	memcpy(a.nonce, p + OFF_AC_NONCE, PD_NONCE_LEN);
	if (a.version < 1)
		return rd_err_set(err, -EINVAL, "ACCEPT: invalid protocol version 0");
	rc = check_ring("ACCEPT", a.ctrl_depth, a.ctrl_msg_max, err);
	if (rc)
		return rc;
	*out = a;
	return 0;
}

int pd_decode_reject(const void *buf, size_t len, struct pd_reject *out,
		     struct rd_err *err)
{
	const uint8_t *p = buf;
	struct pd_reject r;
	int rc;

	rc = check_prefix(buf, len, PD_REJECT, PD_REJECT_LEN, err);
	if (rc)
		return rc;
	/* An unknown reason is reported as such, never a decoding error: a
	 * newer destination may have new reasons. */
	r.reason = get16(p, OFF_RJ_REASON);
	r.ver_min = get16(p, OFF_RJ_VER_MIN);
	r.ver_max = get16(p, OFF_RJ_VER_MAX);
	rc = check_versions("REJECT", r.ver_min, r.ver_max, err);
	if (rc)
		return rc;
	*out = r;
	return 0;
}

int pd_negotiate(const struct pd_request *req, uint16_t lmin, uint16_t lmax,
		 uint32_t local_caps, uint32_t ctrl_depth, uint32_t ctrl_msg_max,
		 struct pd_accept *acc, struct pd_reject *rej, struct rd_err *err)
{
	uint16_t hi = req->ver_max < lmax ? req->ver_max : lmax;
	uint16_t lo = req->ver_min > lmin ? req->ver_min : lmin;

	if (hi < lo) {
		*rej = (struct pd_reject){ .reason = PD_REJ_VERSION,
					   .ver_min = lmin, .ver_max = lmax };
		return rd_err_set(err, -EPROTONOSUPPORT, "protocol version mismatch: "
				  "this side speaks %u..%u, the peer speaks %u..%u",
				  lmin, lmax, req->ver_min, req->ver_max);
	}
	*acc = (struct pd_accept){ .version = hi,
				   .caps = req->caps & local_caps & PD_CAP_KNOWN,
				   .ctrl_depth = ctrl_depth,
				   .ctrl_msg_max = ctrl_msg_max };
	/* Recovery is post-copy's, and version 3's. */
	if (hi < PD_VERSION_RECOVER || !(acc->caps & PD_CAP_POSTCOPY))
		acc->caps &= ~PD_CAP_POSTCOPY_RECOVER;
	return 0;
}

const char *pd_reason_str(uint16_t reason)
{
	static const char *const names[] = {
		[PD_REJ_VERSION] = "protocol version mismatch",
		[PD_REJ_BUSY] = "busy",
		[PD_REJ_UNAUTHORIZED] = "unauthorized",
		[PD_REJ_BAD_REQUEST] = "bad request",
		[PD_REJ_NO_RESOURCES] = "out of resources",
		[PD_REJ_CAPABILITY] = "a required capability is missing",
	};

	if (reason < RD_ARRAY_SIZE(names) && names[reason])
		return names[reason];
	return "unknown reason";
}

int pd_reject_error(const struct pd_reject *rej, uint16_t lmin, uint16_t lmax,
		    struct rd_err *err)
{
	static const char pfx[] = "destination rejected the connection";

	switch (rej->reason) {
	case PD_REJ_VERSION:
		return rd_err_set(err, -EPROTONOSUPPORT, "%s: %s: this side speaks "
				  "%u..%u, the destination speaks %u..%u", pfx,
				  pd_reason_str(rej->reason), lmin, lmax,
				  rej->ver_min, rej->ver_max);
	case PD_REJ_UNAUTHORIZED:
		return rd_err_set(err, -EACCES, "%s: %s", pfx,
				  pd_reason_str(rej->reason));
	case PD_REJ_BUSY:
		return rd_err_set(err, -EBUSY, "%s: %s", pfx,
				  pd_reason_str(rej->reason));
	case PD_REJ_BAD_REQUEST:
	case PD_REJ_NO_RESOURCES:
	case PD_REJ_CAPABILITY:
		return rd_err_set(err, -ECONNREFUSED, "%s: %s", pfx,
				  pd_reason_str(rej->reason));
	default:
		return rd_err_set(err, -ECONNREFUSED, "%s: unknown reason %u", pfx,
				  rej->reason);
	}
}

const char *pd_caps_str(uint32_t caps, char *buf, size_t len)
{
	static const char *const names[] = {
		"pin-all", "zero-pages", "verify", "auth", "multi-channel", "pages", "progress",
		"state-ring", "state-bound", "postcopy", "postcopy-recover",
	};
	size_t used = 0, i;
	int n;

	if (!len)
		return buf;
	buf[0] = '\0';
	if (!caps) {
		snprintf(buf, len, "none");
		return buf;
	}
	for (i = 0; i < 32 && used < len; i++) {
		if (!(caps & (1u << i)))
			continue;
		if (i < RD_ARRAY_SIZE(names))
			n = snprintf(buf + used, len - used, "%s%s", used ? "," : "",
				     names[i]);
		else
			n = snprintf(buf + used, len - used, "%s0x%x", used ? "," : "",
				     1u << i);
		if (n < 0)
			break;
		used += (size_t)n;
	}
	return buf;
}
