/* migrate-recv's --postcopy-socket message (src/cli/pcsock_msg.c): what a
 * VMM in another process says is taken only whole and in range. */
#include <check.h>
#include <errno.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pcsock_msg.h"
#include "suite.h"
#include "suites.h"

static struct pcs_msg m;
static struct cli_err err;

static int decode(const char *s, unsigned nfds)
{
	return pcs_decode(s, strlen(s), nfds, &m, &err);
}

#define HEAD "rdmig-postcopy-socket 1\n"

START_TEST(good_message)
{
	const char *s = HEAD "regions 2\n"
			"region pc.ram 0x7f0000000000 0x200000 0 4096\n"
			"region ram1 140000000000000 8192 4096 4096\nend\n";

	ck_assert(pcs_complete(s, strlen(s)));
	ck_assert_int_eq(decode(s, 3), 0);
	ck_assert_uint_eq(m.n, 2);
	ck_assert_str_eq(m.r[0].name, "pc.ram");
	ck_assert_uint_eq(m.r[0].addr, 0x7f0000000000ull);
	ck_assert_uint_eq(m.r[0].size, 0x200000);
	ck_assert_uint_eq(m.r[1].addr, 140000000000000ull);
	ck_assert_uint_eq(m.r[1].offset, 4096);
}
END_TEST

/* Each refusal names its cause: the operator reads it in the VMM's log. */
static void refused(const char *s, unsigned nfds, int rc, const char *words)
{
	ck_assert_int_eq(decode(s, nfds), rc);
	if (!strstr(err.msg, words))
		ck_abort_msg("\"%s\" does not say \"%s\"", err.msg, words);
}

START_TEST(bad_messages)
{
	char big[PCS_MAX_MSG + 2];

	refused("hello\n", 2, -EPROTO, "not a post-copy socket message");
	refused("rdmig-postcopy-socket 2\nregions 1\n", 2, -EPROTO, "version 2");
	refused(HEAD "regions 0\nend\n", 1, -EINVAL, "0 regions");
	refused(HEAD "regions 65\n", 66, -EINVAL, "65 regions");
	refused(HEAD "regions 99999999999999999999999\n", 2, -EPROTO, "malformed");
	refused(HEAD "regions 1\nregion a 0x10000 4096 0 4096\nend\n", 1, -EINVAL, "1 fds");
	refused(HEAD "regions 1\nregion a 0x10000 4096 0 4096\nend\n", 5, -EINVAL, "5 fds");
	refused(HEAD "regions 2\nregion a 0x10000 4096 0 4096\nend\n", 3, -EPROTO,
		"region 1: expected");
	refused(HEAD "regions 1\nregion a 0x10000 4096 0 2097152\nend\n", 2, -EINVAL,
		"page size 2097152");
	refused(HEAD "regions 1\nregion a 0x10000 4095 0 4096\nend\n", 2, -EINVAL, "size 4095");
	refused(HEAD "regions 1\nregion a 0x10000 0 0 4096\nend\n", 2, -EINVAL, "size 0");
	refused(HEAD "regions 1\nregion a 0x10000 4096 100 4096\nend\n", 2, -EINVAL,
		"offset 100");
	refused(HEAD "regions 1\nregion a 0x10000 4096 0xffffffffffff000 4096\nend\n", 2,
		-EINVAL, "offset");
	refused(HEAD "regions 1\nregion a 0x10800 4096 0 4096\nend\n", 2, -EINVAL, "address");
	refused(HEAD "regions 1\nregion a 0 4096 0 4096\nend\n", 2, -EINVAL, "address");
	refused(HEAD "regions 1\nregion a 0x7ffffffff000 8192 0 4096\nend\n", 2, -EINVAL,
		"address");
	refused(HEAD "regions 1\nregion a 0xfffffffffffff000 8192 0 4096\nend\n", 2, -EINVAL,
		"address");
	refused(HEAD "regions 1\nregion a 0x10000 4096 0 -4096\nend\n", 2, -EPROTO, "page size");
	refused(HEAD "regions 1\nregion a 0x10000 4096 0 4096 9\nend\n", 2, -EPROTO,
		"page size");
	refused(HEAD "regions 1\nregion a 0x10000 4096 0x 4096\nend\n", 2, -EPROTO, "offset");
	refused(HEAD "regions 2\nregion a 0x10000 8192 0 4096\nregion a 0x20000 4096 0 4096\n"
		"end\n", 3, -EINVAL, "listed twice");
	refused(HEAD "regions 2\nregion a 0x10000 8192 0 4096\nregion b 0x11000 4096 0 4096\n"
		"end\n", 3, -EINVAL, "overlap");
	refused(HEAD "regions 1\nregion a\x01 0x10000 4096 0 4096\nend\n", 2, -EINVAL, "byte 0x01");
	refused(HEAD "regions 1\nregion a 0x10000 4096 0 4096\n", 2, -EPROTO, "expected \"end\"");
	refused(HEAD "regions 1\nregion a 0x10000 4096 0 4096\nend\nmore\n", 2, -EPROTO,
		"nothing after");
	memset(big, 'x', sizeof(big));
	big[sizeof(big) - 1] = '\0';
	refused(big, 2, -EINVAL, "bytes (at most");
	ck_assert(!pcs_complete("end\n", 4));
}
END_TEST

