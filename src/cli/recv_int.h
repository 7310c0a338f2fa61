/* recv_int: migrate-recv's private state, shared by the files of the
 * command.
 *
 * recv.c is the driver (set-up, the loop, teardown).  Below it, each file
 * is a job of its own that never calls back up:
 *   recv_ctl     cancellation, the control socket, the signals
 *   recv_listen  the listener, and the limits on handshakes
 *   recv_mig     one connection's lifetime: a handshake, then a migration,
 *                its end and its report
 *   recv_admit   admitting a source that proved itself
 *   recv_files   the files of one migration (and the ends made at set-up)
 *   recv_room    what the image files may still claim of their filesystems
 *   recv_pcsock  --postcopy-socket: a VMM's memory and userfaultfd
 *   recv_opts    the command line
 * Types only; nothing outside migrate-recv includes it. */
#ifndef RDMIG_CLI_RECV_INT_H
#define RDMIG_CLI_RECV_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <ev.h>

#include "cli.h"
#include "ends.h"

struct ctl_server;
struct pcsock;
struct devstate;

struct recv_opts {
	char host[256], port[16];
	int have_addr;
	struct cli_ram *rams;   /* --ram: mapped up front when the file exists */
	unsigned nrams;
	const char *ram_dir, *state_out, *control, *qmp;
	const char *postcopy_socket; /* a VMM hands its memory over there */
	struct qemu_id qemu;        /* --qmp-pid, --qmp-uuid */
	int json, daemon, verbose, no_start, use_existing, trusted;
	uint64_t timeout_s, channels, max_migrations, max_handshakes;
	uint64_t max_image, pinned_cap, total_image, total_pinned, max_state;
	int have_max_migrations, have_totals;
	uint8_t *key;
	size_t key_len;
};

struct app;

/* One accepted connection: a handshake, then (once admitted) a migration
 * with its files. */
struct mig {
	struct app *app;
	struct mig *next;
	unsigned id;            /* daemon: the N of DIR/N, from admission on; else 0 */
	struct rdmig_dest *d;
	ev_io io;               /* the handle's one fd (rdmig_dest_fd) */
	ev_timer timer;
	bool linked;            /* on app->migs and counted */
	bool admitted;          /* the source proved itself: files are ours to touch */
	bool set_checked;       /* every --ram block was announced */
	uint64_t t0;
	char peer[80];
	char dir[2048];         /* where blocks named by the source go */
	struct cli_ram *files;  /* every block file of this migration */
	unsigned nfiles;
	struct devstate *ds;    /* where the device state goes, from admission on */
	bool usage_err;         /* the failure is this side's configuration */
	bool discard;           /* daemon: failed, its files give their space back */
	bool handed_over;       /* the source holds the confirmation: the image
				 * is the only copy, whatever happens next */
	uint64_t image_bytes;   /* from admission: counted against the totals */
	uint64_t pin_bytes;     /* ... the most it may pin */
	uint64_t state_room;    /* ... the device state it may write to a file */
	dev_t state_dev;        /* ... on this filesystem */
	bool final;             /* refused after it proved itself: single mode ends */
};

struct app {
	struct recv_opts o;
	struct ev_loop *loop;
	struct rdmig_listener *l;
	ev_io listen_w;
	ev_signal sigs[3];
	struct ctl_server *ctl;
	struct pcsock *pcs;      /* --postcopy-socket's VMM, once attached */
	struct dst_ends e;      /* the blocks mapped up front, and where state goes */
	struct mig *migs;       /* accepted connections, newest first */
	/* The handle of a request turned away as malformed, of no common
	 * version or keyless, kept while more requests wait: the next one
	 * uses it, so a flood of bad requests does not make and fill a
	 * handle's control rings each (rdmig(3): the handle may accept
	 * again after those).  An idle daemon keeps none. */
	struct mig *spare;
	unsigned handshakes;    /* of which not admitted yet */
	unsigned admitted;
	unsigned next_id;
	char state_real[PATH_MAX + 8]; /* --state-out, resolved, when in --ram-dir */
	int exit_code;
	bool ended;             /* single mode: the run's outcome is decided */
	bool signalled;         /* SIGINT, SIGTERM or SIGHUP came */
	struct cli_bar bar;
};

#endif
