#include <check.h>
#include <errno.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "auth.h"
#include "suite.h"
#include "suites.h"

static const char key[] = "sixteen byte key and some more";

/* One connection as both sides would describe it. */
static void make_bind(struct auth_bind *b)
{
	struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = htons(40001),
				   .sin_addr.s_addr = htonl(0x0a4d0002) };
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(4444),
				   .sin_addr.s_addr = htonl(0x0a4d0001) };

	memset(b, 0, sizeof(*b));
	memset(b->req, 0x11, sizeof(b->req));
	b->req_len = PD_REQUEST_LEN;
	memset(b->acc, 0x22, sizeof(b->acc));
	auth_nonce(b->src_nonce);
	b->src_qpn = 17;
	b->dst_qpn = 18;
	ck_assert_int_eq(auth_addr((struct sockaddr *)&src, b->src_addr), 0);
	ck_assert_int_eq(auth_addr((struct sockaddr *)&dst, b->dst_addr), 0);
}

START_TEST(challenge_response)
{
	struct auth_bind b, o;
	uint8_t mac[AUTH_MAC_LEN];

	ck_assert_int_eq(auth_init(NULL), 0);
	make_bind(&b);
	auth_mac(key, sizeof(key), AUTH_SOURCE, &b, mac);
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, &b, mac, sizeof(mac)), 0);
	/* Wrong key, wrong role (a reflected answer), short or missing MAC. */
	ck_assert_int_eq(auth_check("another key of 16+ bytes", 24, AUTH_SOURCE, &b, mac,
				    sizeof(mac)), -EACCES);
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_DEST, &b, mac, sizeof(mac)),
			 -EACCES);
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, &b, mac, 16), -EACCES);
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, &b, NULL, 0), -EACCES);
	/* The same answer on any other connection: every field of the binding
	 * counts. */
#define CHANGED(field_change) do { \
		o = b; field_change; \
		ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, &o, mac, \
					    sizeof(mac)), -EACCES); \
	} while (0)
	CHANGED(o.req[3] ^= 1);
	CHANGED(o.acc[PD_ACCEPT_LEN - 1] ^= 1); /* the destination's challenge */
	CHANGED(o.src_nonce[0] ^= 1);
	CHANGED(o.src_qpn++);
	CHANGED(o.dst_qpn++);
	CHANGED(o.src_addr[18] ^= 1);           /* another source port */
	CHANGED(o.dst_addr[16] ^= 1);           /* another destination host */
	CHANGED(memcpy(o.src_addr, b.dst_addr, AUTH_ADDR_LEN));
#undef CHANGED
	mac[31] ^= 1;
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, &b, mac, sizeof(mac)),
			 -EACCES);
}
END_TEST

START_TEST(resume_binds_its_token)
{
	struct auth_bind b, o;
	uint8_t mac[AUTH_MAC_LEN];

	ck_assert_int_eq(auth_init(NULL), 0);
	make_bind(&b);
	b.req_len = PD_RESUME_LEN;
	auth_mac(key, sizeof(key), AUTH_SOURCE, &b, mac);
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, &b, mac, sizeof(mac)), 0);
	/* Another token (the RESUME's last bytes), or the same bytes taken
	 * as a plain REQUEST: another connection. */
	o = b;
	o.req[PD_RESUME_LEN - 1] ^= 1;
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, &o, mac, sizeof(mac)),
			 -EACCES);
	o = b;
	o.req_len = PD_REQUEST_LEN;
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, &o, mac, sizeof(mac)),
			 -EACCES);
	/* A REQUEST's answer does not depend on what lies past it. */
	b.req_len = PD_REQUEST_LEN;
	auth_mac(key, sizeof(key), AUTH_SOURCE, &b, mac);
	o = b;
	o.req[PD_RESUME_LEN - 1] ^= 1;
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, &o, mac, sizeof(mac)), 0);
}
END_TEST

START_TEST(nonce_and_address_rules)
{
	uint8_t zero[AUTH_NONCE_LEN] = { 0 }, a[AUTH_NONCE_LEN], b[AUTH_NONCE_LEN];
	uint8_t v4[AUTH_ADDR_LEN], v6[AUTH_ADDR_LEN];
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(7),
				  .sin_addr.s_addr = htonl(0x0a4d0001) };
	struct sockaddr_in6 in6 = { .sin6_family = AF_INET6, .sin6_port = htons(7) };
	struct sockaddr un = { .sa_family = AF_UNIX };

	auth_nonce(a);
	auth_nonce(b);
	ck_assert(auth_nonce_acceptable(a, b));
	ck_assert(!auth_nonce_acceptable(zero, b));
	ck_assert(!auth_nonce_acceptable(a, a));
	/* ::ffff:10.77.0.1 and 10.77.0.1 are one address. */
	in6.sin6_addr.s6_addr[10] = in6.sin6_addr.s6_addr[11] = 0xff;
	memcpy(&in6.sin6_addr.s6_addr[12], &in.sin_addr, 4);
	ck_assert_int_eq(auth_addr((struct sockaddr *)&in, v4), 0);
	ck_assert_int_eq(auth_addr((struct sockaddr *)&in6, v6), 0);
	ck_assert_mem_eq(v4, v6, AUTH_ADDR_LEN);
	ck_assert_int_eq(auth_addr(&un, v4), -EAFNOSUPPORT);
}
END_TEST

START_TEST(key_copies)
{
	uint8_t *k = auth_key_dup(key, sizeof(key));

	ck_assert_ptr_nonnull(k);
	ck_assert_mem_eq(k, key, sizeof(key));
	auth_key_free(k, sizeof(key));
	auth_key_free(NULL, 0);
}
END_TEST

START_TEST(digest_detects_one_bit)
{
	static uint8_t buf[1 << 16];
	uint8_t a[DIGEST_LEN], b[DIGEST_LEN], c[DIGEST_LEN];

	auth_digest(buf, sizeof(buf), a);
	auth_digest(buf, sizeof(buf), b);
	ck_assert(memcmp(a, b, DIGEST_LEN) == 0);
	buf[40000] ^= 0x10;
	auth_digest(buf, sizeof(buf), c);
	ck_assert(memcmp(a, c, DIGEST_LEN) != 0);
	buf[40000] ^= 0x10;
	/* A shorter prefix of the same bytes is a different image. */
	auth_digest(buf, sizeof(buf) - 1, c);
	ck_assert(memcmp(a, c, DIGEST_LEN) != 0);
}
END_TEST

void auth_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 0);

	tcase_add_test(tc, challenge_response);
	tcase_add_test(tc, resume_binds_its_token);
	tcase_add_test(tc, nonce_and_address_rules);
	tcase_add_test(tc, key_copies);
	tcase_add_test(tc, digest_detects_one_bit);
}
