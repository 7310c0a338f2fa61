/* QEMU's own migration, driven for rdmig: it carries what rdmig does not
 * (the device state, and QEMU's RAM outside the guest's shared backends:
 * VGA memory, ROMs) through a pipe, while rdmig carries the guest's RAM.
 *
 * With x-ignore-shared on, QEMU's `migrate` skips the RAM blocks that live
 * in shared, file-backed memory and writes everything else to the fd it is
 * given.  The source hands QEMU the write end of a pipe and reads the
 * stream as QEMU writes it; the destination hands its QEMU (started with
 * -incoming defer) the read end of another pipe with `migrate-incoming`
 * and writes into it what arrives.
 *
 * On the source, pause-before-switchover (QEMU 2.11 and later) lets QEMU
 * pre-copy its own RAM while the guest runs, stop the guest itself when
 * the rest fits its downtime, and wait ("pre-switchover") until
 * vms_release(): rdmig sends the last pages in that window, so neither
 * QEMU's RAM nor a QMP `stop` round trip sits in the downtime.
 *
 * Capabilities and parameters: QEMU's are read first and changed only as a
 * pipe migration needs (x-ignore-shared, events, pause-before-switchover
 * on; return-path, multifd, postcopy and the like off, since a one-way
 * pipe cannot carry them; mode normal; on the source a max-bandwidth that
 * does not throttle QEMU's own part).  A management layer's settings (a
 * libvirt sets pause-before-switchover, events, its own bandwidth) are put
 * back exactly as they were, whatever the outcome: left changed, a later
 * QEMU migration of this guest would silently skip its RAM.
 *
 * Functions return 0 or a negative errno with one line in @err (which may
 * be NULL); none prints or exits. */
#ifndef RDMIG_CLI_VMSTATE_H
#define RDMIG_CLI_VMSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clierr.h"

struct qmp;
struct vmstate;

/* Either side, while the guest still runs (or waits): capabilities and
 * parameters set, a pipe, QEMU's end handed over with getfd, so that only
 * vms_begin() remains.  @source: QEMU will write the pipe. */
int vms_prepare(struct vmstate **out, struct qmp *q, bool source, struct cli_err *err);
/* Source: `migrate` to the pipe; with pause-before-switchover the guest
 * still runs, QEMU stops it when its own pre-copy is done (vms_stopped),
 * without it (an old QEMU) it is stopped here first.  Destination:
 * `migrate-incoming` from the pipe (on QEMU 9.1 and later with
 * exit-on-error off: a state QEMU rejects is reported, and that QEMU stays
 * to be looked at).  Once only: later calls return 0. */
int vms_begin(struct vmstate *v, struct cli_err *err);
/* Source, after vms_begin, without waiting: 1 once the guest is stopped and
 * QEMU waits for vms_release, with when QEMU stopped it (our CLOCK_MONOTONIC
 * milliseconds, from QEMU's STOP event); 0 while QEMU's pre-copy goes on; a
 * negative errno when QEMU's migration failed. */
int vms_stopped(struct vmstate *v, uint64_t *stop_ms, struct cli_err *err);
/* Source: QEMU writes the rest (its last RAM, the device state) now. */
int vms_release(struct vmstate *v, struct cli_err *err);
/* The pipe's end, for poll(): readable (source) or writable (destination). */
int vms_fd(const struct vmstate *v);
/* Reads what QEMU wrote: the bytes read, 0 once QEMU closed the pipe,
 * -EAGAIN when nothing is there yet. */
ssize_t vms_read(struct vmstate *v, void *buf, size_t len, struct cli_err *err);
/* After end of stream: QEMU's "completed", or why it failed. */
int vms_save_finish(struct vmstate *v, int timeout_ms, struct cli_err *err);

/* Writes all of @data, waiting at most @timeout_ms for QEMU to read. */
int vms_write(struct vmstate *v, const void *data, size_t len, int timeout_ms,
	      struct cli_err *err);
/* Ends the stream and waits until QEMU has loaded it ("completed"). */
int vms_load_finish(struct vmstate *v, int timeout_ms, struct cli_err *err);

/* Either side, any time: closes the pipe, cancels a source QEMU's migration
 * in whatever state it is (pre-switchover included) and waits for it to
 * end, puts every capability and parameter back, frees @v.  NULL is fine.
 * Returns what could not be restored (0 when all was): the caller says so. */
int vms_close(struct vmstate *v, struct cli_err *err);

#endif
