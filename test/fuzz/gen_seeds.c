/* Writes the fuzz seed corpora with the real encoders: one valid input per
 * private-data kind and per control message type (ctrl_seeds.c), plus a
 * few near misses.
 * Run by `test/fuzz/build.sh --seeds`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "ctrl_seeds.h"
#include "privdata.h"

static void put(const char *dir, const char *name, const void *buf, size_t len)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
		perror(path);
		exit(1);
	}
}

static void privdata(const char *dir)
{
	struct pd_request r = { .ver_min = PD_VERSION_MIN, .ver_max = PD_VERSION_MAX,
				.caps = PD_CAP_PIN_ALL | PD_CAP_ZERO_PAGES | PD_CAP_AUTH,
				.ctrl_depth = 64, .ctrl_msg_max = 65536,
				.session_id = 0x1122334455667788ull, .channel = 0, .channels = 1 };
	struct pd_accept a = { .version = PD_VERSION_MAX,
			       .caps = PD_CAP_PIN_ALL | PD_CAP_AUTH, .ctrl_depth = 32,
			       .ctrl_msg_max = 8192, .nonce = { 0xc0, 0xff, 0xee } };
	struct pd_reject j = { PD_REJ_VERSION, 2, 3 };
	struct pd_request rs = { .ver_min = PD_VERSION_MIN, .ver_max = PD_VERSION_MAX,
				 .caps = PD_CAP_AUTH | PD_CAP_POSTCOPY | PD_CAP_POSTCOPY_RECOVER,
				 .ctrl_depth = 64, .ctrl_msg_max = 65536, .channel = 0,
				 .channels = 1, .resume = true,
				 .token = { 0x7e, 0x57, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
					    14 } };
	uint8_t buf[PD_ACCEPT_LEN > 56 ? PD_ACCEPT_LEN : 56] = { 0 };

	put(dir, "request", buf, pd_encode_request(&r, buf, sizeof(buf)));
	put(dir, "request-padded", buf, sizeof(buf)); /* as rdma_cm delivers it */
	memset(buf, 0, sizeof(buf));
	put(dir, "accept", buf, pd_encode_accept(&a, buf, sizeof(buf)));
	put(dir, "reject", buf, pd_encode_reject(&j, buf, sizeof(buf)));
	memset(buf, 0, sizeof(buf));
	put(dir, "resume", buf, pd_encode_request(&rs, buf, sizeof(buf)));
	put(dir, "resume-padded", buf, sizeof(buf));
	memset(buf, 0, sizeof(buf));
	put(dir, "zeros", buf, 16);
}

static void put_frame(const char *dir, const char *name, int n, const void *buf,
		      const struct rd_err *e)
{
	if (n < 0) {
		fprintf(stderr, "gen_seeds: %s\n", e->msg);
		exit(1);
	}
	put(dir, name, buf, (size_t)n);
}

/* One seed per control message type from ctrl_seeds.c (which the unit
 * tests hold to every type), named for the type, and a few near misses. */
static void codec(const char *dir)
{
	static uint8_t buf[8192];
	struct rd_err e;
	unsigned t;

	for (t = 1; t < CT_TYPE_MAX; t++)
		put_frame(dir, ctrl_type_name(t), ctrl_seed(t, buf, sizeof(buf), &e), buf, &e);
	/* With POSTCOPY_RECOVER: the resume token. */
	put_frame(dir, "BLOCK_MAP_RESP-resume", ctrl_seed_resume(buf, sizeof(buf), &e), buf,
		  &e);
	/* Found by fuzz_codec: field number 0 spelled as a two-byte tag. */
	static const uint8_t field0[] = { 0, 0, 0, 5, 0, CT_ITER_ACK, 0, 0,
					  0x08, 7, 0x80, 0x00, 5 };
	put(dir, "regress-field0", field0, sizeof(field0));
}

/* fuzz_dest input: a selector byte, then frames with 2-byte lengths. */
static uint8_t seq[65536];
static size_t seq_len;

static void seq_frame(unsigned type, const ProtobufCMessage *m)
{
	struct rd_err err;
	int n = ctrl_encode(type, 0, m, seq + seq_len + 2, sizeof(seq) - seq_len - 2, &err);

	if (n < 0) {
		fprintf(stderr, "gen_seeds: %s\n", err.msg);
		exit(1);
	}
	seq[seq_len] = (uint8_t)n;
	seq[seq_len + 1] = (uint8_t)(n >> 8);
	seq_len += 2 + (size_t)n;
}

