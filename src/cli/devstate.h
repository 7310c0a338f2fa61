/* The device state, at either end: where the source takes it from (a file,
 * standard input, or the QEMU it migrates) and where the destination puts
 * it (a file, standard output, or the QEMU waiting for the guest), with the
 * steps the commands take around the switch-over.  The commands drive an
 * endpoint without knowing which kind it is.
 *
 * Source, in order:
 *   ds_prepare  once connected, while the workload runs: for QEMU, its
 *               migration settings and the pipe (vmstate.h);
 *   ds_start    at convergence: QEMU starts its own migration, pre-copying
 *               what rdmig does not carry; bytes may come from here on;
 *   ds_stopped  whether the endpoint stopped the workload itself (QEMU:
 *               it stopped the guest and waits), and when;
 *   ds_release  after rdmig's last round: the rest of the state comes;
 *   ds_read     until end of stream;
 *   ds_commit   the endpoint is done (QEMU: its migration completed).
 * Destination: ds_prepare at admission (QEMU: it must wait for an incoming
 * migration; a file: FILE.part is created), ds_write as bytes arrive,
 * ds_commit before the source is told it completed (synced; QEMU loaded it
 * and runs) and, in post-copy, at the switch too, where the guest runs
 * before the end (a kind that has nothing more to do the second time does
 * nothing), ds_finish once the source holds that (FILE.part becomes
 * FILE), ds_abort on failure.  ds_close always.
 *
 * Functions return 0 or a negative errno with one line in @err; none
 * prints or exits. */
#ifndef RDMIG_CLI_DEVSTATE_H
#define RDMIG_CLI_DEVSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clierr.h"

struct qmp;
struct devstate;

/* The kinds of endpoint, one file each (devstate_int.h says how to add
 * one).  The file at @path, read whole when opened (source), or written
 * through @path.part (destination): */
int ds_src_file(struct devstate **out, const char *path, struct cli_err *err);
int ds_dst_file(struct devstate **out, const char *path, struct cli_err *err);
/* Standard input, read whole when opened; standard output: */
int ds_src_stdin(struct devstate **out, struct cli_err *err);
int ds_dst_stdout(struct devstate **out, struct cli_err *err);
/* No device state: a source sends none; a destination takes none, and a
 * source that sends some fails. */
int ds_none(struct devstate **out, struct cli_err *err);
/* Hands @len bytes of device state at @data, the whole of it, to where
 * they go: 0 or a negative errno with @err. */
typedef int (*ds_hand_fn)(void *ctx, const void *data, size_t len, struct cli_err *err);
/* Held in memory and handed to @hand(@ctx) at the first ds_commit: the VMM
 * of --postcopy-socket, which needs the state before its vCPUs run. */
int ds_dst_vmm(struct devstate **out, ds_hand_fn hand, void *ctx, struct cli_err *err);
/* The device state of the QEMU behind @q (borrowed); at the destination it
 * was started with -incoming defer, and @start: `cont` it once loaded
 * (else it stays paused). */
int ds_src_qemu(struct devstate **out, struct qmp *q, int timeout_ms, struct cli_err *err);
int ds_dst_qemu(struct devstate **out, struct qmp *q, bool start, int timeout_ms,
		struct cli_err *err);

/* Whether this endpoint takes state at all (a destination without one
 * refuses the source's). */
bool ds_takes_state(const struct devstate *d);
/* Destination: the device state taken at most (0: no limit). */
void ds_limit(struct devstate *d, uint64_t max);
/* Source: the bytes it will send at most, announced to the destination (a
 * file's size, 0 without state), or UINT64_MAX when not known (QEMU).
 * Destination: the bytes taken so far. */
uint64_t ds_bytes(const struct devstate *d);

int ds_prepare(struct devstate *d, struct cli_err *err);
int ds_start(struct devstate *d, struct cli_err *err);
/* 1 with @stop_ms (CLOCK_MONOTONIC ms) once the endpoint stopped the
 * workload; 0 not yet; -ENOTSUP when it never does (the command stops the
 * workload itself); a negative errno when it failed. */
int ds_stopped(struct devstate *d, uint64_t *stop_ms, struct cli_err *err);
int ds_release(struct devstate *d, struct cli_err *err);
/* An fd that becomes readable when ds_read has bytes, or -1 when ds_read
 * never answers -EAGAIN. */
int ds_fd(const struct devstate *d);
/* Bytes read, 0 at end of stream, -EAGAIN when none are there yet (or not
 * released yet). */
ssize_t ds_read(struct devstate *d, void *buf, size_t len, struct cli_err *err);
int ds_write(struct devstate *d, const void *data, size_t len, struct cli_err *err);
int ds_commit(struct devstate *d, struct cli_err *err);
int ds_finish(struct devstate *d, struct cli_err *err);
/* After a failure: a destination guest that was started is paused again
 * (the source was not told, so it resumes its own); a half-written file
 * is removed.  What was done goes to @note ("" when nothing). */
void ds_abort(struct devstate *d, char *note, size_t len);
/* How the state was left, for a report ("; the guest runs here"), "" when
 * there is nothing to say. */
const char *ds_outcome(const struct devstate *d);
/* A destination guest: "running" or "paused" once committed; NULL for a
 * file. */
const char *ds_guest(const struct devstate *d);
/* Frees @d (NULL is fine); for QEMU its migration is cancelled if it still
 * runs and every setting goes back.  What could not be restored is
 * returned, with @err. */
int ds_close(struct devstate *d, struct cli_err *err);

#endif
