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
 * rdmig_*_stats(), rdmig_*_cancel(), rdmig_dest_pause_state(),
 * rdmig_source_set_max_bandwidth() and rdmig_source_set_limit() may be
 * called from any other thread, at any time while the handle exists, and
 * the marking functions once connecting began.  Callbacks run on the driving thread, inside the call
 * that drives; they may call those functions but nothing else on the same
 * handle (dirty_sync marks): what drives or changes it returns -EDEADLK,
 * and the callback may not destroy it.  The block set is fixed once
 * connecting/accepting begins.  See rdmig(3), Threads. */
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
 * valid only during the call (a receive buffer or the state ring, reused
 * at once): copy what you keep.  The ring is written by the source over
 * RDMA: parse a copy when the source may mean harm.  Return 0, or a negative errno with a message in
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
struct rdmig_source;
/* Source: the library takes the VMM's dirty log (QEMU's
 * migration_bitmap_sync): when an iteration is about to begin, when one
 * has ended (so remaining and expected_downtime_ms count what its time
 * dirtied as soon as it is done) and when completing.  Mark what changed
 * since the last call, from the VMM's dirty log, with
 * rdmig_source_mark_dirty*() on @s.  What is marked by the time it returns
 * goes into the next iteration (the one beginning, when one is).  Return
 * 0, or a negative errno with a message in errbuf to fail the migration
 * (the destination is told). */
typedef int (*rdmig_dirty_sync_fn)(void *ctx, struct rdmig_source *s, char *errbuf,
				   size_t errlen);
/* Destination: post-copy began.  All the device state arrived (the state
 * callback had it), and every page the guest lacks is fetched from the
 * source on first touch by a thread of the library from now on: start the
 * vCPUs.  Return 0, or a negative errno with a message in errbuf to fail
 * the migration (the guest must not have run then: since 0.3.0 the source
 * is told it never ran, and may resume its own copy). */
typedef int (*rdmig_postcopy_fn)(void *ctx, char *errbuf, size_t errlen);

struct rdmig_config {
	uint32_t size;          /* sizeof(struct rdmig_config); set by init */
	uint32_t chunk_size;    /* registration unit, power of two, 4 KiB..1 GiB (1 MiB);
				 * raised to the blocks' largest page up to 2 MiB */
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
	/* Since 0.2.0 (older programs get the defaults). */
	/* Source: called at the start and at the end of every iteration to
	 * pull the dirty pages (NULL: the caller pushes them with
	 * rdmig_source_mark_dirty*() itself). */
	rdmig_dirty_sync_fn dirty_sync;
	void *dirty_ctx;
	/* Since 0.3.0 (older programs get the defaults): the convergence
	 * policy rdmig_source_advice() applies after each iteration; see
	 * rdmig(3), Convergence.  Source only. */
	/* The longest the guest may stay paused for the switch-over (300; 0
	 * picks it): the pages left at the measured bandwidth, plus... */
	uint32_t max_downtime_ms;
	/* ... the VMM's own fixed cost of switching over (stopping the vCPUs,
	 * device state, starting on the destination), in ms (0). */
	uint32_t switchover_ms;
	/* The most the migration may take from connecting, in all and per GiB
	 * of image (KubeVirt's completionTimeoutPerGiB); the smaller applies
	 * (0: no limit). */
	uint64_t max_time_ms;
	uint64_t max_time_per_gib_ms;
	/* Rounds at most without converging (0: no limit). */
	uint32_t max_iterations;
	/* Rounds in a row that leave no less than the least left after an
	 * earlier one: the migration stalled (5; 0: not watched). */
	uint32_t stall_rounds;
	/* Advise throttling the guest when its rounds stop shrinking (0). */
	int auto_converge;
	/* What the advice says when a limit is reached before converging:
	 * RDMIG_ON_LIMIT_* (CANCEL: give up, the guest runs on). */
	int on_limit;
	/* The throttle, in percent of the vCPUs' time taken away, as QEMU's
	 * auto-converge: the first (20), the step (10), the most (99); with
	 * tailslow, a step is cut to what should make the dirty rate fit (0). */
	uint32_t throttle_initial;
	uint32_t throttle_increment;
	uint32_t throttle_max;
	int throttle_tailslow;
	/* Source: device-state bytes it sends at most.  Announced to the
	 * destination, which holds the source to it (more fails the
	 * migration) and may reserve room for that much;
	 * rdmig_source_write_state() refuses more with -EFBIG.  0: no device
	 * state at all; RDMIG_STATE_UNSAID (the default): not announced. */
	uint64_t state_max;
	/* Post-copy (rdmig(3), Post-copy), since 0.3.0.  Source: the VMM may
	 * switch to post-copy (rdmig_source_postcopy_async()); its blocks are
	 * registered for the destination to read, in the background from the
	 * block map on (after authentication, with a key), and it reads them
	 * only once the switch told it where.  Destination: it takes a
	 * switch; its blocks must then be private anonymous or shared
	 * (tmpfs, memfd) memory of 4 KiB pages.  (0) */
	int postcopy;
	/* Destination: a userfaultfd the VMM made, UFFDIO_API done (with
	 * UFFD_FEATURE_MINOR_SHMEM for blocks in shared memory), that the
	 * library registers the blocks on and serves at the switch, and
	 * leaves open; -1 (the default): the library makes its own. */
	int postcopy_uffd;
	/* Destination: called when post-copy begins (NULL: the VMM sees
	 * status RDMIG_STATUS_POSTCOPY in the statistics). */
	rdmig_postcopy_fn postcopy_start;
	void *postcopy_ctx;
	/* Source, since 0.3.0: page data per second the pages left may go at
	 * once the guest is paused (QEMU's avail-switchover-bandwidth, with
	 * its max-bandwidth lifted in the downtime): the policy predicts the
	 * downtime at it (no faster than a round shows the link carries when
	 * max_bandwidth does not hold it back), and completion paces its last
	 * pages at it.  0: max_bandwidth binds them too. */
	uint64_t switchover_bandwidth;
};

