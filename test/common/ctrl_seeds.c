#include "ctrl_seeds.h"

#include <errno.h>
#include <stdbool.h>

#include "codec.h"

/* The credits every seed carries: not zero, so the field is exercised. */
#define SEED_CREDITS 3

static int block_map_resp(bool resume, void *buf, size_t cap, struct rd_err *err)
{
	static uint8_t token[16] = "0123456789abcdef";
	Rdmig__BlockDest d[2] = { RDMIG__BLOCK_DEST__INIT, RDMIG__BLOCK_DEST__INIT };
	Rdmig__BlockDest *dp[2] = { &d[0], &d[1] };
	Rdmig__BlockMapResp m = RDMIG__BLOCK_MAP_RESP__INIT;

	d[0].base_addr = 0x7f1234560000ull; d[0].rkey = 77; d[0].zeroed = 1;
	d[1].base_addr = 0x7f9900000000ull;
	m.n_blocks = 2; m.blocks = dp; m.pinned_cap = 1ull << 30;
	m.postcopy_channels = 2; m.channel_port = 4791; m.channel_token = 0x5eed;
	if (resume) {
		m.resume_token.data = token;
		m.resume_token.len = sizeof(token);
	}
	return ctrl_encode(CT_BLOCK_MAP_RESP, SEED_CREDITS, &m.base, buf, cap, err);
}

int ctrl_seed_resume(void *buf, size_t cap, struct rd_err *err)
{
	return block_map_resp(true, buf, cap, err);
}

