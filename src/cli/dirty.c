/* Soft-dirty tracking of one process's shared mappings of one file.  The
 * mappings are found in /proc/PID/maps by device and inode; each is read from
 * /proc/PID/pagemap (one u64 per virtual page, bit 55 = soft-dirty) and
 * folded into a bitmap indexed by file page, so a page mapped twice is
 * reported once and the runs come out in file order. */
#include "dirty.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "cli.h"

#define PM_SOFT_DIRTY (1ull << 55)
/* Entries per pread of pagemap: 32 KiB, so a 16 GiB file is 128 reads. */
#define PM_BATCH 4096
#define HUGETLBFS_MAGIC_ 0x958458f6

/* One shared mapping: virtual [start, end) shows the file from @off on. */
struct dirty_vma {
	uint64_t start, end, off;
};

struct dirty_map {
	pid_t pid;
	char *path;
	char *real; /* @path resolved, as /proc/PID/maps names it; may be NULL */
	uint64_t file_len, npages, psz;
	dev_t dev;
	ino_t ino;
	struct proc_ref proc; /* later opens cannot reach a reused PID */
	int pagemap_fd; /* reads 0 bytes once the process's memory is gone */
	struct dirty_vma *vmas;
	size_t nvmas;
	uint64_t *bits; /* one bit per file page, rebuilt by every collect */
	uint64_t *buf;  /* PM_BATCH pagemap entries */
};

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
static int same_path(const struct dirty_map *m, const char *name)
{
	size_t n = strcspn(name, "\n");

	return m->real && strlen(m->real) == n && !memcmp(m->real, name, n);
}

/* Collects @m's file's mappings from /proc/PID/maps.  Returns 0 or -errno
 * (-ESRCH when the process is gone). */
static int scan_maps(const struct dirty_map *m, struct vma_list *l)
{
	uint64_t start, end, off, ino;
	unsigned int maj, min;
	char perms[8], *line = NULL;
	size_t cap = 0;
	int fd, ret = 0, at;
	FILE *f;

	memset(l, 0, sizeof(*l));
	fd = proc_openat(&m->proc, "maps", O_RDONLY);
	if (fd < 0)
		return fd == -ENOENT ? -ESRCH : fd;
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	while (getline(&line, &cap, f) > 0) {
		at = 0;
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n",
			   &start, &end, perms, &off, &maj, &min, &ino, &at) != 7 || !at)
			continue;
		if (ino != m->ino)
			continue;
		if ((maj != major(m->dev) || min != minor(m->dev)) && !same_path(m, line + at))
			continue;
		/* A private mapping's writes go to anonymous copies, not the file. */
		if (perms[3] != 's') {
			l->nprivate++;
			continue;
		}
		ret = vma_add(l, start, end, off);
		if (ret)
			break;
	}
	/* The process exiting mid-read shows as an error or a short file. */
	if (!ret && ferror(f))
		ret = -ESRCH;
	free(line);
	fclose(f);
	if (ret) {
		free(l->v);
		l->v = NULL;
	}
	return ret;
}

/* The entry of pagemap for @addr in the calling process. */
static int self_pm(int fd, const volatile char *addr, uint64_t psz, uint64_t *e)
{
	off_t at = (off_t)((uintptr_t)addr / psz * sizeof(*e));

	return pread(fd, e, sizeof(*e), at) == (ssize_t)sizeof(*e) ? 0 : -errno;
}

static int clear_refs_fd(int fd)
{
	return write(fd, "4", 1) == 1 ? 0 : -errno;
}

/* Proves soft-dirty works on this process's own page: clear, expect the bit
 * off, write, expect it on.  A kernel without CONFIG_MEM_SOFT_DIRTY accepts
 * "4" and does nothing, so a successful write to clear_refs proves nothing. */