enum rdmig_on_limit {
	RDMIG_ON_LIMIT_CANCEL = 0,      /* the advice is RDMIG_GIVE_UP */
	/* The advice is RDMIG_SWITCH_OVER with the downtime it predicts, over
	 * max_downtime_ms: the operator chose a longer pause over a failed
	 * migration. */
	RDMIG_ON_LIMIT_SWITCH_OVER = 1,
};

#define RDMIG_STATE_UNSAID UINT64_MAX
/* What a destination registers for device state besides its pages, when it
 * takes state (a state callback): a ring the source writes into.  With its
 * two control rings (ctrl_depth x ctrl_msg_max each) that is what one
 * migration pins beyond pinned_cap. */
#define RDMIG_STATE_RING_BYTES (4u << 20)

enum rdmig_populate {
	RDMIG_POPULATE_PIN_ALL = 0, /* in pin-all mode, which pins every page anyway */
	/* In dynamic mode too: every page of the image is allocated, holes
	 * included, and a page that cannot be (no memory, a full tmpfs) fails
	 * the migration at once instead of at first touch. */
	RDMIG_POPULATE_ALL = 1,
	RDMIG_POPULATE_NONE = 2,
};

/* Fills @cfg with the defaults shown above.  The struct grows at the end
 * from one release to the next: rdmig_config_init() passes the size of the
 * struct the caller was built with, so a newer library never writes past
 * it, and takes the fields the caller does not know at their defaults.
 * (The function of that name, without the macro, is the 0.1.0 entry
 * point: it fills a 0.1.0 struct.) */
RDMIG_API void rdmig_config_init_sized(struct rdmig_config *cfg, size_t size);
RDMIG_API void rdmig_config_init(struct rdmig_config *cfg);
#define rdmig_config_init(cfg) rdmig_config_init_sized((cfg), sizeof(*(cfg)))

enum rdmig_status {
	RDMIG_STATUS_NONE = 0,    /* not connected yet */
	RDMIG_STATUS_SETUP,       /* connecting, authenticating, block map, pinning */
	RDMIG_STATUS_ACTIVE,      /* connected: iterations and device state */
	RDMIG_STATUS_COMPLETING,  /* COMPLETE sent (or being saved), not yet confirmed */
	RDMIG_STATUS_COMPLETED,
	RDMIG_STATUS_FAILED,
	RDMIG_STATUS_CANCELLED,
	/* Since 0.3.0: switched to post-copy, the guest runs on the
	 * destination, which reads the pages it lacks (QEMU's
	 * "postcopy-active"); COMPLETING follows once it holds them all. */
	RDMIG_STATUS_POSTCOPY,
	/* Since 0.3.0, with post-copy recovery: the link broke after the
	 * switch.  The destination's guest runs on with what it holds, a
	 * thread that touches a missing page waits; the source holds its
	 * memory and reconnects; both wait until the post-copy resumes or
	 * is cancelled (QEMU's "postcopy-paused"). */
	RDMIG_STATUS_POSTCOPY_PAUSED,
};

