/* evil_peer: a hostile rdmig peer for the security suite.  It speaks the wire
 * protocol of rdmig(7) with its own framing and its own receive buffers, so
 * it can do what an honest peer never does: pose as a destination to collect
 * a source's answer, replay it on a connection whose RTU it never sends, lie
 * about its rings and credits, squat on handshakes, vanish after COMPLETE,
 * and keep the destination's completion queue from ever emptying.
 *
 *   evil_peer harvest HOST:PORT --variant zero|relay [--listen HOST]
 *   evil_peer ring HOST:PORT [--listen HOST]
 *   evil_peer hold HOST:PORT N SECONDS
 *   evil_peer rings HOST:PORT [--depth N] [--msg-max BYTES] [--hold-ms MS]
 *   evil_peer bigmap HOST:PORT --key FILE [--size BYTES] [--pin-all]
 *   evil_peer vanish HOST:PORT [--size BYTES]
 *   evil_peer pages HOST:PORT --variant outside|torn|index|honest [--size BYTES]
 *   evil_peer flood HOST:PORT --key FILE --seconds S [--size BYTES]
 *                   [--zero-bytes BYTES]
 *   evil_peer state HOST:PORT --key FILE [--announce BYTES] [--state-bytes BYTES]
 *                   [--size BYTES] [--hold-ms MS]
 *   evil_peer pcsource HOST:PORT --variant unregistered|revoke|honest [--size BYTES]
 *                   [--revoke-ms MS]
 *   evil_peer pcdest HOST:PORT --variant outside|inside|resume-error|error-old|
 *                   error-never-ran [--listen HOST]
 *   evil_peer resume HOST:PORT --variant token|plain
 *   evil_peer pcresume HOST:PORT --key FILE --variant noauth|badmac|error [--size BYTES]
 *   common: [--timeout MS] (each wait for a peer, default 10000)
 *           [--proto 1|2|auto] [--name BLOCK] [--chunk-shift N]
 *
 * HOST:PORT is the real destination (migrate-recv).  harvest (and ring, a
 * fake destination alone: its HOST:PORT only names --listen's default) listens on
 * --listen (default: HOST) as a fake destination and prints
 * "evil_peer: listening on port N" on stderr for the source to be pointed
 * at.  Progress goes to stderr; stdout gets exactly one result line,
 * "MODE: succeeded|refused key=value ...".  Exit status: 0 the attack
 * succeeded, 1 it was refused, 2 usage or setup error, 3 the mode's time
 * bound ran out.
 *
 * What "succeeded" means per mode: harvest, a BLOCK_MAP_RESP with a base
 * address arrived on the replayed connection; ring, the source took a
 * STATE_RING offered before authentication without an ERROR; hold, a connection was still
 * open after SECONDS; rings, the destination kept the connection with the
 * ring asked for and sent frames on it (its send ring exists: the test
 * measures what that cost); bigmap, a BLOCK_MAP_RESP arrived; vanish,
 * COMPLETE was delivered and our QP destroyed before the COMPLETE_ACK could
 * land (the test checks what the destination made of it); pages, a PAGES
 * message of 0xAA bytes was taken without an ERROR within a second: a run
 * over the block's end (outside), not on a page boundary (torn), for a block
 * that does not exist (index), or a proper first page (honest: the control
 * that shows the attack path works); flood, the destination took
 * ZERO_RANGES and ITER_END for all of SECONDS without ending the
 * migration (whether its other work went on meanwhile is the test's to
 * see); state, all of --state-bytes of device state (64 MiB) was sent
 * without the destination ending the migration, after announcing
 * --announce bytes (or nothing), and with --hold-ms it kept the migration
 * open (its state's room taken) that long after; pcsource (post-copy, the READ side: a
 * source that switches with keys for memory it never registered
 * (unregistered), or takes back after --revoke-ms (revoke), or the honest
 * control), the destination read every page and said POSTCOPY_DONE:
 * refused when it ended the migration instead (dest-said gives its
 * reason); pcdest (a fake destination that grants post-copy and, once the
 * source switched, RDMA READs a page just past the last piece it was told
 * of (outside), or the first page (inside, the control)), the READ
 * returned data: refused when the source's NIC refused it (nic= gives the
 * status), and source-gone-ms when the source then ended the migration;
 * pcdest resume-error (recovery granted: the link broken after the switch,
 * the source's RESUME accepted and answered with an ERROR), the source
 * gave up on that ERROR: refused when it came back with another RESUME
 * (retried=yes); pcdest error-old and error-never-ran (once the source
 * switched, an ERROR without guest_never_ran, as a destination older than
 * 0.3.0 sends, or with it), the ERROR went (sent=error): what the source
 * made of it (its guest resumed or not) is the test's to see;
 * resume (at a destination whose post-copy is paused: a RESUME with a
 * token of our own (token), or a plain REQUEST as a new source (plain)),
 * the connection was accepted (reason= gives the refusal's otherwise);
 * pcresume (a keyed source with post-copy recovery that switches, breaks
 * its own link, and resumes with the right token but without proving the
 * key (noauth: POSTCOPY_RESUME at once) or with a wrong proof (badmac), or
 * sends an ERROR instead (error); done skips the attack and breaks the link
 * only once the destination read every page but could not say so, its
 * credits withheld: left-at-resume= is what POSTCOPY_RESUMED said),
 * POSTCOPY_RESUMED came back (resumed=yes): refused otherwise, and then it
 * resumes honestly and lets the destination read every page, to show the
 * attempt cost the migration nothing (then-honest=completed).
 * flood prints "evil_peer: flood: flooding ..." on stderr once it
 * starts, "evil_peer: flood: served ..." at the first ITER_ACK, and its
 * result line gives when the destination ended it
 * (dropped-at-ms, CLOCK_MONOTONIC, comparable with the test's clock).
 *
 * --proto auto (the default) speaks what the other side offers: as a fake
 * destination the source's version, as a source versions 1..2.  Version 1
 * is the format before the challenge moved into ACCEPT (24-byte ACCEPT, the
 * destination's AUTH_CHALLENGE frame after ESTABLISHED, MACs over the two
 * nonces only), so the same attacks run against an old build. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "auth.h"
#include "codec.h"
#include "fabric.h"
#include "privdata.h"
#include "rdmig.pb-c.h"

#define NRX_MAX 64
#define NTX 16
/* A PAGES message with a page of data needs more than 4 KiB. */
#define TX_SIZE 16384
#define V1_ACCEPT_LEN 24
#define V1_NONCE_LEN 32
#define HOLD_MAX 64
#define KEEPALIVE_MS 200
#define IB_CM_REJ_CONSUMER_DEFINED 28

enum { TAG_RX = 1, TAG_TX };

struct slot {
	struct fab_tag tag;
	uint32_t idx;
};

/* One QP's control frames.  The receive buffers are ours to post or not:
 * what we announce in the REQUEST (depth, size) need not be what we post. */
struct wire {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *mem;           /* nrx buffers of rx_size, then NTX of TX_SIZE */
	uint32_t nrx, rx_size;
	struct slot rx[NRX_MAX], tx[NTX];
	bool tx_busy[NTX];
	uint32_t credits;       /* the peer's buffers we may still fill */
	uint32_t to_return;     /* ours re-posted since our last frame */
	bool repost;            /* re-post a buffer as soon as its frame is read */
	uint64_t frames_in;
};

struct frame {
	struct ctrl_hdr h;
	ProtobufCMessage *m;
	uint32_t slot;          /* the receive buffer it arrived in */
	uint8_t raw[TX_SIZE];   /* as received, for relaying (len 0: too long) */
	size_t len;
};

/* One connection: ours to a destination, dialled with a QP rdma_cm does not
 * know about (so whether the RTU is ever sent is our choice), or a source's
 * to us, answered through fabric.c like a real destination (fc). */
struct peer {
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct fab_conn *fc;
	struct wire w;
	uint8_t priv[FAB_PRIV_MAX]; /* the peer's ACCEPT, REJECT or REQUEST */
	size_t priv_len;
	uint32_t peer_qpn;
	bool rtu;               /* we completed the connection (active side) */
	/* dial(): a post-copy channel, which the destination reads from
	 * (our READ resources offered), on a PD we share among them. */
	bool reads;
	struct ibv_pd *share_pd;
	bool closed;            /* disconnected, rejected or broken */
	char said[1100];        /* the peer's ERROR text */
	struct rd_err err;
};

struct opts {
	const char *mode, *host, *port, *lhost, *key_path, *name;
	int variant;            /* harvest: 0 zero, 1 relay; pages: see pages_variants */
	int proto;              /* 0 auto, else 1 or 2 */
	uint64_t size, msg_max;
	uint32_t depth, chunk_shift;
	int pin_all, hold_ms, n, seconds;
	uint64_t zero_bytes;    /* flood: bytes one ZERO_RANGES covers */
	uint64_t announce;      /* state: device state said in BLOCK_MAP_REQ
				 * (UINT64_MAX: nothing said) */
	uint64_t state_bytes;   /* state: device state sent */
	int revoke_ms;          /* pcsource revoke: after the switch */
	int hold_state_ms;      /* state: then connected this long (--hold-ms) */
	uint8_t key[AUTH_KEY_MAX];
	size_t key_len;
};

static int timeout_ms = 10000;
static const char *mode_name = "evil_peer";

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "evil_peer: %s: ", mode_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* The one line on stdout; returns the exit status. */
static int result(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int result(int code, const char *fmt, ...)
{
	va_list ap;

	printf("%s: %s ", mode_name, code == 0 ? "succeeded" : code == 1 ? "refused" : "error");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	return code;
}

/* Peer text inside a "..." value of the result line. */
static const char *quoted(const char *s, char *buf, size_t len)
{
	size_t i;

	snprintf(buf, len, "%s", s && *s ? s : "-");
	for (i = 0; buf[i]; i++)
		if (buf[i] == '"' || buf[i] == '\n')
			buf[i] = '\'';
	return buf;
}

static void on_alarm(int sig)
{
	static const char msg[] = " error time-bound=exceeded\n";

	(void)sig;
	if (write(1, mode_name, strlen(mode_name)) < 0 || write(1, ":", 1) < 0 ||
	    write(1, msg, sizeof(msg) - 1) < 0) {
		/* Nothing more to do about it. */
	}
	_exit(3);
}

/* ---- frames --------------------------------------------------------------- */

static int post_rx(struct wire *w, uint32_t i)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(w->mem + (size_t)i * w->rx_size),
			       .length = w->rx_size, .lkey = w->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = fab_wr_id(&w->rx[i].tag), .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	return -ibv_post_recv(w->qp, &wr, &bad);
}

/* Registers our buffers and posts @nrx receives of @rx_size bytes. */
static int wire_init(struct wire *w, struct ibv_pd *pd, struct ibv_qp *qp, struct ibv_cq *cq,
		     uint32_t nrx, uint32_t rx_size)
{
	size_t len = (size_t)nrx * rx_size + (size_t)NTX * TX_SIZE;
	uint32_t i;
	int rc;

	w->qp = qp;
	w->cq = cq;
	w->nrx = nrx;
	w->rx_size = rx_size;
	w->repost = true;
	if (nrx > NRX_MAX || posix_memalign((void **)&w->mem, 4096, len))
		return -ENOMEM;
	memset(w->mem, 0, len);
	w->mr = ibv_reg_mr(pd, w->mem, len, IBV_ACCESS_LOCAL_WRITE);
	if (!w->mr)
		return -errno;
	for (i = 0; i < NTX; i++)
		w->tx[i] = (struct slot){ .tag.kind = TAG_TX, .idx = i };
	for (i = 0; i < nrx; i++) {
		w->rx[i] = (struct slot){ .tag.kind = TAG_RX, .idx = i };
		rc = post_rx(w, i);
		if (rc)
			return rc;
	}
	return 0;
}

static void wire_fini(struct wire *w)
{
	if (w->mr)
		ibv_dereg_mr(w->mr);
	free(w->mem);
	w->mr = NULL;
	w->mem = NULL;
}

static int wire_post(struct wire *w, const void *frame, size_t len)
{
	struct ibv_sge sge = { .lkey = w->mr->lkey, .length = (uint32_t)len };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	uint8_t *buf;
	unsigned i;
	int rc;

	for (i = 0; i < NTX && w->tx_busy[i]; i++)
		;
	if (i == NTX || len > TX_SIZE)
		return i == NTX ? -EAGAIN : -EMSGSIZE;
	buf = w->mem + (size_t)w->nrx * w->rx_size + (size_t)i * TX_SIZE;
	memcpy(buf, frame, len);
	sge.addr = (uintptr_t)buf;
	wr.wr_id = fab_wr_id(&w->tx[i].tag);
	rc = ibv_post_send(w->qp, &wr, &bad);
	if (rc)
		return -rc;
	w->tx_busy[i] = true;
	if (w->credits)
		w->credits--;
	return 0;
}

/* Sends @m as @type; its header returns @claim credits (-1: the buffers we
 * really re-posted). */
static int send_msg(struct peer *p, unsigned type, const ProtobufCMessage *m, int claim)
{
	uint8_t buf[TX_SIZE];
	int len = ctrl_encode(type, (uint16_t)(claim < 0 ? p->w.to_return : (uint32_t)claim), m,
			      buf, sizeof(buf), &p->err);

	if (len < 0)
		return len;
	p->w.to_return = 0;
	return wire_post(&p->w, buf, (size_t)len);
}

static bool tx_idle(const struct wire *w)
{
	unsigned i;

	for (i = 0; i < NTX; i++)
		if (w->tx_busy[i])
			return false;
	return true;
}

/* ---- connections -------------------------------------------------------- */

static int get_event(struct rdma_event_channel *ech, int64_t deadline, struct rdma_cm_event **ev)
{
	for (;;) {
		if (!rdma_get_cm_event(ech, ev))
			return 0;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		if (deadline == 0)
			return -EAGAIN;
		if (rd_expired(deadline))
			return -ETIMEDOUT;
		usleep(1000);
	}
}

