/* Fuzzes the destination's message handler with arbitrary sequences of
 * control frames against a small in-memory block table.
 *
 * dest.c, its driver dst_step.c and the files below them (dst_link.c,
 * dst_map.c, dst_data.c, dst_pc.c, dst_state.c) are included whole so
 * their static handlers are reachable; the transport underneath (fabric,
 * ctrl, verbs MR calls) is replaced by the minimal stand-ins below,
 * because what is under test is how the state machine treats what the
 * peer says, not RDMA (that runs over rxe in the integration suite).  Outgoing messages are still encoded and checked
 * against the protocol limits, so the handler cannot answer with a frame
 * the peer would reject.
 *
 * ZERO_RANGES are refused without the zero-pages capability, so only
 * inputs with bit 1 reach the slicing of their ranges.
 *
 * With POSTCOPY the destination's side of post-copy (dst_pc.c) runs over a
 * stand-in for its engine (pcd.h: the userfaultfd, the thread, the
 * READs), which checks what it is handed at the switch (every key, a page
 * set of the size counted) and has every page at once.
 *
 * Input: byte 0 selects capabilities (bit 0 pin-all, 1 zero pages,
 * 2 verify, 3 auth, 5 multi-channel with 4 channels asked for, 6 no
 * progress, 7 the state ring) and bit 4 a map callback instead of fixed
 * blocks; byte 1 more (bit 0 post-copy); then
 * frames, each a 2-byte little-endian length and that many bytes of a
 * control frame (header + protobuf), decoded by the real codec. */
#include "../../src/lib/dest/dest.c"
#include "../../src/lib/dest/dst_data.c"
#include "../../src/lib/dest/dst_link.c"
#include "../../src/lib/dest/dst_map.c"
#include "../../src/lib/dest/dst_pc.c"
#include "../../src/lib/dest/dst_state.c"
#include "../../src/lib/dest/dst_step.c"

#include <assert.h>
#include <sched.h>

/* ---- stand-ins for the transport --------------------------------------- */

static uint8_t out_buf[CTRL_MSG_MAX];
static _Atomic uint32_t next_rkey = 1;

int fab_reg_mr(struct fab_conn *c, void *addr, size_t len, int access, struct ibv_mr **out)
{
	struct ibv_mr *mr = calloc(1, sizeof(*mr));

	(void)c;
	(void)access;
	if (!mr)
		return -ENOMEM;
	/* Touch both ends: registering memory we do not own must crash here. */
	((volatile uint8_t *)addr)[0];
	((volatile uint8_t *)addr)[len - 1];
	mr->addr = addr;
	mr->length = len;
	mr->rkey = mr->lkey = next_rkey++;
	*out = mr;
	return 0;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	free(mr);
	return 0;
}

int fab_reg_error(struct rd_err *err, int rc, size_t len)
{
	return rd_err_set(err, rc, "registration of %zu bytes failed", len);
}

/* regq.c's verbs registration, never used here (the helper gets the
 * stand-ins below). */
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	(void)pd; (void)addr; (void)length; (void)iova; (void)access;
	abort();
}

/* The registration helper's verbs (regq.h): the same stand-in, on its
 * thread. */
static int fake_reg(void *pd, void *addr, size_t len, int access, void **mr)
{
	struct ibv_mr *m;
	int rc = fab_reg_mr(pd, addr, len, access, &m);

	*mr = m;
	return rc;
}

static void fake_dereg(void *mr)
{
	ibv_dereg_mr(mr);
}

static const struct regq_ops fake_regq = { fake_reg, fake_dereg, pop_fault_in };

int ctrl_send(struct ctrl *ch, unsigned type, const ProtobufCMessage *msg)
{
	struct rd_err err;
	int rc = ctrl_encode(type, 0, msg, out_buf, sizeof(out_buf), &err);

	(void)ch;
	assert(rc > 0);
	rc = ctrl_msg_check(type, msg, CTRL_MSG_MAX, &err);
	assert(rc == 0);
	return 0;
}

void ctrl_send_error(struct ctrl *ch, int code, const char *message, bool guest_never_ran,
		     int wait_ms)
{
	(void)ch;
	(void)code;
	(void)guest_never_ran;
	(void)wait_ms;
	assert(strlen(message) < RD_ERRLEN);
}

int ctrl_alloc(struct ctrl *ch, uint32_t depth, uint32_t msg_max, struct rd_err *err)
{
	(void)depth; (void)msg_max; (void)err;
	memset(ch, 0, sizeof(*ch));
	return 0;
}

int ctrl_init(struct ctrl *ch, struct fab_conn *conn, uint32_t depth, uint32_t msg_max,
	      struct rd_err *err)
{
	(void)ch; (void)conn; (void)depth; (void)msg_max; (void)err;
	return 0;
}

