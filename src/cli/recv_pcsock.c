/* migrate-recv's --postcopy-socket (recv_pcsock.h).
 *
 * The socket is made mode 0600 and takes one VMM: a peer of another user
 * (SO_PEERCRED; root excepted) is refused and migrate-recv goes on
 * waiting, since whoever attaches receives the guest's memory.  What the
 * VMM sends is untrusted: the message is decoded by pcsock_msg.c, and the
 * fds are checked for what they claim to be (a userfaultfd with features
 * the post-copy thread can serve, from its fdinfo; memfds long enough)
 * and tried before any source is taken: each view is registered for
 * MINOR faults and unregistered again, so a userfaultfd without
 * UFFD_FEATURE_MINOR_SHMEM, or a view that is not shared memory of the
 * VMM, fails now and not at the switch, when the source's guest is
 * paused already.  While registered, the VMM's /proc/PID/smaps must show
 * the view as its memfd at OFFSET, shared, registered for minor faults:
 * that ties the userfaultfd to the VMM's address space and the view to
 * the memfd migrate-recv writes. */
#include "recv_pcsock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "devstate.h"
#include "pcsock_msg.h"

/* The fds one hand-over may carry: the userfaultfd and a memfd a region. */
#define PCS_MAX_FDS (PCS_MAX_REGIONS + 1)

struct pcsock {
	int lfd, fd, uffd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	bool made;              /* the path is our socket: removed at the end */
	pid_t pid;
	struct pcs_msg msg;
	ev_io io;               /* the VMM's connection: a hangup cancels */
	bool said_end, gone;
	bool ran;               /* "run" was said: the VMM's guest ran */
	bool failed;            /* "failed" was said */
	bool deaf;              /* a write timed out: the next is not waited for */
	struct app *a;
};

/* ---- the socket ------------------------------------------------------------------ */

static int make_socket(struct pcsock *p, const char *path, struct cli_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return cli_err_set(err, -ENAMETOOLONG, "--postcopy-socket %s: path too long (%zu "
				   "bytes at most)", path, sizeof(sa.sun_path) - 1);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	p->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (p->lfd < 0)
		return cli_err_set(err, -errno, "--postcopy-socket: socket: %s", strerror(errno));
	/* Made 0600 from the start: no moment where another user may
	 * connect.  An existing path is never removed for us: it may be
	 * someone's file. */
	old = umask(0177);
	rc = bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc)
		return cli_err_set(err, -errno, "--postcopy-socket %s: %s%s", path, strerror(errno),
				   errno == EADDRINUSE ? " (remove it if no VMM uses it)" : "");
	p->made = true;
	snprintf(p->path, sizeof(p->path), "%s", path);
	if (listen(p->lfd, 4))
		return cli_err_set(err, -errno, "--postcopy-socket %s: listen: %s", path,
				   strerror(errno));
	return 0;
}

/* Writes all of @data to the VMM by @until (CLOCK_MONOTONIC ms): a VMM
 * that stops reading must not hold migrate-recv, and with it the
 * source's paused guest, for ever.  The socket stays blocking for the
 * hand-over; each write here is MSG_DONTWAIT and waits in poll instead.
 * An error names the VMM and @what was being sent. */
