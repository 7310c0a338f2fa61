#include "qemu_vm.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

const struct vm_qemu vm_qemus[VM_QEMUS] = {
	[VM_QEMU_HOST] = { "qemu-7.2", 7, 2, false },
	[VM_QEMU_ROOT] = { "qemu-10.0", 10, 0, true },
};

/* Where the chrooted QEMU lives inside its root, and where the root is:
 * the same variable and default as tools/qemu-root. */
#define ROOT_QEMU "/usr/bin/qemu-system-x86_64"
#define ROOT_DEFAULT "/var/cache/rdmig/qemu-10.0-root"

/* What a chrooted QEMU sees of the host, at the same paths: /dev with
 * /dev/shm (the tests' directories, sockets, images and RAM files; /dev/kvm
 * too, unused: TCG only), /proc and /sys (QEMU reads both), /tmp. */
static const char *const root_binds[] = { "/dev", "/proc", "/sys", "/tmp" };
/* ... and the test's directory once more at a path of its own root only,
 * as a container shows its volumes: a file named there exists for QEMU and
 * not for us, so a command must reach it through QEMU's root. */
#define ROOT_INNER "/srv"

static void qemu_bin(char *buf, size_t len)
{
	const char *path = getenv("PATH");
	char dirs[4096], *d, *save = NULL;

	snprintf(dirs, sizeof(dirs), "%s", path && *path ? path : "/usr/bin:/bin");
	for (d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(buf, len, "%s/qemu-system-x86_64", d);
		if (!access(buf, X_OK))
			return;
	}
	ck_abort_msg("qemu-system-x86_64 not found in PATH");
}

static const char *qemu_root(void)
{
	const char *r = getenv("RDMIG_QEMU_ROOT");

	return r && *r ? r : ROOT_DEFAULT;
}

/* Fails the test, naming the fix, when a chrooted QEMU cannot start: a
 * missing root must never turn into a skipped test. */
