/* librdmig: RDMA live-migration transport.  See rdmig(3) and rdmig(7).
 *
 * A source registers its RAM blocks, connects, and then pushes dirty pages
 * iteration by iteration, device state at any time, and completion.  A
 * destination registers (or maps on demand) the same blocks, accepts one
 * connection and lets the library fill them.  Both can be driven from the
 * caller's own poll loop (fds, a timeout and a non-blocking process step)
 * or with blocking calls that wrap exactly that.
 *
 * Every function returns 0 (or a documented non-negative value) on success
 * and a negative errno on failure; the message of the last failure is read
 * with rdmig_source_error() / rdmig_dest_error().  The library never prints
 * or exits: messages go to the log callback.
 *
 * Threads: one thread drives a handle (every call below on it).  Only
 * rdmig_*_stats(), rdmig_*_cancel() and rdmig_source_set_max_bandwidth()
 * may be called from any other thread, at any time while the handle
 * exists.  Callbacks run on the driving thread, inside the call that
 * drives; they may call those three functions but nothing else on the same
 * handle.  The block set is fixed once connecting/accepting begins. */
#ifndef RDMIG_H
#define RDMIG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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
/* Destination: the next @len bytes of the device-state stream, in the order
 * the source sent them (before, between or after iterations).  @data is
 * valid only during the call (it is a receive buffer, reused at once):
 * copy what you keep.  Return 0, or a negative errno with a message in
 * errbuf to fail the migration on both sides. */
typedef int (*rdmig_state_fn)(void *ctx, const void *data, size_t len,
			      char *errbuf, size_t errlen);
/* Destination: the whole image has arrived (and verified); make it durable
 * now.  Only after it returns 0 is the source told the migration completed;
 * a negative errno (message in errbuf) fails the migration on both sides,
 * so the source resumes instead of losing its workload.  Do not mark the
 * image usable here: rdmig_dest_process() returns 1 once the source holds
 * the confirmation. */
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
	int pin_all;            /* register whole blocks, in pieces, ahead (0: per chunk) */
	int zero_pages;         /* detect zero pages and send them as ranges (1) */
	/* Bytes this side pins at most (256 MiB; 0: no cap).  Dynamic mode keeps
	 * within the smaller of both sides' caps; a destination refuses
	 * pin-all of an image larger than its cap. */
	uint64_t pinned_cap;
	int timeout_ms;         /* connection setup, and the peer's silence (30000) */
	int keepalive_ms;       /* idle interval before a keepalive
				 * (timeout/4, at most 1000) */
	int progress_ms;        /* progress callback interval (250) */
	uint32_t ctrl_depth;    /* pre-posted control receive buffers (32) */
	uint32_t ctrl_msg_max;  /* control message size limit in bytes (64 KiB) */
	uint32_t max_writes;    /* RDMA WRITEs in flight per channel (256) */
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
	/* Source: page data per second at most (0: no limit); changeable while
	 * running with rdmig_source_set_max_bandwidth(). */
	uint64_t max_bandwidth;
	/* The work one rdmig_source_process() (or rdmig_dest_process()) does
	 * at most: this many microseconds (10000) and, on a source, when not
	 * 0, this many bytes of WRITEs. */
	uint32_t step_us;
	uint64_t step_bytes;
	/* Destination: a helper thread makes the blocks' pages present ahead
	 * of registration (MADV_POPULATE_WRITE, Linux 5.14 and later), so
	 * pinning does not allocate and clear them while the link waits. */
	int populate;           /* RDMIG_POPULATE_* (PIN_ALL) */
};

enum rdmig_populate {
	RDMIG_POPULATE_PIN_ALL = 0, /* in pin-all mode, which pins every page anyway */
	/* In dynamic mode too: every page of the image is allocated, holes
	 * included, and a page that cannot be (no memory, a full tmpfs) fails
	 * the migration at once instead of at first touch. */
	RDMIG_POPULATE_ALL = 1,
	RDMIG_POPULATE_NONE = 2,
};

/* Fills @cfg with the defaults shown above. */
RDMIG_API void rdmig_config_init(struct rdmig_config *cfg);

