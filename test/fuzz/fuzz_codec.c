/* libFuzzer target: control frames from an untrusted peer.  ctrl_decode must
 * never crash, leak or read past the frame, and whatever it accepts must
 * re-encode into a frame that decodes again to the same message (compared by
 * its canonical encoding).  Each frame is decoded three ways, which must
 * agree: into an arena sized for MSG_MAX (what ctrl does), with malloc (no
 * arena), and into an arena too small for most messages, so pieces from it
 * and from the malloc fallback mix in one message.  Build with
 * test/fuzz/build.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) do { if (!(c)) abort(); } while (0)
#define MSG_MAX 65536u
/* Canonical re-encoding can be a few bytes longer than a non-canonical
 * original (a one-element array sent unpacked), so the second pass gets
 * room to spare; no limit depends on msg_max except STATE's. */
#define RT_MAX (2 * MSG_MAX)

static uint8_t f2[RT_MAX], f3[RT_MAX];
static struct arena full, tiny;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ProtobufCMessage *m = NULL, *m2 = NULL, *m3 = NULL;
	struct ctrl_hdr h, h2, h3;
	struct rd_err e;
	int n2, n3;

	if (!full.size && (arena_init(&full, ctrl_arena_size(MSG_MAX), &e) ||
			   arena_init(&tiny, 256, &e)))
		abort();
	if (ctrl_decode(data, size, MSG_MAX, &full, &h, &m, &e)) {
		CHECK(m == NULL && e.msg[0]);
		CHECK(full.used == 0);
		CHECK(ctrl_decode(data, size, MSG_MAX, &tiny, &h3, &m3, &e) != 0);
		CHECK(m3 == NULL && tiny.used == 0);
		return 0;
	}
	CHECK(h.type > 0 && h.type < CT_TYPE_MAX);
	CHECK(size == CTRL_HDR_LEN + (size_t)h.len && size <= MSG_MAX);
	CHECK(ctrl_msg_check(h.type, m, MSG_MAX, &e) == 0);
	n2 = ctrl_encode(h.type, h.credits, m, f2, sizeof(f2), &e);
	CHECK(n2 >= CTRL_HDR_LEN);
	if (!m)
		CHECK(n2 == CTRL_HDR_LEN && !memcmp(f2, data, CTRL_HDR_LEN));
	CHECK(ctrl_decode(f2, (size_t)n2, RT_MAX, NULL, &h2, &m2, &e) == 0);
	CHECK(h2.type == h.type && h2.credits == h.credits);
	CHECK(!m == !m2);
	n3 = ctrl_encode(h2.type, h2.credits, m2, f3, sizeof(f3), &e);
	CHECK(n3 == n2 && !memcmp(f2, f3, (size_t)n2));
	ctrl_msg_free(NULL, m2);
	CHECK(ctrl_decode(data, size, MSG_MAX, &tiny, &h3, &m3, &e) == 0);
	CHECK(!m == !m3);
	n3 = ctrl_encode(h3.type, h3.credits, m3, f3, sizeof(f3), &e);
	CHECK(n3 == n2 && !memcmp(f2, f3, (size_t)n2));
	ctrl_msg_free(&tiny, m3);
	CHECK(tiny.used == 0);
	ctrl_msg_free(&full, m);
	CHECK(full.used == 0);
	return 0;
}
