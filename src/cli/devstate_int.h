/* devstate_int: what a device-state endpoint is made of, shared by the face
 * (devstate.c) and the kinds of endpoint, one file each:
 *   devstate_file   a file: read whole at the source, written through
 *                   FILE.part at the destination
 *   devstate_stdio  standard input at the source, standard output at the
 *                   destination
 *   devstate_qemu   the QEMU migrated, at either end (vmstate.h)
 *   devstate_none   no device state at all
 *   devstate_pcsock the VMM of --postcopy-socket: held in memory, handed
 *                   over whole before it runs
 * A kind is a static const struct devstate_ops and a constructor declared
 * in devstate.h; the face dispatches through the table and keeps what
 * every kind shares (the release, --max-state, the bytes taken), so a new
 * kind (say a Cloud Hypervisor endpoint) is one new file.
 *
 * A kind's object starts with a struct devstate named d (ds_close frees
 * it as one), and gets back from it with ds_kind().  Types and the
 * face's helpers for the kinds only; nothing outside the endpoints
 * includes it. */
#ifndef RDMIG_CLI_DEVSTATE_INT_H
#define RDMIG_CLI_DEVSTATE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clierr.h"

struct devstate;

/* The kind's object of type @type around @ds (its member d). */
#define ds_kind(ds, type) ((type *)(void *)((char *)(ds) - offsetof(type, d)))

/* One kind of endpoint.  Each operation is devstate.h's of the same name;
 * a NULL one does what most kinds do, said on each line. */
struct devstate_ops {
	/* false: no device state at all (a destination refuses the source's). */
	bool takes_state;
	/* NULL: the bytes written so far (a destination). */
	uint64_t (*bytes)(const struct devstate *d);
	/* NULL: nothing to prepare, start, release, commit or finish. */
	int (*prepare)(struct devstate *d, struct cli_err *err);
	int (*start)(struct devstate *d, struct cli_err *err);
	/* NULL: -ENOTSUP, the endpoint never stops the workload. */
	int (*stopped)(struct devstate *d, uint64_t *stop_ms, struct cli_err *err);
	int (*release)(struct devstate *d, struct cli_err *err);
	/* NULL: -1, read never answers -EAGAIN once released. */
	int (*fd)(const struct devstate *d);
	/* NULL: -EAGAIN. */
	ssize_t (*read)(struct devstate *d, void *buf, size_t len, struct cli_err *err);
	/* Called once --max-state allowed @len more; NULL: "no state sink". */
	int (*write)(struct devstate *d, const void *data, size_t len, struct cli_err *err);
	int (*commit)(struct devstate *d, struct cli_err *err);
	int (*finish)(struct devstate *d, struct cli_err *err);
	/* @note is "" on entry; NULL: nothing to undo. */
	void (*abort)(struct devstate *d, char *note, size_t len);
	/* NULL: "" and NULL. */
	const char *(*outcome)(const struct devstate *d);
	const char *(*guest)(const struct devstate *d);
	/* Releases what the kind holds, not @d itself; NULL: nothing held. */
	int (*close)(struct devstate *d, struct cli_err *err);
};

/* What every endpoint has. */
struct devstate {
	const struct devstate_ops *ops;
	int timeout_ms;
	bool released;            /* source: ds_release was called */
	uint64_t written, max;    /* destination: state taken, and at most */
	/* A source whose state is read whole when it is opened (a file,
	 * standard input): sent from memory once released. */
	char *data;
	size_t len, off;
};

/* A zeroed object of @size bytes (a kind's, starting with its struct
 * devstate) for @ops, in *@out. */
int ds_new(struct devstate **out, size_t size, const struct devstate_ops *ops,
	   int timeout_ms, struct cli_err *err);
/* A source read whole: @fd read to its end into d->data.  0 or a negative
 * errno (no message: the caller names the file). */
int ds_slurp(struct devstate *d, int fd);
/* ... and its operations: the bytes held, and reading them once released. */
uint64_t ds_slurp_bytes(const struct devstate *d);
ssize_t ds_slurp_read(struct devstate *d, void *buf, size_t len, struct cli_err *err);
/* Writes all of @data to @fd; an error names @what. */
int ds_write_fd(int fd, const void *data, size_t len, const char *what, struct cli_err *err);

#endif
