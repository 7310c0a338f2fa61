/* The hand-over message of --postcopy-socket (pcsock_msg.h). */
#include "pcsock_msg.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* A line of the message, not NUL-terminated. */
struct line {
	const char *p;
	size_t len;
};

/* The next line from *@pos (without its '\n'); false at the end or for a
 * last line without one. */
static bool next_line(const char *buf, size_t len, size_t *pos, struct line *l)
{
	const char *nl;

	if (*pos >= len)
		return false;
	nl = memchr(buf + *pos, '\n', len - *pos);
	if (!nl)
		return false;
	l->p = buf + *pos;
	l->len = (size_t)(nl - l->p);
	*pos = (size_t)(nl - buf) + 1;
	return true;
}

/* The next space-separated word of @l, consumed; its length, 0 at the end. */
static size_t next_word(struct line *l, const char **w)
{
	size_t n = 0;

	while (l->len && *l->p == ' ') {
		l->p++;
		l->len--;
	}
	*w = l->p;
	while (n < l->len && l->p[n] != ' ')
		n++;
	l->p += n;
	l->len -= n;
	return n;
}

static bool word_is(const char *w, size_t n, const char *lit)
{
	return n == strlen(lit) && !memcmp(w, lit, n);
}

/* A number in decimal or 0x-hex, no sign, no overflow. */
static bool parse_u64(const char *w, size_t n, uint64_t *out)
{
	unsigned base = 10, d;
	uint64_t v = 0;
	size_t i = 0;

	if (n > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'X')) {
		base = 16;
		i = 2;
	}
	if (i == n)
		return false;
	for (; i < n; i++) {
		char c = w[i];

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (base == 16 && c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			return false;
		if (v > (UINT64_MAX - d) / base)
			return false;
		v = v * base + d;
	}
	*out = v;
	return true;
}

/* "KEYWORD NUMBER", nothing after. */
static int keyword_num(struct line *l, const char *kw, uint64_t *v, struct cli_err *err)
{
	const char *w;
	size_t n = next_word(l, &w);

	if (!word_is(w, n, kw))
		return cli_err_set(err, -EPROTO, "expected a \"%s\" line", kw);
	n = next_word(l, &w);
	if (!n || !parse_u64(w, n, v) || next_word(l, &w))
		return cli_err_set(err, -EPROTO, "a malformed \"%s\" line", kw);
	return 0;
}

/* A block name as the library takes them: 1..255 printable bytes (no
 * space: it ends the word). */
static int take_name(struct pcs_region *r, const char *w, size_t n, unsigned i,
		     struct cli_err *err)
{
	size_t k;

	if (!n || n >= sizeof(r->name))
		return cli_err_set(err, -EINVAL, "region %u: a name of %zu bytes (1 to %zu)", i, n,
				   sizeof(r->name) - 1);
	for (k = 0; k < n; k++)
		if ((unsigned char)w[k] < 0x21 || (unsigned char)w[k] > 0x7e)
			return cli_err_set(err, -EINVAL, "region %u: its name has byte 0x%02x",
					   i, (unsigned char)w[k]);
	memcpy(r->name, w, n);
	r->name[n] = '\0';
	return 0;
}

/* Whole pages, within an address space, not wrapping. */
static int check_region(const struct pcs_region *r, uint64_t page, struct cli_err *err)
{
	if (page != PCS_PAGE)
		return cli_err_set(err, -EINVAL, "region \"%s\": page size %" PRIu64 " (only %u "
				   "is served)", r->name, page, PCS_PAGE);
	if (!r->size || r->size > PCS_MAX_SPAN || r->size % PCS_PAGE)
		return cli_err_set(err, -EINVAL, "region \"%s\": size %" PRIu64 " is not whole "
				   "pages of at most 2^47 bytes", r->name, r->size);
	if (r->offset > PCS_MAX_SPAN || r->offset % PCS_PAGE)
		return cli_err_set(err, -EINVAL, "region \"%s\": offset %" PRIu64 " is not a "
				   "page boundary below 2^47", r->name, r->offset);
	if (!r->addr || r->addr % PCS_PAGE || r->addr > PCS_MAX_SPAN ||
	    r->size > PCS_MAX_SPAN - r->addr)
		return cli_err_set(err, -EINVAL, "region \"%s\": address 0x%" PRIx64 " (+ %"
				   PRIu64 ") is not a page of a user address space", r->name,
				   r->addr, r->size);
	return 0;
}

