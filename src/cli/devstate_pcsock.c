/* The device state of a VMM attached to migrate-recv's --postcopy-socket
 * (recv_pcsock.h): kept in memory as it arrives, no more than --max-state
 * (the face's check), and handed over whole, once, through the function
 * the socket gave, at the first ds_commit: at the switch to post-copy,
 * before the VMM hears "run", or before the source is told that a
 * pre-copy completed, before "complete".
 *
 * Memory and not a file: the VMM needs every byte before its vCPUs run,
 * which in post-copy is long before the end, where a file takes its name;
 * and the socket stays the VMM's one interface.  The library delivers
 * every byte the source wrote before either moment (docs/postcopy.md says
 * where), so what is held at the first commit is the whole state. */
#include "devstate.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devstate_int.h"

/* The first allocation: most device states fit (QEMU's without RAM are a
 * few hundred KiB); a larger one doubles from here. */
#define VMM_FIRST (256u << 10)

struct dst_vmm {
	struct devstate d;
	ds_hand_fn hand;
	void *ctx;
	char *buf;
	size_t len, cap;
	bool handed;            /* the VMM has it: nothing more may come */
};

static struct dst_vmm *dst_vmm(const struct devstate *d)
{
	return ds_kind(d, struct dst_vmm);
}

/* Room for @more bytes.  The state's size is known only at its end (a
 * source may announce none), so the buffer grows by doubling, never past
 * --max-state: a source that lies about its size costs no more than the
 * bound. */
static int grow(struct dst_vmm *v, size_t more, struct cli_err *err)
{
	size_t cap = v->cap ? v->cap : VMM_FIRST, need = v->len + more;
	char *nb;

	if (need < v->len)
		return cli_err_set(err, -EFBIG, "the device state does not fit in memory");
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	if (v->d.max && cap > v->d.max)
		cap = need > v->d.max ? need : (size_t)v->d.max;
	if (cap <= v->cap)
		return 0;
	nb = realloc(v->buf, cap);
	if (!nb)
		return cli_err_set(err, -ENOMEM, "out of memory for %zu bytes of device state "
				   "held for the VMM (lower --max-state?)", cap);
	v->buf = nb;
	v->cap = cap;
	return 0;
}

static int vmm_write(struct devstate *d, const void *data, size_t len, struct cli_err *err)
{
	struct dst_vmm *v = dst_vmm(d);
	int rc;

	/* The library sends nothing after the switch or the commit; a byte
	 * now would be one the VMM never gets. */
	if (v->handed)
		return cli_err_set(err, -EPROTO, "device state after it was handed to the VMM");
	rc = grow(v, len, err);
	if (rc)
		return rc;
	memcpy(v->buf + v->len, data, len);
	v->len += len;
	return 0;
}

/* Once: at completion after a post-copy, the VMM had it at the switch. */
static int vmm_commit(struct devstate *d, struct cli_err *err)
{
	struct dst_vmm *v = dst_vmm(d);
	int rc;

	if (v->handed)
		return 0;
	rc = v->hand(v->ctx, v->buf, v->len, err);
	if (rc)
		return rc;
	v->handed = true;
	/* The VMM holds it now: a state of a gigabyte need not stay here
	 * through the whole post-copy. */
	free(v->buf);
	v->buf = NULL;
	v->cap = 0;
	return 0;
}

static const char *vmm_outcome(const struct devstate *d)
{
	return dst_vmm(d)->handed ? "; the VMM has the device state" : "";
}

static int vmm_close(struct devstate *d, struct cli_err *err)
{
	struct dst_vmm *v = dst_vmm(d);

	(void)err;
	free(v->buf);
	v->buf = NULL;
	return 0;
}

static const struct devstate_ops dst_vmm_ops = {
	.takes_state = true,
	.write = vmm_write,
	.commit = vmm_commit,
	.outcome = vmm_outcome,
	.close = vmm_close,
};

int ds_dst_vmm(struct devstate **out, ds_hand_fn hand, void *ctx, struct cli_err *err)
{
	struct dst_vmm *v;
	int rc = ds_new(out, sizeof(*v), &dst_vmm_ops, 0, err);

	if (rc)
		return rc;
	v = dst_vmm(*out);
	v->hand = hand;
	v->ctx = ctx;
	return 0;
}
