#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "auth.h"

int sess_init(struct session *ss, const struct rdmig_config *cfg, const char *peer)
{
	int rc;

	memset(ss, 0, sizeof(*ss));
	ss->peer = peer;
	ss->wake_fd = -1;
	ss->epfd = -1;
	stats_init(&ss->stats);
	pthread_mutex_init(&ss->reason_lock, NULL);
	rc = cfg_load(&ss->cfg, cfg, &ss->err);
	if (rc)
		return rc;
	/* A destination learns its source's at the block map. */
	ss->stats.st.state_max = ss->cfg.state_max;
	if (ss->cfg.auth_key) {
		ss->key = auth_key_dup(ss->cfg.auth_key, ss->cfg.auth_key_len);
		if (!ss->key)
			return rd_err_set(&ss->err, -ENOMEM, "out of memory for the key");
		ss->cfg.auth_key = ss->key;
	}
	ss->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ss->wake_fd < 0)
		return rd_err_set(&ss->err, -errno, "eventfd: %s", strerror(errno));
	ss->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (ss->epfd < 0)
		return rd_err_set(&ss->err, -errno, "epoll_create1: %s", strerror(errno));
	rc = sess_watch(ss, ss->wake_fd);
	/* Here, not in the connection's steps (see ctrl_alloc). */
	return rc ? rc : ctrl_alloc(&ss->ch, ss->cfg.ctrl_depth, ss->cfg.ctrl_msg_max, &ss->err);
}

int sess_watch(struct session *ss, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	if (fd < 0 || ss->epfd < 0)
		return 0;
	if (epoll_ctl(ss->epfd, EPOLL_CTL_ADD, fd, &ev) && errno != EEXIST)
		return rd_err_set(&ss->err, -errno, "epoll_ctl: %s", strerror(errno));
	return 0;
}

void sess_unwatch(struct session *ss, int fd)
{
	if (fd >= 0 && ss->epfd >= 0)
		epoll_ctl(ss->epfd, EPOLL_CTL_DEL, fd, NULL);
}

void sess_wake(struct session *ss)
{
	uint64_t one = 1;

	if (ss->wake_fd >= 0 && write(ss->wake_fd, &one, sizeof(one)) < 0) {
		/* The counter is only full if we were woken already. */
	}
}

void sess_woken(struct session *ss)
{
	uint64_t buf;

	if (read(ss->wake_fd, &buf, sizeof(buf)) < 0) {
		/* Nothing to read: nobody woke us. */
	}
}

int sess_send(struct session *ss, unsigned type, const ProtobufCMessage *m, const char *what)
{
	int rc = ctrl_send(&ss->ch, type, m);

	return rc == -EAGAIN ? rd_err_set(&ss->err, -EPROTO, "no credit to %s", what) : rc;
}

void sess_fini(struct session *ss)
{
	fab_disconnect(ss->conn);
	ctrl_fini(&ss->ch);
	fab_conn_destroy(ss->conn);
	ss->conn = NULL;
	if (ss->wake_fd >= 0)
		close(ss->wake_fd);
	if (ss->epfd >= 0)
		close(ss->epfd);
	auth_key_free(ss->key, ss->cfg.auth_key_len);
	ss->key = NULL;
	stats_fini(&ss->stats);
	pthread_mutex_destroy(&ss->reason_lock);
}

static int classify(const struct session *ss, int rc)
{
	switch (rc) {
	case -ECANCELED:
		return RDMIG_ERROR_CANCELLED;
	case -ETIMEDOUT:
		return RDMIG_ERROR_TIMEOUT;
	default:
		break;
	}
	if (ss->peer_said)
		return RDMIG_ERROR_PEER;
	switch (rc) {
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -ECONNABORTED:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -ENETDOWN:
	case -EADDRNOTAVAIL:
	case -EPIPE:
		return RDMIG_ERROR_CONNECTION;
	case -EPROTO:
	case -EBADMSG:
	case -EPROTONOSUPPORT:
	case -EACCES:
		return RDMIG_ERROR_PEER;
	default:
		return RDMIG_ERROR_LOCAL;
	}
}

int sess_error_class(const struct session *ss, int rc)
{
	int c = atomic_load(&ss->err_class);

	if (c != RDMIG_ERROR_NONE || rc >= 0)
		return c;
	return classify(ss, rc);
}

