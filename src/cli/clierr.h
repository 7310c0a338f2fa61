/* How the modules behind the commands report a failure to their caller,
 * the way the library does (struct rd_err): a negative errno (or an exit
 * code) returned, with one line in a struct cli_err the caller owns and
 * passes down.  Every such message has room for CLI_ERR_MAX bytes, at any
 * depth, so nobody picks a size.  Kept apart from cli.h, which the
 * commands' modules sit on, so that the modules cli.c itself uses
 * (safeopen.h) can report the same way without including what is above
 * them. */
#ifndef RDMIG_CLI_CLIERR_H
#define RDMIG_CLI_CLIERR_H

#include <stddef.h>

/* A message of ours may hold a nested one and two paths (PATH_MAX each). */
#define CLI_ERR_MAX 8192

/* 8 KiB: at home on a main thread's stack, not on a worker's with a small
 * one (the dirty pool keeps its workers' on the heap), and never across a
 * socket as it is (the throttle keeper sends a message of its own size). */
struct cli_err {
	char msg[CLI_ERR_MAX];
};

/* Writes a message into @e (NULL: the caller does not want it) and returns
 * @code, so that a failure is one line: `return cli_err_set(e, -EINVAL, ...)`. */
int cli_err_set(struct cli_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* At the library's edge, in a callback that reports into (@buf, @len)
 * (rdmig.h): @e's message when @code is a failure.  Returns @code. */
int cli_err_give(int code, const struct cli_err *e, char *buf, size_t len);

#endif
