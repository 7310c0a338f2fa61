/* auth: shared-key challenge-response and end-to-end image digests.
 *
 * Both sides prove they hold the key before the destination registers any
 * memory or an address or rkey leaves it.  The destination's challenge is a
 * random nonce drawn before it accepts and carried in its ACCEPT private
 * data, so no message can be taken before the challenge exists.  The source
 * draws its own nonce and both answer with HMAC-SHA-256(key, role label ||
 * the connection's binding).  The binding holds both nonces and the
 * connection itself: the REQUEST and ACCEPT private data (versions,
 * capabilities, rings), both QP numbers and both addresses, so an answer
 * seen on one connection is worth nothing on another, and a relay that
 * splices two connections together fails the check on both.  The role
 * label keeps a reflected answer from verifying.  Cryptography is
 * libsodium's; nothing here is hand-rolled. */
#ifndef RDMIG_AUTH_H
#define RDMIG_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "privdata.h"
#include "util.h"

#define AUTH_NONCE_LEN PD_NONCE_LEN
#define AUTH_MAC_LEN 32
#define AUTH_KEY_MIN 16
#define AUTH_KEY_MAX 1024
#define DIGEST_LEN 16
/* Address family, 16 address bytes (IPv4 as ::ffff:a.b.c.d), port. */
#define AUTH_ADDR_LEN 19

enum auth_role { AUTH_SOURCE = 0, AUTH_DEST = 1 };

/* What both ends of one connection agree on; each side fills it from its
 * own view (the source's "local" is the destination's "peer"). */
struct auth_bind {
	/* The source's REQUEST (or RESUME, with its token) as sent: req_len
	 * bytes, PD_REQUEST_LEN or PD_RESUME_LEN. */
	uint8_t req[PD_RESUME_LEN];
	size_t req_len;
	uint8_t acc[PD_ACCEPT_LEN];         /* the ACCEPT, with the challenge */
	uint8_t src_nonce[AUTH_NONCE_LEN];  /* the source's challenge */
	uint32_t src_qpn, dst_qpn;
	uint8_t src_addr[AUTH_ADDR_LEN], dst_addr[AUTH_ADDR_LEN];
};

int auth_init(struct rd_err *err);
void auth_nonce(uint8_t nonce[AUTH_NONCE_LEN]);
/* A challenge is refused when it is all zero or equals @own: neither can
 * come from a fresh random draw on the other side. */
bool auth_nonce_acceptable(const uint8_t nonce[AUTH_NONCE_LEN],
			   const uint8_t own[AUTH_NONCE_LEN]);
/* Encodes @sa for the binding; -EAFNOSUPPORT for what is not IPv4/IPv6. */
int auth_addr(const struct sockaddr *sa, uint8_t out[AUTH_ADDR_LEN]);
/* The answer @role gives on the connection @b describes. */
void auth_mac(const void *key, size_t key_len, enum auth_role role,
	      const struct auth_bind *b, uint8_t mac[AUTH_MAC_LEN]);
/* Constant-time check of an answer received from @role. */
int auth_check(const void *key, size_t key_len, enum auth_role role,
	       const struct auth_bind *b, const uint8_t *mac, size_t mac_len);

/* Key copies that stay out of swap and are wiped when freed. */
void *auth_key_dup(const void *key, size_t len);
void auth_key_free(void *key, size_t len);

/* XXH3-128 of a block, big-endian, for --verify. */
void auth_digest(const void *data, size_t len, uint8_t out[DIGEST_LEN]);
/* The same in pieces, for callers that must return between them. */
struct auth_digest_state;
struct auth_digest_state *auth_digest_begin(void);
void auth_digest_more(struct auth_digest_state *st, const void *data, size_t len);
/* Writes the digest and frees @st. */
void auth_digest_end(struct auth_digest_state *st, uint8_t out[DIGEST_LEN]);

#endif
