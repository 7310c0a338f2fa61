/* session: what both roles of a migration share.
 *
 * The configuration (copied, the key in locked memory), the error text,
 * the control connection and its channel, the negotiated capabilities, the
 * statistics, cancellation from any thread, and failing: one log line, an
 * ERROR telling the peer why, a disconnect.  A source and a destination
 * each embed one and differ only in their state machines. */
#ifndef RDMIG_SESSION_H
#define RDMIG_SESSION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "ctrl.h"
#include "fabric.h"
#include "rdmig.h"
#include "rdmig.pb-c.h"
#include "util.h"

struct session {
	struct rdmig_config cfg;
	/* The one fd the caller watches: an epoll set over wake_fd and the
	 * connections' CM and completion channels, valid from creation. */
	int epfd;
	struct rd_err err;
	struct stats_box stats;
	struct fab_conn *conn;      /* the control connection (channel 0) */
	struct ctrl ch;
	bool ctrl_ready;            /* ch has buffers: ERROR can be sent */
	uint32_t caps;              /* granted PD_CAP_* */
	const char *peer;           /* "source" or "destination", for messages */
	uint8_t *key;               /* our copy of cfg.auth_key */
	int wake_fd;                /* eventfd, readable once cancelled */
	atomic_bool cancelled;
	pthread_mutex_t reason_lock;
	char cancel_reason[256];    /* what the peer is told */
	bool failed;
	/* Where the failure came from, when the errno alone does not say:
	 * the peer's ERROR or its reasoned refusal. */
	bool peer_said;
	/* A destination's: its guest has not run with this migration's
	 * memory, said in the ERROR it sends (rdmig(7), ERROR).  Set at
	 * creation, cleared once the guest may run; a source never sets it. */
	bool guest_never_ran;
	atomic_int err_class;       /* enum rdmig_error_class, once failed */
};

/* Copies and checks @cfg (NULL: defaults) and allocates the control rings
 * (ctrl_alloc).  On failure the session is still valid enough to report the
 * error (ss->err) and be finished. */
int sess_init(struct session *ss, const struct rdmig_config *cfg, const char *peer);
/* The role's own MRs on the connection's PD must be gone. */
void sess_fini(struct session *ss);

/* Adds @fd (when >= 0) to the epoll set the caller watches, or takes it out. */
int sess_watch(struct session *ss, int fd);
void sess_unwatch(struct session *ss, int fd);
/* Makes the fd readable: the driving thread should look again (any
 * thread).  sess_woken() reads it empty: the caller is about to look at
 * everything. */
void sess_wake(struct session *ss);
void sess_woken(struct session *ss);

/* Sends a control message within the peer's credits: the peer only asks
 * within its own, so finding none is its fault (-EPROTO, "no credit to
 * @what"). */
int sess_send(struct session *ss, unsigned type, const ProtobufCMessage *m,
	      const char *what);

/* Fails once: logs, tells the peer ss->err (when the channel can), and
 * disconnects the control connection.  Returns @rc (a negative errno). */
int sess_fail(struct session *ss, int rc);
/* The peer's ERROR, its text made printable: "PEER reported: ...". */
int sess_peer_error(struct session *ss, const Rdmig__Error *e);
/* The failure @rc (set in ss->err) is the peer's word: its refusal. */
int sess_peer_refused(struct session *ss, int rc);
/* The class of a failure with @rc (enum rdmig_error_class), as sess_fail()
 * records it; RDMIG_ERROR_LOCAL for a handle that failed at creation. */
int sess_error_class(const struct session *ss, int rc);

/* Any thread: asks the driving thread to fail with -ECANCELED and tell the
 * peer @reason (NULL: none given); wakes it through wake_fd. */
void sess_cancel(struct session *ss, const char *reason);
/* 0, or -ECANCELED with the message set, once sess_cancel() was called. */
int sess_check_cancel(struct session *ss);
/* -EDEADLK when called from inside one of this handle's callbacks, which
 * run in the middle of a step: a call that drives the handle or changes it
 * would run inside it (rdmig(3), Threads, says which calls are allowed).
 * The handle's error text is left alone: it may be what the callback is
 * reporting. */
int sess_reentered(const struct session *ss);

/* Sends a keepalive when the channel was idle for keepalive_ms. */
int sess_keepalive(struct session *ss);
/* Reports progress through the callback at most every progress_ms
 * (@force: now), with @st filled by the role. */
void sess_progress(struct session *ss, int64_t *last_ms, bool force,
		   void (*fill)(void *role, struct rdmig_stats *st), void *role);

/* Copies the counters into the caller's @out, honouring out->size (0: all
 * of this version's fields). */
void sess_stats_out(const struct rdmig_stats *in, struct rdmig_stats *out);

#endif
