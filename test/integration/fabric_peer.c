/* fabric_peer: one side of the fabric integration test, run as a separate
 * process so the two sides only share the RDMA device.
 *
 *   fabric_peer dest ADDR                   listen on ADDR, port printed as "port N"
 *   fabric_peer src ADDR PORT SIZE [--corrupt] [--timeout MS]
 *
 * Protocol of the test: connect/accept with private data checked both ways;
 * dest SENDs {addr, rkey, len} of a zeroed buffer; src RDMA WRITEs SIZE bytes
 * of seeded random data into it and SENDs {seed, len}; dest regenerates the
 * data from the seed, compares byte for byte and SENDs the verdict back.
 * --corrupt shifts the WRITE by one page so the verifier can be seen to fail. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "fabric.h"
#include "testutil.h"

#define REQ_PRIV "rdmig-fabric-test/1"
#define ACC_PRIV "accepted:fabric-test"
#define MSG_MAGIC 0x52444d54u
#define WRITE_PIECE (1u << 20)

enum { TAG_RECV = 1, TAG_SEND, TAG_WRITE };

enum msg_type { MSG_BUFFER = 1, MSG_DONE, MSG_VERDICT };

struct msg {
	uint32_t magic;
	uint32_t type;
	uint64_t addr;
	uint64_t len;
	uint64_t seed;
	uint32_t rkey;
	uint32_t ok;
	uint64_t bad_offset;
};

struct ctl {
	struct msg recv_buf[2], send_buf;
	struct ibv_mr *mr;
	struct fab_tag recv_tag[2], send_tag;
	/* SENDs posted whose completion has not been reaped: all of them share
	 * send_tag, so a count is what tells the goodbye's completion apart. */
	unsigned int sends_out;
};

static int timeout_ms = 30000;

static int post_recv(struct fab_conn *c, struct ctl *ctl, int i)
{
	struct ibv_sge sge = { .addr = (uintptr_t)&ctl->recv_buf[i],
			       .length = sizeof(struct msg), .lkey = ctl->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = fab_wr_id(&ctl->recv_tag[i]),
				  .sg_list = &sge, .num_sge = 1 };

	return fab_post_recv(c, &wr);
}

static int setup_ctl(struct fab_conn *c, void *arg)
{
	struct ctl *ctl = arg;
	int rc;

	ctl->recv_tag[0].kind = ctl->recv_tag[1].kind = TAG_RECV;
	ctl->send_tag.kind = TAG_SEND;
	rc = fab_reg_mr(c, ctl, sizeof(*ctl), IBV_ACCESS_LOCAL_WRITE, &ctl->mr);
	if (!rc)
		rc = post_recv(c, ctl, 0);
	if (!rc)
		rc = post_recv(c, ctl, 1);
	return rc;
}

static int send_msg(struct fab_conn *c, struct ctl *ctl, const struct msg *m)
{
	struct ibv_sge sge = { .addr = (uintptr_t)&ctl->send_buf,
			       .length = sizeof(*m), .lkey = ctl->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = fab_wr_id(&ctl->send_tag), .sg_list = &sge,
				  .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };
	int rc;

	ctl->send_buf = *m;
	rc = fab_post_send(c, &wr);
	if (!rc)
		ctl->sends_out++;
	return rc;
}

/* Takes the next completion, failing on an error status and counting SENDs
 * off as they complete. */
static int next_wc(struct fab_conn *c, struct ctl *ctl, int64_t deadline, struct ibv_wc *wc)
{
	int rc = fab_poll_wait(c, wc, 1, deadline, -1);

	if (rc < 0)
		return rc;
	if (wc->status != IBV_WC_SUCCESS)
		return fab_wc_error(c, wc, fab_tag_of(wc)->kind == TAG_RECV ? "RECV" :
				    fab_tag_of(wc)->kind == TAG_SEND ? "SEND" : "RDMA WRITE");
	if (fab_tag_of(wc)->kind == TAG_SEND)
		ctl->sends_out--;
	return 0;
}

/* An RC SEND completes once the peer has acknowledged it, i.e. after it was
 * placed in the peer's receive buffer. */
static int wait_sends(struct fab_conn *c, struct ctl *ctl)
{
	int64_t deadline = rd_deadline(timeout_ms);
	struct ibv_wc wc;
	int rc = 0;

	while (!rc && ctl->sends_out)
		rc = next_wc(c, ctl, deadline, &wc);
	return rc;
}

/* Waits for the next control message, consuming other completions. */
static int recv_msg(struct fab_conn *c, struct ctl *ctl, uint32_t type, struct msg *out)
{
	int64_t deadline = rd_deadline(timeout_ms);
	struct ibv_wc wc;
	int rc;

	for (;;) {
		rc = next_wc(c, ctl, deadline, &wc);
		if (rc)
			return rc;
		if (fab_tag_of(&wc)->kind != TAG_RECV)
			continue;
		{
			int i = fab_tag_of(&wc) == &ctl->recv_tag[0] ? 0 : 1;
			struct msg *m = &ctl->recv_buf[i];

			if (wc.byte_len != sizeof(*m) || m->magic != MSG_MAGIC || m->type != type)
				return rd_err_set(c->err, -EPROTO,
						  "unexpected message (len %u, type %u)",
						  wc.byte_len, m->type);
			*out = *m;
			return post_recv(c, ctl, i);
		}
	}
}