/* What a failed migration failed of, for deciding what to do next (retry,
 * fall back, give up); the text of rdmig_*_error() says the rest. */
enum rdmig_error_class {
	RDMIG_ERROR_NONE = 0,     /* the handle has not failed */
	/* This side: memory, registration, the locked-memory limit, a
	 * callback's refusal, the configuration, blocks that do not match
	 * the peer's. */
	RDMIG_ERROR_LOCAL,
	/* The peer: it refused the connection or the migration with a reason,
	 * reported an error, failed authentication or broke the protocol. */
	RDMIG_ERROR_PEER,
	/* The link: nobody listening, unreachable, disconnected, a transport
	 * error; the same migration may succeed when tried again. */
	RDMIG_ERROR_CONNECTION,
	RDMIG_ERROR_TIMEOUT,      /* the peer did not answer within timeout_ms */
	RDMIG_ERROR_CANCELLED,    /* rdmig_*_cancel(), on this side or the peer's */
};

/* Buckets of rdmig_stats' postcopy_latency_dist, as QEMU's. */
#define RDMIG_LATENCY_BUCKETS 24

/* Counters shared by the API, the JSON events and the control socket; names
 * follow QEMU's query-migrate where they fit.  Set @size to
 * sizeof(struct rdmig_stats) before asking: the struct grows at the end,
 * only @size bytes are written, and @size comes back as the bytes filled.
 * 0 means the struct of release 0.1.0 (192 bytes), never a later one. */
struct rdmig_stats {
	uint32_t size;
	uint32_t status;          /* enum rdmig_status */
	uint64_t total;           /* bytes in all blocks */
	uint64_t transferred;     /* bytes put on the wire: writes and control */
	/* Source: bytes marked dirty and not sent yet (this iteration's and the
	 * next's): with dirty_sync, all the VMM's log held when the last
	 * iteration ended; without, what it marked.  Destination: 0. */
	uint64_t remaining;
	/* Pages sent with RDMA WRITE (or inside PAGES messages).  Destination:
	 * what landed as the source reported it, at most about 100 ms behind
	 * (a source before 0.2.0 reports it at each iteration's end). */
	uint64_t normal_pages;
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
	/* Source: remaining at the page bandwidth of the last iteration that
	 * moved 1 MiB or more (of the first, if none did; max_bandwidth when
	 * lower), in ms; 0 until an iteration was measured. */
	uint64_t expected_downtime_ms;
	/* Source: bytes marked dirty per second, between the starts of the
	 * last two iterations ("dirty-pages-rate" x page size). */
	uint64_t dirty_rate;
	uint64_t first_write_ms;  /* source: connect until the first WRITE left */
	/* Since 0.2.0: the last completed iteration.  Its page data (written
	 * or sent in PAGES; destination: as its ITER_END said), the zero pages
	 * found in it (destination: cleared or skipped in it), and how long it
	 * took (source: its start to the destination's acknowledgement;
	 * destination: from the previous ITER_END, or the block map, to its
	 * own). */
	uint64_t last_iter_bytes;
	uint64_t last_iter_zero_pages;
	uint64_t last_iter_ms;
	/* Since 0.3.0: the device-state bytes the source announced it sends
	 * at most (its config's state_max; on the destination from the block
	 * map on, so the admit callback can reserve room for them), or
	 * RDMIG_STATE_UNSAID. */
	uint64_t state_max;
	/* Since 0.3.0, post-copy (all 0 when the migration did not switch).
	 * The pages the destination lacked at the switch (the set), and how
	 * they came: read because the guest touched them, or by the
	 * background pass; the time from the switch until every one was in
	 * (so far, until then). */
	uint64_t postcopy_pages;
	uint64_t postcopy_fault_pages;
	uint64_t postcopy_background_pages;
	uint64_t postcopy_ms;
	/* Destination: faults that waited for a page from the source
	 * (QEMU's postcopy-requests, counted where they happen), their mean
	 * latency from the fault read to the page placed (QEMU's
	 * postcopy-latency), the largest, their sum (the time threads were
	 * blocked: QEMU's postcopy-vcpu-blocktime, summed over the threads),
	 * the mean round trip of a fault's RDMA READ (post to completion),
	 * and the latencies as QEMU's postcopy-latency-dist: bucket N counts
	 * [2^N, 2^(N+1)) microseconds, the first everything under 2 us, the
	 * last everything from 2^23 us. */
	uint64_t postcopy_faults;
	uint64_t postcopy_latency_ns;
	uint64_t postcopy_latency_max_ns;
	uint64_t postcopy_blocked_ms;
	uint64_t postcopy_read_ns;
	uint64_t postcopy_latency_dist[RDMIG_LATENCY_BUCKETS];
};