void ctrl_start(struct ctrl *ch, uint32_t peer_depth, uint32_t peer_msg_max)
{
	(void)ch; (void)peer_depth; (void)peer_msg_max;
}

void ctrl_fini(struct ctrl *ch) { (void)ch; }
int ctrl_return_credits(struct ctrl *ch, bool force) { (void)ch; (void)force; return 0; }
int ctrl_keepalive(struct ctrl *ch) { (void)ch; return 0; }
bool ctrl_owns(const struct ibv_wc *wc) { (void)wc; return true; }
bool ctrl_can_send(const struct ctrl *ch) { (void)ch; return true; }
uint32_t ctrl_room(const struct ctrl *ch) { (void)ch; return 16; }
uint32_t ctrl_sends_busy(const struct ctrl *ch) { (void)ch; return 0; }

int ctrl_complete(struct ctrl *ch, const struct ibv_wc *wc, struct ctrl_hdr *hdr,
		  ProtobufCMessage **msg)
{
	(void)ch; (void)wc; (void)hdr;
	*msg = NULL;
	return 0;
}

void ctrl_msg_done(struct ctrl *ch, ProtobufCMessage *msg)
{
	(void)ch;
	ctrl_msg_free(NULL, msg);
}

int fab_listen(struct fab_listener **out, const char *host, const char *port,
	       struct rd_err *err)
{
	(void)out; (void)host; (void)port; (void)err;
	return -ENOSYS;
}

int fab_listener_fd(const struct fab_listener *l) { (void)l; return -1; }
uint16_t fab_listener_port(const struct fab_listener *l) { (void)l; return 0; }
void fab_listener_destroy(struct fab_listener *l) { (void)l; }

int fab_get_request(struct fab_listener *l, int64_t deadline, struct fab_conn **out,
		    struct rd_err *err)
{
	(void)l; (void)deadline; (void)out; (void)err;
	return -ENOSYS;
}

int fab_accept(struct fab_conn *c, const struct fab_caps *caps, const void *priv, size_t len,
	       int (*pre_accept)(struct fab_conn *c, void *arg), void *arg)
{
	(void)c; (void)caps; (void)priv; (void)len; (void)pre_accept; (void)arg;
	return -ENOSYS;
}

int fab_reject(struct fab_conn *c, const void *priv, size_t len)
{
	(void)c; (void)priv; (void)len;
	return 0;
}

int fab_cm_process(struct fab_conn *c) { (void)c; return 0; }
int fab_poll(struct fab_conn *c, struct ibv_wc *wc, int n) { (void)c; (void)wc; (void)n; return 0; }
int fab_cq_rearm(struct fab_conn *c) { (void)c; return 0; }
int fab_cm_fd(const struct fab_conn *c) { (void)c; return -1; }
uint32_t fab_local_qpn(const struct fab_conn *c) { (void)c; return 0; }
const struct sockaddr *fab_local_addr(const struct fab_conn *c) { (void)c; return NULL; }
const struct sockaddr *fab_peer_addr(const struct fab_conn *c) { (void)c; return NULL; }
int fab_cq_fd(const struct fab_conn *c) { (void)c; return -1; }
void fab_disconnect(struct fab_conn *c) { (void)c; }
void fab_conn_destroy(struct fab_conn *c)
{
	if (c)
		free(c->id);
	free(c);
}

/* The data-channel set: only what BLOCK_MAP_RESP announces matters here. */
struct chan_set {
	unsigned granted;
};

int chan_set_open(struct chan_set **out, struct fab_conn *ctrl, unsigned max,
		  struct rd_err *err)
{
	(void)ctrl; (void)err;
	*out = calloc(1, sizeof(**out));
	assert(*out && max >= 2);
	return 0;
}

unsigned chan_set_grant(struct chan_set *cs, unsigned n, unsigned pc, uint32_t *port,
			uint64_t *token)
{
	(void)pc;
	cs->granted = n < DEST_CHANNELS_DEFAULT ? n : DEST_CHANNELS_DEFAULT;
	*port = 4791;
	*token = 0x1234;
	return cs->granted;
}

int chan_set_fd(const struct chan_set *cs) { (void)cs; return -1; }
int chan_set_process(struct chan_set *cs, char *note, size_t note_len, struct rd_err *err)
{
	(void)cs; (void)note; (void)note_len; (void)err;
	return 0;
}
void chan_set_disconnect(struct chan_set *cs) { (void)cs; }
void chan_set_break_pc(struct chan_set *cs) { (void)cs; }
void chan_set_destroy(struct chan_set *cs) { free(cs); }

