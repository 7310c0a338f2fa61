#include "ends.h"

#include <errno.h>
#include <libgen.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "devstate.h"
#include "image.h"
#include "proc.h"
#include "qemu_ram.h"
#include "qmp.h"
#include "workload.h"

/* The QEMU on the socket, and when the caller checked which QEMU that is
 * (rdmig-libvirt: libvirt's pid file and the domain's UUID), that very
 * QEMU, checked on this connection: the one every later call uses. */
static int open_qmp(struct qmp **q, const char *sock, const struct qemu_id *id,
		    int timeout_ms, struct cli_err *err)
{
	struct cli_err why;
	char uuid[64];
	int rc = qmp_open_as(q, sock, id->pid, id->start, timeout_ms, &why);

	if (!rc && id->uuid && (rc = qmp_uuid(*q, uuid, sizeof(uuid), &why)) == 0 &&
	    strcasecmp(uuid, id->uuid))
		rc = cli_err_set(&why, -EPERM, "the QEMU on it (pid %d) says UUID %s, "
				 "not %s (--qmp-uuid)", (int)qmp_pid(*q), uuid, id->uuid);
	return rc ? cli_err_set(err, rc, "--qmp %s: %s", sock, why.msg) : 0;
}

/* --ram NAME=PATH with --qmp names the file of QEMU's backend NAME: it is
 * used only when it is the very file QEMU maps for it (safeopen.h checks
 * at the open), never another file the name may lead to. */
static int qemu_given(struct qmp *q, struct cli_ram *rams, unsigned n, struct cli_err *err)
{
	struct qram_backend *b = NULL;
	size_t nb = 0, j;
	unsigned i;
	int rc = qram_backends(q, &b, &nb, err);

	for (i = 0; !rc && i < n; i++) {
		for (j = 0; j < nb && strcmp(b[j].id, rams[i].name); j++)
			;
		if (j == nb || !b[j].in_guest || !b[j].ino)
			rc = cli_err_set(err, -ENOENT, "--ram %s: QEMU has no shared RAM "
					 "backend %s in guest memory", rams[i].name, rams[i].name);
		else {
			rams[i].dev = b[j].dev;
			rams[i].ino = b[j].ino;
		}
	}
	free(b);
	return rc;
}

/* The guest's RAM: QEMU's backends, named as QEMU names its RAMBlocks,
 * or the files --ram gives for them; RAM QEMU would send itself is
 * refused now. */
static int qemu_rams(struct qmp *q, const char *sock, struct cli_ram **rams, unsigned *n,
		     struct cli_err *err)
{
	struct cli_err why;
	int rc = *n ? qemu_given(q, *rams, *n, &why) :
		      qram_blocks(q, rams, n, &why);

	return rc ? cli_err_set(err, rc == -ENOENT ? rc : -ENOTSUP, "--qmp %s: %s", sock,
				why.msg) : 0;
}

/* ---- the source --------------------------------------------------------------- */

static int source_qemu(struct src_ends *e, const struct src_spec *s, struct cli_err *err)
{
	int rc = open_qmp(&e->q, s->qmp, &s->qemu, s->timeout_ms, err);

	if (rc)
		return rc;
	if (!qmp_proc(e->q))
		return cli_err_set(err, -ESRCH, "--qmp %s: QEMU runs in another pid namespace: "
				   "its writes cannot be tracked from here", s->qmp);
	rc = qemu_rams(e->q, s->qmp, &e->rams, &e->nrams, err);
	return rc ? rc : ds_src_qemu(&e->ds, e->q, s->timeout_ms, err);
}

/* --state-in: a file, standard input ("-"), or no device state. */
static int state_in(struct devstate **ds, const char *path, struct cli_err *err)
{
	if (!path)
		return ds_none(ds, err);
	return strcmp(path, "-") ? ds_src_file(ds, path, err) :
				   ds_src_stdin(ds, err);
}