static int vmm_send(struct pcsock *p, const void *data, size_t len, uint64_t until,
		    const char *what, struct cli_err *err)
{
	struct pollfd pfd = { .fd = p->fd, .events = POLLOUT };
	const char *c = data;
	size_t done = 0;
	uint64_t now;
	ssize_t n;

	if (p->fd < 0 || p->gone)
		return cli_err_set(err, -ECONNRESET, "the VMM (pid %d) is gone from "
				   "--postcopy-socket: %s not sent", (int)p->pid, what);
	/* Its socket is still full of what it did not read: a "failed" line
	 * after that would only hold the exit for another --timeout. */
	if (p->deaf)
		return cli_err_set(err, -ETIMEDOUT, "the VMM (pid %d) stopped reading: %s not "
				   "sent", (int)p->pid, what);
	while (done < len) {
		n = send(p->fd, c + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
			return cli_err_set(err, -errno, "the VMM (pid %d) on --postcopy-socket: "
					   "sending %s: %s (%zu of %zu bytes sent)", (int)p->pid,
					   what, strerror(errno), done, len);
		now = cli_now_ms();
		p->deaf = now >= until;
		if (p->deaf)
			return cli_err_set(err, -ETIMEDOUT, "the VMM (pid %d) did not read %s "
					   "within %" PRIu64 " s (--timeout): %zu of %zu bytes "
					   "sent", (int)p->pid, what, p->a->o.timeout_s, done, len);
		if (poll(&pfd, 1, (int)(until - now)) < 0 && errno != EINTR)
			return cli_err_set(err, -errno, "poll: %s", strerror(errno));
	}
	return 0;
}

static uint64_t deadline(const struct pcsock *p)
{
	return cli_now_ms() + p->a->o.timeout_s * 1000;
}

/* One line to the VMM, within the timeout: @word, and ": @reason" if any. */
static int say(struct pcsock *p, const char *word, const char *reason, struct cli_err *err)
{
	char line[1024];
	int n = snprintf(line, sizeof(line), "%s%s%s\n", word, reason ? ": " : "",
			 reason ? reason : "");

	if (n <= 0)
		return 0;
	if ((size_t)n >= sizeof(line)) {
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	/* One line per message, and text only: a reason (the source's ERROR
	 * text among them) may hold any byte; a newline would split the line
	 * and an escape sequence reach the VMM's terminal or log. */
	for (unsigned char *c = (unsigned char *)line; c < (unsigned char *)line + n - 1; c++)
		if (*c < 0x20 || *c == 0x7f)
			*c = ' ';
	return vmm_send(p, line, (size_t)n, deadline(p), "a line", err);
}

/* The VMM's device state (ds_dst_vmm): "state N", then the N bytes, all
 * within one timeout, before "run" or "complete" is said. */
static int hand_state(void *ctx, const void *data, size_t len, struct cli_err *err)
{
	struct pcsock *p = ctx;
	char head[PCS_STATE_LINE_MAX];
	uint64_t until = deadline(p);
	int rc = vmm_send(p, head, pcs_state_line(head, len), until, "the device state's header",
			  err);

	if (!rc)
		rc = vmm_send(p, data, len, until, "the device state", err);
	return rc;
}

/* The peer's user: ours, or root's.  Anyone else is refused: it would
 * receive the guest. */
static int check_peer(struct pcsock *p, struct cli_err *err)
{
	struct ucred c;
	socklen_t len = sizeof(c);

	if (getsockopt(p->fd, SOL_SOCKET, SO_PEERCRED, &c, &len))
		return cli_err_set(err, -errno, "SO_PEERCRED: %s", strerror(errno));
	p->pid = c.pid;
	if (c.uid != geteuid() && c.uid != 0)
		return cli_err_set(err, -EACCES, "a peer of user %u (pid %d) is not this user "
				   "(%u) nor root", (unsigned)c.uid, (int)c.pid, (unsigned)geteuid());
	return 0;
}

/* ---- the hand-over --------------------------------------------------------------- */

static void close_fds(int *fds, unsigned n)
{
	while (n)
		close(fds[--n]);
}

/* The fds of one control message, kept while there is room; the rest
 * closed (and the count then exceeds what the regions allow). */
static void take_fds(struct msghdr *mh, int *fds, unsigned *n, unsigned *extra)
{
	struct cmsghdr *c;

	for (c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		size_t k, nf;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		nf = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < nf; k++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
			if (*n < PCS_MAX_FDS)
				fds[(*n)++] = fd;
			else {
				close(fd);
				(*extra)++;
			}
		}
	}
}

/* Reads the message and its fds, within @timeout_ms. */
static int read_handover(struct pcsock *p, char *buf, size_t *len, int *fds, unsigned *nfds,
			 int timeout_ms, struct cli_err *err)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * PCS_MAX_FDS)];
		struct cmsghdr align;
	} cbuf;
	uint64_t until = cli_now_ms() + (uint64_t)timeout_ms;
	unsigned extra = 0;

	*len = 0;
	while (!pcs_complete(buf, *len)) {
		struct iovec iov = { buf + *len, PCS_MAX_MSG + 1 - *len };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b,
				     .msg_controllen = sizeof(cbuf.b) };
		struct pollfd pfd = { .fd = p->fd, .events = POLLIN };
		uint64_t now = cli_now_ms();
		ssize_t n;

		if (*len > PCS_MAX_MSG)
			return cli_err_set(err, -EINVAL, "a message over %u bytes", PCS_MAX_MSG);
		if (now >= until || poll(&pfd, 1, (int)(until - now)) <= 0)
			return cli_err_set(err, -ETIMEDOUT, "no whole message within %d s", timeout_ms / 1000);
		n = recvmsg(p->fd, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return cli_err_set(err, -ECONNRESET, "the VMM hung up before its message ended");
		take_fds(&mh, fds, nfds, &extra);
		if (mh.msg_flags & MSG_CTRUNC)
			extra++;
		*len += (size_t)n;
	}
	if (extra)
		return cli_err_set(err, -EINVAL, "more than %u fds (the userfaultfd and one memfd "
				   "per region, %u regions at most)", PCS_MAX_FDS, PCS_MAX_REGIONS);
	return 0;
}

