#include "opts.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdmig.h>

int cli_getopt(const struct cli_cmd *cmd, void *opts, int argc, char **argv)
{
	char shortopts[64];
	int c, rc;

	/* A leading ':' tells a missing argument from an unknown option. */
	snprintf(shortopts, sizeof(shortopts), ":%s", cmd->shortopts);
	opterr = 0;
	while ((c = getopt_long(argc, argv, shortopts, cmd->longopts, NULL)) != -1) {
		if (c == 'h') {
			fputs(cmd->usage, stdout);
			fputs("\n", stdout);
			fputs(cli_exit_help, stdout);
			if (cmd->exit_more)
				fputs(cmd->exit_more, stdout);
			return CLI_EX_OK;
		}
		if (c == 'V') {
			printf("%s (rdmig) %s\n", cli_prog(), rdmig_version());
			return CLI_EX_OK;
		}
		if (c == '?')
			return cli_usage("unknown option '%s' (see %s --help)",
					 optopt ? (char[]){ '-', (char)optopt, 0 } : argv[optind - 1],
					 cli_prog());
		if (c == ':')
			return cli_usage("option '%s' needs an argument", argv[optind - 1]);
		rc = cmd->apply(opts, c, optarg);
		if (rc)
			return rc;
	}
	if (optind < argc)
		return cli_usage("unexpected argument '%s' (see %s --help)", argv[optind],
				 cli_prog());
	return -1;
}

int cli_opt_num(const char *opt, const char *arg, uint64_t min, uint64_t max, uint64_t *out)
{
	if (cli_parse_uint(arg, max, out) || *out < min)
		return cli_usage("bad %s '%s': expected a number from %" PRIu64 " to %" PRIu64,
				 opt, arg, min, max);
	return 0;
}

int cli_opt_size(const char *opt, const char *arg, uint64_t *out)
{
	if (cli_parse_size(arg, out))
		return cli_usage("bad %s '%s': expected a size such as 4096, 64K, 1M or 2G",
				 opt, arg);
	return 0;
}

int cli_opt_addr(const char *arg, char *host, size_t hostlen, char *port, size_t portlen)
{
	if (cli_parse_addr(arg, host, hostlen, port, portlen))
		return cli_usage("bad address '%s': expected HOST:PORT or [V6ADDR]:PORT", arg);
	return 0;
}

int cli_opt_ram(struct cli_ram **rams, unsigned *n, const char *arg, size_t reserve)
{
	struct cli_ram *grown, *r;
	const char *path;
	unsigned i;
	int rc;

	grown = realloc(*rams, (*n + 1) * sizeof(*grown));
	if (!grown)
		return cli_usage("out of memory");
	*rams = grown;
	r = &grown[*n];
	memset(r, 0, sizeof(*r));
	rc = cli_parse_ram(arg, r->name, sizeof(r->name), &path);
	if (rc)
		return cli_usage("bad --ram '%s': expected NAME=PATH%s", arg,
				 rc == -ERANGE ? " with NAME of at most 255 bytes" : "");
	if (strlen(path) + reserve >= sizeof(r->path))
		return cli_usage("bad --ram '%s': path too long", arg);
	snprintf(r->path, sizeof(r->path), "%s", path);
	for (i = 0; i < *n; i++)
		if (!strcmp(grown[i].name, r->name))
			return cli_usage("--ram %s given twice", r->name);
	(*n)++;
	return 0;
}

int cli_opt_key(uint8_t **key, size_t *len, const char *arg)
{
	cli_free_key(*key, *len);
	*key = NULL;
	*len = 0;
	return cli_read_key(arg, key, len);
}

int cli_opt_qemu(struct qemu_id *id, int c, const char *arg)
{
	uint64_t v;
	size_t i;
	int rc;

	if (c == OPT_QMP_PID) {
		char pid[24];
		const char *colon = strchr(arg, ':');
		size_t n = colon ? (size_t)(colon - arg) : strlen(arg);

		/* PID[:START]: START names the process for good (pid reuse). */
		if (n >= sizeof(pid) || (colon && cli_parse_uint(colon + 1, UINT64_MAX, &v)))
			return cli_usage("bad --qmp-pid '%s': expected PID or PID:START (START: "
					 "field 22 of /proc/PID/stat)", arg);
		memcpy(pid, arg, n);
		pid[n] = '\0';
		id->start = colon ? v : 0;
		rc = cli_opt_num("--qmp-pid", pid, 1, INT32_MAX, &v);
		id->pid = (pid_t)v;
		return rc;
	}
	for (i = 0; arg[i]; i++)
		if (!(i == 8 || i == 13 || i == 18 || i == 23 ? arg[i] == '-' : isxdigit((unsigned char)arg[i])))
			break;
	if (i != 36 || arg[i])
		return cli_usage("bad --qmp-uuid '%s': expected a UUID such as "
				 "c7a5fdbd-cdaf-9455-926a-d65c16db1809", arg);
	id->uuid = arg;
	return 0;
}

int dirty_mode_parse(const char *name, enum dirty_mode *out)
{
	if (!strcmp(name, "auto"))
		*out = DIRTY_AUTO;
	else if (!strcmp(name, "wp-async"))
		*out = DIRTY_WP_ASYNC;
	else if (!strcmp(name, "soft-dirty"))
		*out = DIRTY_SOFT_DIRTY;
	else
		return -EINVAL;
	return 0;
}
