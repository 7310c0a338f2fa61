#include "auth.h"

#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include <sodium.h>
#include <xxhash.h>

static const char *const role_label[] = { "rdmig-v2 source", "rdmig-v2 destination" };

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

bool auth_nonce_acceptable(const uint8_t nonce[AUTH_NONCE_LEN],
			   const uint8_t own[AUTH_NONCE_LEN])
{
	return !sodium_is_zero(nonce, AUTH_NONCE_LEN) &&
	       sodium_memcmp(nonce, own, AUTH_NONCE_LEN) != 0;
}

int auth_addr(const struct sockaddr *sa, uint8_t out[AUTH_ADDR_LEN])
{
	static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };
	uint16_t port;

	memset(out, 0, AUTH_ADDR_LEN);
	/* Both families end up as IPv6 so a listener on "::" and a source on
	 * IPv4 describe the same connection with the same bytes. */
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		memcpy(out + 1, v4mapped, sizeof(v4mapped));
		memcpy(out + 13, &in->sin_addr, 4);
		port = in->sin_port;
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		memcpy(out + 1, &in6->sin6_addr, 16);
		port = in6->sin6_port;
	} else {
		return -EAFNOSUPPORT;
	}
	out[0] = 6;
	memcpy(out + 17, &port, 2); /* already network order */
	return 0;
}

void auth_mac(const void *key, size_t key_len, enum auth_role role,
	      const struct auth_bind *b, uint8_t mac[AUTH_MAC_LEN])
{
	crypto_auth_hmacsha256_state st;
	const char *label = role_label[role];
	uint32_t qpn[2] = { htobe32(b->src_qpn), htobe32(b->dst_qpn) };

	crypto_auth_hmacsha256_init(&st, key, key_len);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label) + 1);
	crypto_auth_hmacsha256_update(&st, b->req, b->req_len);
	crypto_auth_hmacsha256_update(&st, b->acc, sizeof(b->acc));
	crypto_auth_hmacsha256_update(&st, b->src_nonce, sizeof(b->src_nonce));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)qpn, sizeof(qpn));
	crypto_auth_hmacsha256_update(&st, b->src_addr, sizeof(b->src_addr));
	crypto_auth_hmacsha256_update(&st, b->dst_addr, sizeof(b->dst_addr));
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

int auth_check(const void *key, size_t key_len, enum auth_role role,
	       const struct auth_bind *b, const uint8_t *mac, size_t mac_len)
{
	uint8_t want[AUTH_MAC_LEN];
	int ok;

	if (!mac || mac_len != AUTH_MAC_LEN)
		return -EACCES;
	auth_mac(key, key_len, role, b, want);
	ok = crypto_verify_32(want, mac) == 0;
	sodium_memzero(want, sizeof(want));
	return ok ? 0 : -EACCES;
}

void *auth_key_dup(const void *key, size_t len)
{
	/* sodium_malloc locks the pages (no swap), guards them, and
	 * sodium_free wipes them. */
	void *p = sodium_init() < 0 ? NULL : sodium_malloc(len);

	if (p)
		memcpy(p, key, len);
	return p;
}

void auth_key_free(void *key, size_t len)
{
	(void)len;
	sodium_free(key);
}

void auth_digest(const void *data, size_t len, uint8_t out[DIGEST_LEN])
{
	XXH128_hash_t h = XXH3_128bits(data, len);
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, h);
	memcpy(out, c.digest, DIGEST_LEN);
}

struct auth_digest_state *auth_digest_begin(void)
{
	XXH3_state_t *st = XXH3_createState();

	if (st)
		XXH3_128bits_reset(st);
	return (struct auth_digest_state *)st;
}

void auth_digest_more(struct auth_digest_state *st, const void *data, size_t len)
{
	XXH3_128bits_update((XXH3_state_t *)st, data, len);
}

void auth_digest_end(struct auth_digest_state *st, uint8_t out[DIGEST_LEN])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits_digest((XXH3_state_t *)st));
	memcpy(out, c.digest, DIGEST_LEN);
	XXH3_freeState((XXH3_state_t *)st);
}
