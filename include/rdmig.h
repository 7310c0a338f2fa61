/* librdmig: RDMA live-migration transport.  See rdmig(3) and rdmig(7).
 *
 * A source registers its RAM blocks, connects, and then pushes dirty pages
 * iteration by iteration, the device state, and completion.  A destination
 * registers (or maps on demand) the same blocks, accepts one connection and
 * lets the library fill them.  Every function returns 0 (or a documented
 * non-negative value) on success and a negative errno on failure; the
 * message of the last failure is read with rdmig_source_error() /
 * rdmig_dest_error().  The library never prints or exits: messages go to the
 * log callback. */
#ifndef RDMIG_H
#define RDMIG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RDMIG_API __attribute__((visibility("default")))
#else
#define RDMIG_API
#endif

/* The library version, "MAJOR.MINOR.PATCH". */
RDMIG_API const char *rdmig_version(void);

enum rdmig_log_level {
	RDMIG_LOG_ERROR = 0,
	RDMIG_LOG_WARN = 1,
	RDMIG_LOG_INFO = 2,
	RDMIG_LOG_DEBUG = 3,
};

typedef void (*rdmig_log_fn)(void *ctx, int level, const char *msg);

struct rdmig_stats;
/* Called from inside long operations (about every progress_ms) so callers
 * can report progress without threads. */
typedef void (*rdmig_progress_fn)(void *ctx, const struct rdmig_stats *st);

/* Destination: supplies memory for a block the source announced that was not
 * added with rdmig_dest_add_block().  Return 0 with *host set (and
 * *zeroed = 1 when the memory is known to be all zero), or a negative errno
 * with a message in errbuf. */
typedef int (*rdmig_map_fn)(void *ctx, const char *name, uint64_t length,
			    uint32_t page_size, void **host, int *zeroed,
			    char *errbuf, size_t errlen);
/* Destination: receives the device-state byte stream, in order. */
typedef int (*rdmig_state_fn)(void *ctx, const void *data, size_t len);
/* Destination: the whole image has arrived (and verified); make it durable
 * now.  Only after it returns 0 is the source told the migration completed;
 * a negative errno (message in errbuf) fails the migration on both sides,
 * so the source resumes instead of losing its workload. */
typedef int (*rdmig_commit_fn)(void *ctx, char *errbuf, size_t errlen);
/* Destination: the source proved it holds the key (or, without a key, sent
 * its block map) and its image of @image_bytes fits this side's limits.
 * Called once, before any block is mapped or registered: the first point
 * where the peer is known to be who it claims.  Return 0 to take the
 * migration, or a negative errno with the reason in errbuf to turn it away
 * (the source reports the reason). */
typedef int (*rdmig_admit_fn)(void *ctx, uint64_t image_bytes, char *errbuf,
			      size_t errlen);

struct rdmig_config {
	uint32_t size;          /* sizeof(struct rdmig_config); set by init */
	uint32_t chunk_size;    /* registration unit, power of two, 4 KiB..1 GiB (1 MiB) */
	uint32_t merge_max;     /* largest single RDMA WRITE in bytes (chunk_size) */
	int pin_all;            /* register whole blocks at setup (0: per chunk) */
	int zero_pages;         /* detect zero pages and send them as ranges (1) */
	/* Bytes this side pins at most (256 MiB; 0: no cap).  Dynamic mode keeps
	 * within the smaller of both sides' caps; a destination refuses
	 * pin-all of an image larger than its cap. */
	uint64_t pinned_cap;
	int timeout_ms;         /* bound on every wait for the peer (30000) */
	int keepalive_ms;       /* idle interval before a keepalive (timeout/4) */
	int progress_ms;        /* progress callback interval (250) */
	uint32_t ctrl_depth;    /* pre-posted control receive buffers (32) */
	uint32_t ctrl_msg_max;  /* control message size limit in bytes (64 KiB) */
	uint32_t max_writes;    /* RDMA WRITEs in flight at most (256) */
	rdmig_log_fn log;
	void *log_ctx;
	int log_level;          /* RDMIG_LOG_*; messages above it are dropped (INFO) */
	rdmig_progress_fn progress;
	void *progress_ctx;
	rdmig_map_fn map_block; /* destination only */
	void *map_ctx;
	rdmig_state_fn state;   /* destination only */
	void *state_ctx;
	/* Shared key (16..1024 bytes, copied) or NULL.  With a key, both sides
	 * prove they hold it before any memory is registered or an address
	 * leaves the destination; a destination with a key refuses sources
	 * without one.  See rdmig(7), AUTHENTICATION. */
	const void *auth_key;
	size_t auth_key_len;
	int verify;             /* compare per-block digests at completion */
	rdmig_commit_fn commit; /* destination only */
	void *commit_ctx;
	/* Source: connections (QPs) to stripe RDMA WRITEs over, 1..64 (1).
	 * Destination: the most it grants a source (8).  0 picks that default. */
	uint32_t channels;
	rdmig_admit_fn admit;   /* destination only */
	void *admit_ctx;
	/* Destination: the largest image (sum of block lengths) it takes;
	 * 0: the host's physical memory.  Larger ones are refused at the block
	 * map, before anything is mapped. */
	uint64_t max_image;
};