static int wait_event(struct peer *p, enum rdma_cm_event_type want, int64_t deadline)
{
	struct rdma_cm_event *ev;
	enum rdma_cm_event_type got;
	int rc = get_event(p->ech, deadline, &ev), status;

	if (rc)
		return rd_err_set(&p->err, rc, "waiting for %s: %s", rdma_event_str(want),
				  strerror(-rc));
	got = ev->event;
	status = ev->status;
	if (got == RDMA_CM_EVENT_CONNECT_RESPONSE || got == RDMA_CM_EVENT_REJECTED) {
		size_t n = ev->param.conn.private_data_len;

		if (got == RDMA_CM_EVENT_CONNECT_RESPONSE || status == IB_CM_REJ_CONSUMER_DEFINED) {
			p->priv_len = n < sizeof(p->priv) ? n : sizeof(p->priv);
			if (ev->param.conn.private_data)
				memcpy(p->priv, ev->param.conn.private_data, p->priv_len);
		}
		p->peer_qpn = ev->param.conn.qp_num;
	}
	rdma_ack_cm_event(ev);
	if (got == want)
		return 0;
	p->closed = true;
	if (got == RDMA_CM_EVENT_REJECTED)
		return rd_err_set(&p->err, -ECONNREFUSED, "rejected (status %d)", status);
	return rd_err_set(&p->err, -ECONNABORTED, "got %s (status %d) instead of %s",
			  rdma_event_str(got), status, rdma_event_str(want));
}

static int modify_qp(struct peer *p, enum ibv_qp_state s, const char *name)
{
	struct ibv_qp_attr attr = { .qp_state = s };
	int mask = 0, rc;

	if (rdma_init_qp_attr(p->id, &attr, &mask))
		return rd_err_set(&p->err, -errno, "rdma_init_qp_attr(%s) failed: %s", name,
				  strerror(errno));
	rc = ibv_modify_qp(p->qp, &attr, mask);
	if (rc)
		return rd_err_set(&p->err, -rc, "ibv_modify_qp(%s) failed: %s", name, strerror(rc));
	return 0;
}

/* Connects to @host:@port with @req as private data, @nrx receive buffers
 * of @rx_size posted.  The QP is ours, not rdma_cm's, so librdmacm hands us
 * CONNECT_RESPONSE and leaves the RTU to us: with @rtu false it is never
 * sent, and the destination never sees ESTABLISHED, yet our QP is ready to
 * send.  -ECONNREFUSED when rejected (the REJECT is in p->priv). */
static int dial(struct peer *p, const char *host, const char *port, const void *req,
		size_t req_len, uint32_t nrx, uint32_t rx_size, bool rtu, int64_t deadline)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = NTX + 2, .max_recv_wr = NRX_MAX,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_conn_param cp = { .private_data = req, .private_data_len = (uint8_t)req_len,
				      .retry_count = 7, .rnr_retry_count = 6,
				      .responder_resources = p->reads ? RDMA_MAX_RESP_RES : 0 };
	int rc, fl;

	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc)
		return rd_err_set(&p->err, -EINVAL, "cannot resolve %s:%s: %s", host, port,
				  gai_strerror(rc));
	p->ech = rdma_create_event_channel();
	if (!p->ech || rdma_create_id(p->ech, &p->id, p, RDMA_PS_TCP)) {
		freeaddrinfo(ai);
		return rd_err_set(&p->err, -errno, "rdma_cm: %s", strerror(errno));
	}
	fl = fcntl(p->ech->fd, F_GETFL);
	fcntl(p->ech->fd, F_SETFL, fl | O_NONBLOCK);
	rc = rdma_resolve_addr(p->id, NULL, ai->ai_addr, 2000) ? -errno : 0;
	freeaddrinfo(ai);
	if (rc)
		return rd_err_set(&p->err, rc, "rdma_resolve_addr: %s", strerror(-rc));
	rc = wait_event(p, RDMA_CM_EVENT_ADDR_RESOLVED, deadline);
	if (!rc && rdma_resolve_route(p->id, 2000))
		rc = rd_err_set(&p->err, -errno, "rdma_resolve_route: %s", strerror(errno));
	if (!rc)
		rc = wait_event(p, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline);
	if (rc)
		return rc;
	p->pd = p->share_pd ? p->share_pd : ibv_alloc_pd(p->id->verbs);
	p->cq = p->pd ? ibv_create_cq(p->id->verbs, NRX_MAX + NTX + 4, NULL, NULL, 0) : NULL;
	qa.send_cq = qa.recv_cq = p->cq;
	p->qp = p->cq ? ibv_create_qp(p->pd, &qa) : NULL;
	if (!p->qp)
		return rd_err_set(&p->err, -errno, "cannot create PD, CQ or QP: %s",
				  strerror(errno));
	rc = modify_qp(p, IBV_QPS_INIT, "INIT");
	if (!rc)
		rc = wire_init(&p->w, p->pd, p->qp, p->cq, nrx, rx_size);
	if (rc)
		return rc;
	cp.qp_num = p->qp->qp_num;
	if (rdma_connect(p->id, &cp))
		return rd_err_set(&p->err, -errno, "rdma_connect: %s", strerror(errno));
	rc = wait_event(p, RDMA_CM_EVENT_CONNECT_RESPONSE, deadline);
	/* INIT again with what the CM settled, as librdmacm does for its own
	 * QPs: remote read access comes with READ resources offered. */
	if (!rc && p->reads)
		rc = modify_qp(p, IBV_QPS_INIT, "INIT");
	if (!rc)
		rc = modify_qp(p, IBV_QPS_RTR, "RTR");
	if (!rc)
		rc = modify_qp(p, IBV_QPS_RTS, "RTS");
	if (rc || !rtu)
		return rc;
	if (rdma_establish(p->id))
		return rd_err_set(&p->err, -errno, "rdma_establish: %s", strerror(errno));
	p->rtu = true;
	return 0;
}

static void peer_close(struct peer *p)
{
	if (p->fc) {
		fab_disconnect(p->fc);
		wire_fini(&p->w);
		fab_conn_destroy(p->fc);
		p->fc = NULL;
		return;
	}
	if (p->id && p->rtu && !p->closed)
		rdma_disconnect(p->id);
	if (p->qp)
		ibv_destroy_qp(p->qp);
	wire_fini(&p->w);
	if (p->cq)
		ibv_destroy_cq(p->cq);
	if (p->pd && !p->share_pd)
		ibv_dealloc_pd(p->pd);
	if (p->id)
		rdma_destroy_id(p->id);
	if (p->ech)
		rdma_destroy_event_channel(p->ech);
	memset(p, 0, sizeof(*p));
}

/* The connection's end shows as a CM event; completions may still hold the
 * peer's last frame, so they are drained before it counts. */
static void cm_check(struct peer *p)
{
	struct rdma_cm_event *ev;

	if (p->fc) {
		if (fab_cm_process(p->fc) < 0)
			p->closed = true;
		return;
	}
	while (p->ech && !get_event(p->ech, 0, &ev)) {
		switch (ev->event) {
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_REJECTED:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			p->closed = true;
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
}

/* 1 and *f filled when a frame arrived, 0 when nothing is pending, or
 * negative once the connection is over. */
static int pump(struct peer *p, struct frame *f)
{
	struct ibv_wc wc;
	struct slot *s;
	uint8_t *buf;
	int rc;

	cm_check(p);
	while ((rc = ibv_poll_cq(p->w.cq, 1, &wc)) > 0) {
		s = rd_container_of(fab_tag_of(&wc), struct slot, tag);
		if (s->tag.kind == TAG_TX) {
			p->w.tx_busy[s->idx] = false;
			if (wc.status != IBV_WC_SUCCESS) {
				rd_err_set(&p->err, -EIO, "SEND failed: %s",
					   ibv_wc_status_str(wc.status));
				p->closed = true;
			}
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			p->closed = true;
			continue;
		}
		buf = p->w.mem + (size_t)s->idx * p->w.rx_size;
		f->slot = s->idx;
		f->len = wc.byte_len <= sizeof(f->raw) ? wc.byte_len : 0;
		memcpy(f->raw, buf, f->len);
		rc = ctrl_decode(buf, wc.byte_len, p->w.rx_size, NULL, &f->h, &f->m, &p->err);
		if (p->w.repost && !post_rx(&p->w, s->idx))
			p->w.to_return++;
		if (rc) {
			p->closed = true;
			return rc;
		}
		p->w.frames_in++;
		p->w.credits += f->h.credits;
		if (f->h.type == CT_ERROR)
			snprintf(p->said, sizeof(p->said), "%s",
				 ((Rdmig__Error *)f->m)->message ? ((Rdmig__Error *)f->m)->message : "");
		return 1;
	}
	if (rc < 0)
		p->closed = true;
	return p->closed ? -ECONNRESET : 0;
}

static int next_frame(struct peer *p, struct frame *f, int64_t deadline)
{
	int rc;

	for (;;) {
		rc = pump(p, f);
		if (rc)
			return rc < 0 ? rc : 0;
		if (rd_expired(deadline))
			return -ETIMEDOUT;
		usleep(1000);
	}
}

/* Waits for a frame of @type, skipping credits and keepalives; an ERROR
 * ends the wait with -ECONNABORTED (its text in p->said).  The caller frees
 * f->m. */
static int expect(struct peer *p, unsigned type, struct frame *f, int64_t deadline)
{
	int rc;

	for (;;) {
		rc = next_frame(p, f, deadline);
		if (rc)
			return rc;
		if (f->h.type == type)
			return 0;
		if (f->h.type == CT_ERROR) {
			ctrl_msg_free(NULL, f->m);
			return -ECONNABORTED;
		}
		note("skipping %s while waiting for %s", ctrl_type_name(f->h.type),
		     ctrl_type_name(type));
		ctrl_msg_free(NULL, f->m);
	}
}

/* Waits until every send completed (or the connection broke). */
static void drain_tx(struct peer *p, int64_t deadline)
{
	struct frame f;

	while (!tx_idle(&p->w) && !p->closed && !rd_expired(deadline)) {
		if (pump(p, &f) > 0)
			ctrl_msg_free(NULL, f.m);
		else
			usleep(1000);
	}
}

/* ---- what an rdmig source says ------------------------------------------------- */

static uint16_t choose_version(const struct opts *o, uint16_t vmin, uint16_t vmax)
{
	/* Versions 1 and 2: version 3 adds only post-copy recovery, which a
	 * fake destination never grants. */
	uint16_t v = o->proto ? (uint16_t)o->proto : vmax < 2 ? vmax : 2;

	return v >= vmin && v <= vmax && v >= 1 && v <= 2 ? v : 0;
}

static size_t encode_request(const struct opts *o, uint32_t caps, uint32_t depth,
			     uint32_t msg_max, uint8_t out[PD_REQUEST_LEN])
{
	struct pd_request r = { .ver_min = o->proto ? (uint16_t)o->proto : 1,
				.ver_max = o->proto ? (uint16_t)o->proto : 2,
				.caps = caps, .ctrl_depth = depth, .ctrl_msg_max = msg_max,
				.channels = 1 };

	randombytes_buf(&r.session_id, sizeof(r.session_id));
	return pd_encode_request(&r, out, PD_REQUEST_LEN);
}

static int send_block_map(struct peer *p, const struct opts *o, int claim)
{
	Rdmig__BlockDesc bd = RDMIG__BLOCK_DESC__INIT, *bds[1] = { &bd };
	Rdmig__BlockMapReq req = RDMIG__BLOCK_MAP_REQ__INIT;

	bd.name = (char *)o->name;
	bd.length = o->size;
	bd.page_size = 4096;
	req.n_blocks = 1;
	req.blocks = bds;
	req.chunk_shift = o->chunk_shift;
	req.state_max = o->announce == UINT64_MAX ? 0 : o->announce;
	return send_msg(p, CT_BLOCK_MAP_REQ, &req.base, claim);
}

/* A BLOCK_MAP_RESP's first base address, or 0. */
static uint64_t resp_base(const struct frame *f)
{
	const Rdmig__BlockMapResp *r = (const Rdmig__BlockMapResp *)f->m;

	return r && r->n_blocks ? r->blocks[0]->base_addr : 0;
}

/* Dials the destination as a source would (versions 1..2 unless --proto),
 * with the RTU.  Fills @acc from its ACCEPT and @req with our REQUEST. */
static int dial_source(struct peer *p, const struct opts *o, uint32_t caps, uint32_t depth,
		       uint32_t msg_max, uint32_t nrx, uint32_t rx_size,
		       uint8_t req[PD_REQUEST_LEN], struct pd_accept *acc)
{
	struct rd_err e;
	int rc;

	encode_request(o, caps, depth, msg_max, req);
	rc = dial(p, o->host, o->port, req, PD_REQUEST_LEN, nrx, rx_size, true,
		  rd_deadline(timeout_ms));
	if (rc)
		return rc;
	rc = pd_decode_accept(p->priv, p->priv_len, acc, &e);
	if (rc)
		return rd_err_set(&p->err, rc, "%s", e.msg);
	p->w.credits = acc->ctrl_depth;
	return 0;
}

/* The reason of a REJECT in p->priv, for the result line. */
static const char *reject_reason(const struct peer *p)
{
	struct pd_reject rej;
	struct rd_err e;

	if (pd_decode_reject(p->priv, p->priv_len, &rej, &e))
		return "no-reason";
	return pd_reason_str(rej.reason);
}

static void v1_mac(const struct opts *o, const uint8_t nd[V1_NONCE_LEN],
		   const uint8_t ns[V1_NONCE_LEN], uint8_t mac[AUTH_MAC_LEN])
{
	static const char label[] = "rdmig-v1 source";
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, o->key, o->key_len);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, sizeof(label));
	crypto_auth_hmacsha256_update(&st, nd, V1_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, ns, V1_NONCE_LEN);
	crypto_auth_hmacsha256_final(&st, mac);
}

/* Proves we hold the key, as an honest source of @version would. */
static int authenticate_bytes(struct peer *p, const struct opts *o, uint16_t version,
			      const uint8_t *req, size_t req_len);

