#include "uffd.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE 4096u

/* A line of /proc/self/maps: its range, whether shared, and whether it maps
 * a file (anonymous memory has no path, or a [name] of its own). */
struct map_line {
	uint64_t start, end;
	bool shared, file;
};

static int parse_line(const char *line, struct map_line *m)
{
	unsigned long long start, end, off, inode;
	char perms[8], dev[16];
	int pos = 0;

	if (sscanf(line, "%llx-%llx %7s %llx %15s %llu %n", &start, &end, perms, &off, dev,
		   &inode, &pos) < 6)
		return -1;
	m->start = start;
	m->end = end;
	m->shared = perms[3] == 's';
	/* Anonymous memory has inode 0: no path, or [heap], [stack], [anon:...]. */
	m->file = inode != 0;
	return 0;
}

int uffd_kind_of(const char *name, const void *host, uint64_t len, enum uffd_kind *kind,
		 struct rd_err *err)
{
	uint64_t lo = (uintptr_t)host, hi = lo + len, covered = lo;
	bool any = false, shared = false;
	struct map_line m;
	char line[512];
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return rd_err_set(err, -errno, "block \"%s\": cannot read /proc/self/maps: %s",
				  name, strerror(errno));
	while (covered < hi && fgets(line, sizeof(line), f)) {
		if (parse_line(line, &m) || m.end <= covered || m.start >= hi)
			continue;
		if (m.start > covered)
			break; /* a hole */
		if (any && m.shared != shared)
			break; /* a mix */
		/* Private memory must be anonymous; shared memory is a file's
		 * (tmpfs, memfd) or anonymous shared memory (shmem too). */
		if (!m.shared && m.file)
			break;
		shared = m.shared;
		any = true;
		covered = m.end;
	}
	fclose(f);
	if (covered < hi)
		return rd_err_set(err, -EINVAL, "block \"%s\": post-copy needs private anonymous "
				  "or shared (tmpfs, memfd) memory, mapped whole; at 0x%" PRIx64
				  " it is not", name, covered);
	*kind = shared ? UFFD_SHARED : UFFD_ANON;
	return 0;
}

static int api(int fd, bool shared, struct rd_err *err)
{
	struct uffdio_api a = { .api = UFFD_API,
				.features = shared ? UFFD_FEATURE_MINOR_SHMEM : 0 };

	if (ioctl(fd, UFFDIO_API, &a))
		return rd_err_set(err, -errno, "UFFDIO_API%s failed: %s%s",
				  shared ? " (MINOR faults on shared memory)" : "", strerror(errno),
				  shared ? " (Linux 5.14 or later is needed)" : "");
	return 0;
}

int uffd_open(bool shared, int *out, struct rd_err *err)
{
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK), dev, rc;

	/* Without the privilege to catch kernel-mode faults the system call
	 * refuses (vm.unprivileged_userfaultfd=0); /dev/userfaultfd gives the
	 * same file to whoever may open it.  User-mode-only faults would not
	 * do: a vCPU's faults are taken by the kernel. */
	if (fd < 0 && errno == EPERM) {
		dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
		if (dev >= 0) {
			fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
			close(dev);
		} else {
			errno = EPERM;
		}
	}
	if (fd < 0)
		return rd_err_set(err, -errno, "userfaultfd failed: %s%s", strerror(errno),
				  errno == EPERM ? " (give the process CAP_SYS_PTRACE or access "
				  "to /dev/userfaultfd, or set vm.unprivileged_userfaultfd=1)" :
				  errno == ENOSYS ? " (the kernel has no userfaultfd)" : "");
	rc = api(fd, shared, err);
	if (rc) {
		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

int uffd_adopt(int fd, struct rd_err *err)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		return rd_err_set(err, -errno, "the VMM's userfaultfd %d: %s", fd, strerror(errno));
	return 0;
}

int uffd_register(int fd, enum uffd_kind kind, void *host, uint64_t len, const char *name,
		  struct rd_err *err)
{
	struct uffdio_register r = {
		.range = { .start = (uintptr_t)host, .len = len },
		.mode = kind == UFFD_ANON ? UFFDIO_REGISTER_MODE_MISSING :
			UFFDIO_REGISTER_MODE_MINOR,
	};
	uint64_t need = kind == UFFD_ANON ? (UINT64_C(1) << _UFFDIO_COPY) :
			(UINT64_C(1) << _UFFDIO_CONTINUE);