void chan_set_pc_cq(struct chan_set *cs, struct ibv_cq *cq, uint32_t sq_depth)
{
	(void)cs; (void)cq; (void)sq_depth;
}

struct fab_conn *chan_set_pc_conn(const struct chan_set *cs, unsigned i)
{
	static struct fab_conn pc_conn[CHAN_PC];

	(void)cs;
	return i < CHAN_PC ? &pc_conn[i] : NULL;
}

/* The post-copy engine: what the switch hands it must hold together. */
struct pcd {
	struct ibv_mr *mr;      /* its one registration, the helper's */
	uint64_t pages;
	bool begun;
};

static uint8_t pc_staging[4096] __attribute__((aligned(4096)));

int pcd_create(struct pcd **out, struct ibv_context *verbs, const struct pcd_block *blocks,
	       unsigned n, int uffd, int wake_fd, struct stats_box *stats, struct rd_err *err)
{
	unsigned i;

	(void)verbs; (void)uffd; (void)wake_fd; (void)stats; (void)err;
	for (i = 0; i < n; i++)
		((volatile uint8_t *)blocks[i].host)[blocks[i].length - 1];
	*out = calloc(1, sizeof(**out));
	assert(*out);
	return 0;
}

struct ibv_cq *pcd_cq(const struct pcd *p) { (void)p; return NULL; }
unsigned pcd_nregs(const struct pcd *p) { (void)p; return 1; }

void pcd_reg_at(const struct pcd *p, unsigned i, void **addr, uint64_t *len)
{
	(void)p;
	assert(i == 0);
	*addr = pc_staging;
	*len = sizeof(pc_staging);
}

void pcd_reg_done(struct pcd *p, unsigned i, struct ibv_mr *mr)
{
	assert(i == 0 && !p->mr);
	p->mr = mr;
}

bool pcd_ready(const struct pcd *p) { return p->mr != NULL; }

int pcd_begin(struct pcd *p, struct fab_conn *fault, struct fab_conn *bg,
	      const struct pckeys *keys, uint64_t *const *set, uint64_t pages, bool recover,
	      struct rd_err *err)
{
	uint64_t n = 0;
	unsigned b;

	(void)err; (void)recover;
	assert(fault && bg && pckeys_complete(keys) && !p->begun);
	for (b = 0; b < keys->nblocks; b++)
		n += bm_count(set[b], blk_npages(keys->length[b], CFG_PAGE_SIZE));
	assert(n == pages);
	p->pages = pages;
	p->begun = true;
	return 0;
}

int pcd_poll(struct pcd *p, uint64_t *fault_pages, uint64_t *bg_pages, struct rd_err *err)
{
	(void)err;
	if (!p->begun)
		return 0;
	*fault_pages = 0;
	*bg_pages = p->pages;
	return 1;
}

void pcd_stop(struct pcd *p) { (void)p; }
/* Recovery needs a kept listener, which this harness never gives: the
 * engine is never paused. */
void pcd_pause(struct pcd *p) { (void)p; assert(0); }
bool pcd_quiet(const struct pcd *p) { (void)p; return false; }
uint64_t pcd_pending(const struct pcd *p, uint64_t *fault_pages, uint64_t *bg_pages)
{
	*fault_pages = 0;
	*bg_pages = p->pages;
	return 0;
}
void pcd_resume(struct pcd *p, struct fab_conn *fault, struct fab_conn *bg)
{
	(void)p; (void)fault; (void)bg;
	assert(0);
}

void pcd_destroy(struct pcd *p)
{
	if (!p)
		return;
	if (p->mr)
		ibv_dereg_mr(p->mr);
	free(p);
}

/* ---- the harness -------------------------------------------------------- */

static uint8_t ram0[16 * 4096] __attribute__((aligned(4096)));
static uint8_t ram1[3 * 4096 + 100] __attribute__((aligned(4096)));
static uint8_t ram2[8192] __attribute__((aligned(4096)));
static uint8_t mapped[4][32768];
static unsigned nmapped;

static int map_cb(void *ctx, const char *name, uint64_t length, uint32_t page_size,
		  void **host, int *zeroed, char *errbuf, size_t errlen)
{
	(void)ctx; (void)name; (void)page_size;
	if (length > sizeof(mapped[0]) || nmapped == 4) {
		snprintf(errbuf, errlen, "too large for the fuzzer");
		return -ENOSPC;
	}
	*host = mapped[nmapped++];
	*zeroed = 1;
	return 0;
}

static int state_cb(void *ctx, const void *data, size_t len, char *err, size_t errlen)
{
	(void)ctx;
	(void)err;
	(void)errlen;
	/* Read every byte the handler claims to deliver. */
	if (len)
		((volatile const uint8_t *)data)[len - 1];
	return 0;
}

