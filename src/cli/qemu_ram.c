/* See qemu_ram.h.  The path of a backend's file is settled in this order:
 * the mem-path in our root, the same mem-path in QEMU's root, QEMU's own
 * fd; each must be the file QEMU maps (device and inode). */
#include "qemu_ram.h"
#include "safeopen.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <json-c/json.h>

#include "proc.h"
#include "qmp.h"

/* QEMU names every memfd after the backend type, never after the object:
 * the name tells a backend's memfd from other memfds, not which backend. */
#define MEMFD_NAME "/memfd:memory-backend-memfd"

static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static struct json_object *args1(const char *key, struct json_object *val)
{
	struct json_object *a = json_object_new_object();

	json_object_object_add(a, key, val);
	return a;
}


static int qom_get(struct qmp *q, const char *id, const char *prop,
		   struct json_object **ret, struct cli_err *err)
{
	char path[192];
	struct json_object *a = json_object_new_object();

	snprintf(path, sizeof(path), "/objects/%s", id);
	json_object_object_add(a, "path", json_object_new_string(path));
	json_object_object_add(a, "property", json_object_new_string(prop));
	return qmp_call(q, "qom-get", a, ret, err);
}

static int backend_kind(const char *type, enum qram_kind *kind)
{
	if (!strcmp(type, "child<memory-backend-file>"))
		*kind = QRAM_FILE;
	else if (!strcmp(type, "child<memory-backend-memfd>"))
		*kind = QRAM_MEMFD;
	else if (!strcmp(type, "child<memory-backend-ram>"))
		*kind = QRAM_RAM;
	else
		return 0;
	return 1;
}

static const char *kind_name(enum qram_kind kind)
{
	switch (kind) {
	case QRAM_FILE:
		return "memory-backend-file";
	case QRAM_MEMFD:
		return "memory-backend-memfd";
	case QRAM_RAM:
		return "memory-backend-ram";
	}
	return "?";
}

/* The backends among /objects, with id and kind only. */
static int list_backends(struct qmp *q, struct qram_backend **out, size_t *n,
			 struct cli_err *err)
{
	struct json_object *ret, *o;
	struct qram_backend *b = NULL;
	enum qram_kind kind;
	size_t i, len;
	const char *name, *type;
	int r = qmp_call(q, "qom-list", args1("path", json_object_new_string("/objects")), &ret,
			 err);

	*n = 0;
	if (r < 0)
		return r;
	len = json_object_is_type(ret, json_type_array) ? json_object_array_length(ret) : 0;
	if (len && !(b = calloc(len, sizeof(*b))))
		r = cli_err_set(err, -ENOMEM, "out of memory for %zu objects", len);
	for (i = 0; i < len && r == 0; i++) {
		o = json_object_array_get_idx(ret, i);
		name = jstr(o, "name");
		type = jstr(o, "type");
		if (!name || !type || !backend_kind(type, &kind))
			continue;
		if (strlen(name) >= sizeof(b->id))
			r = cli_err_set(err, -ENAMETOOLONG, "backend id %.32s... is too long",
					name);
		snprintf(b[*n].id, sizeof(b->id), "%s", name);
		b[(*n)++].kind = kind;
	}
	json_object_put(ret);
	if (r < 0 || !*n) {
		free(b);
		b = NULL;
		*n = 0;
	}
	*out = b;
	return r;
}

static int fetch_props(struct qmp *q, struct qram_backend *b, struct cli_err *err)
{
	struct json_object *v;
	int r = qom_get(q, b->id, "size", &v, err);

	if (r < 0)
		return r;
	b->size = (uint64_t)json_object_get_int64(v);
	json_object_put(v);
	r = qom_get(q, b->id, "share", &v, err);
	if (r < 0)
		return r;
	b->shared = json_object_get_boolean(v);
	json_object_put(v);
	b->mem_path[0] = '\0';
	if (b->kind != QRAM_FILE)
		return 0;
	r = qom_get(q, b->id, "mem-path", &v, err);
	if (r < 0)
		return r;
	snprintf(b->mem_path, sizeof(b->mem_path), "%s", json_object_get_string(v));
	json_object_put(v);
	return 0;
}

/* A memory region is named after its backend's id, or after the backend's
 * canonical path on machine types before 4.0
 * (x-use-canonical-path-for-ramblock-id). */