static int authenticate(struct peer *p, const struct opts *o, uint16_t version,
			const uint8_t req[PD_REQUEST_LEN])
{
	return authenticate_bytes(p, o, version, req, PD_REQUEST_LEN);
}

/* The same over a REQUEST or a RESUME of @req_len bytes, as sent. */
static int authenticate_bytes(struct peer *p, const struct opts *o, uint16_t version,
			      const uint8_t *req, size_t req_len)
{
	Rdmig__AuthChallenge ch = RDMIG__AUTH_CHALLENGE__INIT;
	Rdmig__AuthResponse resp = RDMIG__AUTH_RESPONSE__INIT;
	struct auth_bind b;
	uint8_t mac[AUTH_MAC_LEN];
	struct frame f;
	int rc;

	memset(&b, 0, sizeof(b));
	randombytes_buf(b.src_nonce, sizeof(b.src_nonce));
	if (version >= 2) {
		memcpy(b.req, req, req_len);
		b.req_len = req_len;
		memcpy(b.acc, p->priv, PD_ACCEPT_LEN);
		b.src_qpn = p->qp->qp_num;
		b.dst_qpn = p->peer_qpn;
		if (auth_addr(rdma_get_local_addr(p->id), b.src_addr) ||
		    auth_addr(rdma_get_peer_addr(p->id), b.dst_addr))
			return rd_err_set(&p->err, -EAFNOSUPPORT, "neither IPv4 nor IPv6");
		auth_mac(o->key, o->key_len, AUTH_SOURCE, &b, mac);
	} else {
		const Rdmig__AuthChallenge *c;

		rc = expect(p, CT_AUTH_CHALLENGE, &f, rd_deadline(timeout_ms));
		if (rc)
			return rc;
		c = (const Rdmig__AuthChallenge *)f.m;
		if (c->nonce.len != V1_NONCE_LEN) {
			ctrl_msg_free(NULL, f.m);
			return rd_err_set(&p->err, -EPROTO, "challenge of %zu bytes", c->nonce.len);
		}
		v1_mac(o, c->nonce.data, b.src_nonce, mac);
		ctrl_msg_free(NULL, f.m);
	}
	ch.nonce.data = b.src_nonce;
	ch.nonce.len = AUTH_NONCE_LEN;
	resp.mac.data = mac;
	resp.mac.len = AUTH_MAC_LEN;
	rc = send_msg(p, CT_AUTH_CHALLENGE, &ch.base, -1);
	if (!rc)
		rc = send_msg(p, CT_AUTH_RESPONSE, &resp.base, -1);
	if (!rc)
		rc = expect(p, CT_AUTH_RESPONSE, &f, rd_deadline(timeout_ms));
	if (rc)
		return rc;
	ctrl_msg_free(NULL, f.m);
	note("authenticated (protocol %u)", version);
	return 0;
}

/* ---- harvest: pose as a destination, replay the answer --------------------------- */

/* The first two frames a source sends with AUTH: its challenge and its
 * answer, kept as raw bytes to replay. */
struct answer {
	uint8_t frame[2][TX_SIZE];
	size_t len[2];
	int n;
};

static int collect_answer(struct peer *src, struct answer *a)
{
	int64_t deadline = rd_deadline(timeout_ms);
	struct frame f;
	int rc;

	while (a->n < 2) {
		rc = next_frame(src, &f, deadline);
		if (rc)
			return rc;
		if ((f.h.type == CT_AUTH_CHALLENGE && a->n == 0) ||
		    (f.h.type == CT_AUTH_RESPONSE && a->n == 1)) {
			memcpy(a->frame[a->n], f.raw, f.len);
			a->len[a->n++] = f.len;
		} else if (f.h.type == CT_ERROR) {
			ctrl_msg_free(NULL, f.m);
			return -ECONNABORTED;
		}
		ctrl_msg_free(NULL, f.m);
	}
	return 0;
}

static int src_pre_accept(struct fab_conn *c, void *arg)
{
	struct peer *p = arg;

	return wire_init(&p->w, c->pd, c->id->qp, c->cq, 16, p->w.rx_size);
}

/* Sends a frame as the source made it, except for the credits in its
 * header: those counted the source's buffers, and a destination that sees
 * more credits than our ring holds would stop there, before the answer is
 * even checked. */
static int relay_frame(struct peer *p, const uint8_t *frame, size_t len)
{
	uint8_t buf[TX_SIZE];
	uint16_t credits = htobe16((uint16_t)p->w.to_return);

	if (len < CTRL_HDR_LEN || len > sizeof(buf))
		return -EMSGSIZE;
	memcpy(buf, frame, len);
	memcpy(buf + 6, &credits, sizeof(credits));
	p->w.to_return = 0;
	return wire_post(&p->w, buf, len);
}

/* Replays the collected answer on @dst (dialled without RTU), then asks for
 * a block map.  1 when a BLOCK_MAP_RESP with a base address came back. */
static int replay(struct peer *dst, const struct opts *o, const struct answer *a,
		  bool *dest_answered, uint64_t *base)
{
	int64_t deadline = rd_deadline(timeout_ms);
	struct frame f;
	int rc;

	rc = relay_frame(dst, a->frame[0], a->len[0]);
	if (!rc)
		rc = relay_frame(dst, a->frame[1], a->len[1]);
	if (!rc)
		rc = send_block_map(dst, o, -1);
	if (rc) {
		rd_err_set(&dst->err, rc, "cannot send on the replayed connection: %s",
			   strerror(-rc));
		return 0;
	}
	for (;;) {
		rc = next_frame(dst, &f, deadline);
		if (rc)
			return 0;
		if (f.h.type == CT_AUTH_RESPONSE)
			*dest_answered = true;
		if (f.h.type == CT_BLOCK_MAP_RESP)
			*base = resp_base(&f);
		ctrl_msg_free(NULL, f.m);
		if (*base)
			return 1;
		if (f.h.type == CT_ERROR)
			return 0;
	}
}

/* Listens on --listen as a destination would, prints the port, and takes
 * the first source's connection request: its REQUEST decoded and the
 * version to speak.  @l is the caller's to destroy. */
static int take_source(const struct opts *o, struct fab_listener **l, struct peer *src,
		       struct pd_request *req, uint16_t *version, struct rd_err *e)
{
	int rc = fab_listen(l, o->lhost, "0", e);

	if (rc)
		return rc;
	fprintf(stderr, "evil_peer: listening on port %u\n", fab_listener_port(*l));
	rc = fab_get_request(*l, rd_deadline(timeout_ms * 3), &src->fc, e);
	if (rc)
		return rd_err_set(e, rc, "no source came: %s", e->msg);
	memcpy(src->priv, src->fc->peer_priv, src->fc->peer_priv_len);
	src->priv_len = src->fc->peer_priv_len;
	if (pd_decode_request(src->priv, src->priv_len, req, e))
		return rd_err_set(e, -EPROTO, "cannot speak to this source: %s", e->msg);
	*version = choose_version(o, req->ver_min, req->ver_max);
	if (!*version)
		return rd_err_set(e, -EPROTONOSUPPORT, "cannot speak to this source: no common "
				  "version");
	return 0;
}

/* Accepts the source with @accb (@acc decoded) and waits until it is
 * established. */
static int accept_source(struct peer *src, const struct pd_request *req,
			 const struct pd_accept *acc, const uint8_t *accb, size_t acc_len)
{
	struct fab_caps caps = { .sq_depth = NTX + 2, .rq_depth = 16 };
	int rc;

	src->w.rx_size = acc->ctrl_msg_max < 65536 ? acc->ctrl_msg_max : 65536;
	rc = fab_accept(src->fc, &caps, accb, acc_len, src_pre_accept, src);
	if (!rc)
		rc = fab_wait_established(src->fc, rd_deadline(timeout_ms));
	if (!rc)
		src->w.credits = req->ctrl_depth;
	return rc;
}

static int harvest(const struct opts *o)
{
	struct peer src, dst;
	struct fab_listener *l = NULL;
	struct pd_request req;
	struct pd_accept acc;
	struct answer ans = { .n = 0 };
	struct rd_err e = { "" };
	uint8_t reqb[PD_REQUEST_LEN], accb[PD_ACCEPT_LEN] = { 0 };
	const char *variant = o->variant ? "relay" : "zero";
	char q1[1200], q2[1200];
	uint16_t version;
	size_t acc_len;
	bool dest_answered = false;
	uint64_t base = 0;
	int rc, code = 2;

	memset(&src, 0, sizeof(src));
	memset(&dst, 0, sizeof(dst));
	rc = take_source(o, &l, &src, &req, &version, &e);
	if (rc) {
		code = result(2, "variant=%s setup=\"%s\"", variant, quoted(e.msg, q1, sizeof(q1)));
		goto out;
	}
	memcpy(reqb, src.priv, PD_REQUEST_LEN);
	acc_len = version >= 2 ? PD_ACCEPT_LEN : V1_ACCEPT_LEN;
	note("a source asks for protocol %u..%u with caps 0x%x: speaking %u", req.ver_min,
	     req.ver_max, req.caps, version);
	if (o->variant) {
		/* Learn the real destination's challenge first (version 2
		 * carries it in ACCEPT; version 1 has none before ESTABLISHED,
		 * which we never let happen), with the source's own REQUEST. */
		rc = dial(&dst, o->host, o->port, reqb, PD_REQUEST_LEN, 16, req.ctrl_msg_max < 65536 ?
			  req.ctrl_msg_max : 65536, false, rd_deadline(timeout_ms));
		if (rc) {
			code = result(1, "variant=%s proto=%u answer=none dest=\"%s: %s\"", variant,
				      version, rc == -ECONNREFUSED ? "rejected" : "unreachable",
				      quoted(rc == -ECONNREFUSED ? reject_reason(&dst) : dst.err.msg,
					     q1, sizeof(q1)));
			goto out;
		}
		memcpy(accb, dst.priv, acc_len);
		note("the real destination accepted without our RTU; presenting its ACCEPT to "
		     "the source");
	} else {
		acc = (struct pd_accept){ .version = version, .ctrl_depth = 16,
					  .ctrl_msg_max = 65536,
					  .caps = req.caps & (PD_CAP_PIN_ALL | PD_CAP_ZERO_PAGES |
							      PD_CAP_VERIFY | PD_CAP_AUTH) };
		pd_encode_accept(&acc, accb, sizeof(accb)); /* nonce all zero */
	}
	if (pd_decode_accept(accb, PD_ACCEPT_LEN, &acc, &e)) {
		code = result(2, "variant=%s setup=\"%s\"", variant, quoted(e.msg, q1, sizeof(q1)));
		goto out;
	}
	rc = accept_source(&src, &req, &acc, accb, acc_len);
	if (rc) {
		code = result(2, "variant=%s setup=\"accepting the source: %s\"", variant,
			      quoted(src.fc->err->msg, q1, sizeof(q1)));
		goto out;
	}
	if (version == 1) {
		Rdmig__AuthChallenge ch = RDMIG__AUTH_CHALLENGE__INIT;
		static const uint8_t zero[V1_NONCE_LEN];

		/* Version 1's challenge frame: the one the real destination
		 * would have had before its ESTABLISHED, all zero. */
		ch.nonce.data = (uint8_t *)zero;
		ch.nonce.len = sizeof(zero);
		rc = send_msg(&src, CT_AUTH_CHALLENGE, &ch.base, -1);
		if (rc) {
			code = result(2, "variant=%s setup=\"cannot challenge the source\"", variant);
			goto out;
		}
	}
	rc = collect_answer(&src, &ans);
	if (rc) {
		code = result(1, "variant=%s proto=%u answer=none source-said=\"%s\"", variant,
			      version, quoted(src.said[0] ? src.said : "nothing (it disconnected)",
					      q1, sizeof(q1)));
		goto out;
	}
	note("collected the source's challenge and answer (%zu + %zu bytes)", ans.len[0],
	     ans.len[1]);
	if (!o->variant) {
		rc = dial(&dst, o->host, o->port, reqb, PD_REQUEST_LEN, 16,
			  req.ctrl_msg_max < 65536 ? req.ctrl_msg_max : 65536, false,
			  rd_deadline(timeout_ms));
		if (rc) {
			code = result(1, "variant=%s proto=%u answer=obtained dest=\"%s\"", variant,
				      version, quoted(rc == -ECONNREFUSED ? reject_reason(&dst) :
						      dst.err.msg, q1, sizeof(q1)));
			goto out;
		}
	}
	if (!pd_decode_accept(dst.priv, dst.priv_len, &acc, &e))
		dst.w.credits = acc.ctrl_depth;
	rc = replay(&dst, o, &ans, &dest_answered, &base);
	if (rc)
		code = result(0, "variant=%s proto=%u answer=obtained dest-answered=%s "
			      "block-map-resp=yes base=0x%" PRIx64, variant, version,
			      dest_answered ? "yes" : "no", base);
	else
		code = result(1, "variant=%s proto=%u answer=obtained dest-answered=%s "
			      "block-map-resp=no dest-said=\"%s\" source-said=\"%s\"", variant,
			      version, dest_answered ? "yes" : "no",
			      quoted(dst.said[0] ? dst.said : dst.closed ? "nothing (it hung up)" :
				     dst.err.msg, q1, sizeof(q1)),
			      quoted(src.said, q2, sizeof(q2)));
out:
	peer_close(&dst);
	peer_close(&src);
	fab_listener_destroy(l);
	return code;
}

/* ---- ring: a state ring offered before the key is proved ----------------------------- */

/* Poses as a destination that grants STATE_RING and offers its ring as the
 * first frame, before it has proved the key (it cannot: it has none).
 * Succeeded: the source took it (no ERROR naming it within the time a
 * source needs to act on a frame) and went on with its authentication;
 * refused: it answered with an ERROR about the ring or hung up. */
