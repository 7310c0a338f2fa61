/* The tracked process's shared mappings of the RAM files, found in
 * /proc/PID/maps by device and inode (or by path, where a filesystem shows
 * another device there), merged where a mapping was only split, and
 * compared again before each collect: a mapping that moved or went would
 * hide the pages written through it. */
#include "dirty_maps.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cli.h"

/* One file's shared mappings as /proc/PID/maps lists them; private ones are
 * only counted, for the error (their writes never reach the file). */
struct vma_list {
	struct dirty_vma *v;
	size_t n, cap;
	size_t nprivate;
};

/* Adds a mapping, merged with the previous one when it continues it in both
 * address and file offset (a mapping split by mprotect or madvise). */
static int vma_add(struct vma_list *l, uint64_t start, uint64_t end, uint64_t off)
{
	struct dirty_vma *p = l->n ? &l->v[l->n - 1] : NULL, *nv;

	if (p && p->end == start && p->off + (p->end - p->start) == off) {
		p->end = end;
		return 0;
	}
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 4;
		nv = realloc(l->v, l->cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		l->v = nv;
	}
	l->v[l->n++] = (struct dirty_vma){ start, end, off };
	return 0;
}

/* btrfs subvolumes and overlayfs show a different device in maps than
 * stat() returns; the inode and the path still identify the file there. */
static int same_path(const struct dirty_file *f, const char *name)
{
	size_t n = strcspn(name, "\n");

	return f->real && strlen(f->real) == n && !memcmp(f->real, name, n);
}

/* Collects the mappings of each of @s's files from /proc/PID/maps into
 * @l[file].  Returns 0 or -errno (-ESRCH when the process is gone). */
static int scan_maps(const struct dirty_set *s, struct vma_list *l)
{
	uint64_t start, end, off, ino;
	unsigned int maj, min, i;
	char perms[8], *line = NULL;
	size_t cap = 0;
	int fd, ret = 0, at;
	FILE *fp;

	memset(l, 0, s->nfiles * sizeof(*l));
	fd = proc_openat(&s->proc, "maps", O_RDONLY);
	if (fd < 0)
		return fd == -ENOENT ? -ESRCH : fd;
	fp = fdopen(fd, "r");
	if (!fp) {
		close(fd);
		return -ENOMEM;
	}
	while (!ret && getline(&line, &cap, fp) > 0) {
		at = 0;
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n",
			   &start, &end, perms, &off, &maj, &min, &ino, &at) != 7 || !at)
			continue;
		for (i = 0; i < s->nfiles; i++) {
			const struct dirty_file *f = &s->files[i];

			if (ino != f->ino)
				continue;
			if ((maj != major(f->dev) || min != minor(f->dev)) && !same_path(f, line + at))
				continue;
			/* A private mapping's writes go to anonymous copies, not the file. */
			if (perms[3] != 's')
				l[i].nprivate++;
			else
				ret = vma_add(&l[i], start, end, off);
			break;
		}
	}
	/* The process exiting mid-read shows as an error or a short file. */
	if (!ret && ferror(fp))
		ret = -ESRCH;
	free(line);
	fclose(fp);
	if (ret)
		for (i = 0; i < s->nfiles; i++) {
			free(l[i].v);
			l[i].v = NULL;
		}
	return ret;
}

/* A process whose memory is gone (exited, or a zombie) reads as an empty
 * maps file; its pagemap then reads 0 bytes. */
static int proc_gone(const struct dirty_set *s)
{
	uint64_t e;

	return pread(s->pagemap_fd, &e, sizeof(e), 0) == 0;
}

static void free_lists(struct vma_list *l, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		free(l[i].v);
	free(l);
}

int dirty_maps_find(struct dirty_set *s, struct cli_err *err)
{
	struct vma_list *l = calloc(s->nfiles, sizeof(*l));
	unsigned i;
	int ret;

	if (!l)
		return cli_err_set(err, -ENOMEM, "out of memory");
	ret = scan_maps(s, l);
	if (ret == -ESRCH || (!ret && !l[0].n && proc_gone(s))) {
		free_lists(l, s->nfiles);
		return cli_err_set(err, -ESRCH, "process %d exited", (int)s->pid);
	}
	if (ret) {
		free_lists(l, s->nfiles);
		return cli_err_set(err, ret, "cannot read /proc/%d/maps: %s", (int)s->pid,
				   strerror(-ret));
	}
	for (i = 0; !ret && i < s->nfiles; i++) {
		if (!l[i].n && l[i].nprivate)
			ret = cli_err_set(err, -EINVAL,
					  "process %d maps %s only privately (MAP_PRIVATE): its writes do not reach the file",
					  (int)s->pid, s->files[i].path);
		else if (!l[i].n)
			ret = cli_err_set(err, -ENOENT, "process %d does not map %s",
					  (int)s->pid, s->files[i].path);
	}
	for (i = 0; !ret && i < s->nfiles; i++) {
		s->files[i].vmas = l[i].v;
		s->files[i].nvmas = l[i].n;
		l[i].v = NULL;
	}
	free_lists(l, s->nfiles);
	return ret;
}

/* Mappings merge the same way every time, so equal coverage compares equal. */
static int same_mappings(const struct dirty_file *f, const struct vma_list *l)
{
	size_t i;

	if (l->n != f->nvmas)
		return 0;
	for (i = 0; i < l->n; i++)
		if (l->v[i].start != f->vmas[i].start || l->v[i].end != f->vmas[i].end ||
		    l->v[i].off != f->vmas[i].off)
			return 0;
	return 1;
}

int dirty_maps_recheck(struct dirty_set *s, struct cli_err *err)
{
	struct vma_list *l = calloc(s->nfiles, sizeof(*l));
	unsigned i, changed = s->nfiles;
	int ret;

	if (!l)
		return cli_err_set(err, -ENOMEM, "out of memory");
	ret = scan_maps(s, l);
	for (i = 0; !ret && i < s->nfiles && changed == s->nfiles; i++)
		if (!same_mappings(&s->files[i], &l[i]))
			changed = i;
	free_lists(l, s->nfiles);
	if (ret == -ESRCH)
		return cli_err_set(err, ret, "process %d exited", (int)s->pid);
	if (ret)
		return cli_err_set(err, ret, "cannot read /proc/%d/maps: %s", (int)s->pid,
				   strerror(-ret));
	if (changed < s->nfiles && proc_gone(s))
		return cli_err_set(err, -ESRCH, "process %d exited", (int)s->pid);
	if (changed < s->nfiles)
		return cli_err_set(err, -ESTALE,
				   "process %d changed its mappings of %s while it was being tracked: pages it dirtied may be missed",
				   (int)s->pid, s->files[changed].path);
	return 0;
}
