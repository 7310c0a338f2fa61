/* estimate: migrate-send --estimate, know before you move (QEMU's
 * calc-dirty-rate is the model).  For a while the workload's writes are
 * tracked in short samples (its dirty rate, and the working set all the
 * samples together touched) and the link is measured by the migration's
 * own first round to the waiting destination, which is then cancelled:
 * the destination never takes it for a migration.  The library's policy
 * (rdmig_forecast()) then says what a migration under the same options
 * would do.  Nothing is throttled; the workload is only frozen for each
 * sample's collect, as a round freezes it. */
#ifndef RDMIG_CLI_ESTIMATE_H
#define RDMIG_CLI_ESTIMATE_H

#include <stdint.h>

#include "clierr.h"
#include "rdmig.h"

struct workload;

struct est_measure {
	uint64_t duration_ms;    /* how long the writes were tracked */
	unsigned samples;
	uint64_t dirty_rate;     /* bytes per second, the samples' median */
	uint64_t dirty_min, dirty_max; /* ... the slowest and fastest sample */
	uint64_t working_set;    /* bytes the samples together saw written */
	uint64_t round_cost_ms;  /* a sample's freeze, collect and clear */
	uint64_t link_rate;      /* page bytes per second the first round moved */
	uint64_t first_round_ms; /* the first round, measured or extrapolated */
	int first_round_done;    /* ... measured: it ended within the time */
	uint64_t image;          /* all blocks */
	int connected;           /* the destination was reached */
};

/* Measures @w and the link for @ms: @s, created with its blocks, connects
 * to @host:@port and sends its first round meanwhile (cancelled at the
 * end, if it did not finish).  @lens: each block's length (@w's files in
 * order).  0, or a negative errno with one line in @err; the workload
 * runs, thawed, either way. */
int est_measure(struct rdmig_source *s, struct workload *w, const uint64_t *lens, unsigned n,
		const char *host, const char *port, uint64_t ms, struct est_measure *m,
		struct cli_err *err);

/* Prints the measure and the forecast of @cfg's policy (text, or one
 * "estimate" event with @json) and returns the exit status a migration
 * would have: 0 (within --max-downtime), 11 (gives up), 12 (switches over
 * above it); CLI_EX_SOFTWARE when the forecast cannot be made. */
int est_report(const struct est_measure *m, const struct rdmig_config *cfg, int json);

#endif
