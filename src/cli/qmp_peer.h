/* qmp_peer: whether the process at the other end of a QMP socket is the
 * QEMU the caller means.  A socket is only a name, and the pid its peer
 * credentials give is the one of the process that called listen(), as it
 * was then; so the peer is held by identity (proc.h) as soon as the
 * connection is made, and checked before anything is sent to it, and
 * again once it answered.  Each check returns 0, or -EPERM (or the errno
 * that kept it from checking) with one line naming both sides in @err. */
#ifndef RDMIG_CLI_QMP_PEER_H
#define RDMIG_CLI_QMP_PEER_H

#include <stddef.h>
#include <sys/types.h>

#include "clierr.h"
#include "proc.h"

struct qmp_peer {
	pid_t pid;              /* 0: not visible from our pid namespace */
	struct proc_ref proc;   /* the process itself, while pid > 0 */
};
#define QMP_PEER_INIT { 0, PROC_REF_INIT }

/* Holds the process that the peer credentials of the connected socket
 * @fd name; release it with qmp_peer_release(). */
void qmp_peer_hold(struct qmp_peer *p, int fd);
void qmp_peer_release(struct qmp_peer *p);
/* The peer is pid @expect (0: any), as held and as the socket says now. */
int qmp_peer_expect(const struct qmp_peer *p, int fd, const char *path, pid_t expect,
		    struct cli_err *err);
/* The process held started at @start (field 22 of /proc/PID/stat; 0: not
 * checked). */
int qmp_peer_started_at(const struct qmp_peer *p, const char *path, unsigned long long start,
			struct cli_err *err);
/* The process held holds the other end of @fd: it accepted the
 * connection.  Once the greeting came (the connection was accepted). */
int qmp_peer_accepted_by(const struct qmp_peer *p, int fd, const char *path, struct cli_err *err);

#endif
