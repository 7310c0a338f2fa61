/* msgcheck: the stateless limits of rdmig(7), one function per message
 * type, run on what protobuf-c unpacked.  protobuf proves the bytes parse,
 * not that a count, a length or a name is acceptable: these do, with an
 * error naming the type, the field and the value.  Checks that need session
 * state (a block index below the number of blocks) are the state machines'
 * job.  The codec calls it once it has unpacked a message and checked its
 * kind; it needs only the protocol's numbers (wire.h), not the codec. */
#ifndef RDMIG_MSGCHECK_H
#define RDMIG_MSGCHECK_H

#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "util.h"

/* The limits of a message of @type, which the caller has made sure is of
 * that type (NULL for header-only types).  0, or -EPROTO with a message
 * naming the type, the field and the value; also -EPROTO for a type that
 * has no row in msgcheck.c's table. */
int msgcheck(unsigned type, const ProtobufCMessage *msg, uint32_t msg_max,
	     struct rd_err *err);

#endif
