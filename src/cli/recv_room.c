/* Room: what the migrations in progress may still claim of this host, so
 * that a new one is weighed against it before anything is made.  A
 * filesystem's free space is promised to the holes of the images being
 * filled and to the device state each may still write; a daemon's images
 * and pins are bounded in total.  A full tmpfs would otherwise be found
 * by a SIGBUS mid-way, and one source could take what others were
 * promised. */
#include "recv_room.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "devstate.h"
#include "image.h"
#include "rdmig.h"

/* Sums of room never wrap: an announcement near 2^64 must not make a
 * filesystem look empty. */
static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Bytes the files of admitted migrations on device @dev may still take from
 * it as their data lands: their images' holes, and the device state each
 * may still write. */
static uint64_t promised(const struct app *a, dev_t dev)
{
	const struct mig *m;
	uint64_t sum = 0, took;
	unsigned i;

	for (m = a->migs; m; m = m->next) {
		for (i = 0; m->admitted && i < m->nfiles; i++)
			if (m->files[i].host && m->files[i].dev == dev)
				sum = sat_add(sum, img_unallocated(&m->files[i]));
		if (!m->admitted || !m->state_room || m->state_dev != dev)
			continue;
		took = m->ds ? ds_bytes(m->ds) : 0;
		sum = sat_add(sum, took < m->state_room ? m->state_room - took : 0);
	}
	return sum;
}

/* Whether the filesystem holding @dir can take @need more bytes besides
 * what is promised to the images in progress; the refusal names the
 * numbers.  A full tmpfs would otherwise be found by a SIGBUS mid-way. */
int recv_room_check(struct mig *m, const char *dir, const char *what, uint64_t need,
		    struct cli_err *err)
{
	uint64_t avail, other;
	char n[32], f[32], p[32];
	dev_t dev;

	if (img_fs_free(dir, &avail, &dev))
		return 0;
	other = promised(m->app, dev);
	if (other <= avail && need <= avail - other)
		return 0;
	return cli_err_set(err, -ENOSPC,
			   "no room for %s: it needs %s, %s has %s free%s%s%s; free space, "
			   "or put the images on a larger tmpfs or hugetlbfs", what,
			   cli_fmt_bytes(need, n, sizeof(n)), dir, cli_fmt_bytes(avail, f,
										 sizeof(f)),
			   other ? " of which " : "", other ? cli_fmt_bytes(other, p,
									    sizeof(p)) : "",
			   other ? " are promised to images in progress" : "");
}

static uint64_t host_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);

	return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : UINT64_MAX;
}

/* --daemon: what all migrations at once may hold; the refusal names the
 * limit and its option. */
static int check_totals(struct mig *m, struct cli_err *err)
{
	const struct app *a = m->app;
	uint64_t img = m->image_bytes, pin = m->pin_bytes;
	uint64_t max_img = a->o.total_image ? a->o.total_image : host_memory();
	const struct mig *o;
	char x[32], y[32], z[32];

	if (!a->o.daemon)
		return 0;
	for (o = a->migs; o; o = o->next) {
		if (!o->admitted)
			continue;
		img += o->image_bytes;
		pin += o->pin_bytes;
	}
	if (img > max_img)
		return cli_err_set(err, -ENOSPC, "busy: this image of %s and those in progress "
				   "would hold %s, more than --max-total-image %s",
				   cli_fmt_bytes(m->image_bytes, x, sizeof(x)),
				   cli_fmt_bytes(img, y, sizeof(y)), cli_fmt_bytes(max_img, z,
										   sizeof(z)));
	if (a->o.total_pinned && pin > a->o.total_pinned)
		return cli_err_set(err, -ENOSPC, "busy: this migration (up to %s pinned) and "
				   "those in progress could pin %s, more than --max-total-pinned %s",
				   cli_fmt_bytes(m->pin_bytes, x, sizeof(x)), cli_fmt_bytes(pin, y,
											    sizeof(y)),
				   cli_fmt_bytes(a->o.total_pinned, z, sizeof(z)));
	return 0;
}

/* The filesystem holding @path (0 when it cannot be told). */
static dev_t fs_dev(const char *path)
{
	uint64_t avail;
	dev_t dev;

	return img_fs_free(path, &avail, &dev) ? 0 : dev;
}