static int parse_region(struct line *l, unsigned i, struct pcs_region *r, struct cli_err *err)
{
	const char *w;
	uint64_t page;
	size_t n = next_word(l, &w);
	int rc;

	if (!word_is(w, n, "region"))
		return cli_err_set(err, -EPROTO, "region %u: expected a \"region\" line", i);
	n = next_word(l, &w);
	rc = take_name(r, w, n, i, err);
	if (rc)
		return rc;
	n = next_word(l, &w);
	if (!parse_u64(w, n, &r->addr))
		return cli_err_set(err, -EPROTO, "region \"%s\": a malformed address", r->name);
	n = next_word(l, &w);
	if (!parse_u64(w, n, &r->size))
		return cli_err_set(err, -EPROTO, "region \"%s\": a malformed size", r->name);
	n = next_word(l, &w);
	if (!parse_u64(w, n, &r->offset))
		return cli_err_set(err, -EPROTO, "region \"%s\": a malformed offset", r->name);
	n = next_word(l, &w);
	if (!parse_u64(w, n, &page) || next_word(l, &w))
		return cli_err_set(err, -EPROTO, "region \"%s\": a malformed page size", r->name);
	return check_region(r, page, err);
}

/* Two regions of one name would be one block twice; two overlapping views
 * would make a fault's address name two blocks. */
static int check_pairs(const struct pcs_msg *m, struct cli_err *err)
{
	unsigned i, j;

	for (i = 0; i < m->n; i++)
		for (j = 0; j < i; j++) {
			const struct pcs_region *a = &m->r[i], *b = &m->r[j];

			if (!strcmp(a->name, b->name))
				return cli_err_set(err, -EINVAL, "region \"%s\" is listed twice",
						   a->name);
			if (a->addr < b->addr + b->size && b->addr < a->addr + a->size)
				return cli_err_set(err, -EINVAL, "regions \"%s\" and \"%s\" overlap",
						   b->name, a->name);
		}
	return 0;
}

int pcs_complete(const char *buf, size_t len)
{
	static const char end[] = "\nend\n";

	return len >= sizeof(end) - 1 && !memcmp(buf + len - (sizeof(end) - 1), end,
						sizeof(end) - 1);
}

int pcs_decode(const char *buf, size_t len, unsigned nfds, struct pcs_msg *m,
	       struct cli_err *err)
{
	struct line l;
	size_t pos = 0;
	uint64_t v;
	int rc;

	m->n = 0;
	if (len > PCS_MAX_MSG)
		return cli_err_set(err, -EINVAL, "a message of %zu bytes (at most %u)", len,
				   PCS_MAX_MSG);
	if (!next_line(buf, len, &pos, &l) || keyword_num(&l, "rdmig-postcopy-socket", &v, err))
		return cli_err_set(err, -EPROTO, "not a post-copy socket message (its first line "
				   "is \"rdmig-postcopy-socket %u\")", PCS_VERSION);
	if (v != PCS_VERSION)
		return cli_err_set(err, -EPROTO, "version %" PRIu64 " (this migrate-recv speaks "
				   "%u)", v, PCS_VERSION);
	if (!next_line(buf, len, &pos, &l))
		return cli_err_set(err, -EPROTO, "the message ends before its \"regions\" line");
	rc = keyword_num(&l, "regions", &v, err);
	if (rc)
		return rc;
	if (!v || v > PCS_MAX_REGIONS)
		return cli_err_set(err, -EINVAL, "%" PRIu64 " regions (1 to %u)", v,
				   PCS_MAX_REGIONS);
	if (nfds != v + 1)
		return cli_err_set(err, -EINVAL, "%u fds for %" PRIu64 " regions (the userfaultfd "
				   "and one memfd each: %" PRIu64 ")", nfds, v, v + 1);
	for (m->n = 0; m->n < v; m->n++) {
		if (!next_line(buf, len, &pos, &l))
			return cli_err_set(err, -EPROTO, "the message ends after %u of %" PRIu64
					   " regions", m->n, v);
		rc = parse_region(&l, m->n, &m->r[m->n], err);
		if (rc)
			return rc;
	}
	if (!next_line(buf, len, &pos, &l) || !word_is(l.p, l.len, "end") || pos != len)
		return cli_err_set(err, -EPROTO, "expected \"end\" after the regions, and nothing "
				   "after it");
	return check_pairs(m, err);
}