static int ring(const struct opts *o)
{
	Rdmig__StateRing sr = RDMIG__STATE_RING__INIT;
	struct peer src;
	struct fab_listener *l = NULL;
	struct pd_request req;
	struct pd_accept acc;
	struct rd_err e = { "" };
	uint8_t accb[PD_ACCEPT_LEN] = { 0 };
	uint64_t ring_mem[1024] = { 0 };
	int64_t deadline;
	struct frame f;
	char q1[1200];
	uint16_t version;
	int rc, code = 2;

	memset(&src, 0, sizeof(src));
	rc = take_source(o, &l, &src, &req, &version, &e);
	if (rc || version < 2) {
		code = result(2, "setup=\"%s\"", quoted(rc ? e.msg : "the source speaks version 1",
							  q1, sizeof(q1)));
		goto out;
	}
	acc = (struct pd_accept){ .version = version, .ctrl_depth = 16, .ctrl_msg_max = 65536,
				  .caps = req.caps & (PD_CAP_ZERO_PAGES | PD_CAP_AUTH |
						      PD_CAP_STATE_RING) };
	/* A fresh challenge, as a real destination's: the source answers it
	 * and then waits for our proof, which never comes. */
	randombytes_buf(acc.nonce, sizeof(acc.nonce));
	pd_encode_accept(&acc, accb, sizeof(accb));
	if (!(acc.caps & PD_CAP_STATE_RING) || accept_source(&src, &req, &acc, accb, PD_ACCEPT_LEN)) {
		code = result(2, "setup=\"the source asks no STATE_RING, or accepting it failed\"");
		goto out;
	}
	sr.addr = (uint64_t)(uintptr_t)ring_mem;
	sr.rkey = 0x1234;
	sr.size = 64u << 10;
	rc = send_msg(&src, CT_STATE_RING, &sr.base, -1);
	if (rc) {
		code = result(2, "setup=\"cannot send STATE_RING: %s\"", strerror(-rc));
		goto out;
	}
	note("offered a state ring before any authentication");
	/* A source acts on a frame within a step: a second is plenty. */
	deadline = rd_deadline(1000);
	while (!(rc = next_frame(&src, &f, deadline))) {
		note("the source sent %s", ctrl_type_name(f.h.type));
		ctrl_msg_free(NULL, f.m);
		if (f.h.type == CT_ERROR)
			break;
	}
	if (src.said[0] || rc == -ECONNRESET)
		code = result(1, "source-said=\"%s\"", quoted(src.said[0] ? src.said :
				"nothing (it hung up)", q1, sizeof(q1)));
	else
		code = result(0, "source-said=nothing frames=%" PRIu64, src.w.frames_in);
out:
	peer_close(&src);
	fab_listener_destroy(l);
	return code;
}

/* ---- hold: handshakes that never end -------------------------------------------------- */

struct held {
	struct peer p;
	int64_t t0, end;        /* connected; dropped (0: still open) */
	bool busy, failed;      /* refused at connect */
	char why[200];
};

static int hold(const struct opts *o)
{
	static struct held h[HOLD_MAX];
	uint8_t req[PD_REQUEST_LEN];
	struct pd_accept acc;
	char drops[HOLD_MAX * 12] = "", q[1200];
	int64_t start, last_ka = 0, t_end;
	int i, rc, open = 0, busy = 0, failed = 0, held_on = 0;
	int64_t max_drop = 0;
	size_t dl = 0;

	if (o->n < 1 || o->n > HOLD_MAX)
		return result(2, "n=%d (1..%d)", o->n, HOLD_MAX);
	start = rd_now_ms();
	t_end = start + (int64_t)o->seconds * 1000;
	for (i = 0; i < o->n; i++) {
		rc = dial_source(&h[i].p, o, PD_CAP_AUTH, 8, 4096, 8, 4096, req, &acc);
		h[i].t0 = rd_now_ms();
		if (rc == -ECONNREFUSED) {
			h[i].busy = true;
			snprintf(h[i].why, sizeof(h[i].why), "%s", reject_reason(&h[i].p));
			note("connection %d: refused at connect (%s)", i + 1, h[i].why);
			busy++;
		} else if (rc) {
			h[i].failed = true;
			snprintf(h[i].why, sizeof(h[i].why), "%s", h[i].p.err.msg);
			note("connection %d: failed: %s", i + 1, h[i].why);
			failed++;
		} else {
			note("connection %d: open (protocol %u), never authenticating", i + 1,
			     acc.version);
			open++;
		}
	}
	note("all connections made: %d open, %d refused busy, %d failed", open, busy, failed);
	while (rd_now_ms() < t_end) {
		int64_t now = rd_now_ms();
		bool ka = now - last_ka >= KEEPALIVE_MS, any = false;

		for (i = 0; i < o->n; i++) {
			struct held *c = &h[i];
			struct frame f;

			if (c->busy || c->failed || c->end)
				continue;
			while ((rc = pump(&c->p, &f)) > 0) {
				if (f.h.type == CT_ERROR)
					snprintf(c->why, sizeof(c->why), "%s", c->p.said);
				ctrl_msg_free(NULL, f.m);
				if (f.h.type == CT_ERROR)
					break;
			}
			if (rc < 0 || c->p.said[0]) {
				c->end = rd_now_ms();
				note("connection %d: dropped after %" PRId64 " ms: %s", i + 1,
				     c->end - c->t0, c->why[0] ? c->why : "disconnected");
				continue;
			}
			any = true;
			/* A keepalive only with a credit to spare, as rdmig(7)
			 * asks: the point is to look alive, not to break. */
			if (ka && c->p.w.credits >= 2)
				send_msg(&c->p, CT_KEEPALIVE, NULL, -1);
		}
		if (ka)
			last_ka = now;
		if (!any)
			break;
		usleep(2000);
	}
	for (i = 0; i < o->n; i++) {
		if (h[i].busy || h[i].failed)
			continue;
		if (!h[i].end) {
			held_on++;
			note("connection %d: still open after %d s", i + 1, o->seconds);
			dl += (size_t)snprintf(drops + dl, sizeof(drops) - dl, "%sheld", dl ? "," : "");
		} else {
			int64_t d = h[i].end - h[i].t0;

			max_drop = d > max_drop ? d : max_drop;
			dl += (size_t)snprintf(drops + dl, sizeof(drops) - dl, "%s%" PRId64,
					       dl ? "," : "", d);
		}
		peer_close(&h[i].p);
	}
	for (i = 0; i < o->n; i++)
		if (h[i].busy || h[i].failed)
			peer_close(&h[i].p);
	/* The destination's words: a drop's reason first, else a refusal's. */
	for (i = 0; i < o->n && !(h[i].end && h[i].why[0]); i++)
		;
	if (i == o->n)
		for (i = 0; i < o->n && !h[i].why[0]; i++)
			;
	return result(held_on ? 0 : 1, "n=%d open=%d busy=%d failed=%d held=%d drop-ms=%s "
		      "max-drop-ms=%" PRId64 " first-reason=\"%s\"", o->n, open, busy, failed,
		      held_on, drops[0] ? drops : "-", max_drop,
		      quoted(i < o->n ? h[i].why : "", q, sizeof(q)));
}

/* ---- rings: the largest ring the protocol allows ---------------------------------- */

static int rings(const struct opts *o)
{
	struct peer p;
	uint8_t req[PD_REQUEST_LEN];
	struct pd_accept acc;
	char q[1200];
	int64_t t0, last_ka = 0;
	int rc, sent = 0;

	memset(&p, 0, sizeof(p));
	/* We announce depth x msg_max but post small buffers: only the
	 * destination's side of the bargain is being tested. */
	rc = dial_source(&p, o, PD_CAP_AUTH, o->depth, (uint32_t)o->msg_max,
			 o->depth < NRX_MAX ? o->depth : NRX_MAX, 4096, req, &acc);
	if (rc) {
		peer_close(&p);
		return result(1, "depth=%u msg-max=%" PRIu64 " dest=\"%s\"", o->depth, o->msg_max,
			      quoted(rc == -ECONNREFUSED ? reject_reason(&p) : p.err.msg, q,
				     sizeof(q)));
	}
	note("ring of %u x %" PRIu64 " bytes accepted (protocol %u; the destination's is %u x "
	     "%u)", o->depth, o->msg_max, acc.version, acc.ctrl_depth, acc.ctrl_msg_max);
	t0 = rd_now_ms();
	while (rd_now_ms() - t0 < o->hold_ms) {
		struct frame f;
		int64_t now = rd_now_ms();

		while ((rc = pump(&p, &f)) > 0)
			ctrl_msg_free(NULL, f.m);
		if (rc < 0 || p.said[0])
			break;
		/* A burst first: the destination returns credits (a frame from
		 * its send ring) once half its receive ring was re-posted. */
		while (p.w.credits >= 2 && (sent < (int)acc.ctrl_depth / 2 + 2 ||
					    now - last_ka >= KEEPALIVE_MS)) {
			if (send_msg(&p, CT_KEEPALIVE, NULL, -1))
				break;
			sent++;
			last_ka = now;
		}
		usleep(2000);
	}
	if (rd_now_ms() - t0 < o->hold_ms) {
		rc = result(1, "depth=%u msg-max=%" PRIu64 " keepalives=%d frames-from-dest=%" PRIu64
			    " dropped-after-ms=%" PRId64 " dest-said=\"%s\"", o->depth, o->msg_max,
			    sent, p.w.frames_in, rd_now_ms() - t0,
			    quoted(p.said[0] ? p.said : "nothing", q, sizeof(q)));
	} else {
		rc = result(p.w.frames_in ? 0 : 1, "depth=%u msg-max=%" PRIu64 " keepalives=%d "
			    "frames-from-dest=%" PRIu64 " held-ms=%d", o->depth, o->msg_max, sent,
			    p.w.frames_in, o->hold_ms);
	}
	peer_close(&p);
	return rc;
}

/* ---- bigmap: an authenticated source asking too much ------------------------------ */

static int bigmap(const struct opts *o)
{
	struct peer p;
	uint8_t req[PD_REQUEST_LEN];
	struct pd_accept acc;
	struct frame f;
	char q[1200];
	uint64_t base;
	int rc;

	memset(&p, 0, sizeof(p));
	rc = dial_source(&p, o, PD_CAP_AUTH | (o->pin_all ? PD_CAP_PIN_ALL : 0), 8, 65536, 8,
			 65536, req, &acc);
	if (!rc && (acc.caps & PD_CAP_AUTH))
		rc = authenticate(&p, o, acc.version, req);
	if (!rc)
		rc = send_block_map(&p, o, -1);
	if (!rc)
		rc = expect(&p, CT_BLOCK_MAP_RESP, &f, rd_deadline(timeout_ms));
	if (rc) {
		rc = result(1, "size=%" PRIu64 " pin-all=%s block-map-resp=no dest-said=\"%s\"",
			    o->size, o->pin_all ? "yes" : "no",
			    quoted(p.said[0] ? p.said : p.err.msg[0] ? p.err.msg : "nothing", q,
				   sizeof(q)));
		peer_close(&p);
		return rc;
	}
	base = resp_base(&f);
	ctrl_msg_free(NULL, f.m);
	peer_close(&p);
	return result(base ? 0 : 1, "size=%" PRIu64 " pin-all=%s block-map-resp=yes base=0x%"
		      PRIx64, o->size, o->pin_all ? "yes" : "no", base);
}

/* ---- pages: data pages where the block has none ------------------------------------- */

static const char *const pages_variants[] = { "outside", "torn", "index", "honest" };

static int pages(const struct opts *o)
{
	static uint8_t data[8192];
	uint32_t blk = 0;
	uint64_t off = 0, len = 4096;
	Rdmig__Pages m = RDMIG__PAGES__INIT;
	struct peer p;
	uint8_t req[PD_REQUEST_LEN];
	struct pd_accept acc;
	struct frame f;
	char q[1200];
	int64_t deadline;
	int rc;

	memset(data, 0xaa, sizeof(data));
	if (o->variant == 0) {          /* the last page and one past the end */
		off = o->size - 4096;
		len = 8192;
	} else if (o->variant == 1) {   /* straddles a page boundary */
		off = 100;
	} else if (o->variant == 2) {   /* a block it never announced */
		blk = 5;
	}
	memset(&p, 0, sizeof(p));
	rc = dial_source(&p, o, PD_CAP_PAGES, 8, 65536, 8, 65536, req, &acc);
	if (!rc && !(acc.caps & PD_CAP_PAGES))
		rc = rd_err_set(&p.err, -EPROTO, "PAGES not granted");
	if (!rc)
		rc = send_block_map(&p, o, -1);
	if (!rc)
		rc = expect(&p, CT_BLOCK_MAP_RESP, &f, rd_deadline(timeout_ms));
	if (rc)
		goto refused;
	ctrl_msg_free(NULL, f.m);
	m.n_block = m.n_offset = m.n_length = 1;
	m.block = &blk;
	m.offset = &off;
	m.length = &len;
	m.data.data = data;
	m.data.len = len;
	rc = send_msg(&p, CT_PAGES, &m.base, -1);
	if (rc)
		goto refused;
	/* Taken, unless an ERROR or a disconnect comes within a second. */
	deadline = rd_deadline(1000);
	rc = next_frame(&p, &f, deadline);
	if (!rc)
		ctrl_msg_free(NULL, f.m);
	if (p.said[0] || p.closed)
		goto refused;
	peer_close(&p);
	return result(0, "variant=%s run=%u:%" PRIu64 "+%" PRIu64 " taken=yes",
		      pages_variants[o->variant], blk, off, len);
refused:
	rc = result(1, "variant=%s run=%u:%" PRIu64 "+%" PRIu64 " taken=no dest-said=\"%s\"",
		    pages_variants[o->variant], blk, off, len,
		    quoted(p.said[0] ? p.said : p.err.msg[0] ? p.err.msg : "nothing", q,
			   sizeof(q)));
	peer_close(&p);
	return rc;
}

/* ---- vanish: complete, then never take the confirmation ---------------------------- */

/* Waits for @type; a credit or keepalive in between gets its buffer back, so
 * exactly as many receives stay posted as before. */
