/* Fuzzes the mapping from a block name (chosen by the peer) to a file name
 * in migrate-recv's --ram-dir: whatever the name, the file stays in the
 * directory, never takes a name migrate-recv uses for its own files, and
 * two names never share a file (the mapping decodes back to the name).
 *
 * Input: the name's bytes (cut at the first NUL, as a C string is). */
#include <assert.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t decode(const char *in, char *out)
{
	size_t o = 0;

	while (*in) {
		if (*in == '%') {
			char hex[3] = { in[1], in[2], 0 };

			assert(in[1] && in[2]);
			out[o++] = (char)strtol(hex, NULL, 16);
			in += 3;
		} else {
			out[o++] = *in++;
		}
	}
	out[o] = '\0';
	return o;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !strcmp(s + a - b, suffix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[1024], file[NAME_MAX + 1], back[NAME_MAX + 1];

	if (size >= sizeof(name))
		size = sizeof(name) - 1;
	memcpy(name, data, size);
	name[size] = '\0';
	if (cli_block_file_name(name, file, sizeof(file)))
		return 0;
	assert(strlen(file) <= NAME_MAX && file[0]);
	assert(!strchr(file, '/') && file[0] != '.');
	assert(!ends_with(file, ".incomplete") && !ends_with(file, ".part"));
	decode(file, back);
	assert(!strcmp(back, name));
	return 0;
}
