/* The fabric calls chan.c makes, for fuzzing its admission rule alone:
 * none of them may run under the fuzzer. */
#include <stdlib.h>

#include "fabric.h"

#define NOT_HERE abort()

int fab_listen_beside(struct fab_listener **out, const struct fab_conn *c, struct rd_err *err)
{ (void)out; (void)c; (void)err; NOT_HERE; }
int fab_listener_fd(const struct fab_listener *l) { (void)l; NOT_HERE; }
uint16_t fab_listener_port(const struct fab_listener *l) { (void)l; NOT_HERE; }
void fab_listener_destroy(struct fab_listener *l) { (void)l; NOT_HERE; }
void fab_listener_stop(struct fab_listener *l) { (void)l; NOT_HERE; }
int fab_listener_event(struct fab_listener *l, enum fab_lev *kind, struct fab_conn **c,
		       struct rd_err *err)
{ (void)l; (void)kind; (void)c; (void)err; NOT_HERE; }
bool fab_same_peer(const struct fab_conn *a, const struct fab_conn *b)
{ (void)a; (void)b; NOT_HERE; }
int fab_accept(struct fab_conn *c, const struct fab_caps *caps, const void *priv, size_t len,
	       int (*pre)(struct fab_conn *c, void *arg), void *arg)
{ (void)c; (void)caps; (void)priv; (void)len; (void)pre; (void)arg; NOT_HERE; }
int fab_reject(struct fab_conn *c, const void *priv, size_t len)
{ (void)c; (void)priv; (void)len; NOT_HERE; }
int fab_connect(struct fab_conn **out, const char *host, const char *port,
		const struct fab_caps *caps, const void *priv, size_t len,
		int (*pre)(struct fab_conn *c, void *arg), void *arg, int64_t deadline,
		struct rd_err *err)
{ (void)out; (void)host; (void)port; (void)caps; (void)priv; (void)len; (void)pre;
  (void)arg; (void)deadline; (void)err; NOT_HERE; }
int fab_connect_start(struct fab_conn **out, const char *host, const char *port,
		      const struct fab_caps *caps, const void *priv, size_t len,
		      int (*pre)(struct fab_conn *c, void *arg), void *arg, int64_t deadline,
		      struct rd_err *err)
{ (void)out; (void)host; (void)port; (void)caps; (void)priv; (void)len; (void)pre;
  (void)arg; (void)deadline; (void)err; NOT_HERE; }
void fab_disconnect(struct fab_conn *c) { (void)c; NOT_HERE; }
void fab_qp_error(struct fab_conn *c) { (void)c; NOT_HERE; }
int fab_qp_sends_only(struct fab_conn *c) { (void)c; NOT_HERE; }
void fab_conn_destroy(struct fab_conn *c) { (void)c; NOT_HERE; }
const struct sockaddr *fab_peer_addr(const struct fab_conn *c) { (void)c; NOT_HERE; }