/* The features the VMM's UFFDIO_API enabled, from the fd's fdinfo (the
 * kernel shows them; no ioctl asks them): pcs_uffd_check() says which do
 * and which do not do.  What no fdinfo shows is the VMM's to keep
 * (migrate-recv(1), POST-COPY SOCKET): no registration of its own on this
 * userfaultfd, nobody else reading it, not made with UFFD_USER_MODE_ONLY,
 * made with the privilege to catch kernel-mode faults. */
static int check_features(int fd, struct cli_err *err)
{
	char path[64], text[1024];
	uint32_t f;
	ssize_t n;
	int in, rc;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return cli_err_set(err, -errno, "the userfaultfd: %s: %s", path, strerror(errno));
	n = read(in, text, sizeof(text) - 1);
	close(in);
	if (n < 0)
		return cli_err_set(err, -errno, "the userfaultfd: %s: %s", path, strerror(errno));
	text[n] = '\0';
	rc = pcs_uffd_features(text, &f, err);
	return rc ? rc : pcs_uffd_check(f, err);
}

/* The first fd must be a userfaultfd: its inode says so. */
static int check_uffd(int fd, struct cli_err *err)
{
	char link[64], target[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return cli_err_set(err, -errno, "the first fd: %s", strerror(errno));
	target[n] = '\0';
	if (strcmp(target, "anon_inode:[userfaultfd]"))
		return cli_err_set(err, -EINVAL, "the first fd is %s, not a userfaultfd", target);
	return check_features(fd, err);
}

/* A region's fd must be a memfd that holds the region, sealed against
 * shrinking: hugetlbfs is not served (4 KiB pages only). */
static int check_memfd(int fd, const struct pcs_region *r, struct cli_err *err)
{
	struct statfs fs;
	struct stat st;
	int seals;

	if (fstat(fd, &st) || fstatfs(fd, &fs))
		return cli_err_set(err, -errno, "region \"%s\": its fd: %s", r->name,
				   strerror(errno));
	if (!S_ISREG(st.st_mode) || fs.f_type != TMPFS_MAGIC)
		return cli_err_set(err, -EINVAL, "region \"%s\": its fd is not a memfd", r->name);
	if ((uint64_t)st.st_size < r->offset + r->size)
		return cli_err_set(err, -EINVAL, "region \"%s\": its memfd has %" PRIu64 " bytes, "
				   "the region ends at %" PRIu64, r->name, (uint64_t)st.st_size,
				   r->offset + r->size);
	/* migrate-recv writes the memfd through its own mapping: a VMM that
	 * shrank it under the region would have those writes raise SIGBUS
	 * here.  The seal makes the length checked above stay. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return cli_err_set(err, -EINVAL, "region \"%s\": its memfd is not sealed against "
				   "shrinking: make it with MFD_ALLOW_SEALING and add F_SEAL_SHRINK "
				   "(fcntl F_ADD_SEALS) once it is sized", r->name);
	return 0;
}

/* The VMM's mappings over the region's view, from /proc/PID/smaps, as
 * pcs_view_check() wants them. */
static int check_mappings(pid_t pid, const struct pcs_region *r, const struct stat *st,
			  bool ui, struct cli_err *err)
{
	char path[64];
	FILE *f;
	int rc;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return cli_err_set(err, -errno, "region \"%s\": %s: %s (migrate-recv checks there "
				   "that the view is the memfd: run it as the VMM's user)", r->name,
				   path, strerror(errno));
	rc = pcs_view_check(f, (int)pid, r, (uint64_t)st->st_ino, major(st->st_dev),
			    minor(st->st_dev), ui, err);
	fclose(f);
	return rc;
}

/* Registers the view for MINOR faults and lets it go again (see the top).
 * Before, the VMM's mappings there must be the memfd at OFFSET and not
 * registered; while registered, they must show it: that ties the
 * userfaultfd to the VMM's address space (check_mappings). */
static int try_view(int uffd, pid_t pid, const struct pcs_region *r, int memfd,
		    struct cli_err *err)
{
	struct uffdio_register reg = {
		.range = { .start = r->addr, .len = r->size },
		.mode = UFFDIO_REGISTER_MODE_MINOR,
	};
	struct uffdio_range range = reg.range;
	struct stat st;
	int rc;

	if (fstat(memfd, &st))
		return cli_err_set(err, -errno, "region \"%s\": its fd: %s", r->name,
				   strerror(errno));
	rc = check_mappings(pid, r, &st, false, err);
	if (rc)
		return rc;
	if (ioctl(uffd, UFFDIO_REGISTER, &reg))
		return cli_err_set(err, -errno, "region \"%s\": its view at 0x%" PRIx64 " cannot "
				   "take minor faults: %s (the userfaultfd needs "
				   "UFFD_FEATURE_MINOR_SHMEM, Linux 5.14+, and the view must be the "
				   "memfd mapped shared)", r->name, r->addr, strerror(errno));
	rc = check_mappings(pid, r, &st, true, err);
	ioctl(uffd, UFFDIO_UNREGISTER, &range);
	return rc;
}

/* Two regions on one memfd must not share a byte of it: each is a block,
 * received and served on its own. */
static int check_overlap(const struct pcs_msg *m, const int *memfds, struct cli_err *err)
{
	struct stat a, b;
	unsigned i, j;

	for (i = 0; i < m->n; i++)
		for (j = i + 1; j < m->n; j++) {
			const struct pcs_region *x = &m->r[i], *y = &m->r[j];

			if (fstat(memfds[i], &a) || fstat(memfds[j], &b))
				return cli_err_set(err, -errno, "fstat: %s", strerror(errno));
			if (a.st_dev == b.st_dev && a.st_ino == b.st_ino &&
			    x->offset < y->offset + y->size && y->offset < x->offset + x->size)
				return cli_err_set(err, -EINVAL, "regions \"%s\" and \"%s\" overlap "
						   "in their memfd (at offsets %" PRIu64 " and %"
						   PRIu64 ")", x->name, y->name, x->offset, y->offset);
		}
	return 0;
}

/* Maps the regions as the blocks received into (ours: unmapped at the
 * end), after the --ram blocks (none: the options exclude them). */
static int map_regions(struct pcsock *p, struct dst_ends *e, const int *fds,
		       struct cli_err *err)
{
	struct cli_ram *n = realloc(e->rams, (e->nrams + p->msg.n) * sizeof(*n));
	unsigned i;

	if (!n)
		return cli_err_set(err, -ENOMEM, "out of memory");
	e->rams = n;
	for (i = 0; i < p->msg.n; i++) {
		const struct pcs_region *r = &p->msg.r[i];
		struct cli_ram *b = &e->rams[e->nrams];
		void *h = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i + 1],
			       (off_t)r->offset);

		if (h == MAP_FAILED)
			return cli_err_set(err, -errno, "region \"%s\": mmap of its memfd: %s",
					   r->name, strerror(errno));
		memset(b, 0, sizeof(*b));
		snprintf(b->name, sizeof(b->name), "%s", r->name);
		snprintf(b->path, sizeof(b->path), "the VMM's memfd \"%s\"", r->name);
		b->host = h;
		b->len = r->size;
		b->pgsz = PCS_PAGE;
		e->nrams++;
	}
	/* No files: nothing to mark incomplete. */
	e->markers = false;
	return 0;
}

