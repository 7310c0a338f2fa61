/* src_stats: the source's statistics, published by the driving thread
 * after each step and read from any thread. */
#ifndef RDMIG_SRC_STATS_H
#define RDMIG_SRC_STATS_H

struct rdmig_source;
struct rdmig_stats;

/* The driving thread's counters, into the box other threads read. */
void src_stats_publish(struct rdmig_source *s);
/* The box, refreshed, into @st; @role is the source (a sess_progress
 * callback). */
void src_stats_fill(void *role, struct rdmig_stats *st);

#endif
