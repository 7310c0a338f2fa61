/* The files of one migration: where each block the source names goes,
 * made only for a source that proved itself (the library's admit
 * callback), watched for pages their filesystem cannot provide, synced
 * before the source is told and marked usable only once it holds the
 * confirmation.  With them, the destination's ends made at set-up (the
 * blocks that exist already, and the directories files are made in). */
#include "recv_files.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devstate.h"
#include "faultguard.h"
#include "image.h"
#include "rdmig.h"
#include "recv_room.h"

/* ---- set-up ------------------------------------------------------------------------ */

/* A directory files are made in must exist, be writable, and be safe from
 * other local users (image.h). */
static int check_dir(const char *what, const char *path, const char *dir)
{
	struct cli_err err;

	if (access(dir, W_OK | X_OK))
		return cli_usage("%s %s: directory %s: %s", what, path, dir, strerror(errno));
	if (img_safe_dir(dir, &err))
		return cli_usage("%s %s: %s", what, path, err.msg);
	return 0;
}

/* The same for the directory that will hold @path. */
static int check_dir_of(const char *what, const char *path)
{
	char tmp[4096];

	snprintf(tmp, sizeof(tmp), "%s", path);
	return check_dir(what, path, dirname(tmp));
}

/* "DIR/BASE" with DIR resolved, so two spellings of one path compare equal. */
static int real_path_of(const char *dir, const char *base, char *out, size_t len)
{
	char real[PATH_MAX];

	if (!realpath(dir, real))
		return -errno;
	if ((size_t)snprintf(out, len, "%s/%s", real, base) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* A state file inside --ram-dir takes a name a block could have. */
static void reserve_state_name(struct app *a)
{
	char tmp[4096], tmp2[4096];

	if (!a->o.state_out || !strcmp(a->o.state_out, "-") || !a->o.ram_dir)
		return;
	snprintf(tmp, sizeof(tmp), "%s", a->o.state_out);
	snprintf(tmp2, sizeof(tmp2), "%s", a->o.state_out);
	if (real_path_of(dirname(tmp), basename(tmp2), a->state_real, sizeof(a->state_real)))
		a->state_real[0] = '\0';
}

/* The blocks that exist already (QEMU's, or --ram files with
 * --use-existing) are mapped now: their length is what the source must
 * announce.  Missing ones are created when an admitted source names them,
 * in directories no other user can replace them in. */
int recv_files_prepare(struct app *a)
{
	struct recv_opts *o = &a->o;
	struct dst_spec sp = {
		.qmp = o->qmp, .qemu = o->qemu, .use_existing = o->use_existing,
		.start = !o->no_start,
		.state_sink = o->state_out || o->daemon, .max_state = o->max_state,
		.timeout_ms = (int)(o->timeout_s * 1000),
	};
	struct cli_err err;
	int rc;

	rc = ends_open_dest(&a->e, &sp, o->rams, o->nrams, &err);
	/* The ends own the blocks now. */
	o->rams = NULL;
	o->nrams = 0;
	if (rc)
		return cli_usage("%s", err.msg);
	if (o->ram_dir) {
		rc = check_dir("--ram-dir", o->ram_dir, o->ram_dir);
		if (rc)
			return rc;
	}
	reserve_state_name(a);
	if (o->state_out && strcmp(o->state_out, "-"))
		return check_dir_of("--state-out", o->state_out);
	return 0;
}

/* ---- a connection's files --------------------------------------------------------- */

static struct cli_ram *mig_add_file(struct mig *m, const char *name, const char *path)
{
	struct cli_ram *n = realloc(m->files, (m->nfiles + 1) * sizeof(*n));

	if (!n)
		return NULL;
	m->files = n;
	n = &m->files[m->nfiles++];
	memset(n, 0, sizeof(*n));
	snprintf(n->name, sizeof(n->name), "%s", name);
	snprintf(n->path, sizeof(n->path), "%s", path);
	return n;
}

/* Single mode: the existing --ram files, lent to each connection. */
int recv_files_lend(struct mig *m)
{
	struct app *a = m->app;
	unsigned i;

	for (i = 0; i < a->e.nrams; i++) {
		struct cli_ram *r = &a->e.rams[i], *f;

		if (!r->host)
			continue;
		f = mig_add_file(m, r->name, r->path);
		if (!f || rdmig_dest_add_block(m->d, r->name, r->host, r->len, 0) < 0) {
			cli_err("--ram %s: %s", r->name, f ? rdmig_dest_error(m->d) : "out of memory");
			return -1;
		}
		*f = *r;
		f->borrowed = 1;
	}
	return 0;
}

/* Watches the file's mapping: a page its filesystem cannot provide fails
 * this migration (faultguard.h). */
static int guard_file(struct mig *m, struct cli_ram *f, struct cli_err *err)
{
	int slot = fg_watch(f->host, f->len, f->pgsz, m);

	if (slot < 0)
		return cli_err_set(err, slot, "too many block files at once to watch");
	f->guard = slot + 1;
	return 0;
}

/* ---- admission ------------------------------------------------------------------- */

/* Files, markers and the state file: only for a source that proved itself. */
static int claim_files(struct mig *m, struct cli_err *err)
{
	struct app *a = m->app;
	unsigned i;
	int rc;

	if (a->o.daemon) {
		for (;;) {
			m->id = ++a->next_id;
			snprintf(m->dir, sizeof(m->dir), "%s/%u", a->o.ram_dir, m->id);
			if (!mkdir(m->dir, 0700))
				break;
			if (errno != EEXIST) {
				rc = cli_err_set(err, -errno, "cannot create %s: %s", m->dir,
						 strerror(errno));
				m->id = 0;
				return rc;
			}
		}
	} else if (a->o.ram_dir) {
		snprintf(m->dir, sizeof(m->dir), "%s", a->o.ram_dir);
	}
	for (i = 0; i < m->nfiles; i++) {
		rc = a->e.markers ? img_mark_incomplete(&m->files[i], err) : 0;
		if (!rc)
			rc = guard_file(m, &m->files[i], err);
		if (rc)
			return rc;
	}
	return 0;
}

/* Where this migration's device state goes: DIR/N/state for a daemon, else
 * --state-out, or the destination QEMU (which must be waiting for it). */
static int claim_state(struct mig *m, struct cli_err *err)
{
	char path[2100];
	const char *p = m->app->o.state_out;
	int rc;

	if (m->app->o.daemon) {
		snprintf(path, sizeof(path), "%s/state", m->dir);
		p = path;
	}
	rc = ends_dest_state(&m->app->e, p, &m->ds, err);
	return rc ? rc : ds_prepare(m->ds, err);
}

int recv_files_claim(struct mig *m, struct cli_err *err)
{
	int rc = claim_files(m, err);

	return rc ? rc : claim_state(m, err);
}

/* ---- the blocks the source names, its state -------------------------------------- */

/* Whether the block file @real, or its marker, would be the state file
 * @state or its ".part". */
static bool names_state(const char *real, const char *state)
{
	size_t n = strlen(real), k = strlen(state);

	if (!strcmp(real, state))
		return true;
	if (k > n && !strncmp(real, state, n) && !strcmp(state + n, ".incomplete"))
		return true;
	return n > k && !strncmp(real, state, k) && !strcmp(real + k, ".part");
}

/* DIR/FILE for block @name, or why it cannot have one. */
static const char *dir_path(const struct mig *m, const char *name, char *path, size_t len)
{
	char file[NAME_MAX + 1], real[PATH_MAX + 8];

	if (cli_block_file_name(name, file, sizeof(file)))
		return "makes a file name longer than the filesystem allows";
	if (m->app->o.daemon && !strcmp(file, "state"))
		return "is reserved for the device state in --daemon mode";
	if (m->app->state_real[0] && !real_path_of(m->dir, file, real, sizeof(real)) &&
	    names_state(real, m->app->state_real))
		return "is the --state-out file's name";
	snprintf(path, len, "%s/%s", m->dir, file);
	return NULL;
}

static const struct cli_ram *find_ram(const struct dst_ends *e, const char *name)
{
	unsigned i;

	for (i = 0; i < e->nrams; i++)
		if (!strcmp(e->rams[i].name, name))
			return &e->rams[i];
	return NULL;
}

/* Only called for an admitted source: every block it names gets a file. */
static int map_file(struct mig *m, const char *name, uint64_t length, void **host,
		    int *zeroed, struct cli_err *err)
{
	struct cli_ram *f;
	char path[4096], dir[4096];
	const char *why;
	int rc;

	m->usage_err = true; /* until it worked: every failure here is ours */
	if (m->dir[0]) {
		why = dir_path(m, name, path, sizeof(path));
		if (why)
			return cli_err_set(err, -EINVAL, "the name %s", why);
	} else {
		const struct cli_ram *given = find_ram(&m->app->e, name);

		if (!given)
			return cli_err_set(err, -ENOENT, "not configured on the destination (no "
					   "--ram %s=PATH)", name);
		snprintf(path, sizeof(path), "%s", given->path);
	}
	/* --ram-dir: the whole image was weighed at admission. */
	snprintf(dir, sizeof(dir), "%s", path);
	rc = m->dir[0] ? 0 : recv_room_check(m, dirname(dir), path, length, err);
	if (rc)
		return rc;
	f = mig_add_file(m, name, path);
	if (!f)
		return cli_err_set(err, -ENOMEM, "out of memory");
	/* Every file made here is new (O_EXCL): nobody else's, and known to be
	 * all zero, which spares sending zero pages. */
	rc = img_open(f, length, IMG_NEW, err);
	if (!rc)
		rc = img_mark_incomplete(f, err);
	if (!rc)
		rc = guard_file(m, f, err);
	if (rc)
		return rc; /* the file goes with the migration (mig_free) */
	*host = f->host;
	*zeroed = f->zeroed;
	m->usage_err = false;
	return 0;
}

static int map_cb(void *ctx, const char *name, uint64_t length, uint32_t page_size,
		  void **host, int *zeroed, char *errbuf, size_t errlen)
{
	struct cli_err err = { .msg = "" };

	(void)page_size;
	return cli_err_give(map_file(ctx, name, length, host, zeroed, &err), &err, errbuf,
			    errlen);
}

static int state_cb(void *ctx, const void *data, size_t len, char *errbuf, size_t errlen)
{
	struct mig *m = ctx;
	struct cli_err err = { .msg = "" };
	int rc = m->ds ? ds_write(m->ds, data, len, &err) :
			 cli_err_set(&err, -EPROTO, "device state before the migration was "
				     "admitted");

	return cli_err_give(rc, &err, errbuf, errlen);
}

/* After the block map: every --ram block must have been announced. */
int recv_files_check_set(struct mig *m, struct cli_err *err)
{
	const struct recv_opts *o = &m->app->o;
	struct rdmig_stats st = { .size = sizeof(st) };
	unsigned i, j;

	if (m->set_checked || o->ram_dir || !m->admitted)
		return 0;
	rdmig_dest_stats(m->d, &st);
	if (!st.total)
		return 0;
	m->set_checked = true;
	for (i = 0; i < m->app->e.nrams; i++) {
		const char *name = m->app->e.rams[i].name;

		for (j = 0; j < m->nfiles; j++)
			if (!strcmp(m->files[j].name, name))
				break;
		if (j == m->nfiles)
			return cli_err_set(err, -ENOENT, "block \"%s\" was not sent by the source",
					   name);
	}
	return 0;
}

/* Whether a page of this migration's files could not be provided
 * (faultguard.h): the image is not whole, the migration fails. */
int recv_files_check_faults(struct mig *m, struct cli_err *err)
{
	uint64_t off;
	unsigned i;

	for (i = 0; i < m->nfiles; i++)
		if (fg_faulted(m->files[i].guard - 1, &off))
			return cli_err_set(err, -ENOSPC, "%s lost a page at offset %" PRIu64
					   " (SIGBUS): its filesystem could not provide it (full?) or "
					   "the file was cut short; the image is not whole",
					   m->files[i].path, off);
	return 0;
}

/* ---- completion ------------------------------------------------------------------ */

/* Before the source is told: everything received is on stable storage, but
 * nothing says "usable" yet (markers stay, the state keeps its .part name),
 * so a confirmation that never reaches the source leaves no image that
 * looks complete next to a source that resumed. */
static int sync_files(struct mig *m, struct cli_err *err)
{
	unsigned i;
	int rc = recv_files_check_faults(m, err);

	for (i = 0; !rc && i < m->nfiles; i++)
		rc = img_sync(&m->files[i], err);
	return rc;
}

/* The source holds the confirmation: the image becomes usable, the state
 * first, then the markers go. */
int recv_files_finish(struct mig *m, struct cli_err *err)
{
	unsigned i;
	int rc = ds_finish(m->ds, err);

	for (i = 0; !rc && i < m->nfiles; i++)
		rc = img_complete(&m->files[i], err);
	return rc;
}

/* The library calls this before it confirms completion to the source: what
 * cannot be saved (or a QEMU that cannot load the state and run) fails the
 * migration on both sides, so the source resumes its workload instead of
 * believing it moved. */
static int commit_cb(void *ctx, char *errbuf, size_t errlen)
{
	struct mig *m = ctx;
	struct cli_err err = { .msg = "" };
	int rc = sync_files(m, &err);

	if (!rc)
		rc = ds_commit(m->ds, &err);
	return cli_err_give(rc, &err, errbuf, errlen);
}

void recv_files_hook(struct mig *m, struct rdmig_config *cfg)
{
	cfg->commit = commit_cb;
	cfg->commit_ctx = m;
	cfg->map_block = map_cb;
	cfg->map_ctx = m;
	/* Without a sink the library refuses state, naming the reason. */
	if (m->app->e.takes_state) {
		cfg->state = state_cb;
		cfg->state_ctx = m;
	}
}

/* ---- the end -------------------------------------------------------------------- */

void recv_files_release(struct mig *m)
{
	struct cli_err err = { "" };
	int i;

	/* A half-written state never takes the final name. */
	/* What could not be put back is said, unless QEMU is gone. */
	i = ds_close(m->ds, &err);
	if (i && i != -ECONNRESET)
		cli_err("warning: %s", err.msg);
	for (i = 0; i < (int)m->nfiles; i++) {
		fg_unwatch(m->files[i].guard - 1);
		img_close(&m->files[i], m->discard);
	}
	/* A daemon migration that failed before any block keeps no empty DIR/N. */
	if (m->app->o.daemon && m->id)
		rmdir(m->dir);
	free(m->files);
	m->files = NULL;
	m->nfiles = 0;
}
