/* QEMU guests for the integration tests: started under TCG with a QMP
 * socket the test talks to through src/cli/qmp.h, killed with their test
 * (PR_SET_PDEATHSIG), and the boot-sector test guest (test/guest/) with its
 * serial markers and its RAM checker.
 *
 * Two QEMUs can run a guest: the host's own qemu-system-x86_64 (Debian 12's
 * 7.2), and Debian 13's 10.0 in the root tools/qemu-root builds, started
 * with chroot the way a containerised QEMU runs: in a mount namespace of
 * its own, with the host's /dev (so /dev/shm), /proc, /sys and /tmp bound
 * at the same paths, so the QMP sockets, serial files and images of a test
 * are the same paths on both sides; its RAM files it is given by a path
 * of its root's own (vm_inner_path). */
#ifndef RDMIG_TEST_QEMU_VM_H
#define RDMIG_TEST_QEMU_VM_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "qmp.h"
#include "testutil.h"

/* A QEMU to run guests with. */
struct vm_qemu {
	const char *name;   /* "qemu-7.2", "qemu-10.0": names test cases */
	int major, minor;   /* what its query-version must report */
	bool chrooted;      /* in the root of tools/qemu-root (RDMIG_QEMU_ROOT) */
};

enum { VM_QEMU_HOST, VM_QEMU_ROOT, VM_QEMUS };
extern const struct vm_qemu vm_qemus[VM_QEMUS];

struct vm {
	struct tu_proc p;
	struct qmp *q;          /* the test's own monitor */
	const struct vm_qemu *qemu; /* NULL: the host's, any version */
	/* QEMU serves one client per QMP socket: @cmd_sock is a second monitor
	 * for the command under test (migrate-send/migrate-recv --qmp). */
	char name[32], sock[256], cmd_sock[256], log[256];
	char version[32];       /* query-version's, "10.0.13" */
};

/* A fresh directory for @v's sockets and logs, on a filesystem that can
 * hold unix sockets (9p in the Soft-RoCE bed cannot). */
/* A Python program that poses as QEMU on a QMP socket (run it with
 * python3 -c): it listens on the socket named by its argument (and prints
 * "listening") or, without one, serves the listening socket it inherited
 * as fd 3 (and prints "serving"); it greets like QMP, answers every command
 * with an empty return and prints "got N bytes: ..." for what it is sent,
 * so that whatever reaches it shows. */
extern const char vm_qmp_impostor_py[];

void vm_dir(char *dir, size_t len, const char *tag);

/* The files of a migrated guest's two QEMUs: RAM, serial log and boot
 * image of the source and of the destination (each QEMU its own image:
 * both lock the image they boot from). */
struct vm_files {
	char src_ram[256], dst_ram[256], src_serial[256], dst_serial[256];
	char src_img[256], dst_img[256];
};

/* Names them in @dir (src.ram, dst.serial, ...); creates nothing. */
void vm_files(struct vm_files *g, const char *dir);
/* Starts qemu-system-x86_64 -accel tcg -nographic -nodefaults -qmp ... with
 * @args (NULL-terminated) after those, and connects to its QMP socket as
 * soon as QEMU listens; fails the test unless query-version says @qemu's
 * version.  A chrooted QEMU needs root and its root built (the test fails,
 * naming the fix, when either is missing: it is never skipped).  @dir must
 * be under /dev or /tmp, which the chroot sees at the same paths. */
void vm_start_qemu(struct vm *v, const struct vm_qemu *qemu, const char *dir,
		   const char *name, const char *const *args);
/* The name QEMU gives the file @name of @dir: the same path for the host's
 * QEMU; for a chrooted one a path that exists only in its root (the test
 * directory is bound there too), so a command finds it only through
 * /proc/PID/root. */
const char *vm_inner_path(const struct vm_qemu *qemu, const char *dir, const char *name,
			  char *buf, size_t len);
/* The same with the host's QEMU, whatever its version. */
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
/* The same, walking [1 MiB, @end_mib MiB) (0: the default 101). */
void guest_image_range(const char *img, unsigned delay, unsigned end_mib);
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
/* The same over [1 MiB, @end_mib MiB) (0: the default). */
int guest_check_range(const char *ram, unsigned end_mib, char *line, size_t len);

#endif
