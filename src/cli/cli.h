/* What migrate-send and migrate-recv share: exit codes, argument parsing,
 * RAM files, JSON events, the progress bar and the log callback.  Every
 * message goes to stderr as one line, "PROG: what failed: why". */
#ifndef RDMIG_CLI_H
#define RDMIG_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <json-c/json.h>

#include "rdmig.h"
#include "clierr.h" /* struct cli_err, which every module here uses */

/* Exit codes of both commands; the man pages and --help list the same. */
enum cli_exit {
	CLI_EX_OK = 0,
	CLI_EX_INTERNAL = 1,   /* a bug or an unexpected local failure */
	CLI_EX_USAGE = 2,      /* command line, files, block list mismatch */
	CLI_EX_CONNECT = 3,    /* resolve, connect, listen, no RDMA device */
	CLI_EX_REJECTED = 4,   /* the peer refused the connection */
	CLI_EX_TRANSFER = 5,   /* failure after connecting */
	CLI_EX_VERIFY = 6,     /* verification mismatch */
	CLI_EX_CANCELLED = 7,  /* cancel command or signal */
	CLI_EX_TIMEOUT = 8,    /* a deadline expired */
	/* migrate-send only (9 and 10 are rdmig-libvirt's own): */
	CLI_EX_GAVE_UP = 11,   /* a limit came before convergence: the workload
				* runs on the source, unthrottled */
	CLI_EX_OVER_LIMIT = 12, /* completed, but by switching over at a limit
				 * (--on-timeout switchover) */
};

/* The exit-code table as printed by --help. */
extern const char cli_exit_help[];

/* Where a library error happened, for cli_exit_code(). */
enum cli_phase {
	CLI_PHASE_CONNECT,  /* rdmig_source_connect / rdmig_dest_accept */
	CLI_PHASE_TRANSFER, /* everything after */
};

void cli_set_prog(const char *prog);
const char *cli_prog(void);
/* "PROG: message" on stderr, one line. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints like cli_err and returns CLI_EX_USAGE. */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Maps a negative errno from the library (with its message) to an exit code. */
int cli_exit_code(int rc, enum cli_phase phase, const char *msg);

/* Parsers return 0 or -EINVAL/-ERANGE; they never print. */
int cli_parse_size(const char *s, uint64_t *out); /* 4096, 64K, 1M, 2G, 1T */
int cli_parse_uint(const char *s, uint64_t max, uint64_t *out);
/* HOST:PORT or [V6ADDR]:PORT; the port is 0..65535. */
int cli_parse_addr(const char *s, char *host, size_t hostlen, char *port,
		   size_t portlen);
/* NAME=PATH; @name gets a copy, @path points into @s. */
int cli_parse_ram(const char *s, char *name, size_t namelen, const char **path);
/* Reads a shared key file (16..1024 bytes) into memory that stays out of
 * swap; refuses one that others may read or write.  Returns 0, or
 * CLI_EX_USAGE after printing why.  Free it with cli_free_key(). */
int cli_read_key(const char *path, uint8_t **key, size_t *len);
/* Wipes and frees a key from cli_read_key (NULL is fine). */
void cli_free_key(uint8_t *key, size_t len);

/* Maps a block name, which the peer chose, to a file name that stays in its
 * directory and cannot collide with the files migrate-recv keeps there:
 * bytes other than [A-Za-z0-9_+,@:=-] and inner dots become %XX, and so do
 * a leading dot and the dot of a ".incomplete" or ".part" suffix.  '%' is
 * always encoded, so different names never give the same file name.
 * 0, or -ENAMETOOLONG when the result would not fit @len or NAME_MAX. */
int cli_block_file_name(const char *name, char *out, size_t len);

/* The QEMU a caller checked before it ran the command (--qmp-pid,
 * --qmp-uuid): 0 / NULL when it did not. */
struct qemu_id {
	pid_t pid;
	unsigned long long start; /* its start time (/proc/PID/stat), 0: unsaid */
	const char *uuid;
};

/* A RAM block backed by a file mapped MAP_SHARED. */
struct cli_ram {
	char name[256];
	char path[4096];
	void *host;
	uint64_t len;
	uint64_t pgsz;   /* the mapping's page size (a huge page on hugetlbfs) */
	dev_t dev;       /* the file mapped; for QEMU's, the file it maps, as */
	ino_t ino;       /* looked at (0: any file the path names) */
	int zeroed;      /* created or truncated here: known to be all zero */
	int created;     /* made by this run (image.h): removed if it fails */
	int marker;      /* PATH.incomplete exists because of us */
	int complete;    /* the image was declared complete (its marker gone) */
	int borrowed;    /* someone else's mapping: never unmapped through this */
	int guard;       /* migrate-recv's faultguard slot + 1, 0 when none */
};

/* Source side: maps an existing, non-empty file (writable when permitted:
 * rxe cannot register read-only mappings; nothing is ever written), opened
 * as safeopen.h says: no link on its path, a regular file, and when @r's
 * ino is set (a block whose file QEMU named) that very file, -ESTALE
 * naming both otherwise.  On failure writes the reason to @err and returns
 * -errno.  The destination's files are image.h's. */
int cli_ram_map_ro(struct cli_ram *r, struct cli_err *err);
void cli_ram_unmap(struct cli_ram *r);

/* ---- JSON events: one object per line on stdout ---------------------- */
struct json_object *cli_event(const char *event);
/* Adds the counters under their QEMU query-migrate names. */
void cli_json_stats(struct json_object *o, const struct rdmig_stats *st);
void cli_json_u64(struct json_object *o, const char *key, uint64_t v);
void cli_json_str(struct json_object *o, const char *key, const char *v);
/* Prints @o as one line, flushes, and releases it. */
void cli_emit(struct json_object *o);
/* {"event":"failed","status":"failed","error":MSG,"exit-code":CODE} */
void cli_emit_failed(const char *msg, int code, struct json_object *extra);
/* The convergence advice's words in the events, as the options name them
 * ("switch-over", "max-time"; "?" for a value this build does not know). */
const char *cli_decision_name(uint32_t d);
const char *cli_reason_name(uint32_t r);

/* ---- human output ----------------------------------------------------- */
/* "12.3 MiB" */
const char *cli_fmt_bytes(uint64_t b, char *buf, size_t len);

struct cli_bar {
	int enabled;     /* stderr is a terminal and --json is off */
	int drawn;
};
void cli_bar_init(struct cli_bar *b, int json);
/* [#####     ]  45%  18.3 MiB/s  iteration 2 */
void cli_bar_draw(struct cli_bar *b, double frac, double bytes_per_s,
		  uint64_t iteration);
void cli_bar_clear(struct cli_bar *b);

/* Library log callback: warnings always, information with --verbose.
 * Errors are left out: the command reports its failure itself, once.
 * @ctx: a struct cli_bar * (or NULL) so the bar is cleared first. */
void cli_log(void *ctx, int level, const char *msg);

uint64_t cli_now_ms(void);

/* Starts librdmacm's and libibverbs' one-time set-up (the device list over
 * netlink, the providers loaded) in a thread of its own, so that it runs
 * while the command does its other start-up work: 0.2 s and more under
 * emulation.  Best effort. */
void cli_warm_rdma(void);

#endif
