/* Zero-page detection on the data path: a dirty page that reads as all zero
 * travels as a ZERO_RANGES entry instead of an RDMA WRITE. */
#ifndef RDMIG_ZERO_H
#define RDMIG_ZERO_H

#include <stdbool.h>
#include <stddef.h>

/* True when all @len bytes at @p are zero (true for @len 0).  Any alignment
 * and length; reads each byte at most twice and nothing outside the range. */
bool zero_is_zero(const void *p, size_t len);
/* The same without CPU-specific code paths (what zero_is_zero runs where
 * AVX2 is missing), so tests cover both on any machine. */
bool zero_is_zero_portable(const void *p, size_t len);

#endif