/* ---- source ---------------------------------------------------------- */
struct rdmig_source;

RDMIG_API int rdmig_source_create(struct rdmig_source **out,
				  const struct rdmig_config *cfg);
RDMIG_API void rdmig_source_destroy(struct rdmig_source *s);
RDMIG_API const char *rdmig_source_error(const struct rdmig_source *s);
/* enum rdmig_error_class of the failure the handle ended in
 * (RDMIG_ERROR_NONE while it has not failed); like rdmig_source_error(),
 * from the driving thread. */
RDMIG_API int rdmig_source_error_class(const struct rdmig_source *s);
/* Since 0.3.0: 1 when the handle failed and the destination's ERROR said
 * its guest never ran with this migration's memory (it failed before the
 * switch, or its postcopy_start callback failed), else 0.  After
 * rdmig_source_postcopy_async() this is the one case where the guest may
 * be resumed here: the destination's word, from the peer that proved the
 * key (rdmig(7), THREAT MODEL).  An older destination never says it. */
RDMIG_API int rdmig_source_guest_never_ran(const struct rdmig_source *s);

/* Adds a RAM block before connecting; returns its index (>= 0).  @name is
 * 1..255 printable ASCII bytes (QEMU's RAMBlock idstr: "pc.ram",
 * "/rom@etc/acpi/tables", "0000:00:02.0/vga.vram").  @page_size is the
 * dirty-tracking unit, a power of two from 4 KiB to 1 GiB (0: 4096); it may
 * exceed chunk_size (huge pages): the registration unit then grows to the
 * largest page up to 2 MiB, so a 2 MiB page is registered once. */
RDMIG_API int rdmig_source_add_block(struct rdmig_source *s, const char *name,
				     void *host, uint64_t length,
				     uint32_t page_size);

/* Marks pages dirty (rounded out to whole pages) for the next iteration;
 * marks made while an iteration runs go to the one after it.  These three
 * may be called from any thread once connecting began (a dirty-ring
 * reaper), and from the dirty_sync callback.  A failure's message is the
 * handle's (rdmig_source_error()) only when the driving thread made the
 * call; other threads get the errno alone: -EINVAL (no such block) or
 * -ERANGE (outside it). */
RDMIG_API int rdmig_source_mark_dirty(struct rdmig_source *s, unsigned block,
				      uint64_t offset, uint64_t length);
/* The same from a bitmap as KVM and QEMU keep it: bit i of the unsigned
 * long words at @bitmap (bit i % BITS of word i / BITS) is page
 * @first_page + i of the block, in its page size; @npages bits are read. */
RDMIG_API int rdmig_source_mark_dirty_bitmap(struct rdmig_source *s, unsigned block,
					     const unsigned long *bitmap,
					     uint64_t first_page, uint64_t npages);
RDMIG_API int rdmig_source_mark_all(struct rdmig_source *s);

/* Event-loop use.  Start an operation, then wait until the fd is readable
 * or rdmig_source_timeout() milliseconds passed, and call
 * rdmig_source_process(); again and again: it returns 1 once the operation
 * finished, 0 while it goes on, or a negative errno when the migration
 * failed.  Right after a start the timeout is 0, so the wait returns at
 * once: nothing else is needed.  One operation at a time; device state may
 * be queued in between, and during an iteration.  The connection itself
 * starts in the first step (a host name is looked up there). */
RDMIG_API int rdmig_source_connect_async(struct rdmig_source *s, const char *host,
					 const char *port);
/* Begins an iteration of the pages marked dirty so far; it ends when the
 * destination acknowledged every page of it. */
