/* src_state: the device-state stream, in order, from connected until
 * completion begins. */
#ifndef RDMIG_SRC_STATE_H
#define RDMIG_SRC_STATE_H

#include <stddef.h>
#include <sys/types.h>

struct rdmig_source;

/* Takes what it can of @data now: the bytes taken (0: no room, come back
 * after a step) or a negative errno. */
ssize_t src_state_write(struct rdmig_source *s, const void *data, size_t len);

#endif