static int map_sources(struct src_ends *e, struct cli_err *err)
{
	struct cli_err why;
	unsigned i;

	for (i = 0; i < e->nrams; i++)
		if (cli_ram_map_ro(&e->rams[i], &why))
			return cli_err_set(err, -EINVAL, "--ram %s: %s", e->rams[i].name, why.msg);
	return 0;
}

/* The workload of its kind: QEMU's guest, or the process --pid names. */
static int open_kind(struct src_ends *e, const struct src_spec *s, const struct proc_ref *proc,
		     const char **paths, const uint64_t *lens, struct cli_err *err)
{
	if (e->q)
		return wl_open_qemu(&e->wl, proc, e->q, paths, lens, e->nrams, &s->track,
				    s->timeout_ms, err);
	return wl_open_process(&e->wl, proc, paths, lens, e->nrams, &s->track, s->timeout_ms,err);
}

/* The process writing the blocks, held by identity: a pid reused by
 * another process must not get our SIGSTOPs (proc.h). */
static int open_workload(struct src_ends *e, const struct src_spec *s, struct cli_err *err)
{
	struct proc_ref own = PROC_REF_INIT;
	const struct proc_ref *proc = e->q ? qmp_proc(e->q) : &own;
	const char **paths = calloc(e->nrams ? e->nrams : 1, sizeof(*paths));
	uint64_t *lens = calloc(e->nrams ? e->nrams : 1, sizeof(*lens));
	struct cli_err why;
	unsigned i;
	int rc = paths && lens ? 0 : cli_err_set(err, -ENOMEM, "out of memory");

	if (!rc && !e->q && proc_open(&own, s->pid, &why))
		rc = cli_err_set(err, -ESRCH, "--pid %d: %s", (int)s->pid, why.msg);
	for (i = 0; !rc && i < e->nrams; i++) {
		paths[i] = e->rams[i].path;
		lens[i] = e->rams[i].len;
	}
	if (!rc && open_kind(e, s, proc, paths, lens, &why))
		rc = cli_err_set(err, -EINVAL, "cannot track the writes of %s %d: %s",
				 e->q ? "QEMU" : "process", (int)proc->pid, why.msg);
	if (!rc && s->throttle && wl_throttle_open(e->wl, &why))
		rc = cli_err_set(err, -ENOTSUP, "--auto-converge: %s", why.msg);
	proc_close(&own);
	free(paths);
	free(lens);
	return rc;
}

int ends_open_source(struct src_ends *e, const struct src_spec *s, struct cli_ram *rams,
		     unsigned nrams, struct cli_err *err)
{
	int rc;

	memset(e, 0, sizeof(*e));
	e->rams = rams;
	e->nrams = nrams;
	rc = s->qmp ? source_qemu(e, s, err) :
		      state_in(&e->ds, s->state_in, err);
	if (!rc)
		rc = map_sources(e, err);
	if (!rc && s->live)
		rc = open_workload(e, s, err);
	return rc;
}

void ends_close_source(struct src_ends *e)
{
	unsigned i;

	ds_close(e->ds, NULL);
	wl_close(e->wl);
	qmp_close(e->q);
	for (i = 0; i < e->nrams; i++)
		cli_ram_unmap(&e->rams[i]);
	free(e->rams);
	memset(e, 0, sizeof(*e));
}

/* ---- the destination ------------------------------------------------------------ */

static int dest_qemu(struct dst_ends *e, const struct dst_spec *s, struct cli_err *err)
{
	struct cli_err why;
	char st[32];
	int rc = open_qmp(&e->q, s->qmp, &s->qemu, s->timeout_ms, err);

	if (!rc && qmp_status(e->q, st, sizeof(st), &why))
		rc = cli_err_set(err, -EIO, "--qmp %s: %s", s->qmp, why.msg);
	else if (!rc && strcmp(st, "inmigrate"))
		rc = cli_err_set(err, -EBUSY, "--qmp %s: QEMU is %s, not waiting for an "
				 "incoming migration: start it with -incoming defer", s->qmp, st);
	/* The guest's RAM is received straight into the files QEMU maps. */
	return rc ? rc : qemu_rams(e->q, s->qmp, &e->rams, &e->nrams, err);
}