RDMIG_API int rdmig_source_iterate_async(struct rdmig_source *s);
/* With the guest paused: takes the dirty log once more (dirty_sync),
 * sends what was marked since the last iteration in a final one, then
 * COMPLETE (with digests when verifying); done when the destination
 * confirmed it holds the whole image, every page as of the pause.  Pages
 * marked during that final round or after it fail the migration on both
 * sides with -EBUSY (the guest was not paused).  (Before 0.3.0 what was
 * marked since the last iteration was not sent.) */
RDMIG_API int rdmig_source_complete_async(struct rdmig_source *s);
/* Since 0.3.0, with postcopy set and granted: switches to post-copy after
 * zero or more iterations, instead of completing them.  With the guest
 * paused and its last device state written: takes the dirty log once
 * more (dirty_sync), tells the destination where it may read this side's
 * memory and which pages it lacks (those marked since the last iteration,
 * and never sent), and its guest starts; done (1 from process) once the
 * destination holds every page and confirmed completion.  From this call
 * on the guest belongs to the destination: on a failure, do not resume it
 * here (rdmig(3), Post-copy).  -ENOTSUP when the destination does not
 * take post-copy, -EINVAL with VERIFY or for blocks of pages other than
 * 4 KiB; pages marked from the switch on fail it with -EBUSY. */
RDMIG_API int rdmig_source_postcopy_async(struct rdmig_source *s);
/* One fd (an epoll fd over the connections and the cancel event) to watch
 * for reading; valid from rdmig_source_create() on. */
RDMIG_API int rdmig_source_fd(const struct rdmig_source *s);
/* Milliseconds until rdmig_source_process() must run even without activity
 * (deadlines, keepalives, the bandwidth limit); 0 means "call it again now"
 * (an operation was started and no step has begun it, or the last step
 * stopped at its bound with work left: the fd may announce neither); -1
 * when nothing is due: before connecting, once completed, after a
 * failure. */
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
/* Queues device-state bytes (at most 512 KiB a call and what half of
 * step_us allows, by RDMA WRITE into the destination's state ring once it
 * offered one): returns how many were
 * taken (0 when there is no room now: wait for the fd or the timeout,
 * process, then try again; the timeout is 0 once a step got room back), or a
 * negative errno.  Allowed once connected, before, between, during and after
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
RDMIG_API int rdmig_source_postcopy(struct rdmig_source *s);
/* Between operations: handles completions and sends keepalives.  Call it at
 * least every keepalive interval while the application does something
 * else, or the destination times out. */
RDMIG_API int rdmig_source_poll(struct rdmig_source *s);

/* What to do after an iteration, by the convergence policy of the config
 * (rdmig(3), Convergence). */
enum rdmig_decision {
	RDMIG_NEXT_ROUND = 0,   /* iterate again */
	RDMIG_THROTTLE = 1,     /* slow the guest to throttle_pct, iterate again */
	/* Pause the vCPUs now, send the last device state and complete:
	 * completion sends what is left (rdmig_source_complete_async()). */
	RDMIG_SWITCH_OVER = 2,
	/* The limits cannot be kept: cancel (rdmig_source_cancel()), release
	 * the throttle, the guest runs on here. */
	RDMIG_GIVE_UP = 3,
};

/* Why; the advice's text says it with the figures. */
enum rdmig_reason {
	RDMIG_REASON_NO_ROUND = 0,      /* no iteration has finished yet */
	RDMIG_REASON_CONVERGED,         /* what is left fits max_downtime_ms */
	RDMIG_REASON_ROUND_PAYS,        /* it fits, and one more round should
					 * leave less than half of it, cheaply */
	RDMIG_REASON_NOT_CONVERGED,     /* what is left does not fit yet */
	RDMIG_REASON_NO_BANDWIDTH,      /* nothing measured the link yet */
	RDMIG_REASON_DIRTY_RATE,        /* the guest dirtied more than half of
					 * what a round sent, twice running */
	RDMIG_REASON_STALL,             /* rounds stopped shrinking what is left */
	RDMIG_REASON_MAX_TIME,          /* max_time_ms or its per-GiB form */
	RDMIG_REASON_MAX_ITERATIONS,
};

/* Set @size to sizeof(struct rdmig_advice) before asking: the struct grows
 * at the end, only @size bytes are written, and @size comes back as the
 * bytes filled. */