static int expect_reposting(struct peer *p, unsigned type, struct frame *f)
{
	int64_t deadline = rd_deadline(timeout_ms);
	int rc;

	for (;;) {
		rc = next_frame(p, f, deadline);
		if (rc)
			return rc;
		if (f->h.type == type)
			return 0;
		ctrl_msg_free(NULL, f->m);
		if (f->h.type == CT_ERROR)
			return -ECONNABORTED;
		if (!post_rx(&p->w, f->slot))
			p->w.to_return++;
	}
}

static int vanish(const struct opts *o)
{
	Rdmig__IterEnd ie = RDMIG__ITER_END__INIT;
	Rdmig__Complete c = RDMIG__COMPLETE__INIT;
	struct peer p;
	uint8_t req[PD_REQUEST_LEN];
	struct pd_accept acc;
	struct frame f;
	char q[1200];
	int64_t t_gone, deadline;
	int rc;

	memset(&p, 0, sizeof(p));
	/* Depth 2 announced, one buffer posted: after ITER_ACK none is, so
	 * the COMPLETE_ACK finds no receive (RNR) even before the QP goes. */
	rc = dial_source(&p, o, 0, 2, 4096, 1, 4096, req, &acc);
	p.w.repost = false;
	if (!rc)
		rc = send_block_map(&p, o, -1);
	if (!rc)
		rc = expect_reposting(&p, CT_BLOCK_MAP_RESP, &f);
	if (rc)
		goto refused;
	ctrl_msg_free(NULL, f.m);
	rc = post_rx(&p.w, f.slot);
	if (rc)
		goto refused;
	p.w.to_return++;
	ie.iteration = 1;
	rc = send_msg(&p, CT_ITER_END, &ie.base, -1);
	if (!rc)
		rc = expect_reposting(&p, CT_ITER_ACK, &f);
	if (rc)
		goto refused;
	ctrl_msg_free(NULL, f.m);
	c.iteration = 1;
	/* One credit claimed that was never re-posted, so the destination
	 * has the two it needs to answer. */
	rc = send_msg(&p, CT_COMPLETE, &c.base, 1);
	if (rc)
		goto refused;
	drain_tx(&p, rd_deadline(timeout_ms));
	if (p.closed || !tx_idle(&p.w))
		goto refused;
	/* Gone without a DREQ: the cm_id stays, the QP does not. */
	ibv_destroy_qp(p.qp);
	p.qp = NULL;
	t_gone = rd_now_ms();
	note("COMPLETE delivered, QP destroyed; waiting for the destination to give up");
	deadline = rd_deadline(timeout_ms * 3);
	while (!p.closed && !rd_expired(deadline)) {
		cm_check(&p);
		usleep(5000);
	}
	rc = result(0, "complete=delivered qp=destroyed dest-gave-up-ms=%" PRId64,
		    p.closed ? rd_now_ms() - t_gone : (int64_t)-1);
	peer_close(&p);
	return rc;
refused:
	rc = result(1, "complete=not-delivered dest-said=\"%s\"",
		    quoted(p.said[0] ? p.said : p.err.msg[0] ? p.err.msg : "nothing", q,
			   sizeof(q)));
	peer_close(&p);
	return rc;
}

/* ---- flood: a completion queue that never empties --------------------------------- */

/* Our ring: room for the destination's ITER_ACKs, CREDITs and keepalives
 * while FLOOD_AHEAD iterations are unacknowledged. */
#define FLOOD_DEPTH 32
#define FLOOD_AHEAD 8
/* Ranges in one ZERO_RANGES: the block again and again, up to --zero-bytes. */
#define FLOOD_RANGES_MAX 256

/* An authenticated source that announces one block and then sends
 * ZERO_RANGES covering --zero-bytes (by default the 1 GiB a message may
 * cover, the same block over and over) and ITER_END, alternately, as fast
 * as its credits come back, for --seconds.  Each ITER_ACK hands back the
 * credits for the next pair, so a destination that handles completions
 * until its queue is empty never gets there. */
/* Connects as a keyed source asking @caps (@need must be granted) with
 * control messages up to @msg_max, proves the key and has a one-block map
 * answered: 0, or the "started=no" result line printed and its exit code
 * returned, the peer closed.  flood's and state's start. */
static int admitted_source(struct peer *p, const struct opts *o, uint32_t caps, uint32_t need,
			   uint32_t msg_max, struct pd_accept *acc)
{
	uint8_t req[PD_REQUEST_LEN];
	struct frame f;
	char q[1200];
	int rc = dial_source(p, o, caps, FLOOD_DEPTH, msg_max, FLOOD_DEPTH, 4096, req, acc);

	if (!rc && (acc->caps & need) != need)
		rc = rd_err_set(&p->err, -EPROTO, "capabilities 0x%x not granted",
				need & ~acc->caps);
	if (!rc && (acc->caps & PD_CAP_AUTH))
		rc = authenticate(p, o, acc->version, req);
	if (!rc)
		rc = send_block_map(p, o, -1);
	if (!rc)
		rc = expect(p, CT_BLOCK_MAP_RESP, &f, rd_deadline(timeout_ms));
	if (!rc) {
		ctrl_msg_free(NULL, f.m);
		return 0;
	}
	rc = result(1, "started=no dest-said=\"%s\"", quoted(p->said[0] ? p->said :
		    p->err.msg[0] ? p->err.msg : "nothing", q, sizeof(q)));
	peer_close(p);
	return rc;
}

static int flood(const struct opts *o)
{
	static uint32_t blk[FLOOD_RANGES_MAX];
	static uint64_t off[FLOOD_RANGES_MAX], len[FLOOD_RANGES_MAX];
	Rdmig__ZeroRanges zr = RDMIG__ZERO_RANGES__INIT;
	Rdmig__IterEnd ie = RDMIG__ITER_END__INIT;
	uint64_t nzr = 0, nie = 0, acks = 0, covered = 0;
	int64_t t0 = 0, t_end, dropped = -1;
	struct pd_accept acc;
	struct peer p;
	struct frame f;
	char q[1200];
	size_t n = 0;
	bool sent;
	int rc;

	while (n < FLOOD_RANGES_MAX && covered + o->size <= o->zero_bytes) {
		len[n++] = o->size;
		covered += o->size;
	}
	if (!n)
		return result(2, "zero-bytes=%" PRIu64 " is less than the block (%" PRIu64 ")",
			      o->zero_bytes, o->size);
	zr.n_block = zr.n_offset = zr.n_length = n;
	zr.block = blk;
	zr.offset = off;
	zr.length = len;
	memset(&p, 0, sizeof(p));
	rc = admitted_source(&p, o, PD_CAP_AUTH | PD_CAP_ZERO_PAGES, PD_CAP_ZERO_PAGES, 4096, &acc);
	if (rc)
		return rc;
	note("flooding: ZERO_RANGES of %zu x %" PRIu64 " bytes and ITER_END, for %d s", n,
	     o->size, o->seconds);
	t0 = rd_now_ms();
	t_end = t0 + (int64_t)o->seconds * 1000;
	while (rd_now_ms() < t_end) {
		while ((rc = pump(&p, &f)) > 0) {
			acks += f.h.type == CT_ITER_ACK;
			/* For a test to wait on: the flood is being served. */
			if (f.h.type == CT_ITER_ACK && acks == 1)
				note("served: the first ITER_ACK after %" PRId64 " ms",
				     rd_now_ms() - t0);
			ctrl_msg_free(NULL, f.m);
			if (f.h.type == CT_ERROR)
				break;
		}
		if (rc < 0 || p.said[0] || p.closed) {
			dropped = rd_now_ms();
			break;
		}
		/* Within the credits, as an honest source would: the point is
		 * to be served, not to overrun the ring. */
		sent = false;
		while (p.w.credits >= 2 && nie - acks < FLOOD_AHEAD) {
			ie.iteration = (uint32_t)nie + 1;
			if (nzr == nie ? send_msg(&p, CT_ZERO_RANGES, &zr.base, -1) :
			    send_msg(&p, CT_ITER_END, &ie.base, -1))
				break; /* every send slot busy: pump first */
			if (nzr == nie)
				nzr++;
			else
				nie++;
			sent = true;
		}
		if (!sent)
			usleep(200);
	}
	if (dropped >= 0)
		note("the destination ended it after %" PRId64 " ms: %s", dropped - t0,
		     p.said[0] ? p.said : "disconnected");
	rc = result(dropped < 0 ? 0 : 1, "seconds=%d zero-ranges=%" PRIu64 " iter-ends=%" PRIu64
		    " iter-acks=%" PRIu64 " zero-bytes-per-msg=%" PRIu64 " flooded-ms=%" PRId64
		    " dropped-at-ms=%" PRId64 " dest-said=\"%s\"", o->seconds, nzr, nie, acks,
		    covered, (dropped < 0 ? rd_now_ms() : dropped) - t0, dropped,
		    quoted(p.said[0] ? p.said : dropped < 0 ? "nothing" : "disconnected", q,
			   sizeof(q)));
	peer_close(&p);
	return rc;
}

/* ---- state: more device state than announced ------------------------------------------ */

/* Bytes of device state in one STATE message: it must fit our send
 * buffers. */
#define STATE_PIECE 12288

/* A keyed source with a one-page image that announces --announce bytes of
 * device state (or says nothing) and sends --state-bytes in STATE
 * messages, within the credits.  Succeeded: all of it went and the
 * destination said nothing within a second after; refused: it ended the
 * migration (the result line says after how many bytes, and why). */
static int state(const struct opts *o)
{
	static uint8_t piece[STATE_PIECE];
	Rdmig__State st = RDMIG__STATE__INIT;
	uint32_t caps = PD_CAP_AUTH | (o->announce != UINT64_MAX ? PD_CAP_STATE_BOUND : 0);
	uint64_t sent = 0;
	struct pd_accept acc;
	struct peer p;
	struct frame f;
	int64_t quiet = 0, last_ka = 0;
	char q[1200], said[32];
	int rc;

	memset(piece, 0x5e, sizeof(piece));
	memset(&p, 0, sizeof(p));
	rc = admitted_source(&p, o, caps, 0, 65536, &acc);
	if (rc)
		return rc;
	note("admitted; bound %s granted: sending %" PRIu64 " bytes of device state",
	     (acc.caps & PD_CAP_STATE_BOUND) ? "" : "not", o->state_bytes);
	st.data.data = piece;
	for (;;) {
		while ((rc = pump(&p, &f)) > 0)
			ctrl_msg_free(NULL, f.m);
		if (rc < 0 || p.said[0] || p.closed)
			break;
		if (sent == o->state_bytes) {
			/* Then quiet: a second, or --hold-ms with keepalives (the
			 * state keeps its room taken, the migration never ends). */
			if (!quiet) {
				quiet = rd_deadline(o->hold_state_ms ? o->hold_state_ms : 1000);
				note("sent it all; holding on");
			}
			if (rd_expired(quiet))
				break;
			if (rd_now_ms() - last_ka >= KEEPALIVE_MS && p.w.credits >= 1 &&
			    !send_msg(&p, CT_KEEPALIVE, NULL, -1))
				last_ka = rd_now_ms();
			usleep(1000);
			continue;
		}
		st.data.len = o->state_bytes - sent < sizeof(piece) ? o->state_bytes - sent :
			      sizeof(piece);
		if (p.w.credits < 2 || send_msg(&p, CT_STATE, &st.base, -1)) {
			usleep(200);
			continue;
		}
		sent += st.data.len;
	}
	snprintf(said, sizeof(said), "%" PRIu64, o->announce);
	rc = result(p.said[0] || p.closed ? 1 : 0, "announced=%s sent=%" PRIu64 " dest-said=\"%s\"",
		    o->announce == UINT64_MAX ? "nothing" : said, sent,
		    quoted(p.said[0] ? p.said : p.closed ? "disconnected" : "nothing", q, sizeof(q)));
	peer_close(&p);
	return rc;
}

/* ---- pcsource: post-copy keys for memory the source does not hold --------------------- */

static const char *const pcsource_variants[] = { "unregistered", "revoke", "honest" };

#define PC_PIECE_SHIFT 24

/* Opens post-copy channel @idx of @all to the destination's channel
 * port, as a source does: the token as session id, POSTCOPY, our READ
 * resources offered, on @pd (the memory's). */
static int pc_channel(struct peer *c, const struct opts *o, const char *port, uint64_t token,
		      unsigned idx, unsigned all, struct ibv_pd *pd)
{
	struct pd_request r = { .ver_min = 2, .ver_max = 2, .caps = PD_CAP_POSTCOPY,
				.ctrl_depth = PD_DEPTH_MIN, .ctrl_msg_max = PD_MSG_MAX_MIN,
				.session_id = token, .channel = (uint16_t)idx,
				.channels = (uint16_t)all };
	uint8_t req[PD_REQUEST_LEN];

	memset(c, 0, sizeof(*c));
	c->reads = true;
	c->share_pd = pd;
	pd_encode_request(&r, req, sizeof(req));
	return dial(c, o->host, port, req, sizeof(req), 1, 4096, true, rd_deadline(timeout_ms));
}

/* Keys for every piece of our one block, then the whole block as the set:
 * post-copy begins at the destination. */
/* @claim: the credits the two messages hand back (-1: all that are due). */
static int pc_switch(struct peer *p, const struct opts *o, uint8_t *mem, uint32_t rkey,
		     int claim)
{
	Rdmig__PostcopyKeys k = RDMIG__POSTCOPY_KEYS__INIT;
	Rdmig__PostcopyRanges r = RDMIG__POSTCOPY_RANGES__INIT;
	uint64_t n = (o->size + (1u << PC_PIECE_SHIFT) - 1) >> PC_PIECE_SHIFT, i;
	static uint32_t kb[64], kr[64];
	static uint64_t kp[64], ka[64];
	uint32_t rb = 0;
	uint64_t rf = 0, rc = o->size / 4096;
	int rc2;

	if (n > 64)
		return rd_err_set(&p->err, -E2BIG, "--size too large for pcsource");
	for (i = 0; i < n; i++) {
		kb[i] = 0;
		kp[i] = i;
		ka[i] = (uintptr_t)mem + (i << PC_PIECE_SHIFT);
		kr[i] = rkey;
	}
	k.piece_shift = PC_PIECE_SHIFT;
	k.n_block = k.n_piece = k.n_addr = k.n_rkey = n;
	k.block = kb; k.piece = kp; k.addr = ka; k.rkey = kr;
	r.n_block = r.n_first = r.n_count = 1;
	r.block = &rb; r.first = &rf; r.count = &rc;
	r.last = 1;
	rc2 = send_msg(p, CT_POSTCOPY_KEYS, &k.base, claim);
	return rc2 ? rc2 : send_msg(p, CT_POSTCOPY_RANGES, &r.base, claim);
}