int sess_peer_refused(struct session *ss, int rc)
{
	ss->peer_said = true;
	return rc;
}

int sess_fail(struct session *ss, int rc)
{
	if (rc >= 0)
		rc = -EPROTO;
	if (ss->failed)
		return rc;
	ss->failed = true;
	if (atomic_load(&ss->err_class) == RDMIG_ERROR_NONE)
		atomic_store(&ss->err_class, classify(ss, rc));
	cfg_log(&ss->cfg, RDMIG_LOG_ERROR, "migration failed: %s", ss->err.msg);
	if (ss->ctrl_ready)
		ctrl_send_error(&ss->ch, rc, ss->err.msg, ss->guest_never_ran, 200);
	fab_disconnect(ss->conn);
	return rc;
}

int sess_peer_error(struct session *ss, const Rdmig__Error *e)
{
	bool dest = !strcmp(ss->peer, "source");
	int code = e->code < 0 && e->code > -4096 ? e->code : -EPROTO;

	/* The codec already made the text printable.  A source hears the
	 * destination's reason as its own (a refusal, a timeout), except a
	 * cancel, which was not its own; a destination hears that the source
	 * gave up, or cancelled. */
	if (dest)
		code = code == -ECANCELED ? -ECANCELED : -ECONNABORTED;
	else if (code == -ECANCELED)
		code = -ECONNABORTED;
	/* Its cancel is a cancel here too; anything else it says is its
	 * failure, whatever the errno. */
	if (e->code == -ECANCELED)
		atomic_store(&ss->err_class, RDMIG_ERROR_CANCELLED);
	ss->peer_said = true;
	return rd_err_set(&ss->err, code, "%s reported: %s", ss->peer,
			  e->message ? e->message : "");
}

void sess_cancel(struct session *ss, const char *reason)
{
	pthread_mutex_lock(&ss->reason_lock);
	snprintf(ss->cancel_reason, sizeof(ss->cancel_reason), "%s",
		 reason && *reason ? reason : "");
	pthread_mutex_unlock(&ss->reason_lock);
	atomic_store(&ss->cancelled, true);
	sess_wake(ss);
}

int sess_check_cancel(struct session *ss)
{
	char why[256];

	if (!atomic_load(&ss->cancelled))
		return 0;
	pthread_mutex_lock(&ss->reason_lock);
	snprintf(why, sizeof(why), "%s", ss->cancel_reason);
	pthread_mutex_unlock(&ss->reason_lock);
	if (why[0])
		return rd_err_set(&ss->err, -ECANCELED, "cancelled by the %s: %s",
				  strcmp(ss->peer, "source") ? "source" : "destination", why);
	return rd_err_set(&ss->err, -ECANCELED, "migration cancelled");
}

int sess_keepalive(struct session *ss)
{
	if (!ss->ctrl_ready || rd_now_ms() - ss->ch.last_send_ms < ss->cfg.keepalive_ms)
		return 0;
	return ctrl_keepalive(&ss->ch);
}

int sess_reentered(const struct session *ss)
{
	return cfg_in_cb(&ss->cfg) ? -EDEADLK : 0;
}

void sess_progress(struct session *ss, int64_t *last_ms, bool force,
		   void (*fill)(void *role, struct rdmig_stats *st), void *role)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	int64_t now = rd_now_ms();
	struct cfg_cb_frame f;

	if (!ss->cfg.progress || (!force && now - *last_ms < ss->cfg.progress_ms))
		return;
	*last_ms = now;
	fill(role, &st);
	cfg_cb_enter(&f, &ss->cfg);
	ss->cfg.progress(ss->cfg.progress_ctx, &st);
	cfg_cb_leave(&f);
}

void sess_stats_out(const struct rdmig_stats *in, struct rdmig_stats *out)
{
	size_t n = out->size ? out->size : STATS_SIZE_0_1_0;

	/* An older caller's struct is a prefix of ours; 0 was "this
	 * version's size" in 0.1.0, so it is 0.1.0's. */
	if (n > sizeof(*in))
		n = sizeof(*in);
	memcpy(out, in, n);
	out->size = (uint32_t)n;
}
