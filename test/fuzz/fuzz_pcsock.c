/* Fuzzes the hand-over message a VMM sends migrate-recv's
 * --postcopy-socket (src/cli/pcsock_msg.c): whatever the bytes and the
 * count of fds, the decoder returns, and what it accepts is in range:
 * regions that are whole pages, named, that neither wrap nor overlap.
 *
 * The same bytes, up to a NUL, are read as the device state's header a
 * VMM parses (pcs_state_parse): what it accepts is decimal and in range.
 *
 * Input: the first byte is the count of fds that came with the message,
 * the rest the message. */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "pcsock_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct pcs_msg m;
	struct cli_err err;
	unsigned i, j;

	char line[64];
	uint64_t n;

	if (!size)
		return 0;
	if (size - 1 < sizeof(line)) {
		memcpy(line, data + 1, size - 1);
		line[size - 1] = '\0';
		if (!pcs_state_parse(line, 1u << 30, &n, &err)) {
			char back[PCS_STATE_LINE_MAX];

			assert(n <= 1u << 30);
			pcs_state_line(back, n);
			assert(!strncmp(back, line, strlen(line)) && back[strlen(line)] == '\n');
		}
	}
	if (pcs_decode((const char *)data + 1, size - 1, data[0], &m, &err))
		return 0;
	assert(m.n >= 1 && m.n <= PCS_MAX_REGIONS && data[0] == m.n + 1);
	assert(pcs_complete((const char *)data + 1, size - 1));
	for (i = 0; i < m.n; i++) {
		const struct pcs_region *r = &m.r[i];

		assert(r->name[0] && strlen(r->name) < sizeof(r->name));
		assert(r->size && !(r->size % PCS_PAGE) && !(r->addr % PCS_PAGE));
		assert(!(r->offset % PCS_PAGE) && r->addr && r->addr + r->size > r->addr);
		for (j = 0; j < i; j++)
			assert(r->addr >= m.r[j].addr + m.r[j].size ||
			       m.r[j].addr >= r->addr + r->size);
	}
	return 0;
}