/* A source that switches to post-copy with keys for memory it never
 * registered (unregistered), or registered and takes back once the
 * destination's guest runs (revoke), or keeps (honest: the control, which
 * completes).  Succeeded: the destination said POSTCOPY_DONE for pages it
 * could not have read; refused: it ended the migration (its words in
 * dest-said), as it must. */
static int pcsource(const struct opts *o)
{
	const char *variant = pcsource_variants[o->variant];
	Rdmig__Complete c = RDMIG__COMPLETE__INIT;
	struct peer p, ch[2];
	struct pd_accept acc;
	struct frame f;
	struct ibv_mr *mr = NULL;
	uint8_t req[PD_REQUEST_LEN], *mem = NULL;
	char q[1200], port[8];
	uint64_t token = 0, i, done_pages = 0;
	int64_t t_switch = 0, deadline, last_ka = 0;
	bool revoked = false, done = false;
	int rc, code = 2;

	memset(&p, 0, sizeof(p));
	memset(ch, 0, sizeof(ch));
	rc = dial_source(&p, o, PD_CAP_POSTCOPY, FLOOD_DEPTH, 65536, FLOOD_DEPTH, 4096, req, &acc);
	if (!rc && !(acc.caps & PD_CAP_POSTCOPY))
		rc = rd_err_set(&p.err, -EPROTO, "post-copy not granted");
	if (!rc)
		rc = send_block_map(&p, o, -1);
	if (!rc)
		rc = expect(&p, CT_BLOCK_MAP_RESP, &f, rd_deadline(timeout_ms));
	if (!rc) {
		const Rdmig__BlockMapResp *m = (const Rdmig__BlockMapResp *)f.m;

		if (m->postcopy_channels != 2)
			rc = rd_err_set(&p.err, -EPROTO, "no post-copy channels offered");
		snprintf(port, sizeof(port), "%u", m->channel_port);
		token = m->channel_token;
		ctrl_msg_free(NULL, f.m);
	}
	if (rc) {
		code = result(2, "variant=%s setup=\"%s\"", variant, quoted(p.said[0] ? p.said :
			      p.err.msg, q, sizeof(q)));
		goto out;
	}
	/* Our memory: a pattern a page the destination could check. */
	if (posix_memalign((void **)&mem, 4096, o->size)) {
		code = result(2, "variant=%s setup=\"out of memory\"", variant);
		goto out;
	}
	for (i = 0; i < o->size; i++)
		mem[i] = (uint8_t)(i / 4096 * 7 + 0x5a);
	for (i = 0; !rc && i < 2; i++) {
		rc = pc_channel(&ch[i], o, port, token, 1 + (unsigned)i, 3, i ? ch[0].pd : NULL);
		if (!rc && !i)
			ch[0].share_pd = NULL; /* the first channel owns the PD */
	}
	if (!rc && o->variant != 0) {
		mr = ibv_reg_mr(ch[0].pd, mem, o->size, IBV_ACCESS_LOCAL_WRITE |
				IBV_ACCESS_REMOTE_READ);
		if (!mr)
			rc = rd_err_set(&p.err, -errno, "ibv_reg_mr: %s", strerror(errno));
	}
	/* Unregistered: a key that names nothing of ours. */
	if (!rc)
		rc = pc_switch(&p, o, mem, mr ? mr->rkey : 0x00abcd00u, -1);
	if (rc) {
		code = result(2, "variant=%s setup=\"%s\"", variant, quoted(p.err.msg[0] ? p.err.msg :
			      ch[0].err.msg[0] ? ch[0].err.msg : ch[1].err.msg, q, sizeof(q)));
		goto out;
	}
	t_switch = rd_now_ms();
	note("switched with %s keys", o->variant == 0 ? "unregistered" : "real");
	deadline = rd_deadline(timeout_ms * 3);
	while (!rd_expired(deadline)) {
		while ((rc = pump(&p, &f)) > 0) {
			if (f.h.type == CT_POSTCOPY_DONE) {
				done = true;
				done_pages = ((const Rdmig__PostcopyDone *)f.m)->pages;
			}
			ctrl_msg_free(NULL, f.m);
		}
		if (rc < 0 || p.said[0] || p.closed || done)
			break;
		if (o->variant == 1 && !revoked && rd_now_ms() - t_switch >= o->revoke_ms) {
			ibv_dereg_mr(mr);
			mr = NULL;
			revoked = true;
			note("took the memory back %d ms after the switch", o->revoke_ms);
		}
		if (rd_now_ms() - last_ka >= KEEPALIVE_MS && p.w.credits >= 2) {
			send_msg(&p, CT_KEEPALIVE, NULL, -1);
			last_ka = rd_now_ms();
		}
		usleep(1000);
	}
	if (done) {
		/* Complete, as an honest source would. */
		rc = send_msg(&p, CT_COMPLETE, &c.base, -1);
		if (!rc)
			rc = expect(&p, CT_COMPLETE_ACK, &f, rd_deadline(timeout_ms));
		if (!rc)
			ctrl_msg_free(NULL, f.m);
		code = result(0, "variant=%s revoked=%s done-pages=%" PRIu64 " completed=%s", variant,
			      revoked ? "yes" : "no", done_pages, rc ? "no" : "yes");
	} else {
		code = result(1, "variant=%s revoked=%s dest-gave-up-ms=%" PRId64 " dest-said=\"%s\"",
			      variant, revoked ? "yes" : "no", rd_now_ms() - t_switch,
			      quoted(p.said[0] ? p.said : p.closed ? "nothing (it hung up)" :
				     "nothing", q, sizeof(q)));
	}
out:
	if (mr)
		ibv_dereg_mr(mr);
	peer_close(&ch[1]);
	peer_close(&ch[0]);
	peer_close(&p);
	free(mem);
	return code;
}

/* ---- pcdest: a destination that reads outside what it was given ------------------------ */

static const char *const pcdest_variants[] = { "outside", "inside", "resume-error",
					       "error-old", "error-never-ran" };

/* The post-copy channels' side of a fake destination: accepted beside the
 * control connection, on its PD, with a CQ of our own for our READs. */
struct pc_reader {
	struct fab_listener *l;
	struct fab_conn *conn[2];
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t buf[8192] __attribute__((aligned(4096)));
};

static int pc_accept_channels(struct pc_reader *r, struct peer *src, struct rd_err *e)
{
	struct fab_caps caps = { .sq_depth = 4, .rq_depth = 1, .pd = src->fc->pd, .reads = true };
	struct pd_accept acc = { .version = 2, .caps = PD_CAP_POSTCOPY,
				 .ctrl_depth = PD_DEPTH_MIN, .ctrl_msg_max = PD_MSG_MAX_MIN };
	uint8_t priv[PD_ACCEPT_LEN];
	int i, rc;

	r->cq = ibv_create_cq(src->fc->id->verbs, 8, NULL, NULL, 0);
	if (!r->cq)
		return rd_err_set(e, -errno, "ibv_create_cq: %s", strerror(errno));
	caps.cq = r->cq;
	for (i = 0; i < 2; i++) {
		rc = fab_get_request(r->l, rd_deadline(timeout_ms), &r->conn[i], e);
		if (!rc)
			rc = fab_accept(r->conn[i], &caps, priv, pd_encode_accept(&acc, priv,
					sizeof(priv)), NULL, NULL);
		if (!rc)
			rc = fab_wait_established(r->conn[i], rd_deadline(timeout_ms));
		if (rc)
			return rd_err_set(e, rc, "post-copy channel %d: %s", i, r->conn[i] ?
					  r->conn[i]->err->msg : e->msg);
	}
	r->mr = ibv_reg_mr(src->fc->pd, r->buf, sizeof(r->buf), IBV_ACCESS_LOCAL_WRITE);
	return r->mr ? 0 : rd_err_set(e, -errno, "ibv_reg_mr: %s", strerror(errno));
}

/* One READ of 4096 bytes at @addr under @rkey on channel 0: its status. */
static enum ibv_wc_status pc_read(struct pc_reader *r, uint64_t addr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)r->buf, .length = 4096, .lkey = r->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	int64_t deadline = rd_deadline(timeout_ms);
	int n;

	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(fab_qp(r->conn[0]), &wr, &bad))
		return IBV_WC_GENERAL_ERR;
	while (!(n = ibv_poll_cq(r->cq, 1, &wc)) && !rd_expired(deadline))
		usleep(100);
	return n == 1 ? wc.status : IBV_WC_RESP_TIMEOUT_ERR;
}

static void pc_reader_close(struct pc_reader *r)
{
	int i;

	if (r->mr)
		ibv_dereg_mr(r->mr);
	for (i = 0; i < 2; i++) {
		fab_disconnect(r->conn[i]);
		fab_conn_destroy(r->conn[i]);
	}
	if (r->cq)
		ibv_destroy_cq(r->cq);
	fab_listener_destroy(r->l);
}

/* resume-error, once the source switched: our link broken, the source's
 * RESUME (with @tok) is accepted as @first was and answered with an ERROR.
 * That ends this try, not the migration: a source that comes back with
 * another RESUME within 10 s paused again (retried=yes, status 1); one
 * that does not gave up on our word (status 0). */
static int pcdest_resume_error(struct fab_listener *l, const struct pd_accept *first,
			       const uint8_t *tok)
{
	Rdmig__Error er = RDMIG__ERROR__INIT;
	uint8_t accb[PD_ACCEPT_LEN] = { 0 };
	struct fab_conn *again = NULL;
	struct rd_err e = { "" };
	struct pd_request req;
	struct peer res;
	char q[1200];
	int rc;

	memset(&res, 0, sizeof(res));
	rc = fab_get_request(l, rd_deadline(timeout_ms), &res.fc, &e);
	if (!rc && pd_decode_request(res.fc->peer_priv, res.fc->peer_priv_len, &req, &e))
		rc = -EPROTO;
	if (!rc && (!req.resume || memcmp(req.token, tok, PD_TOKEN_LEN)))
		rc = rd_err_set(&e, -EPROTO, "the source came back without a RESUME of our token");
	if (!rc) {
		pd_encode_accept(first, accb, sizeof(accb));
		rc = accept_source(&res, &req, first, accb, PD_ACCEPT_LEN);
	}
	er.code = -EIO;
	er.message = (char *)"this resume is refused (a test's destination)";
	if (!rc)
		rc = send_msg(&res, CT_ERROR, &er.base, -1);
	if (rc) {
		peer_close(&res);
		return result(2, "variant=resume-error setup=\"%s\"", quoted(e.msg[0] ? e.msg :
			      res.err.msg, q, sizeof(q)));
	}
	note("answered the source's RESUME with ERROR");
	/* Time for the ERROR to land before our disconnect. */
	usleep(200000);
	peer_close(&res);
	rc = fab_get_request(l, rd_deadline(10000), &again, &e);
	fab_conn_destroy(again);
	return result(rc ? 0 : 1, "variant=resume-error retried=%s", rc ? "no" : "yes");
}

/* Poses as a destination that grants post-copy, takes a source's block
 * map, state and switch, and then RDMA READs a page past the end of the
 * last piece it was told of (outside) or the first page (inside).
 * Refused: the source's NIC refused the READ (nic=); source-gone-ms says
 * when the source ended the migration after it. */
