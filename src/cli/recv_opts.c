/* migrate-recv's command line: the options, their defaults, and the
 * combinations refused before anything is opened.  The words of every
 * refusal are part of the command's interface (migrate-recv(1)). */
#include "recv_opts.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"

static const char usage_text[] =
	"usage: migrate-recv --listen HOST:PORT (--ram NAME=PATH... | --ram-dir DIR |\n"
	"                    --postcopy-socket PATH) [options]\n"
	"\n"
	"Receives RAM files (and device state) from migrate-send over RDMA.\n"
	"\n"
	"  -l, --listen HOST:PORT   address to listen on ([V6ADDR]:PORT for IPv6; port 0: any)\n"
	"  -r, --ram NAME=PATH      put block NAME into the new file PATH (repeatable)\n"
	"      --use-existing       receive into --ram files that exist already (yours,\n"
	"                           of the source's length); without it they are refused\n"
	"  -d, --ram-dir DIR        put every block into a new file in DIR\n"
	"  -s, --state-out FILE|-   write the device state to FILE (or standard output)\n"
	"  -q, --qmp SOCK           receive into the QEMU (started with -incoming defer)\n"
	"                           whose QMP socket this is: its shared RAM backends and\n"
	"                           its device state; it runs once the migration completed\n"
	"      --qmp-pid PID[:START] with --qmp: only that QEMU (pid, start time) may answer\n"
	"      --qmp-uuid UUID      with --qmp: only a QEMU that says this UUID\n"
	"      --no-start           with --qmp: leave the migrated guest paused\n"
	"      --postcopy-socket PATH  receive into the memory of a VMM that hands it over\n"
	"                           on this UNIX socket (memfds and its userfaultfd), hand\n"
	"                           it the device state there, and serve its faults once\n"
	"                           the source switches to post-copy (not with --state-out)\n"
	"  -j, --json               JSON events on stdout, one per line\n"
	"      --control SOCK       control socket (status, cancel)\n"
	"      --daemon             serve migrations one after another and at once,\n"
	"                           each into DIR/N/ (needs --ram-dir)\n"
	"      --auth-key FILE      accept only sources holding this shared key\n"
	"      --trusted-fabric     allow --qmp and --daemon without --auth-key: every\n"
	"                           host that reaches HOST:PORT may then migrate into them\n"
	"      --channels N         grant a source at most N connections, 1..64 (default 8)\n"
	"      --max-migrations N   --daemon: migrations at once, 1..1024 (default 16)\n"
	"      --max-handshakes N   connections not yet authenticated, 1..1024 (default 8)\n"
	"      --max-image SIZE     largest image taken (default: this host's memory)\n"
	"      --max-state SIZE     largest device state taken (default 1G; 0: no limit,\n"
	"                           not with --daemon or --postcopy-socket)\n"
	"      --pinned-cap SIZE    bytes pinned per migration at most (default 256M;\n"
	"                           0: no cap); pin-all of a larger image is refused\n"
	"      --max-total-image SIZE   --daemon: all images at once (default: this\n"
	"                           host's memory)\n"
	"      --max-total-pinned SIZE  --daemon: bytes all migrations may pin at once\n"
	"                           (default 1G)\n"
	"  -t, --timeout S          bound on every wait for the peer (default 30)\n"
	"  -v, --verbose            log what the library does (twice: each state change too)\n"
	"  -V, --version            print the version and exit\n"
	"  -h, --help               print this help and exit\n"
	"\n"
	"A block file with a PATH.incomplete marker next to it is not a usable image.\n";

enum {
	OPT_CONTROL = 256, OPT_DAEMON, OPT_AUTH_KEY, OPT_CHANNELS, OPT_MAX_MIGRATIONS,
	OPT_MAX_HANDSHAKES, OPT_MAX_IMAGE, OPT_PINNED_CAP, OPT_NO_START, OPT_USE_EXISTING,
	OPT_TRUSTED, OPT_TOTAL_IMAGE, OPT_TOTAL_PINNED, OPT_MAX_STATE, OPT_PC_SOCKET,
};

