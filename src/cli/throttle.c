/* The throttle's keeper and its protocol (throttle.h).
 *
 * migrate-send and the keeper share a SOCK_SEQPACKET socket pair: one
 * struct keep_req per message.  A throttle change waits for the keeper's
 * struct keep_rep (its error, if any, is migrate-send's to report); the
 * notes about the workload (frozen, thawed, held) need none: whatever
 * migrate-send wrote before it died is still read by the keeper before
 * the end of the stream. */
#include "throttle.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "throttle_int.h"

/* How long a throttle change may take the keeper (cgroup writes: a few
 * ms; a machine under load: more). */
#define REPLY_MS 10000
#define MAX_KEEP_FDS 8

/* The mechanisms, the one tried first first. */
static const struct thr_ops *const mechanisms[] = { &thr_cgroup_ops };

enum keep_op {
	KEEP_SET = 1,           /* the throttle at pct (0: released); a reply */
	/* The workload is to be SIGSTOPped for a moment: while throttled, the
	 * throttle steps aside first (pct 1: a reply once it did), so that
	 * it stops at once. */
	KEEP_FROZEN,
	KEEP_THAWED,            /* ... and runs again, throttled again */
	KEEP_HOLD,              /* it stops for good: leave it stopped */
	KEEP_ASIDE,             /* stopped otherwise: the throttle steps aside */
};

struct keep_req {
	uint32_t op;
	uint32_t pct;
};

/* A message of its own size on the socket pair, not a struct cli_err:
 * a SEQPACKET datagram must fit the socket's send buffer, which a host
 * may set as low as 4.6 KB (net.core.wmem_default). */
struct keep_rep {
	int32_t rc;
	char msg[1020];
};

struct throttle {
	const struct thr_ops *ops;
	void *st;
	struct proc_ref proc;
	int sock;               /* ours of the pair; -1 once closed */
	pid_t keeper;
	bool gone;              /* the keeper exited */
	unsigned pct;
	uint64_t on_ms, total_ms; /* throttled since, and before that */
};

/* ---- the keeper ---------------------------------------------------------------- */

static volatile sig_atomic_t keeper_told;

static void on_term(int sig)
{
	(void)sig;
	keeper_told = 1;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* Only what it needs stays open: above all not QEMU's monitor (QEMU serves
 * one client, and would wait for us), nor migrate-send's stdout (a reader
 * waits for its end). */
static void keep_only(int *fds, unsigned n)
{
	unsigned i;
	int lo = 3, std, null = open("/dev/null", O_RDWR | O_CLOEXEC);
	bool kept;

	/* A standard descriptor migrate-send had closed may be one we keep. */
	for (std = 0; null >= 0 && std < 3; std++) {
		for (kept = false, i = 0; i < n; i++)
			kept = kept || fds[i] == std;
		if (!kept && std != null)
			dup2(null, std);
	}
	if (null > 2)
		close(null);
	qsort(fds, n, sizeof(*fds), cmp_int);
	for (i = 0; i < n; i++) {
		if (fds[i] < lo)
			continue;
		if (fds[i] > lo)
			close_range((unsigned)lo, (unsigned)fds[i] - 1, 0);
		lo = fds[i] + 1;
	}
	close_range((unsigned)lo, ~0u, 0);
}

/* migrate-send is gone (exited, killed, or we were told to go): the
 * throttle goes, and a workload it had frozen for a moment runs again. */
static __attribute__((noreturn)) void keeper_end(struct throttle *t, bool frozen, bool hold)
{
	struct cli_err why;

	t->ops->release(t->st, &why);
	if (frozen && !hold)
		proc_signal(&t->proc, SIGCONT);
	_exit(0);
}

/* The answer to migrate-send: @e's message (cut to the datagram's room) if
 * @rep says the step failed.  A failed send leaves migrate-send's wait to
 * time out, which says so. */
static void reply(int sock, struct keep_rep *rep, const struct cli_err *e)
{
	size_t n;

	if (rep->rc) {
		n = strnlen(e->msg, sizeof(rep->msg) - 1);
		memcpy(rep->msg, e->msg, n);
		rep->msg[n] = '\0';
	}
	(void)send(sock, rep, sizeof(*rep), MSG_NOSIGNAL);
}

