#include "cli.h"
#include "safeopen.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <sodium.h>

const char cli_exit_help[] =
	"Exit status:\n"
	"  0  success\n"
	"  1  internal error; migrate-send: the live process could not be tracked\n"
	"  2  usage: bad command line, missing or unreadable file, bad address;\n"
	"     migrate-recv: blocks that do not match the source's (names, lengths)\n"
	"  3  connection: cannot resolve, connect or listen; no RDMA device\n"
	"  4  rejected by the peer (version, busy, unauthorized)\n"
	"  5  transfer failed after connecting (peer died or reported an error)\n"
	"  6  verification mismatch\n"
	"  7  cancelled (control socket or signal)\n"
	"  8  timeout\n";

/* Set once at start-up; everything else is passed explicitly. */
static const char *prog_name = "rdmig";

void cli_set_prog(const char *prog)
{
	prog_name = prog;
}

const char *cli_prog(void)
{
	return prog_name;
}

static void verr(const char *fmt, va_list ap)
{
	char msg[8192];
	size_t i;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* One line, whatever the message holds (peer text is untrusted). */
	for (i = 0; msg[i]; i++)
		if (msg[i] == '\n' || msg[i] == '\r')
			msg[i] = ' ';
	fprintf(stderr, "%s: %s\n", prog_name, msg);
}

void cli_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verr(fmt, ap);
	va_end(ap);
}

int cli_usage(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verr(fmt, ap);
	va_end(ap);
	return CLI_EX_USAGE;
}

int cli_exit_code(int rc, enum cli_phase phase, const char *msg)
{
	if (!msg)
		msg = "";
	if (rc >= 0)
		return CLI_EX_OK;
	if (rc == -ETIMEDOUT)
		return CLI_EX_TIMEOUT;
	if (rc == -ECANCELED)
		return CLI_EX_CANCELLED;
	if (rc == -EILSEQ)
		return CLI_EX_VERIFY;
	if (rc == -EACCES)
		return CLI_EX_REJECTED;
	if (phase == CLI_PHASE_TRANSFER)
		return CLI_EX_TRANSFER;
	if (rc == -EPROTONOSUPPORT || rc == -EACCES || rc == -EBUSY || strstr(msg, "rejected"))
		return CLI_EX_REJECTED;
	/* The connection was up and the peer (or the protocol) failed it. */
	if (rc == -EPROTO || rc == -ECONNRESET || strstr(msg, " reported: "))
		return CLI_EX_TRANSFER;
	return CLI_EX_CONNECT;
}

/* ---- parsing ------------------------------------------------------------ */