/* Fills @cfg with the defaults shown above. */
RDMIG_API void rdmig_config_init(struct rdmig_config *cfg);

/* Counters shared by the API, the JSON events and the control socket; names
 * follow QEMU's query-migrate where they fit. */
struct rdmig_stats {
	uint64_t total;           /* bytes in all blocks */
	uint64_t transferred;     /* bytes put on the wire: writes and control */
	uint64_t remaining;       /* dirty bytes not yet sent in this iteration */
	uint64_t normal_pages;    /* pages sent with RDMA WRITE */
	uint64_t normal_bytes;
	uint64_t zero_pages;      /* pages found zero ("duplicate") */
	uint64_t zero_pages_skipped; /* ... of which the destination already had */
	uint64_t writes;          /* RDMA WRITE work requests posted */
	uint64_t iterations;      /* completed iterations ("dirty-sync-count") */
	uint64_t register_requests; /* REGISTER_REQ messages (dynamic mode) */
	uint64_t chunks_registered; /* chunk registrations on the destination */
	uint64_t ctrl_sent;       /* control messages sent */
	uint64_t ctrl_received;
	uint64_t state_bytes;     /* device-state bytes sent or received */
	uint64_t pinned_bytes;    /* bytes registered now (this side) */
	uint64_t pinned_peak;
	uint64_t setup_time_ms;   /* connect until ready for the first write */
	uint64_t total_time_ms;   /* connect until now or completion */
	uint64_t data_time_ms;    /* time spent moving pages */
	double mbps;              /* normal_bytes over data_time, megabits/s */
};

/* ---- source ---------------------------------------------------------- */
struct rdmig_source;

RDMIG_API int rdmig_source_create(struct rdmig_source **out,
				  const struct rdmig_config *cfg);
RDMIG_API void rdmig_source_destroy(struct rdmig_source *s);
RDMIG_API const char *rdmig_source_error(const struct rdmig_source *s);

/* Adds a RAM block before connecting; returns its index (>= 0).  @page_size
 * is the dirty-tracking unit (0: 4096). */
RDMIG_API int rdmig_source_add_block(struct rdmig_source *s, const char *name,
				     void *host, uint64_t length,
				     uint32_t page_size);
/* Connects, negotiates, exchanges the block map and (pin-all) registers. */
RDMIG_API int rdmig_source_connect(struct rdmig_source *s, const char *host,
				   const char *port);
/* Marks pages dirty (rounded out to whole pages) for the next iteration. */
RDMIG_API int rdmig_source_mark_dirty(struct rdmig_source *s, unsigned block,
				      uint64_t offset, uint64_t length);
RDMIG_API int rdmig_source_mark_all(struct rdmig_source *s);
/* Sends every page marked dirty, then ends the iteration and waits for the
 * destination's acknowledgement. */
RDMIG_API int rdmig_source_iterate(struct rdmig_source *s);
/* Between iterations: handles pending completions and sends a keepalive
 * when due.  Call it at least every keepalive interval while the
 * application works on something else, or the destination times out. */
