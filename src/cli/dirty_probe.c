/* What the kernel offers here, and what the tracked process lets us do:
 * each way of tracking is proved on a page of our own before it is chosen
 * (a kernel without CONFIG_MEM_SOFT_DIRTY accepts "4" in clear_refs and
 * does nothing), the permissions on /proc/PID are checked up front, and
 * wp-async's userfaultfd is made inside the process (inject.h).  The
 * reasons a better way was not taken are kept for the operator. */
#include "dirty_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "cli.h"
#include "inject.h"

/* ---- probes on pages of our own --------------------------------------------------- */

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
static int probe_soft_dirty(uint64_t psz, struct cli_err *err)
{
	volatile char *page;
	uint64_t before = 0, after = 0;
	int cfd, pfd, ret;

	page = mmap(NULL, psz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return cli_err_set(err, -errno, "cannot map a probe page: %s", strerror(errno));
	page[0] = 1;
	cfd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
	pfd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (cfd < 0 || pfd < 0) {
		ret = cli_err_set(err, -EOPNOTSUPP,
				  "soft-dirty tracking is not supported by this kernel (cannot open /proc/self/%s: %s)",
				  cfd < 0 ? "clear_refs" : "pagemap", strerror(errno));
		goto out;
	}
	ret = clear_refs_fd(cfd);
	if (ret) {
		ret = cli_err_set(err, -EOPNOTSUPP,
				  "soft-dirty tracking is not supported by this kernel (writing 4 to /proc/self/clear_refs failed: %s)",
				  strerror(-ret));
		goto out;
	}
	ret = self_pm(pfd, page, psz, &before);
	page[0] = 2;
	if (!ret)
		ret = self_pm(pfd, page, psz, &after);
	if (ret) {
		ret = cli_err_set(err, ret, "cannot read /proc/self/pagemap: %s", strerror(-ret));
		goto out;
	}
	if ((before & PM_SOFT_DIRTY) || !(after & PM_SOFT_DIRTY))
		ret = cli_err_set(err, -EOPNOTSUPP,
				  "soft-dirty tracking is not supported by this kernel (after writing 4 to /proc/self/clear_refs, a written page shows no soft-dirty bit in /proc/self/pagemap: the kernel needs CONFIG_MEM_SOFT_DIRTY=y)");
out:
	if (cfd >= 0)
		close(cfd);
	if (pfd >= 0)
		close(pfd);
	munmap((void *)page, psz);
	return ret;
}

/* Whether PAGEMAP_SCAN knows @category, asked on a page of our own: 0, or
 * -ENOTTY (no PAGEMAP_SCAN: Linux before 6.7), -EINVAL (an unknown
 * category: PAGE_IS_SOFT_DIRTY before 6.8). */
static int probe_scan(uint64_t psz, uint64_t category)
{
	struct page_region_ r;
	struct pm_scan_arg_ a;
	void *page;
	int fd, ret;

	page = mmap(NULL, psz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return -errno;
	fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	a = (struct pm_scan_arg_){ .size = sizeof(a), .start = (uintptr_t)page,
				   .end = (uintptr_t)page + psz, .vec = (uintptr_t)&r,
				   .vec_len = 1, .category_anyof_mask = category,
				   .return_mask = category };
	ret = fd < 0 ? -errno : ioctl(fd, PAGEMAP_SCAN_, &a) < 0 ? -errno : 0;
	if (fd >= 0)
		close(fd);
	munmap(page, psz);
	return ret;
}

/* Whether userfaultfd has asynchronous write-protection here, asked of a
 * userfaultfd of our own. */
static int probe_wp_async(struct cli_err *why)
{
	struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_WP_ASYNC_ };
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY_), ret = 0;

	if (fd < 0)
		return cli_err_set(why, -errno, "userfaultfd(2) failed here (%s%s)",
				   strerror(errno),
				   errno == ENOSYS ? ": the kernel is built without CONFIG_USERFAULTFD" : "");
	if (ioctl(fd, UFFDIO_API, &api))
		ret = cli_err_set(why, -EOPNOTSUPP, "userfaultfd has no asynchronous write-protect "
				  "in this kernel (UFFD_FEATURE_WP_ASYNC: %s)", strerror(errno));
	close(fd);
	return ret;
}