int cli_parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end)
		return -EINVAL;
	if (errno == ERANGE || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int cli_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	switch (*end) {
	case '\0':
		break;
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	default:
		return -EINVAL;
	}
	if (*end) {
		end++;
		/* "64K", "64KiB" and "64KB" all mean 65536. */
		if (!strcmp(end, "iB") || !strcmp(end, "B"))
			end += strlen(end);
		if (*end)
			return -EINVAL;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

int cli_parse_addr(const char *s, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *h = s, *colon;
	size_t hl;
	uint64_t p;

	if (!s || !*s)
		return -EINVAL;
	if (*s == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -EINVAL;
		h = s + 1;
		hl = (size_t)(rb - h);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || strchr(s, ':') != colon)
			return -EINVAL; /* IPv6 needs brackets */
		hl = (size_t)(colon - s);
	}
	if (!hl || hl >= hostlen)
		return -EINVAL;
	if (cli_parse_uint(colon + 1, 65535, &p))
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	snprintf(port, portlen, "%" PRIu64, p);
	return 0;
}

int cli_parse_ram(const char *s, char *name, size_t namelen, const char **path)
{
	const char *eq = strchr(s, '=');
	size_t nl;

	if (!eq || eq == s || !eq[1])
		return -EINVAL;
	nl = (size_t)(eq - s);
	if (nl >= namelen)
		return -ERANGE;
	memcpy(name, s, nl);
	name[nl] = '\0';
	*path = eq + 1;
	return 0;
}

/* ---- RAM files ------------------------------------------------------------ */

static int map_fail(int fd, struct cli_err *err, const char *fmt, const char *path)
{
	int e = errno;

	if (fd >= 0)
		close(fd);
	return cli_err_set(err, -e, fmt, path, strerror(e));
}

int cli_ram_map_ro(struct cli_ram *r, struct cli_err *err)
{
	struct sopen_how how = { .flags = O_RDWR, .dev = r->dev, .ino = r->ino };
	int prot = PROT_READ | PROT_WRITE;
	struct stat st;
	void *p;
	int fd;

	/* An RDMA WRITE source needs local read access only, but rxe (Linux
	 * 6.1) refuses to register a read-only mapping (EFAULT): map it
	 * writable when the file allows, read-only otherwise. */
	fd = sopen_file(r->path, &how, &st, err);
	if (fd == -EACCES || fd == -EROFS || fd == -EPERM) {
		prot = PROT_READ;
		how.flags = O_RDONLY;
		fd = sopen_file(r->path, &how, &st, err);
	}
	if (fd < 0)
		return fd;
	if (st.st_size <= 0) {
		close(fd);
		return cli_err_set(err, -EINVAL, "%s is empty", r->path);
	}
	p = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return map_fail(fd, err, "cannot map %s: %s", r->path);
	close(fd);
	r->host = p;
	r->len = (uint64_t)st.st_size;
	return 0;
}

void cli_ram_unmap(struct cli_ram *r)
{
	if (r->host && !r->borrowed)
		munmap(r->host, (size_t)r->len);
	r->host = NULL;
}

/* ---- JSON ----------------------------------------------------------------- */

struct json_object *cli_event(const char *event)
{
	struct json_object *o = json_object_new_object();

	cli_json_str(o, "event", event);
	return o;
}

void cli_json_u64(struct json_object *o, const char *key, uint64_t v)
{
	json_object_object_add(o, key, json_object_new_uint64(v));
}

void cli_json_str(struct json_object *o, const char *key, const char *v)
{
	json_object_object_add(o, key, json_object_new_string(v));
}

void cli_json_stats(struct json_object *o, const struct rdmig_stats *st)
{
	cli_json_u64(o, "total-time", st->total_time_ms);
	cli_json_u64(o, "setup-time", st->setup_time_ms);
	cli_json_u64(o, "transferred", st->transferred);
	cli_json_u64(o, "remaining", st->remaining);
	cli_json_u64(o, "total", st->total);
	cli_json_u64(o, "duplicate", st->zero_pages);
	cli_json_u64(o, "skipped", st->zero_pages_skipped);
	cli_json_u64(o, "normal", st->normal_pages);
	cli_json_u64(o, "normal-bytes", st->normal_bytes);
	cli_json_u64(o, "dirty-sync-count", st->iterations);
	cli_json_u64(o, "state-bytes", st->state_bytes);
	cli_json_u64(o, "pinned-bytes", st->pinned_bytes);
	cli_json_u64(o, "pinned-peak", st->pinned_peak);
	/* Post-copy's figures, under QEMU's names where it has one. */
	if (st->postcopy_pages) {
		cli_json_u64(o, "postcopy-pages", st->postcopy_pages);
		cli_json_u64(o, "postcopy-requests", st->postcopy_faults);
		cli_json_u64(o, "postcopy-fault-pages", st->postcopy_fault_pages);
		cli_json_u64(o, "postcopy-background-pages", st->postcopy_background_pages);
		cli_json_u64(o, "postcopy-ms", st->postcopy_ms);
		cli_json_u64(o, "postcopy-blocktime", st->postcopy_blocked_ms);
	}
	{
		char num[32];

		snprintf(num, sizeof(num), "%.2f", st->mbps);
		json_object_object_add(o, "mbps", json_object_new_double_s(st->mbps, num));
	}
}

void cli_emit(struct json_object *o)
{
	fputs(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), stdout);
	fputc('\n', stdout);
	fflush(stdout);
	json_object_put(o);
}

void cli_emit_failed(const char *msg, int code, struct json_object *extra)
{
	struct json_object *o = extra ? extra : cli_event("failed");

	if (extra)
		cli_json_str(o, "event", "failed");
	cli_json_str(o, "status", "failed");
	cli_json_str(o, "error", msg);
	json_object_object_add(o, "exit-code", json_object_new_int(code));
	cli_emit(o);
}

/* ---- human output ---------------------------------------------------------- */

const char *cli_fmt_bytes(uint64_t b, char *buf, size_t len)
{
	if (b < 1024)
		snprintf(buf, len, "%" PRIu64 " B", b);
	else if (b < (1ull << 20))
		snprintf(buf, len, "%.1f KiB", (double)b / 1024.0);
	else if (b < (1ull << 30))
		snprintf(buf, len, "%.1f MiB", (double)b / (1024.0 * 1024.0));
	else
		snprintf(buf, len, "%.2f GiB", (double)b / (1024.0 * 1024.0 * 1024.0));
	return buf;
}

void cli_bar_init(struct cli_bar *b, int json)
{
	b->enabled = !json && isatty(2);
	b->drawn = 0;
}

void cli_bar_draw(struct cli_bar *b, double frac, double bytes_per_s, uint64_t iteration)
{
	char bar[31];
	int i, n;

	if (!b->enabled)
		return;
	if (frac < 0)
		frac = 0;
	if (frac > 1)
		frac = 1;
	n = (int)(frac * 30.0);
	for (i = 0; i < 30; i++)
		bar[i] = i < n ? '#' : ' ';
	bar[30] = '\0';
	fprintf(stderr, "\r[%s] %3d%%  %7.1f MiB/s  iteration %" PRIu64 "\033[K", bar,
		(int)(frac * 100.0), bytes_per_s / (1024.0 * 1024.0), iteration);
	b->drawn = 1;
}