static int pcdest(const struct opts *o)
{
	const char *variant = pcdest_variants[o->variant];
	static struct pc_reader r;
	Rdmig__BlockDest bd = RDMIG__BLOCK_DEST__INIT, *bdp = &bd;
	Rdmig__BlockMapResp resp = RDMIG__BLOCK_MAP_RESP__INIT;
	struct peer src;
	struct fab_listener *l = NULL;
	struct pd_request req;
	struct pd_accept acc;
	struct rd_err e = { "" };
	struct frame f;
	uint8_t accb[PD_ACCEPT_LEN] = { 0 };
	uint64_t token = 0x7ea5ed0c0ffee, first_addr = 0, last_addr = 0, last_len = 0, length = 0;
	uint32_t first_rkey = 0, last_rkey = 0;
	enum ibv_wc_status st;
	int64_t t_read, deadline, last_ka = 0, gone = -1;
	uint8_t rtok[PD_TOKEN_LEN];
	uint16_t version;
	bool last = false, recover = o->variant == 2;
	char q[1200];
	int rc, code = 2;

	memset(&src, 0, sizeof(src));
	memset(rtok, 0x5e, sizeof(rtok));
	rc = take_source(o, &l, &src, &req, &version, &e);
	/* resume-error grants recovery, which needs version 3. */
	if (!rc && recover && (req.ver_max < 3 || !(req.caps & PD_CAP_POSTCOPY_RECOVER)))
		rc = rd_err_set(&e, -EPROTO, "the source asks no post-copy recovery");
	if (!rc && recover)
		version = 3;
	if (rc || !(req.caps & PD_CAP_POSTCOPY)) {
		code = result(2, "variant=%s setup=\"%s\"", variant, quoted(rc ? e.msg :
			      "the source asks no post-copy", q, sizeof(q)));
		goto out;
	}
	acc = (struct pd_accept){ .version = version, .ctrl_depth = 16, .ctrl_msg_max = 65536,
				  .caps = req.caps & (PD_CAP_POSTCOPY |
						      (recover ? PD_CAP_POSTCOPY_RECOVER : 0)) };
	pd_encode_accept(&acc, accb, sizeof(accb));
	rc = accept_source(&src, &req, &acc, accb, PD_ACCEPT_LEN);
	if (!rc)
		rc = fab_listen_beside(&r.l, src.fc, &e);
	if (!rc)
		rc = expect(&src, CT_BLOCK_MAP_REQ, &f, rd_deadline(timeout_ms));
	if (rc) {
		code = result(2, "variant=%s setup=\"%s\"", variant, quoted(e.msg[0] ? e.msg :
			      src.err.msg, q, sizeof(q)));
		goto out;
	}
	length = ((const Rdmig__BlockMapReq *)f.m)->blocks[0]->length;
	resp.n_blocks = ((const Rdmig__BlockMapReq *)f.m)->n_blocks;
	ctrl_msg_free(NULL, f.m);
	if (resp.n_blocks != 1) {
		code = result(2, "variant=%s setup=\"one block only\"", variant);
		goto out;
	}
	bd.base_addr = 0x100000000ull;
	resp.blocks = &bdp;
	resp.channels = 1;
	resp.channel_port = fab_listener_port(r.l);
	resp.channel_token = token;
	resp.postcopy_channels = 2;
	if (recover) {
		resp.resume_token.data = rtok;
		resp.resume_token.len = sizeof(rtok);
	}
	rc = send_msg(&src, CT_BLOCK_MAP_RESP, &resp.base, -1);
	if (!rc)
		rc = pc_accept_channels(&r, &src, &e);
	if (rc) {
		code = result(2, "variant=%s setup=\"%s\"", variant, quoted(e.msg[0] ? e.msg :
			      src.err.msg, q, sizeof(q)));
		goto out;
	}
	note("post-copy channels accepted; waiting for the switch");
	/* State, then the keys and the set; credits go back as we read. */
	deadline = rd_deadline(timeout_ms * 3);
	while (!last && !(rc = next_frame(&src, &f, deadline))) {
		if (f.h.type == CT_POSTCOPY_KEYS) {
			const Rdmig__PostcopyKeys *k = (const Rdmig__PostcopyKeys *)f.m;
			size_t i;

			for (i = 0; i < k->n_block; i++) {
				uint64_t off = k->piece[i] << k->piece_shift;
				uint64_t len = length - off < (UINT64_C(1) << k->piece_shift) ?
					       length - off : UINT64_C(1) << k->piece_shift;

				if (k->piece[i] == 0) {
					first_addr = k->addr[i];
					first_rkey = k->rkey[i];
				}
				if (off + len == length) {
					last_addr = k->addr[i];
					last_rkey = k->rkey[i];
					last_len = len;
				}
			}
		}
		if (f.h.type == CT_POSTCOPY_RANGES)
			last = ((const Rdmig__PostcopyRanges *)f.m)->last;
		if (f.h.type == CT_ERROR)
			rc = -ECONNABORTED;
		ctrl_msg_free(NULL, f.m);
		if (rc)
			break;
		if (src.w.to_return >= 8)
			send_msg(&src, CT_CREDIT, NULL, -1);
	}
	if (!last || !first_addr || !last_addr) {
		code = result(2, "variant=%s setup=\"no switch came: %s\"", variant,
			      quoted(src.said[0] ? src.said : src.err.msg, q, sizeof(q)));
		goto out;
	}
	if (o->variant >= 3) {
		/* A destination that gives up after the switch, as one older
		 * than 0.3.0 would, or saying its guest never ran. */
		Rdmig__Error er = RDMIG__ERROR__INIT;

		er.code = -EIO;
		er.message = (char *)"a test's destination gives up after the switch";
		er.guest_never_ran = o->variant == 4;
		rc = send_msg(&src, CT_ERROR, &er.base, -1);
		note("switched, then sent ERROR %s guest_never_ran", er.guest_never_ran ?
		     "with" : "without");
		/* Time for the ERROR to land before our disconnect. */
		usleep(200000);
		code = result(rc ? 2 : 0, "variant=%s sent=%s", variant, rc ? "nothing" : "error");
		goto out;
	}
	if (recover) {
		/* The link breaks: the source pauses and comes back. */
		pc_reader_close(&r);
		memset(&r, 0, sizeof(r));
		peer_close(&src);
		note("switched, then broke the link");
		code = pcdest_resume_error(l, &acc, rtok);
		goto out;
	}
	t_read = rd_now_ms();
	st = o->variant == 0 ? pc_read(&r, last_addr + last_len, last_rkey) :
	     pc_read(&r, first_addr, first_rkey);
	note("READ %s: %s", o->variant == 0 ? "one page past the last piece" : "the first page",
	     ibv_wc_status_str(st));
	/* How the source takes it: our keepalives go on, so its silence
	 * timer does not decide. */
	deadline = rd_deadline(timeout_ms / 2);
	while (!rd_expired(deadline)) {
		while ((rc = pump(&src, &f)) > 0)
			ctrl_msg_free(NULL, f.m);
		if (rc < 0 || src.said[0] || src.closed) {
			gone = rd_now_ms() - t_read;
			break;
		}
		if (rd_now_ms() - last_ka >= KEEPALIVE_MS && src.w.credits >= 2) {
			send_msg(&src, CT_KEEPALIVE, NULL, -1);
			last_ka = rd_now_ms();
		}
		usleep(1000);
	}
	code = result(st == IBV_WC_SUCCESS ? 0 : 1, "variant=%s nic=\"%s\" source-gone-ms=%" PRId64
		      " source-said=\"%s\"", variant, ibv_wc_status_str(st), gone,
		      quoted(src.said[0] ? src.said : gone >= 0 ? "nothing (it hung up)" :
			     "nothing", q, sizeof(q)));
out:
	pc_reader_close(&r);
	peer_close(&src);
	fab_listener_destroy(l);
	return code;
}

/* ---- command line ------------------------------------------------------------------ */

/* ---- resume: taking over a paused post-copy --------------------------------------- */

static const char *const resume_variants[] = { "token", "plain" };

static int resume(const struct opts *o)
{
	static const uint8_t zero[PD_TOKEN_LEN];
	struct pd_request r = { .ver_min = PD_VERSION_MIN, .ver_max = PD_VERSION_MAX,
				.caps = PD_CAP_AUTH | PD_CAP_POSTCOPY | PD_CAP_POSTCOPY_RECOVER,
				.ctrl_depth = 8, .ctrl_msg_max = 65536, .channel = 0,
				.channels = 1, .resume = o->variant == 0 };
	uint8_t req[PD_RESUME_LEN];
	struct peer p;
	size_t n;
	int rc;

	/* A guess at the token: 128 random bits. */
	do
		randombytes_buf(r.token, sizeof(r.token));
	while (!memcmp(r.token, zero, sizeof(zero)));
	n = pd_encode_request(&r, req, sizeof(req));
	memset(&p, 0, sizeof(p));
	rc = dial(&p, o->host, o->port, req, n, 8, 65536, true, rd_deadline(timeout_ms));
	if (rc) {
		rc = result(1, "variant=%s reason=%s", resume_variants[o->variant],
			    p.priv_len ? reject_reason(&p) : "none");
		peer_close(&p);
		return rc;
	}
	peer_close(&p);
	return result(0, "variant=%s accepted=yes", resume_variants[o->variant]);
}

/* ---- pcresume: a paused post-copy resumed without the key ------------------------ */

static const char *const pcresume_variants[] = { "noauth", "badmac", "error", "done" };

/* A RESUME of the migration @tok names, @req its bytes; retried while the
 * destination answers busy (the broken link's READs not back yet). */
static int dial_resume(struct peer *p, const struct opts *o, const uint8_t *tok,
		       uint8_t req[PD_RESUME_LEN], struct pd_accept *acc)
{
	struct pd_request r = { .ver_min = 3, .ver_max = 3, .caps = PD_CAP_AUTH |
				PD_CAP_POSTCOPY | PD_CAP_POSTCOPY_RECOVER,
				.ctrl_depth = FLOOD_DEPTH, .ctrl_msg_max = 65536, .channel = 0,
				.channels = 1, .resume = true };
	struct rd_err e;
	int tries, rc = 0;

	memcpy(r.token, tok, PD_TOKEN_LEN);
	pd_encode_request(&r, req, PD_RESUME_LEN);
	for (tries = 0; tries < 40; tries++) {
		memset(p, 0, sizeof(*p));
		rc = dial(p, o->host, o->port, req, PD_RESUME_LEN, FLOOD_DEPTH, 4096, true,
			  rd_deadline(timeout_ms));
		if (!rc || !p->priv_len || strcmp(reject_reason(p), "busy"))
			break;
		peer_close(p);
		usleep(250000);
	}
	if (rc)
		return rc;
	rc = pd_decode_accept(p->priv, p->priv_len, acc, &e);
	if (rc)
		return rd_err_set(&p->err, rc, "%s", e.msg);
	p->w.credits = acc->ctrl_depth;
	return 0;
}

/* Honest: proves the key on @p (opened with @req), resumes, opens the
 * post-copy channels again on @pd (where our memory is registered) and
 * serves until POSTCOPY_DONE, then completes.  0 once completed. */
static int resume_honestly(struct peer *p, const struct opts *o, const uint8_t *req,
			   struct peer ch[2], struct ibv_pd *pd, uint64_t size, uint64_t *done_pages,
			   uint64_t *left)
{
	Rdmig__PostcopyResume q = RDMIG__POSTCOPY_RESUME__INIT;
	Rdmig__Complete c = RDMIG__COMPLETE__INIT;
	const Rdmig__PostcopyResumed *a;
	int64_t deadline, last_ka = 0;
	struct frame f;
	char port[8];
	uint64_t token;
	unsigned i;
	int rc;

	rc = authenticate_bytes(p, o, 3, req, PD_RESUME_LEN);
	q.pages = size / 4096;
	if (!rc)
		rc = send_msg(p, CT_POSTCOPY_RESUME, &q.base, -1);
	if (!rc)
		rc = expect(p, CT_POSTCOPY_RESUMED, &f, rd_deadline(timeout_ms));
	if (rc)
		return rc;
	a = (const Rdmig__PostcopyResumed *)f.m;
	snprintf(port, sizeof(port), "%u", a->channel_port);
	token = a->channel_token;
	note("resumed: %" PRIu64 " pages left", a->pages_left);
	*left = a->pages_left;
	ctrl_msg_free(NULL, f.m);
	/* Every page in: no channel is invited, POSTCOPY_DONE comes. */
	for (i = 0; !rc && *left && i < 2; i++)
		rc = pc_channel(&ch[i], o, port, token, 1 + i, 3, pd);
	deadline = rd_deadline(timeout_ms * 3);
	while (!rc && !rd_expired(deadline)) {
		rc = pump(p, &f);
		if (rc > 0 && f.h.type == CT_POSTCOPY_DONE) {
			*done_pages = ((const Rdmig__PostcopyDone *)f.m)->pages;
			ctrl_msg_free(NULL, f.m);
			rc = send_msg(p, CT_COMPLETE, &c.base, -1);
			if (!rc)
				rc = expect(p, CT_COMPLETE_ACK, &f, rd_deadline(timeout_ms));
			if (!rc)
				ctrl_msg_free(NULL, f.m);
			return rc;
		}
		if (rc > 0) {
			ctrl_msg_free(NULL, f.m);
			rc = 0;
			continue;
		}
		if (rc < 0 || p->said[0] || p->closed)
			return rc < 0 ? rc : -ECONNRESET;
		if (rd_now_ms() - last_ka >= KEEPALIVE_MS && p->w.credits >= 2) {
			send_msg(p, CT_KEEPALIVE, NULL, -1);
			last_ka = rd_now_ms();
		}
		usleep(1000);
	}
	return rc ? rc : -ETIMEDOUT;
}