/* Where files are made (the block's, its marker): the directory must take
 * them, safe from other local users (image.h). */
static int new_file_dir(const struct cli_ram *r, struct cli_err *err)
{
	struct cli_err why;
	char tmp[4096];
	const char *dir;

	snprintf(tmp, sizeof(tmp), "%s", r->path);
	dir = dirname(tmp);
	if (access(dir, W_OK | X_OK))
		return cli_err_set(err, -errno, "--ram %s: directory %s: %s", r->path, dir,
				   strerror(errno));
	if (img_safe_dir(dir, &why))
		return cli_err_set(err, -EPERM, "--ram %s: %s", r->path, why.msg);
	return 0;
}

/* Existing files are mapped now: their length is what the source must
 * announce.  Without --use-existing an existing --ram file is refused: it
 * may be another local user's, made to receive the guest (image.h). */
static int map_existing(struct dst_ends *e, const struct dst_spec *s, struct cli_err *err)
{
	struct cli_err why;
	struct stat st;
	unsigned i;

	for (i = 0; i < e->nrams; i++) {
		struct cli_ram *r = &e->rams[i];

		/* Also for an existing file: its marker is made next to it. */
		if (!s->qmp && new_file_dir(r, err))
			return -EPERM;
		if (!s->qmp && lstat(r->path, &st) && errno == ENOENT)
			continue;
		if (!s->qmp && !s->use_existing)
			return cli_err_set(err, -EEXIST, "--ram %s: %s already exists: remove "
					   "it, or give --use-existing to receive into it", r->name,
					   r->path);
		if (img_open(r, 0, s->qmp ? IMG_QEMU : IMG_EXISTING, &why))
			return cli_err_set(err, -EINVAL, "%s %s: %s", s->qmp ? "--qmp block" :
					   "--ram", r->name, why.msg);
	}
	return 0;
}

int ends_open_dest(struct dst_ends *e, const struct dst_spec *s, struct cli_ram *rams,
		   unsigned nrams, struct cli_err *err)
{
	int rc = 0;

	memset(e, 0, sizeof(*e));
	e->rams = rams;
	e->nrams = nrams;
	e->markers = !s->qmp;
	e->takes_state = s->qmp || s->state_sink;
	e->max_state = s->max_state;
	e->start = s->start;
	e->timeout_ms = s->timeout_ms;
	if (s->qmp)
		rc = dest_qemu(e, s, err);
	return rc ? rc : map_existing(e, s, err);
}

void ends_dest_vmm(struct dst_ends *e, ds_hand_fn hand, void *ctx)
{
	e->vmm_hand = hand;
	e->vmm_ctx = ctx;
	e->takes_state = true;
}

int ends_dest_state(const struct dst_ends *e, const char *path, struct devstate **out,
		    struct cli_err *err)
{
	int rc;

	if (e->q)
		rc = ds_dst_qemu(out, e->q, e->start, e->timeout_ms, err);
	else if (e->vmm_hand)
		rc = ds_dst_vmm(out, e->vmm_hand, e->vmm_ctx, err);
	else if (!path)
		rc = ds_none(out, err);
	else
		rc = strcmp(path, "-") ? ds_dst_file(out, path, err) :
					 ds_dst_stdout(out, err);

	if (!rc)
		ds_limit(*out, e->max_state);
	return rc;
}

void ends_close_dest(struct dst_ends *e)
{
	unsigned i;

	qmp_close(e->q);
	for (i = 0; i < e->nrams; i++)
		cli_ram_unmap(&e->rams[i]);
	free(e->rams);
	memset(e, 0, sizeof(*e));
}