START_TEST(long_name)
{
	char s[512], name[300];

	memset(name, 'n', 255);
	name[255] = '\0';
	snprintf(s, sizeof(s), HEAD "regions 1\nregion %s 0x10000 4096 0 4096\nend\n", name);
	ck_assert_int_eq(decode(s, 2), 0);
	ck_assert_uint_eq(strlen(m.r[0].name), 255);
	memset(name, 'n', 256);
	name[256] = '\0';
	snprintf(s, sizeof(s), HEAD "regions 1\nregion %s 0x10000 4096 0 4096\nend\n", name);
	refused(s, 2, -EINVAL, "a name of 256 bytes");
}
END_TEST

/* The device state's header: what migrate-recv writes, the VMM reads back
 * whole; anything else is refused, and so is more than the VMM takes. */
START_TEST(state_header)
{
	char line[PCS_STATE_LINE_MAX];
	uint64_t n = 1;

	ck_assert_uint_eq(pcs_state_line(line, 0), 8);
	ck_assert_str_eq(line, "state 0\n");
	ck_assert_uint_eq(pcs_state_line(line, UINT64_MAX), 27);
	ck_assert_str_eq(line, "state 18446744073709551615\n");
	line[26] = '\0';
	ck_assert_int_eq(pcs_state_parse(line, UINT64_MAX, &n, &err), 0);
	ck_assert_uint_eq(n, UINT64_MAX);
	ck_assert_int_eq(pcs_state_parse("state 0", 0, &n, &err), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(pcs_state_parse("state 4096", 4096, &n, &err), 0);
	ck_assert_uint_eq(n, 4096);
	ck_assert_int_eq(pcs_state_parse("state 4097", 4096, &n, &err), -EFBIG);
	ck_assert(strstr(err.msg, "4097 bytes of device state, more than the 4096"));
	ck_assert_int_eq(pcs_state_parse("run", 100, &n, &err), -EPROTO);
	ck_assert(strstr(err.msg, "expected a \"state\" line"));
	ck_assert_int_eq(pcs_state_parse("state", 100, &n, &err), -EPROTO);
	ck_assert_int_eq(pcs_state_parse("state 0x10", 100, &n, &err), -EPROTO);
	ck_assert_int_eq(pcs_state_parse("state 01", 100, &n, &err), -EPROTO);
	ck_assert_int_eq(pcs_state_parse("state -1", 100, &n, &err), -EPROTO);
	ck_assert_int_eq(pcs_state_parse("state 1 2", 100, &n, &err), -EPROTO);
	ck_assert_int_eq(pcs_state_parse("state  1", 100, &n, &err), -EPROTO);
	ck_assert_int_eq(pcs_state_parse("state 18446744073709551616", UINT64_MAX, &n, &err),
			 -EPROTO);
	ck_assert(strstr(err.msg, "malformed \"state\" line"));
}
END_TEST

/* The features of a VMM's userfaultfd, from its fdinfo: MINOR_SHMEM
 * needed, SIGBUS and every EVENT_* refused by name, the rest let be. */
START_TEST(uffd_features)
{
	uint32_t f = 0;

	ck_assert_int_eq(pcs_uffd_features("pending:\t0\ntotal:\t0\nAPI:\taa:80000400:"
					   "800000000000003c\n", &f, &err), 0);
	ck_assert_uint_eq(f, 0x80000400u);
	ck_assert_int_eq(pcs_uffd_check(f, &err), 0);
	ck_assert_int_eq(pcs_uffd_features("pending:\t0\n", &f, &err), -EPROTO);
	ck_assert_int_eq(pcs_uffd_features("", &f, &err), -EPROTO);
	ck_assert_int_eq(pcs_uffd_features("API:\tzz\n", &f, &err), -EPROTO);
	ck_assert_int_eq(pcs_uffd_check(0, &err), -EINVAL);
	ck_assert(strstr(err.msg, "lacks UFFD_FEATURE_MINOR_SHMEM"));
	ck_assert_int_eq(pcs_uffd_check(UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_EVENT_REMOVE,
					&err), -EINVAL);
	ck_assert(strstr(err.msg, "UFFD_FEATURE_EVENT_REMOVE: an madvise(MADV_DONTNEED) "
			 "blocks"));
	ck_assert_int_eq(pcs_uffd_check(UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_SIGBUS, &err),
			 -EINVAL);
	ck_assert(strstr(err.msg, "UFFD_FEATURE_SIGBUS"));
	ck_assert_int_eq(pcs_uffd_check(UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_EVENT_FORK,
					&err), -EINVAL);
	ck_assert_int_eq(pcs_uffd_check(UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_EVENT_REMAP,
					&err), -EINVAL);
	ck_assert_int_eq(pcs_uffd_check(UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_EVENT_UNMAP,
					&err), -EINVAL);
	ck_assert_int_eq(pcs_uffd_check(UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_THREAD_ID |
					UFFD_FEATURE_EXACT_ADDRESS, &err), 0);
}
END_TEST

/* pcs_view_check over @text, for region "vm" at 0x7f0000000000, 2 MiB at
 * offset 4096 of memfd 00:01 inode 1234. */
static int view(const char *text, bool ui)
{
	struct pcs_region r = { .name = "vm", .addr = 0x7f0000000000ull, .size = 2u << 20,
				.offset = 4096 };
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	int rc;

	ck_assert_ptr_nonnull(f);
	rc = pcs_view_check(f, 42, &r, 1234, 0, 1, ui, &err);
	fclose(f);
	return rc;
}

#define VMA(range, perms, off, dev, ino, flags) \
	range " " perms " " off " " dev " " ino "    /memfd:vm (deleted)\n" \
	"Size:               2048 kB\nRss:                   0 kB\n" \
	"VmFlags: rd wr " flags "\n"

/* The VMM's view must be the memfd at OFFSET, shared, whole, and show the
 * registration only while it is there: one row a case. */
START_TEST(view_mappings)
{
#define WHOLE "7f0000000000-7f0000200000"
	static const struct {
		const char *smaps;
		bool ui;
		int rc;
		const char *says;
	} cases[] = {
		{ "7e0000000000-7e0000001000 r-xp 00000000 08:01 99  /usr/lib/x.so\n"
		  "Size: 4 kB\nVmFlags: rd ex\n"
		  VMA(WHOLE, "rw-s", "00001000", "00:01", "1234", "sh mr"), false, 0, NULL },
		{ VMA(WHOLE, "rw-s", "00001000", "00:01", "1234", "sh mr"), true, -EINVAL,
		  "the userfaultfd is another process's" },
		{ VMA(WHOLE, "rw-s", "00001000", "00:01", "1234", "sh ui"), true, 0, NULL },
		{ VMA(WHOLE, "rw-s", "00001000", "00:01", "1234", "sh ui"), false, -EBUSY,
		  "registered with a userfaultfd already" },
		/* split in two (a registration splits mappings), offsets following */
		{ VMA("7f0000000000-7f0000100000", "rw-s", "00001000", "00:01", "1234", "sh ui")
		  VMA("7f0000100000-7f0000200000", "rw-s", "00101000", "00:01", "1234", "sh ui"),
		  true, 0, NULL },
		{ VMA(WHOLE, "rw-s", "00000000", "00:01", "1234", "sh"), false, -EINVAL,
		  "maps its memfd at offset 0, not at 4096 (OFFSET)" },
		{ VMA(WHOLE, "rw-p", "00001000", "00:01", "1234", ""), false, -EINVAL,
		  "does not map the region's memfd MAP_SHARED" },
		{ VMA(WHOLE, "rw-s", "00001000", "00:01", "1235", "sh"), false, -EINVAL,
		  "does not map the region's memfd" },
		{ VMA(WHOLE, "rw-s", "00001000", "00:02", "1234", "sh"), false, -EINVAL,
		  "does not map the region's memfd" },
		{ VMA("7f0000001000-7f0000200000", "rw-s", "00002000", "00:01", "1234", "sh"), false,
		  -EINVAL, "nothing is mapped at 0x7f0000000000" },
		{ VMA("7f0000000000-7f0000100000", "rw-s", "00001000", "00:01", "1234", "sh"), false,
		  -EINVAL, "nothing is mapped at 0x7f0000100000" },
		{ "", false, -EINVAL, "nothing is mapped" },
	};
#undef WHOLE
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_msg(view(cases[i].smaps, cases[i].ui) == cases[i].rc, "case %zu", i);
		if (cases[i].says)
			ck_assert_msg(strstr(err.msg, cases[i].says), "case %zu: %s", i, err.msg);
	}
}
END_TEST

void pcsock_cases(Suite *s)
{
	TCase *tc = tcase_create("decode");

	tcase_add_test(tc, good_message);
	tcase_add_test(tc, bad_messages);
	tcase_add_test(tc, long_name);
	tcase_add_test(tc, state_header);
	tcase_add_test(tc, uffd_features);
	tcase_add_test(tc, view_mappings);
	suite_add_tcase(s, tc);
}