static int region_is(const char *name, size_t len, const char *id)
{
	if (len == strlen(id) && !strncmp(name, id, len))
		return 1;
	return len == strlen(id) + 9 && !strncmp(name, "/objects/", 9) &&
	       !strncmp(name + 9, id, len - 9);
}

/* Finds @id in "info mtree -f": one line per flat range,
 * "  START-END (prio P, ram): NAME [@OFFSET_IN_REGION]".  1 with the guest
 * address of the range and where in the backend it starts, 0 when the
 * backend is in no guest memory. */
static int find_in_flatview(const char *mtree, const char *id, uint64_t *gpa, uint64_t *off)
{
	const char *p, *nl;
	char line[512], type[32];
	uint64_t start, end;
	size_t len;
	int at;

	for (p = mtree; *p; p = *nl ? nl + 1 : nl) {
		nl = p + strcspn(p, "\n");
		if ((size_t)(nl - p) >= sizeof(line))
			continue;
		memcpy(line, p, (size_t)(nl - p));
		line[nl - p] = '\0';
		if (sscanf(line, " %" SCNx64 "-%" SCNx64 " (prio %*d, %31[^)]): %n", &start, &end,
			   type, &at) != 3 || (!strstr(type, "ram") && !strstr(type, "rom")))
			continue;
		len = strcspn(line + at, " \r");
		if (!region_is(line + at, len, id))
			continue;
		if (sscanf(line + at + len, " @%" SCNx64, off) != 1)
			*off = 0;
		*gpa = start;
		return 1;
	}
	return 0;
}

static int gpa_to_hva(struct qmp *q, const char *id, uint64_t gpa, uint64_t *hva,
		      struct cli_err *err)
{
	char cmd[64], *text, *is;
	int r;

	snprintf(cmd, sizeof(cmd), "gpa2hva 0x%" PRIx64, gpa);
	r = qmp_hmp(q, cmd, &text, err);
	if (r < 0)
		return r;
	/* "Host virtual address for 0x100000000 (extra) is 0x7f54037fe000" */
	is = strstr(text, ") is 0x");
	if (is)
		*hva = strtoull(is + 5, NULL, 16);
	else
		r = cli_err_set(err, -EPROTO, "backend %s: %s: %.*s", id, cmd,
				(int)strcspn(text, "\r\n"), text);
	free(text);
	return r;
}

/* The shared file mapping of QEMU's that holds @hva: its file and the file
 * offset at @hva.  QEMU must be able to write it: a read-only mapping
 * (r--s) names a file QEMU may only read, which we would otherwise reopen
 * with our own, often root, rights and write the source's memory into. */
static int find_mapping(const struct proc_ref *p, const char *id, uint64_t hva, dev_t *dev,
			ino_t *ino, uint64_t *off, struct cli_err *err)
{
	char path[64], line[512], perms[8];
	unsigned long long inode;
	unsigned int maj, min;
	uint64_t s, e, pgoff;
	int r = -ENOENT, fd;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)p->pid);
	fd = proc_openat(p, "maps", O_RDONLY);
	f = fd < 0 ? NULL : fdopen(fd, "r");
	if (!f) {
		if (fd >= 0)
			close(fd);
		return cli_err_set(err, fd < 0 ? fd : -ENOMEM, "Unable to read %s: %s (run as "
				   "QEMU's user or root)", path, strerror(fd < 0 ? -fd : ENOMEM));
	}
	while (r == -ENOENT && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %llu", &s, &e, perms,
			   &pgoff, &maj, &min, &inode) != 7 || hva < s || hva >= e)
			continue;
		if (perms[3] != 's' || !inode)
			r = cli_err_set(err, -ENOTSUP,
					"backend %s: QEMU maps it without a shared file behind it",
					id);
		else if (perms[1] != 'w')
			r = cli_err_set(err, -EACCES,
					"backend %s: QEMU maps its file read-only (%s at 0x%" PRIx64 "): "
					"guest RAM must be a file QEMU can write (share=on, not readonly)",
					id, perms, s);
		else
			r = 0;
		*dev = makedev(maj, min);
		*ino = (ino_t)inode;
		*off = pgoff + (hva - s);
	}
	fclose(f);
	if (r == -ENOENT)
		r = cli_err_set(err, r, "backend %s: nothing in %s at 0x%" PRIx64, id, path, hva);
	return r;
}