/* The message and its fds, checked; the blocks mapped.  The fds are
 * closed here but for the userfaultfd (kept in p->uffd). */
static int take_handover(struct app *a, struct pcsock *p, struct cli_err *err)
{
	static char buf[PCS_MAX_MSG + 1];
	int fds[PCS_MAX_FDS];
	unsigned nfds = 0, i;
	size_t len;
	int rc = read_handover(p, buf, &len, fds, &nfds, (int)(a->o.timeout_s * 1000), err);

	if (!rc)
		rc = pcs_decode(buf, len, nfds, &p->msg, err);
	if (!rc)
		rc = check_uffd(fds[0], err);
	for (i = 0; !rc && i < p->msg.n; i++)
		rc = check_memfd(fds[i + 1], &p->msg.r[i], err);
	if (!rc)
		rc = check_overlap(&p->msg, fds + 1, err);
	for (i = 0; !rc && i < p->msg.n; i++)
		rc = try_view(fds[0], p->pid, &p->msg.r[i], fds[i + 1], err);
	if (!rc)
		rc = map_regions(p, &a->e, fds, err);
	if (!rc) {
		p->uffd = fds[0];
		close_fds(fds + 1, nfds - 1);
	} else {
		close_fds(fds, nfds);
	}
	return rc;
}

