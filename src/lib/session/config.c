#include "config.h"

#include "auth.h"
#include "lathist.h"
#include "privdata.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void config_defaults(struct rdmig_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->size = sizeof(*cfg);
	cfg->chunk_size = 1u << 20;
	cfg->merge_max = 1u << 20;
	cfg->zero_pages = 1;
	cfg->pinned_cap = 256ull << 20;
	cfg->timeout_ms = 30000;
	cfg->keepalive_ms = 0; /* derived from timeout_ms */
	cfg->progress_ms = 250;
	cfg->ctrl_depth = 32;
	cfg->ctrl_msg_max = 64u << 10;
	cfg->max_writes = 256;
	cfg->log_level = RDMIG_LOG_INFO;
	cfg->step_us = 10000;
	cfg->max_downtime_ms = CFG_MAX_DOWNTIME_MS;
	cfg->stall_rounds = 5;
	/* QEMU's cpu-throttle-initial, -increment and max-cpu-throttle. */
	cfg->throttle_initial = 20;
	cfg->throttle_increment = 10;
	cfg->throttle_max = 99;
	cfg->state_max = RDMIG_STATE_UNSAID;
	cfg->postcopy_uffd = -1;
}

void rdmig_config_init_sized(struct rdmig_config *cfg, size_t size)
{
	struct rdmig_config def;

	config_defaults(&def);
	/* A caller built against an older header has a smaller struct: only
	 * that much is its own.  One built against a newer header has fields
	 * this library does not know: they are left zero. */
	if (size > sizeof(def)) {
		memset((char *)cfg + sizeof(def), 0, size - sizeof(def));
		size = sizeof(def);
	}
	def.size = (uint32_t)size;
	memcpy(cfg, &def, size);
}

/* The 0.1.0 entry point, for programs built before the macro: their struct
 * is 0.1.0's. */
#undef rdmig_config_init
void rdmig_config_init(struct rdmig_config *cfg)
{
	rdmig_config_init_sized(cfg, CFG_SIZE_0_1_0);
}

static int range_err(struct rd_err *err, const char *field, uint64_t v,
		     uint64_t lo, uint64_t hi)
{
	return rd_err_set(err, -EINVAL, "config: %s = %llu is outside %llu..%llu", field,
			  (unsigned long long)v, (unsigned long long)lo,
			  (unsigned long long)hi);
}

/* The convergence policy's fields (rdmig_source_advice()). */
static int conv_load(struct rdmig_config *c, struct rd_err *err)
{
	if (!c->max_downtime_ms)
		c->max_downtime_ms = CFG_MAX_DOWNTIME_MS;
	if (c->on_limit < RDMIG_ON_LIMIT_CANCEL || c->on_limit > RDMIG_ON_LIMIT_SWITCH_OVER)
		return range_err(err, "on_limit", (uint64_t)(int64_t)c->on_limit,
				 RDMIG_ON_LIMIT_CANCEL, RDMIG_ON_LIMIT_SWITCH_OVER);
	if (c->throttle_max < 1 || c->throttle_max > 99)
		return range_err(err, "throttle_max", c->throttle_max, 1, 99);
	if (c->throttle_initial < 1 || c->throttle_initial > c->throttle_max)
		return range_err(err, "throttle_initial", c->throttle_initial, 1, c->throttle_max);
	if (c->throttle_increment < 1 || c->throttle_increment > 99)
		return range_err(err, "throttle_increment", c->throttle_increment, 1, 99);
	return 0;
}

