/* auth: shared-key challenge-response and end-to-end image digests.
 *
 * Both sides prove they hold the key before the destination registers any
 * memory or an address or rkey leaves it: each sends a fresh random nonce
 * and answers the other's with HMAC-SHA-256(key, role || nonce_peer ||
 * nonce_own).  The role label keeps a reflected answer from verifying.
 * Cryptography is libsodium's; nothing here is hand-rolled. */
#ifndef RDMIG_AUTH_H
#define RDMIG_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define AUTH_NONCE_LEN 32
#define AUTH_MAC_LEN 32
#define AUTH_KEY_MIN 16
#define AUTH_KEY_MAX 1024
#define DIGEST_LEN 16

enum auth_role { AUTH_SOURCE = 0, AUTH_DEST = 1 };

int auth_init(struct rd_err *err);
void auth_nonce(uint8_t nonce[AUTH_NONCE_LEN]);
/* The answer @role gives to @peer_nonce, bound to its own @own_nonce. */
void auth_mac(const void *key, size_t key_len, enum auth_role role,
	      const uint8_t peer_nonce[AUTH_NONCE_LEN],
	      const uint8_t own_nonce[AUTH_NONCE_LEN], uint8_t mac[AUTH_MAC_LEN]);
/* Constant-time check of an answer received from @role. */
int auth_check(const void *key, size_t key_len, enum auth_role role,
	       const uint8_t peer_nonce[AUTH_NONCE_LEN],
	       const uint8_t own_nonce[AUTH_NONCE_LEN], const uint8_t *mac, size_t mac_len);

/* XXH3-128 of a block, big-endian, for --verify. */
void auth_digest(const void *data, size_t len, uint8_t out[DIGEST_LEN]);

#endif
