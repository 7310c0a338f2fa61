/* qmp_int: what the QMP client's files share below its face (qmp.h):
 * deadlines that name what they waited for, and QEMU's JSON and text as
 * our messages take them.  qmp.c defines them; nothing outside the
 * client includes this. */
#ifndef RDMIG_CLI_QMP_INT_H
#define RDMIG_CLI_QMP_INT_H

#include <stddef.h>
#include <stdint.h>
#include <json-c/json.h>

#include "clierr.h"

/* What a read waits for, to name it when the deadline passes. */
struct qmp_waitfor {
	const char *what;
	uint64_t deadline;
	int ms;
};

/* A deadline @ms from now (0 or less: now). */
struct qmp_waitfor qmp_wait_for(const char *what, int ms);
/* Milliseconds left until @w's deadline, 0 once it passed. */
int qmp_ms_left(const struct qmp_waitfor *w);
/* @o's member @key when it is a string, else NULL. */
const char *qmp_jstr(struct json_object *o, const char *key);
/* QEMU's @text into @out, control characters made spaces and trailing
 * ones dropped. */
void qmp_one_line(char *out, size_t len, const char *text);
/* The same into @err; returns @code. */
int qmp_qerr_text(struct cli_err *err, int code, const char *text);

#endif