static int run_dest(const char *addr)
{
	struct fab_caps caps = { .sq_depth = 16, .rq_depth = 4 };
	struct fab_listener *l = NULL;
	struct fab_conn *c = NULL;
	struct ctl *ctl = calloc(1, sizeof(*ctl));
	struct ibv_mr *data_mr = NULL;
	unsigned char *buf = NULL, *expect = NULL;
	struct rd_err err = { "" };
	struct msg m = { 0 }, done;
	uint64_t i, bad = UINT64_MAX;
	int rc;

	rc = fab_listen(&l, addr, "0", &err);
	if (rc)
		goto out;
	printf("port %u\n", fab_listener_port(l));
	fflush(stdout);
	rc = fab_get_request(l, rd_deadline(timeout_ms), &c, &err);
	if (rc)
		goto out;
	if (c->peer_priv_len < sizeof(REQ_PRIV) ||
	    memcmp(c->peer_priv, REQ_PRIV, sizeof(REQ_PRIV))) {
		fab_reject(c, "bad-private-data", 17);
		rc = rd_err_set(&err, -EPROTO, "connect private data did not match");
		goto out;
	}
	printf("request private data ok\n");
	rc = fab_accept(c, &caps, ACC_PRIV, sizeof(ACC_PRIV), setup_ctl, ctl);
	if (!rc)
		rc = fab_wait_established(c, rd_deadline(timeout_ms));
	if (rc)
		goto out_conn;

	/* The size comes from the source's first message, so allocate the
	 * maximum this test uses and zero it: stale data must not verify. */
	m.len = 64u << 20;
	if (posix_memalign((void **)&buf, 4096, m.len)) {
		rc = rd_err_set(&err, -ENOMEM, "out of memory");
		goto out_conn;
	}
	memset(buf, 0, m.len);
	rc = fab_reg_mr(c, buf, m.len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
			&data_mr);
	if (rc)
		goto out_conn;
	m.magic = MSG_MAGIC;
	m.type = MSG_BUFFER;
	m.addr = (uintptr_t)buf;
	m.rkey = data_mr->rkey;
	rc = send_msg(c, ctl, &m);
	if (!rc)
		rc = recv_msg(c, ctl, MSG_DONE, &done);
	if (rc)
		goto out_conn;
	if (done.len > m.len) {
		rc = rd_err_set(&err, -EPROTO, "source wrote %" PRIu64 " bytes, more than offered",
				done.len);
		goto out_conn;
	}
	/* An RC SEND posted after RDMA WRITEs arrives after their data is placed,
	 * so the buffer is complete now. */
	expect = malloc(done.len);
	if (!expect) {
		rc = rd_err_set(&err, -ENOMEM, "out of memory");
		goto out_conn;
	}
	tu_fill_random(expect, done.len, done.seed);
	if (memcmp(buf, expect, done.len)) {
		for (i = 0; i < done.len && buf[i] == expect[i]; i++)
			;
		bad = i;
	}
	m.type = MSG_VERDICT;
	m.ok = bad == UINT64_MAX;
	m.bad_offset = bad;
	rc = send_msg(c, ctl, &m);
	if (!rc)
		rc = recv_msg(c, ctl, MSG_DONE, &done); /* the source's goodbye */
	if (rc)
		goto out_conn;
	if (bad != UINT64_MAX)
		rc = rd_err_set(&err, -EIO, "data mismatch at offset %" PRIu64 " of %" PRIu64,
				bad, done.len);
	else
		printf("verified %" PRIu64 " bytes\n", done.len);

out_conn:
	/* The connection wrote its failures into err itself. */
	fab_disconnect(c);
	if (data_mr)
		ibv_dereg_mr(data_mr);
	if (ctl->mr)
		ibv_dereg_mr(ctl->mr);
	fab_conn_destroy(c);
out:
	fab_listener_destroy(l);
	free(buf);
	free(expect);
	free(ctl);
	if (rc)
		fprintf(stderr, "fabric_peer dest: %s\n", err.msg);
	return rc ? 1 : 0;
}

