/* Device state through standard input and output ("-"): the source reads
 * standard input whole when it is opened and sends it after the memory;
 * the destination writes standard output as the state arrives. */
#include "devstate.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "devstate_int.h"

static const struct devstate_ops stdin_ops = {
	.takes_state = true,
	.bytes = ds_slurp_bytes,
	.read = ds_slurp_read,
};

int ds_src_stdin(struct devstate **out, struct cli_err *err)
{
	int rc = ds_new(out, sizeof(**out), &stdin_ops, 0, err);

	if (!rc)
		rc = ds_slurp(*out, 0);
	return rc ? cli_err_set(err, rc, "cannot read state file -: %s", strerror(-rc)) : 0;
}

static int stdout_write(struct devstate *d, const void *data, size_t len, struct cli_err *err)
{
	(void)d;
	return ds_write_fd(1, data, len, "the state", err);
}

static int stdout_commit(struct devstate *d, struct cli_err *err)
{
	(void)d;
	if (fflush(stdout))
		return cli_err_set(err, -EIO, "cannot write the state to standard output: %s",
				   strerror(errno));
	return 0;
}

static const struct devstate_ops stdout_ops = {
	.takes_state = true,
	.write = stdout_write,
	.commit = stdout_commit,
};

int ds_dst_stdout(struct devstate **out, struct cli_err *err)
{
	return ds_new(out, sizeof(**out), &stdout_ops, 0, err);
}