/* ---- attaching ------------------------------------------------------------------ */

static void vmm_cb(struct ev_loop *loop, ev_io *w, int revents);

static void say_attached(struct app *a, struct pcsock *p)
{
	uint64_t bytes = 0;
	unsigned i;

	for (i = 0; i < p->msg.n; i++)
		bytes += p->msg.r[i].size;
	if (!a->o.json) {
		cli_err("VMM (pid %d) attached on %s: %u region%s, %" PRIu64 " bytes", (int)p->pid,
			p->path, p->msg.n, p->msg.n == 1 ? "" : "s", bytes);
		return;
	}
	struct json_object *o = cli_event("vmm-attached");

	cli_json_u64(o, "pid", (uint64_t)p->pid);
	cli_json_u64(o, "regions", p->msg.n);
	cli_json_u64(o, "bytes", bytes);
	cli_json_str(o, "socket", p->path);
	cli_emit(o);
}

/* Waits for a connection within the timeout: 0 with p->fd, or why not
 * (-ECANCELED for a signal).  The loop does not run yet: its signal
 * watchers are given their turn every slice, whichever thread took the
 * signal. */
static int accept_one(struct app *a, struct pcsock *p, struct cli_err *err)
{
	struct pollfd pfd = { .fd = p->lfd, .events = POLLIN };
	uint64_t until = cli_now_ms() + a->o.timeout_s * 1000, now;
	int n = 0;

	while (n <= 0 && (now = cli_now_ms()) < until) {
		n = poll(&pfd, 1, (int)(until - now < 200 ? until - now : 200));
		if (n < 0 && errno != EINTR)
			return cli_err_set(err, -errno, "poll: %s", strerror(errno));
		ev_run(a->loop, EVRUN_NOWAIT);
		if (a->signalled)
			return cli_err_set(err, -ECANCELED, "interrupted by a signal while waiting "
					   "for a VMM");
	}
	if (n <= 0)
		return cli_err_set(err, -ETIMEDOUT, "no VMM came within %" PRIu64 " s (--timeout)",
				   a->o.timeout_s);
	p->fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (p->fd < 0)
		return cli_err_set(err, -errno, "accept: %s", strerror(errno));
	return 0;
}

/* One peer: 1 when it is refused and another may come, 0 once attached,
 * or a negative errno that ends the run. */