static int write_all(struct fab_conn *c, unsigned char *data, struct ibv_mr *mr,
		     const struct msg *buf, uint64_t len, uint64_t shift)
{
	struct ibv_send_wr wr[16];
	struct ibv_sge sge[16];
	struct fab_tag tag = { TAG_WRITE };
	struct ibv_wc wc;
	uint64_t off = 0;
	int n, rc;

	/* Chains of up to 16 WRITEs, only the last signaled. */
	while (off < len) {
		for (n = 0; n < 16 && off < len; n++) {
			uint32_t piece = len - off < WRITE_PIECE ? (uint32_t)(len - off) : WRITE_PIECE;

			sge[n] = (struct ibv_sge){ .addr = (uintptr_t)data + off,
						   .length = piece, .lkey = mr->lkey };
			wr[n] = (struct ibv_send_wr){ .wr_id = fab_wr_id(&tag),
				.sg_list = &sge[n], .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE,
				.wr.rdma = { .remote_addr = buf->addr + off + shift,
					     .rkey = buf->rkey } };
			if (n)
				wr[n - 1].next = &wr[n];
			off += piece;
		}
		wr[n - 1].send_flags = IBV_SEND_SIGNALED;
		rc = fab_post_send(c, wr);
		if (rc)
			return rc;
		rc = fab_poll_wait(c, &wc, 1, rd_deadline(timeout_ms), -1);
		if (rc < 0)
			return rc;
		if (wc.status != IBV_WC_SUCCESS)
			return fab_wc_error(c, &wc, "RDMA WRITE");
	}
	return 0;
}

static int run_src(const char *addr, const char *port, uint64_t len, int corrupt)
{
	struct fab_caps caps = { .sq_depth = 64, .rq_depth = 4 };
	struct ctl *ctl = calloc(1, sizeof(*ctl));
	struct rd_err err = { "" };
	struct fab_conn *c = NULL;
	struct ibv_mr *mr = NULL;
	unsigned char *data = NULL, first[8];
	struct msg buf, m = { .magic = MSG_MAGIC }, verdict;
	int rc;

	rc = fab_connect(&c, addr, port, &caps, REQ_PRIV, sizeof(REQ_PRIV), setup_ctl, ctl,
			 rd_deadline(timeout_ms), &err);
	if (rc)
		goto out;
	if (c->peer_priv_len < sizeof(ACC_PRIV) ||
	    memcmp(c->peer_priv, ACC_PRIV, sizeof(ACC_PRIV))) {
		rc = rd_err_set(&err, -EPROTO, "accept private data did not match");
		goto out;
	}
	printf("accept private data ok\n");
	/* The destination's buffer starts zeroed and --corrupt leaves its first
	 * page unwritten, so the first mismatch is the first nonzero byte of the
	 * data: with 1 seed in 256 that is not offset 0.  Draw until byte 0 is
	 * nonzero, so the verdict's offset is fixed by the fault, not the seed
	 * (the first 8 bytes are the stream's own: tu_fill_random works in
	 * 8-byte words). */
	do {
		if (getrandom(&m.seed, sizeof(m.seed), 0) != sizeof(m.seed)) {
			rc = rd_err_set(&err, -errno, "getrandom: %s", strerror(errno));
			goto out;
		}
		tu_fill_random(first, sizeof(first), m.seed);
	} while (!first[0]);
	if (posix_memalign((void **)&data, 4096, len)) {
		rc = rd_err_set(&err, -ENOMEM, "out of memory");
		goto out;
	}
	tu_fill_random(data, len, m.seed);
	/* A WRITE source needs only local read access. */
	rc = fab_reg_mr(c, data, len, 0, &mr);
	if (!rc)
		rc = recv_msg(c, ctl, MSG_BUFFER, &buf);
	if (!rc)
		rc = write_all(c, data, mr, &buf, len, corrupt ? 4096 : 0);
	if (rc)
		goto out;
	m.type = MSG_DONE;
	m.len = len;
	rc = send_msg(c, ctl, &m);
	if (!rc)
		rc = recv_msg(c, ctl, MSG_VERDICT, &verdict);
	if (!rc)
		rc = send_msg(c, ctl, &m);
	/* The goodbye tells the destination that its verdict arrived: until it
	 * is delivered, our disconnect would end the destination with "peer
	 * disconnected" instead of its own report.  Count, rather than take
	 * the first SEND completion seen: the DONE's may still be queued. */
	if (!rc)
		rc = wait_sends(c, ctl);
	if (rc)
		goto out;
	if (!verdict.ok)
		rc = rd_err_set(&err, -EIO, "destination found a mismatch at offset %" PRIu64,
				verdict.bad_offset);
	else
		printf("destination verified %" PRIu64 " bytes\n", len);
out:
	fab_disconnect(c);
	if (mr)
		ibv_dereg_mr(mr);
	if (ctl->mr)
		ibv_dereg_mr(ctl->mr);
	fab_conn_destroy(c);
	free(data);
	free(ctl);
	if (rc)
		fprintf(stderr, "fabric_peer src: %s\n", err.msg);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	int i, corrupt = 0;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--corrupt"))
			corrupt = 1;
		else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
			timeout_ms = atoi(argv[++i]);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "dest"))
		return run_dest(argv[2]);
	if (argc >= 5 && !strcmp(argv[1], "src"))
		return run_src(argv[2], argv[3], strtoull(argv[4], NULL, 0), corrupt);
	fprintf(stderr, "usage: fabric_peer dest ADDR | src ADDR PORT SIZE [--corrupt] "
		"[--timeout MS]\n");
	return 2;
}
