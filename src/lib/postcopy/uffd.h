/* uffd: the userfaultfd calls post-copy makes, one line each, with
 * errors that name the call and the fix.
 *
 * Two kinds of guest memory are served (uffd_kind): private anonymous
 * memory, registered for MISSING faults, whose pages are placed whole
 * from a buffer with UFFDIO_COPY; and shared memory (tmpfs, memfd),
 * registered for MINOR faults, whose page-cache pages are written through
 * a second mapping of the same memory and then mapped into the guest's
 * with UFFDIO_CONTINUE.  Either way the guest's mapping shows no page
 * until it is whole: a page pinned for RDMA is present, so no MISSING
 * fault would ever fire on it, and the NIC never writes where the guest
 * looks before a page is complete. */
#ifndef RDMIG_UFFD_H
#define RDMIG_UFFD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

enum uffd_kind {
	UFFD_ANON,      /* private anonymous: MISSING faults, UFFDIO_COPY */
	UFFD_SHARED,    /* shared memory: MINOR faults, UFFDIO_CONTINUE */
};

/* What [host, host + len) is mapped as, from /proc/self/maps: 0 with *kind
 * set, or -EINVAL naming @name when it is neither kind everywhere (a
 * private file mapping, a mix, a hole). */
int uffd_kind_of(const char *name, const void *host, uint64_t len, enum uffd_kind *kind,
		 struct rd_err *err);

/* A userfaultfd of our own, non-blocking, with the features @shared
 * blocks need (MINOR faults on shared memory): the system call, else
 * /dev/userfaultfd; faults the kernel takes on the guest's behalf (a
 * KVM vCPU, a read() into guest memory) are served too.  0 with *fd, or a
 * negative errno with the fix in @err. */
int uffd_open(bool shared, int *fd, struct rd_err *err);
/* A userfaultfd the caller made: made non-blocking (O_NONBLOCK on its open
 * file), the API assumed done. */
int uffd_adopt(int fd, struct rd_err *err);

/* Registers [host, host + len) for @kind's faults; unregisters it and
 * wakes every fault still waiting there (they fault again, unregistered). */
int uffd_register(int fd, enum uffd_kind kind, void *host, uint64_t len, const char *name,
		  struct rd_err *err);
int uffd_unregister(int fd, void *host, uint64_t len);

/* Places [dst, dst + len) whole and wakes whoever waits on it: a copy of
 * @src (UFFD_ANON), or the page-cache pages already written through the
 * second mapping (UFFD_SHARED).  A page there already is left alone and its
 * waiters woken: 0, or a negative errno. */
int uffd_place(int fd, enum uffd_kind kind, void *dst, const void *src, uint64_t len);
/* A page complete here but not mapped (a page never written, of anonymous
 * memory: zero; a page-cache page not mapped in the guest's view): mapped,
 * its waiters woken. */
int uffd_place_local(int fd, enum uffd_kind kind, void *page, uint64_t len);

/* One message read, non-blocking: 1 for a fault, with *addr (the page's
 * address), 2 for another event (nothing to do: a VMM's own userfaultfd
 * may ask for them), 0 when none is pending, or a negative errno. */
int uffd_read_fault(int fd, uint64_t *addr);

#endif
