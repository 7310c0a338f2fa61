/* guestcheck: prepares and checks the test guest of test/guest/bootsect.S.
 *
 *   guestcheck image IN OUT --delay N [--end OFF]
 *   guestcheck ram FILE [--start OFF] [--end OFF] [--allow-zero]
 *
 * `image` sets the guest's pause without reassembling it.  `ram` reads the
 * guest's memory-backend file at a stop and says whether the counts the
 * guest keeps in it are ones a running guest could have left: a live
 * migration that lost a dirty page, or delivered an old copy of one, leaves
 * a step the guest never makes.  Stand-alone: libc only. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define EX_FAIL 1
#define EX_USAGE 2

#define SECTOR_SIZE 512
#define SIG_OFF 510            /* 0x55 0xaa: what makes the BIOS boot it */
#define MAGIC "RDMIGDLY"       /* followed by the delay and the range's end, */
#define MAGIC_LEN 8            /* little-endian u32s */
#define DELAY_LEN 4
#define END_LEN 4

/* The guest's stride, fixed by bootsect.S, whatever the host's page size. */
#define GUEST_PAGE 4096u
#define DEFAULT_START (1ull << 20)
#define DEFAULT_END (101ull << 20)

static const char usage_text[] =
	"usage: guestcheck image IN OUT --delay N [--end OFF]\n"
	"       guestcheck ram FILE [--start OFF] [--end OFF] [--allow-zero]\n"
	"\n"
	"image  copy the boot sector IN (built from test/guest/bootsect.S) to OUT\n"
	"       with its pause set to N: the guest spins N iterations of a\n"
	"       two-instruction loop after each page it touches (0 = none, at\n"
	"       most 4294967295).  N is stored as a little-endian u32 right after\n"
	"       the tag \"RDMIGDLY\" (image offset 0x0a).  IN must be a 512-byte\n"
	"       boot sector holding the tag once.  --end OFF makes the guest walk\n"
	"       [1M, OFF) instead of [1M, 101M) (stored after the delay; a multiple\n"
	"       of 4096 from 1M + 4K to 101M); check it with ram --end OFF.\n"
	"ram    check the guest's RAM file (its memory-backend file, where file\n"
	"       offset == guest-physical address) while the guest is stopped.\n"
	"       The guest adds 1 to byte 0 of every 4 KiB page of [OFF start,\n"
	"       OFF end) in ascending order, pass after pass, so in that order\n"
	"       every page must equal its predecessor except at most one page,\n"
	"       which is one less (mod 256): where the pass in progress stopped.\n"
	"       Prints \"consistent: pass value V, boundary at page K\" (or \"no\n"
	"       boundary\"), V being the first page's byte (passes begun, mod 256)\n"
	"       and K a page number (address / 4096); or \"inconsistent: page P\n"
	"       (0xADDR) holds X after Y\".  A range that is all zero means the\n"
	"       guest never ran and fails unless --allow-zero is given.\n"
	"       --start and --end default to 1M and 101M; they take a K, M or G\n"
	"       suffix and must be multiples of 4096.\n"
	"\n"
	"Exit status: 0 success (ram: consistent), 1 inconsistent, untouched or\n"
	"failed, 2 usage error or a file that cannot be opened.\n";

