/* send_int: migrate-send's private state, shared by the files of the
 * command and included by nothing else.
 *
 * send.c is the driver: it sets up, and its libev loop's callbacks step
 * the library and hand what finished to the phase machine.  Each send_*.c
 * below it is a job of its own that never calls back up, listed here from
 * the top down:
 *   send_ctl     the control socket's commands (status, cancel, set, start)
 *   send_phase   the phase machine: connect, the rounds, the switch-over,
 *                the device state, COMPLETE
 *   send_fwd     the device state, from its end onto the library's stream
 *   send_policy  the convergence policy's limits and advice, giving up
 *   send_dirty   the workload's writes onto the library's dirty marks
 *   send_end     the failure record, and the end (reached once)
 *   send_report  the completed or failed event, the summary, the exit status
 *   send_events  the progress bar, the setup, state and iteration events
 *   send_loop    arming the library's timer, watching the device-state fd
 *   send_opts    the command line (struct send_opts), below this header
 * The struct is one per process (main's); each file changes the fields
 * its job owns and reads the rest. */
#ifndef RDMIG_CLI_SEND_INT_H
#define RDMIG_CLI_SEND_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include "cli.h"
#include "control.h"
#include "ends.h"
#include "rdmig.h"
#include "send_opts.h"

/* The page size blocks are added with, and dirty pages counted in. */
#define PAGE 4096u
/* Device state moves in pieces of this much between library steps. */
#define FWD_BUF (256u << 10)
/* How often a workload that stops itself is asked whether it has. */
#define STOP_POLL_S 0.002

/* What the control socket reports as "status". */
enum send_status {
	ST_SETUP, ST_PREPARED, ST_ACTIVE, ST_DEVICE, ST_COMPLETED, ST_FAILED, ST_CANCELLING,
	ST_CANCELLED,
};

/* Where the migration is: each phase says what it waits for. */
enum phase {
	PH_CONNECT,     /* rdma_cm, authentication, the block map */
	PH_PREPARED,    /* --defer: connected and admitted, waiting for start */
	PH_ROUND,       /* a pre-copy round while the workload runs */
	PH_CONVERGED,   /* converged, a round while the workload still runs on
			 * its way to the stop: before QEMU's migration for a
			 * guest held to the most throttle, or while QEMU takes
			 * longer than a round to stop the guest */
	PH_STOPPING,    /* waiting for the device-state end to stop the workload
			 * (QEMU pre-copies its own RAM, its bytes forwarded as
			 * they come, then stops the guest), with rounds
			 * (PH_CONVERGED) if it takes a while */
	PH_LAST_ROUND,  /* the workload stopped: the last dirty pages */
	PH_STATE,       /* the rest of the device state, to its end */
	PH_COMPLETE,    /* COMPLETE went: waiting for the confirmation */
	PH_POSTCOPY,    /* switched to post-copy: the destination's guest runs
			 * and reads what it lacks; waiting for POSTCOPY_DONE */
	PH_DONE,        /* succeeded or failed: the loop ends (stays last) */
};

/* The first failure, the one reported: later ones are its consequences. */
struct failure {
	enum cli_phase phase;
	bool local;             /* not the library's: the workload or its tracking */
	int rc;
	char msg[1100];
};

/* One migration, from the options to the exit code. */
struct sender {
	struct send_opts o;
	struct ev_loop *loop;
	struct rdmig_source *s;
	struct src_ends e;
	struct cli_bar bar;
	enum phase ph;
	enum send_status status;
	bool cancelled;
	bool start_asked;       /* --defer: the start command came */
	bool said_prepared;     /* ... and "prepared" was said */
	unsigned said_phases;   /* --json: a state event went for each bit's
				 * phase (the first is no change, but is said) */
	bool begun;             /* the workload may have been touched */
	bool untouched;         /* after a failure: it never was */
	uint64_t prepared_ms;   /* --defer: when it began to wait for start */
	uint64_t waited_ms;     /* ... and how long it waited, once started */
	bool need_prepare;      /* the device-state end is not ready yet */
	bool pc_switch;         /* the state goes, then post-copy, not COMPLETE */
	bool pc_handed;         /* post-copy began: the workload is the
				 * destination's, never resumed here ... */
	bool pc_never_ran;      /* ... unless the destination said, failing,
				 * that its guest never ran */
	bool kicked;            /* the library runs again at once: an operation
				 * just started, its timeout may not say so */

	ev_io src_io, ds_io;
	ev_timer src_timer, stop_timer;
	ev_signal sigs[3];
	struct ctl_server *ctl;

	/* device state on its way: read from the endpoint, not yet queued */
	char *fwd;
	size_t fwd_len, fwd_off;
	bool ds_eof;

	uint64_t max_bandwidth, max_downtime;
	bool downtime_promised; /* --max-downtime or `set` gave it: exit 12 over it */
	bool sw_promised;       /* ... as it was when the switch-over was decided */
	uint64_t stop_ms;       /* when the workload stopped (downtime start) */
	bool stopped;           /* ... it has (PH_CONVERGED, PH_STOPPING) */
	bool ds_started;        /* the device-state end was asked to stop it */
	uint64_t stop_deadline; /* by when it must have stopped */
	uint64_t next_round_at; /* PH_STOPPING: a round to keep up, if not yet */
	uint64_t state_deadline; /* PH_STATE: by when more state must come */
	uint64_t t_clear;       /* the last clear of the dirty bits */
	uint64_t collect_us;    /* the last collect of the dirty pages took */
	uint64_t clear_us;      /* ... and the last clear */
	uint64_t t_mark;        /* a phase's start, for downtime-parts */
	uint64_t iterations;    /* rounds while the workload ran */
	/* the downtime's parts (ms): until the last round began, the last
	 * round, the device state, the destination's confirmation */
	uint64_t dt_stop, dt_round, dt_state, dt_confirm, downtime_ms;
	/* after a switch to post-copy: from the switch to every page in (not
	 * downtime: the destination's guest runs), and why it switched
	 * ("postcopy-after", or the limit's name) */
	uint64_t dt_postcopy;
	const char *pc_reason;
	uint64_t dt_track_us;   /* of dt_stop: collecting the last pages */
	uint64_t switch_ms;     /* the switch-over's own cost, estimated */
	uint64_t switch_base;   /* ... its part measured before the rounds */
	uint64_t freeze_ms;     /* the longest stop of the workload at a round's end */

	/* The convergence policy's (the library's, rdmig_source_advice())
	 * last advice; and at the switch-over, why it came, the downtime it
	 * predicted and the throttle then.  The time limits as set now. */
	struct rdmig_advice adv;
	bool gave_up;           /* the advice gave up: exit 11 */
	char gave_up_msg[600];  /* ... and why */
	enum rdmig_reason sw_reason;
	uint64_t sw_expected;
	unsigned sw_throttle;
	uint64_t max_time_s, max_time_gib_s;

	/* progress bar of the current round */
	uint64_t iter_base, iter_planned, iter_t0, bar_ms;
	/* the last round, for the events and the keep-up rounds */
	uint64_t last_bytes, last_ms;

	struct failure f;
	bool failed;
	bool resumed;           /* after a failure: the workload runs again */
	struct cli_err resume_err; /* ... or why it could not */
	int exit_code;          /* main's, once the migration ended */
};

#endif
