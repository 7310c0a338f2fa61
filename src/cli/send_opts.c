/* migrate-send's options (send_opts.h): the table getopt reads, the text
 * --help prints, and the checks between options, worded for the operator
 * who typed them. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dirty.h"
#include "opts.h"
#include "rdmig.h"
#include "send_opts.h"

static const char usage_text[] =
	"usage: migrate-send --connect HOST:PORT (--ram NAME=PATH... | --qmp SOCK) [options]\n"
	"\n"
	"Sends RAM files (and device state) to migrate-recv over RDMA.\n"
	"\n"
	"  -c, --connect HOST:PORT   the destination's migrate-recv ([V6ADDR]:PORT for IPv6)\n"
	"  -r, --ram NAME=PATH       a RAM block NAME backed by the file PATH (repeatable)\n"
	"  -s, --state-in FILE|-     device state to send after the memory\n"
	"      --pin-all             register whole blocks up front on both sides\n"
	"      --chunk-size SIZE     registration unit, power of two (default 1M)\n"
	"      --pinned-cap SIZE     dynamic registration: bytes pinned at most (default 256M; 0: none)\n"
	"      --channels N          stripe the writes over N connections, 1..64 (default 1)\n"
	"      --live                pre-copy while --pid keeps running, then stop it\n"
	"  -p, --pid PID             the process writing the RAM files (with --live)\n"
	"      --dirty-tracking MODE how to track its writes: auto (default: wp-async\n"
	"                            where possible), wp-async or soft-dirty\n"
	"  -q, --qmp SOCK            migrate the QEMU guest whose QMP socket this is, live:\n"
	"                            its shared RAM backends and its device state\n"
	"      --qmp-pid PID[:START] with --qmp: only that QEMU (pid, start time) may answer\n"
	"      --qmp-uuid UUID       with --qmp: only a QEMU that says this UUID\n"
	"      --max-downtime MS     stop the workload once the rest fits in MS (default 300)\n"
	"      --resume-cost MS      it stays stopped MS longer (its manager resuming it at the\n"
	"                            destination): counted in --max-downtime (default 0)\n"
	"      --max-iterations N    at most N rounds without converging (default 30)\n"
	"      --max-time S          at most S seconds in all (default: no limit)\n"
	"      --max-time-per-gib S  at most S seconds per GiB of RAM (default: no limit)\n"
	"      --on-timeout ACTION   at a limit, before the rest fits --max-downtime:\n"
	"                            cancel (default: the workload runs on here) or\n"
	"                            switchover (stop it anyway, over --max-downtime) or\n"
	"                            postcopy (switch to post-copy: needs --postcopy)\n"
	"      --postcopy            allow post-copy: the destination's guest (a VMM on\n"
	"                            migrate-recv --postcopy-socket) runs before every page\n"
	"                            is there and reads the rest from here; --pid stays\n"
	"                            stopped and its RAM files readable until the end\n"
	"      --postcopy-after N    switch to post-copy after N rounds (0: at once)\n"
	"      --auto-converge       throttle the workload while its writes outpace the link\n"
	"      --estimate S          migrate nothing: track the workload's writes for S\n"
	"                            seconds, measure the link (a first round, then\n"
	"                            cancelled), and say whether and how it would converge\n"
	"      --max-bandwidth RATE  bytes per second at most, K/M/G suffixes (default 0: no limit)\n"
	"      --switchover-bandwidth RATE\n"
	"                            once the workload is stopped, the last pages go at RATE,\n"
	"                            and --max-downtime is predicted at it (default: at\n"
	"                            --max-bandwidth's)\n"
	"      --verify              compare digests of every block at the end\n"
	"      --auth-key FILE       shared key file; the destination must hold the same key\n"
	"      --trusted-fabric      allow --qmp without --auth-key: whatever answers at\n"
	"                            HOST:PORT then receives the guest\n"
	"  -j, --json                JSON events on stdout, one per line\n"
	"      --control SOCK        control socket (status, cancel, set, start)\n"
	"      --defer               connect and prepare, then wait for start on --control\n"
	"  -t, --timeout S           bound on every wait for the peer (default 30)\n"
	"  -v, --verbose             log what the library does (twice: each state change too)\n"
	"  -V, --version             print the version and exit\n"
	"  -h, --help                print this help and exit\n"
	"\n"
	"SIZE and RATE take K, M, G, T suffixes (powers of 1024).\n";

enum {
	OPT_PIN_ALL = 256, OPT_CHUNK, OPT_CAP, OPT_LIVE, OPT_MAX_DOWNTIME,
	OPT_MAX_ITER, OPT_MAX_BW, OPT_CONTROL, OPT_VERIFY, OPT_AUTH_KEY, OPT_CHANNELS,
	OPT_TRUSTED, OPT_DIRTY_TRACKING, OPT_DEFER, OPT_MAX_TIME, OPT_MAX_TIME_GIB, OPT_ON_TIMEOUT,
	OPT_AUTO_CONVERGE, OPT_ESTIMATE, OPT_RESUME_COST, OPT_SWITCH_BW, OPT_POSTCOPY,
	OPT_PC_AFTER,
};

/* Exit statuses of migrate-send only (rdmig-libvirt has 9 and 10). */
static const char exit_more[] =
	"  11 gave up: a limit (--max-time, --max-time-per-gib, --max-iterations, a\n"
	"     stall) came before the rest fit --max-downtime; the workload runs here\n"
	"  12 completed over --max-downtime: switched over at a limit (--on-timeout\n"
	"     switchover), or the downtime took longer than the --max-downtime given\n";