RDMIG_API int rdmig_source_poll(struct rdmig_source *s);
/* Appends device-state bytes (after the last iteration). */
RDMIG_API int rdmig_source_send_state(struct rdmig_source *s, const void *data,
				      size_t len);
/* Completes: the destination confirms it holds the whole image. */
RDMIG_API int rdmig_source_complete(struct rdmig_source *s);
/* Safe from any thread: the operation in progress fails with -ECANCELED
 * and the destination is told. */
RDMIG_API void rdmig_source_cancel(struct rdmig_source *s);
/* Safe from any thread. */
RDMIG_API void rdmig_source_stats(struct rdmig_source *s, struct rdmig_stats *st);

/* ---- destination ------------------------------------------------------ */
struct rdmig_listener;
struct rdmig_dest;

RDMIG_API int rdmig_listener_create(struct rdmig_listener **out, const char *host,
				    const char *port, char *errbuf, size_t errlen);
RDMIG_API int rdmig_listener_fd(const struct rdmig_listener *l);
RDMIG_API int rdmig_listener_port(const struct rdmig_listener *l);
/* Takes the next pending connection request and turns it away as busy (the
 * source reports "destination rejected the connection: busy"): for a
 * caller at its limit of migrations.  0, or -EAGAIN when none is pending. */
RDMIG_API int rdmig_listener_refuse(struct rdmig_listener *l);
RDMIG_API void rdmig_listener_destroy(struct rdmig_listener *l);

RDMIG_API int rdmig_dest_create(struct rdmig_dest **out, const struct rdmig_config *cfg);
RDMIG_API void rdmig_dest_destroy(struct rdmig_dest *d);
RDMIG_API const char *rdmig_dest_error(const struct rdmig_dest *d);
/* Adds a block the source must announce with the same name and length.
 * @zeroed: the memory is known to be all zero (skips sending zero pages). */
RDMIG_API int rdmig_dest_add_block(struct rdmig_dest *d, const char *name,
				   void *host, uint64_t length, int zeroed);
/* Takes the next connection request from @l (waiting up to @timeout_ms; 0:
 * -EAGAIN when none is pending), negotiates and accepts it.  A request that
 * cannot be served is rejected with a reason the source reports, and this
 * returns -EPROTO (malformed), -EPROTONOSUPPORT (no common version) or
 * -EACCES (no key offered); after those the handle may accept again. */
RDMIG_API int rdmig_dest_accept(struct rdmig_dest *d, struct rdmig_listener *l,
				int timeout_ms);
/* Blocking: serves the accepted migration until it completes (0) or fails. */
RDMIG_API int rdmig_dest_run(struct rdmig_dest *d);
/* Event-loop use: the fds to watch for reading (returns how many, at most
 * RDMIG_DEST_MAX_FDS; the set is fixed once rdmig_dest_accept() returns), ... */
#define RDMIG_DEST_MAX_FDS 3
RDMIG_API int rdmig_dest_fds(const struct rdmig_dest *d, int *fds, int max);
/* ... milliseconds until rdmig_dest_process() must run even without
 * activity (deadlines, keepalives), ... */
RDMIG_API int rdmig_dest_timeout(const struct rdmig_dest *d);
/* ... and one non-blocking step: 0 while in progress, 1 once the migration
 * completed with a whole image, or a negative errno when it failed. */
RDMIG_API int rdmig_dest_process(struct rdmig_dest *d);
RDMIG_API void rdmig_dest_stats(struct rdmig_dest *d, struct rdmig_stats *st);
/* Fails the migration with -ECANCELED and tells the source @reason.  Call
 * it from the thread that drives the destination. */
RDMIG_API void rdmig_dest_cancel(struct rdmig_dest *d, const char *reason);
/* Block lookup after completion: name, host address, length. */
RDMIG_API int rdmig_dest_block(const struct rdmig_dest *d, unsigned idx,
			       const char **name, void **host, uint64_t *length);
RDMIG_API int rdmig_dest_nblocks(const struct rdmig_dest *d);
/* The source's address as "HOST:PORT" once accepted (for logs); 0, or
 * -ENOTCONN. */
RDMIG_API int rdmig_dest_peer(const struct rdmig_dest *d, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
