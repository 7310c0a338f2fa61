/* What a command migrates from or into, built from its options: the RAM
 * blocks, the workload writing them (source, live) and the device-state
 * endpoint.  Either files and a process, or a QEMU guest over QMP: this is
 * the one place that tells them apart; migrate-send and migrate-recv drive
 * what it builds without knowing which.
 *
 * Functions return 0 or a negative errno with one line in @err, the option
 * it concerns first ("--qmp SOCK: ..."); none prints or exits. */
#ifndef RDMIG_CLI_ENDS_H
#define RDMIG_CLI_ENDS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "cli.h"
#include "devstate.h"
#include "dirty.h"

struct qmp;
struct workload;
struct devstate;

/* What migrate-send's options name. */
struct src_spec {
	const char *qmp;        /* a QEMU's QMP socket, or NULL */
	struct qemu_id qemu;    /* ... and which QEMU must answer on it */
	const char *state_in;   /* --state-in FILE or "-", or NULL */
	pid_t pid;              /* --live --pid */
	bool live;
	struct dirty_opts track; /* --dirty-tracking */
	bool throttle;          /* --auto-converge: the workload may be slowed */
	int timeout_ms;
};

struct src_ends {
	struct qmp *q;          /* QEMU, when there is one */
	struct cli_ram *rams;   /* --ram's, or QEMU's guest RAM; mapped */
	unsigned nrams;
	struct workload *wl;    /* live only */
	struct devstate *ds;    /* always (maybe without state) */
};

/* Takes over @rams (from --ram; QEMU's are added), maps them, and opens the
 * workload and the device-state endpoint. */
int ends_open_source(struct src_ends *e, const struct src_spec *s, struct cli_ram *rams,
		     unsigned nrams, struct cli_err *err);
void ends_close_source(struct src_ends *e);

/* What migrate-recv's options name. */
struct dst_spec {
	const char *qmp;        /* a QEMU waiting with -incoming defer, or NULL */
	struct qemu_id qemu;    /* ... and which QEMU must answer on it */
	bool use_existing;      /* --use-existing: existing --ram files are ours */
	bool start;             /* QEMU: cont once loaded (not --no-start) */
	bool state_sink;        /* a file or standard output takes device state */
	uint64_t max_state;     /* device state taken at most (0: no limit) */
	int timeout_ms;
};

struct dst_ends {
	struct qmp *q;
	struct cli_ram *rams;   /* mapped now: QEMU's, or existing --ram files;
				 * the others are made per migration */
	unsigned nrams;
	bool markers;           /* image files get .incomplete markers (not QEMU's:
				 * QEMU runs only once the migration completed) */
	bool takes_state;       /* a source's device state has somewhere to go */
	uint64_t max_state;
	bool start;
	int timeout_ms;
	ds_hand_fn vmm_hand;    /* --postcopy-socket: the VMM takes the state */
	void *vmm_ctx;
};

/* Takes over @rams (from --ram; with --qmp and none given, QEMU's guest RAM
 * is found) and maps the ones that exist already. */
int ends_open_dest(struct dst_ends *e, const struct dst_spec *s, struct cli_ram *rams,
		   unsigned nrams, struct cli_err *err);
/* The VMM of --postcopy-socket takes every migration's device state,
 * handed to @hand(@ctx) whole (ds_dst_vmm). */
void ends_dest_vmm(struct dst_ends *e, ds_hand_fn hand, void *ctx);
/* One migration's device-state endpoint: QEMU's, the VMM's, or the file
 * @path ("-": standard output, NULL: none). */
int ends_dest_state(const struct dst_ends *e, const char *path, struct devstate **out,
		    struct cli_err *err);
void ends_close_dest(struct dst_ends *e);

#endif
