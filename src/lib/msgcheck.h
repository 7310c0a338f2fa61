/* msgcheck: the stateless limits of rdmig(7), one function per message
 * type, run on what protobuf-c unpacked.  protobuf proves the bytes parse,
 * not that a count, a length or a name is acceptable: these do, with an
 * error naming the type, the field and the value.  Checks that need session
 * state (a block index below the number of blocks) are the state machines'
 * job.  codec.c's type table points at these; each takes its own message
 * type only (the table guarantees it). */
#ifndef RDMIG_MSGCHECK_H
#define RDMIG_MSGCHECK_H

#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "util.h"

int msgcheck_block_map_req(const ProtobufCMessage *msg, uint32_t msg_max,
			   struct rd_err *err);
int msgcheck_block_map_resp(const ProtobufCMessage *msg, uint32_t msg_max,
			    struct rd_err *err);
int msgcheck_register_req(const ProtobufCMessage *msg, uint32_t msg_max,
			  struct rd_err *err);
int msgcheck_register_resp(const ProtobufCMessage *msg, uint32_t msg_max,
			   struct rd_err *err);
int msgcheck_zero_ranges(const ProtobufCMessage *msg, uint32_t msg_max,
			 struct rd_err *err);
int msgcheck_state(const ProtobufCMessage *msg, uint32_t msg_max,
		   struct rd_err *err);
int msgcheck_state_ring(const ProtobufCMessage *msg, uint32_t msg_max,
			struct rd_err *err);
int msgcheck_state_written(const ProtobufCMessage *msg, uint32_t msg_max,
			   struct rd_err *err);
int msgcheck_complete(const ProtobufCMessage *msg, uint32_t msg_max,
		      struct rd_err *err);
int msgcheck_complete_ack(const ProtobufCMessage *msg, uint32_t msg_max,
			  struct rd_err *err);
int msgcheck_error(const ProtobufCMessage *msg, uint32_t msg_max,
		   struct rd_err *err);
int msgcheck_auth_challenge(const ProtobufCMessage *msg, uint32_t msg_max,
			    struct rd_err *err);
int msgcheck_auth_response(const ProtobufCMessage *msg, uint32_t msg_max,
			   struct rd_err *err);
int msgcheck_pages(const ProtobufCMessage *msg, uint32_t msg_max, struct rd_err *err);
int msgcheck_pin_keys(const ProtobufCMessage *msg, uint32_t msg_max,
		      struct rd_err *err);
int msgcheck_postcopy_keys(const ProtobufCMessage *msg, uint32_t msg_max,
			   struct rd_err *err);
int msgcheck_postcopy_ranges(const ProtobufCMessage *msg, uint32_t msg_max,
			     struct rd_err *err);
int msgcheck_postcopy_resumed(const ProtobufCMessage *msg, uint32_t msg_max,
			      struct rd_err *err);
int msgcheck_postcopy_done(const ProtobufCMessage *msg, uint32_t msg_max,
			   struct rd_err *err);

#endif