static int probe_kernel(uint64_t psz, char *err, size_t errlen)
{
	volatile char *page;
	uint64_t before = 0, after = 0;
	int cfd, pfd, ret;

	page = mmap(NULL, psz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return cli_errf(err, errlen, -errno, "cannot map a probe page: %s", strerror(errno));
	page[0] = 1;
	cfd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
	pfd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (cfd < 0 || pfd < 0) {
		ret = cli_errf(err, errlen, -EOPNOTSUPP,
			     "soft-dirty tracking is not supported by this kernel (cannot open /proc/self/%s: %s)",
			     cfd < 0 ? "clear_refs" : "pagemap", strerror(errno));
		goto out;
	}
	ret = clear_refs_fd(cfd);
	if (ret) {
		ret = cli_errf(err, errlen, -EOPNOTSUPP,
			     "soft-dirty tracking is not supported by this kernel (writing 4 to /proc/self/clear_refs failed: %s)",
			     strerror(-ret));
		goto out;
	}
	ret = self_pm(pfd, page, psz, &before);
	page[0] = 2;
	if (!ret)
		ret = self_pm(pfd, page, psz, &after);
	if (ret) {
		ret = cli_errf(err, errlen, ret, "cannot read /proc/self/pagemap: %s", strerror(-ret));
		goto out;
	}
	if ((before & PM_SOFT_DIRTY) || !(after & PM_SOFT_DIRTY))
		ret = cli_errf(err, errlen, -EOPNOTSUPP,
			     "soft-dirty tracking is not supported by this kernel (after writing 4 to /proc/self/clear_refs, a written page shows no soft-dirty bit in /proc/self/pagemap: the kernel needs CONFIG_MEM_SOFT_DIRTY=y)");
out:
	if (cfd >= 0)
		close(cfd);
	if (pfd >= 0)
		close(pfd);
	munmap((void *)page, psz);
	return ret;
}

static int check_file(struct dirty_map *m, char *err, size_t errlen)
{
	struct statfs sfs;
	struct stat st;

	if (stat(m->path, &st))
		return cli_errf(err, errlen, -errno, "cannot stat %s: %s", m->path, strerror(errno));
	if (!statfs(m->path, &sfs) && (uint32_t)sfs.f_type == HUGETLBFS_MAGIC_)
		return cli_errf(err, errlen, -EOPNOTSUPP,
			      "%s is on hugetlbfs, whose pages carry no soft-dirty bits: use a file on tmpfs (e.g. /dev/shm) for live migration",
			      m->path);
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	m->real = realpath(m->path, NULL);
	return 0;
}

static int open_proc(struct dirty_map *m, const struct proc_ref *proc, char *err,
		     size_t errlen)
{
	int fd, e, rc = proc_dup(&m->proc, proc, err, errlen);

	if (rc)
		return rc;
	/* Only checks the permission now; the clear itself is dirty_clear's. */
	fd = proc_openat(&m->proc, "clear_refs", O_WRONLY);
	if (fd < 0) {
		e = -fd;
		if (e == EACCES || e == EPERM)
			return cli_errf(err, errlen, -e,
				      "permission denied writing /proc/%d/clear_refs (run as root or as the owner of process %d)",
				      (int)m->pid, (int)m->pid);
		return cli_errf(err, errlen, -e, "cannot open /proc/%d/clear_refs: %s",
			      (int)m->pid, strerror(e));
	}
	close(fd);
	m->pagemap_fd = proc_openat(&m->proc, "pagemap", O_RDONLY);
	if (m->pagemap_fd < 0) {
		e = -m->pagemap_fd;
		if (e == EACCES || e == EPERM)
			return cli_errf(err, errlen, -e,
				      "permission denied reading /proc/%d/pagemap (run as root, or as the owner of process %d with ptrace access to it)",
				      (int)m->pid, (int)m->pid);
		return cli_errf(err, errlen, -e, "cannot open /proc/%d/pagemap: %s",
			      (int)m->pid, strerror(e));
	}
	return 0;
}

/* A process whose memory is gone (exited, or a zombie) reads as an empty
 * maps file; its pagemap then reads 0 bytes. */
static int proc_gone(const struct dirty_map *m)
{
	uint64_t e;

	return pread(m->pagemap_fd, &e, sizeof(e), 0) == 0;
}

static int find_mappings(struct dirty_map *m, char *err, size_t errlen)
{
	struct vma_list l;
	int ret = scan_maps(m, &l);

	if (ret == -ESRCH || (!ret && !l.n && proc_gone(m))) {
		free(l.v);
		return cli_errf(err, errlen, -ESRCH, "process %d exited", (int)m->pid);
	}
	if (ret)
		return cli_errf(err, errlen, ret, "cannot read /proc/%d/maps: %s",
			      (int)m->pid, strerror(-ret));
	if (!l.n && l.nprivate)
		return cli_errf(err, errlen, -EINVAL,
			      "process %d maps %s only privately (MAP_PRIVATE): its writes do not reach the file",
			      (int)m->pid, m->path);
	if (!l.n)
		return cli_errf(err, errlen, -ENOENT, "process %d does not map %s",
			      (int)m->pid, m->path);
	m->vmas = l.v;
	m->nvmas = l.n;
	return 0;
}

int dirty_open(struct dirty_map **out, const struct proc_ref *proc, const char *path,
	       uint64_t file_len, char *err, size_t errlen)
{
	long psz = sysconf(_SC_PAGESIZE);
	pid_t pid = proc->pid;
	struct dirty_map *m;
	int ret;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m || !(m->path = strdup(path))) {
		free(m);
		return cli_errf(err, errlen, -ENOMEM, "out of memory");
	}
	m->pid = pid;
	m->psz = (uint64_t)psz;
	m->file_len = file_len;
	m->npages = file_len / m->psz + (file_len % m->psz != 0);
	m->proc = (struct proc_ref)PROC_REF_INIT;
	m->pagemap_fd = -1;
	ret = check_file(m, err, errlen);
	if (!ret)
		ret = probe_kernel(m->psz, err, errlen);
	if (!ret)
		ret = open_proc(m, proc, err, errlen);
	if (!ret)
		ret = find_mappings(m, err, errlen);
	if (ret)
		goto fail;
	m->bits = calloc(m->npages / 64 + 1, sizeof(*m->bits));
	m->buf = malloc(PM_BATCH * sizeof(*m->buf));
	if (!m->bits || !m->buf) {
		ret = cli_errf(err, errlen, -ENOMEM, "cannot allocate a dirty bitmap of %" PRIu64
			     " pages for %s", m->npages, path);
		goto fail;
	}
	*out = m;
	return 0;
fail:
	dirty_close(m);
	return ret;
}