int cfg_load(struct rdmig_config *out, const struct rdmig_config *in,
	     struct rd_err *err)
{
	config_defaults(out);
	if (in) {
		if (in->size < offsetof(struct rdmig_config, log) || in->size > sizeof(*in))
			return rd_err_set(err, -EINVAL, "config: size %u is not a struct "
					  "rdmig_config from rdmig_config_init()", in->size);
		memcpy(out, in, in->size);
		out->size = sizeof(*out);
	}
	if (!rd_is_pow2(out->chunk_size) || out->chunk_size < 4096 || out->chunk_size > (1u << 30))
		return rd_err_set(err, -EINVAL, "config: chunk_size %u must be a power of "
				  "two from 4096 to 1 GiB", out->chunk_size);
	if (out->merge_max == 0 || out->merge_max > out->chunk_size)
		out->merge_max = out->chunk_size;
	if (out->merge_max < 4096)
		return range_err(err, "merge_max", out->merge_max, 4096, out->chunk_size);
	if (out->timeout_ms < 100)
		return range_err(err, "timeout_ms", (uint64_t)(int64_t)out->timeout_ms, 100, INT32_MAX);
	/* At most a second apart by default: the peer's timeout is its own
	 * and may be shorter than ours, which matters once a connection sits
	 * idle (a prepared migration waiting for its start). */
	if (out->keepalive_ms <= 0 || out->keepalive_ms > out->timeout_ms / 2)
		out->keepalive_ms = out->timeout_ms / 4 < 1000 ? out->timeout_ms / 4 : 1000;
	if (out->progress_ms <= 0)
		out->progress_ms = 250;
	if (out->step_us == 0)
		out->step_us = 10000;
	if (conv_load(out, err))
		return -EINVAL;
	if (out->populate < RDMIG_POPULATE_PIN_ALL || out->populate > RDMIG_POPULATE_NONE)
		return range_err(err, "populate", (uint64_t)(int64_t)out->populate,
				 RDMIG_POPULATE_PIN_ALL, RDMIG_POPULATE_NONE);
	if (out->ctrl_depth < 4 || out->ctrl_depth > 1024)
		return range_err(err, "ctrl_depth", out->ctrl_depth, 4, 1024);
	if (out->ctrl_msg_max < 4096 || out->ctrl_msg_max > (16u << 20))
		return range_err(err, "ctrl_msg_max", out->ctrl_msg_max, 4096, 16u << 20);
	if (out->max_writes < 1 || out->max_writes > 4096)
		return range_err(err, "max_writes", out->max_writes, 1, 4096);
	if (out->channels > PD_CHANNELS_MAX)
		return range_err(err, "channels", out->channels, 1, PD_CHANNELS_MAX);
	if (out->auth_key && (out->auth_key_len < AUTH_KEY_MIN || out->auth_key_len > AUTH_KEY_MAX))
		return rd_err_set(err, -EINVAL, "config: the authentication key has %zu bytes, "
				  "it needs %d to %d", out->auth_key_len, AUTH_KEY_MIN, AUTH_KEY_MAX);
	if (out->auth_key && auth_init(err))
		return -EIO;
	if (!out->pin_all && out->pinned_cap && out->pinned_cap < 2ull * out->chunk_size)
		return rd_err_set(err, -EINVAL, "config: pinned_cap %llu must hold at least "
				  "two chunks of %u bytes", (unsigned long long)out->pinned_cap,
				  out->chunk_size);
	return 0;
}

unsigned cfg_chunk_shift(const struct rdmig_config *cfg)
{
	return (unsigned)__builtin_ctz(cfg->chunk_size);
}

void cfg_log(const struct rdmig_config *cfg, int level, const char *fmt, ...)
{
	char msg[512];
	struct cfg_cb_frame f;
	va_list ap;

	if (!cfg->log || level > cfg->log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cfg_cb_enter(&f, cfg);
	cfg->log(cfg->log_ctx, level, msg);
	cfg_cb_leave(&f);
}

/* The innermost callback this thread runs; the driving thread's alone, as
 * the callbacks are. */
static __thread struct cfg_cb_frame *cb_top;

void cfg_cb_enter(struct cfg_cb_frame *f, const struct rdmig_config *cfg)
{
	f->cfg = cfg;
	f->prev = cb_top;
	cb_top = f;
}

void cfg_cb_leave(struct cfg_cb_frame *f)
{
	cb_top = f->prev;
}

bool cfg_in_cb(const struct rdmig_config *cfg)
{
	const struct cfg_cb_frame *f;

	for (f = cb_top; f; f = f->prev)
		if (f->cfg == cfg)
			return true;
	return false;
}

void stats_init(struct stats_box *b)
{
	memset(b, 0, sizeof(*b));
	pthread_mutex_init(&b->lock, NULL);
}

void stats_fini(struct stats_box *b)
{
	pthread_mutex_destroy(&b->lock);
}

void stats_refresh(struct stats_box *b)
{
	int64_t now = rd_now_ms();

	if (b->start_ms)
		b->st.total_time_ms = (uint64_t)(now - b->start_ms);
	if (b->data_start_ms)
		b->st.data_time_ms = (uint64_t)(now - b->data_start_ms);
	if (b->st.data_time_ms)
		b->st.mbps = (double)b->st.normal_bytes * 8.0 / 1000.0 /
			     (double)b->st.data_time_ms;
}

void stats_read(struct stats_box *b, struct rdmig_stats *out)
{
	pthread_mutex_lock(&b->lock);
	*out = b->st;
	pthread_mutex_unlock(&b->lock);
}

_Static_assert(sizeof(struct rdmig_config) >= CFG_SIZE_0_1_0, "rdmig_config only grows");
_Static_assert(sizeof(struct rdmig_stats) >= STATS_SIZE_0_1_0, "rdmig_stats only grows");
_Static_assert(LATHIST_BUCKETS == RDMIG_LATENCY_BUCKETS, "QEMU's buckets, in both");