static void dest_sequence(const char *dir, const char *name, uint8_t sel, uint8_t sel2)
{
	Rdmig__BlockDesc b[3], *bp[3] = { &b[0], &b[1], &b[2] };
	Rdmig__BlockMapReq map = RDMIG__BLOCK_MAP_REQ__INIT;
	Rdmig__RegisterReq reg = RDMIG__REGISTER_REQ__INIT;
	Rdmig__ZeroRanges zr = RDMIG__ZERO_RANGES__INIT;
	Rdmig__IterEnd end = RDMIG__ITER_END__INIT;
	Rdmig__Progress prog = RDMIG__PROGRESS__INIT;
	Rdmig__State st = RDMIG__STATE__INIT;
	Rdmig__StateWritten sw = RDMIG__STATE_WRITTEN__INIT;
	Rdmig__Complete c = RDMIG__COMPLETE__INIT;
	Rdmig__Pages pg = RDMIG__PAGES__INIT;
	static uint8_t page[4096] = { 9, 8, 7 };
	uint32_t pb = 1;
	uint64_t po = 4096, pl = 4096;
	static const char *names[] = { "ram0", "ram1", "ram2" };
	static const uint64_t lens[] = { 16 * 4096, 3 * 4096 + 100, 8192 };
	uint32_t cb[2] = { 0, 1 }, zb[2] = { 0, 2 };
	uint64_t ci[2] = { 3, 3 }, zo[2] = { 4096, 0 }, zl[2] = { 8192, 4096 };
	uint8_t state[100] = { 1, 2, 3 };
	int i;

	seq_len = 0;
	seq[seq_len++] = sel;
	seq[seq_len++] = sel2;
	for (i = 0; i < 3; i++) {
		rdmig__block_desc__init(&b[i]);
		b[i].name = (char *)names[i];
		b[i].length = lens[i];
		b[i].page_size = 4096;
	}
	map.n_blocks = 3;
	map.blocks = bp;
	map.chunk_shift = 12;
	seq_frame(CT_BLOCK_MAP_REQ, &map.base);
	if (!(sel & 1)) {
		reg.req_id = 1;
		reg.n_chunk_block = reg.n_chunk_index = 2;
		reg.chunk_block = cb;
		reg.chunk_index = ci;
		seq_frame(CT_REGISTER_REQ, &reg.base);
	}
	if (!(sel & 1)) {
		pg.n_block = pg.n_offset = pg.n_length = 1;
		pg.block = &pb;
		pg.offset = &po;
		pg.length = &pl;
		pg.data.data = page;
		pg.data.len = sizeof(page);
		seq_frame(CT_PAGES, &pg.base);
	}
	zr.n_block = zr.n_offset = zr.n_length = 2;
	zr.block = zb;
	zr.offset = zo;
	zr.length = zl;
	seq_frame(CT_ZERO_RANGES, &zr.base);
	prog.normal_bytes = 8192;
	prog.normal_pages = 2;
	prog.zero_pages_skipped = 3;
	seq_frame(CT_PROGRESS, &prog.base);
	end.iteration = 1;
	end.bytes = 8192;
	seq_frame(CT_ITER_END, &end.base);
	st.data.data = state;
	st.data.len = sizeof(state);
	seq_frame(CT_STATE, &st.base);
	c.state_bytes = sizeof(state);
	if (sel & 0x80) {
		sw.length = 1000;
		seq_frame(CT_STATE_WRITTEN, &sw.base);
		c.state_bytes += sw.length;
	}
	c.iteration = 1;
	if (sel2 & 1) {
		/* Post-copy after the round: the keys of every piece (1 MiB:
		 * one a block), the set, COMPLETE once the destination said
		 * every page is in. */
		Rdmig__PostcopyKeys k = RDMIG__POSTCOPY_KEYS__INIT;
		Rdmig__PostcopyRanges r = RDMIG__POSTCOPY_RANGES__INIT;
		uint32_t kb[3] = { 0, 1, 2 }, rk[3] = { 11, 12, 13 }, rb[3] = { 0, 0, 2 };
		uint64_t kp[3] = { 0, 0, 0 }, ka[3] = { 0x7f0000000000ull, 0x7f0000100000ull,
							0x7f0000200000ull };
		uint64_t rf[3] = { 0, 5, 1 }, rc[3] = { 2, 11, 1 };

		k.piece_shift = 20;
		k.n_block = k.n_piece = k.n_addr = k.n_rkey = 3;
		k.block = kb; k.piece = kp; k.addr = ka; k.rkey = rk;
		seq_frame(CT_POSTCOPY_KEYS, &k.base);
		r.n_block = r.n_first = r.n_count = 3;
		r.block = rb; r.first = rf; r.count = rc; r.last = 1;
		seq_frame(CT_POSTCOPY_RANGES, &r.base);
	}
	seq_frame(CT_COMPLETE, &c.base);
	put(dir, name, seq, seq_len);
}

/* fuzz_pcset input: two blocks of 300 and 1 pages, a set, their keys. */
static void pcset(const char *dir)
{
	static const uint8_t in[] = {
		1, 43, 1, 0, 0,                 /* 2 blocks: 300 and 1 pages */
		0, 3,                           /* ranges: 3 */
		0, 0, 0, 10, 0,                 /* block 0, pages 0..9 */
		0, 20, 0, 200, 0,               /* block 0, pages 20..219 */
		1, 0, 0, 1, 0,                  /* block 1, page 0 */
		1, 20, 3,                       /* keys: 1 MiB pieces, 3 */
		0, 0, 0, 0, 0, 0, 0x7f, 0, 0, 0, 1, 0, 0, 0,
		0, 1, 0, 0, 0x10, 0, 0, 0x7f, 0, 0, 2, 0, 0, 0,
		1, 0, 0, 0, 0, 1, 0, 0x7f, 0, 0, 3, 0, 0, 0,
	};

	put(dir, "two-blocks", in, sizeof(in));
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 5) {
		fprintf(stderr, "usage: %s PRIVDATA_DIR CODEC_DIR [DEST_DIR [PCSET_DIR]]\n",
			argv[0]);
		return 2;
	}
	privdata(argv[1]);
	codec(argv[2]);
	if (argc >= 4) {
		dest_sequence(argv[3], "dynamic", 0x02, 0);
		dest_sequence(argv[3], "pin-all", 0x03, 0);
		dest_sequence(argv[3], "mapped", 0x12, 0);
		dest_sequence(argv[3], "state-ring", 0x82, 0);
		dest_sequence(argv[3], "postcopy", 0x02, 1);
	}
	if (argc == 5)
		pcset(argv[4]);
	return 0;
}
