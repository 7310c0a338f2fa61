/* The state names the debug log uses: the compiler checks that each table
 * has one entry per state; here, that none was skipped (a gap is NULL) and
 * that no two read alike (a log naming one state for two would mislead),
 * and that a transition reaches the log callback at debug level. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "dst_int.h"
#include "src_int.h"
#include "suite.h"
#include "suites.h"

static void names_ok(const char *const *names, size_t n, const char *table)
{
	size_t i, j;

	for (i = 0; i < n; i++) {
		ck_assert_msg(names[i] && names[i][0], "%s[%zu] has no name", table, i);
		for (j = 0; j < i; j++)
			ck_assert_msg(strcmp(names[i], names[j]), "%s[%zu] and [%zu] are both %s",
				      table, j, i, names[i]);
	}
}

START_TEST(every_state_named_once)
{
	names_ok(src_state_names, RD_ARRAY_SIZE(src_state_names), "src_state_names");
	names_ok(dst_state_names, RD_ARRAY_SIZE(dst_state_names), "dst_state_names");
}
END_TEST

struct seen {
	int level;
	char msg[256];
	unsigned n;
};

static void logged(void *ctx, int level, const char *msg)
{
	struct seen *v = ctx;

	v->level = level;
	snprintf(v->msg, sizeof(v->msg), "%s", msg);
	v->n++;
}

static void debug_config(struct rdmig_config *cfg, struct seen *v)
{
	memset(v, 0, sizeof(*v));
	rdmig_config_init(cfg);
	cfg->log = logged;
	cfg->log_ctx = v;
	cfg->log_level = RDMIG_LOG_DEBUG;
}

/* The one line @v saw since the last look: @want, at debug level. */
static void said(struct seen *v, const char *want)
{
	ck_assert_uint_eq(v->n, 1);
	ck_assert_int_eq(v->level, RDMIG_LOG_DEBUG);
	ck_assert_str_eq(v->msg, want);
	v->n = 0;
}

START_TEST(transitions_logged_at_debug)
{
	struct rdmig_config cfg;
	struct rdmig_source *s;
	struct rdmig_dest *d;
	struct seen v;

	debug_config(&cfg, &v);
	ck_assert_int_eq(rdmig_source_create(&s, &cfg), 0);
	ck_assert_int_eq(rdmig_dest_create(&d, &cfg), 0);
	v.n = 0;
	src_set_state(s, SRC_CONNECTING);
	said(&v, "source state: new -> connecting");
	dst_set_state(d, DST_WAIT_MAP);
	said(&v, "destination state: new -> wait-map");
	/* Staying put is no transition: nothing to say. */
	src_set_state(s, SRC_CONNECTING);
	dst_set_state(d, DST_WAIT_MAP);
	ck_assert_uint_eq(v.n, 0);
	/* Back where they were made, for the destroy functions. */
	src_set_state(s, SRC_NEW);
	dst_set_state(d, DST_NEW);
	rdmig_source_destroy(s);
	rdmig_dest_destroy(d);
}
END_TEST

void states_cases(Suite *s)
{
	TCase *tc = tu_case(s, "names", 0);

	tcase_add_test(tc, every_state_named_once);
	tcase_add_test(tc, transitions_logged_at_debug);
}
