#include "auth.h"

#include <errno.h>
#include <string.h>

#include <sodium.h>
#include <xxhash.h>

static const char *const role_label[] = { "rdmig-v1 source", "rdmig-v1 destination" };

int auth_init(struct rd_err *err)
{
	/* sodium_init is idempotent and thread-safe; 1 means "already done". */
	if (sodium_init() < 0)
		return rd_err_set(err, -EIO, "libsodium failed to initialise");
	return 0;
}

void auth_nonce(uint8_t nonce[AUTH_NONCE_LEN])
{
	randombytes_buf(nonce, AUTH_NONCE_LEN);
}

void auth_mac(const void *key, size_t key_len, enum auth_role role,
	      const uint8_t peer_nonce[AUTH_NONCE_LEN],
	      const uint8_t own_nonce[AUTH_NONCE_LEN], uint8_t mac[AUTH_MAC_LEN])
{
	crypto_auth_hmacsha256_state st;
	const char *label = role_label[role];

	crypto_auth_hmacsha256_init(&st, key, key_len);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label) + 1);
	crypto_auth_hmacsha256_update(&st, peer_nonce, AUTH_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, own_nonce, AUTH_NONCE_LEN);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

int auth_check(const void *key, size_t key_len, enum auth_role role,
	       const uint8_t peer_nonce[AUTH_NONCE_LEN],
	       const uint8_t own_nonce[AUTH_NONCE_LEN], const uint8_t *mac, size_t mac_len)
{
	uint8_t want[AUTH_MAC_LEN];
	int ok;

	if (mac_len != AUTH_MAC_LEN)
		return -EACCES;
	/* The answer from @role was computed over (our nonce, its nonce). */
	auth_mac(key, key_len, role, own_nonce, peer_nonce, want);
	ok = crypto_verify_32(want, mac) == 0;
	sodium_memzero(want, sizeof(want));
	return ok ? 0 : -EACCES;
}

void auth_digest(const void *data, size_t len, uint8_t out[DIGEST_LEN])
{
	XXH128_hash_t h = XXH3_128bits(data, len);
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, h);
	memcpy(out, c.digest, DIGEST_LEN);
}
