/* send_opts: migrate-send's command line: its options, --help's text
 * and exit statuses, and the rules between options (a usage error says
 * which option to add or drop).  Of what the options name, only the key
 * file is read here; the RAM files, the process and QEMU are opened by
 * ends.h's, once the options hold together. */
#ifndef RDMIG_CLI_SEND_OPTS_H
#define RDMIG_CLI_SEND_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cli.h"
#include "dirty.h"

struct send_opts {
	char host[256], port[16];
	int have_addr;
	struct cli_ram *rams;
	unsigned nrams;
	const char *state_in, *qmp;
	struct qemu_id qemu;        /* --qmp-pid, --qmp-uuid */
	int pin_all, live, json, verbose;
	uint64_t chunk_size, pinned_cap, timeout_s;
	int have_chunk, have_cap;
	pid_t pid;
	enum dirty_mode track;
	int have_track;
	uint64_t max_downtime_ms, max_iterations, max_bandwidth, channels;
	uint64_t switch_bw;             /* --switchover-bandwidth (0: --max-bandwidth) */
	uint64_t max_time_s, max_time_gib_s; /* 0: none */
	int on_timeout;                 /* RDMIG_ON_LIMIT_* */
	int postcopy;                   /* --postcopy: the switch may be to post-copy */
	int on_timeout_postcopy;        /* --on-timeout postcopy: at a limit, it is */
	uint64_t postcopy_after;        /* --postcopy-after N: after N rounds, it is */
	int have_pc_after;
	int have_limits;                /* any of the four above given */
	int have_downtime;              /* --max-downtime given: a promise */
	int auto_converge;
	uint64_t estimate_s;            /* --estimate: 0 to migrate */
	uint64_t resume_cost_ms;    /* stopped this long after the confirmation */
	int have_resume_cost;
	const char *control;
	int verify, trusted, defer;
	uint8_t *key;
	size_t key_len;
};

/* Fills @o from argv, defaults first: -1 to go on, or the exit code to
 * leave with (0 after --help or --version, CLI_EX_USAGE after saying what
 * is wrong).  @o's rams and key are the caller's to free either way. */
int send_parse_args(struct send_opts *o, int argc, char **argv);

#endif