enum rdmig_status {
	RDMIG_STATUS_NONE = 0,    /* not connected yet */
	RDMIG_STATUS_SETUP,       /* connecting, authenticating, block map, pinning */
	RDMIG_STATUS_ACTIVE,      /* connected: iterations and device state */
	RDMIG_STATUS_COMPLETING,  /* COMPLETE sent (or being saved), not yet confirmed */
	RDMIG_STATUS_COMPLETED,
	RDMIG_STATUS_FAILED,
	RDMIG_STATUS_CANCELLED,
};

/* Counters shared by the API, the JSON events and the control socket; names
 * follow QEMU's query-migrate where they fit.  Set @size to
 * sizeof(struct rdmig_stats) before asking (0 means this version's size):
 * the struct grows at the end, and only @size bytes are written. */
struct rdmig_stats {
	uint32_t size;
	uint32_t status;          /* enum rdmig_status */
	uint64_t total;           /* bytes in all blocks */
	uint64_t transferred;     /* bytes put on the wire: writes and control */
	/* Source: bytes marked dirty and not sent yet (this iteration's and the
	 * next's).  Destination: 0. */
	uint64_t remaining;
	uint64_t normal_pages;    /* pages sent (received) with RDMA WRITE */
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
	/* Source: remaining at the bandwidth of the last iteration, in ms. */
	uint64_t expected_downtime_ms;
	/* Source: bytes marked dirty per second, between the starts of the
	 * last two iterations ("dirty-pages-rate" x page size). */
	uint64_t dirty_rate;
	uint64_t first_write_ms;  /* source: connect until the first WRITE left */
};

/* ---- source ---------------------------------------------------------- */
struct rdmig_source;

RDMIG_API int rdmig_source_create(struct rdmig_source **out,
				  const struct rdmig_config *cfg);
RDMIG_API void rdmig_source_destroy(struct rdmig_source *s);
RDMIG_API const char *rdmig_source_error(const struct rdmig_source *s);

/* Adds a RAM block before connecting; returns its index (>= 0).  @name is
 * 1..255 printable ASCII bytes (QEMU's RAMBlock idstr: "pc.ram",
 * "/rom@etc/acpi/tables", "0000:00:02.0/vga.vram").  @page_size is the
 * dirty-tracking unit, a power of two from 4 KiB to 1 GiB (0: 4096); it may
 * exceed the chunk size (huge pages). */
RDMIG_API int rdmig_source_add_block(struct rdmig_source *s, const char *name,
				     void *host, uint64_t length,
				     uint32_t page_size);

/* Marks pages dirty (rounded out to whole pages) for the next iteration;
 * marks made while an iteration runs go to the one after it. */
RDMIG_API int rdmig_source_mark_dirty(struct rdmig_source *s, unsigned block,
				      uint64_t offset, uint64_t length);
/* The same from a bitmap as KVM and QEMU keep it: bit i of the unsigned
 * long words at @bitmap (bit i % BITS of word i / BITS) is page
 * @first_page + i of the block, in its page size; @npages bits are read. */
RDMIG_API int rdmig_source_mark_dirty_bitmap(struct rdmig_source *s, unsigned block,
					     const unsigned long *bitmap,
					     uint64_t first_page, uint64_t npages);
RDMIG_API int rdmig_source_mark_all(struct rdmig_source *s);

/* Event-loop use.  Start an operation, then call rdmig_source_process()
 * whenever the fd is readable or the timeout passed: it returns 1 once the
 * operation finished, 0 while it goes on, or a negative errno when the
 * migration failed.  One operation at a time; device state may be queued
 * in between, and during an iteration. */
RDMIG_API int rdmig_source_connect_async(struct rdmig_source *s, const char *host,
					 const char *port);
/* Begins an iteration of the pages marked dirty so far; it ends when the
 * destination acknowledged every page of it. */
RDMIG_API int rdmig_source_iterate_async(struct rdmig_source *s);
/* Sends COMPLETE (with digests when verifying); done when the destination
 * confirmed it holds the whole image. */
