/* dirty_bits: one bitmap per file, indexed by file page (dirty_int.h says
 * where it fits). */
#ifndef RDMIG_CLI_DIRTY_BITS_H
#define RDMIG_CLI_DIRTY_BITS_H

#include <stdint.h>

#include "dirty_int.h"

/* Sets bits [a, b) of @bits, atomically. */
void dirty_bits_set(uint64_t *bits, uint64_t a, uint64_t b);
/* Marks the file pages that virtual [a, b) of @sl's mapping shows. */
void dirty_bits_mark(struct dirty_set *s, const struct slice *sl, uint64_t a, uint64_t b);
/* Clears every file's bitmap. */
void dirty_bits_zero(struct dirty_set *s);
/* The first page at or after @from whose bit equals @set, or f->npages. */
uint64_t dirty_bits_next(const struct dirty_file *f, uint64_t from, int set);

#endif
