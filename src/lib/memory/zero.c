#include "zero.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ZERO_HAVE_AVX2 1
#endif

/* Guest memory is mostly either zero or dense data: a non-zero page almost
 * always has a non-zero byte in its first 16, so that check runs first and
 * the bandwidth-bound scan only runs over pages that are (nearly) zero.
 *
 * The scan ORs 256-byte blocks into independent accumulators and tests once
 * per block: testing every vector would put a branch on each load, testing
 * once per page would read a whole page after its first non-zero byte.
 * 16-byte vectors (SSE2 on x86-64, NEON on arm64, both baseline) already
 * reach DRAM read bandwidth; AVX2, picked at run time, doubles the rate on
 * cache-resident pages (measured: 90 -> 180 GB/s from L1, 10 -> 11 GB/s from
 * DRAM on the development host). */

#define ZERO_BLOCK 256

/* may_alias: the buffer holds any type. */
typedef uint64_t zero_v2 __attribute__((vector_size(16), may_alias));

static inline uint64_t zero_load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Ranges under 64 bytes: 8-byte unaligned loads, the last one overlapping. */
static bool zero_small(const unsigned char *p, size_t len)
{
	uint64_t acc = 0;
	size_t i;

	if (len < 8) {
		for (i = 0; i < len; i++)
			acc |= p[i];
		return !acc;
	}
	for (i = 0; i + 8 <= len; i += 8)
		acc |= zero_load64(p + i);
	return !(acc | zero_load64(p + len - 8));
}

/* One 64-byte line at any alignment. */
static inline bool zero_line(const unsigned char *p)
{
	uint64_t acc = 0;
	unsigned i;

	for (i = 0; i < 64; i += 8)
		acc |= zero_load64(p + i);
	return !acc;
}

static inline uint64_t zero_reduce(zero_v2 v)
{
	return v[0] | v[1];
}

/* [a, end) is 64-byte aligned at both ends. */
static bool zero_aligned_v2(const unsigned char *a, const unsigned char *end)
{
	const zero_v2 *v = __builtin_assume_aligned(a, 64);
	const zero_v2 *vend = __builtin_assume_aligned(end, 64);

	while ((size_t)(vend - v) >= ZERO_BLOCK / sizeof(zero_v2)) {
		zero_v2 a0 = v[0] | v[4] | v[8] | v[12];
		zero_v2 a1 = v[1] | v[5] | v[9] | v[13];
		zero_v2 a2 = v[2] | v[6] | v[10] | v[14];
		zero_v2 a3 = v[3] | v[7] | v[11] | v[15];

		if (zero_reduce((a0 | a1) | (a2 | a3)))
			return false;
		v += ZERO_BLOCK / sizeof(zero_v2);
	}
	for (; v < vend; v += 4)
		if (zero_reduce((v[0] | v[1]) | (v[2] | v[3])))
			return false;
	return true;
}

#ifdef ZERO_HAVE_AVX2
__attribute__((target("avx2")))
static bool zero_aligned_avx2(const unsigned char *a, const unsigned char *end)
{
	const __m256i *v = __builtin_assume_aligned(a, 64);
	const __m256i *vend = __builtin_assume_aligned(end, 64);
	__m256i x;

	while ((size_t)(vend - v) >= ZERO_BLOCK / sizeof(__m256i)) {
		x = _mm256_or_si256(_mm256_or_si256(_mm256_or_si256(v[0], v[4]),
						    _mm256_or_si256(v[1], v[5])),
				    _mm256_or_si256(_mm256_or_si256(v[2], v[6]),
						    _mm256_or_si256(v[3], v[7])));
		if (!_mm256_testz_si256(x, x))
			return false;
		v += ZERO_BLOCK / sizeof(__m256i);
	}
	for (; v < vend; v += 2) {
		x = _mm256_or_si256(v[0], v[1]);
		if (!_mm256_testz_si256(x, x))
			return false;
	}
	return true;
}
#endif

typedef bool zero_scan_fn(const unsigned char *a, const unsigned char *end);

static inline bool zero_check(const void *p, size_t len, zero_scan_fn *scan)
{
	const unsigned char *b = p, *end = b + len, *a, *aend;

	if (len < 128)
		return len < 64 ? zero_small(b, len) : zero_line(b) && zero_line(end - 64);
	if (zero_load64(b) | zero_load64(b + 8))
		return false;
	/* The unaligned head and tail lines overlap the aligned middle, which
	 * starts after the head line and ends before the tail line:
	 * b < a <= b + 64 <= end - 64 <= aend + 63. */
	if (!zero_line(b))
		return false;
	a = (const unsigned char *)((uintptr_t)(b + 64) & ~(uintptr_t)63);
	aend = (const unsigned char *)((uintptr_t)end & ~(uintptr_t)63);
	return scan(a, aend) && zero_line(end - 64);
}

bool zero_is_zero(const void *p, size_t len)
{
#ifdef ZERO_HAVE_AVX2
	/* Reads a word libgcc filled in at startup: cheaper than the call. */
	if (__builtin_cpu_supports("avx2"))
		return zero_check(p, len, zero_aligned_avx2);
#endif
	return zero_check(p, len, zero_aligned_v2);
}

bool zero_is_zero_portable(const void *p, size_t len)
{
	return zero_check(p, len, zero_aligned_v2);
}
