/* Fuzzes what the control socket reads from a client: line splitting
 * (ctl_lines) over reads of arbitrary sizes, and each line's JSON parsing
 * and dispatch (ctl_dispatch), the way migrate-send and migrate-recv run
 * them.  The handler looks at the request the way theirs do.
 *
 * Input: byte 0 = read size (1..256), the rest = what the client sends. */
#include <assert.h>
#include <string.h>

#include "control.h"

#define CAP 4096 /* as the server's per-client buffer */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct json_object *handler(void *ctx, const char *cmd, struct json_object *req)
{
	struct json_object *v;

	(void)ctx;
	assert(cmd && json_object_is_type(req, json_type_object));
	if (!strcmp(cmd, "set") && json_object_object_get_ex(req, "max-bandwidth", &v))
		return json_object_is_type(v, json_type_int) && json_object_get_int64(v) >= 0 ?
		       ctl_return(NULL) : ctl_error("max-bandwidth must be a non-negative integer");
	if (!strcmp(cmd, "status"))
		return ctl_return(NULL);
	return NULL;
}

static int on_line(void *ctx, const char *line)
{
	struct json_object *rep = ctl_dispatch(line, handler, ctx);
	const char *text;

	assert(rep);
	assert(strlen(line) < CAP);
	text = json_object_to_json_string_ext(rep, JSON_C_TO_STRING_PLAIN);
	/* A reply is one line whatever the request held. */
	assert(text && !strchr(text, '\n'));
	json_object_put(rep);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char buf[CAP];
	size_t len = 0, step;

	if (size < 1)
		return 0;
	step = (size_t)data[0] % 256 + 1;
	data++;
	size--;
	while (size) {
		size_t n = step < size ? step : size;

		if (n > CAP - len)
			n = CAP - len;
		memcpy(buf + len, data, n);
		len += n;
		data += n;
		size -= n;
		if (ctl_lines(buf, &len, CAP, on_line, NULL))
			break; /* the server drops such a client */
		assert(len < CAP && !memchr(buf, '\n', len));
	}
	return 0;
}
