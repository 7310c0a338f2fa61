/* Every control message type is whole: a codec row, a msgcheck row, a fuzz
 * seed (checked in, as gen_seeds writes it) and its place in rdmig(7).  A
 * type added to wire.h and forgotten in one of them fails here, naming the
 * place; "How to add a message" in rdmig(7) says what each place needs. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "ctrl_seeds.h"
#include "msgcheck.h"
#include "suite.h"
#include "suites.h"
#include "testutil.h"

#define MSG_MAX 65536

static bool known(unsigned t)
{
	return strcmp(ctrl_type_name(t), "unknown") != 0;
}

START_TEST(every_type_has_a_codec_row)
{
	uint8_t hdr[CTRL_HDR_LEN];
	struct ctrl_hdr h = { .type = 0 }, got;
	struct rd_err e;
	unsigned t;

	for (t = 1; t < CT_TYPE_MAX; t++) {
		ck_assert_msg(known(t), "type %u has no row in codec.c's types[]", t);
		h.type = (uint16_t)t;
		ctrl_hdr_put(hdr, &h);
		/* An empty payload may be wrong for the type; the header must
		 * not be refused as of an unknown type. */
		if (ctrl_hdr_get(hdr, sizeof(hdr), MSG_MAX, &got, &e))
			ck_assert_msg(!strstr(e.msg, "unknown"), "%s: %s", ctrl_type_name(t),
				      e.msg);
	}
}
END_TEST

/* The seed is a valid message of its type: decoding it runs msgcheck, which
 * refuses a type it has no row for. */
START_TEST(every_type_has_a_msgcheck_row)
{
	static uint8_t buf[8192];
	ProtobufCMessage *m;
	struct ctrl_hdr h;
	struct rd_err e;
	unsigned t;
	int n;

	for (t = 1; t < CT_TYPE_MAX; t++) {
		n = ctrl_seed(t, buf, sizeof(buf), &e);
		if (n < 0)
			continue; /* every_type_has_a_fuzz_seed says so */
		ck_assert_msg(ctrl_decode(buf, (size_t)n, MSG_MAX, NULL, &h, &m, &e) == 0,
			      "%s: %s", ctrl_type_name(t), e.msg);
		ck_assert_msg(msgcheck(t, m, MSG_MAX, &e) == 0, "%s: %s",
			      ctrl_type_name(t), e.msg);
		ctrl_msg_free(NULL, m);
	}
	ck_assert_int_eq(msgcheck(CT_TYPE_MAX, NULL, MSG_MAX, &e), -EPROTO);
}
END_TEST

/* A seed in ctrl_seeds.c, and test/fuzz/corpus/codec/NAME holding its bytes:
 * test/fuzz/build.sh --seeds was run since. */
START_TEST(every_type_has_a_fuzz_seed)
{
	static uint8_t buf[8192];
	char rel[128], path[1024];
	struct rd_err e;
	size_t len;
	unsigned t;
	char *file;
	int n;

	for (t = 1; t < CT_TYPE_MAX; t++) {
		n = ctrl_seed(t, buf, sizeof(buf), &e);
		ck_assert_msg(n >= 0, "type %u (%s): %s", t, ctrl_type_name(t), e.msg);
		snprintf(rel, sizeof(rel), "test/fuzz/corpus/codec/%s", ctrl_type_name(t));
		file = tu_slurp(tu_src_path(rel, path, sizeof(path)), &len);
		ck_assert_msg(file, "%s is missing: run test/fuzz/build.sh --seeds (or the tree "
			      "moved since the tests were built: make clean)", path);
		ck_assert_msg(len == (size_t)n && !memcmp(file, buf, len),
			      "%s differs from ctrl_seed(%s): run test/fuzz/build.sh --seeds",
			      path, ctrl_type_name(t));
		free(file);
	}
}
END_TEST

/* Whether @page has a line starting with @prefix that holds @want as a
 * whole word (after a space, before a space, a comma or the end). */
static bool has_line(const char *page, const char *prefix, const char *want)
{
	size_t plen = strlen(prefix), wlen = strlen(want);
	const char *line, *p, *end;

	for (line = page; *line; line = *end ? end + 1 : end) {
		end = strchrnul(line, '\n');
		if (strncmp(line, prefix, plen))
			continue;
		for (p = line; (p = memmem(p, (size_t)(end - p), want, wlen)); p++)
			if ((p == line || p[-1] == ' ') &&
			    (p + wlen == end || p[wlen] == ' ' || p[wlen] == ','))
				return true;
	}
	return false;
}

/* The Types table lists "N NAME", and a .SS heading names "NAME (N)". */
START_TEST(every_type_is_in_the_man_page)
{
	char path[1024], row[64], head[64];
	const char *name;
	char *page, *types, *end;
	size_t len;
	unsigned t;

	page = tu_slurp(tu_src_path("man/rdmig.7", path, sizeof(path)), &len);
	ck_assert_msg(page, "cannot read %s (the tree moved since the tests were built? make "
		      "clean)", path);
	types = strstr(page, "\n.SS Types\n");
	ck_assert_msg(types, "%s has no .SS Types", path);
	types = strdup(types + 1);
	end = strstr(types + 1, "\n.SS ");
	if (end)
		*end = '\0';
	for (t = 1; t < CT_TYPE_MAX; t++) {
		name = ctrl_type_name(t);
		snprintf(row, sizeof(row), "%u %s", t, name);
		ck_assert_msg(has_line(types, "", row), "%s: no \"%s\" in its Types table",
			      path, row);
		snprintf(head, sizeof(head), "%s (%u)", name, t);
		ck_assert_msg(has_line(page, ".SS ", head), "%s: no \".SS ... %s\" section",
			      path, head);
	}
	free(types);
	free(page);
}
END_TEST

void wire_cases(Suite *s)
{
	TCase *tc = tu_case(s, "every_type", 0);

	tcase_add_test(tc, every_type_has_a_codec_row);
	tcase_add_test(tc, every_type_has_a_msgcheck_row);
	tcase_add_test(tc, every_type_has_a_fuzz_seed);
	tcase_add_test(tc, every_type_is_in_the_man_page);
}
