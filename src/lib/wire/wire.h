/* wire: the numbers of the control protocol that rdmig(7) fixes, the
 * message types and their stateless limits, and nothing else.  Both the
 * codec (which frames and unpacks) and msgcheck (which enforces the limits)
 * need them; they live here, below both, so that msgcheck need not include
 * the codec that calls it.  "How to add a message" in rdmig(7) lists every
 * place a new type touches. */
#ifndef RDMIG_WIRE_H
#define RDMIG_WIRE_H

enum ctrl_type {
	CT_BLOCK_MAP_REQ = 1,
	CT_BLOCK_MAP_RESP,
	CT_REGISTER_REQ,
	CT_REGISTER_RESP,
	CT_ZERO_RANGES,
	CT_ITER_END,
	CT_ITER_ACK,
	CT_STATE,
	CT_COMPLETE,
	CT_COMPLETE_ACK,
	CT_ERROR,
	CT_CREDIT,        /* header only */
	CT_KEEPALIVE,     /* header only */
	CT_AUTH_CHALLENGE,
	CT_AUTH_RESPONSE,
	CT_PIN_KEYS,
	CT_PAGES,
	CT_PROGRESS,
	CT_STATE_RING,
	CT_STATE_WRITTEN,
	CT_STATE_TAKEN,
	CT_POSTCOPY_KEYS,
	CT_POSTCOPY_RANGES,
	CT_POSTCOPY_DONE,
	CT_POSTCOPY_RESUME,
	CT_POSTCOPY_RESUMED,
	CT_TYPE_MAX       /* one past the last */
};

/* Stateless per-message limits (rdmig(7)). */
#define CTRL_BLOCKS_MAX 1024
#define CTRL_NAME_MAX 255
#define CTRL_BLOCK_LEN_MAX (1ull << 50)
#define CTRL_PAGE_MIN 4096u
#define CTRL_PAGE_MAX (1u << 30)
#define CTRL_CHUNK_SHIFT_MIN 12
#define CTRL_CHUNK_SHIFT_MAX 30
#define CTRL_PIECE_SHIFT_MIN 20
#define CTRL_REGISTER_MAX 4096
#define CTRL_PIN_KEYS_MAX 4096
#define CTRL_ZERO_RANGES_MAX 65536
/* Bytes one ZERO_RANGES may cover: what the destination checks (and
 * clears) for one message is bounded. */
#define CTRL_ZERO_BYTES_MAX (1ull << 30)
#define CTRL_PAGES_RUNS_MAX 1024
#define CTRL_DIGESTS_MAX 1024
#define CTRL_DIGEST_MIN 8
#define CTRL_DIGEST_MAX 64
#define CTRL_ERROR_MSG_MAX 1024
#define CTRL_AUTH_MIN 16
#define CTRL_AUTH_MAX 64
#define CTRL_STATE_RING_MIN (64u << 10)
#define CTRL_STATE_RING_MAX (64u << 20)
#define CTRL_PC_KEYS_MAX 4096
#define CTRL_PC_RANGES_MAX 65536
#define CTRL_PC_SHIFT_MIN 20
#define CTRL_PC_SHIFT_MAX 30
#define CTRL_PC_CHANNELS 2
#define CTRL_RESUME_TOKEN_LEN 16

#endif
