/* One valid control message per type, encoded: the fuzzers' seeds
 * (test/fuzz/gen_seeds.c writes them to test/fuzz/corpus/codec) and the
 * unit test that every type has its seed (check_wire.c) read the same
 * list, so a type without a seed is a test failure, not a gap the fuzzer
 * never starts from. */
#ifndef RDMIG_CTRL_SEEDS_H
#define RDMIG_CTRL_SEEDS_H

#include <stddef.h>

#include "util.h"

/* Encodes the seed of @type into @buf: the frame length, -ENOENT when
 * there is no seed for @type, or ctrl_encode's error (in @err). */
int ctrl_seed(unsigned type, void *buf, size_t cap, struct rd_err *err);

/* BLOCK_MAP_RESP as POSTCOPY_RECOVER sends it, with a resume token. */
int ctrl_seed_resume(void *buf, size_t cap, struct rd_err *err);

#endif