/* QEMU's fd directory, read through the process held (proc.h). */
static DIR *open_fd_dir(const struct proc_ref *p)
{
	int fd = proc_openat(p, "fd", O_RDONLY | O_DIRECTORY);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);

	if (!d && fd >= 0) {
		close(fd);
		errno = ENOMEM;
	} else if (!d) {
		errno = -fd;
	}
	return d;
}

/* /proc/PID/fd/N for QEMU's fd to the file (@dev, @ino), or -ENOENT. */
static int find_fd(const struct proc_ref *p, dev_t dev, ino_t ino, char *out, size_t len)
{
	char rel[300];
	struct dirent *de;
	struct stat st;
	DIR *d = open_fd_dir(p);
	int r = -ENOENT;

	if (!d)
		return -errno;
	while (r == -ENOENT && (de = readdir(d))) {
		snprintf(rel, sizeof(rel), "fd/%.255s", de->d_name);
		if (de->d_name[0] != '.' && !fstatat(p->dirfd, rel, &st, 0) && st.st_dev == dev &&
		    st.st_ino == ino) {
			snprintf(out, len, "/proc/%d/%s", (int)p->pid, rel);
			r = 0;
		}
	}
	closedir(d);
	return r;
}

/* Whether @path is the file QEMU maps for @b, reached without following a
 * link (safeopen.h): whoever answers on the QMP socket chose the name, and
 * could point it elsewhere. */
static bool is_mapped_file(const struct qram_backend *b, const char *path)
{
	struct stat st;

	return !sopen_stat(path, &st, NULL) && st.st_dev == b->dev && st.st_ino == b->ino;
}

/* Where we reach the file QEMU maps: its mem-path in our root (the name the
 * operator knows), the same in QEMU's root (a chroot, a container), else
 * QEMU's own fd to it (a memfd; a mem-path that is a directory holds an
 * unlinked file of QEMU's). */
static int path_for_file(struct qram_backend *b, const struct proc_ref *p, struct cli_err *err)
{
	char in_root[PATH_MAX];
	int r;

	if (b->kind == QRAM_FILE && b->mem_path[0] == '/') {
		if (is_mapped_file(b, b->mem_path)) {
			snprintf(b->path, sizeof(b->path), "%s", b->mem_path);
			return 0;
		}
		int len = snprintf(in_root, sizeof(in_root), "/proc/%d/root%s", (int)p->pid,
				   b->mem_path);

		if (len > 0 && (size_t)len < sizeof(in_root) && is_mapped_file(b, in_root)) {
			snprintf(b->path, sizeof(b->path), "%s", in_root);
			return 0;
		}
	}
	r = find_fd(p, b->dev, b->ino, b->path, sizeof(b->path));
	if (r == -ENOENT && b->kind == QRAM_FILE && b->mem_path[0])
		return cli_err_set(err, -ESTALE, "backend %s: QEMU maps a file (device %u:%u, "
				   "inode %llu) that is neither %s here nor /proc/%d/root%s in QEMU's "
				   "root, and holds no fd to it (was it replaced since QEMU opened it?)",
				   b->id, major(b->dev), minor(b->dev), (unsigned long long)b->ino,
				   b->mem_path, (int)p->pid, b->mem_path);
	if (r == -ENOENT)
		return cli_err_set(err, r,
				   "backend %s: QEMU (pid %d) holds no fd to the file it maps",
				   b->id, (int)p->pid);
	if (r < 0)
		return cli_err_set(err, r,
				   "Unable to read /proc/%d/fd: %s (run as QEMU's user or root)",
				   (int)p->pid, strerror(-r));
	return 0;
}

/* A backend in guest memory: where QEMU maps it names the file exactly. */
static int resolve_in_guest(struct qmp *q, struct qram_backend *b, uint64_t gpa, uint64_t off,
			    struct cli_err *err)
{
	const struct proc_ref *p = qmp_proc(q);
	uint64_t hva = 0, foff;
	int r = gpa_to_hva(q, b->id, gpa, &hva, err);

	if (r == 0)
		r = find_mapping(p, b->id, hva, &b->dev, &b->ino, &foff, err);
	if (r < 0)
		return r;
	if (foff != off)
		return cli_err_set(err, -EPROTO,
				   "backend %s: QEMU maps its offset 0x%" PRIx64 " from file offset 0x%" PRIx64,
				   b->id, off, foff);
	return path_for_file(b, p, err);
}