/* ---- the device state's header ------------------------------------------------ */

size_t pcs_state_line(char *buf, uint64_t n)
{
	return (size_t)snprintf(buf, PCS_STATE_LINE_MAX, "state %" PRIu64 "\n", n);
}

int pcs_state_parse(const char *line, uint64_t max, uint64_t *n, struct cli_err *err)
{
	struct line l = { line, strlen(line) };
	int rc = keyword_num(&l, "state", n, err);

	if (rc)
		return rc;
	/* Decimal without leading zeros, as migrate-recv writes it: one
	 * spelling, so a line that is not ours shows. */
	if (strncmp(line, "state ", 6) || strspn(line + 6, "0123456789") != strlen(line + 6) ||
	    (line[6] == '0' && line[7]))
		return cli_err_set(err, -EPROTO, "a malformed \"state\" line");
	if (*n > max)
		return cli_err_set(err, -EFBIG, "%" PRIu64 " bytes of device state, more than the "
				   "%" PRIu64 " taken", *n, max);
	return 0;
}

/* ---- the VMM's userfaultfd ------------------------------------------------------ */

int pcs_uffd_features(const char *fdinfo, uint32_t *features, struct cli_err *err)
{
	const char *l = fdinfo;
	unsigned long long api, ioctls;
	unsigned f;

	for (; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		if (!strncmp(l, "API:", 4) && sscanf(l + 4, "%llx:%x:%llx", &api, &f, &ioctls) == 3) {
			*features = f;
			return 0;
		}
	return cli_err_set(err, -EPROTO, "its fdinfo has no \"API:\" line (UFFDIO_API not "
			   "done?)");
}

/* The features refused, and why: each changes what a fault or a placement
 * does in a way the post-copy thread does not handle. */
static const struct {
	uint32_t bit;
	const char *name, *why;
} refused[] = {
	{ UFFD_FEATURE_SIGBUS, "UFFD_FEATURE_SIGBUS",
	  "a vCPU's fault would raise SIGBUS instead of waiting for its page" },
	{ UFFD_FEATURE_EVENT_FORK, "UFFD_FEATURE_EVENT_FORK",
	  "a fork blocks until its event is read, and the child's userfaultfd is nobody's" },
	{ UFFD_FEATURE_EVENT_REMAP, "UFFD_FEATURE_EVENT_REMAP",
	  "an mremap blocks until its event is read, and moves a view under the faults" },
	{ UFFD_FEATURE_EVENT_REMOVE, "UFFD_FEATURE_EVENT_REMOVE",
	  "an madvise(MADV_DONTNEED) blocks until its event is read, and placing pages "
	  "fails with EAGAIN meanwhile" },
	{ UFFD_FEATURE_EVENT_UNMAP, "UFFD_FEATURE_EVENT_UNMAP",
	  "an munmap blocks until its event is read, and takes a view away under the faults" },
};

int pcs_uffd_check(uint32_t features, struct cli_err *err)
{
	size_t i;

	if (!(features & UFFD_FEATURE_MINOR_SHMEM))
		return cli_err_set(err, -EINVAL, "the userfaultfd lacks UFFD_FEATURE_MINOR_SHMEM: "
				   "give it to UFFDIO_API (Linux 5.14+), the views are shared memory");
	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (features & refused[i].bit)
			return cli_err_set(err, -EINVAL, "the userfaultfd has %s: %s; make it "
					   "without", refused[i].name, refused[i].why);
	return 0;
}

/* ---- the VMM's views ------------------------------------------------------------ */

/* One mapping of /proc/PID/smaps: its range, file and offset, whether
 * shared, and whether its VmFlags say "ui" (registered for minor faults). */
struct vma {
	uint64_t start, end, off, ino;
	unsigned maj, min;
	bool shared, ui;
};

/* Whether the VMM's mappings over the region's view are its memfd (@st),
 * shared, at OFFSET, whole, and registered for minor faults (@ui) or not.
 * The message names the first thing found wrong. */
static int check_vma(int pid, const struct pcs_region *r, uint64_t ino, unsigned maj,
		     unsigned min, bool ui, const struct vma *v, uint64_t at, struct cli_err *err)
{
	uint64_t off = v->off + (at - v->start), want = r->offset + (at - r->addr);

	if (v->start > at)
		return cli_err_set(err, -EINVAL, "region \"%s\": nothing is mapped at 0x%" PRIx64
				   " in the VMM (pid %d)", r->name, at, pid);
	if (!v->shared || v->ino != ino || v->maj != maj || v->min != min)
		return cli_err_set(err, -EINVAL, "region \"%s\": at 0x%" PRIx64 " the VMM (pid %d) "
				   "does not map the region's memfd MAP_SHARED", r->name, at,
				   pid);
	if (off != want)
		return cli_err_set(err, -EINVAL, "region \"%s\": at 0x%" PRIx64 " the VMM (pid %d) "
				   "maps its memfd at offset %" PRIu64 ", not at %" PRIu64
				   " (OFFSET)", r->name, at, pid, off, want);
	if (v->ui && !ui)
		return cli_err_set(err, -EBUSY, "region \"%s\": the VMM's mapping at 0x%" PRIx64
				   " is registered with a userfaultfd already (only migrate-recv "
				   "registers the views)", r->name, at);
	if (!v->ui && ui)
		return cli_err_set(err, -EINVAL, "region \"%s\": registering its view did not "
				   "register the VMM's (pid %d) mapping: the userfaultfd is another "
				   "process's (make it in the process that maps the views and runs "
				   "the vCPUs)", r->name, pid);
	return 0;
}

int pcs_view_check(FILE *smaps, int pid, const struct pcs_region *r, uint64_t ino,
		   unsigned maj, unsigned min, bool ui, struct cli_err *err)
{
	uint64_t hi = r->addr + r->size, covered = r->addr;
	struct vma v = { 0 };
	bool have = false;
	char line[512];
	int rc = 0;

	/* A mapping is judged at its VmFlags line, its last. */
	while (!rc && covered < hi && fgets(line, sizeof(line), smaps)) {
		unsigned long long a, b, off, inode;
		unsigned ma, mi;
		char perms[8];

		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &a, &b, perms, &off, &ma, &mi,
			   &inode) == 7) {
			v = (struct vma){ .start = a, .end = b, .off = off, .ino = inode, .maj = ma,
					  .min = mi, .shared = perms[3] == 's' };
			have = true;
			continue;
		}
		if (!have || strncmp(line, "VmFlags:", 8))
			continue;
		have = false;
		if (v.end <= covered || v.start >= hi)
			continue;
		v.ui = strstr(line + 8, " ui") != NULL;
		rc = check_vma(pid, r, ino, maj, min, ui, &v, covered, err);
		covered = v.end;
	}
	if (!rc && covered < hi)
		rc = cli_err_set(err, -EINVAL, "region \"%s\": nothing is mapped at 0x%" PRIx64
				 " in the VMM (pid %d)", r->name, covered, pid);
	return rc;
}