struct rdmig_advice {
	uint32_t size;
	uint32_t decision;              /* enum rdmig_decision */
	uint32_t reason;                /* enum rdmig_reason */
	/* The throttle to apply from now on, 0..throttle_max percent (0: none);
	 * the VMM releases it when the migration ends, however it ends. */
	uint32_t throttle_pct;
	uint64_t iteration;             /* the iteration it follows */
	uint64_t remaining;             /* bytes left to send */
	/* The pause switching over now would take: remaining at the
	 * bandwidth, plus switchover_ms (0 while the bandwidth is unknown);
	 * against the limit it was measured by.  A switch-over on_limit
	 * allowed has it over the limit. */
	uint64_t expected_downtime_ms;
	uint64_t max_downtime_ms;
	uint64_t bandwidth;             /* bytes per second the prediction used */
	uint64_t elapsed_ms;            /* since connecting */
	uint64_t max_time_ms;           /* the time limit in force (0: none) */
	char text[256];                 /* the decision and why, with figures */
};

/* Between operations, after an iteration: what to do next, by the policy
 * of the config, decided at the first call after each iteration (later
 * calls for the same one return the same) from what is marked dirty then.
 * 0, or -EINVAL (@a->size too small), -ENOTCONN (not connected), -EBUSY
 * (an operation is in progress), -EDEADLK (from a callback), the
 * migration's error once failed.  See rdmig(3), Convergence. */
RDMIG_API int rdmig_source_advice(struct rdmig_source *s, struct rdmig_advice *a);

/* Any thread: page data per second at most from now on (0: no limit). */
RDMIG_API void rdmig_source_set_max_bandwidth(struct rdmig_source *s, uint64_t bytes_per_s);

/* The convergence policy's figures a VMM may learn or change while the
 * migration runs (rdmig_source_set_limit()); each is the config field of
 * the same name. */
enum rdmig_limit {
	RDMIG_LIMIT_MAX_DOWNTIME_MS = 0,  /* max_downtime_ms (0: 300) */
	/* switchover_ms: the VMM's own cost of switching over, often known
	 * only once it measured it (how fast its monitor answers, say). */
	RDMIG_LIMIT_SWITCHOVER_MS = 1,
	RDMIG_LIMIT_MAX_TIME_MS = 2,      /* max_time_ms (0: none) */
	RDMIG_LIMIT_MAX_TIME_PER_GIB_MS = 3,
	RDMIG_LIMIT_MAX_ITERATIONS = 4,   /* max_iterations (0: none) */
	RDMIG_LIMIT_SWITCHOVER_BANDWIDTH = 5, /* switchover_bandwidth (0: max_bandwidth) */
};
/* Since 0.3.0.  Any thread: @limit is @value from the next advice on (the
 * statistics' expected_downtime_ms too).  0, or -EINVAL for an unknown
 * @limit, -ERANGE for a @value its config field cannot hold (the handle's
 * error text is not set: this may run beside the driving thread). */
RDMIG_API int rdmig_source_set_limit(struct rdmig_source *s, enum rdmig_limit limit,
				     uint64_t value);
/* Know before you move (since 0.3.0): what the convergence policy of a
 * config would do with a workload measured beforehand, round by round, as
 * rdmig_source_advice() would decide it (QEMU's calc-dirty-rate is the
 * model of the measuring).  The model: a round sends what the one before
 * left (the first, first_round_ms or image_bytes at bandwidth), taking
 * that at @bandwidth plus @round_cost_ms; the workload dirties
 * dirty_rate x (100 - throttle) / 100 bytes per second of it, never more
 * than @working_set in all.  Set @size of both structs to their sizeof. */
struct rdmig_forecast_in {
	uint32_t size;
	uint64_t image_bytes;     /* all blocks */
	uint64_t bandwidth;       /* page bytes per second the link carries */
	uint64_t first_round_ms;  /* the first round, measured (0: at bandwidth) */
	uint64_t dirty_rate;      /* bytes dirtied per second, unthrottled */
	uint64_t working_set;     /* the most a round leaves (0: image_bytes) */
	uint64_t round_cost_ms;   /* a round's own cost: taking the dirty log */
};

struct rdmig_forecast {
	uint32_t size;
	uint32_t decision;        /* the last advice: RDMIG_SWITCH_OVER or RDMIG_GIVE_UP */
	uint32_t reason;          /* ... and why (enum rdmig_reason) */
	uint32_t throttle_pct;    /* the throttle it reached (0: none) */
	uint64_t rounds;          /* rounds before that advice */
	uint64_t downtime_ms;     /* the switch-over's pause (0 when it gives up) */
	uint64_t total_ms;        /* from the first round to the guest resumed */
	int within_limit;         /* switches over within max_downtime_ms */
	char text[256];           /* the outcome and why, with figures */
};