static void resolve_plain_file(struct qram_backend *b)
{
	struct stat st;

	if (sopen_stat(b->mem_path, &st, NULL))
		return;
	snprintf(b->path, sizeof(b->path), "%s", b->mem_path);
	b->dev = st.st_dev;
	b->ino = st.st_ino;
}

static int resolve_one(struct qmp *q, struct qram_backend *b, const char *mtree,
		       struct cli_err *err)
{
	uint64_t gpa, off;

	b->in_guest = find_in_flatview(mtree, b->id, &gpa, &off);
	if (!b->shared || b->kind == QRAM_RAM)
		return 0;
	if (b->in_guest)
		return resolve_in_guest(q, b, gpa, off, err);
	if (b->kind == QRAM_FILE)
		resolve_plain_file(b);
	return 0;
}

static int claimed(const struct qram_backend *b, size_t n, dev_t dev, ino_t ino)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (*b[i].path && b[i].dev == dev && b[i].ino == ino)
			return 1;
	return 0;
}

/* How many of QEMU's backend memfds, other than those already named, have
 * @size; the last one seen goes to @b. */
static int count_spare_memfds(const struct proc_ref *pr, const struct qram_backend *all,
			      size_t n, uint64_t size, struct qram_backend *b)
{
	char rel[300], link[64];
	struct dirent *de;
	struct stat st;
	ssize_t l;
	DIR *d = open_fd_dir(pr);
	int count = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		snprintf(rel, sizeof(rel), "fd/%.255s", de->d_name);
		l = readlinkat(pr->dirfd, rel, link, sizeof(link) - 1);
		if (l < 0 || fstatat(pr->dirfd, rel, &st, 0))
			continue;
		link[l] = '\0';
		if (strncmp(link, MEMFD_NAME, strlen(MEMFD_NAME)) || (uint64_t)st.st_size != size ||
		    claimed(all, n, st.st_dev, st.st_ino) ||
		    (count && st.st_dev == b->dev && st.st_ino == b->ino))
			continue;
		count++;
		snprintf(b->path, sizeof(b->path), "/proc/%d/%s", (int)pr->pid, rel);
		b->dev = st.st_dev;
		b->ino = st.st_ino;
	}
	closedir(d);
	return count;
}

/* A memfd backend in no guest memory has no address to ask QEMU about: it
 * is named only when it is the one such backend of its size and QEMU holds
 * exactly one memfd of that size that no other backend took. */
static void resolve_spare_memfds(const struct proc_ref *p, struct qram_backend *b, size_t n)
{
	struct qram_backend found;
	size_t i, j, same;

	for (i = 0; i < n; i++) {
		if (b[i].kind != QRAM_MEMFD || !b[i].shared || b[i].in_guest)
			continue;
		for (j = 0, same = 0; j < n; j++)
			same += b[j].kind == QRAM_MEMFD && b[j].shared && !b[j].in_guest &&
				b[j].size == b[i].size;
		memset(&found, 0, sizeof(found));
		if (same == 1 && count_spare_memfds(p, b, n, b[i].size, &found) == 1) {
			memcpy(b[i].path, found.path, sizeof(found.path));
			b[i].dev = found.dev;
			b[i].ino = found.ino;
		}
	}
}

int qram_backends(struct qmp *q, struct qram_backend **out, size_t *n,
		 struct cli_err *err)
{
	struct qram_backend *b;
	char *mtree = NULL;
	size_t i;
	int r;

	*out = NULL;
	*n = 0;
	r = list_backends(q, &b, n, err);
	if (r == 0 && *n && !qmp_proc(q))
		r = cli_err_set(err, -ESRCH,
				"QEMU's pid is not visible from here (another pid namespace?)");
	if (r == 0 && *n)
		r = qmp_hmp(q, "info mtree -f", &mtree, err);
	for (i = 0; r == 0 && i < *n; i++) {
		r = fetch_props(q, &b[i], err);
		if (r == 0)
			r = resolve_one(q, &b[i], mtree, err);
	}
	if (r == 0 && *n)
		resolve_spare_memfds(qmp_proc(q), b, *n);
	free(mtree);
	if (r < 0) {
		free(b);
		*n = 0;
		return r;
	}
	*out = b;
	return 0;
}