static int one_peer(struct app *a, struct pcsock *p, struct cli_err *err)
{
	struct cli_err why;
	int rc = accept_one(a, p, err);

	if (rc)
		return rc;
	rc = check_peer(p, err);
	if (rc) {
		/* Its own failure to hear why changes nothing: it is refused. */
		say(p, "error", err->msg, &why);
		cli_err("--postcopy-socket %s: refused %s; still waiting", p->path, err->msg);
		close(p->fd);
		p->fd = -1;
		return 1;
	}
	rc = take_handover(a, p, err);
	if (rc) {
		say(p, "error", err->msg, &why);
		/* That was its answer: no "failed" line follows at the close. */
		p->said_end = true;
		return rc;
	}
	return say(p, "ok", NULL, err);
}

int recv_pcsock_attach(struct app *a)
{
	struct pcsock *p;
	struct cli_err err;
	int rc;

	if (!a->o.postcopy_socket)
		return 0;
	p = calloc(1, sizeof(*p));
	if (!p)
		return cli_usage("out of memory");
	a->pcs = p;
	p->a = a;
	p->lfd = p->fd = p->uffd = -1;
	rc = make_socket(p, a->o.postcopy_socket, &err);
	if (rc)
		return cli_usage("%s", err.msg);
	if (a->o.json) {
		struct json_object *o = cli_event("vmm-waiting");

		cli_json_str(o, "socket", p->path);
		cli_emit(o);
	}
	while ((rc = one_peer(a, p, &err)) == 1)
		;
	if (rc == -ECANCELED) {
		cli_err("--postcopy-socket %s: %s", p->path, err.msg);
		return CLI_EX_CANCELLED;
	}
	if (rc)
		return cli_usage("--postcopy-socket %s: %s", p->path, err.msg);
	say_attached(a, p);
	/* The device state of the migration to come is the VMM's too. */
	ends_dest_vmm(&a->e, hand_state, p);
	ev_io_init(&p->io, vmm_cb, p->fd, EV_READ);
	p->io.data = p;
	ev_io_start(a->loop, &p->io);
	return 0;
}

/* ---- while it runs ------------------------------------------------------------- */

/* The VMM hung up (or wrote what it should not): a migration under way is
 * cancelled, since its guest's memory has nobody left to serve; before
 * any, the run ends. */
static void vmm_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct pcsock *p = w->data;
	struct app *a = p->a;
	char reason[128], junk[256];
	struct mig *m, *next;
	bool any = false;

	(void)revents;
	if (read(p->fd, junk, sizeof(junk)) > 0)
		return; /* nothing is asked of it; ignored */
	ev_io_stop(loop, w);
	p->gone = true;
	snprintf(reason, sizeof(reason), "the VMM (pid %d) disconnected from --postcopy-socket",
		 (int)p->pid);
	for (m = a->migs; m; m = next) {
		next = m->next;
		any |= m->admitted;
		rdmig_dest_cancel(m->d, reason);
	}
	if (any)
		return; /* its failure ends the run */
	cli_err("%s before a source was admitted", reason);
	a->exit_code = CLI_EX_CANCELLED;
	a->ended = true;
	ev_break(loop, EVBREAK_ALL);
}

/* The switch: the VMM gets its device state, then "run".  The library
 * calls this only once every state byte the source wrote went to the
 * state callback (docs/postcopy.md, "The device state"), so the state
 * handed over is whole. */
static int postcopy_start_cb(void *ctx, char *errbuf, size_t errlen)
{
	struct mig *m = ctx;
	struct pcsock *p = m->app->pcs;
	struct cli_err err = { .msg = "" };
	int rc;

	if (p->gone) {
		snprintf(errbuf, errlen, "the VMM disconnected from --postcopy-socket");
		return -ECONNRESET;
	}
	rc = m->ds ? ds_commit(m->ds, &err) : cli_err_set(&err, -EPROTO, "post-copy before "
							   "the migration was admitted");
	if (!rc)
		rc = say(p, "run", NULL, &err);
	if (rc)
		return cli_err_give(rc, &err, errbuf, errlen);
	p->ran = true;
	if (m->app->o.json) {
		struct json_object *o = cli_event("postcopy-started");
		struct rdmig_stats st = { .size = sizeof(st) };

		rdmig_dest_stats(m->d, &st);
		cli_json_u64(o, "postcopy-pages", st.postcopy_pages);
		cli_emit(o);
	} else {
		cli_err("post-copy: the VMM's guest runs; the pages it lacks follow");
	}
	return 0;
}

