/* No device state: a source without --state-in sends none (its stream ends
 * at once, after the memory); a destination without somewhere to put it
 * takes none (a source that sends some fails: "no state sink"). */
#include "devstate.h"

#include "devstate_int.h"

static const struct devstate_ops none_ops = {
	.takes_state = false,
	.read = ds_slurp_read,  /* nothing held: end of stream once released */
};

int ds_none(struct devstate **out, struct cli_err *err)
{
	return ds_new(out, sizeof(**out), &none_ops, 0, err);
}