int dirty_clear(const struct proc_ref *proc, char *err, size_t errlen)
{
	char path[48];
	pid_t pid = proc->pid;
	int fd, ret;

	snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)pid);
	fd = proc_openat(proc, "clear_refs", O_WRONLY);
	if (fd < 0) {
		if (fd == -ENOENT || fd == -ESRCH)
			return cli_errf(err, errlen, -ESRCH, "process %d exited", (int)pid);
		if (fd == -EACCES || fd == -EPERM)
			return cli_errf(err, errlen, fd,
				      "permission denied writing %s (run as root or as the owner of process %d)",
				      path, (int)pid);
		return cli_errf(err, errlen, fd, "cannot open %s: %s", path, strerror(-fd));
	}
	ret = clear_refs_fd(fd);
	close(fd);
	if (ret == -EINVAL)
		return cli_errf(err, errlen, -EOPNOTSUPP,
			      "soft-dirty tracking is not supported by this kernel (writing 4 to %s failed: %s)",
			      path, strerror(EINVAL));
	if (ret == -ESRCH)
		return cli_errf(err, errlen, ret, "process %d exited", (int)pid);
	if (ret)
		return cli_errf(err, errlen, ret, "writing 4 to %s failed: %s", path, strerror(-ret));
	return 0;
}

/* Mappings merge the same way every time, so equal coverage compares equal. */
static int same_mappings(const struct dirty_map *m, const struct vma_list *l)
{
	size_t i;

	if (l->n != m->nvmas)
		return 0;
	for (i = 0; i < l->n; i++)
		if (l->v[i].start != m->vmas[i].start || l->v[i].end != m->vmas[i].end ||
		    l->v[i].off != m->vmas[i].off)
			return 0;
	return 1;
}

