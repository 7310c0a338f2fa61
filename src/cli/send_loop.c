/* The sender's fds and timers, armed (send_loop.h). */
#include <ev.h>

#include "devstate.h"
#include "rdmig.h"
#include "send_int.h"
#include "send_loop.h"

void send_kick(struct sender *x)
{
	x->kicked = true;
	ev_timer_stop(x->loop, &x->src_timer);
	ev_timer_set(&x->src_timer, 0.0, 0.0);
	ev_timer_start(x->loop, &x->src_timer);
}

void send_arm_src_timer(struct sender *x)
{
	int t = rdmig_source_timeout(x->s);

	ev_timer_stop(x->loop, &x->src_timer);
	if (t < 0)
		return;
	ev_timer_set(&x->src_timer, (double)t / 1000.0, 0.0);
	ev_timer_start(x->loop, &x->src_timer);
}

void send_watch_state(struct sender *x)
{
	int fd = ds_fd(x->e.ds);

	if (fd < 0 || ev_is_active(&x->ds_io))
		return;
	ev_io_set(&x->ds_io, fd, EV_READ);
	ev_io_start(x->loop, &x->ds_io);
}