/* Works off the message in hand and pin-all pieces as the steps would,
 * waiting for the helper's registrations. */
static int settle(struct rdmig_dest *d)
{
	int rc;

	for (;;) {
		rc = finish_job(d, 0);
		if (rc < 0)
			return rc;
		rc = dst_map_pin_step(d);
		if (rc < 0)
			return rc;
		rc = dst_state_ring_step(d);
		if (rc < 0)
			return rc;
		rc = dst_pc_reg_step(d);
		if (!rc)
			rc = dst_pc_step(d);
		if (rc < 0)
			return rc;
		if (d->job.kind == JOB_NONE && !regq_pending(&d->rq))
			return 0;
		rc = reap_registrations(d);
		if (rc < 0)
			return rc;
		sched_yield();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char key[] = "fuzzing key of sixteen bytes";
	/* Frames are decoded into an arena as ctrl does: its pieces are
	 * poisoned once reused, so a handler keeping a pointer into a message
	 * past its free is caught. */
	static struct arena arena;
	struct rdmig_config cfg;
	struct rdmig_dest *d;
	uint8_t sel, sel2;

	if (size < 2)
		return 0;
	sel = data[0];
	sel2 = data[1];
	data += 2;
	size -= 2;
	rdmig_config_init(&cfg);
	cfg.state = state_cb;
	cfg.pinned_cap = 8 * 4096;
	cfg.chunk_size = 4096;
	if (sel & 8) {
		cfg.auth_key = key;
		cfg.auth_key_len = sizeof(key) - 1;
	}
	if (sel & 16)
		cfg.map_block = map_cb;
	cfg.postcopy = sel2 & 1;
	nmapped = 0;
	if (!arena.size && arena_init(&arena, ctrl_arena_size(CTRL_MSG_MAX), NULL))
		abort();
	if (rdmig_dest_create(&d, &cfg) ||
	    regq_init(&d->rq, &fake_regq, NULL, 64, 1, d->ss.wake_fd, NULL))
		abort();
	if (!(sel & 16)) {
		rdmig_dest_add_block(d, "ram0", ram0, sizeof(ram0), 1);
		rdmig_dest_add_block(d, "ram1", ram1, sizeof(ram1), 0);
		rdmig_dest_add_block(d, "ram2", ram2, sizeof(ram2), 1);
	}
	d->ss.conn = calloc(1, sizeof(*d->ss.conn));
	d->ss.conn->id = calloc(1, sizeof(*d->ss.conn->id));
	d->ss.ctrl_ready = true;
	d->ss.ch.peer_msg_max = CTRL_MSG_MAX;
	/* Exactly where rdmig_dest_accept() leaves a connection: the first
	 * frame of a peer can arrive right after it, before any other event
	 * (the state an all-zero challenge once left open). */
	if (sel & 8)
		auth_nonce(d->nonce);
	dst_link_begin(d, (sel & 1 ? PD_CAP_PIN_ALL : PD_CAP_PAGES) | (sel & 2 ? PD_CAP_ZERO_PAGES : 0) |
			 (sel & 4 ? PD_CAP_VERIFY : 0) | (sel & 8 ? PD_CAP_AUTH : 0) |
			 (sel & 64 ? 0 : PD_CAP_PROGRESS) | (sel & 128 ? PD_CAP_STATE_RING : 0));
	if ((sel & 32) && open_channels(d, d->ss.conn, 4))
		d->ss.caps |= PD_CAP_MULTI_CHANNEL;
	if ((sel2 & 1) && (d->chans || open_channels(d, d->ss.conn, 1)))
		d->ss.caps |= PD_CAP_POSTCOPY;

	while (size >= 2 && d->state != DST_FAILED) {
		size_t len = (size_t)data[0] | (size_t)data[1] << 8;
		struct ctrl_hdr h;
		ProtobufCMessage *m = NULL;
		int rc;

		data += 2;
		size -= 2;
		if (len > size)
			len = size;
		rc = ctrl_decode(data, len, CTRL_MSG_MAX, &arena, &h, &m, &d->ss.err);
		data += len;
		size -= len;
		if (rc)
			continue; /* the codec is fuzzed on its own */
		rc = handle_msg(d, &h, m);
		/* A message in hand (ZERO_RANGES, REGISTER_REQ) is worked off
		 * before the next frame is taken, a slice per step (the clock
		 * long past makes every step one slice); pin-all pieces
		 * register between messages.  The harness keeps the message. */
		if (rc >= 0)
			rc = settle(d);
		d->job = (struct dst_job){ .kind = JOB_NONE };
		ctrl_msg_free(&arena, m);
		if (rc < 0)
			dst_fail(d, rc);
	}
	rdmig_dest_destroy(d);
	return 0;
}
