/* src_conv: the source's convergence advice (rdmig_source_advice()): the
 * policy of its config (conv.h) over the figures of its rounds, decided
 * once per round, when the caller first asks after it. */
#ifndef RDMIG_SRC_CONV_H
#define RDMIG_SRC_CONV_H

#include "conv.h"

struct rdmig_source;

/* The limits from the config, at creation. */
void src_conv_init(struct rdmig_source *s);
/* rdmig_source_set_limit(): any thread. */
int src_conv_set_limit(struct rdmig_source *s, unsigned limit, uint64_t value);
/* The config's policy as it stands: the bandwidth limit and the other
 * limits now, the time limit over the image's size. */
void src_conv_policy(const struct rdmig_source *s, struct conv_policy *p);
/* switchover_bandwidth in force (0: none granted). */
uint64_t src_conv_switchover_bw(const struct rdmig_source *s);
/* The advice after the last round, into the caller's sized struct: 0, or
 * -EINVAL for a struct smaller than 0.3.0's. */
int src_conv_advice(struct rdmig_source *s, struct rdmig_advice *out);

#endif
