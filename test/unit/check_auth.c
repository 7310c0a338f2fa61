#include <check.h>
#include <errno.h>
#include <string.h>

#include "auth.h"
#include "suites.h"

static const char key[] = "sixteen byte key and some more";

START_TEST(challenge_response)
{
	uint8_t ns[AUTH_NONCE_LEN], nd[AUTH_NONCE_LEN], mac[AUTH_MAC_LEN];

	ck_assert_int_eq(auth_init(NULL), 0);
	auth_nonce(ns);
	auth_nonce(nd);
	ck_assert(memcmp(ns, nd, AUTH_NONCE_LEN) != 0);
	/* The source answers the destination's nonce nd with its own ns. */
	auth_mac(key, sizeof(key), AUTH_SOURCE, nd, ns, mac);
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, ns, nd, mac, sizeof(mac)), 0);
	/* Wrong key, wrong role (a reflected answer), wrong nonce, short MAC. */
	ck_assert_int_eq(auth_check("another key of 16+ bytes", 24, AUTH_SOURCE, ns, nd, mac,
				    sizeof(mac)), -EACCES);
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_DEST, ns, nd, mac, sizeof(mac)),
			 -EACCES);
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, nd, ns, mac, sizeof(mac)),
			 -EACCES);
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, ns, nd, mac, 16), -EACCES);
	mac[31] ^= 1;
	ck_assert_int_eq(auth_check(key, sizeof(key), AUTH_SOURCE, ns, nd, mac, sizeof(mac)),
			 -EACCES);
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

Suite *auth_suite(void)
{
	Suite *s = suite_create("auth");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, challenge_response);
	tcase_add_test(tc, digest_detects_one_bit);
	suite_add_tcase(s, tc);
	return s;
}