static int pcresume(const struct opts *o)
{
	const char *variant = pcresume_variants[o->variant];
	struct pd_request r = { .ver_min = 2, .ver_max = 3, .caps = PD_CAP_AUTH |
				PD_CAP_POSTCOPY | PD_CAP_POSTCOPY_RECOVER,
				.ctrl_depth = FLOOD_DEPTH, .ctrl_msg_max = 65536, .channel = 0,
				.channels = 1 };
	Rdmig__PostcopyResume q = RDMIG__POSTCOPY_RESUME__INIT;
	/* done: the smallest ring, and no credit handed back from the switch
	 * on, so the destination reads every page but cannot say
	 * POSTCOPY_DONE before the link breaks. */
	if (o->variant == 3)
		r.ctrl_depth = PD_DEPTH_MIN;
	struct peer p, a, h, ch[2], nch[2];
	uint8_t req[PD_REQUEST_LEN], rreq[PD_RESUME_LEN], tok[PD_TOKEN_LEN], *mem = NULL;
	struct pd_accept acc;
	struct ibv_mr *mr = NULL;
	struct frame f;
	struct opts bad;
	char q1[1200], q2[1200], q3[1200], port[8];
	uint64_t token = 0, i, done_pages = 0, left = UINT64_MAX;
	bool resumed = false, done = o->variant == 3;
	int rc, hrc, code = 2;

	memset(&p, 0, sizeof(p));
	memset(&a, 0, sizeof(a));
	memset(&h, 0, sizeof(h));
	memset(ch, 0, sizeof(ch));
	memset(nch, 0, sizeof(nch));
	/* An honest start: the key proved, the token and the switch. */
	randombytes_buf(&r.session_id, sizeof(r.session_id));
	pd_encode_request(&r, req, sizeof(req));
	rc = dial(&p, o->host, o->port, req, sizeof(req), FLOOD_DEPTH, 4096, true,
		  rd_deadline(timeout_ms));
	if (!rc) {
		struct rd_err e;

		rc = pd_decode_accept(p.priv, p.priv_len, &acc, &e);
		p.w.credits = acc.ctrl_depth;
		if (!rc && !(acc.caps & PD_CAP_POSTCOPY_RECOVER))
			rc = rd_err_set(&p.err, -EPROTO, "post-copy recovery not granted");
	}
	if (!rc)
		rc = authenticate(&p, o, acc.version, req);
	if (!rc)
		rc = send_block_map(&p, o, -1);
	if (!rc)
		rc = expect(&p, CT_BLOCK_MAP_RESP, &f, rd_deadline(timeout_ms));
	if (!rc) {
		const Rdmig__BlockMapResp *m = (const Rdmig__BlockMapResp *)f.m;

		snprintf(port, sizeof(port), "%u", m->channel_port);
		token = m->channel_token;
		if (m->resume_token.len != PD_TOKEN_LEN)
			rc = rd_err_set(&p.err, -EPROTO, "no resume token");
		else
			memcpy(tok, m->resume_token.data, PD_TOKEN_LEN);
		ctrl_msg_free(NULL, f.m);
	}
	if (!rc && posix_memalign((void **)&mem, 4096, o->size))
		rc = rd_err_set(&p.err, -ENOMEM, "out of memory");
	for (i = 0; !rc && i < o->size; i++)
		mem[i] = (uint8_t)(i / 4096 * 7 + 0x5a);
	for (i = 0; !rc && i < 2; i++) {
		rc = pc_channel(&ch[i], o, port, token, 1 + (unsigned)i, 3, i ? ch[0].pd : NULL);
		if (!rc && !i)
			ch[0].share_pd = NULL; /* the first channel owns the PD */
	}
	if (!rc) {
		mr = ibv_reg_mr(ch[0].pd, mem, o->size, IBV_ACCESS_LOCAL_WRITE |
				IBV_ACCESS_REMOTE_READ);
		if (!mr)
			rc = rd_err_set(&p.err, -errno, "ibv_reg_mr: %s", strerror(errno));
	}
	if (!rc)
		rc = pc_switch(&p, o, mem, mr->rkey, done ? 0 : -1);
	if (rc) {
		code = result(2, "variant=%s setup=\"%s\"", variant, quoted(p.said[0] ? p.said :
			      p.err.msg[0] ? p.err.msg : ch[0].err.msg[0] ? ch[0].err.msg :
			      ch[1].err.msg, q1, sizeof(q1)));
		goto out;
	}
	/* Let the destination's guest start (done: and read every page; its
	 * silence timer may pause it first, which is the same break), then
	 * break our own link; the memory stays registered. */
	usleep(done ? 10000000 : 300000);
	rdma_disconnect(ch[0].id);
	rdma_disconnect(ch[1].id);
	rdma_disconnect(p.id);
	note("switched, then broke the link");
	/* The attack: the right token, no proof (or a wrong one). */
	rc = done ? -EALREADY : dial_resume(&a, o, tok, rreq, &acc);
	if (!rc && o->variant == 1) {
		bad = *o;
		bad.key[0] ^= 1;
		rc = authenticate_bytes(&a, &bad, 3, rreq, PD_RESUME_LEN);
	}
	/* Or no proof and an ERROR: heard as the source's word, it would end
	 * the paused post-copy for good. */
	if (!rc && o->variant == 2) {
		Rdmig__Error e = RDMIG__ERROR__INIT;

		e.code = -EIO;
		e.message = (char *)"stop here, the source is gone for good";
		rc = send_msg(&a, CT_ERROR, &e.base, -1);
	}
	q.pages = o->size / 4096;
	if (!rc && o->variant != 2)
		rc = send_msg(&a, CT_POSTCOPY_RESUME, &q.base, -1);
	if (!rc)
		rc = expect(&a, CT_POSTCOPY_RESUMED, &f, rd_deadline(timeout_ms));
	if (!rc) {
		resumed = true;
		ctrl_msg_free(NULL, f.m);
	}
	snprintf(q2, sizeof(q2), "%s", a.said[0] ? a.said : a.closed ? "nothing (it hung up)" :
		 a.err.msg);
	peer_close(&a);
	/* Then the honest resume: the migration must not have lost anything. */
	hrc = dial_resume(&h, o, tok, rreq, &acc);
	if (!hrc)
		hrc = resume_honestly(&h, o, rreq, nch, ch[0].pd, o->size, &done_pages, &left);
	code = result(resumed ? 0 : 1, "variant=%s resumed=%s dest-said=\"%s\" then-honest=%s "
		      "done-pages=%" PRIu64 " left-at-resume=%" PRId64 " honest-said=\"%s\"",
		      variant, resumed ? "yes" : "no", quoted(q2, q1, sizeof(q1)),
		      hrc ? "failed" : "completed", done_pages,
		      left == UINT64_MAX ? (int64_t)-1 : (int64_t)left,
		      quoted(h.said[0] ? h.said : h.err.msg, q3, sizeof(q3)));
out:
	peer_close(&h);
	peer_close(&nch[1]);
	peer_close(&nch[0]);
	if (mr)
		ibv_dereg_mr(mr);
	peer_close(&ch[1]);
	peer_close(&ch[0]);
	peer_close(&p);
	free(mem);
	return code;
}

static int usage(void)
{
	fprintf(stderr, "usage: evil_peer harvest HOST:PORT --variant zero|relay [--listen HOST]\n"
		"       evil_peer ring HOST:PORT [--listen HOST]\n"
		"       evil_peer hold HOST:PORT N SECONDS\n"
		"       evil_peer rings HOST:PORT [--depth N] [--msg-max BYTES] [--hold-ms MS]\n"
		"       evil_peer bigmap HOST:PORT --key FILE [--size BYTES] [--pin-all]\n"
		"       evil_peer vanish HOST:PORT [--size BYTES]\n"
		"       evil_peer pages HOST:PORT --variant outside|torn|index|honest [--size BYTES]\n"
		"       evil_peer flood HOST:PORT --key FILE --seconds S [--size BYTES]\n"
		"                       [--zero-bytes BYTES]\n"
		"       evil_peer state HOST:PORT --key FILE [--announce BYTES] [--state-bytes BYTES]\n"
		"                       [--size BYTES] [--hold-ms MS]\n"
		"       evil_peer pcsource HOST:PORT --variant unregistered|revoke|honest\n"
		"                       [--size BYTES] [--revoke-ms MS]\n"
		"       evil_peer pcdest HOST:PORT --variant outside|inside|resume-error|error-old|\n"
		"                       error-never-ran [--listen HOST]\n"
		"       evil_peer resume HOST:PORT --variant token|plain\n"
		"       evil_peer pcresume HOST:PORT --key FILE --variant noauth|badmac|error\n"
		"                       [--size BYTES]\n"
		"  common: [--timeout MS] [--proto 1|2|auto] [--name BLOCK] [--chunk-shift N]\n");
	return 2;
}

static int read_key(struct opts *o)
{
	int fd = open(o->key_path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, o->key, sizeof(o->key));

	if (fd >= 0)
		close(fd);
	if (n < AUTH_KEY_MIN) {
		fprintf(stderr, "evil_peer: cannot read a key from %s\n", o->key_path);
		return -1;
	}
	o->key_len = (size_t)n;
	return 0;
}

static int split_addr(struct opts *o, char *s)
{
	char *colon = strrchr(s, ':');

	if (!colon || colon == s)
		return -1;
	*colon = '\0';
	o->host = s;
	o->port = colon + 1;
	if (*o->host == '[' && o->host[strlen(o->host) - 1] == ']') {
		o->host++;
		s[strlen(s) - 1] = '\0';
	}
	return 0;
}

static int parse(struct opts *o, int argc, char **argv)
{
	int i, pos = 0;

	if (argc < 3)
		return -1;
	o->mode = argv[1];
	if (split_addr(o, argv[2]))
		return -1;
	for (i = 3; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--variant") && v) {
			unsigned k = 0;

			/* harvest's zero|relay, or one of pages_variants, or a
			 * post-copy mode's */
			if (!strcmp(o->mode, "resume") || !strcmp(o->mode, "pcresume")) {
				const char *const *names = o->mode[0] == 'r' ? resume_variants :
							   pcresume_variants;
				unsigned nn = o->mode[0] == 'r' ? RD_ARRAY_SIZE(resume_variants) :
					      RD_ARRAY_SIZE(pcresume_variants);

				while (k < nn && strcmp(v, names[k]))
					k++;
				if (k == nn)
					return -1;
			} else if (!strcmp(o->mode, "pcsource") || !strcmp(o->mode, "pcdest")) {
				const char *const *names = o->mode[2] == 's' ? pcsource_variants :
							   pcdest_variants;
				unsigned nn = o->mode[2] == 's' ? RD_ARRAY_SIZE(pcsource_variants) :
					      RD_ARRAY_SIZE(pcdest_variants);

				while (k < nn && strcmp(v, names[k]))
					k++;
				if (k == nn)
					return -1;
			} else if (strcmp(v, "zero") && strcmp(v, "relay")) {
				while (k < RD_ARRAY_SIZE(pages_variants) &&
				       strcmp(v, pages_variants[k]))
					k++;
				if (k == RD_ARRAY_SIZE(pages_variants))
					return -1;
			}
			o->variant = !strcmp(v, "relay") ? 1 : (int)k;
			i++;
		} else if (!strcmp(a, "--proto") && v) {
			o->proto = !strcmp(v, "auto") ? 0 : atoi(v);
			if (strcmp(argv[++i], "auto") && o->proto != 1 && o->proto != 2)
				return -1;
		} else if (!strcmp(a, "--listen") && v) {
			o->lhost = argv[++i];
		} else if (!strcmp(a, "--timeout") && v) {
			timeout_ms = atoi(argv[++i]);
		} else if (!strcmp(a, "--key") && v) {
			o->key_path = argv[++i];
		} else if (!strcmp(a, "--size") && v) {
			o->size = strtoull(argv[++i], NULL, 0);
		} else if (!strcmp(a, "--msg-max") && v) {
			o->msg_max = strtoull(argv[++i], NULL, 0);
		} else if (!strcmp(a, "--depth") && v) {
			o->depth = (uint32_t)atoi(argv[++i]);
		} else if (!strcmp(a, "--hold-ms") && v) {
			o->hold_ms = o->hold_state_ms = atoi(argv[++i]);
		} else if (!strcmp(a, "--name") && v) {
			o->name = argv[++i];
		} else if (!strcmp(a, "--seconds") && v) {
			o->seconds = atoi(argv[++i]);
		} else if (!strcmp(a, "--zero-bytes") && v) {
			o->zero_bytes = strtoull(argv[++i], NULL, 0);
		} else if (!strcmp(a, "--announce") && v) {
			o->announce = strtoull(argv[++i], NULL, 0);
		} else if (!strcmp(a, "--state-bytes") && v) {
			o->state_bytes = strtoull(argv[++i], NULL, 0);
		} else if (!strcmp(a, "--revoke-ms") && v) {
			o->revoke_ms = atoi(argv[++i]);
		} else if (!strcmp(a, "--chunk-shift") && v) {
			o->chunk_shift = (uint32_t)atoi(argv[++i]);
		} else if (!strcmp(a, "--pin-all")) {
			o->pin_all = 1;
		} else if (a[0] != '-' && pos < 2) {
			if (pos++ == 0)
				o->n = atoi(a);
			else
				o->seconds = atoi(a);
		} else {
			return -1;
		}
	}
	if (!o->lhost)
		o->lhost = o->host;
	return timeout_ms >= 100 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct opts o = { .size = 1u << 20, .depth = 64, .msg_max = 16u << 20, .hold_ms = 3000,
			  .name = "ram", .chunk_shift = 20, .zero_bytes = 1u << 30,
			  .announce = UINT64_MAX, .state_bytes = 64u << 20, .revoke_ms = 100 };
	unsigned bound;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (parse(&o, argc, argv))
		return usage();
	mode_name = o.mode;
	if (sodium_init() < 0) {
		fprintf(stderr, "evil_peer: sodium_init failed\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	if (!strcmp(o.mode, "harvest")) {
		bound = (unsigned)(timeout_ms / 1000) * 6 + 10;
		alarm(bound);
		return harvest(&o);
	}
	if (!strcmp(o.mode, "ring")) {
		alarm((unsigned)(timeout_ms / 1000) * 4 + 10);
		return ring(&o);
	}
	if (!strcmp(o.mode, "hold")) {
		if (o.seconds < 1)
			return usage();
		alarm((unsigned)o.seconds + (unsigned)(timeout_ms / 1000) * 2 + 10);
		return hold(&o);
	}
	if (!strcmp(o.mode, "rings")) {
		alarm((unsigned)(o.hold_ms / 1000) + (unsigned)(timeout_ms / 1000) * 2 + 10);
		return rings(&o);
	}
	if (!strcmp(o.mode, "bigmap")) {
		if (!o.key_path || read_key(&o))
			return usage();
		alarm((unsigned)(timeout_ms / 1000) * 4 + 10);
		return bigmap(&o);
	}
	if (!strcmp(o.mode, "pages")) {
		alarm((unsigned)(timeout_ms / 1000) * 3 + 10);
		return pages(&o);
	}
	if (!strcmp(o.mode, "flood")) {
		if (!o.key_path || read_key(&o) || o.seconds < 1)
			return usage();
		alarm((unsigned)o.seconds + (unsigned)(timeout_ms / 1000) * 4 + 10);
		return flood(&o);
	}
	if (!strcmp(o.mode, "state")) {
		if (!o.key_path || read_key(&o))
			return usage();
		alarm((unsigned)(timeout_ms / 1000) * 4 + 120);
		return state(&o);
	}
	if (!strcmp(o.mode, "pcsource")) {
		alarm((unsigned)(timeout_ms / 1000) * 6 + 10);
		return pcsource(&o);
	}
	if (!strcmp(o.mode, "pcresume")) {
		if (!o.key_path || read_key(&o))
			return usage();
		alarm((unsigned)(timeout_ms / 1000) * 10 + 20);
		return pcresume(&o);
	}
	if (!strcmp(o.mode, "resume")) {
		alarm((unsigned)(timeout_ms / 1000) * 2 + 10);
		return resume(&o);
	}
	if (!strcmp(o.mode, "pcdest")) {
		alarm((unsigned)(timeout_ms / 1000) * 6 + 10);
		return pcdest(&o);
	}
	if (!strcmp(o.mode, "vanish")) {
		alarm((unsigned)(timeout_ms / 1000) * 5 + 10);
		return vanish(&o);
	}
	return usage();
}
