/* fabric, the data path: memory registration, posting work requests and
 * reaping completions.  It needs none of fab_cm.h's helpers. */
#include "fabric.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/resource.h>

int fab_cq_fd(const struct fab_conn *c)
{
	/* Before the route is resolved there is no completion channel yet. */
	return c->cch ? c->cch->fd : -1;
}

/* What a failed ibv_reg_mr means here, and what to do about it. */
static const char *memlock_hint(int err)
{
	struct rlimit rl;

	if (err == EFAULT)
		return " (the pages could not be pinned: the memory is not backed any "
		       "more, e.g. its file was truncated or its filesystem is full, or "
		       "the kernel refuses long-term pins of this kind of file: put "
		       "it on tmpfs or hugetlbfs)";
	if (err != ENOMEM && err != EPERM && err != EAGAIN)
		return "";
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		return " (the locked-memory limit is too low: raise it with "
		       "`ulimit -l unlimited` or LimitMEMLOCK=, or use dynamic "
		       "registration with a smaller pinned-bytes cap)";
	if (err == EPERM)
		return " (the kernel refused to pin these pages: put the memory on "
		       "tmpfs or hugetlbfs)";
	return "";
}

int fab_reg_error(struct rd_err *err, int rc, size_t len)
{
	return rd_err_set(err, rc, "ibv_reg_mr(%zu bytes) failed: %s%s", len, strerror(-rc),
			  memlock_hint(-rc));
}

int fab_reg_mr(struct fab_conn *c, void *addr, size_t len, int access,
	       struct ibv_mr **out)
{
	struct ibv_mr *mr = ibv_reg_mr(c->pd, addr, len, access);

	if (!mr)
		return fab_reg_error(c->err, errno ? -errno : -ENOMEM, len);
	*out = mr;
	return 0;
}

int fab_dereg_mr(struct fab_conn *c, struct ibv_mr *mr)
{
	int rc;

	if (!mr)
		return 0;
	rc = ibv_dereg_mr(mr);
	if (rc)
		return rd_err_set(c->err, -rc, "ibv_dereg_mr failed: %s", strerror(rc));
	return 0;
}

int fab_post_send(struct fab_conn *c, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(c->id->qp, wr, &bad);

	if (rc)
		return rd_err_set(c->err, -rc, "ibv_post_send failed: %s", strerror(rc));
	return 0;
}

bool fab_qp_broken(const struct fab_conn *c)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr a;

	if (!c || !c->id || !c->id->qp || ibv_query_qp(c->id->qp, &a, IBV_QP_STATE, &init))
		return false;
	return a.qp_state == IBV_QPS_ERR;
}

void fab_qp_error(struct fab_conn *c)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (c && c->id && c->id->qp)
		ibv_modify_qp(c->id->qp, &a, IBV_QP_STATE);
}

int fab_qp_sends_only(struct fab_conn *c)
{
	struct ibv_qp_attr a = { .qp_access_flags = 0 };
	int rc = ibv_modify_qp(c->id->qp, &a, IBV_QP_ACCESS_FLAGS);

	if (rc)
		return rd_err_set(c->err, -rc, "clearing the queue pair's remote access failed: "
				  "%s", strerror(rc));
	return 0;
}

int fab_post_recv(struct fab_conn *c, struct ibv_recv_wr *wr)
{
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_recv(c->id->qp, wr, &bad);

	if (rc)
		return rd_err_set(c->err, -rc, "ibv_post_recv failed: %s", strerror(rc));
	return 0;
}

int fab_poll(struct fab_conn *c, struct ibv_wc *wc, int n)
{
	int rc = ibv_poll_cq(c->cq, n, wc);

	if (rc < 0)
		return rd_err_set(c->err, -EIO, "ibv_poll_cq failed");
	return rc;
}

int fab_cq_rearm(struct fab_conn *c)
{
	struct ibv_cq *cq;
	void *ctx;
	int rc;

	while (ibv_get_cq_event(c->cch, &cq, &ctx) == 0) {
		/* Acking in batches: each ack takes a mutex in libibverbs. */
		if (++c->unacked_cq_events >= 64) {
			ibv_ack_cq_events(c->cq, c->unacked_cq_events);
			c->unacked_cq_events = 0;
		}
	}
	rc = ibv_req_notify_cq(c->cq, 0);
	if (rc)
		return rd_err_set(c->err, -rc, "ibv_req_notify_cq failed: %s", strerror(rc));
	return 0;
}

int fab_poll_wait(struct fab_conn *c, struct ibv_wc *wc, int n, int64_t deadline,
		  int wake_fd)
{
	struct pollfd pfd[3];
	int rc;

	for (;;) {
		rc = fab_poll(c, wc, n);
		if (rc)
			return rc;
		/* Completions that arrived before a disconnect are still
		 * delivered first: the peer's last message may be among them. */
		if (c->state == FAB_DISCONNECTED || c->state == FAB_FAILED)
			return c->state == FAB_DISCONNECTED ?
			       rd_err_set(c->err, -ECONNRESET, "peer disconnected") :
			       rd_err_set(c->err, -ECONNABORTED, "connection failed");
		rc = fab_cq_rearm(c);
		if (rc)
			return rc;
		/* A completion may have arrived between the poll and the arm. */
		rc = fab_poll(c, wc, n);
		if (rc)
			return rc;
		if (rd_expired(deadline))
			return rd_err_set(c->err, -ETIMEDOUT,
					  "timed out waiting for a completion");
		pfd[0] = (struct pollfd){ .fd = c->cch->fd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = c->ech->fd, .events = POLLIN };
		pfd[2] = (struct pollfd){ .fd = wake_fd, .events = POLLIN };
		rc = poll(pfd, wake_fd >= 0 ? 3 : 2, rd_remaining_ms(deadline));
		if (rc < 0 && errno != EINTR)
			return rd_err_set(c->err, -errno, "poll failed: %s", strerror(errno));
		if (rc > 0 && wake_fd >= 0 && (pfd[2].revents & POLLIN))
			return rd_err_set(c->err, -ECANCELED, "cancelled");
		if (rc > 0 && (pfd[1].revents & POLLIN))
			fab_cm_process(c); /* a disconnect is reported after the CQ drains */
	}
}

/* What a failed completion most likely means for a migration. */
static const char *wc_hint(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_REM_ACCESS_ERR:
		return ": the peer's memory registration is gone (did the peer fail or exit?)";
	case IBV_WC_RETRY_EXC_ERR:
		return ": the peer stopped answering (host down or link cut?)";
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return ": the peer had no receive buffer posted";
	case IBV_WC_WR_FLUSH_ERR:
		return ": the connection was already broken";
	default:
		return "";
	}
}

int fab_wc_error(struct fab_conn *c, const struct ibv_wc *wc, const char *what)
{
	int rc = wc->status == IBV_WC_WR_FLUSH_ERR ? -ECONNRESET : -EIO;

	return rd_err_set(c->err, rc, "%s failed: %s (status %d, vendor error 0x%x)%s",
			  what, ibv_wc_status_str(wc->status), wc->status, wc->vendor_err,
			  wc_hint(wc->status));
}
