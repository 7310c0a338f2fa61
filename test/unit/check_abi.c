/* The ABI: a program built against the 0.1.0 header (test/abi/), with its
 * smaller structs, calling today's library.  Every struct the library
 * fills or reads is followed here by a canary the library must not touch,
 * as the caller's stack would be.  This file must not include today's
 * rdmig.h. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "../abi/rdmig-0.1.0.h"
#include "suite.h"
#include "suites.h"

#define CANARY 0xa5

/* What the library takes for a 0.1.0 program's structs (config.h). */
_Static_assert(sizeof(struct rdmig_config) == 232, "the 0.1.0 config");
_Static_assert(sizeof(struct rdmig_stats) == 192, "the 0.1.0 stats");

static void canary_intact(const uint8_t *c, size_t n, const char *what)
{
	size_t i;

	for (i = 0; i < n; i++)
		ck_assert_msg(c[i] == CANARY, "%s: the library wrote %zu bytes past the caller's "
			      "struct", what, i + 1);
}

/* rdmig_config_init() as a 0.1.0 program calls it: only its struct is
 * cleared and filled, and the library takes that struct for what it is. */
START_TEST(old_config_init_stays_in_its_struct)
{
	struct {
		struct rdmig_config c;
		uint8_t canary[256];
	} old;
	struct rdmig_source *s;
	struct rdmig_dest *d;

	memset(&old, CANARY, sizeof(old));
	rdmig_config_init(&old.c);
	canary_intact(old.canary, sizeof(old.canary), "rdmig_config_init");
	ck_assert_uint_le(old.c.size, sizeof(old.c));
	ck_assert_uint_eq(old.c.chunk_size, 1u << 20);
	ck_assert_uint_eq(old.c.step_us, 10000);
	ck_assert_int_eq(old.c.populate, RDMIG_POPULATE_PIN_ALL);
	old.c.timeout_ms = 5000;
	ck_assert_int_eq(rdmig_source_create(&s, &old.c), 0);
	rdmig_source_destroy(s);
	ck_assert_int_eq(rdmig_dest_create(&d, &old.c), 0);
	rdmig_dest_destroy(d);
	canary_intact(old.canary, sizeof(old.canary), "create");
}
END_TEST

/* Statistics into a 0.1.0 struct, with its size set and with 0 ("this
 * version's size" in 0.1.0): never more than that struct. */
START_TEST(old_stats_stay_in_their_struct)
{
	struct {
		struct rdmig_stats st;
		uint8_t canary[256];
	} old;
	struct rdmig_source *s;
	struct rdmig_dest *d;
	uint32_t sizes[2] = { sizeof(old.st), 0 };
	unsigned i;

	ck_assert_int_eq(rdmig_source_create(&s, NULL), 0);
	ck_assert_int_eq(rdmig_dest_create(&d, NULL), 0);
	for (i = 0; i < 2; i++) {
		memset(&old, CANARY, sizeof(old));
		old.st.size = sizes[i];
		rdmig_source_stats(s, &old.st);
		canary_intact(old.canary, sizeof(old.canary), "rdmig_source_stats");
		ck_assert_uint_le(old.st.size, sizeof(old.st));
		ck_assert_uint_eq(old.st.status, RDMIG_STATUS_NONE);
		memset(&old, CANARY, sizeof(old));
		old.st.size = sizes[i];
		rdmig_dest_stats(d, &old.st);
		canary_intact(old.canary, sizeof(old.canary), "rdmig_dest_stats");
		ck_assert_uint_le(old.st.size, sizeof(old.st));
	}
	rdmig_source_destroy(s);
	rdmig_dest_destroy(d);
}
END_TEST

/* A 0.1.0 destination loop: RDMIG_DEST_MAX_FDS entries, one filled. */
START_TEST(old_dest_fds)
{
	struct rdmig_dest *d;
	int fds[RDMIG_DEST_MAX_FDS];

	ck_assert_int_eq(rdmig_dest_create(&d, NULL), 0);
	ck_assert_int_eq(rdmig_dest_fds(d, fds, RDMIG_DEST_MAX_FDS), 1);
	ck_assert_int_ge(fds[0], 0);
	rdmig_dest_destroy(d);
}
END_TEST

void abi_cases(Suite *s)
{
	TCase *tc = tu_case(s, "0.1.0", 0);

	tcase_add_test(tc, old_config_init_stays_in_its_struct);
	tcase_add_test(tc, old_stats_stay_in_their_struct);
	tcase_add_test(tc, old_dest_fds);
}
