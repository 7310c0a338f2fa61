/* vmm-dest: how a VMM receives a guest with rdmig from its own poll loop.
 *
 *   vmm-dest HOST PORT [--mib N]
 *
 * The guest's RAM is anonymous private memory, never touched before the
 * migration (so the library knows it is zero and skips zero pages).  The
 * device state arrives in the state callback, in order, whenever the
 * source sends it; its buffer is only valid during the call, so it is
 * copied.  Once rdmig_dest_process() returns 1 the source holds the
 * confirmation: the guest could start here.  Prints "listening PORT" when
 * ready, then one "digest" line per region for a test to compare with
 * vmm-source's.
 *
 * A real destination also sets auth_key (anyone who can reach the port may
 * otherwise send it a guest), max_image, and an admit callback that creates
 * nothing for a connection before it is called; see rdmig(3). */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <rdmig.h>

struct vmm {
	uint8_t *ram;
	uint64_t ram_len;
	uint64_t state_len, state_sum;
};

static int on_state(void *ctx, const void *data, size_t len, char *err, size_t errlen)
{
	struct vmm *v = ctx;
	const uint8_t *p = data;
	size_t i;

	(void)err;
	(void)errlen;
	for (i = 0; i < len; i++)
		v->state_sum = v->state_sum * 31 + p[i];
	v->state_len += len;
	return 0;
}

static uint64_t sum(const uint8_t *p, uint64_t n)
{
	uint64_t h = 1469598103934665603ull, i;

	for (i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* Waits in the loop, not in the library, for a request it can accept: a
 * malformed or keyless one is turned away and the next one awaited. */
static int accept_one(struct rdmig_dest *d, struct rdmig_listener *l)
{
	struct pollfd pfd = { .fd = rdmig_listener_fd(l), .events = POLLIN };
	int rc;

	for (;;) {
		/* The VMM's own loop would watch its devices here too. */
		if (poll(&pfd, 1, 60000) == 0)
			return -ETIMEDOUT;
		rc = rdmig_dest_accept(d, l, 0);
		if (rc == -EAGAIN)
			continue;
		if (rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EACCES) {
			fprintf(stderr, "vmm-dest: turned away a source: %s\n",
				rdmig_dest_error(d));
			continue;
		}
		return rc;
	}
}

/* rdmig(3), "The event loop": wait for the one fd or the timeout, then
 * process; the VMM's own fds would be in the same poll set. */
static int serve(struct rdmig_dest *d, struct rdmig_listener *l)
{
	struct pollfd pfd = { .fd = rdmig_dest_fd(d), .events = POLLIN };
	int rc;

	rc = accept_one(d, l);
	while (!rc) {
		poll(&pfd, 1, rdmig_dest_timeout(d));
		rc = rdmig_dest_process(d);
	}
	return rc < 0 ? rc : 0;
}

int main(int argc, char **argv)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	struct rdmig_listener *l = NULL;
	struct rdmig_dest *d = NULL;
	struct rdmig_config cfg;
	struct vmm v = { 0 };
	char err[512];
	uint64_t mib = 64;
	int i, rc;

	if (argc < 3) {
		fprintf(stderr, "usage: vmm-dest HOST PORT [--mib N]\n");
		return 2;
	}
	for (i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--mib") && i + 1 < argc) {
			mib = strtoull(argv[++i], NULL, 10);
		} else {
			fprintf(stderr, "vmm-dest: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	v.ram_len = mib << 20;
	v.ram = mmap(NULL, v.ram_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (v.ram == MAP_FAILED)
		return 1;
	rdmig_config_init(&cfg);
	cfg.state = on_state;
	cfg.state_ctx = &v;
	cfg.timeout_ms = 10000;
	rc = rdmig_listener_create(&l, argv[1], argv[2], err, sizeof(err));
	if (rc) {
		fprintf(stderr, "vmm-dest: %s\n", err);
		return 1;
	}
	printf("listening %d\n", rdmig_listener_port(l));
	fflush(stdout);
	rc = rdmig_dest_create(&d, &cfg);
	if (!rc)
		rc = rdmig_dest_add_block(d, "pc.ram", v.ram, v.ram_len, 1) < 0 ? -EINVAL : 0;
	if (!rc)
		rc = serve(d, l);
	if (rc) {
		const char *why = d ? rdmig_dest_error(d) : "";

		fprintf(stderr, "vmm-dest: %s\n", why[0] ? why : strerror(-rc));
	} else {
		rdmig_dest_stats(d, &st);
		printf("received %" PRIu64 " bytes in %" PRIu64 " iterations, %" PRIu64
		       " state bytes, %.1f Mbit/s\n", st.normal_bytes, st.iterations,
		       v.state_len, st.mbps);
		printf("digest ram %016" PRIx64 "\n", sum(v.ram, v.ram_len));
		printf("digest state %016" PRIx64 "\n", v.state_sum);
	}
	rdmig_dest_destroy(d);
	rdmig_listener_destroy(l);
	return rc ? 1 : 0;
}
