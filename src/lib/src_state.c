#include "src_state.h"

#include <errno.h>

#include "src_int.h"

ssize_t src_state_write(struct rdmig_source *s, const void *data, size_t len)
{
	Rdmig__State st = RDMIG__STATE__INIT;
	size_t max;
	int rc;

	if (s->state < SRC_READY || s->state > SRC_ITER_END)
		return rd_err_set(&s->ss.err, -ENOTCONN, "device state needs a connection "
				  "before completion");
	if (!len || !ctrl_can_send(&s->ss.ch))
		return 0;
	max = ctrl_state_max(s->peer_msg_max);
	st.data.data = (uint8_t *)(uintptr_t)data;
	st.data.len = len < max ? len : max;
	rc = ctrl_send(&s->ss.ch, CT_STATE, &st.base);
	if (rc == -EAGAIN)
		return 0;
	if (rc)
		return rc;
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.state_bytes += st.data.len;
	pthread_mutex_unlock(&s->ss.stats.lock);
	return (ssize_t)st.data.len;
}
