#include "clierr.h"

#include <stdarg.h>
#include <stdio.h>

int cli_err_set(struct cli_err *e, int code, const char *fmt, ...)
{
	va_list ap;

	if (e) {
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}

int cli_err_give(int code, const struct cli_err *e, char *buf, size_t len)
{
	/* No message: the library's buffer stays as it was (it says the
	 * errno then), never a stale one. */
	if (code && buf && len && e->msg[0])
		snprintf(buf, len, "%s", e->msg);
	return code;
}