void cli_bar_clear(struct cli_bar *b)
{
	if (b && b->drawn) {
		fputs("\r\033[K", stderr);
		b->drawn = 0;
	}
}

void cli_log(void *ctx, int level, const char *msg)
{
	if (level <= RDMIG_LOG_ERROR)
		return;
	cli_bar_clear(ctx);
	cli_err("%s%s", level == RDMIG_LOG_WARN ? "warning: " : "", msg);
}

static void *warm(void *arg)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	(void)arg;
	if (ch)
		rdma_destroy_event_channel(ch);
	return NULL;
}

void cli_warm_rdma(void)
{
	pthread_attr_t at;
	pthread_t t;

	if (pthread_attr_init(&at))
		return;
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_create(&t, &at, warm, NULL);
	pthread_attr_destroy(&at);
}

uint64_t cli_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int cli_read_key(const char *path, uint8_t **key, size_t *len)
{
	struct cli_err why;
	struct stat st;
	uint8_t *buf;
	ssize_t n;
	int fd;

	fd = sopen_file(path, &(struct sopen_how){ .flags = O_RDONLY, .follow = true }, &st, &why);
	if (fd < 0)
		return cli_usage("key file: %s", why.msg);
	/* A key of another user's (reached through a link they control, say)
	 * is one they know. */
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		close(fd);
		return cli_usage("key file %s belongs to uid %u: a key must be root's or yours",
				 path, (unsigned)st.st_uid);
	}
	/* A key others can read is no secret, one others can write no proof. */
	if (st.st_mode & (S_IROTH | S_IWOTH | S_IWGRP)) {
		close(fd);
		return cli_usage("key file %s is accessible to other users (mode %04o): "
				 "run chmod 600 %s", path, (unsigned)(st.st_mode & 07777), path);
	}
	if (st.st_size < 16 || st.st_size > 1024) {
		close(fd);
		return cli_usage("key file %s has %lld bytes: a key needs 16 to 1024 "
				 "(e.g. head -c 32 /dev/urandom > %s)", path,
				 (long long)st.st_size, path);
	}
	/* Locked (never swapped), guarded, wiped when freed. */
	buf = sodium_init() < 0 ? NULL : sodium_malloc((size_t)st.st_size);
	n = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	close(fd);
	if (n != st.st_size) {
		sodium_free(buf);
		return cli_usage("cannot read key file %s", path);
	}
	*key = buf;
	*len = (size_t)n;
	return 0;
}

void cli_free_key(uint8_t *key, size_t len)
{
	(void)len;
	sodium_free(key); /* wipes */
}

static bool plain_name_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       strchr("_+,@:=-", c);
}

/* Whether the dot at @dot starts a suffix migrate-recv uses for its own
 * files next to a block. */
static bool reserved_suffix(const char *dot)
{
	return !strcmp(dot, ".incomplete") || !strcmp(dot, ".part");
}

int cli_block_file_name(const char *name, char *out, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0, i;

	for (i = 0; name[i]; i++) {
		unsigned char c = (unsigned char)name[i];
		bool plain = c && (plain_name_byte(c) ||
				   (c == '.' && i > 0 && !reserved_suffix(name + i)));

		if (o + (plain ? 1 : 3) >= len || o + (plain ? 1 : 3) > NAME_MAX)
			return -ENAMETOOLONG;
		if (plain) {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	if (!o || o >= len)
		return -ENAMETOOLONG;
	out[o] = '\0';
	return 0;
}

/* The advice's words in the events, as the options name them. */
static const char *const decision_names[] = {
	[RDMIG_NEXT_ROUND] = "next-round", [RDMIG_THROTTLE] = "throttle",
	[RDMIG_SWITCH_OVER] = "switch-over", [RDMIG_GIVE_UP] = "give-up",
};
static const char *const reason_names[] = {
	[RDMIG_REASON_NO_ROUND] = "no-round", [RDMIG_REASON_CONVERGED] = "converged",
	[RDMIG_REASON_ROUND_PAYS] = "round-pays", [RDMIG_REASON_NOT_CONVERGED] = "not-converged",
	[RDMIG_REASON_NO_BANDWIDTH] = "no-bandwidth", [RDMIG_REASON_DIRTY_RATE] = "dirty-rate",
	[RDMIG_REASON_STALL] = "stall", [RDMIG_REASON_MAX_TIME] = "max-time",
	[RDMIG_REASON_MAX_ITERATIONS] = "max-iterations",
};

const char *cli_decision_name(uint32_t d)
{
	return d < sizeof(decision_names) / sizeof(decision_names[0]) ? decision_names[d] : "?";
}

const char *cli_reason_name(uint32_t r)
{
	return r < sizeof(reason_names) / sizeof(reason_names[0]) ? reason_names[r] : "?";
}
