/* pcvmm: a test VMM in a process of its own, for migrate-recv's
 * --postcopy-socket (migrate-recv(1), POST-COPY SOCKET).
 *
 *   pcvmm SOCKET NAME SIZE SUMS [--threads N] [--die-after-run MS]
 *         [--bad WHAT] [--stall-state]
 *
 * Makes a memfd of SIZE bytes as guest RAM block NAME, sealed against
 * shrinking, maps it shared,
 * makes a userfaultfd (UFFD_FEATURE_MINOR_SHMEM), connects to SOCKET
 * (waiting up to 30 s for it) and hands both over.  On "ok" it drops its
 * page-table entries of the block, as the contract asks, says "attached"
 * and waits for its device state, "state N" and N bytes (1 GiB at most,
 * migrate-recv's default --max-state); it prints "digest state HEX"
 * (FNV-1a 64 of the bytes) and "state bytes N", as examples/vmm-dest.c
 * does, and reads the block's first page, as loading a state may.  On
 * "run" it says "running", and N threads (2) read random pages for 300
 * ms, each page's checksum noted; then it waits for "complete".  At
 * "complete" the checksums of the pages read go to SUMS.seen ("PAGE HEX"
 * lines) and of every page (FNV-1a 64, one hex line a page) to SUMS; it
 * may come right after the state (a pre-copy that completed).  After
 * "run", "failed:" or migrate-recv's hangup is fatal: the threads are
 * stopped while the userfaultfd is still held, SUMS.seen written, and
 * pcvmm says how many threads were left blocked ("guest stopped") and
 * exits 3.
 *
 * --die-after-run MS: killed by itself MS after "run" (a VMM that dies
 * during post-copy).  --bad size|count|fds: a message that is wrong in
 * that way; --bad offset: an OFFSET (4096) that is not where the view
 * maps the memfd (0); --bad unsealed: a memfd without F_SEAL_SHRINK;
 * --bad event-remove: a userfaultfd with
 * UFFD_FEATURE_EVENT_REMOVE.  --stall-state: reads nothing after "ok" (a
 * VMM that stops reading) until migrate-recv hangs up.  Exit: 0 complete,
 * 2 refused ("error: ..." on stderr), 3 failed, 4 cannot connect, 1
 * anything else. */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "pcsock_msg.h"

#define PAGE 4096u
/* The state taken at most: migrate-recv's default --max-state. */
#define STATE_MAX (1ull << 30)

static uint8_t *ram;
static uint64_t size;
static volatile int stop_touch;
/* The guest's threads ("vCPUs"): each says when it stopped, so one that
 * waits on a page that never came is seen without joining it. */
static pthread_t th[16];
static volatile int th_done[16];
static unsigned nth;
/* Every page a thread read, by its checksum (0: not read): the test
 * compares them with the source's, so a stale page would show. */
static uint64_t *seen;
static char seen_path[1100];

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static void die(const char *what)
{
	fprintf(stderr, "pcvmm: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* --bad event-remove asks UFFD_FEATURE_EVENT_REMOVE too: a VMM that
 * migrate-recv must refuse at the hand-over. */
static int make_uffd(const char *bad)
{
	struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_MINOR_SHMEM };

	if (bad && !strcmp(bad, "event-remove"))
		api.features |= UFFD_FEATURE_EVENT_REMOVE;
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);

	/* A peer without the privilege (another user, in the tests) still
	 * connects: it is to be refused for who it is, before any fd counts. */
	if (fd < 0 && errno == EPERM)
		return open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("userfaultfd");
	if (ioctl(fd, UFFDIO_API, &api))
		die("UFFDIO_API (MINOR_SHMEM)");
	return fd;
}

static int connect_to(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, i;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	for (i = 0; i < 300; i++) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			die("socket");
		if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			return fd;
		close(fd);
		if (errno != ENOENT && errno != ECONNREFUSED) {
			fprintf(stderr, "pcvmm: connect %s: %s\n", path, strerror(errno));
			exit(4);
		}
		usleep(100000);
	}
	fprintf(stderr, "pcvmm: %s never came\n", path);
	exit(4);
}