void recv_pcsock_hook(struct mig *m, struct rdmig_config *cfg)
{
	struct pcsock *p = m->app->pcs;

	if (!p)
		return;
	cfg->postcopy = 1;
	cfg->postcopy_uffd = p->uffd;
	cfg->postcopy_start = postcopy_start_cb;
	cfg->postcopy_ctx = m;
}

int recv_pcsock_views(struct mig *m)
{
	struct pcsock *p = m->app->pcs;
	unsigned i;

	for (i = 0; p && i < p->msg.n; i++)
		if (rdmig_dest_postcopy_view(m->d, p->msg.r[i].name, p->msg.r[i].addr)) {
			cli_err("--postcopy-socket: %s", rdmig_dest_error(m->d));
			return -1;
		}
	return 0;
}

/* The VMM hung up, died or stopped reading: its own doing ends the
 * migration as a cancel, whichever failure the migration met first (a
 * placement into a dead process's memory may fail before its hangup is
 * read). */
int recv_pcsock_code(struct app *a, int code)
{
	struct pcsock *p = a->pcs;
	struct pollfd pfd;

	if (!p || !code || p->fd < 0)
		return code;
	pfd = (struct pollfd){ .fd = p->fd, .events = POLLRDHUP };
	if (p->gone || p->deaf ||
	    (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR))))
		return CLI_EX_CANCELLED;
	return code;
}

void recv_pcsock_end(struct app *a, int code, const char *msg)
{
	struct pcsock *p = a->pcs;
	struct cli_err err;

	/* Without a VMM (none came, or it was refused) nobody hears it. */
	if (!p || p->said_end || p->gone || p->fd < 0)
		return;
	p->said_end = true;
	p->failed = code != 0;
	/* The outcome stands whether or not the VMM hears it: said here. */
	if (code ? say(p, "failed", msg, &err) : say(p, "complete", NULL, &err))
		cli_err("warning: --postcopy-socket: %s", err.msg);
}

/* After a failure that followed "run": the VMM must stop its vCPUs while
 * it still holds its userfaultfd (migrate-recv(1), POST-COPY SOCKET), and
 * ours is let go only once it hung up, or after --timeout.  Should the VMM
 * have closed its own copy against the contract, ours is then the last:
 * its registrations keep the guest's threads waiting on the pages that
 * never came, instead of mapping the stale page cache, until the VMM
 * stopped them. */
static void wait_hangup(struct pcsock *p)
{
	struct pollfd pfd = { .fd = p->fd, .events = POLLIN | POLLRDHUP };
	uint64_t until = deadline(p), now;
	char junk[256];

	if (!p->ran || !p->failed || p->gone || p->fd < 0)
		return;
	cli_err("post-copy failed: waiting up to %" PRIu64 " s (--timeout) for the VMM (pid %d) "
		"to stop its guest and hang up", p->a->o.timeout_s, (int)p->pid);
	while ((now = cli_now_ms()) < until) {
		int n = poll(&pfd, 1, (int)(until - now));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		n = (int)read(p->fd, junk, sizeof(junk));
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
			return;
	}
	cli_err("warning: the VMM (pid %d) did not hang up within %" PRIu64 " s: its "
		"userfaultfd is let go here all the same", (int)p->pid, p->a->o.timeout_s);
}

void recv_pcsock_close(struct app *a)
{
	struct pcsock *p = a->pcs;

	if (!p)
		return;
	recv_pcsock_end(a, 1, "migrate-recv stopped before the migration ended");
	if (a->loop)
		ev_io_stop(a->loop, &p->io);
	wait_hangup(p);
	if (p->fd >= 0)
		close(p->fd);
	if (p->uffd >= 0)
		close(p->uffd);
	if (p->lfd >= 0)
		close(p->lfd);
	if (p->made)
		unlink(p->path);
	free(p);
	a->pcs = NULL;
}