/* ---- the files and the process ---------------------------------------------------- */

int dirty_probe_file(struct dirty_file *f, struct cli_err *err)
{
	struct statfs sfs;
	struct stat st;

	if (stat(f->path, &st))
		return cli_err_set(err, -errno, "cannot stat %s: %s", f->path, strerror(errno));
	if (!statfs(f->path, &sfs) && (uint32_t)sfs.f_type == HUGETLBFS_MAGIC_)
		return cli_err_set(err, -EOPNOTSUPP,
				   "%s is on hugetlbfs, whose pages carry no soft-dirty bits: use a file on tmpfs (e.g. /dev/shm) for live migration",
				   f->path);
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->real = realpath(f->path, NULL);
	return 0;
}

int dirty_probe_pagemap(struct dirty_set *s, struct cli_err *err)
{
	int e;

	s->pagemap_fd = proc_openat(&s->proc, "pagemap", O_RDONLY);
	if (s->pagemap_fd >= 0)
		return 0;
	e = -s->pagemap_fd;
	if (e == EACCES || e == EPERM)
		return cli_err_set(err, -e,
				   "permission denied reading /proc/%d/pagemap (run as root, or as the owner of process %d with ptrace access to it)",
				   (int)s->pid, (int)s->pid);
	return cli_err_set(err, -e, "cannot open /proc/%d/pagemap: %s", (int)s->pid,
			   strerror(e));
}

/* Only checks the permission now; the clear itself is dirty_clear's. */
static int check_clear_refs(struct dirty_set *s, struct cli_err *err)
{
	int fd = proc_openat(&s->proc, "clear_refs", O_WRONLY), e;

	if (fd >= 0) {
		close(fd);
		return 0;
	}
	e = -fd;
	if (e == EACCES || e == EPERM)
		return cli_err_set(err, -e,
				   "permission denied writing /proc/%d/clear_refs (run as root or as the owner of process %d)",
				   (int)s->pid, (int)s->pid);
	return cli_err_set(err, -e, "cannot open /proc/%d/clear_refs: %s", (int)s->pid,
			   strerror(e));
}

/* ---- wp-async --------------------------------------------------------------------- */

/* PAGEMAP_SCAN and asynchronous write-protection, asked of this process. */
static int probe_wp(uint64_t psz, struct cli_err *why)
{
	struct utsname u;
	int rc = probe_scan(psz, PAGE_IS_WRITTEN_);

	if (rc == -ENOTTY || rc == -EINVAL) {
		uname(&u);
		return cli_err_set(why, -EOPNOTSUPP, "PAGEMAP_SCAN is not in this kernel (%s; "
				   "Linux 6.7 added it)", u.release);
	}
	if (rc)
		return cli_err_set(why, rc, "PAGEMAP_SCAN on /proc/self/pagemap failed: %s",
				   strerror(-rc));
	return probe_wp_async(why);
}

/* A userfaultfd made inside the process (a userfaultfd belongs to the mm
 * that created it), with asynchronous write-protection. */
static int make_uffd(struct dirty_set *s, bool forced, struct cli_err *why)
{
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_WP_ASYNC_ | UFFD_FEATURE_WP_UNPOPULATED_ };
	struct cli_err inj;
	int rc;

	rc = inject_userfaultfd(&s->proc, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY_, forced,
				&s->uffd, &inj);
	if (rc)
		return cli_err_set(why, rc, "cannot make a userfaultfd in process %d: %s",
				   (int)s->pid,
				   inj.msg);
	/* WP_UNPOPULATED protects pages never touched too (needed for
	 * anonymous memory; shmem has it anyway): asked for, not required. */
	if (ioctl(s->uffd, UFFDIO_API, &api)) {
		api = (struct uffdio_api){ .api = UFFD_API, .features = UFFD_FEATURE_WP_ASYNC_ };
		if (ioctl(s->uffd, UFFDIO_API, &api))
			return cli_err_set(why, -errno, "UFFDIO_API with UFFD_FEATURE_WP_ASYNC on "
					   "process %d's userfaultfd failed: %s", (int)s->pid,
					   strerror(errno));
	}
	return 0;
}

