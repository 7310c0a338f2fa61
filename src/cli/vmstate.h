/* A QEMU guest's device state, carried by rdmig's state stream while QEMU's
 * own migration machinery produces and consumes it.
 *
 * With x-ignore-shared on, QEMU's `migrate` skips the RAM blocks that live
 * in shared backends (rdmig carries those) and writes everything else, a
 * few hundred KiB, to the fd it is given.  The source side hands QEMU the
 * write end of a pipe and reads the stream as QEMU writes it: no temporary
 * file, no size known in advance.  The destination side hands its QEMU
 * (started with -incoming defer) the read end of another pipe with
 * `migrate-incoming` and writes what arrives into it.
 *
 * The capability is restored to what it was before, whatever the outcome:
 * left on, a later QEMU migration of this guest would silently skip its RAM.
 *
 * Functions return 0 or a negative errno with one line in @err (which may
 * be NULL); none prints or exits. */
#ifndef RDMIG_CLI_VMSTATE_H
#define RDMIG_CLI_VMSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct qmp;
struct vmstate;

/* Either side, while the guest still runs (or waits): x-ignore-shared on,
 * a pipe, QEMU's end handed over with getfd, so that after `stop` only one
 * command remains (vms_begin).  @source: QEMU will write the pipe. */
int vms_prepare(struct vmstate **out, struct qmp *q, bool source, char *err,
		size_t errlen);
/* Source: `migrate` to the pipe (the guest is stopped); destination:
 * `migrate-incoming` from it.  Once only: later calls return 0. */
int vms_begin(struct vmstate *v, char *err, size_t errlen);
/* The pipe's read end, for poll(): readable when QEMU wrote something. */
int vms_fd(const struct vmstate *v);
/* Reads what QEMU wrote: the bytes read, 0 once QEMU closed the pipe,
 * -EAGAIN when nothing is there yet. */
ssize_t vms_read(struct vmstate *v, void *buf, size_t len, char *err, size_t errlen);
/* After end of stream: QEMU's "completed", or why it failed. */
int vms_save_finish(struct vmstate *v, int timeout_ms, char *err, size_t errlen);

/* Writes all of @data, waiting at most @timeout_ms for QEMU to read. */
int vms_write(struct vmstate *v, const void *data, size_t len, int timeout_ms,
	      char *err, size_t errlen);
/* Ends the stream and waits until QEMU has loaded it ("completed"). */
int vms_load_finish(struct vmstate *v, int timeout_ms, char *err, size_t errlen);

/* Either side, any time: closes the pipe, cancels a source QEMU's migration
 * still under way, restores the capability, frees @v.  NULL is fine. */
void vms_close(struct vmstate *v);

#endif