#define SHARED_FIX "start QEMU with -object memory-backend-file,id=mem,size=SIZE," \
		   "mem-path=FILE,share=on -machine memory-backend=mem"

static int guest_ram_size(struct qmp *q, uint64_t *size, struct cli_err *err)
{
	struct json_object *ret, *v;
	int r = qmp_call(q, "query-memory-size-summary", NULL, &ret, err);

	if (r < 0)
		return r;
	*size = 0;
	if (json_object_object_get_ex(ret, "base-memory", &v))
		*size += (uint64_t)json_object_get_int64(v);
	if (json_object_object_get_ex(ret, "plugged-memory", &v))
		*size += (uint64_t)json_object_get_int64(v);
	json_object_put(ret);
	return 0;
}

/* From QEMU 8.1 on ("exec/memory: Introduce RAM_NAMED_FILE flag"),
 * x-ignore-shared skips shared RAM only when a named file backs it: QEMU
 * would send a memfd's pages through the device-state stream itself, after
 * stopping the guest, a downtime growing with the RAM (38.8 s for 128 MiB
 * in our bed on QEMU 10.0). */
static int skipped_by_qemu(const struct qram_backend *b, const struct qmp_version *v,
			   struct cli_err *err)
{
	char sz[32];

	if (b->kind != QRAM_MEMFD || !qmp_version_ge(v, 8, 1))
		return 0;
	return cli_err_set(err, -ENOTSUP, "backend %s is a memory-backend-memfd, which "
			   "QEMU %d.%d migrates itself after stopping the guest (x-ignore-shared "
			   "skips only file-backed RAM from QEMU 8.1 on): start QEMU with -object "
			   "memory-backend-file,id=%s,size=%s,mem-path=/dev/shm/FILE,share=on (a file "
			   "on tmpfs or hugetlbfs) instead", b->id, v->major, v->minor, b->id,
			   cli_fmt_bytes(b->size, sz, sizeof(sz)));
}

int qram_check(struct qmp *q, const struct qram_backend *b, size_t n,
	       struct cli_err *err)
{
	uint64_t guest, carried = 0;
	struct qmp_version v;
	size_t i;
	int r = guest_ram_size(q, &guest, err);

	if (!r)
		r = qmp_version(q, &v, err);
	if (r < 0)
		return r;
	for (i = 0; i < n; i++) {
		if (!b[i].in_guest)
			continue;
		if (!b[i].shared || !*b[i].path)
			return cli_err_set(err, -ENOTSUP,
					   "guest RAM is not shared: backend %s is a %s with share=%s; " SHARED_FIX,
					   b[i].id, kind_name(b[i].kind),
					   b[i].shared ? "on" : "off");
		r = skipped_by_qemu(&b[i], &v, err);
		if (r)
			return r;
		carried += b[i].size;
	}
	if (carried < guest)
		return cli_err_set(err, -ENOTSUP,
				   "guest RAM is not shared: %" PRIu64 " of its %" PRIu64
				   " bytes are in no shared memory backend; " SHARED_FIX,
				   guest - carried, guest);
	return 0;
}

int qram_blocks(struct qmp *q, struct cli_ram **rams, unsigned *nrams, struct cli_err *err)
{
	struct qram_backend *b = NULL;
	struct cli_ram *r;
	size_t n = 0, i;
	int rc = qram_backends(q, &b, &n, err);

	if (!rc)
		rc = qram_check(q, b, n, err);
	for (i = 0; !rc && i < n; i++) {
		if (!b[i].in_guest)
			continue;
		r = realloc(*rams, (*nrams + 1) * sizeof(*r));
		if (!r) {
			rc = cli_err_set(err, -ENOMEM, "out of memory");
			break;
		}
		*rams = r;
		r = &r[(*nrams)++];
		memset(r, 0, sizeof(*r));
		snprintf(r->name, sizeof(r->name), "%s", b[i].id);
		snprintf(r->path, sizeof(r->path), "%s", b[i].path);
		r->dev = b[i].dev;
		r->ino = b[i].ino;
	}
	free(b);
	if (!rc && !*nrams)
		rc = cli_err_set(err, -ENOTSUP, "QEMU has no guest RAM in a shared memory "
				 "backend; " SHARED_FIX);
	return rc;
}