static __attribute__((noreturn)) void keeper_main(struct throttle *t, int sock, pid_t parent)
{
	int fds[MAX_KEEP_FDS] = { sock, t->proc.pidfd, t->proc.dirfd };
	unsigned n = 3 + t->ops->fds(t->st, fds + 3, MAX_KEEP_FDS - 3);
	struct sigaction sa;
	bool frozen = false, hold = false, on = false, aside = false;
	struct keep_req req;
	struct keep_rep rep;
	struct cli_err e;
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	sigset_t none, term;
	ssize_t got;

	keep_only(fds, n);
	/* Out of migrate-send's session and process group: a ^C at its
	 * terminal, or a kill of its group, does not reach us. */
	setsid();
	/* SIGTERM only inside ppoll: seen there, or before it, never lost. */
	sigemptyset(&none);
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_SETMASK, &term, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);
	sigaction(SIGQUIT, &sa, NULL);
	/* No SA_RESTART: ppoll returns, and the flag is seen. */
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		keeper_end(t, frozen, hold);
	for (;;) {
		if (keeper_told)
			keeper_end(t, frozen, hold);
		if (ppoll(&pfd, 1, NULL, &none) < 0)
			continue;
		got = recv(sock, &req, sizeof(req), 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got != (ssize_t)sizeof(req))
			keeper_end(t, frozen, hold);
		memset(&rep, 0, sizeof(rep));
		e.msg[0] = '\0';
		switch (req.op) {
		case KEEP_SET:
			rep.rc = req.pct ? t->ops->apply(t->st, req.pct, &e) :
				 t->ops->release(t->st, &e);
			on = req.pct && !rep.rc;
			aside = false;
			reply(sock, &rep, &e);
			break;
		case KEEP_FROZEN:
			frozen = true;
			if (on)
				rep.rc = t->ops->pause(t->st, true, &e);
			if (req.pct)
				reply(sock, &rep, &e);
			break;
		case KEEP_THAWED:
			frozen = false;
			if (on && !aside)
				t->ops->pause(t->st, false, &e);
			break;
		case KEEP_HOLD: hold = true; break;
		case KEEP_ASIDE:
			if (on && !aside)
				t->ops->pause(t->st, true, &e);
			aside = true;
			break;
		default: break;
		}
	}
}

/* ---- migrate-send's side ----------------------------------------------------------- */

int throttle_open(struct throttle **out, const struct thr_target *target, struct cli_err *err)
{
	struct throttle *t = calloc(1, sizeof(*t));
	struct thr_target tt = *target;
	struct cli_err why = { "" };
	char all[2200] = "";
	pid_t parent = getpid();
	int sv[2], rc = -ENOMEM;
	size_t i;

	*out = NULL;
	if (!t)
		return cli_err_set(err, -ENOMEM, "out of memory");
	t->sock = -1;
	t->proc = (struct proc_ref)PROC_REF_INIT;
	rc = proc_dup(&t->proc, target->proc, &why);
	if (rc) {
		free(t);
		return cli_err_set(err, rc, "%s", why.msg);
	}
	tt.proc = &t->proc;
	for (i = 0; i < sizeof(mechanisms) / sizeof(mechanisms[0]); i++) {
		t->st = calloc(1, mechanisms[i]->size);
		if (!t->st)
			break;
		rc = mechanisms[i]->probe(t->st, &tt, &why);
		if (!rc) {
			t->ops = mechanisms[i];
			break;
		}
		mechanisms[i]->fini(t->st);
		free(t->st);
		t->st = NULL;
		snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s%s", all[0] ? "; " : "",
			 why.msg);
	}
	if (!t->ops) {
		proc_close(&t->proc);
		free(t);
		return cli_err_set(err, rc ? rc : -ENOMEM, "%s cannot be throttled here: %s",
				   target->what, all[0] ? all : "out of memory");
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		rc = -errno;
		throttle_close(t);
		return cli_err_set(err, rc, "socketpair: %s", strerror(-rc));
	}
	t->keeper = fork();
	if (t->keeper == 0) {
		close(sv[0]);
		keeper_main(t, sv[1], parent);
	}
	rc = t->keeper < 0 ? -errno : 0;
	close(sv[1]);
	t->sock = sv[0];
	if (rc) {
		t->keeper = 0;
		throttle_close(t);
		return cli_err_set(err, rc, "cannot fork the throttle's keeper: %s",
				   strerror(-rc));
	}
	*out = t;
	return 0;
}

