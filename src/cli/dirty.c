/* Write tracking of one process's shared mappings of its RAM files
 * (dirty.h says which ways and why).  This file is the face and the
 * driver: opening a set (the files, their mappings, the method, the slices
 * and the threads, in that order), and each round's clear and collect.
 * The jobs below it are listed in dirty_int.h. */
#include "dirty.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dirty_bits.h"
#include "dirty_int.h"
#include "dirty_maps.h"
#include "dirty_pool.h"
#include "dirty_probe.h"
#include "dirty_scan.h"

static const char *const method_names[] = {
	[M_WP_ASYNC] = "wp-async", [M_SOFT_DIRTY_SCAN] = "soft-dirty-scan",
	[M_SOFT_DIRTY] = "soft-dirty",
};

/* ---- set-up ----------------------------------------------------------------------- */

/* The threads a set collects on, the caller's included: @o's, or one per
 * online CPU, at most DIRTY_MAX_THREADS. */
static unsigned pick_threads(const struct dirty_opts *o)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned t = o && o->threads ? o->threads : cpus > 0 ? (unsigned)cpus : 1;

	return t > DIRTY_MAX_THREADS ? DIRTY_MAX_THREADS : t;
}

/* The method @mode asks for: wp-async where possible, else soft-dirty with
 * the reason kept for the operator (dirty_why_not). */
static int choose_method(struct dirty_set *s, enum dirty_mode mode, struct cli_err *err)
{
	int rc;

	if (mode == DIRTY_SOFT_DIRTY) {
		cli_err_set(&s->why_not, 0, "soft-dirty was asked for");
		return dirty_probe_soft(s, err);
	}
	rc = dirty_probe_wp(s, mode == DIRTY_WP_ASYNC, &s->why_not);
	if (!rc)
		return 0;
	if (mode == DIRTY_WP_ASYNC)
		return cli_err_set(err, rc, "wp-async tracking is not possible: %s (auto "
				   "falls back to soft-dirty)", s->why_not.msg);
	return dirty_probe_soft(s, err);
}

/* Each file's length, path, bitmap and identity. */
static int init_files(struct dirty_set *s, const char *const *paths, const uint64_t *lens,
		      struct cli_err *err)
{
	unsigned i;
	int ret = 0;

	for (i = 0; !ret && i < s->nfiles; i++) {
		struct dirty_file *f = &s->files[i];

		f->len = lens[i];
		f->npages = f->len / s->psz + (f->len % s->psz != 0);
		f->path = strdup(paths[i]);
		f->bits = calloc(f->npages / 64 + 1, sizeof(*f->bits));
		ret = f->path && f->bits ? dirty_probe_file(f, err) :
		      cli_err_set(err, -ENOMEM, "cannot allocate a dirty bitmap of %" PRIu64
				  " pages for %s", f->npages, paths[i]);
	}
	return ret;
}

int dirty_open(struct dirty_set **out, const struct proc_ref *proc, const char *const *paths,
	       const uint64_t *lens, unsigned n, const struct dirty_opts *o, struct cli_err *err)
{
	long psz = sysconf(_SC_PAGESIZE);
	struct dirty_set *s;
	unsigned threads;
	int ret;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s || !n || !(s->files = calloc(n, sizeof(*s->files)))) {
		free(s);
		return cli_err_set(err, n ? -ENOMEM : -EINVAL, n ? "out of memory" :
				   "no RAM file to track");
	}
	s->pid = proc->pid;
	s->psz = (uint64_t)psz;
	s->proc = (struct proc_ref)PROC_REF_INIT;
	s->pagemap_fd = s->uffd = -1;
	s->nfiles = n;
	ret = proc_dup(&s->proc, proc, err);
	if (!ret)
		ret = init_files(s, paths, lens, err);
	if (!ret)
		ret = dirty_probe_pagemap(s, err);
	if (!ret)
		ret = dirty_maps_find(s, err);
	if (!ret)
		ret = choose_method(s, o ? o->mode : DIRTY_AUTO, err);
	threads = pick_threads(o);
	if (!ret)
		ret = dirty_scan_cut(s, threads, err);
	/* No more threads than slices: one would only wait. */
	if (!ret)
		ret = dirty_pool_start(s, threads < s->nslices ? threads :
				       s->nslices ? (unsigned)s->nslices : 1, err);
	if (ret) {
		dirty_close(s);
		return ret;
	}
	*out = s;
	return 0;
}

/* ---- rounds ----------------------------------------------------------------------- */

int dirty_clear(struct dirty_set *s, struct cli_err *err)
{
	int ret;

	if (s->method != M_WP_ASYNC) {
		ret = dirty_probe_clear_refs(s, err);
	} else {
		/* Protected once; from then on every collect protects again
		 * what it reports, so forgetting is all that is left. */
		ret = s->armed ? 0 : dirty_pool_run(s, OP_ARM, err);
		dirty_bits_zero(s);
	}
	if (!ret)
		s->armed = true;
	return ret;
}

/* Hands @cb the runs of set bits, file by file, in file order. */
static int report_runs(struct dirty_set *s, dirty_run_fn cb, void *ctx, struct cli_err *err)
{
	uint64_t a, b, off, end;
	unsigned i;
	int ret;

	for (i = 0; i < s->nfiles; i++) {
		const struct dirty_file *f = &s->files[i];

		b = 0;
		while ((a = dirty_bits_next(f, b, 1)) < f->npages) {
			b = dirty_bits_next(f, a, 0);
			off = a * s->psz;
			end = b * s->psz < f->len ? b * s->psz : f->len;
			ret = cb(ctx, i, off, end - off);
			if (ret < 0)
				return cli_err_set(err, ret,
						   "handling dirty pages at offset %" PRIu64
						   " of %s failed: %s", off, f->path,
						   strerror(-ret));
		}
	}
	return 0;
}

int dirty_collect(struct dirty_set *s, dirty_run_fn cb, void *ctx, struct cli_err *err)
{
	unsigned i;
	int ret = dirty_maps_recheck(s, err);

	if (ret)
		return ret;
	if (!s->armed) {
		for (i = 0; i < s->nfiles; i++)
			dirty_bits_set(s->files[i].bits, 0, s->files[i].npages);
	} else if (s->method == M_WP_ASYNC) {
		ret = dirty_pool_run(s, OP_SCAN_WP, err);
	} else {
		dirty_bits_zero(s);
		ret = dirty_pool_run(s, s->method == M_SOFT_DIRTY ? OP_READ : OP_SCAN_SD, err);
	}
	return ret ? ret : report_runs(s, cb, ctx, err);
}

/* ---- what it is ------------------------------------------------------------------ */

const char *dirty_method(const struct dirty_set *s)
{
	return method_names[s->method];
}

const char *dirty_why_not(const struct dirty_set *s)
{
	return s->method == M_WP_ASYNC ? "" : s->why_not.msg;
}

unsigned dirty_threads(const struct dirty_set *s)
{
	return s->nworkers;
}

void dirty_close(struct dirty_set *s)
{
	unsigned i;

	if (!s)
		return;
	dirty_pool_stop(s);
	if (s->uffd >= 0)
		close(s->uffd);
	if (s->pagemap_fd >= 0)
		close(s->pagemap_fd);
	proc_close(&s->proc);
	for (i = 0; i < s->nfiles; i++) {
		free(s->files[i].path);
		free(s->files[i].real);
		free(s->files[i].vmas);
		free(s->files[i].bits);
	}
	free(s->files);
	free(s->slices);
	free(s);
}
