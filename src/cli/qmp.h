/* A small synchronous client for QEMU's QMP monitor, enough for the commands
 * to drive a QEMU whose guest RAM lives in shared memory backends: QEMU's own
 * migration (with x-ignore-shared) carries only the device state while rdmig
 * carries the RAM.
 *
 * One command is in flight at a time.  Every command carries an "id" and
 * only the reply with that id (or, from a QEMU that could not read the
 * request, one with no id) is taken as its answer: a late reply to a command
 * that timed out is dropped, so a timeout leaves the connection usable.
 * Every wait has a deadline, so a QEMU that is stopped with SIGSTOP (its
 * monitor freezes with it) or that has died makes a call fail, never hang.
 * Asynchronous events ("STOP", "RESUME", "MIGRATION", ...) arriving
 * meanwhile are kept, the QMP_EVENTS_KEPT most recent ones, for
 * qmp_event_take() and qmp_event_wait().
 *
 * All functions return 0 or a negative errno and then write one line naming
 * the cause into @err (which may be NULL).  When QEMU answers a command with
 * an error the return is -EREMOTEIO and @err holds QEMU's own "desc" text,
 * verbatim except that control characters become spaces.  None prints or
 * exits.
 */
#ifndef RDMIG_CLI_QMP_H
#define RDMIG_CLI_QMP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <json-c/json.h>

#include "clierr.h"

#define QMP_EVENTS_KEPT 64
/* The longest message accepted from QEMU; "info mtree" of a big machine
 * is some 100 KiB. */
#define QMP_MAX_MSG (4u << 20)

struct qmp;

/**
 * qmp_open - connect to QEMU's QMP unix socket and enter command mode
 * @path:       the socket (-qmp unix:PATH,server=on,wait=off)
 * @timeout_ms: deadline of this and of every later call (qmp_set_timeout)
 *
 * Reads the greeting and sends qmp_capabilities.  QEMU serves one QMP
 * client per socket: while another is connected, the greeting never comes
 * and this fails with -ETIMEDOUT.
 */
int qmp_open(struct qmp **out, const char *path, int timeout_ms,
	     struct cli_err *err);
/* The same, but only with the QEMU of pid @expect (0: any), started at
 * @start (field 22 of /proc/PID/stat; 0: not checked), at the other end:
 * its peer credentials are checked on this connection before anything is
 * sent, and -EPERM names both pids otherwise.  Whatever @expect, the
 * process the peer credentials name must be the one that accepted the
 * connection (it holds the other end), or the open fails with -EPERM. */
int qmp_open_as(struct qmp **out, const char *path, pid_t expect, unsigned long long start,
		int timeout_ms, struct cli_err *err);
/* Closes the connection and frees the kept events.  NULL is fine. */
void qmp_close(struct qmp *q);

/* QEMU's pid, from the socket's peer credentials; 0 when QEMU runs in a pid
 * namespace we cannot see. */
pid_t qmp_pid(const struct qmp *q);
struct proc_ref;
/* QEMU held by identity (proc.h), taken when the connection was made;
 * NULL when its pid is not visible from here. */
const struct proc_ref *qmp_proc(const struct qmp *q);
void qmp_set_timeout(struct qmp *q, int timeout_ms);

/**
 * qmp_call - run one command and wait for its answer
 * @cmd:  the command name ("query-status")
 * @args: its "arguments" object, or NULL; always consumed (put), even on
 *        failure
 * @ret:  receives the "return" value (json_object_put it), or NULL
 */
int qmp_call(struct qmp *q, const char *cmd, struct json_object *args,
	     struct json_object **ret, struct cli_err *err);
/* The same with @fd sent along (SCM_RIGHTS) with the bytes of the command,
 * as getfd and add-fd want it.  @fd stays ours: QEMU gets a copy. */
int qmp_call_fd(struct qmp *q, const char *cmd, struct json_object *args,
		int fd, struct json_object **ret, struct cli_err *err);

/* getfd: QEMU keeps a copy of @fd under @name (for "fd:NAME" URIs); a name
 * in use is replaced.  closefd: QEMU closes the copy it has not used up.
 * migrate and migrate-incoming consume the fd they name. */
int qmp_getfd(struct qmp *q, int fd, const char *name, struct cli_err *err);
int qmp_closefd(struct qmp *q, const char *name, struct cli_err *err);