/* Every mapping of every file, registered for write-protection. */
static int register_wp(struct dirty_set *s, struct cli_err *why)
{
	unsigned i;
	size_t k;
	int rc;

	for (i = 0; i < s->nfiles; i++)
		for (k = 0; k < s->files[i].nvmas; k++) {
			const struct dirty_vma *v = &s->files[i].vmas[k];
			struct uffdio_register reg = {
				.range = { .start = v->start, .len = v->end - v->start },
				.mode = UFFDIO_REGISTER_MODE_WP,
			};

			if (!ioctl(s->uffd, UFFDIO_REGISTER, &reg))
				continue;
			rc = -errno;
			return cli_err_set(why, rc, "registering process %d's mapping of %s "
					   "(%#" PRIx64 "-%#" PRIx64 ") for write-protection failed: %s",
					   (int)s->pid, s->files[i].path, v->start, v->end,
					   rc == -EBUSY ? "another userfaultfd has it (QEMU's postcopy?)" :
					   strerror(-rc));
		}
	return 0;
}

/* wp-async: a userfaultfd made inside the process, its ranges registered
 * for asynchronous write-protection.  Fails with the reason in @why. */
static int setup_wp(struct dirty_set *s, bool forced, struct cli_err *why)
{
	int rc = probe_wp(s->psz, why);

	if (!rc)
		rc = make_uffd(s, forced, why);
	return rc ? rc : register_wp(s, why);
}

/* ---- the methods ------------------------------------------------------------------ */

int dirty_probe_wp(struct dirty_set *s, bool forced, struct cli_err *why)
{
	int rc = setup_wp(s, forced, why);

	if (!rc) {
		s->method = M_WP_ASYNC;
		return 0;
	}
	if (s->uffd >= 0)
		close(s->uffd);
	s->uffd = -1;
	return rc;
}

int dirty_probe_soft(struct dirty_set *s, struct cli_err *err)
{
	int rc = probe_soft_dirty(s->psz, err);

	if (!rc)
		rc = check_clear_refs(s, err);
	if (rc)
		return rc;
	s->method = probe_scan(s->psz, PAGE_IS_SOFT_DIRTY_) ? M_SOFT_DIRTY : M_SOFT_DIRTY_SCAN;
	return 0;
}

/* ---- soft-dirty's clear ----------------------------------------------------------- */

int dirty_probe_clear_refs(struct dirty_set *s, struct cli_err *err)
{
	char path[48];
	int fd, ret;

	snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)s->pid);
	fd = proc_openat(&s->proc, "clear_refs", O_WRONLY);
	if (fd < 0) {
		if (fd == -ENOENT || fd == -ESRCH)
			return cli_err_set(err, -ESRCH, "process %d exited", (int)s->pid);
		if (fd == -EACCES || fd == -EPERM)
			return cli_err_set(err, fd,
					   "permission denied writing %s (run as root or as the owner of process %d)",
					   path, (int)s->pid);
		return cli_err_set(err, fd, "cannot open %s: %s", path, strerror(-fd));
	}
	ret = clear_refs_fd(fd);
	close(fd);
	if (ret == -EINVAL)
		return cli_err_set(err, -EOPNOTSUPP,
				   "soft-dirty tracking is not supported by this kernel (writing 4 to %s failed: %s)",
				   path, strerror(EINVAL));
	if (ret == -ESRCH)
		return cli_err_set(err, ret, "process %d exited", (int)s->pid);
	if (ret)
		return cli_err_set(err, ret, "writing 4 to %s failed: %s", path, strerror(-ret));
	return 0;
}