/* The image and the device state must fit their filesystems beside the
 * migrations in progress: the whole image for --ram-dir, the holes of
 * files given with --ram or QEMU's, and the state's room (where the state
 * file is on an image's filesystem, both together). */
static int admit_room(struct mig *m, const char *state_dir, struct cli_err *err)
{
	const struct app *a = m->app;
	uint64_t need, state = m->state_room;
	unsigned i, j;
	int rc;

	if (a->o.ram_dir) {
		need = m->image_bytes;
		if (state && m->state_dev == fs_dev(a->o.ram_dir)) {
			need = sat_add(need, state);
			state = 0;
		}
		rc = recv_room_check(m, a->o.ram_dir, state == m->state_room ? "the image" :
				     "the image and its device state", need, err);
		if (rc)
			return rc;
	}
	for (i = 0; !a->o.ram_dir && i < m->nfiles; i++) {
		for (j = 0; j < i && m->files[j].dev != m->files[i].dev; j++)
			;
		if (j < i)
			continue; /* its filesystem was counted with an earlier file */
		for (need = 0, j = i; j < m->nfiles; j++)
			if (m->files[j].dev == m->files[i].dev)
				need += img_unallocated(&m->files[j]);
		if (state && m->state_dev == m->files[i].dev) {
			need = sat_add(need, state);
			state = 0;
		}
		rc = recv_room_check(m, m->files[i].path, "the image", need, err);
		if (rc)
			return rc;
	}
	return state ? recv_room_check(m, state_dir, "the device state", state, err) :
		       0;
}

/* Where the device state goes as a file (the daemon's DIR/N/state, or
 * --state-out FILE's directory in @dir), and the room to keep for it: what
 * the source announced, up to --max-state (the library holds the source
 * to its word), or --max-state when it said nothing.  0 when the state
 * goes to QEMU or standard output, or without a bound (--max-state 0 and
 * nothing said). */
static uint64_t state_room(struct mig *m, char *dir, size_t len)
{
	const struct app *a = m->app;
	struct rdmig_stats st = { .size = sizeof(st) };
	uint64_t max = a->o.max_state;

	if (a->o.daemon)
		snprintf(dir, len, "%s", a->o.ram_dir);
	else if (a->o.state_out && strcmp(a->o.state_out, "-")) {
		char tmp[PATH_MAX];

		snprintf(tmp, sizeof(tmp), "%s", a->o.state_out);
		snprintf(dir, len, "%s", dirname(tmp));
	} else {
		return 0;
	}
	rdmig_dest_stats(m->d, &st);
	return st.state_max == RDMIG_STATE_UNSAID ? max : st.state_max;
}

/* A source that announces more device state than --max-state takes is
 * refused before anything moves. */
static int check_state_max(const struct mig *m, struct cli_err *err)
{
	struct rdmig_stats st = { .size = sizeof(st) };
	uint64_t max = m->app->o.max_state;
	char x[32], y[32];

	rdmig_dest_stats(m->d, &st);
	if (!max || st.state_max == RDMIG_STATE_UNSAID || st.state_max <= max)
		return 0;
	return cli_err_set(err, -EFBIG, "the source announces %s of device state, more "
			   "than --max-state %s", cli_fmt_bytes(st.state_max, x, sizeof(x)),
			   cli_fmt_bytes(max, y, sizeof(y)));
}

/* Registrations a migration makes besides its pages (rdmig(3)): its two
 * control rings, and the device-state ring when it takes state. */
static uint64_t fixed_pins(const struct app *a)
{
	struct rdmig_config c;

	rdmig_config_init(&c);
	return 2ull * c.ctrl_depth * c.ctrl_msg_max + (a->e.takes_state ? RDMIG_STATE_RING_BYTES : 0);
}

void recv_room_measure(struct mig *m, uint64_t image_bytes, char *state_dir, size_t len)
{
	uint64_t cap = m->app->o.pinned_cap;

	m->image_bytes = image_bytes;
	m->pin_bytes = (cap && cap < image_bytes ? cap : image_bytes) + fixed_pins(m->app);
	m->state_room = state_room(m, state_dir, len);
	m->state_dev = m->state_room ? fs_dev(state_dir) : 0;
}

int recv_room_weigh(struct mig *m, const char *state_dir, struct cli_err *err)
{
	int rc = check_state_max(m, err);

	if (!rc)
		rc = check_totals(m, err);
	if (!rc)
		rc = admit_room(m, state_dir, err);
	return rc;
}