static const struct option long_opts[] = {
	{ "listen", required_argument, NULL, 'l' },
	{ "ram", required_argument, NULL, 'r' },
	{ "ram-dir", required_argument, NULL, 'd' },
	{ "state-out", required_argument, NULL, 's' },
	{ "qmp", required_argument, NULL, 'q' },
	{ "qmp-pid", required_argument, NULL, OPT_QMP_PID },
	{ "qmp-uuid", required_argument, NULL, OPT_QMP_UUID },
	{ "no-start", no_argument, NULL, OPT_NO_START },
	{ "postcopy-socket", required_argument, NULL, OPT_PC_SOCKET },
	{ "json", no_argument, NULL, 'j' },
	{ "control", required_argument, NULL, OPT_CONTROL },
	{ "daemon", no_argument, NULL, OPT_DAEMON },
	{ "auth-key", required_argument, NULL, OPT_AUTH_KEY },
	{ "channels", required_argument, NULL, OPT_CHANNELS },
	{ "max-migrations", required_argument, NULL, OPT_MAX_MIGRATIONS },
	{ "max-handshakes", required_argument, NULL, OPT_MAX_HANDSHAKES },
	{ "max-image", required_argument, NULL, OPT_MAX_IMAGE },
	{ "pinned-cap", required_argument, NULL, OPT_PINNED_CAP },
	{ "use-existing", no_argument, NULL, OPT_USE_EXISTING },
	{ "trusted-fabric", no_argument, NULL, OPT_TRUSTED },
	{ "max-total-image", required_argument, NULL, OPT_TOTAL_IMAGE },
	{ "max-total-pinned", required_argument, NULL, OPT_TOTAL_PINNED },
	{ "max-state", required_argument, NULL, OPT_MAX_STATE },
	{ "timeout", required_argument, NULL, 't' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "version", no_argument, NULL, 'V' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int one_opt(void *opts, int c, const char *arg)
{
	struct recv_opts *o = opts;

	switch (c) {
	case 'l':
		o->have_addr = 1;
		return cli_opt_addr(arg, o->host, sizeof(o->host), o->port, sizeof(o->port));
	/* Room for the ".incomplete" marker next to the file. */
	case 'r': return cli_opt_ram(&o->rams, &o->nrams, arg, 16);
	case 'd': o->ram_dir = arg; return 0;
	case 's': o->state_out = arg; return 0;
	case 'q': o->qmp = arg; return 0;
	case OPT_QMP_PID:
	case OPT_QMP_UUID: return cli_opt_qemu(&o->qemu, c, arg);
	case OPT_NO_START: o->no_start = 1; return 0;
	case OPT_PC_SOCKET: o->postcopy_socket = arg; return 0;
	case 'j': o->json = 1; return 0;
	case OPT_CONTROL: o->control = arg; return 0;
	case OPT_DAEMON: o->daemon = 1; return 0;
	case OPT_AUTH_KEY: return cli_opt_key(&o->key, &o->key_len, arg);
	case 't': return cli_opt_num("--timeout", arg, 1, 86400, &o->timeout_s);
	case OPT_CHANNELS: return cli_opt_num("--channels", arg, 1, 64, &o->channels);
	case OPT_MAX_MIGRATIONS:
		o->have_max_migrations = 1;
		return cli_opt_num("--max-migrations", arg, 1, 1024, &o->max_migrations);
	case OPT_MAX_HANDSHAKES:
		return cli_opt_num("--max-handshakes", arg, 1, 1024, &o->max_handshakes);
	case OPT_MAX_IMAGE: return cli_opt_size("--max-image", arg, &o->max_image);
	case OPT_PINNED_CAP: return cli_opt_size("--pinned-cap", arg, &o->pinned_cap);
	case OPT_USE_EXISTING: o->use_existing = 1; return 0;
	case OPT_TRUSTED: o->trusted = 1; return 0;
	case OPT_TOTAL_IMAGE:
		o->have_totals = 1;
		return cli_opt_size("--max-total-image", arg, &o->total_image);
	case OPT_MAX_STATE: return cli_opt_size("--max-state", arg, &o->max_state);
	case OPT_TOTAL_PINNED:
		o->have_totals = 1;
		return cli_opt_size("--max-total-pinned", arg, &o->total_pinned);
	case 'v': o->verbose++; return 0;
	default: return CLI_EX_INTERNAL;
	}
}

static int check_args(struct recv_opts *o)
{
	if (!o->have_addr)
		return cli_usage("--listen HOST:PORT is required");
	if (o->qmp && (o->daemon || o->ram_dir || o->state_out))
		return cli_usage("--qmp receives into QEMU's own memory and device state: drop %s",
				 o->daemon ? "--daemon" : o->ram_dir ? "--ram-dir" : "--state-out");
	if (!o->qmp && (o->qemu.pid || o->qemu.uuid))
		return cli_usage("%s is only used with --qmp", o->qemu.pid ? "--qmp-pid" : "--qmp-uuid");
	if (o->no_start && !o->qmp)
		return cli_usage("--no-start is only used with --qmp");
	/* The VMM's memfds are the blocks, one migration's: no files, no
	 * other guest. */
	if (o->postcopy_socket && (o->nrams || o->ram_dir || o->qmp || o->daemon))
		return cli_usage("--postcopy-socket receives into the VMM's own memory: drop %s",
				 o->nrams ? "--ram" : o->ram_dir ? "--ram-dir" :
				 o->qmp ? "--qmp" : "--daemon");
	/* The VMM needs the state before its vCPUs run, on the socket it
	 * talks on; a file named only at the end would be a second copy
	 * nobody runs. */
	if (o->postcopy_socket && o->state_out)
		return cli_usage("--postcopy-socket hands the device state to the VMM on the "
				 "socket: drop --state-out");
	/* It is held in memory until the VMM takes it. */
	if (o->postcopy_socket && !o->max_state)
		return cli_usage("--postcopy-socket holds the device state in memory until the VMM "
				 "takes it: give --max-state a size, not 0");
	if (!o->nrams && !o->ram_dir && !o->qmp && !o->postcopy_socket)
		return cli_usage("--ram NAME=PATH, --ram-dir DIR, --qmp SOCK or --postcopy-socket "
				 "PATH is required");
	if (o->ram_dir && strlen(o->ram_dir) > 1900)
		return cli_usage("--ram-dir %.40s...: path too long", o->ram_dir);
	if (o->state_out && strlen(o->state_out) > 2000)
		return cli_usage("--state-out %.40s...: path too long", o->state_out);
	if (o->nrams && o->ram_dir)
		return cli_usage("--ram and --ram-dir cannot be combined");
	if (o->daemon && !o->ram_dir)
		return cli_usage("--daemon needs --ram-dir DIR");
	if (o->daemon && o->state_out)
		return cli_usage("--daemon writes the state to DIR/N/state: drop --state-out");
	/* The room promised for a state file is what its source announced or
	 * this bound: without one, a source that says nothing could take the
	 * room promised to every other migration. */
	if (o->daemon && !o->max_state)
		return cli_usage("--daemon needs a bound on each migration's device state: give "
				 "--max-state a size, not 0");
	if (o->have_max_migrations && !o->daemon)
		return cli_usage("--max-migrations needs --daemon (one migration otherwise)");
	if (o->have_totals && !o->daemon)
		return cli_usage("--max-total-image and --max-total-pinned need --daemon "
				 "(--max-image and --pinned-cap bound one migration)");
	if (o->use_existing && !o->nrams)
		return cli_usage("--use-existing is only used with --ram NAME=PATH");
	/* Without a key, any host that reaches the port is admitted: with
	 * --qmp its device state is loaded and the guest started, a daemon
	 * hands out its memory to whoever asks. */
	if ((o->qmp || o->daemon) && !o->key && !o->trusted)
		return cli_usage("%s without --auth-key would admit any host that reaches %s:%s: "
				 "give --auth-key FILE (the source's key), or --trusted-fabric if "
				 "nobody else can reach this port", o->qmp ? "--qmp" : "--daemon",
				 o->host, o->port);
	if (o->state_out && !strcmp(o->state_out, "-") && o->json)
		return cli_usage("--state-out - and --json both need standard output");
	return -1;
}

/* Returns -1 to go on, or the exit code. */
int recv_opts_parse(struct recv_opts *o, int argc, char **argv)
{
	static const struct cli_cmd cmd = { "l:r:d:s:q:jt:vVh", long_opts, usage_text, one_opt,
					    NULL };
	int rc;

	o->timeout_s = 30;
	o->max_migrations = 16;
	o->max_handshakes = 8;
	o->pinned_cap = 256ull << 20;
	o->total_pinned = 1ull << 30;
	o->max_state = 1ull << 30;
	rc = cli_getopt(&cmd, o, argc, argv);
	if (rc >= 0)
		return rc;
	return check_args(o);
}

void recv_opts_free(struct recv_opts *o)
{
	free(o->rams);
	o->rams = NULL;
	cli_free_key(o->key, o->key_len);
	o->key = NULL;
}