static int keeper_gone(struct throttle *t, struct cli_err *err)
{
	t->gone = true;
	return cli_err_set(err, -ESRCH, "the throttle's keeper (process %d) has exited",
			   (int)t->keeper);
}

/* Sends @req and waits up to @ms for the keeper's answer into @rep. */
static int exchange(struct throttle *t, const struct keep_req *req, struct keep_rep *rep,
		    int ms, struct cli_err *err)
{
	struct pollfd pfd = { .fd = t->sock, .events = POLLIN };
	ssize_t got;
	int rc;

	if (t->gone)
		return keeper_gone(t, err);
	if (send(t->sock, req, sizeof(*req), MSG_NOSIGNAL) != (ssize_t)sizeof(*req))
		return keeper_gone(t, err);
	do {
		rc = poll(&pfd, 1, ms);
	} while (rc < 0 && errno == EINTR);
	if (rc == 0)
		return cli_err_set(err, -ETIMEDOUT, "the throttle's keeper (process %d) did "
				   "not answer within %d ms", (int)t->keeper, ms);
	got = recv(t->sock, rep, sizeof(*rep), 0);
	if (got != (ssize_t)sizeof(*rep))
		return keeper_gone(t, err);
	rep->msg[sizeof(rep->msg) - 1] = '\0';
	return rep->rc ? cli_err_set(err, rep->rc, "%s", rep->msg) : 0;
}

static void note(struct throttle *t, enum keep_op op)
{
	struct keep_req req = { .op = op };

	if (t && !t->gone && t->sock >= 0 &&
	    send(t->sock, &req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EPIPE)
		t->gone = true;
}

void throttle_frozen(struct throttle *t, bool frozen)
{
	struct keep_req req = { .op = KEEP_FROZEN, .pct = 1 };
	struct keep_rep rep;
	struct cli_err why;

	/* Throttled, the stop waits until the limit stepped aside (a failure
	 * to: it stops once its next period begins). */
	if (frozen && t && t->pct && !t->gone)
		exchange(t, &req, &rep, REPLY_MS, &why);
	else
		note(t, frozen ? KEEP_FROZEN : KEEP_THAWED);
}

void throttle_hold(struct throttle *t)
{
	note(t, KEEP_HOLD);
}

void throttle_aside(struct throttle *t)
{
	note(t, KEEP_ASIDE);
}

int throttle_set(struct throttle *t, unsigned pct, struct cli_err *err)
{
	struct keep_req req = { .op = KEEP_SET, .pct = pct };
	struct keep_rep rep;
	uint64_t now = cli_now_ms();
	int rc;

	if (pct > 99)
		return cli_err_set(err, -EINVAL, "throttle %u%%: at most 99", pct);
	rc = exchange(t, &req, &rep, REPLY_MS, err);
	if (rc)
		return rc;
	if (pct && !t->pct)
		t->on_ms = now;
	if (!pct && t->pct)
		t->total_ms += now - t->on_ms;
	t->pct = pct;
	return 0;
}

void throttle_close(struct throttle *t)
{
	struct cli_err why;
	int i;

	if (!t)
		return;
	if (t->pct && !t->gone)
		throttle_set(t, 0, &why);
	if (t->sock >= 0)
		close(t->sock);
	/* The keeper ends at the end of the stream; our event loop's SIGCHLD
	 * handler may reap it first. */
	for (i = 0; t->keeper > 0 && i < 200; i++) {
		pid_t r = waitpid(t->keeper, NULL, WNOHANG);

		if (r == t->keeper || (r < 0 && errno == ECHILD))
			break;
		usleep(5000);
	}
	if (t->ops)
		t->ops->fini(t->st);
	free(t->st);
	proc_close(&t->proc);
	free(t);
}

unsigned throttle_pct(const struct throttle *t)
{
	return t ? t->pct : 0;
}

uint64_t throttle_time_ms(const struct throttle *t)
{
	if (!t)
		return 0;
	return t->total_ms + (t->pct ? cli_now_ms() - t->on_ms : 0);
}

const char *throttle_method(const struct throttle *t)
{
	return t ? t->ops->name : "none";
}

const char *throttle_where(const struct throttle *t)
{
	return t ? t->ops->where(t->st) : "";
}