static void check_root(const struct vm_qemu *qemu, const char *root)
{
	char p[512];
	size_t i;

	snprintf(p, sizeof(p), "%s" ROOT_QEMU, root);
	ck_assert_msg(!access(p, X_OK),
		      "%s: %s: %s: build its root with tools/qemu-root (as root; make check does) "
		      "or point RDMIG_QEMU_ROOT at one", qemu->name, p, strerror(errno));
	ck_assert_msg(geteuid() == 0,
		      "%s runs chrooted in a mount namespace of its own, which needs root: run the "
		      "tests as root (tools/softroce does)", qemu->name);
	for (i = 0; i < sizeof(root_binds) / sizeof(root_binds[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", root, root_binds[i]);
		ck_assert_msg(!access(p, F_OK), "%s: %s: %s (an incomplete root? rebuild it with "
			      "tools/qemu-root --refresh)", qemu->name, p, strerror(errno));
	}
}

/* In the child: a mount namespace of its own, so that the bind mounts go
 * away with QEMU and are never seen by the test, the host or another
 * test; then the host's directories into @root and chroot.  Returns 0, or
 * -errno after writing the reason to stderr (QEMU's log). */
static int enter_root(const char *root, const char *dir)
{
	char target[512];
	size_t i;
	int r;

	if (unshare(CLONE_NEWNS)) {
		r = -errno;
		dprintf(2, "vm_start: unshare(CLONE_NEWNS): %s\n", strerror(-r));
		return r;
	}
	/* Mounts under a shared / would propagate back to the parent's
	 * namespace. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
		r = -errno;
		dprintf(2, "vm_start: mount --make-rprivate /: %s\n", strerror(-r));
		return r;
	}
	for (i = 0; i < sizeof(root_binds) / sizeof(root_binds[0]); i++) {
		snprintf(target, sizeof(target), "%s%s", root, root_binds[i]);
		/* MS_REC: /dev/shm and /dev/pts are mounts of their own. */
		if (mount(root_binds[i], target, NULL, MS_BIND | MS_REC, NULL)) {
			r = -errno;
			dprintf(2, "vm_start: mount --rbind %s %s: %s\n", root_binds[i], target,
				strerror(-r));
			return r;
		}
	}
	snprintf(target, sizeof(target), "%s" ROOT_INNER, root);
	if (mount(dir, target, NULL, MS_BIND, NULL)) {
		r = -errno;
		dprintf(2, "vm_start: mount --bind %s %s: %s\n", dir, target, strerror(-r));
		return r;
	}
	if (chroot(root) || chdir("/")) {
		r = -errno;
		dprintf(2, "vm_start: chroot %s: %s\n", root, strerror(-r));
		return r;
	}
	return 0;
}

void vm_files(struct vm_files *g, const char *dir)
{
	snprintf(g->src_ram, sizeof(g->src_ram), "%s/src.ram", dir);
	snprintf(g->dst_ram, sizeof(g->dst_ram), "%s/dst.ram", dir);
	snprintf(g->src_serial, sizeof(g->src_serial), "%s/src.serial", dir);
	snprintf(g->dst_serial, sizeof(g->dst_serial), "%s/dst.serial", dir);
	snprintf(g->src_img, sizeof(g->src_img), "%s/src.img", dir);
	snprintf(g->dst_img, sizeof(g->dst_img), "%s/dst.img", dir);
}

void vm_dir(char *dir, size_t len, const char *tag)
{
	snprintf(dir, len, "/dev/shm/rdmig-%s.XXXXXX", tag);
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

/* QEMU dies with the test process, whatever ends it.  @root: chroot
 * there first (argv[0] is then a path inside it). */
static void spawn_qemu(struct tu_proc *p, const char *log, const char *root, const char *dir,
		       char *const argv[])
{
	pid_t parent = getpid(), pid;

	memset(p, 0, sizeof(*p));
	snprintf(p->out_path, sizeof(p->out_path), "%s", log);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		tu_die_with_parent(parent);
		tu_child_stdio(log, NULL);
		if (root && enter_root(root, dir) < 0)
			_exit(126);
		execv(argv[0], argv);
		dprintf(2, "vm_start: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	p->pid = pid;
}

int vm_exited(struct vm *v)
{
	if (!v->p.reaped && waitpid(v->p.pid, &v->p.status, WNOHANG) == v->p.pid)
		v->p.reaped = 1;
	return v->p.reaped;
}

/* The last line of @path, for a failure message. */
static void last_line(const char *path, char *buf, size_t len)
{
	char *text = tu_slurp(path, NULL), *end, *start;

	snprintf(buf, len, "(empty log)");
	if (!text)
		return;
	end = text + strlen(text);
	while (end > text && end[-1] == '\n')
		*--end = '\0';
	start = strrchr(text, '\n');
	start = start ? start + 1 : text;
	if (*start)
		snprintf(buf, len, "%s", start);
	free(text);
}

/* query-version: which QEMU answers, whatever the test asked for. */
static void check_version(struct vm *v)
{
	struct json_object *ret = NULL, *qemu, *x;
	struct cli_err err = { "" };
	int r = qmp_call(v->q, "query-version", NULL, &ret, &err);
	int major = -1, minor = -1, micro = -1;

	ck_assert_msg(r == 0, "%s: query-version: %s", v->name, err.msg);
	if (json_object_object_get_ex(ret, "qemu", &qemu)) {
		if (json_object_object_get_ex(qemu, "major", &x))
			major = json_object_get_int(x);
		if (json_object_object_get_ex(qemu, "minor", &x))
			minor = json_object_get_int(x);
		if (json_object_object_get_ex(qemu, "micro", &x))
			micro = json_object_get_int(x);
	}
	json_object_put(ret);
	snprintf(v->version, sizeof(v->version), "%d.%d.%d", major, minor, micro);
	if (v->qemu)
		ck_assert_msg(major == v->qemu->major && minor == v->qemu->minor,
			      "%s: started as %s, but query-version says QEMU %s", v->name,
			      v->qemu->name, v->version);
}

void vm_start_qemu(struct vm *v, const struct vm_qemu *qemu, const char *dir,
		   const char *name, const char *const *args)
{
	struct cli_err err = { "" };
	char bin[512], qmpopt[300], chr[320], why[256];
	const char *argv[48] = { bin, "-accel", "tcg", "-nographic", "-nodefaults", "-qmp", qmpopt,
				 "-chardev", chr, "-mon", "chardev=cmd,mode=control" };
	const char *root = qemu && qemu->chrooted ? qemu_root() : NULL;
	size_t n = 11;
	uint64_t end = tu_now_ms() + 30000;
	int r;

	memset(v, 0, sizeof(*v));
	v->qemu = qemu;
	if (root) {
		check_root(qemu, root);
		snprintf(bin, sizeof(bin), "%s", ROOT_QEMU);
	} else {
		qemu_bin(bin, sizeof(bin));
	}
	snprintf(v->name, sizeof(v->name), "%s", name);
	snprintf(v->sock, sizeof(v->sock), "%s/%s.sock", dir, name);
	snprintf(v->log, sizeof(v->log), "%s/%s.log", dir, name);
	snprintf(v->cmd_sock, sizeof(v->cmd_sock), "%s/%s-cmd.sock", dir, name);
	snprintf(qmpopt, sizeof(qmpopt), "unix:%s,server=on,wait=off", v->sock);
	snprintf(chr, sizeof(chr), "socket,id=cmd,path=%s,server=on,wait=off", v->cmd_sock);
	while (*args && n < 47)
		argv[n++] = *args++;
	argv[n] = NULL;
	spawn_qemu(&v->p, v->log, root, dir, (char *const *)argv);
	do {
		r = qmp_open(&v->q, v->sock, 5000, &err);
		if (r == -ENOENT || r == -ECONNREFUSED)
			usleep(20000);
	} while ((r == -ENOENT || r == -ECONNREFUSED) && !vm_exited(v) && tu_now_ms() < end);
	if (r) {
		tu_dump(name, v->log);
		if (vm_exited(v)) {
			last_line(v->log, why, sizeof(why));
			ck_abort_msg("%s: %s exited (status %d) before its QMP socket was there: %s",
				     name, qemu ? qemu->name : "QEMU", tu_exit_code(&v->p), why);
		}
	}
	ck_assert_msg(r == 0, "%s: qmp_open: %d %s", name, r, err.msg);
	check_version(v);
}

const char *vm_inner_path(const struct vm_qemu *qemu, const char *dir, const char *name,
			  char *buf, size_t len)
{
	if (qemu && qemu->chrooted)
		snprintf(buf, len, ROOT_INNER "/%s", name);
	else
		snprintf(buf, len, "%s/%s", dir, name);
	return buf;
}

void vm_start(struct vm *v, const char *dir, const char *name, const char *const *args)
{
	vm_start_qemu(v, NULL, dir, name, args);
}

void vm_stop(struct vm *v)
{
	qmp_close(v->q);
	v->q = NULL;
	if (!v->p.pid)
		return;
	tu_kill(&v->p, SIGCONT);
	tu_kill(&v->p, SIGKILL);
	tu_wait(&v->p, 5000);
}

void vm_expect_status(struct vm *v, const char *want)
{
	struct cli_err err = { "" };
	char st[32] = "";
	int r = qmp_status(v->q, st, sizeof(st), &err);

	ck_assert_msg(r == 0, "%s: qmp_status: %s", v->name, err.msg);
	ck_assert_msg(!strcmp(st, want), "%s: status %s, expected %s", v->name, st, want);
}

struct json_object *vm_args1(const char *key, struct json_object *val)
{
	struct json_object *a = json_object_new_object();

	json_object_object_add(a, key, val);
	return a;
}

/* ---- the test guest ------------------------------------------------------ */

static int run_guestcheck(char *const argv[], char *line, size_t len)
{
	char out[512], dir[256];
	struct tu_proc p;
	char *text;
	int rc;

	tu_tmpdir(dir, sizeof(dir));
	snprintf(out, sizeof(out), "%s/guestcheck.out", dir);
	ck_assert_int_eq(tu_spawn(&p, out, argv), 0);
	ck_assert_int_eq(tu_wait(&p, 60000), 0);
	rc = tu_exit_code(&p);
	text = tu_slurp(out, NULL);
	snprintf(line, len, "%s", text ? text : "");
	line[strcspn(line, "\n")] = '\0';
	free(text);
	tu_rmdir(dir);
	return rc;
}

void guest_image_range(const char *img, unsigned delay, unsigned end_mib)
{
	char bin[512], src[512], d[16], e[16], line[512];
	char *argv[] = { bin, "image", src, (char *)img, "--delay", d,
			 end_mib ? "--end" : NULL, e, NULL };

	tu_build_path("bin/guestcheck", bin, sizeof(bin));
	tu_build_path("guest/bootsect.img", src, sizeof(src));
	snprintf(d, sizeof(d), "%u", delay);
	snprintf(e, sizeof(e), "%uM", end_mib);
	ck_assert_msg(run_guestcheck(argv, line, sizeof(line)) == 0, "guestcheck image: %s", line);
}

void guest_image(const char *img, unsigned delay)
{
	guest_image_range(img, delay, 0);
}

int guest_markers(const char *serial, int migrated)
{
	char *text = tu_slurp(serial, NULL), *p;
	int n = 0;

	p = !text ? NULL : migrated ? text : strstr(text, "rdmig-guest");
	if (!p) {
		free(text);
		return migrated ? 0 : -1;
	}
	for (; *p; p++)
		n += *p == 'B';
	free(text);
	return n;
}

void guest_wait_markers(const char *serial, int migrated, int n, int timeout_ms,
			const char *what)
{
	uint64_t end = tu_now_ms() + (uint64_t)timeout_ms;
	int got;

	while ((got = guest_markers(serial, migrated)) < n && tu_now_ms() < end)
		usleep(50000);
	ck_assert_msg(got >= n, "%s: %d markers within %d ms, %d expected", what, got,
		      timeout_ms, n);
}

int guest_check_range(const char *ram, unsigned end_mib, char *line, size_t len)
{
	char bin[512], e[16];
	char *argv[] = { bin, "ram", (char *)ram, end_mib ? "--end" : NULL, e, NULL };

	tu_build_path("bin/guestcheck", bin, sizeof(bin));
	snprintf(e, sizeof(e), "%uM", end_mib);
	return run_guestcheck(argv, line, len);
}

int guest_check(const char *ram, char *line, size_t len)
{
	return guest_check_range(ram, 0, line, len);
}

const char vm_qmp_impostor_py[] =
	"import json, socket, sys\n"
	"if len(sys.argv) > 1:\n"
	"    s = socket.socket(socket.AF_UNIX)\n"
	"    s.bind(sys.argv[1]); s.listen(4)\n"
	"    print('listening', flush=True)\n"
	"else:\n"
	"    s = socket.socket(fileno=3)\n"
	"    print('serving', flush=True)\n"
	"while True:\n"
	"    c, _ = s.accept()\n"
	"    print('connected', flush=True)\n"
	"    c.sendall(b'{\"QMP\": {\"version\": {\"qemu\": {\"major\": 7, \"minor\": 2, "
	"\"micro\": 0}}, \"capabilities\": []}}\\n')\n"
	"    c.settimeout(60)\n"
	"    try:\n"
	"        while True:\n"
	"            b = c.recv(65536)\n"
	"            if not b: break\n"
	"            print('got %d bytes: %r' % (len(b), b[:200]), flush=True)\n"
	"            for line in b.split(b'\\n'):\n"
	"                try: req = json.loads(line)\n"
	"                except ValueError: continue\n"
	"                c.sendall(json.dumps({'return': {}, 'id': req.get('id')}).encode() + b'\\n')\n"
	"    except OSError: pass\n"
	"    c.close()\n";
