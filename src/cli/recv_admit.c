/* Admission: the library asks once a source has proved itself (the admit
 * callback), before anything of this host is touched.  Busy first (one
 * migration at a time, or the daemon's --max-migrations), then what the
 * image and its state would claim (recv_room.h), then the files are made
 * ready (recv_files.h).  Telling the other handshakes and the operator is
 * the connection's (recv_mig.c). */
#include "recv_admit.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>

#include "devstate.h"
#include "recv_files.h"
#include "recv_room.h"

int recv_admit(struct mig *m, uint64_t image_bytes, struct cli_err *err)
{
	struct app *a = m->app;
	char state_dir[PATH_MAX];
	int rc;

	recv_room_measure(m, image_bytes, state_dir, sizeof(state_dir));
	if (!a->o.daemon && a->admitted)
		return cli_err_set(err, -EBUSY,
				   "busy: another source is migrating to this destination");
	if (a->o.daemon && a->admitted >= a->o.max_migrations)
		return cli_err_set(err, -EBUSY,
				   "busy: %u migrations are in progress (--max-migrations)",
				   a->admitted);
	rc = recv_room_weigh(m, state_dir, err);
	if (rc) {
		/* The source this run waits for sent an image that cannot be
		 * taken here: waiting on would not change that. */
		m->final = m->usage_err = true;
		return rc;
	}
	/* This side's to get ready: failing that, waiting on for another
	 * source would fail the same way.  The files first: the daemon's
	 * DIR/N holds the state too. */
	rc = recv_files_claim(m, err);
	if (rc) {
		m->final = m->usage_err = true;
		return rc;
	}
	/* No more than its room: the library stops a source that passes what
	 * it announced, this one that passes what was reserved for it. */
	if (m->state_room)
		ds_limit(m->ds, m->state_room);
	m->admitted = true;
	a->handshakes--;
	a->admitted++;
	return 0;
}
