/* What an integration test sets up and takes down: the files it writes and
 * compares, and one migration between migrate-recv and migrate-send with a
 * workload, in a scratch directory of its own.  Every suite that drives the
 * commands as an operator would starts from here rather than from its own
 * copy. */
#ifndef RDMIG_TEST_FIXTURE_H
#define RDMIG_TEST_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runs.h"

/* ---- files ---------------------------------------------------------------- */

/* @path holds exactly @data, with @mode when it is created. */
void tu_write_file(const char *path, const void *data, size_t len, mode_t mode);
/* @path holds @len bytes of tu_fill_random(@seed). */
void tu_write_random(const char *path, size_t len, uint64_t seed);
/* The files hold the same bytes; else the test fails naming the first
 * offset that differs. */
void tu_assert_same(const char *a, const char *b);
/* Lines of @path containing both @a and @b ("" matches every line). */
int tu_count_matching(const char *path, const char *a, const char *b);
/* Whether @path contains @needle. */
int tu_file_has(const char *path, const char *needle);
/* The first line of @path ("" when there is none). */
void tu_first_line(const char *path, char *buf, size_t len);
/* Whether the running kernel is @major.@minor or later. */
int tu_kernel_at_least(int major, int minor);
/* Open descriptors and resident KiB of process @pid. */
void tu_proc_usage(pid_t pid, int *fds, long *rss_kb);

/* ---- one migration ---------------------------------------------------------- */

struct tu_fx {
	char dir[256];           /* the test's scratch directory, removed at the end */
	char src[300], dst[300]; /* DIR/src and DIR/dst, made by tu_fx_init */
	char recvbin[512], sendbin[512], memload[512];
	char port[16], addr[64]; /* where migrate-recv listens (tu_fx_recv) */
	char ctl[320];           /* DIR/send.ctl, for a --control socket */
	char key[320];           /* DIR/key, a key for --auth-key */
	/* Words every migrate-send of the fixture gets after --connect ADDR
	 * (NULL-terminated; NULL: none), "--json" say. */
	const char *const *send_opts;
	/* The source's block once tu_fx_block named it: DIR/src/NAME, its
	 * --ram argument NAME=DIR/src/NAME, its image under --ram-dir f->dst
	 * (DIR/dst/NAME) and the marker of an unfinished one. */
	char file[400], ram[420], image[400], mark[420];
	char pid[16]; /* the workload's pid, for --pid (tu_fx_load) */
	struct tu_run recv, send, load;
};

void tu_fx_init(struct tu_fx *f);
/* Names the source's block @name; writes @bytes random bytes of @seed
 * there unless @bytes is 0 (the workload's file, say). */
void tu_fx_block(struct tu_fx *f, const char *name, size_t bytes, uint64_t seed);
/* Starts `[@pre...] migrate-recv --listen ADDR:0 --json [@args...]` and
 * waits until it listens; fills f->port and f->addr. */
void tu_fx_recv(struct tu_fx *f, const char *const *pre, const char *const *args);
/* Starts `[@pre...] migrate-send --connect f->addr [send_opts...] [@args...]`. */
void tu_fx_send(struct tu_fx *f, const char *const *pre, const char *const *args);
/* The workload: memload on @file (filled with random data first) at
 * @rate MiB/s; its pid in f->pid. */
void tu_fx_load(struct tu_fx *f, const char *file, const char *size, const char *rate);
/* SIGTERM to migrate-recv: its exit code (-1 if it still ran 10 s on). */
int tu_fx_recv_term(struct tu_fx *f);
/* The workload survived a failed migration: alive, not stopped. */
void tu_fx_assert_load_runs(struct tu_fx *f);
/* Stops what still runs and removes the directory. */
void tu_fx_free(struct tu_fx *f);

#endif
