/* The face of the device-state endpoints: each call goes to the kind's
 * table (devstate_int.h), with what every kind shares kept here. */
#include "devstate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "devstate_int.h"

/* ---- for the kinds ---------------------------------------------------------- */

int ds_new(struct devstate **out, size_t size, const struct devstate_ops *ops,
	   int timeout_ms, struct cli_err *err)
{
	struct devstate *d = calloc(1, size);

	*out = d;
	if (!d)
		return cli_err_set(err, -ENOMEM, "out of memory");
	d->ops = ops;
	d->timeout_ms = timeout_ms;
	return 0;
}

int ds_slurp(struct devstate *d, int fd)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap), *nb;
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (len == cap) {
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			n = -errno;
			free(buf);
			return (int)n;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	d->data = buf;
	d->len = len;
	return 0;
}

uint64_t ds_slurp_bytes(const struct devstate *d)
{
	return d->len;
}

ssize_t ds_slurp_read(struct devstate *d, void *buf, size_t len, struct cli_err *err)
{
	size_t n;

	(void)err;
	/* The state follows the memory: nothing before the release. */
	if (!d->released)
		return -EAGAIN;
	n = d->len - d->off < len ? d->len - d->off : len;
	if (n)
		memcpy(buf, d->data + d->off, n);
	d->off += n;
	return (ssize_t)n;
}

int ds_write_fd(int fd, const void *data, size_t len, const char *what, struct cli_err *err)
{
	const char *p = data;
	ssize_t n;

	while (len) {
		n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return cli_err_set(err, -errno, "writing %s: %s", what, strerror(errno));
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ---- the face --------------------------------------------------------------- */

bool ds_takes_state(const struct devstate *d)
{
	return d->ops->takes_state;
}

void ds_limit(struct devstate *d, uint64_t max)
{
	d->max = max;
}

uint64_t ds_bytes(const struct devstate *d)
{
	return d->ops->bytes ? d->ops->bytes(d) : d->written;
}

int ds_prepare(struct devstate *d, struct cli_err *err)
{
	return d->ops->prepare ? d->ops->prepare(d, err) : 0;
}

int ds_start(struct devstate *d, struct cli_err *err)
{
	return d->ops->start ? d->ops->start(d, err) : 0;
}

int ds_stopped(struct devstate *d, uint64_t *stop_ms, struct cli_err *err)
{
	return d->ops->stopped ? d->ops->stopped(d, stop_ms, err) : -ENOTSUP;
}

int ds_release(struct devstate *d, struct cli_err *err)
{
	d->released = true;
	return d->ops->release ? d->ops->release(d, err) : 0;
}

int ds_fd(const struct devstate *d)
{
	return d->ops->fd ? d->ops->fd(d) : -1;
}

ssize_t ds_read(struct devstate *d, void *buf, size_t len, struct cli_err *err)
{
	return d->ops->read ? d->ops->read(d, buf, len, err) : -EAGAIN;
}

int ds_write(struct devstate *d, const void *data, size_t len, struct cli_err *err)
{
	/* A source that sends state without end must not fill the filesystem
	 * (or QEMU's memory). */
	if (d->max && len > d->max - (d->written < d->max ? d->written : d->max))
		return cli_err_set(err, -EFBIG, "the device state is larger than this "
				   "destination takes (%llu bytes, --max-state)",
				   (unsigned long long)d->max);
	d->written += len;
	if (!d->ops->write)
		return cli_err_set(err, -EBADF, "no state sink");
	return d->ops->write(d, data, len, err);
}

int ds_commit(struct devstate *d, struct cli_err *err)
{
	return d->ops->commit ? d->ops->commit(d, err) : 0;
}

int ds_finish(struct devstate *d, struct cli_err *err)
{
	return d->ops->finish ? d->ops->finish(d, err) : 0;
}

void ds_abort(struct devstate *d, char *note, size_t len)
{
	note[0] = '\0';
	if (d->ops->abort)
		d->ops->abort(d, note, len);
}

const char *ds_outcome(const struct devstate *d)
{
	return d->ops->outcome ? d->ops->outcome(d) : "";
}

const char *ds_guest(const struct devstate *d)
{
	return d->ops->guest ? d->ops->guest(d) : NULL;
}

int ds_close(struct devstate *d, struct cli_err *err)
{
	int rc = 0;

	if (!d)
		return 0;
	if (d->ops->close)
		rc = d->ops->close(d, err);
	free(d->data);
	free(d);
	return rc;
}