/* 0, or -EINVAL (a size too small, no bandwidth, an invalid config: @err
 * says which when @errlen > 0).  Pure: no handle, no clock. */
RDMIG_API int rdmig_forecast(const struct rdmig_config *cfg, const struct rdmig_forecast_in *in,
			     struct rdmig_forecast *out, char *err, size_t errlen);
/* Any thread: the operation in progress (connecting, resolving, pinning,
 * iterating, hashing for verify) fails with -ECANCELED and the destination
 * is told.  Once COMPLETE has gone, or a switch to post-copy started the
 * destination's guest, the destination's answer decides: a cancel then
 * waits for it (see rdmig(3)). */
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
RDMIG_API int rdmig_dest_error_class(const struct rdmig_dest *d);
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
/* Since 0.3.0, with postcopy set, before rdmig_dest_accept(): offers
 * post-copy recovery.  Should the link break after the switch to
 * post-copy, the migration pauses instead of failing (status
 * RDMIG_STATUS_POSTCOPY_PAUSED): the guest runs on with the pages that are
 * here, a thread that touches one that is not waits, and the handle takes
 * the source's resume from @l (its fd joins rdmig_dest_fd()'s set while
 * paused; requests that are not this migration's resume are turned away).
 * @l stays the caller's, alive and not accepted on until the handle is
 * destroyed.  0, or -EINVAL (accepted already, or no post-copy). */
RDMIG_API int rdmig_dest_keep_listener(struct rdmig_dest *d, struct rdmig_listener *l);
/* Since 0.3.0, with postcopy and postcopy_uffd set, before
 * rdmig_dest_accept(): the guest of block @name runs in another process
 * (the one postcopy_uffd was made in), which sees the block at
 * @view_addr; the block's host memory (rdmig_dest_add_block()) is this
 * process's MAP_SHARED mapping of the same memory (a memfd).  Post-copy
 * then registers, places and serves faults at the view, and the VMM
 * drops its own page-table entries of the block right after the hand-over
 * (rdmig(3), Post-copy, "A VMM in another process").  Every block gets a
 * view, or none: rdmig_dest_accept() refuses a mix with -EINVAL, and so
 * does the block map for a block map_block added without one.  0, or
 * -EINVAL (a view not in whole 4 KiB pages, or overlapping another
 * block's), -ENOENT (no such block). */
RDMIG_API int rdmig_dest_postcopy_view(struct rdmig_dest *d, const char *name,
				       uint64_t view_addr);
/* Blocking: serves the accepted migration until it completes (0) or fails. */
RDMIG_API int rdmig_dest_run(struct rdmig_dest *d);
/* Event-loop use: one fd (an epoll fd over the connection and the cancel
 * event) to watch for reading, valid from rdmig_dest_create() on ... */
RDMIG_API int rdmig_dest_fd(const struct rdmig_dest *d);
/* (Older callers: the same fd as the only entry of @fds; 1, or -EINVAL
 * when @max < 1.  RDMIG_DEST_MAX_FDS stays for them.) */
#define RDMIG_DEST_MAX_FDS 4
RDMIG_API int rdmig_dest_fds(const struct rdmig_dest *d, int *fds, int max);
/* ... milliseconds until rdmig_dest_process() must run even without
 * activity (deadlines, keepalives); 0 means "call it again now": the last
 * call stopped at its bound with work left, which the fd may never
 * announce; -1 when nothing is due: before a connection was accepted and
 * once it completed or failed ... */
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
/* Any thread: flow control for device state.  While paused (@pause not 0)
 * the state callback is not called (from the next slice on, when the
 * callback itself pauses): the state that arrives waits, with everything
 * the source sent after it behind it, so the state ring and the control
 * channel's credits fill and the source's rdmig_source_write_state()
 * returns 0 until the destination resumes (which wakes its fd).  For a destination
 * that applies state more slowly than it arrives, without blocking in the
 * callback.  While paused the source's silence is not timed (a disconnect
 * is still seen). */
RDMIG_API void rdmig_dest_pause_state(struct rdmig_dest *d, int pause);
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
