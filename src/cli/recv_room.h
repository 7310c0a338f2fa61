/* recv_room: what the migrations in progress may still claim of this host
 * (recv_int.h says where it fits).  Each check returns 0, or a negative
 * errno with the refusal in @err, naming the numbers and the option or
 * the fix. */
#ifndef RDMIG_CLI_RECV_ROOM_H
#define RDMIG_CLI_RECV_ROOM_H

#include <stddef.h>
#include <stdint.h>

#include "recv_int.h"

/* Whether the filesystem holding @dir can take @need more bytes for @what
 * besides what is promised to the admitted migrations. */
int recv_room_check(struct mig *m, const char *dir, const char *what, uint64_t need,
		    struct cli_err *err);
/* What a source announcing @image_bytes would claim: the image, its pins,
 * and the room for its device state, whose directory goes to @state_dir
 * (m->image_bytes, pin_bytes, state_room, state_dev). */
void recv_room_measure(struct mig *m, uint64_t image_bytes, char *state_dir, size_t len);
/* After recv_room_measure(): whether that fits --max-state, the daemon's
 * totals and the filesystems, beside the migrations in progress. */
int recv_room_weigh(struct mig *m, const char *state_dir, struct cli_err *err);

#endif