static void send_handover(int s, const char *name, int uffd, int memfd, const char *bad)
{
	char msg[1024];
	int fds[3] = { uffd, memfd, memfd };
	unsigned nfds = bad && !strcmp(bad, "fds") ? 3 : 2;
	union {
		char b[CMSG_SPACE(sizeof(fds))];
		struct cmsghdr align;
	} c;
	struct iovec iov = { msg, 0 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b,
			     .msg_controllen = CMSG_SPACE(nfds * sizeof(int)) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

	iov.iov_len = (size_t)snprintf(msg, sizeof(msg), "rdmig-postcopy-socket 1\nregions %s\n"
				       "region %s 0x%llx %llu %s 4096\nend\n",
				       bad && !strcmp(bad, "count") ? "2" : "1", name,
				       (unsigned long long)(uintptr_t)ram,
				       (unsigned long long)(bad && !strcmp(bad, "size") ?
							    size - 1 : size),
				       bad && !strcmp(bad, "offset") ? "4096" : "0");
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	if (sendmsg(s, &mh, MSG_NOSIGNAL) < 0)
		die("sendmsg");
}

/* One line from migrate-recv (blocking); exits if it hung up. */
static void read_line(int s, char *buf, size_t len)
{
	size_t n = 0;

	while (n + 1 < len) {
		ssize_t r = read(s, buf + n, 1);

		if (r <= 0) {
			fprintf(stderr, "pcvmm: migrate-recv hung up\n");
			exit(3);
		}
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
}

/* FNV-1a 64, the tests' digest of pages and state alike. */
static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* "state N" in @line, then N bytes: their digest printed, as a VMM would
 * load them before its vCPUs run. */
static void read_state(int s, const char *line)
{
	uint64_t n, h = 0xcbf29ce484222325ull, got = 0;
	struct cli_err err;
	uint8_t buf[65536];

	if (pcs_state_parse(line, STATE_MAX, &n, &err)) {
		fprintf(stderr, "pcvmm: %s: %s\n", line, err.msg);
		exit(3);
	}
	while (got < n) {
		size_t want = n - got < sizeof(buf) ? (size_t)(n - got) : sizeof(buf);
		ssize_t r = read(s, buf, want);

		if (r <= 0) {
			fprintf(stderr, "pcvmm: migrate-recv hung up after %llu of %llu state "
				"bytes\n", (unsigned long long)got, (unsigned long long)n);
			exit(3);
		}
		h = fnv(h, buf, (size_t)r);
		got += (uint64_t)r;
	}
	printf("digest state %016llx\nstate bytes %llu\n", (unsigned long long)h,
	       (unsigned long long)n);
	fflush(stdout);
}

/* Reads nothing more: migrate-recv must give up on its own. */
static void stall(int s)
{
	struct pollfd p = { .fd = s, .events = POLLRDHUP };

	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
	fprintf(stderr, "pcvmm: migrate-recv hung up while stalled\n");
	exit(3);
}

static void *toucher(void *arg)
{
	unsigned me = (unsigned)(uintptr_t)arg;
	uint64_t x = (uint64_t)(me + 1) * 0x9e3779b97f4a7c15ull + 1;

	while (!stop_touch) {
		uint64_t pg;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		pg = x % (size / PAGE);
		/* The guest only reads: a page's sum is the same at every read. */
		__atomic_store_n(&seen[pg], fnv(0xcbf29ce484222325ull, ram + pg * PAGE, PAGE) | 1,
				 __ATOMIC_RELAXED);
	}
	th_done[me] = 1;
	return NULL;
}

/* "PAGE SUM" for every page a thread read (SUMS.seen); the test checks
 * each against the source's page (the low bit is forced on: 0 is "not
 * read"). */
static void write_seen(void)
{
	FILE *f = fopen(seen_path, "w");
	uint64_t p;

	if (!f)
		die(seen_path);
	for (p = 0; p < size / PAGE; p++)
		if (seen[p])
			fprintf(f, "%llu %016llx\n", (unsigned long long)p, (unsigned long long)seen[p]);
	if (fclose(f))
		die(seen_path);
}

/* After "run", a "failed:" line or migrate-recv's hangup is fatal: the
 * guest's memory is split between the hosts.  As migrate-recv(1) asks, the
 * vCPUs stop while the userfaultfd is still held (it is never closed
 * here): a thread waiting on a page that never came stays blocked rather
 * than read the stale page cache.  Exit 3. */
static void fatal_after_run(const char *why)
{
	unsigned i, blocked = 0;

	stop_touch = 1;
	usleep(500000);
	for (i = 0; i < nth; i++)
		blocked += !th_done[i];
	write_seen();
	fprintf(stderr, "pcvmm: after run: %s: guest stopped, %u of %u vCPU threads blocked "
		"on pages that never came; the userfaultfd held to the end\n", why, blocked, nth);
	exit(3);
}

static void write_sums(const char *path)
{
	FILE *f = fopen(path, "w");
	uint64_t p;

	if (!f)
		die(path);
	for (p = 0; p < size / PAGE; p++)
		fprintf(f, "%016llx\n",
			(unsigned long long)fnv(0xcbf29ce484222325ull, ram + p * PAGE, PAGE));
	if (fclose(f))
		die(path);
}

/* One line, or NULL at EOF (read_line's, without exiting). */
static const char *get_line(int s, char *buf, size_t len)
{
	size_t n = 0;

	while (n + 1 < len) {
		if (read(s, buf + n, 1) <= 0)
			return NULL;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return buf;
}

/* Watches migrate-recv for @ms (all the threads stopped, for -1): a
 * "complete" is noted in *@complete, anything else after "run" is fatal. */
static void watch(int s, int ms, int *complete)
{
	uint64_t t0 = now_ms();
	char line[2048];

	for (;;) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		int left = 50;
		unsigned i, done = 0;

		for (i = 0; i < nth; i++)
			done += th_done[i];
		if (ms < 0 ? done == nth : now_ms() - t0 >= (uint64_t)ms)
			return;
		if (*complete) {
			usleep(left * 1000);
			continue;
		}
		if (poll(&p, 1, left) <= 0)
			continue;
		if (!get_line(s, line, sizeof(line)))
			fatal_after_run("migrate-recv hung up");
		if (strcmp(line, "complete"))
			fatal_after_run(line);
		*complete = 1;
	}
}

/* The guest runs for 300 ms, its threads stopped, and "complete" awaited;
 * migrate-recv may fail or go meanwhile. */
static void run_guest(int s, unsigned threads)
{
	int complete = 0;
	unsigned i;

	nth = threads;
	stop_touch = 0;
	for (i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, toucher, (void *)(uintptr_t)i);
	watch(s, 300, &complete);
	stop_touch = 1;
	watch(s, -1, &complete);
	for (i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	while (!complete) {
		char line[2048];

		if (!get_line(s, line, sizeof(line)))
			fatal_after_run("migrate-recv hung up");
		if (strcmp(line, "complete"))
			fatal_after_run(line);
		complete = 1;
	}
}

int main(int argc, char **argv)
{
	const char *bad = NULL;
	unsigned threads = 2, die_ms = 0;
	int stall_state = 0;
	char line[2048];
	int memfd, uffd, s, i;

	if (argc < 5) {
		fprintf(stderr, "usage: pcvmm SOCKET NAME SIZE SUMS [--threads N] "
			"[--die-after-run MS] [--bad size|count|fds]\n");
		return 2;
	}
	for (i = 5; i < argc; i += 2) {
		if (!strcmp(argv[i], "--stall-state")) {
			stall_state = 1;
			i--;
		} else if (i + 1 == argc) {
			break;
		} else if (!strcmp(argv[i], "--threads"))
			threads = (unsigned)atoi(argv[i + 1]) % 16 ? (unsigned)atoi(argv[i + 1]) % 16 : 1;
		else if (!strcmp(argv[i], "--die-after-run"))
			die_ms = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--bad"))
			bad = argv[i + 1];
	}
	size = strtoull(argv[3], NULL, 0);
	seen = calloc(size / PAGE + 1, sizeof(*seen));
	if (!seen)
		die("calloc");
	snprintf(seen_path, sizeof(seen_path), "%s.seen", argv[4]);
	memfd = memfd_create(argv[2], MFD_CLOEXEC | MFD_ALLOW_SEALING);
	/* --bad offset: the memfd is long enough for the OFFSET claimed, but
	 * the view maps it from 0. */
	if (memfd < 0 || ftruncate(memfd, (off_t)(size + (bad && !strcmp(bad, "offset") ?
							   PAGE : 0))))
		die("memfd");
	/* Sealed against shrinking, as migrate-recv requires: it writes the
	 * memfd through a mapping of its own.  --bad unsealed: not. */
	if ((!bad || strcmp(bad, "unsealed")) && fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK))
		die("F_ADD_SEALS");
	ram = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (ram == MAP_FAILED)
		die("mmap");
	uffd = make_uffd(bad);
	s = connect_to(argv[1]);
	send_handover(s, argv[2], uffd, memfd, bad);
	read_line(s, line, sizeof(line));
	if (strcmp(line, "ok")) {
		fprintf(stderr, "pcvmm: %s\n", line);
		return 2;
	}
	/* The contract: no page-table entry of guest memory survives from
	 * here (pre-copy writes the memfd through migrate-recv's mapping), and
	 * no guest memory is touched until the state comes; the views are
	 * registered by then, so every first touch faults to migrate-recv. */
	if (madvise(ram, size, MADV_DONTNEED))
		die("madvise");
	printf("attached\n");
	fflush(stdout);
	if (stall_state)
		stall(s);
	read_line(s, line, sizeof(line));
	if (strncmp(line, "state ", 6)) {
		fprintf(stderr, "pcvmm: %s\n", line);
		return 3;
	}
	read_state(s, line);
	/* Loading a device state reads guest memory: so does this (its first
	 * page, noted as the threads note theirs), a fault at a switch. */
	seen[0] = fnv(0xcbf29ce484222325ull, ram, PAGE) | 1;
	read_line(s, line, sizeof(line));
	/* Completed in pre-copy: every page is in, nothing to fault. */
	if (!strcmp(line, "complete")) {
		write_seen();
		write_sums(argv[4]);
		printf("complete\n");
		return 0;
	}
	if (strcmp(line, "run")) {
		fprintf(stderr, "pcvmm: %s\n", line);
		return 3;
	}
	printf("running\n");
	fflush(stdout);
	if (die_ms) {
		usleep(die_ms * 1000u);
		kill(getpid(), SIGKILL);
	}
	run_guest(s, threads);
	write_seen();
	write_sums(argv[4]);
	printf("complete\n");
	return 0;
}
