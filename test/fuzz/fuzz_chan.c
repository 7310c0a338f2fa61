/* Fuzzes the data-channel admission rule (chan_admit): whatever a
 * connection request carries, a channel is admitted only with the right
 * token, from the control connection's peer, for a granted and unopened
 * index.
 *
 * Input: byte 0 = granted channels (mod 65), byte 1 bit 0 = same peer,
 * bit 1 = use the right token in the request's session id (else the
 * bytes say), bits 2..7 = the first post-copy channel's index, bytes
 * 2..9 = the mask of channels already open; the rest is the request's
 * private data. */
#include <assert.h>
#include <string.h>

#include "chan.h"
#include "privdata.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t token = 0x0123456789abcdefull;
	uint8_t priv[256];
	struct pd_request req;
	struct rd_err e;
	char note[256];
	unsigned granted, pc_first, idx;
	uint64_t open;
	bool same_peer;

	if (size < 10)
		return 0;
	granted = data[0] % 65;
	same_peer = data[1] & 1;
	pc_first = data[1] >> 2;
	memcpy(&open, data + 2, sizeof(open));
	size -= 10;
	if (size > sizeof(priv))
		size = sizeof(priv);
	memcpy(priv, data + 10, size);
	/* Half the inputs get the real token, so the later checks are reached. */
	if ((data[1] & 2) && size >= PD_REQUEST_LEN && !pd_decode_request(priv, size, &req, &e)) {
		req.session_id = token;
		pd_encode_request(&req, priv, sizeof(priv));
	}
	note[0] = '\0';
	idx = chan_admit(priv, size, token, granted, pc_first, same_peer, open, note,
			 sizeof(note));
	if (!idx) {
		assert(note[0]); /* a refusal always says why */
		return 0;
	}
	assert(!pd_decode_request(priv, size, &req, &e));
	assert(req.session_id == token && same_peer);
	assert(idx < granted && idx == req.channel && req.channels == granted);
	assert(!((open >> idx) & 1));
	/* Read from only when it says so, and only where post-copy's are. */
	assert(!!(req.caps & PD_CAP_POSTCOPY) == (idx >= pc_first));
	return 0;
}