int ctrl_seed(unsigned type, void *buf, size_t cap, struct rd_err *err)
{
	Rdmig__BlockDesc b[2] = { RDMIG__BLOCK_DESC__INIT, RDMIG__BLOCK_DESC__INIT };
	Rdmig__BlockDesc *bp[2] = { &b[0], &b[1] };
	Rdmig__BlockMapReq bmq = RDMIG__BLOCK_MAP_REQ__INIT;
	uint32_t blk[3] = { 0, 1, 1 }, keys[3] = { 0x1234, 0x5678, 0x9abc };
	uint64_t idx[3] = { 0, 5, 300 }, len[3] = { 4096, 8192, 1 << 20 };
	uint64_t first[3] = { 1, 5, 300 };
	Rdmig__RegisterReq rq = RDMIG__REGISTER_REQ__INIT;
	Rdmig__RegisterResp rr = RDMIG__REGISTER_RESP__INIT;
	Rdmig__ZeroRanges z = RDMIG__ZERO_RANGES__INIT;
	Rdmig__IterEnd ie = RDMIG__ITER_END__INIT;
	Rdmig__IterAck ia = RDMIG__ITER_ACK__INIT;
	Rdmig__State st = RDMIG__STATE__INIT;
	uint8_t bytes[32] = "0123456789abcdef0123456789abcdef";
	ProtobufCBinaryData dig[2] = { { 32, bytes }, { 8, bytes } };
	Rdmig__Complete c = RDMIG__COMPLETE__INIT;
	Rdmig__CompleteAck ca = RDMIG__COMPLETE_ACK__INIT;
	Rdmig__Error er = RDMIG__ERROR__INIT;
	Rdmig__AuthChallenge ac = RDMIG__AUTH_CHALLENGE__INIT;
	Rdmig__AuthResponse ar = RDMIG__AUTH_RESPONSE__INIT;
	Rdmig__PinKeys pin = RDMIG__PIN_KEYS__INIT;
	Rdmig__Pages pg = RDMIG__PAGES__INIT;
	Rdmig__Progress pr = RDMIG__PROGRESS__INIT;
	Rdmig__StateRing sr = RDMIG__STATE_RING__INIT;
	Rdmig__StateWritten sw = RDMIG__STATE_WRITTEN__INIT;
	Rdmig__StateTaken stk = RDMIG__STATE_TAKEN__INIT;
	Rdmig__PostcopyKeys pk = RDMIG__POSTCOPY_KEYS__INIT;
	Rdmig__PostcopyRanges prn = RDMIG__POSTCOPY_RANGES__INIT;
	Rdmig__PostcopyDone pd = RDMIG__POSTCOPY_DONE__INIT;
	Rdmig__PostcopyResume pq = RDMIG__POSTCOPY_RESUME__INIT;
	Rdmig__PostcopyResumed pa = RDMIG__POSTCOPY_RESUMED__INIT;
	uint64_t pglen[2] = { 16, 16 }, paddr[3] = { 0x7f0000000000ull, 0x7f0001000000ull,
						      0x7f8000000000ull };
	ProtobufCMessage *m;

	switch (type) {
	case CT_BLOCK_MAP_REQ:
		b[0].name = "pc.ram"; b[0].length = 1 << 24; b[0].page_size = 4096;
		b[1].name = "vram"; b[1].length = 12345; b[1].page_size = 2 << 20;
		bmq.n_blocks = 2; bmq.blocks = bp; bmq.chunk_shift = 20;
		m = &bmq.base;
		break;
	case CT_BLOCK_MAP_RESP:
		return block_map_resp(false, buf, cap, err);
	case CT_REGISTER_REQ:
		rq.req_id = 9;
		rq.n_chunk_block = rq.n_chunk_index = 3;
		rq.chunk_block = blk; rq.chunk_index = idx;
		rq.n_release_block = rq.n_release_index = 1;
		rq.release_block = blk; rq.release_index = idx;
		m = &rq.base;
		break;
	case CT_REGISTER_RESP:
		rr.req_id = 9; rr.n_rkeys = 3; rr.rkeys = keys;
		m = &rr.base;
		break;
	case CT_ZERO_RANGES:
		z.n_block = z.n_offset = z.n_length = 3;
		z.block = blk; z.offset = idx; z.length = len;
		m = &z.base;
		break;
	case CT_ITER_END:
		ie.iteration = 2; ie.bytes = 1 << 26;
		m = &ie.base;
		break;
	case CT_ITER_ACK:
		ia.iteration = 2;
		m = &ia.base;
		break;
	case CT_STATE:
		st.data.data = bytes; st.data.len = sizeof(bytes);
		m = &st.base;
		break;
	case CT_COMPLETE:
		c.state_bytes = 32; c.iteration = 3; c.n_digests = 2; c.digests = dig;
		m = &c.base;
		break;
	case CT_COMPLETE_ACK:
		ca.ok = 1; ca.n_digests = 2; ca.digests = dig;
		m = &ca.base;
		break;
	case CT_ERROR:
		er.code = -28; er.message = "block \"ram1\": no space left on device";
		/* A destination's word (since 0.3.0): the fuzzers start from
		 * an ERROR that has every field. */
		er.guest_never_ran = 1;
		m = &er.base;
		break;
	case CT_CREDIT:
	case CT_KEEPALIVE:
		m = NULL; /* header only */
		break;
	case CT_AUTH_CHALLENGE:
		ac.nonce.data = bytes; ac.nonce.len = 32;
		m = &ac.base;
		break;
	case CT_AUTH_RESPONSE:
		ar.mac.data = bytes; ar.mac.len = 32;
		m = &ar.base;
		break;
	case CT_PIN_KEYS:
		pin.n_block = pin.n_piece = pin.n_rkey = 3;
		pin.block = blk; pin.piece = idx; pin.rkey = keys;
		m = &pin.base;
		break;
	case CT_PAGES:
		/* Two runs of 16 bytes: valid on the wire, whole pages are the
		 * destination's check. */
		pg.n_block = pg.n_offset = pg.n_length = 2;
		pg.block = blk; pg.offset = idx; pg.length = pglen;
		pg.data.data = bytes; pg.data.len = 32;
		m = &pg.base;
		break;
	case CT_PROGRESS:
		pr.normal_bytes = 1 << 26; pr.normal_pages = 1 << 14; pr.zero_pages_skipped = 7;
		m = &pr.base;
		break;
	case CT_STATE_RING:
		sr.addr = 0x7f5500000000ull; sr.rkey = 99; sr.size = 4u << 20;
		m = &sr.base;
		break;
	case CT_STATE_WRITTEN:
		sw.length = 512u << 10;
		m = &sw.base;
		break;
	case CT_STATE_TAKEN:
		stk.taken = 3u << 20;
		m = &stk.base;
		break;
	case CT_POSTCOPY_KEYS:
		pk.piece_shift = 24;
		pk.n_block = pk.n_piece = pk.n_addr = pk.n_rkey = 3;
		pk.block = blk; pk.piece = idx; pk.addr = paddr; pk.rkey = keys;
		m = &pk.base;
		break;
	case CT_POSTCOPY_RANGES:
		prn.n_block = prn.n_first = prn.n_count = 3;
		prn.block = blk; prn.first = first; prn.count = first; prn.last = 1;
		m = &prn.base;
		break;
	case CT_POSTCOPY_DONE:
		pd.pages = 300; pd.fault_pages = 12; pd.background_pages = 288;
		m = &pd.base;
		break;
	case CT_POSTCOPY_RESUME:
		pq.pages = 300;
		m = &pq.base;
		break;
	case CT_POSTCOPY_RESUMED:
		pa.pages_left = 100; pa.fault_pages = 20; pa.background_pages = 180;
		pa.channel_port = 4792; pa.channel_token = 0x5eed5;
		m = &pa.base;
		break;
	default:
		return rd_err_set(err, -ENOENT, "no seed for control message type %u "
				  "in test/common/ctrl_seeds.c", type);
	}
	return ctrl_encode(type, SEED_CREDITS, m, buf, cap, err);
}
