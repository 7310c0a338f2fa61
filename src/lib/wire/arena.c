#include "arena.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* What is not handed out is off limits, so the checkers see an overrun
 * between pieces, or a message used after its arena was reused, as they
 * would see it on malloc'd memory. */
#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#elif defined(RDMIG_HAVE_VALGRIND)
#include <valgrind/memcheck.h>
#define POISON(p, n) VALGRIND_MAKE_MEM_NOACCESS(p, n)
#define UNPOISON(p, n) VALGRIND_MAKE_MEM_UNDEFINED(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define ARENA_ALIGN 16

static void *arena_alloc(void *data, size_t len)
{
	struct arena *a = data;
	uint8_t *p;

	/* A zero-length piece at the very end would not be ours to free. */
	if (!len)
		len = 1;
	/* size and used are multiples of the alignment, so when @len fits its
	 * rounded-up length fits too. */
	if (len > a->size - a->used) {
		a->fallbacks++;
		return malloc(len);
	}
	p = a->buf + a->used;
	a->used += (len + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
	UNPOISON(p, len);
	return p;
}

static void arena_free(void *data, void *p)
{
	if (!arena_owns(data, p))
		free(p);
}

int arena_init(struct arena *a, size_t size, struct rd_err *err)
{
	void *buf = NULL;

	memset(a, 0, sizeof(*a));
	a->pc.alloc = arena_alloc;
	a->pc.free = arena_free;
	a->pc.allocator_data = a;
	size &= ~(size_t)(ARENA_ALIGN - 1);
	/* Its own mapping, not the heap: a daemon that serves migration after
	 * migration gets each arena's pages back at its end instead of keeping
	 * them in a heap that malloc's growing mmap threshold never trims. */
	if (size) {
		buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (buf == MAP_FAILED)
			return rd_err_set(err, -ENOMEM, "out of memory for a %zu-byte decode "
					  "arena", size);
	}
	a->buf = buf;
	a->size = size;
	POISON(a->buf, a->size);
	return 0;
}

void arena_fini(struct arena *a)
{
	if (a->buf) {
		UNPOISON(a->buf, a->size);
		munmap(a->buf, a->size);
	}
	memset(a, 0, sizeof(*a));
}

void arena_hold(struct arena *a)
{
	a->holders++;
}

void arena_release(struct arena *a)
{
	if (a->holders && --a->holders)
		return;
	POISON(a->buf, a->used);
	a->used = 0;
}

bool arena_owns(const struct arena *a, const void *p)
{
	uintptr_t x = (uintptr_t)p, base = (uintptr_t)a->buf;

	return a->buf && x >= base && x - base < a->size;
}