	if (ioctl(fd, UFFDIO_REGISTER, &r))
		return rd_err_set(err, -errno, "block \"%s\": UFFDIO_REGISTER for %s faults "
				  "failed: %s", name, kind == UFFD_ANON ? "missing" : "minor",
				  strerror(errno));
	if ((r.ioctls & need) != need) {
		uffd_unregister(fd, host, len);
		return rd_err_set(err, -EOPNOTSUPP, "block \"%s\": its memory cannot take "
				  "UFFDIO_%s", name, kind == UFFD_ANON ? "COPY" : "CONTINUE");
	}
	return 0;
}

static int wake(int fd, uint64_t addr, uint64_t len)
{
	struct uffdio_range r = { .start = addr, .len = len };

	return ioctl(fd, UFFDIO_WAKE, &r) ? -errno : 0;
}

int uffd_unregister(int fd, void *host, uint64_t len)
{
	struct uffdio_range r = { .start = (uintptr_t)host, .len = len };
	int rc = ioctl(fd, UFFDIO_UNREGISTER, &r) ? -errno : 0;

	/* The kernel wakes the faults still waiting in the range only for
	 * MISSING registrations (Linux 6.1's userfaultfd_unregister): a MINOR
	 * fault raised after our last read would sleep for ever.  Woken, it
	 * faults again, on memory no longer registered. */
	wake(fd, r.start, len);
	return rc;
}

/* One call over [dst, dst + len): the bytes it placed (all of them, or up
 * to a page that was there already, -EEXIST), or a negative errno. */
static int64_t place_once(int fd, enum uffd_kind kind, uint64_t dst, uint64_t src,
			  uint64_t len, bool zero)
{
	int rc;

	if (kind == UFFD_SHARED) {
		struct uffdio_continue c = { .range = { .start = dst, .len = len } };

		rc = ioctl(fd, UFFDIO_CONTINUE, &c) ? -errno : 0;
		return rc ? (c.mapped > 0 ? c.mapped : rc) : (int64_t)len;
	}
	if (zero) {
		struct uffdio_zeropage z = { .range = { .start = dst, .len = len } };

		rc = ioctl(fd, UFFDIO_ZEROPAGE, &z) ? -errno : 0;
		return rc ? (z.zeropage > 0 ? z.zeropage : rc) : (int64_t)len;
	}
	struct uffdio_copy c = { .dst = dst, .src = src, .len = len };

	rc = ioctl(fd, UFFDIO_COPY, &c) ? -errno : 0;
	return rc ? (c.copy > 0 ? c.copy : rc) : (int64_t)len;
}

/* A partial call places what it can; a page already there (-EEXIST) is
 * skipped with its waiters woken; the mm changing under the call (-EAGAIN)
 * is tried again. */
static int place(int fd, enum uffd_kind kind, uint64_t dst, uint64_t src, uint64_t len,
		 bool zero)
{
	int64_t n;
	int tries = 0;

	while (len) {
		n = place_once(fd, kind, dst, src, len, zero);
		if (n == -EAGAIN && ++tries < 1000)
			continue;
		if (n == -EEXIST) {
			n = wake(fd, dst, PAGE);
			if (n)
				return (int)n;
			n = PAGE;
		} else if (n < 0) {
			return (int)n;
		}
		dst += (uint64_t)n;
		src += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

int uffd_place(int fd, enum uffd_kind kind, void *dst, const void *src, uint64_t len)
{
	return place(fd, kind, (uintptr_t)dst, (uintptr_t)src, len, false);
}

int uffd_place_local(int fd, enum uffd_kind kind, void *page, uint64_t len)
{
	return place(fd, kind, (uintptr_t)page, 0, len, true);
}

int uffd_read_fault(int fd, uint64_t *addr)
{
	struct uffd_msg m;
	ssize_t n = read(fd, &m, sizeof(m));

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n != sizeof(m))
		return -EIO;
	/* Other events (a VMM's own uffd may ask for them) need nothing from
	 * us: reading them lets their senders go on. */
	if (m.event != UFFD_EVENT_PAGEFAULT)
		return 2;
	*addr = m.arg.pagefault.address & ~(uint64_t)(PAGE - 1);
	return 1;
}
