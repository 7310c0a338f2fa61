/* config: defaults and validation of struct rdmig_config, logging through
 * the caller's callback, and the statistics lock shared by both roles. */
#ifndef RDMIG_CONFIG_H
#define RDMIG_CONFIG_H

#include <pthread.h>
#include <stdbool.h>

#include "rdmig.h"
#include "util.h"

#define CFG_PAGE_SIZE 4096u
/* QEMU's downtime-limit default, and migrate-send's. */
#define CFG_MAX_DOWNTIME_MS 300u

/* The public structs as release 0.1.0 had them (test/abi/rdmig-0.1.0.h):
 * what a program built then passes, and 0 in rdmig_stats.size means. */
#define CFG_SIZE_0_1_0 232u
#define STATS_SIZE_0_1_0 192u

/* Copies @in (which may be an older, smaller struct) over the defaults and
 * checks every field; the message names the field and the allowed range. */
int cfg_load(struct rdmig_config *out, const struct rdmig_config *in,
	     struct rd_err *err);
unsigned cfg_chunk_shift(const struct rdmig_config *cfg);

void cfg_log(const struct rdmig_config *cfg, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Callbacks run inside the call that drives their handle, which is in the
 * middle of its work: calling back into that handle (except for the calls
 * rdmig(3), Threads, allows) would run a step inside a step.  Each callback
 * is called between cfg_cb_enter() and cfg_cb_leave(), with a frame on the
 * caller's stack; the frames of the callbacks this thread is inside form a
 * chain (a callback may drive another handle, whose callbacks nest).
 * cfg_in_cb() says whether the handle of @cfg is among them. */
struct cfg_cb_frame {
	const struct rdmig_config *cfg;
	struct cfg_cb_frame *prev;
};

void cfg_cb_enter(struct cfg_cb_frame *f, const struct rdmig_config *cfg);
void cfg_cb_leave(struct cfg_cb_frame *f);
bool cfg_in_cb(const struct rdmig_config *cfg);

/* Statistics written by the migration thread, read from any thread. */
struct stats_box {
	pthread_mutex_t lock;
	struct rdmig_stats st;
	int64_t start_ms, data_start_ms;
	uint64_t ctrl_bytes;    /* control bytes sent, part of "transferred" */
};

void stats_init(struct stats_box *b);
void stats_fini(struct stats_box *b);
void stats_read(struct stats_box *b, struct rdmig_stats *out);
/* Recomputes the derived fields (times, throughput); call with lock held. */
void stats_refresh(struct stats_box *b);

#endif
