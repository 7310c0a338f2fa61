/* pcsock_msg: the hand-over message of migrate-recv's --postcopy-socket,
 * in which a VMM in another process lists the regions of its guest memory
 * (migrate-recv(1), POST-COPY SOCKET).  Text, one item a line, versioned:
 *
 *   rdmig-postcopy-socket 1
 *   regions N
 *   region NAME ADDR SIZE OFFSET PAGESIZE      (N lines)
 *   end
 *
 * sent with SCM_RIGHTS: the VMM's userfaultfd first, then one memfd per
 * region, in order.  NAME is the block's name (the source's); ADDR where
 * the VMM maps it; SIZE its length; OFFSET where it starts in its memfd;
 * numbers in decimal or 0x-hex.  Everything in it comes from another
 * process and is checked here, before anything is mapped: the counts, the
 * lengths, whole 4 KiB pages, no range that wraps, no two regions of one
 * name or of overlapping addresses.  Pure: no I/O (the VMM's smaps are
 * read from a FILE given), so a unit test and a fuzzer drive it as
 * migrate-recv does.
 *
 * After "ok", migrate-recv sends the device state before it says "run" or
 * "complete": a line "state N" (decimal) and exactly N bytes.  Its header
 * is made and read here, so migrate-recv and a VMM written in C (the test
 * VMM is one) agree on it byte for byte. */
#ifndef RDMIG_CLI_PCSOCK_MSG_H
#define RDMIG_CLI_PCSOCK_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "clierr.h"

#define PCS_VERSION 1
/* Regions at most: a migration has at most 1024 blocks, a VMM's guest RAM
 * a handful; the fds come in one control message of this many plus one. */
#define PCS_MAX_REGIONS 64
/* The message's bytes at most: 64 region lines of 255-byte names fit. */
#define PCS_MAX_MSG 24576
#define PCS_PAGE 4096u
/* A region's size or offset at most (2^47: a user address space). */
#define PCS_MAX_SPAN (UINT64_C(1) << 47)

struct pcs_region {
	char name[256];
	uint64_t addr, size, offset;
};

struct pcs_msg {
	unsigned n;
	struct pcs_region r[PCS_MAX_REGIONS];
};

/* Whether @buf[0..len) holds the whole message yet (its "end" line). */
int pcs_complete(const char *buf, size_t len);
/* Decodes @buf[0..len), which came with @nfds fds: 0 with @m filled, or
 * -EPROTO (not this message, another version, a malformed line) or
 * -EINVAL (a value out of range, fds that do not match the regions), with
 * the cause in @err. */
int pcs_decode(const char *buf, size_t len, unsigned nfds, struct pcs_msg *m,
	       struct cli_err *err);

/* "state " with 20 digits at most, '\n' and the NUL. */
#define PCS_STATE_LINE_MAX 28
/* The header of @n bytes of device state, "state N\n", in @buf (at least
 * PCS_STATE_LINE_MAX bytes); its length. */
size_t pcs_state_line(char *buf, uint64_t n);
/* The VMM's side: @line (its '\n' removed) is a header announcing at most
 * @max bytes: 0 with *@n, or -EPROTO (another line, a malformed number) or
 * -EFBIG (more than @max: the VMM would have to hold it), with @err. */
int pcs_state_parse(const char *line, uint64_t max, uint64_t *n, struct cli_err *err);

/* The VMM's userfaultfd, as its /proc/self/fdinfo text (@fdinfo) shows
 * it: the features its UFFDIO_API enabled (the "API:" line's second field)
 * in *@features, or -EPROTO without that line. */
int pcs_uffd_features(const char *fdinfo, uint32_t *features, struct cli_err *err);
/* Whether @features make a userfaultfd migrate-recv can serve: 0, or
 * -EINVAL naming the first feature that is missing or refused and why. */
int pcs_uffd_check(uint32_t features, struct cli_err *err);

/* Whether the mappings of @smaps (a /proc/PID/smaps of the VMM, @pid)
 * over region @r's view are, every byte of it, the memfd @ino on @maj:@min
 * mapped MAP_SHARED at the region's OFFSET, and registered for minor
 * faults ("ui" in VmFlags) when @ui, not when !@ui: 0, or -EINVAL (-EBUSY
 * for a registration already there) naming the first thing wrong. */
int pcs_view_check(FILE *smaps, int pid, const struct pcs_region *r, uint64_t ino,
		   unsigned maj, unsigned min, bool ui, struct cli_err *err);

#endif
