/* QEMU guests for the integration tests: started under TCG with a QMP
 * socket the test talks to through src/cli/qmp.c, killed with their test
 * (PR_SET_PDEATHSIG), and the boot-sector test guest (test/guest/) with its
 * serial markers and its RAM checker. */
#ifndef RDMIG_TEST_QEMU_VM_H
#define RDMIG_TEST_QEMU_VM_H

#include <json-c/json.h>
#include <stddef.h>

#include "qmp.h"
#include "testutil.h"

struct vm {
	struct tu_proc p;
	struct qmp *q;          /* the test's own monitor */
	/* QEMU serves one client per QMP socket: @cmd_sock is a second monitor
	 * for the command under test (migrate-send/migrate-recv --qmp). */
	char name[32], sock[256], cmd_sock[256], log[256];
};

/* A fresh directory for @v's sockets and logs, on a filesystem that can
 * hold unix sockets (9p in the Soft-RoCE bed cannot). */
void vm_dir(char *dir, size_t len, const char *tag);
/* Starts qemu-system-x86_64 -accel tcg -nographic -nodefaults -qmp ... with
 * @args (NULL-terminated) after those, and connects to its QMP socket as
 * soon as QEMU listens. */
void vm_start(struct vm *v, const char *dir, const char *name, const char *const *args);
/* Kills QEMU (also a stopped one) and closes the connection. */
void vm_stop(struct vm *v);
int vm_exited(struct vm *v);
/* Fails the test unless QEMU's query-status says @want. */
void vm_expect_status(struct vm *v, const char *want);
/* {@key: @val}, for QMP arguments. */
struct json_object *vm_args1(const char *key, struct json_object *val);

/* The test guest: a copy of build/guest/bootsect.img with pause @delay per
 * page, as @img. */
void guest_image(const char *img, unsigned delay);
/* Markers ('B') the guest wrote to @serial after its "rdmig-guest" line,
 * -1 before that line (SeaBIOS's banner holds B's too).  @migrated: the
 * guest arrived by migration and never booted here, so every byte counts. */
int guest_markers(const char *serial, int migrated);
/* Waits until @serial shows at least @n markers; fails the test after
 * @timeout_ms, naming @what. */
void guest_wait_markers(const char *serial, int migrated, int n, int timeout_ms,
			const char *what);
/* guestcheck ram @ram: 0 when consistent; its one line in @line. */
int guest_check(const char *ram, char *line, size_t len);

#endif
