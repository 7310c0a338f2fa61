/* How the modules behind the commands report a failure to their caller:
 * a negative errno (or an exit code) returned, with one line in a buffer
 * the caller owns.  Kept apart from cli.h, which the commands' modules sit
 * on, so that the modules cli.c itself uses (safeopen.h) can report the
 * same way without including what is above them. */
#ifndef RDMIG_CLI_CLIERR_H
#define RDMIG_CLI_CLIERR_H

#include <stddef.h>

/* Writes a message into @err (when it has room) and returns @code. */
int cli_errf(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