/**
 * qmp_event_take - remove the oldest kept event named @name
 * @ev: receives the whole event ({"event", "data", "timestamp"}), to be
 *      put by the caller; NULL discards it
 *
 * Returns 1 when one was kept, else 0.  Reads nothing from QEMU.
 */
int qmp_event_take(struct qmp *q, const char *name, struct json_object **ev);
/* As qmp_event_take, reading from QEMU until such an event arrives or
 * @timeout_ms passes (-ETIMEDOUT). */
int qmp_event_wait(struct qmp *q, const char *name, int timeout_ms,
		   struct json_object **ev, struct cli_err *err);

/* Reads what QEMU has sent without waiting and keeps the events among it
 * (for qmp_event_take): for an event loop watching qmp_fd(). */
int qmp_pump(struct qmp *q, struct cli_err *err);
/* The socket, to watch for reading. */
int qmp_fd(const struct qmp *q);

/* query-status: "running", "paused", "inmigrate", "postmigrate",
 * "finish-migrate", "prelaunch", "shutdown", ... */
int qmp_status(struct qmp *q, char *status, size_t len, struct cli_err *err);
/* stop / cont.  QEMU 7.2 accepts cont on an "inmigrate" QEMU: it only
 * makes the guest run once the incoming migration has completed. */
int qmp_stop(struct qmp *q, struct cli_err *err);
int qmp_cont(struct qmp *q, struct cli_err *err);

/* One migration capability ("x-ignore-shared", "events", ...).  -ENOENT
 * when this QEMU has no capability of that name. */
int qmp_migrate_cap_get(struct qmp *q, const char *cap, bool *on,
			struct cli_err *err);
int qmp_migrate_cap_set(struct qmp *q, const char *cap, bool on,
			struct cli_err *err);

/* migrate / migrate-incoming (the destination must have been started with
 * -incoming defer) / migrate_cancel.  Each returns once QEMU has accepted
 * the command; the migration itself runs on in QEMU. */
int qmp_migrate(struct qmp *q, const char *uri, struct cli_err *err);
int qmp_migrate_incoming(struct qmp *q, const char *uri, struct cli_err *err);
int qmp_migrate_cancel(struct qmp *q, struct cli_err *err);

struct qmp_migration {
	/* "none" until there is something to report, then "setup", "active",
	 * "completed", "failed", "cancelling", "cancelled", ...  On a
	 * destination QEMU 7.2 reports the incoming side: "none" until the
	 * first bytes arrive, "active" while loading, then "completed" (kept
	 * after cont).  A destination whose load fails exits instead. */
	char status[32];
	char error[256]; /* QEMU's error-desc when "failed", else "" */
};

int qmp_migrate_query(struct qmp *q, struct qmp_migration *m,
		      struct cli_err *err);
/**
 * qmp_migrate_wait - poll query-migrate until a terminal status
 *
 * Returns 0 on "completed"; -EIO on "failed" (@err holds QEMU's error-desc)
 * or "cancelled"; -ETIMEDOUT past @timeout_ms; -ECONNRESET when QEMU closes
 * the socket (a QEMU 7.2 destination exits when loading fails).  @m holds
 * the last status read.
 */
int qmp_migrate_wait(struct qmp *q, int timeout_ms, struct qmp_migration *m,
		     struct cli_err *err);

/* human-monitor-command: @out receives HMP's text (free() it). */
int qmp_hmp(struct qmp *q, const char *line, char **out, struct cli_err *err);

struct qmp_version {
	int major, minor, micro;
};

/* query-uuid: the UUID QEMU was started with (-uuid; libvirt's domain's),
 * lower case, "00000000-0000-0000-0000-000000000000" when none. */
int qmp_uuid(struct qmp *q, char *uuid, size_t len, struct cli_err *err);

/* query-cpus-fast: the host thread of each vCPU, in vCPU order, into
 * @tids (at most @max; *@n gets how many, duplicates dropped: a QEMU
 * running every vCPU on one thread, as single-threaded TCG does, has
 * one).  The ids are QEMU's word: check that they are its threads. */
int qmp_vcpu_threads(struct qmp *q, pid_t *tids, unsigned max, unsigned *n, struct cli_err *err);

/* query-version: QEMU's own version. */
int qmp_version(struct qmp *q, struct qmp_version *v, struct cli_err *err);
/* Whether @v is at least @major.@minor. */
static inline bool qmp_version_ge(const struct qmp_version *v, int major, int minor)
{
	return v->major > major || (v->major == major && v->minor >= minor);
}

#endif
