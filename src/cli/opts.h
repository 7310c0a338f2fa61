/* The option driver both commands share: getopt_long over a command's
 * table, --help and --version, and the usage errors options make, worded
 * the same way by both commands. */
#ifndef RDMIG_CLI_OPTS_H
#define RDMIG_CLI_OPTS_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "dirty.h"

struct cli_cmd {
	const char *shortopts;          /* getopt's, without the leading ':' */
	const struct option *longopts;
	const char *usage;              /* --help, before the exit statuses */
	/* Applies one option to @opts: 0, or the exit code of a usage error. */
	int (*apply)(void *opts, int c, const char *arg);
	/* Exit statuses of this command only, after the shared ones (NULL:
	 * none). */
	const char *exit_more;
};

/* Parses argv into @opts (cli_prog() names the command): -1 to go on, or
 * the exit code to leave with (0 after --help or --version). */
int cli_getopt(const struct cli_cmd *cmd, void *opts, int argc, char **argv);

/* Option values, each 0 or CLI_EX_USAGE after saying what is wrong. */
int cli_opt_num(const char *opt, const char *arg, uint64_t min, uint64_t max, uint64_t *out);
int cli_opt_size(const char *opt, const char *arg, uint64_t *out);
int cli_opt_addr(const char *arg, char *host, size_t hostlen, char *port, size_t portlen);
/* Appends --ram NAME=PATH to @rams; @reserve: bytes the path must leave
 * free for suffixes the command adds. */
int cli_opt_ram(struct cli_ram **rams, unsigned *n, const char *arg, size_t reserve);
/* --qmp-pid PID and --qmp-uuid UUID (@c says which): the QEMU a caller
 * checked, to be found on the QMP socket again (ends.h).  Both commands
 * give these options the codes below. */
enum { OPT_QMP_PID = 1000, OPT_QMP_UUID };
int cli_opt_qemu(struct qemu_id *id, int c, const char *arg);
/* --auth-key FILE, replacing an earlier one. */
int cli_opt_key(uint8_t **key, size_t *len, const char *arg);
/* --dirty-tracking's value (dirty.h): "auto", "wp-async" or "soft-dirty";
 * -EINVAL otherwise, and the caller says what is wrong. */
int dirty_mode_parse(const char *name, enum dirty_mode *out);

#endif