static const struct option long_opts[] = {
	{ "connect", required_argument, NULL, 'c' },
	{ "ram", required_argument, NULL, 'r' },
	{ "state-in", required_argument, NULL, 's' },
	{ "pin-all", no_argument, NULL, OPT_PIN_ALL },
	{ "chunk-size", required_argument, NULL, OPT_CHUNK },
	{ "pinned-cap", required_argument, NULL, OPT_CAP },
	{ "channels", required_argument, NULL, OPT_CHANNELS },
	{ "live", no_argument, NULL, OPT_LIVE },
	{ "pid", required_argument, NULL, 'p' },
	{ "dirty-tracking", required_argument, NULL, OPT_DIRTY_TRACKING },
	{ "qmp", required_argument, NULL, 'q' },
	{ "qmp-pid", required_argument, NULL, OPT_QMP_PID },
	{ "qmp-uuid", required_argument, NULL, OPT_QMP_UUID },
	{ "max-downtime", required_argument, NULL, OPT_MAX_DOWNTIME },
	{ "resume-cost", required_argument, NULL, OPT_RESUME_COST },
	{ "max-iterations", required_argument, NULL, OPT_MAX_ITER },
	{ "max-time", required_argument, NULL, OPT_MAX_TIME },
	{ "max-time-per-gib", required_argument, NULL, OPT_MAX_TIME_GIB },
	{ "on-timeout", required_argument, NULL, OPT_ON_TIMEOUT },
	{ "postcopy", no_argument, NULL, OPT_POSTCOPY },
	{ "postcopy-after", required_argument, NULL, OPT_PC_AFTER },
	{ "auto-converge", no_argument, NULL, OPT_AUTO_CONVERGE },
	{ "estimate", required_argument, NULL, OPT_ESTIMATE },
	{ "max-bandwidth", required_argument, NULL, OPT_MAX_BW },
	{ "switchover-bandwidth", required_argument, NULL, OPT_SWITCH_BW },
	{ "json", no_argument, NULL, 'j' },
	{ "control", required_argument, NULL, OPT_CONTROL },
	{ "defer", no_argument, NULL, OPT_DEFER },
	{ "verify", no_argument, NULL, OPT_VERIFY },
	{ "auth-key", required_argument, NULL, OPT_AUTH_KEY },
	{ "trusted-fabric", no_argument, NULL, OPT_TRUSTED },
	{ "timeout", required_argument, NULL, 't' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "version", no_argument, NULL, 'V' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int one_opt(void *opts, int c, const char *arg)
{
	struct send_opts *o = opts;
	uint64_t v;
	int rc = 0;

	switch (c) {
	case 'c':
		o->have_addr = 1;
		return cli_opt_addr(arg, o->host, sizeof(o->host), o->port, sizeof(o->port));
	case 'r': return cli_opt_ram(&o->rams, &o->nrams, arg, 0);
	case 's': o->state_in = arg; return 0;
	case 'q': o->qmp = arg; return 0;
	case OPT_QMP_PID:
	case OPT_QMP_UUID: return cli_opt_qemu(&o->qemu, c, arg);
	case OPT_PIN_ALL: o->pin_all = 1; return 0;
	case OPT_CHUNK:
		o->have_chunk = 1;
		rc = cli_opt_size("--chunk-size", arg, &o->chunk_size);
		if (!rc && (o->chunk_size > (1u << 30) || o->chunk_size < 4096 ||
			    (o->chunk_size & (o->chunk_size - 1))))
			rc = cli_usage("bad --chunk-size '%s': expected a power of two from 4K to 1G",
				       arg);
		return rc;
	case OPT_CAP: o->have_cap = 1; return cli_opt_size("--pinned-cap", arg, &o->pinned_cap);
	case OPT_CHANNELS: return cli_opt_num("--channels", arg, 1, 64, &o->channels);
	case OPT_LIVE: o->live = 1; return 0;
	case 'p':
		rc = cli_opt_num("--pid", arg, 1, INT32_MAX, &v);
		o->pid = (pid_t)v;
		return rc;
	case OPT_DIRTY_TRACKING:
		o->have_track = 1;
		if (dirty_mode_parse(arg, &o->track))
			return cli_usage("bad --dirty-tracking '%s': expected auto, wp-async or soft-dirty",
					 arg);
		return 0;
	case OPT_MAX_DOWNTIME:
		o->have_downtime = 1;
		return cli_opt_num("--max-downtime", arg, 1, 3600000, &o->max_downtime_ms);
	case OPT_RESUME_COST:
		o->have_resume_cost = 1;
		return cli_opt_num("--resume-cost", arg, 0, 3600000, &o->resume_cost_ms);
	case OPT_MAX_ITER: return cli_opt_num("--max-iterations", arg, 1, 100000, &o->max_iterations);
	case OPT_MAX_TIME:
		o->have_limits = 1;
		return cli_opt_num("--max-time", arg, 1, 864000, &o->max_time_s);
	case OPT_MAX_TIME_GIB:
		o->have_limits = 1;
		return cli_opt_num("--max-time-per-gib", arg, 1, 864000, &o->max_time_gib_s);
	case OPT_ON_TIMEOUT:
		o->have_limits = 1;
		/* Given twice, the last one wins, whichever they are. */
		o->on_timeout_postcopy = 0;
		if (!strcmp(arg, "cancel")) {
			o->on_timeout = RDMIG_ON_LIMIT_CANCEL;
		} else if (!strcmp(arg, "switchover")) {
			o->on_timeout = RDMIG_ON_LIMIT_SWITCH_OVER;
		} else if (!strcmp(arg, "postcopy")) {
			/* The library's policy gives up at the limit; migrate-send
			 * switches to post-copy instead of cancelling. */
			o->on_timeout = RDMIG_ON_LIMIT_CANCEL;
			o->on_timeout_postcopy = 1;
		} else
			return cli_usage("bad --on-timeout '%s': expected cancel, switchover or "
					 "postcopy", arg);
		return 0;
	case OPT_AUTO_CONVERGE: o->auto_converge = 1; o->have_limits = 1; return 0;
	case OPT_POSTCOPY: o->postcopy = 1; return 0;
	case OPT_PC_AFTER:
		o->have_pc_after = 1;
		return cli_opt_num("--postcopy-after", arg, 0, 100000, &o->postcopy_after);
	case OPT_ESTIMATE: return cli_opt_num("--estimate", arg, 1, 3600, &o->estimate_s);
	case OPT_MAX_BW: return cli_opt_size("--max-bandwidth", arg, &o->max_bandwidth);
	case OPT_SWITCH_BW:
		return cli_opt_size("--switchover-bandwidth", arg, &o->switch_bw);
	case 'j': o->json = 1; return 0;
	case OPT_CONTROL: o->control = arg; return 0;
	case OPT_DEFER: o->defer = 1; return 0;
	case OPT_VERIFY: o->verify = 1; return 0;
	case OPT_AUTH_KEY: return cli_opt_key(&o->key, &o->key_len, arg);
	case OPT_TRUSTED: o->trusted = 1; return 0;
	case 't': return cli_opt_num("--timeout", arg, 1, 86400, &o->timeout_s);
	case 'v': o->verbose++; return 0;
	default: return CLI_EX_INTERNAL;
	}
}

/* What is migrated, and to where: each check 0 to go on, or the usage
 * error's exit code. */
static int check_target(const struct send_opts *o)
{
	if (!o->have_addr)
		return cli_usage("--connect HOST:PORT is required");
	if (!o->nrams && !o->qmp)
		return cli_usage("at least one --ram NAME=PATH (or --qmp SOCK) is required");
	if (!o->qmp && (o->qemu.pid || o->qemu.uuid))
		return cli_usage("%s is only used with --qmp", o->qemu.pid ? "--qmp-pid" : "--qmp-uuid");
	if (o->qmp && (o->pid || o->state_in))
		return cli_usage("--qmp takes the pid and the device state from QEMU: drop %s",
				 o->pid ? "--pid" : "--state-in");
	/* Without a key, whoever answers at HOST:PORT gets the guest's memory
	 * and device state. */
	if (o->qmp && !o->key && !o->trusted)
		return cli_usage("--qmp without --auth-key would hand the guest to whatever answers "
				 "at %s:%s: give --auth-key FILE (the destination's key), or "
				 "--trusted-fabric if nobody else can reach that address", o->host,
				 o->port);
	return 0;
}

/* --qmp is always live; then the options only a live migration (of a
 * running workload) takes. */
static int check_live(struct send_opts *o)
{
	if (o->qmp)
		o->live = 1;
	if (o->live && !o->pid && !o->qmp)
		return cli_usage("--live needs --pid PID (the process writing the RAM files)");
	if (o->pid && !o->live)
		return cli_usage("--pid is only used with --live");
	if (o->have_track && !o->live)
		return cli_usage("--dirty-tracking is only used with --live or --qmp");
	/* A cold migration has one round and nothing to converge. */
	if (o->have_limits && !o->live)
		return cli_usage("--auto-converge, --max-time, --max-time-per-gib and --on-timeout "
				 "are only used with --live or --qmp");
	if (o->switch_bw && !o->live)
		return cli_usage("--switchover-bandwidth is only used with --live or --qmp (a cold "
				 "migration stops the workload first: --max-bandwidth is its rate)");
	if (o->estimate_s && !o->live)
		return cli_usage("--estimate measures a running workload's writes: give --live "
				 "--pid PID or --qmp SOCK");
	if (o->estimate_s && (o->defer || o->control || o->verify || o->state_in))
		return cli_usage("--estimate migrates nothing: drop %s", o->defer ? "--defer" :
				 o->control ? "--control" : o->verify ? "--verify" : "--state-in");
	if (o->have_resume_cost && !o->live)
		return cli_usage("--resume-cost is only used with --live or --qmp");
	return 0;
}

/* Post-copy: a process migrate-send stops itself (QEMU's guest would need
 * QEMU's own post-copy), and no digests at the end (the destination's
 * guest has written its pages by then). */
static int check_postcopy(const struct send_opts *o)
{
	if ((o->on_timeout_postcopy || o->have_pc_after) && !o->postcopy)
		return cli_usage("%s needs --postcopy", o->have_pc_after ? "--postcopy-after" :
				 "--on-timeout postcopy");
	if (!o->postcopy)
		return 0;
	if (!o->live || o->qmp)
		return cli_usage("--postcopy migrates a running process: give --live --pid PID%s",
				 o->qmp ? " (not --qmp)" : "");
	if (o->verify || o->estimate_s)
		return cli_usage("--postcopy cannot be combined with %s", o->verify ? "--verify "
				 "(the destination's guest writes its pages before the end)" :
				 "--estimate");
	if (!o->have_pc_after && !o->on_timeout_postcopy)
		return cli_usage("--postcopy: say when to switch: --postcopy-after N, or "
				 "--on-timeout postcopy");
	return 0;
}

/* --defer, and device state on standard input. */
static int check_defer(const struct send_opts *o)
{
	if (o->defer && !o->control)
		return cli_usage("--defer waits for the start command on the control socket: give "
				 "--control SOCK");
	if (o->defer && o->state_in && !strcmp(o->state_in, "-"))
		return cli_usage("--defer with --state-in -: the state is read at launch, before "
				 "the wait; give it as a file written before start, or drop --defer");
	if (o->state_in && !strcmp(o->state_in, "-") && isatty(0))
		return cli_usage("--state-in -: standard input is a terminal");
	return 0;
}

int send_parse_args(struct send_opts *o, int argc, char **argv)
{
	static const struct cli_cmd cmd = { "c:r:s:p:q:jt:vVh", long_opts, usage_text, one_opt,
					    exit_more };
	int rc;

	o->timeout_s = 30;
	o->channels = 1;
	o->max_downtime_ms = 300;
	o->max_iterations = 30;
	rc = cli_getopt(&cmd, o, argc, argv);
	if (rc >= 0)
		return rc;
	rc = check_target(o);
	if (!rc)
		rc = check_live(o);
	if (!rc)
		rc = check_defer(o);
	if (!rc)
		rc = check_postcopy(o);
	return rc ? rc : -1;
}
