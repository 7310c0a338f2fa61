/* rdma_cm connect private data: the REQUEST the source sends with
 * rdma_connect, and the destination's ACCEPT or REJECT.  A fixed layout in
 * network byte order, small enough for the IB CM limits (request <= 56 bytes,
 * accept <= 196, reject <= 148).  Layouts are in rdmig(7). */
#ifndef RDMIG_PRIVDATA_H
#define RDMIG_PRIVDATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define PD_MAGIC 0x52444d47u /* "RDMG" */

/* RESUME (version 3): a REQUEST that resumes a paused post-copy, with the
 * resume token the destination gave the source in BLOCK_MAP_RESP. */
enum pd_kind { PD_REQUEST = 1, PD_ACCEPT = 2, PD_REJECT = 3, PD_RESUME = 4 };

enum pd_cap {
	PD_CAP_PIN_ALL = 1u << 0,
	PD_CAP_ZERO_PAGES = 1u << 1,
	PD_CAP_VERIFY = 1u << 2,
	PD_CAP_AUTH = 1u << 3,
	PD_CAP_MULTI_CHANNEL = 1u << 4,
	/* The destination takes short runs of data pages in PAGES messages. */
	PD_CAP_PAGES = 1u << 5,
	/* The source reports what landed in PROGRESS messages. */
	PD_CAP_PROGRESS = 1u << 6,
	/* The destination offers a ring that device state is written into
	 * with RDMA WRITE (STATE_RING, STATE_WRITTEN, STATE_TAKEN). */
	PD_CAP_STATE_RING = 1u << 7,
	/* The source says in BLOCK_MAP_REQ how much device state it sends at
	 * most (state_max, 0: none), and the destination holds it to that. */
	PD_CAP_STATE_BOUND = 1u << 8,
	/* The source may switch to post-copy: the destination then runs the
	 * guest and RDMA READs the pages it lacks from the source's memory
	 * (POSTCOPY_KEYS, POSTCOPY_RANGES, POSTCOPY_DONE), over two post-copy
	 * channels opened beside the data channels. */
	PD_CAP_POSTCOPY = 1u << 9,
	/* Version 3: with POSTCOPY, a link that breaks after the switch
	 * pauses the post-copy on both sides instead of failing it, and the
	 * source may resume it on a new connection (a RESUME request with the
	 * resume token of BLOCK_MAP_RESP, authenticated again with the key),
	 * POSTCOPY_RESUME and POSTCOPY_RESUMED. */
	PD_CAP_POSTCOPY_RECOVER = 1u << 10,
	PD_CAP_KNOWN = 0x7ff
};

enum pd_reason {
	PD_REJ_VERSION = 1,   /* no common protocol version */
	PD_REJ_BUSY,          /* the destination is already migrating */
	PD_REJ_UNAUTHORIZED,
	PD_REJ_BAD_REQUEST,   /* the request did not decode */
	PD_REJ_NO_RESOURCES,
	PD_REJ_CAPABILITY     /* a capability the destination requires is missing */
};

/* Version 2 moved the destination's challenge into ACCEPT and bound the
 * authentication to the connection; version 1's answers could be replayed,
 * so it is not spoken any more.  Version 3 adds post-copy recovery
 * (POSTCOPY_RECOVER, RESUME); a version 2 peer is still served, without
 * it. */
#define PD_VERSION_MIN 2
#define PD_VERSION_MAX 3
/* The first version that knows POSTCOPY_RECOVER and RESUME. */
#define PD_VERSION_RECOVER 3

/* Limits every decoder enforces. */
#define PD_DEPTH_MIN 2
#define PD_DEPTH_MAX 1024
#define PD_MSG_MAX_MIN 4096u
#define PD_MSG_MAX_MAX (16u << 20)
#define PD_CHANNELS_MAX 64
#define PD_TOKEN_LEN 16

struct pd_request {
	uint16_t ver_min, ver_max;
	uint32_t caps;                   /* requested */
	uint32_t ctrl_depth, ctrl_msg_max; /* the source's receive ring */
	uint64_t session_id;             /* ties the channels of one migration */
	uint16_t channel, channels;
	/* A RESUME: the paused post-copy it resumes, by the token the
	 * destination gave in BLOCK_MAP_RESP (never all zero). */
	bool resume;
	uint8_t token[PD_TOKEN_LEN];
};

#define PD_NONCE_LEN 32

struct pd_accept {
	uint16_t version;
	uint32_t caps;                   /* granted */
	uint32_t ctrl_depth, ctrl_msg_max; /* the destination's receive ring */
	/* With AUTH: the destination's challenge, fresh for this connection
	 * and random before the accept leaves; all zero otherwise. */
	uint8_t nonce[PD_NONCE_LEN];
};

struct pd_reject {
	uint16_t reason, ver_min, ver_max; /* the rejecter's own version range */
};

#define PD_REQUEST_LEN 36
/* A REQUEST's fields, then the token. */
#define PD_RESUME_LEN (PD_REQUEST_LEN + PD_TOKEN_LEN)
#define PD_ACCEPT_LEN 56
#define PD_REJECT_LEN 16

/* Encoders return the bytes written, or 0 when @cap is too small; a
 * request with resume set is encoded as a RESUME (PD_RESUME_LEN). */
size_t pd_encode_request(const struct pd_request *r, void *buf, size_t cap);
size_t pd_encode_accept(const struct pd_accept *a, void *buf, size_t cap);
size_t pd_encode_reject(const struct pd_reject *r, void *buf, size_t cap);

/* The PD_* kind of @buf, or -EPROTO when it is too short, has the wrong magic
 * or an unknown kind: not an rdmig peer. */
int pd_kind(const void *buf, size_t len);

/* Decoders accept @len >= the fixed length (rdma_cm pads private data with
 * zeros), ignore reserved fields, drop unknown capability bits.  They return
 * 0, -EPROTO (short, bad magic, wrong kind) or -EINVAL (a value out of its
 * limits), with @err saying which.  pd_decode_request() takes a REQUEST or
 * a RESUME (resume set: version 3 or later, channel 0 of 1, a token that
 * is not all zero). */
int pd_decode_request(const void *buf, size_t len, struct pd_request *out,
		      struct rd_err *err);
int pd_decode_accept(const void *buf, size_t len, struct pd_accept *out,
		     struct rd_err *err);
int pd_decode_reject(const void *buf, size_t len, struct pd_reject *out,
		     struct rd_err *err);

/* Destination side: 0 and *acc filled (the highest common version, granted
 * caps = requested & @local_caps, our ring from @ctrl_depth/@ctrl_msg_max), or
 * -EPROTONOSUPPORT with *rej filled and @err naming both version ranges. */
int pd_negotiate(const struct pd_request *req, uint16_t lmin, uint16_t lmax,
		 uint32_t local_caps, uint32_t ctrl_depth, uint32_t ctrl_msg_max,
		 struct pd_accept *acc, struct pd_reject *rej, struct rd_err *err);

/* "busy", "protocol version mismatch", ... or "unknown reason". */
const char *pd_reason_str(uint16_t reason);

/* Source side: turns a reject into a message ("destination rejected the
 * connection: unauthorized") and returns -EPROTONOSUPPORT for VERSION, -EACCES
 * for UNAUTHORIZED, -EBUSY for BUSY, -ECONNREFUSED otherwise. */
int pd_reject_error(const struct pd_reject *rej, uint16_t lmin, uint16_t lmax,
		    struct rd_err *err);

/* "pin-all,zero-pages", "none"; unknown bits as "0x40".  Returns @buf. */
const char *pd_caps_str(uint32_t caps, char *buf, size_t len);

#endif