static int recheck_mappings(struct dirty_map *m, char *err, size_t errlen)
{
	struct vma_list l;
	int ret = scan_maps(m, &l), same;

	if (ret == -ESRCH)
		return cli_errf(err, errlen, ret, "process %d exited", (int)m->pid);
	if (ret)
		return cli_errf(err, errlen, ret, "cannot read /proc/%d/maps: %s",
			      (int)m->pid, strerror(-ret));
	same = same_mappings(m, &l);
	free(l.v);
	if (!same && proc_gone(m))
		return cli_errf(err, errlen, -ESRCH, "process %d exited", (int)m->pid);
	if (!same)
		return cli_errf(err, errlen, -ESTALE,
			      "process %d changed its mappings of %s while it was being tracked: pages it dirtied may be missed",
			      (int)m->pid, m->path);
	return 0;
}

/* Sets the bits of the file pages that @v shows and that are soft-dirty. */
static int read_vma(struct dirty_map *m, const struct dirty_vma *v, char *err, size_t errlen)
{
	uint64_t first = v->off / m->psz, n = (v->end - v->start) / m->psz, done = 0, want, i, pg;
	ssize_t r;

	if (first >= m->npages)
		return 0;
	if (n > m->npages - first)
		n = m->npages - first;
	while (done < n) {
		want = n - done < PM_BATCH ? n - done : PM_BATCH;
		r = pread(m->pagemap_fd, m->buf, want * sizeof(*m->buf),
			  (off_t)((v->start / m->psz + done) * sizeof(*m->buf)));
		if (r == 0)
			return cli_errf(err, errlen, -ESRCH, "process %d exited", (int)m->pid);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return cli_errf(err, errlen, -errno, "cannot read /proc/%d/pagemap: %s",
				      (int)m->pid, strerror(errno));
		want = (uint64_t)r / sizeof(*m->buf);
		if (!want)
			return cli_errf(err, errlen, -EIO, "short read from /proc/%d/pagemap", (int)m->pid);
		for (i = 0; i < want; i++) {
			if (!(m->buf[i] & PM_SOFT_DIRTY))
				continue;
			pg = first + done + i;
			m->bits[pg / 64] |= 1ull << (pg % 64);
		}
		done += want;
	}
	return 0;
}

/* The first page at or after @from whose bit equals @set, or npages. */
static uint64_t next_bit(const struct dirty_map *m, uint64_t from, int set)
{
	uint64_t w;

	while (from < m->npages) {
		w = m->bits[from / 64];
		if (!set)
			w = ~w;
		w &= ~0ull << (from % 64);
		if (w) {
			from = from / 64 * 64 + (uint64_t)__builtin_ctzll(w);
			return from < m->npages ? from : m->npages;
		}
		from = (from / 64 + 1) * 64;
	}
	return m->npages;
}

int dirty_collect(struct dirty_map *m,
		  int (*cb)(void *ctx, uint64_t off, uint64_t len), void *ctx,
		  char *err, size_t errlen)
{
	uint64_t a, b = 0, off, end;
	size_t i;
	int ret;

	ret = recheck_mappings(m, err, errlen);
	if (ret)
		return ret;
	memset(m->bits, 0, (m->npages / 64 + 1) * sizeof(*m->bits));
	for (i = 0; i < m->nvmas; i++) {
		ret = read_vma(m, &m->vmas[i], err, errlen);
		if (ret)
			return ret;
	}
	while ((a = next_bit(m, b, 1)) < m->npages) {
		b = next_bit(m, a, 0);
		off = a * m->psz;
		end = b * m->psz < m->file_len ? b * m->psz : m->file_len;
		ret = cb(ctx, off, end - off);
		if (ret < 0)
			return cli_errf(err, errlen, ret, "handling dirty pages at offset %" PRIu64
				      " of %s failed: %s", off, m->path, strerror(-ret));
	}
	return 0;
}

void dirty_close(struct dirty_map *m)
{
	if (!m)
		return;
	if (m->pagemap_fd >= 0)
		close(m->pagemap_fd);
	proc_close(&m->proc);
	free(m->vmas);
	free(m->bits);
	free(m->buf);
	free(m->path);
	free(m->real);
	free(m);
}
