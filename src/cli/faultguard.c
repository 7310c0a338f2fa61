#include "faultguard.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct fg_slot {
	/* Published last on watch, cleared first on unwatch: the handler
	 * trusts start/len/pgsz only while owner is set. */
	_Atomic(const void *) owner;
	_Atomic uintptr_t start;
	_Atomic uint64_t len, pgsz;
	_Atomic uintptr_t fault;   /* the first faulting address, 0 if none */
};

/* The handler has no other way to find its table than a global; it holds
 * address ranges, not connection state. */
static struct fg_slot *slots;
static unsigned nslots;

/* Async-signal-safe: atomics, mmap, sigaction. */
static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr, s, page, expect = 0;
	uint64_t len, psz;
	unsigned i;

	(void)uc;
	for (i = 0; i < nslots; i++) {
		if (!atomic_load(&slots[i].owner))
			continue;
		s = atomic_load(&slots[i].start);
		len = atomic_load(&slots[i].len);
		psz = atomic_load(&slots[i].pgsz);
		if (a < s || a - s >= len)
			continue;
		page = s + (a - s) / psz * psz;
		if (mmap((void *)page, psz, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			break;
		atomic_compare_exchange_strong(&slots[i].fault, &expect, a);
		return;
	}
	/* Not ours: the default action on the retried access. */
	signal(sig, SIG_DFL);
}

int fg_install(unsigned capacity, struct cli_err *err)
{
	struct sigaction sa;

	slots = calloc(capacity, sizeof(*slots));
	if (!slots)
		return cli_err_set(err, -ENOMEM, "out of memory for %u watched ranges", capacity);
	nslots = capacity;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL))
		return cli_err_set(err, -errno, "cannot catch SIGBUS: %s", strerror(errno));
	return 0;
}

int fg_watch(void *start, uint64_t len, uint64_t pgsz, const void *owner)
{
	unsigned i;

	for (i = 0; i < nslots; i++) {
		if (atomic_load(&slots[i].owner))
			continue;
		atomic_store(&slots[i].start, (uintptr_t)start);
		atomic_store(&slots[i].len, len);
		atomic_store(&slots[i].pgsz, pgsz ? pgsz : 4096);
		atomic_store(&slots[i].fault, 0);
		atomic_store(&slots[i].owner, owner);
		return (int)i;
	}
	return -ENOSPC;
}

void fg_unwatch(int slot)
{
	if (slot >= 0 && (unsigned)slot < nslots)
		atomic_store(&slots[slot].owner, NULL);
}

int fg_faulted(int slot, uint64_t *offset)
{
	uintptr_t f;

	if (slot < 0 || (unsigned)slot >= nslots || !atomic_load(&slots[slot].owner))
		return 0;
	f = atomic_load(&slots[slot].fault);
	if (!f)
		return 0;
	*offset = f - atomic_load(&slots[slot].start);
	return 1;
}