__attribute__((format(printf, 2, 3)))
static int fail(int code, const char *fmt, ...)
{
	va_list ap;

	fputs("guestcheck: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

static int parse_u32(const char *s, uint32_t *out)
{
	unsigned long long v;
	char *end;

	errno = 0;
	if (*s < '0' || *s > '9')
		return -EINVAL;
	v = strtoull(s, &end, 0);
	if (errno || *end || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/* A byte offset: decimal or 0x hex, with an optional K, M or G suffix. */
static int parse_off(const char *s, uint64_t *out)
{
	static const char units[] = "KMG";
	unsigned long long v;
	char *end;
	int shift = 0;

	errno = 0;
	if (*s < '0' || *s > '9')
		return -EINVAL;
	v = strtoull(s, &end, 0);
	if (errno)
		return -EINVAL;
	if (*end) {
		const char *u = strchr(units, *end & ~0x20);

		if (!u || !*u || end[1])
			return -EINVAL;
		shift = 10 * (int)(u - units + 1);
	}
	if (v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* ---- image ------------------------------------------------------------------ */

/* Reads at most @cap bytes and says how many there were, so a file one byte
 * too long is told from one that fits. */
static ssize_t read_small(const char *path, unsigned char *buf, size_t cap)
{
	unsigned char extra;
	ssize_t n, more;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, cap);
	more = n < 0 ? 0 : read(fd, &extra, 1);
	if (n < 0 || more < 0)
		n = -errno;
	else if (more > 0)
		n = (ssize_t)cap + 1;
	close(fd);
	return n;
}

static int write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, buf, len);
	if (n < 0 || (size_t)n != len) {
		n = n < 0 ? -errno : -EIO;
		close(fd);
		return (int)n;
	}
	return close(fd) ? -errno : 0;
}

/* The tag must be there exactly once: patching the wrong copy would leave
 * the guest with its assembled delay and the test none the wiser. */
static long find_magic(const unsigned char *sec)
{
	const unsigned char *p, *again;
	size_t room = SIG_OFF - DELAY_LEN - END_LEN;

	p = memmem(sec, room, MAGIC, MAGIC_LEN);
	if (!p)
		return -ENOENT;
	again = memmem(p + 1, room - (size_t)(p + 1 - sec), MAGIC, MAGIC_LEN);
	return again ? -EEXIST : (long)(p - sec);
}

static void put_le32(unsigned char *p, uint32_t v)
{
	int i;

	for (i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static int image_write(const char *in, const char *out, uint32_t delay, uint32_t end)
{
	unsigned char sec[SECTOR_SIZE];
	ssize_t n = read_small(in, sec, sizeof(sec));
	long off;
	int err;

	if (n < 0)
		return fail(EX_USAGE, "cannot read %s: %s", in, strerror((int)-n));
	if (n != SECTOR_SIZE)
		return fail(EX_FAIL, "%s is not a boot sector: %s %d bytes", in,
			    n > SECTOR_SIZE ? "more than" : "fewer than", SECTOR_SIZE);
	if (sec[SIG_OFF] != 0x55 || sec[SIG_OFF + 1] != 0xaa)
		return fail(EX_FAIL, "%s is not a boot sector: no 0x55 0xaa at offset %d", in,
			    SIG_OFF);
	off = find_magic(sec);
	if (off == -ENOENT)
		return fail(EX_FAIL, "%s has no \"%s\" tag: not built from bootsect.S", in, MAGIC);
	if (off < 0)
		return fail(EX_FAIL, "%s holds the \"%s\" tag more than once", in, MAGIC);
	put_le32(sec + off + MAGIC_LEN, delay);
	put_le32(sec + off + MAGIC_LEN + DELAY_LEN, end);
	err = write_file(out, sec, sizeof(sec));
	if (err)
		return fail(EX_FAIL, "cannot write %s: %s", out, strerror(-err));
	return 0;
}

static int cmd_image(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "delay", required_argument, NULL, 'd' },
		{ "end", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *delay_arg = NULL;
	uint64_t end = 0;
	uint32_t delay;
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h')
			return fputs(usage_text, stdout) < 0;
		if (c == 'e') {
			if (parse_off(optarg, &end) || end % GUEST_PAGE ||
			    end <= DEFAULT_START || end > DEFAULT_END)
				return fail(EX_USAGE, "--end: invalid offset `%s' (a multiple of 4096 "
					    "from 1M + 4K to 101M)", optarg);
			continue;
		}
		if (c != 'd')
			return fail(EX_USAGE, "image: unknown option or missing value in `%s'",
				    argv[optind - 1]);
		delay_arg = optarg;
	}
	if (argc - optind != 2)
		return fail(EX_USAGE, "image: expected IN OUT (see guestcheck --help)");
	if (!delay_arg)
		return fail(EX_USAGE, "image: --delay N is required");
	if (parse_u32(delay_arg, &delay))
		return fail(EX_USAGE, "--delay: invalid value `%s' (0 to 4294967295)", delay_arg);
	return image_write(argv[optind], argv[optind + 1], delay, (uint32_t)end);
}

/* ---- ram ------------------------------------------------------------------- */

struct scan {
	uint8_t pass;        /* byte of the first page */
	uint64_t boundary;   /* offset of the one page a step lower; 0 if none */
	uint64_t bad;        /* offset of the first page that breaks the rule */
	uint8_t bad_val, bad_prev;
};

/* Walks the pages in the guest's order; true when the bytes are ones a
 * guest stopped at an instruction boundary can hold. */
static bool scan_pages(const unsigned char *ram, uint64_t start, uint64_t end, struct scan *s)
{
	uint8_t prev = ram[start], cur;
	uint64_t off;

	memset(s, 0, sizeof(*s));
	s->pass = prev;
	for (off = start + GUEST_PAGE; off < end; off += GUEST_PAGE, prev = cur) {
		cur = ram[off];
		if (cur == prev)
			continue;
		if (cur == (uint8_t)(prev - 1) && !s->boundary) {
			s->boundary = off;
			continue;
		}
		s->bad = off;
		s->bad_val = cur;
		s->bad_prev = prev;
		return false;
	}
	return true;
}

static int ram_report(const struct scan *s, bool ok, uint64_t start, uint64_t end,
		      bool allow_zero)
{
	if (!ok) {
		printf("inconsistent: page %" PRIu64 " (0x%" PRIx64 ") holds %u after %u\n",
		       s->bad / GUEST_PAGE, s->bad, s->bad_val, s->bad_prev);
		return EX_FAIL;
	}
	if (!s->boundary && !s->pass && !allow_zero) {
		printf("untouched: every page of [0x%" PRIx64 ", 0x%" PRIx64 ") holds 0, so the "
		       "guest never ran (--allow-zero accepts this)\n", start, end);
		return EX_FAIL;
	}
	if (s->boundary)
		printf("consistent: pass value %u, boundary at page %" PRIu64 "\n", s->pass,
		       s->boundary / GUEST_PAGE);
	else
		printf("consistent: pass value %u, no boundary\n", s->pass);
	return 0;
}

static int ram_check(const char *file, uint64_t start, uint64_t end, bool allow_zero)
{
	const unsigned char *ram;
	struct stat st;
	struct scan s;
	bool ok;
	int fd = open(file, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return fail(EX_USAGE, "cannot open %s: %s", file, strerror(errno));
	if (fstat(fd, &st)) {
		close(fd);
		return fail(EX_FAIL, "cannot stat %s: %s", file, strerror(errno));
	}
	if ((uint64_t)st.st_size < end) {
		close(fd);
		return fail(EX_FAIL, "%s is %jd bytes, shorter than --end 0x%" PRIx64, file,
			    (intmax_t)st.st_size, end);
	}
	/* Mapped from 0 so no offset has to suit the host's page size. */
	ram = mmap(NULL, end, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (ram == MAP_FAILED)
		return fail(EX_FAIL, "cannot map %s: %s", file, strerror(errno));
	ok = scan_pages(ram, start, end, &s);
	munmap((void *)ram, end);
	return ram_report(&s, ok, start, end, allow_zero);
}

static int off_arg(const char *opt, const char *s, uint64_t *out)
{
	if (parse_off(s, out) || *out % GUEST_PAGE)
		return fail(EX_USAGE, "%s: invalid offset `%s' (a multiple of 4096, K/M/G allowed)",
			    opt, s);
	return 0;
}

static int cmd_ram(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "start", required_argument, NULL, 's' },
		{ "end", required_argument, NULL, 'e' },
		{ "allow-zero", no_argument, NULL, 'z' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t start = DEFAULT_START, end = DEFAULT_END;
	bool allow_zero = false;
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (off_arg("--start", optarg, &start))
				return EX_USAGE;
			break;
		case 'e':
			if (off_arg("--end", optarg, &end))
				return EX_USAGE;
			break;
		case 'z':
			allow_zero = true;
			break;
		case 'h':
			return fputs(usage_text, stdout) < 0;
		default:
			return fail(EX_USAGE, "ram: unknown option or missing value in `%s'",
				    argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return fail(EX_USAGE, "ram: expected one FILE (see guestcheck --help)");
	if (start >= end)
		return fail(EX_USAGE, "ram: --start 0x%" PRIx64 " is not below --end 0x%" PRIx64,
			    start, end);
	return ram_check(argv[optind], start, end, allow_zero);
}

/* ---- command line ------------------------------------------------------------ */

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {
	{ "image", cmd_image },
	{ "ram", cmd_ram },
};

int main(int argc, char **argv)
{
	size_t i;

	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
		return fputs(usage_text, stdout) < 0;
	if (argc < 2)
		return fail(EX_USAGE, "missing command: image or ram (see guestcheck --help)");
	opterr = 0;
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	return fail(EX_USAGE, "unknown command `%s': image or ram (see guestcheck --help)",
		    argv[1]);
}