RDMIG_API int rdmig_source_complete_async(struct rdmig_source *s);
/* One fd (an epoll fd over the connections and the cancel event) to watch
 * for reading; valid from rdmig_source_create() on. */
RDMIG_API int rdmig_source_fd(const struct rdmig_source *s);
/* Milliseconds until rdmig_source_process() must run even without activity
 * (deadlines, keepalives, the bandwidth limit); 0 means "call it again
 * now" (the last step stopped at its bound with work left, which the fd may
 * never announce); -1 when nothing is due. */
RDMIG_API int rdmig_source_timeout(const struct rdmig_source *s);
/* One non-blocking step: at most 256 completions, about step_us of work
 * (and at most step_bytes of WRITEs when set), then the one operation in
 * hand is finished: a post of at most 32 WRITEs or 1 MiB, one chunk or
 * 16 MiB pin-all piece registration, one MiB of a verify digest, or one
 * connection-setup call.  See rdmig(3), "Bounded steps". */
RDMIG_API int rdmig_source_process(struct rdmig_source *s);
/* The same with this call's own budget: @max_bytes of WRITEs (0: none
 * besides step_bytes) and @max_us of work (0: step_us).  For a save loop
 * that must return on time. */
RDMIG_API int rdmig_source_step(struct rdmig_source *s, uint64_t max_bytes,
				unsigned max_us);
/* Queues device-state bytes: returns how many were taken (0 when the
 * control channel has no room now: process, then try again), or a negative
 * errno.  Allowed once connected, before, between, during and after
 * iterations, before completing; they reach the destination in order. */
RDMIG_API ssize_t rdmig_source_write_state(struct rdmig_source *s, const void *data,
					   size_t len);

/* Blocking use: each runs the operation to its end, waiting on the fd. */
RDMIG_API int rdmig_source_connect(struct rdmig_source *s, const char *host,
				   const char *port);
RDMIG_API int rdmig_source_iterate(struct rdmig_source *s);
/* Sends all of @data as device state. */
RDMIG_API int rdmig_source_send_state(struct rdmig_source *s, const void *data,
				      size_t len);
RDMIG_API int rdmig_source_complete(struct rdmig_source *s);
/* Between operations: handles completions and sends keepalives.  Call it at
 * least every keepalive interval while the application does something
 * else, or the destination times out. */
RDMIG_API int rdmig_source_poll(struct rdmig_source *s);

/* Any thread: page data per second at most from now on (0: no limit). */
RDMIG_API void rdmig_source_set_max_bandwidth(struct rdmig_source *s, uint64_t bytes_per_s);
/* Any thread: the operation in progress (connecting, resolving, pinning,
 * iterating, hashing for verify) fails with -ECANCELED and the destination
 * is told.  Once COMPLETE has gone the destination's answer decides: a
 * cancel then waits for it (see rdmig(3)). */
RDMIG_API void rdmig_source_cancel(struct rdmig_source *s);
/* Any thread. */
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
#define RDMIG_DEST_MAX_FDS 4
RDMIG_API int rdmig_dest_fds(const struct rdmig_dest *d, int *fds, int max);
/* ... milliseconds until rdmig_dest_process() must run even without
 * activity (deadlines, keepalives); 0 means "call it again now": the last
 * call stopped at its bound with work left, which the fds may never
 * announce; -1 once it completed or failed ... */
RDMIG_API int rdmig_dest_timeout(const struct rdmig_dest *d);
/* ... and one non-blocking, bounded step: at most 32 control messages and
 * 64 completions, and about step_us of work (read between messages and
 * between 1 MiB slices of zero ranges or of a verify digest), so whatever
 * the source sends, the call returns and the caller's loop goes on.
 * 0 while in progress, 1 once the migration completed with a whole image
 * and the source holds the confirmation, or a negative errno when it
 * failed.  See rdmig(3), "Bounded steps". */
RDMIG_API int rdmig_dest_process(struct rdmig_dest *d);
/* Any thread. */
RDMIG_API void rdmig_dest_stats(struct rdmig_dest *d, struct rdmig_stats *st);
/* Any thread: the migration fails with -ECANCELED and the source is told
 * @reason, at the next rdmig_dest_process() (woken through its fds). */
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
