/* qmp_peer: the process at the other end of a QMP socket, held by
 * identity and checked (qmp_peer.h says against what). */
#include "qmp_peer.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>

#include "clierr.h"

static pid_t peer_pid(int fd)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		return 0;
	return uc.pid;
}

/* The peer's pid is the one of the process that called listen(), as it
 * was then: that process may have exited since and its pid gone to
 * another.  Held here (0: no hold, when the pid is not visible from our pid
 * namespace), then checked against the connection itself
 * (qmp_peer_accepted_by) once the greeting shows the other end accepted
 * it. */
void qmp_peer_hold(struct qmp_peer *p, int fd)
{
	p->pid = peer_pid(fd);
	if (p->pid > 0 && proc_open(&p->proc, p->pid, NULL))
		p->pid = 0;
}

void qmp_peer_release(struct qmp_peer *p)
{
	proc_close(&p->proc);
}

/* The inode of the other end of our connection (the socket the server
 * accepted it on), from the kernel's socket diagnostics (unix_diag). */
static int peer_inode(int fd, unsigned long *ino)
{
	struct {
		struct nlmsghdr nlh;
		struct unix_diag_req r;
	} req;
	struct sockaddr_nl nl = { .nl_family = AF_NETLINK };
	struct timeval tv = { .tv_sec = 2 };
	union { char b[8192]; struct nlmsghdr h; } buf;
	struct unix_diag_msg *m;
	struct rtattr *a;
	struct stat st;
	ssize_t n;
	int s, len, rc = -ENOENT;

	if (fstat(fd, &st))
		return -errno;
	s = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (s < 0)
		return -errno;
	memset(&req, 0, sizeof(req));
	req.nlh.nlmsg_len = sizeof(req);
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = AF_UNIX;
	req.r.udiag_states = ~0u;
	req.r.udiag_ino = (unsigned)st.st_ino;
	req.r.udiag_show = UDIAG_SHOW_PEER;
	req.r.udiag_cookie[0] = req.r.udiag_cookie[1] = ~0u; /* no cookie */
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (sendto(s, &req, sizeof(req), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0 ||
	    (n = recv(s, &buf, sizeof(buf), 0)) < 0) {
		rc = -errno;
		close(s);
		return rc;
	}
	close(s);
	if (!NLMSG_OK(&buf.h, (size_t)n))
		return -EPROTO;
	if (buf.h.nlmsg_type == NLMSG_ERROR)
		return ((struct nlmsgerr *)NLMSG_DATA(&buf.h))->error ?: -EPROTO;
	m = NLMSG_DATA(&buf.h);
	if (buf.h.nlmsg_type != SOCK_DIAG_BY_FAMILY || m->udiag_ino != (unsigned)st.st_ino)
		return -EPROTO;
	len = (int)(buf.h.nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
	for (a = (struct rtattr *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len))
		if (a->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(a) >= sizeof(uint32_t)) {
			*ino = *(uint32_t *)RTA_DATA(a);
			rc = 0;
		}
	return rc;
}

/* Whether the process held is the one that accepted this connection (its
 * fds hold the other end): a process that merely inherited the pid of
 * the one that called listen() does not. */
int qmp_peer_accepted_by(const struct qmp_peer *p, int fd, const char *path, struct cli_err *err)
{
	unsigned long ino = 0;
	int r;

	if (p->pid <= 0)
		return 0;
	r = peer_inode(fd, &ino);
	if (r < 0)
		return cli_err_set(err, r, "%s: cannot tell which process holds the QMP "
				   "connection (socket diagnostics: %s; load the unix_diag module)",
				   path, strerror(-r));
	r = proc_holds_socket(&p->proc, ino);
	if (r < 0)
		return cli_err_set(err, r, "%s: cannot read the fds of pid %d: %s", path,
				   (int)p->pid, strerror(-r));
	if (!r)
		return cli_err_set(err, -EPERM, "%s is answered by a process other than pid "
				   "%d, the one its peer credentials name (the socket's listener "
				   "exited and its pid went to pid %d's process): refusing it",
				   path,
				   (int)p->pid, (int)p->pid);
	return 0;
}

/* Pid @p->pid must be the very process the caller checked: started at
 * @start (0: not checked), not a later one that took its number. */
int qmp_peer_started_at(const struct qmp_peer *p, const char *path, unsigned long long start,
			struct cli_err *err)
{
	unsigned long long t = 0;

	if (!start || p->pid <= 0)
		return 0;
	if (proc_start_time(&p->proc, &t) || t != start)
		return cli_err_set(err, -EPERM, "%s: pid %d started at %llu, not at %llu as "
				   "the QEMU checked (--qmp-pid %d:%llu): that QEMU exited and another "
				   "process has its pid; refusing it", path, (int)p->pid, t, start,
				   (int)p->pid, start);
	return 0;
}

/* Whether the peer is the QEMU the caller checked: a socket is only a
 * name, and whoever can write its directory can rename another socket over
 * it between that check and this connection.  Refused before a byte goes
 * to the impostor. */
int qmp_peer_expect(const struct qmp_peer *p, int fd, const char *path, pid_t expect,
		    struct cli_err *err)
{
	pid_t got = peer_pid(fd);

	if (!expect || (p->pid == expect && got == expect))
		return 0;
	if (got <= 0)
		return cli_err_set(err, -EPERM, "%s is answered by a process whose pid is "
				   "not visible here, not by QEMU pid %d (--qmp-pid): refusing it",
				   path, (int)expect);
	return cli_err_set(err, -EPERM, "%s is answered by pid %d, not by QEMU pid %d "
			   "(--qmp-pid): another process took the socket's path (replaced after it "
			   "was checked?); nothing was sent to pid %d", path, (int)got, (int)expect,
			   (int)got);
}
