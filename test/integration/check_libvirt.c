/* Guests managed by libvirt, migrated by tools/rdmig-libvirt over
 * Soft-RoCE: two libvirt daemons on this machine are two hosts
 * (support/libvirt-host: each in a mount namespace of its own, with its own
 * state, config, QMP socket directory and /dev/shm), started once for the
 * suite; the same domain (name, UUID, XML) runs on either, its disk image
 * on "shared storage" (a directory both see), its serial log on its host.
 * The guest is the boot-sector test guest of test/guest under the host's
 * QEMU 7.2 (TCG), with libvirt 9.0 (Debian 12).
 *
 * What decides is what libvirt on each host says afterwards (virsh, as an
 * operator would ask it), not what the tool reports: after a migration the
 * destination domain runs, the source domain is shut off and cannot be
 * resumed, the guest keeps writing at the destination and its RAM there is
 * consistent, the destination holds the disk lease and its QEMU's user
 * still owns the disk image, and libvirt notes the custom-argv taint; after
 * migrate-recv is killed mid-stream (also once QEMU stopped the guest) or
 * the operator cancels, the source domain runs with its lease and the
 * destination has no such domain; a domain whose RAM is a memfd or private
 * is refused before anything starts, naming the fix.
 *
 * The libvirt-faults case is what the tool must survive: a QMP socket that
 * is not the domain's QEMU's (a clone's, another process's), a migrate-recv
 * no signal reaches (as through ssh), the reader of --json gone, the tool
 * itself killed, the destination's libvirtd no longer answering.
 *
 * RDMIG_LIBVIRT_TOOL names another tool to test (a broken one, to see the
 * tests fail). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "qemu_vm.h"
#include "runs.h"
#include "suite.h"
#include "suites.h"
#include "testutil.h"

/* As the qemu suite's guest: about a pass per second or two. */
#define GUEST_DELAY 3000

struct lvhost {
	const char *name;
	int pid;        /* its libvirtd: nsenter -t PID -m runs a command there */
	int lockd;      /* its virtlockd, which holds its domains' disk leases */
	char uri[320];
};

/* The two hosts, set up before the suite's tests fork. */
static struct {
	char dir[128];  /* what both hosts see: their sockets, shared storage */
	char repo[400];
	struct lvhost a, b;
} lv = { .a = { .name = "A" }, .b = { .name = "B" } };

/* ---- running things -------------------------------------------------------------- */

static const char *bin(const char *name, char *buf, size_t len)
{
	static const char *const dirs[] = { "/usr/bin", "/usr/sbin", "/bin", "/sbin" };
	size_t i;

	for (i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(buf, len, "%s/%s", dirs[i], name);
		if (!access(buf, X_OK))
			return buf;
	}
	ck_abort_msg("%s not found: run tools/bootstrap", name);
	return NULL;
}

/* Runs @argv (NULL-terminated) to the end within @timeout_ms; its exit code,
 * and its output (stdout and stderr) in @out. */
static int run(char *const argv[], char *out, size_t len, int timeout_ms)
{
	char dir[256], path[300], *text;
	struct tu_proc p;
	int rc;

	tu_tmpdir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/out", dir);
	ck_assert_int_eq(tu_spawn(&p, path, argv), 0);
	rc = tu_wait(&p, timeout_ms);
	ck_assert_msg(rc == 0, "%s did not end within %d ms", argv[0], timeout_ms);
	rc = tu_exit_code(&p);
	text = tu_slurp(path, NULL);
	snprintf(out, len, "%s", text ? text : "");
	free(text);
	tu_rmdir(dir);
	return rc;
}

/* virsh -q -c URI ARGS... (NULL-terminated). */
static int virsh(const struct lvhost *h, char *out, size_t len, ...)
{
	char vbin[64], *argv[24];
	va_list ap;
	int n = 0;

	argv[n++] = (char *)bin("virsh", vbin, sizeof(vbin));
	argv[n++] = "-q";
	argv[n++] = "-c";
	argv[n++] = (char *)h->uri;
	va_start(ap, len);
	while (n < 23 && (argv[n] = va_arg(ap, char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	return run(argv, out, len, 60000);
}

/* virsh domstate --reason @dom on @h, its first line in @st; "gone" when
 * that libvirt has no such domain. */
static void domstate(const struct lvhost *h, const char *dom, char *st, size_t len)
{
	char out[1024];

	if (virsh(h, out, sizeof(out), "domstate", "--reason", dom, NULL)) {
		ck_assert_msg(strstr(out, "failed to get domain"), "host %s: domstate %s: %s",
			      h->name, dom, out);
		snprintf(st, len, "gone");
		return;
	}
	out[strcspn(out, "\n")] = '\0';
	if (strlen(out) >= len)
		out[len - 1] = '\0';
	memcpy(st, out, strlen(out) + 1);
}

/* A file of @h's own (its serial log, its guest RAM), seen from here. */
static void on_host(const struct lvhost *h, const char *path, char *buf, size_t len)
{
	snprintf(buf, len, "/proc/%d/root%s", h->pid, path);
}

/* Runs the shell command line @line on host @h (its mount namespace);
 * fails the test if it fails. */
static void host_sh(const struct lvhost *h, const char *line)
{
	char nsenter[64], pid[16], out[2048];
	char *argv[] = { (char *)bin("nsenter", nsenter, sizeof(nsenter)), "-t", pid, "-m", "--",
			 "/bin/sh", "-c", (char *)line, NULL };
	int rc;

	snprintf(pid, sizeof(pid), "%d", h->pid);
	rc = run(argv, out, sizeof(out), 60000);
	ck_assert_msg(rc == 0, "host %s: `%s`: exit %d: %s", h->name, line, rc, out);
}

/* ---- the hosts ------------------------------------------------------------------- */

static void host_script(char *buf, size_t len)
{
	snprintf(buf, len, "%s/test/integration/support/libvirt-host", lv.repo);
}

/* Starts @h's libvirtd and virtlockd: 0, or -1 with the reason in @why
 * (libvirt-host's own words: libvirt not installed, the daemon's log). */
static int host_start(struct lvhost *h, char *why, size_t len)
{
	char script[600], out[4096];
	char *argv[] = { script, "start", lv.dir, (char *)h->name, NULL };
	char *text;
	int rc;

	host_script(script, sizeof(script));
	rc = run(argv, out, sizeof(out), 120000);
	if (rc || sscanf(out, "%d", &h->pid) != 1) {
		/* It may have got as far as a daemon: host_stop stops whatever
		 * it left (libvirt-host finds it by DIR/NAME/pid). */
		h->pid = -1;
		snprintf(why, len, "libvirt-host start %s (exit %d): %s", h->name, rc, out);
		return -1;
	}
	snprintf(h->uri, sizeof(h->uri), "qemu:///system?socket=%s/%s/libvirt-sock", lv.dir,
		 h->name);
	on_host(h, "/run/libvirt/virtlockd.pid", out, sizeof(out));
	text = tu_slurp(out, NULL);
	rc = text && sscanf(text, "%d", &h->lockd) == 1 ? 0 : -1;
	free(text);
	if (rc)
		snprintf(why, len, "host %s: libvirtd runs but no virtlockd (%s)", h->name, out);
	return rc;
}

static void host_stop(struct lvhost *h)
{
	char script[600], out[4096];
	char *argv[] = { script, "stop", lv.dir, (char *)h->name, NULL };

	if (!h->pid)
		return;
	host_script(script, sizeof(script));
	run(argv, out, sizeof(out), 120000);
	h->pid = 0;
}

static void hosts_down(void)
{
	host_stop(&lv.a);
	host_stop(&lv.b);
	tu_rmdir(lv.dir);
}

static void hosts_up(void)
{
	char build[512], real[PATH_MAX], why[4200], *slash;

	/* The checkout holds the build directory, and the tool and script. */
	ck_assert_ptr_nonnull(realpath(tu_build_path(".", build, sizeof(build)), real));
	ck_assert_uint_lt(strlen(real), sizeof(lv.repo));
	memcpy(lv.repo, real, strlen(real) + 1);
	slash = strrchr(lv.repo, '/');
	ck_assert_ptr_nonnull(slash);
	*slash = '\0';
	tu_tmpdir(lv.dir, sizeof(lv.dir));
	/* QEMU runs as libvirt-qemu and opens the disk images here. */
	ck_assert_int_eq(chmod(lv.dir, 0755), 0);
	/* Libvirt that cannot start fails the suite, saying why: never a
	 * skipped test.  A failed unchecked fixture gets no teardown, so
	 * whatever did start is stopped here. */
	if (host_start(&lv.a, why, sizeof(why)) || host_start(&lv.b, why, sizeof(why))) {
		hosts_down();
		ck_abort_msg("%s", why);
	}
}

/* ---- a domain -------------------------------------------------------------------- */

enum ram_kind { RAM_FILE, RAM_MEMFD, RAM_PRIVATE };

struct dom {
	const char *name;
	char uuid[40];
	char dir[300];          /* its shared storage: disk image, key, XML */
	char key[340], serial[200];
	char tool[600], sendbin[512], recvbin[512];
	/* How dom_migrate runs the tool and migrate-recv: words before the
	 * tool's (a shell pipeline, say), and the command --dest-exec ends
	 * with after nsenter ("sh -c" when NULL). */
	const char *const *wrap;
	const char *dexec_tail;
	struct tu_run mig;
};

/* Writes @d's XML to @xml, as docs/libvirt.md asks for a domain rdmig moves
 * (its UUID set before the first define), with @kind's RAM instead, and
 * the QMP socket @qmp (NULL: /run/rdmig/UUID.qmp, docs/libvirt.md's). */
static void dom_xml(const struct dom *d, enum ram_kind kind, const char *qmp, const char *xml)
{
	char path[200];
	static const char *const ram[] = {
		[RAM_FILE] = "<memoryBacking><source type='file'/><access mode='shared'/>"
			     "</memoryBacking>",
		[RAM_MEMFD] = "<memoryBacking><source type='memfd'/><access mode='shared'/>"
			      "</memoryBacking>",
		[RAM_PRIVATE] = "",
	};
	FILE *f = fopen(xml, "w");

	snprintf(path, sizeof(path), "/run/rdmig/%s.qmp", d->uuid);
	ck_assert_ptr_nonnull(f);
	fprintf(f,
		"<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n"
		"  <name>%s</name>\n"
		"  <uuid>%s</uuid>\n"
		"  <memory unit='MiB'>128</memory>\n"
		"  <vcpu>1</vcpu>\n"
		"  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>\n"
		"  %s\n"
		"  <devices>\n"
		"    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n"
		"    <disk type='file' device='disk'><driver name='qemu' type='raw'/>"
		"<source file='%s/guest.img'/><target dev='hda' bus='ide'/></disk>\n"
		"    <serial type='file'><source path='%s'/><target port='0'/></serial>\n"
		"    <memballoon model='none'/>\n"
		"  </devices>\n"
		"  <qemu:commandline>\n"
		"    <qemu:arg value='-qmp'/>\n"
		"    <qemu:arg value='unix:%s,server=on,wait=off'/>\n"
		"  </qemu:commandline>\n"
		"</domain>\n", d->name, d->uuid, ram[kind], d->dir, d->serial, qmp ? qmp : path);
	ck_assert_int_eq(fclose(f), 0);
}

/* virsh define of @d's XML written with @kind and the QMP socket @qmp
 * (NULL: docs/libvirt.md's, with its UUID), on host A. */
static void dom_define_as(struct dom *d, enum ram_kind kind, const char *qmp)
{
	char xml[360], out[4096];

	snprintf(xml, sizeof(xml), "%s/domain.xml", d->dir);
	dom_xml(d, kind, qmp, xml);
	ck_assert_msg(virsh(&lv.a, out, sizeof(out), "define", xml, NULL) == 0, "define: %s", out);
}

/* @d's files (disk image, key) and its own UUID, nothing defined yet. */
static void dom_init(struct dom *d, const char *name)
{
	char img[360], *text;
	const char *tool = getenv("RDMIG_LIBVIRT_TOOL");
	int fd;

	memset(d, 0, sizeof(*d));
	d->name = name;
	/* As docs/libvirt.md's recipe: the UUID chosen before the first define. */
	text = tu_slurp("/proc/sys/kernel/random/uuid", NULL);
	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(sscanf(text, "%36s", d->uuid), 1);
	free(text);
	snprintf(d->dir, sizeof(d->dir), "%s/%s", lv.dir, name);
	ck_assert_int_eq(mkdir(d->dir, 0755), 0);
	snprintf(img, sizeof(img), "%s/guest.img", d->dir);
	guest_image(img, GUEST_DELAY);
	snprintf(d->key, sizeof(d->key), "%s/key", d->dir);
	fd = open(d->key, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "the migration's shared secret", 29), 29);
	close(fd);
	snprintf(d->serial, sizeof(d->serial), "/var/log/libvirt/qemu/%s.serial", name);
	if (tool && *tool)
		snprintf(d->tool, sizeof(d->tool), "%s", tool);
	else
		snprintf(d->tool, sizeof(d->tool), "%s/tools/rdmig-libvirt", lv.repo);
	tu_build_path("bin/migrate-send", d->sendbin, sizeof(d->sendbin));
	tu_build_path("bin/migrate-recv", d->recvbin, sizeof(d->recvbin));
}

static void dom_run(const struct dom *d)
{
	char out[4096];

	ck_assert_msg(virsh(&lv.a, out, sizeof(out), "start", d->name, NULL) == 0, "start: %s",
		      out);
}

/* Defines @d on host A with @kind's RAM and the QMP socket @qmp (NULL:
 * docs/libvirt.md's), and starts it. */
static void dom_start_qmp(struct dom *d, const char *name, enum ram_kind kind,
			  const char *qmp)
{
	dom_init(d, name);
	dom_define_as(d, kind, qmp);
	dom_run(d);
}

static void dom_start(struct dom *d, const char *name, enum ram_kind kind)
{
	dom_start_qmp(d, name, kind, NULL);
}

static void dom_serial(const struct dom *d, const struct lvhost *h, char *buf, size_t len)
{
	on_host(h, d->serial, buf, len);
}

/* tools/rdmig-libvirt migrate, run on host @from (nsenter), moving @d to
 * host @to whose commands it runs through nsenter as it would through ssh;
 * @extra: more of its options (NULL-terminated, may be NULL). */
static void dom_migrate_on(struct dom *d, const struct lvhost *from, const struct lvhost *to,
			   const char *const *extra)
{
	char nsenter[64], pid[16], dexec[128];
	struct tu_argv a = { .n = 0 };

	snprintf(pid, sizeof(pid), "%d", from->pid);
	snprintf(dexec, sizeof(dexec), "%s -t %d -m -- %s", bin("nsenter", nsenter,
		 sizeof(nsenter)), to->pid, d->dexec_tail ? d->dexec_tail : "sh -c");
	tu_argv_add(&a, d->wrap);
	tu_argv_add(&a, (const char *[]){ nsenter, "-t", pid, "-m", "--", d->tool, "migrate",
					  d->name, "--connect", from->uri, "--dest-connect",
					  to->uri, "--dest-exec", dexec, "--listen", tu_addr(),
					  "--auth-key", d->key, "--timeout", "10", "--json",
					  "--migrate-send", d->sendbin, "--migrate-recv",
					  d->recvbin, NULL });
	tu_argv_add(&a, extra);
	tu_run_spawn(&d->mig, d->dir, "migrate", a.v);
}

static void dom_migrate(struct dom *d, const char *const *extra)
{
	dom_migrate_on(d, &lv.a, &lv.b, extra);
}

static void dom_dump(struct dom *d)
{
	char log[200], path[300];

	tu_run_dump(&d->mig, "rdmig-libvirt");
	snprintf(log, sizeof(log), "/var/log/libvirt/qemu/%s.log", d->name);
	on_host(&lv.a, log, path, sizeof(path));
	tu_dump("host A: QEMU's log", path);
	on_host(&lv.b, log, path, sizeof(path));
	tu_dump("host B: QEMU's log", path);
}

/* The domain goes from both hosts, whatever state each left it in. */
static void dom_free(struct dom *d)
{
	const struct lvhost *h[] = { &lv.a, &lv.b };
	char out[1024];
	size_t i;

	if (d->mig.p.pid > 0 && !d->mig.p.reaped) {
		tu_kill(&d->mig.p, SIGKILL);
		tu_wait(&d->mig.p, 5000);
	}
	for (i = 0; i < 2; i++) {
		virsh(h[i], out, sizeof(out), "destroy", d->name, NULL);
		virsh(h[i], out, sizeof(out), "undefine", d->name, NULL);
	}
	tu_rmdir(d->dir);
}

/* ---- libvirt's lifecycle events, as an operator's virsh sees them ----------------- */

/* virsh event --timestamp on @h: every domain's lifecycle events as that
 * libvirt sends them, each line stamped when virsh got it, in @r's stdout
 * (no --domain: the domain need not exist there yet). */
static void events_watch(struct tu_run *r, const struct lvhost *h, const char *dir,
			 const char *tag)
{
	char vbin[64], sbin[64];
	char *argv[] = { (char *)bin("stdbuf", sbin, sizeof(sbin)), "-oL",
			 (char *)bin("virsh", vbin, sizeof(vbin)), "-q", "-c", (char *)h->uri,
			 "event", "--event", "lifecycle", "--loop", "--timestamp", NULL };

	tu_run_spawn(r, dir, tag, argv);
}

/* Stops a watcher of tu_run_spawn's (its whole process group). */
static void events_stop(struct tu_run *r)
{
	if (r->p.pid > 0 && !r->p.reaped)
		kill(-r->p.pid, SIGKILL);
	tu_wait(&r->p, 5000);
}

/* When (ms since the epoch) virsh got the last event @what ("Suspended",
 * "Resumed") of domain @name in @r's output; 0 when none came.  Its lines:
 * "2026-11-27 20:08:22.123+0000: event 'lifecycle' for domain 'vm1':
 * Resumed Unpaused". */
static uint64_t event_ms(const struct tu_run *r, const char *name, const char *what)
{
	char *text = tu_slurp(r->out, NULL), *line, *save = NULL, dom[160];
	uint64_t at = 0;
	struct tm tm;
	int ms;

	snprintf(dom, sizeof(dom), "for domain '%s': %s", name, what);
	for (line = text ? strtok_r(text, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save)) {
		memset(&tm, 0, sizeof(tm));
		if (!strstr(line, dom) || sscanf(line, "%d-%d-%d %d:%d:%d.%d", &tm.tm_year,
						 &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
						 &tm.tm_sec, &ms) != 7)
			continue;
		tm.tm_year -= 1900;
		tm.tm_mon -= 1;
		at = (uint64_t)timegm(&tm) * 1000 + (uint64_t)ms;
	}
	free(text);
	return at;
}

/* A string member of a JSON event, "" when missing. */
static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v;

	return o && json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

/* The pid of a process called @name (0: none), a zombie (@zombie) or a
 * live one (!@zombie). */
static pid_t find_proc_in(const char *name, bool zombie)
{
	char path[300], comm[64];
	struct dirent *de;
	pid_t pid = 0;
	DIR *dir = opendir("/proc");
	FILE *f;

	ck_assert_ptr_nonnull(dir);
	while ((de = readdir(dir))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, name, strlen(name)) &&
		    !strcmp(comm + strlen(name), "\n") &&
		    (tu_proc_state(atoi(de->d_name), NULL) == 'Z') == zombie)
			pid = atoi(de->d_name);
		fclose(f);
	}
	closedir(dir);
	return pid;
}

/* The pid of a process called @name running (0: none).  A zombie does not
 * run: it has let go of its mappings and sockets already. */
static pid_t find_proc(const char *name)
{
	return find_proc_in(name, false);
}

/* The pid of the one migrate-recv running. */
static pid_t find_recv(void)
{
	return find_proc("migrate-recv");
}

/* Waits up to @ms for no process called @name: whether there is none. */
static int proc_gone(const char *name, int ms)
{
	uint64_t t0 = tu_now_ms();

	while (find_proc(name)) {
		if (tu_now_ms() - t0 > (uint64_t)ms)
			return 0;
		usleep(50 * 1000);
	}
	return 1;
}

/* What a process left behind is doing, for the failure message: its
 * state, parent, kernel wait channel and command line, in @out. */
static void proc_describe(pid_t pid, char *out, size_t len)
{
	char path[64], wchan[64], cmd[256] = "";
	size_t n = 0, i;
	pid_t ppid;
	FILE *f;
	char st;

	st = tu_proc_state(pid, &ppid);
	tu_proc_wchan(pid, wchan, sizeof(wchan));
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if ((f = fopen(path, "r"))) {
		n = fread(cmd, 1, sizeof(cmd) - 1, f);
		fclose(f);
	}
	for (i = 0; i + 1 < n; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	cmd[n] = '\0';
	snprintf(out, len, "pid %d, state %c, parent %d, waiting in %s: %s", (int)pid, st,
		 (int)ppid, wchan[0] ? wchan : "-", cmd);
}

/* Asserts that no migrate-recv is left @ms after the tool exited (a
 * process killed a moment ago may still be on its way out on a loaded
 * host).  One still running is described, dumped with @d and killed (all
 * of them, waited for, so that the next test does not find one); a zombie
 * still there means the wrapper it ran under (--dest-exec's local end)
 * outlived the tool without reaping it, and fails the test too. */
static void expect_recv_gone(struct dom *d, int ms, int rc)
{
	char what[512], parent[512];
	pid_t ppid, left, z;
	int n = 0;

	if (proc_gone("migrate-recv", ms)) {
		z = find_proc_in("migrate-recv", true);
		if (!z)
			return;
		tu_proc_state(z, &ppid);
		proc_describe(ppid, parent, sizeof(parent));
		dom_dump(d);
		ck_abort_msg("migrate-recv (pid %d) was left a zombie %d ms after the tool exited "
			     "%d: its parent lives on without reaping it (%s)", (int)z, ms, rc,
			     parent);
	}
	left = find_recv();
	if (!left)
		return; /* gone just as the wait gave up */
	proc_describe(left, what, sizeof(what));
	for (pid_t p = left; p && n < 16; p = find_recv(), n++)
		kill(p, SIGKILL);
	proc_gone("migrate-recv", 5000);
	dom_dump(d);
	ck_abort_msg("migrate-recv still runs %d ms after the tool exited %d (%s)", ms, rc,
		     what);
}

/* Which virtlockd holds the lease on @d's disk (libvirt's automatic disk
 * lease: a POSIX lock on the file named by the SHA-256 of the disk's path
 * in the shared lockspace): "A", "B" or "nobody". */
static const char *lease_holder(const struct dom *d)
{
	unsigned char sum[crypto_hash_sha256_BYTES];
	char hex[2 * sizeof(sum) + 1], path[400], line[256], img[360];
	unsigned maj, min;
	unsigned long ino;
	struct stat st;
	int pid, holder = 0;
	size_t i;
	FILE *f;

	snprintf(img, sizeof(img), "%s/guest.img", d->dir);
	crypto_hash_sha256(sum, (const unsigned char *)img, strlen(img));
	for (i = 0; i < sizeof(sum); i++)
		snprintf(hex + 2 * i, 3, "%02x", sum[i]);
	snprintf(path, sizeof(path), "%s/lockspace/%s", lv.dir, hex);
	/* virtlockd removes the file when it releases the last hold. */
	if (stat(path, &st) && errno == ENOENT)
		return "nobody";
	ck_assert_msg(stat(path, &st) == 0, "lease file %s for %s: %s", path, img,
		      strerror(errno));
	f = fopen("/proc/locks", "r");
	ck_assert_ptr_nonnull(f);
	/* "1: POSIX  ADVISORY  WRITE 1234 00:2e:5678 0 EOF" */
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s POSIX %*s %*s %d %x:%x:%lu", &pid, &maj, &min, &ino) == 4 &&
		    ino == st.st_ino && maj == major(st.st_dev) && min == minor(st.st_dev))
			holder = pid;
	fclose(f);
	return holder == 0 ? "nobody" : holder == lv.a.lockd ? "A" : holder == lv.b.lockd ? "B"
	       : "someone else";
}

static void expect_lease(const struct dom *d, const char *want)
{
	const char *got = lease_holder(d);

	ck_assert_msg(!strcmp(got, want), "%s: the disk lease is held by %s, expected host %s",
		      d->name, got, want);
}

/* The owner of @d's disk image (libvirt's DAC label: QEMU's user while a
 * domain runs it) in @st. */
static void image_owner(const struct dom *d, struct stat *st)
{
	char img[360];

	snprintf(img, sizeof(img), "%s/guest.img", d->dir);
	ck_assert_int_eq(stat(img, st), 0);
}

/* The other host's destroy restores the image's DAC label (to root, as on
 * NFS where libvirt cannot remember owners): the QEMU still running must
 * keep its owner @st0, or it cannot reopen its disk. */
static void expect_owner(const struct dom *d, const struct stat *st0, const char *host)
{
	struct stat st;

	image_owner(d, &st);
	ck_assert_msg(st.st_uid == st0->st_uid && st.st_gid == st0->st_gid,
		      "%s: the disk image is %u:%u, host %s's QEMU runs as %u:%u", d->name,
		      (unsigned)st.st_uid, (unsigned)st.st_gid, host, (unsigned)st0->st_uid,
		      (unsigned)st0->st_gid);
}

/* ---- tests ----------------------------------------------------------------------- */

/* Waits for @d's guest to make two passes on host A. */
/* The migration's "setup" event came: it is under way. */
static void wait_started(struct dom *d)
{
	struct json_object *ev = tu_wait_event(&d->mig, "setup", 120000);

	if (!ev)
		dom_dump(d);
	ck_assert_msg(ev != NULL, "the migration never started");
	json_object_put(ev);
}

/* What a failed migration must leave: host A's libvirt says running and
 * holds the lease, the disk image keeps its owner, host B has no such
 * domain, and the guest goes on making passes on A after @what.  The
 * states are left in @st_a and @st_b (128 bytes each) for the report. */
static void expect_rolled_back(struct dom *d, const struct stat *st0, const char *ser_a,
			       const char *what, char *st_a, char *st_b)
{
	char label[96];
	int m0;

	domstate(&lv.a, d->name, st_a, 128);
	domstate(&lv.b, d->name, st_b, 128);
	ck_assert_msg(!strncmp(st_a, "running", 7), "host A: %s, expected running", st_a);
	ck_assert_msg(!strcmp(st_b, "gone"), "host B: %s, expected no such domain", st_b);
	expect_lease(d, "A");
	expect_owner(d, st0, "A");
	m0 = guest_markers(ser_a, 0);
	snprintf(label, sizeof(label), "the guest on host A after %s", what);
	guest_wait_markers(ser_a, 0, m0 + 1, 60000, label);
}

static void guest_wait_markers_on_a(const struct dom *d)
{
	char ser[300];

	dom_serial(d, &lv.a, ser, sizeof(ser));
	guest_wait_markers(ser, 0, 2, 120000, "the guest on host A");
}

/* Writes @path: a stand-in for @real that writes its arguments, one a
 * line, to @log first. */
static void arg_logger(const char *path, const char *real, const char *log)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fprintf(f, "#!/bin/sh\nprintf '%%s\\n' \"$@\" >'%s'\nexec '%s' \"$@\"\n", log, real);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(path, 0755), 0);
}

/* Issue 32: the guest's downtime is what --max-downtime limits and what is
 * reported.  migrate-send was told libvirt's resume at the destination as
 * the tool measured it before (--resume-cost, in @args: the report's
 * "resume-estimate"); the report's "guest-downtime" holds migrate-send's
 * downtime and covers what libvirt's own events show on the two hosts
 * (virsh event: the source's Suspended to the destination's Resumed, @ev_a
 * and @ev_b), and the final line on stderr gives it. */
/* The tool's exit status keeps --max-downtime @limit: 0 with the guest
 * down no longer, or 12 with limit-exceeded saying by how much (a loaded
 * bed may not keep it; it must not hide it). */
static void expect_limit_kept_or_said(int rc, struct json_object *done, uint64_t limit)
{
	struct json_object *lim;
	uint64_t guest = tu_jnum(done, "guest-downtime");

	if (guest <= limit) {
		ck_assert_msg(rc == 0, "guest down %" PRIu64 " ms of %" PRIu64 ", exit %d", guest,
			      limit, rc);
		return;
	}
	ck_assert_msg(rc == 12, "guest down %" PRIu64 " ms, over --max-downtime %" PRIu64
		      ", exit %d", guest, limit, rc);
	ck_assert_msg(json_object_object_get_ex(done, "limit-exceeded", &lim),
		      "exit 12 without limit-exceeded");
	ck_assert_uint_eq(tu_jnum(lim, "exceeded-by"), guest - limit);
	printf("libvirt: over the limit, said: %s\n", json_object_to_json_string(lim));
}

static void expect_guest_downtime(struct dom *d, struct json_object *done,
				  const struct tu_run *ev_a, const struct tu_run *ev_b,
				  const char *args)
{
	char *text = tu_slurp(args, NULL), *err = tu_slurp(d->mig.err, NULL), *at;
	uint64_t told, est, guest, down, sus, res;

	at = text ? strstr(text, "--resume-cost\n") : NULL;
	ck_assert_msg(at && sscanf(at + 14, "%" SCNu64, &told) == 1, "migrate-send was not told "
		      "libvirt's resume (--resume-cost): its arguments: %s", text ? text : "");
	est = tu_jnum(done, "resume-estimate");
	ck_assert_msg(told == est && est > 0, "--resume-cost %" PRIu64 ", resume-estimate %" PRIu64,
		      told, est);
	guest = tu_jnum(done, "guest-downtime");
	down = tu_jnum(done, "downtime");
	sus = event_ms(ev_a, d->name, "Suspended");
	res = event_ms(ev_b, d->name, "Resumed");
	ck_assert_msg(sus && res > sus, "virsh saw no Suspended on host A (%" PRIu64 ") or no "
		      "Resumed on host B after it (%" PRIu64 ")", sus, res);
	ck_assert_msg(guest >= down, "guest-downtime %" PRIu64 " ms, less than migrate-send's "
		      "downtime %" PRIu64 " ms", guest, down);
	/* Both watch the same events; the tool may see them a little sooner. */
	ck_assert_msg(guest + 100 >= res - sus, "guest-downtime %" PRIu64 " ms, but virsh saw the "
		      "guest suspended on A %" PRIu64 " ms before it resumed on B", guest, res - sus);
	ck_assert_msg(err && strstr(err, "the guest was down"), "the final report does not give "
		      "the guest's downtime: %s", err ? err : "");
	printf("libvirt: downtime: migrate-send %" PRIu64 " ms, guest %" PRIu64 " ms (virsh's "
	       "events: %" PRIu64 " ms), libvirt's resume %" PRIu64 " ms, estimated %" PRIu64
	       " ms and passed as --resume-cost\n", down, guest, res - sus,
	       tu_jnum(done, "resume-time"), est);
	free(text);
	free(err);
}

/* The guest moves live from host A to B: afterwards B's libvirt says
 * running and A's shut off, A cannot resume it, B has it defined
 * (--persistent) without -incoming, the guest keeps making passes on B and
 * its RAM there is consistent. */
/* The completed event's "steps" (rdmig-libvirt(1)): each step of a running
 * domain's migration, in order, in ms; together no more than the tool's
 * wall clock @wall (they start after Python itself), and "migrate" at least
 * migrate-send's own total-time.  Printed as "name ms" pairs into @buf. */
static const char *const lv_steps[] = { "libvirt", "destination", "probes", "listen", "migrate",
					"resume", "source", "exit" };
#define NSTEPS (sizeof(lv_steps) / sizeof(lv_steps[0]))

static void expect_steps(struct json_object *done, uint64_t wall, uint64_t ms[NSTEPS],
			 char *buf, size_t len)
{
	struct json_object *steps, *v;
	uint64_t sum = 0;
	size_t i, n = 0;

	ck_assert_msg(json_object_object_get_ex(done, "steps", &steps) &&
		      json_object_is_type(steps, json_type_object), "completed without steps: %s",
		      json_object_to_json_string(done));
	ck_assert_int_eq(json_object_object_length(steps), NSTEPS);
	i = 0;
	json_object_object_foreach(steps, key, val) {
		ck_assert_msg(i < NSTEPS && !strcmp(key, lv_steps[i]), "step %zu is %s, expected %s",
			      i, key, i < NSTEPS ? lv_steps[i] : "none");
		(void)val;
		i++;
	}
	for (i = 0; i < NSTEPS; i++) {
		ck_assert(json_object_object_get_ex(steps, lv_steps[i], &v));
		ms[i] = (uint64_t)json_object_get_int64(v);
		sum += ms[i];
		n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s %" PRIu64, i ? ", " : "",
				      lv_steps[i], ms[i]);
	}
	ck_assert_msg(!wall || sum <= wall, "steps add up to %" PRIu64 " ms, more than the tool's "
		      "wall clock %" PRIu64 " ms: %s", sum, wall, buf);
	ck_assert_msg(ms[4] + 50 >= tu_jnum(done, "total-time"), "step migrate %" PRIu64 " ms, "
		      "shorter than migrate-send's total-time %" PRIu64, ms[4],
		      tu_jnum(done, "total-time"));
}

START_TEST(live_migration)
{
	char ser_a[300], ser_b[300], out[8192], st_a[128], st_b[128], ram[600], pat[200];
	char line[512], wrap[400], args[400], *text;
	struct json_object *done;
	struct tu_run ev_a, ev_b;
	struct stat st0;
	glob_t g;
	uint64_t t0, wall, steps[NSTEPS];
	struct dom d;
	int rc, m0;

	dom_start(&d, "lv-live", RAM_FILE);
	dom_serial(&d, &lv.a, ser_a, sizeof(ser_a));
	dom_serial(&d, &lv.b, ser_b, sizeof(ser_b));
	guest_wait_markers(ser_a, 0, 2, 120000, "the guest on host A");
	expect_lease(&d, "A");
	image_owner(&d, &st0);
	/* libvirt's DAC driver gave it to QEMU's user: what A's destroy undoes. */
	ck_assert_msg(st0.st_uid != 0, "host A's libvirt left the disk image to root");
	snprintf(wrap, sizeof(wrap), "%s/migrate-send", d.dir);
	snprintf(args, sizeof(args), "%s/migrate-send.args", d.dir);
	arg_logger(wrap, d.sendbin, args);
	events_watch(&ev_a, &lv.a, d.dir, "events-a");
	events_watch(&ev_b, &lv.b, d.dir, "events-b");
	t0 = tu_now_ms();
	dom_migrate(&d, (const char *[]){ "--persistent", "--max-downtime", "300",
					  "--migrate-send", wrap, NULL });
	rc = tu_run_finish(&d.mig, 300000);
	wall = tu_now_ms() - t0;
	usleep(500 * 1000);
	events_stop(&ev_a);
	events_stop(&ev_b);
	if (rc && rc != 12)
		dom_dump(&d);
	ck_assert_msg(rc == 0 || rc == 12, "exit %d", rc);
	done = tu_event_in(d.mig.out, "completed");
	ck_assert_ptr_nonnull(done);
	expect_guest_downtime(&d, done, &ev_a, &ev_b, args);
	expect_steps(done, wall, steps, line, sizeof(line));
	printf("libvirt: migrated in %" PRIu64 " ms by the wall clock: %s\n", wall, line);
	expect_limit_kept_or_said(rc, done, 300);

	/* What each libvirt says, asked as an operator would. */
	domstate(&lv.a, d.name, st_a, sizeof(st_a));
	domstate(&lv.b, d.name, st_b, sizeof(st_b));
	ck_assert_msg(!strncmp(st_a, "shut off", 8), "host A: %s, expected shut off", st_a);
	ck_assert_msg(!strncmp(st_b, "running", 7), "host B: %s, expected running", st_b);
	ck_assert_msg(virsh(&lv.a, out, sizeof(out), "resume", d.name, NULL) != 0,
		      "host A resumed the migrated guest: %s", out);
	ck_assert_int_eq(virsh(&lv.b, out, sizeof(out), "dominfo", d.name, NULL), 0);
	ck_assert_msg(strstr(out, "Persistent:     yes"), "host B: not persistent: %s", out);
	ck_assert_int_eq(virsh(&lv.b, out, sizeof(out), "dumpxml", "--inactive", d.name, NULL), 0);
	ck_assert_msg(!strstr(out, "-incoming"), "host B's definition waits for a migration: %s",
		      out);
	/* B's libvirt resumed the guest: it took the disk lease A's released. */
	expect_lease(&d, "B");
	/* What docs/libvirt.md says libvirt notes of the QMP socket rdmig uses. */
	snprintf(pat, sizeof(pat), "/var/log/libvirt/qemu/%s.log", d.name);
	on_host(&lv.b, pat, ram, sizeof(ram));
	text = tu_slurp(ram, NULL);
	ck_assert_msg(text && strstr(text, "tainted: custom-argv"), "host B: no taint in %s: %s",
		      ram, text ? text : "(none)");
	free(text);
	/* Destroying the domain on A restored the disk's DAC label, with no
	 * migration of libvirt's own to tell it not to: B's QEMU must keep
	 * the image's owner (it reopens the image for block jobs, say). */
	expect_owner(&d, &st0, "B");

	/* The guest runs on B: new passes, written to B's serial log. */
	m0 = guest_markers(ser_b, 1);
	guest_wait_markers(ser_b, 1, m0 + 2, 120000, "the guest on host B");
	ck_assert_msg(virsh(&lv.b, out, sizeof(out), "suspend", d.name, NULL) == 0, "%s", out);
	snprintf(pat, sizeof(pat), "/dev/shm/libvirt/libvirt/qemu/*-%s/pc.ram", d.name);
	on_host(&lv.b, pat, ram, sizeof(ram));
	ck_assert_msg(glob(ram, 0, NULL, &g) == 0 && g.gl_pathc == 1, "host B: no %s", ram);
	rc = guest_check(g.gl_pathv[0], line, sizeof(line));
	globfree(&g);
	ck_assert_msg(rc == 0, "host B: guest RAM: %s", line);
	printf("libvirt: live migration of a running libvirt domain (128 MiB, TCG): total %" PRIu64
	       " ms, downtime %" PRIu64 " ms + %" PRIu64 " ms for libvirt's resume, %" PRIu64
	       " rounds; host A %s, host B %s (then %d passes there), disk lease held by B, "
	       "disk image owned by %u:%u (%s); RAM on B %s\n",
	       tu_jnum(done, "total-time"), tu_jnum(done, "downtime"),
	       tu_jnum(done, "resume-time"), tu_jnum(done, "dirty-sync-count"), st_a, st_b,
	       guest_markers(ser_b, 1) - m0, (unsigned)st0.st_uid, (unsigned)st0.st_gid,
	       json_object_object_get_ex(done, "disks-given-back", NULL) ?
	       "given back by the tool after A's destroy" : "untouched by A's destroy", line);
	json_object_put(done);
	dom_free(&d);
}
END_TEST

/* migrate-recv killed mid-stream: the tool fails with migrate-send's 5,
 * host A's libvirt says running and the guest makes passes there, host B
 * has no such domain. */
START_TEST(recv_killed_source_runs)
{
	char ser_a[300], st_a[128], st_b[128];
	struct json_object *ev;
	struct stat st0;
	struct dom d;
	pid_t recv;
	int rc;

	dom_start(&d, "lv-kill", RAM_FILE);
	dom_serial(&d, &lv.a, ser_a, sizeof(ser_a));
	guest_wait_markers(ser_a, 0, 2, 120000, "the guest on host A");
	image_owner(&d, &st0);
	/* Slow enough that the first round is still going. */
	dom_migrate(&d, (const char *[]){ "--max-bandwidth", "8M", NULL });
	wait_started(&d);
	usleep(1000 * 1000);
	recv = find_recv();
	ck_assert_msg(recv > 0, "no migrate-recv running");
	kill(recv, SIGKILL);
	rc = tu_run_finish(&d.mig, 120000);
	if (rc != 5)
		dom_dump(&d);
	ck_assert_int_eq(rc, 5);
	ev = tu_event_in(d.mig.out, "failed");
	ck_assert_ptr_nonnull(ev);

	expect_rolled_back(&d, &st0, ser_a, "the failure", st_a, st_b);
	printf("libvirt: migrate-recv killed mid-stream: exit 5 (%s); host A %s, host B %s, the "
	       "guest making passes on A, disk lease held by A\n", jstr(ev, "error"), st_a, st_b);
	json_object_put(ev);
	dom_free(&d);
}
END_TEST

/* migrate-recv killed after QEMU stopped the guest for the switch-over
 * (libvirt's Suspended event: it released the disk lease then): the tool
 * fails, and host A's libvirt says running and holds the lease again (QEMU
 * or migrate-send resumed the guest behind libvirt's back, and libvirt takes
 * a lease back only when it resumes the guest itself); host B has no such
 * domain. */
START_TEST(switchover_failure_source_runs)
{
	char ser_a[300], st_a[128], st_b[128], *text;
	struct json_object *ev;
	struct tu_run events;
	struct stat st0;
	uint64_t t0;
	struct dom d;
	pid_t recv;
	int rc;

	dom_start(&d, "lv-stop", RAM_FILE);
	dom_serial(&d, &lv.a, ser_a, sizeof(ser_a));
	guest_wait_markers(ser_a, 0, 2, 120000, "the guest on host A");
	image_owner(&d, &st0);
	events_watch(&events, &lv.a, d.dir, "events");
	/* A downtime budget of 2 s leaves that much for the last round after
	 * the stop: time enough to see the stop and kill migrate-recv in it. */
	dom_migrate(&d, (const char *[]){ "--max-downtime", "2000", NULL });
	wait_started(&d);
	recv = find_recv();
	ck_assert_msg(recv > 0, "no migrate-recv running");
	t0 = tu_now_ms();
	while (tu_now_ms() - t0 < 180000 && !tu_has_event(d.mig.out, "completed") &&
	       !event_ms(&events, d.name, "Suspended"))
		usleep(5000);
	text = tu_slurp(events.out, NULL);
	ck_assert_msg(event_ms(&events, d.name, "Suspended"), "host A's libvirt never saw QEMU "
		      "stop the guest: %s", text ? text : "");
	free(text);
	kill(recv, SIGKILL);
	rc = tu_run_finish(&d.mig, 120000);
	events_stop(&events);
	if (rc != 5)
		dom_dump(&d);
	ck_assert_int_eq(rc, 5);
	ev = tu_event_in(d.mig.out, "failed");
	ck_assert_ptr_nonnull(ev);

	expect_rolled_back(&d, &st0, ser_a, "the failure", st_a, st_b);
	text = tu_slurp(events.out, NULL);
	printf("libvirt: migrate-recv killed once QEMU had stopped the guest: exit 5 (%s); host A "
	       "%s, host B %s, disk lease held by A again; host A's events: %s", jstr(ev, "error"),
	       st_a, st_b, text ? text : "");
	free(text);
	json_object_put(ev);
	dom_free(&d);
}
END_TEST

/* The operator cancels (SIGTERM to the tool) mid-stream: exit 7, host A's
 * libvirt says running, host B has no such domain. */
START_TEST(cancel_source_runs)
{
	char ser_a[300], st_a[128], st_b[128];
	struct json_object *ev;
	struct stat st0;
	struct dom d;
	int rc;

	dom_start(&d, "lv-cancel", RAM_FILE);
	dom_serial(&d, &lv.a, ser_a, sizeof(ser_a));
	guest_wait_markers(ser_a, 0, 2, 120000, "the guest on host A");
	image_owner(&d, &st0);
	dom_migrate(&d, (const char *[]){ "--max-bandwidth", "8M", NULL });
	wait_started(&d);
	usleep(1000 * 1000);
	tu_kill(&d.mig.p, SIGTERM);
	rc = tu_run_finish(&d.mig, 120000);
	if (rc != 7)
		dom_dump(&d);
	ck_assert_int_eq(rc, 7);
	ev = tu_event_in(d.mig.out, "failed");
	ck_assert_ptr_nonnull(ev);
	expect_recv_gone(&d, 3000, rc);
	expect_rolled_back(&d, &st0, ser_a, "the cancel", st_a, st_b);
	printf("libvirt: cancelled (SIGTERM) mid-stream: exit 7 (%s); host A %s, host B %s\n",
	       jstr(ev, "error"), st_a, st_b);
	json_object_put(ev);
	dom_free(&d);
}
END_TEST

/* The tool killed (SIGKILL: no rollback of its own) mid-stream: its
 * children must not carry on behind it, migrating the guest with nobody
 * left to tell libvirt (before PR_SET_PDEATHSIG they did: migrate-send in a
 * session of its own finished the migration and left the source paused).
 * migrate-send cancels on the SIGTERM it gets, so the guest runs on A. */
START_TEST(tool_killed_children_stop)
{
	char ser_a[300], st_a[128];
	struct dom d;
	int rc, m0, gone;

	dom_start(&d, "lv-tkill", RAM_FILE);
	dom_serial(&d, &lv.a, ser_a, sizeof(ser_a));
	guest_wait_markers(ser_a, 0, 2, 120000, "the guest on host A");
	dom_migrate(&d, (const char *[]){ "--max-bandwidth", "4M", NULL });
	wait_started(&d);
	usleep(1000 * 1000);
	tu_kill(&d.mig.p, SIGKILL);
	rc = tu_run_finish(&d.mig, 10000);
	ck_assert_int_eq(rc, 128 + SIGKILL);
	/* 128 MiB at 4 MB/s: a migrate-send left alone runs for half a minute. */
	gone = proc_gone("migrate-send", 8000);
	ck_assert_msg(gone, "migrate-send still runs 8 s after the tool was killed");
	ck_assert_msg(proc_gone("migrate-recv", 8000), "migrate-recv still runs 16 s after the "
		      "tool was killed");
	domstate(&lv.a, d.name, st_a, sizeof(st_a));
	ck_assert_msg(!strncmp(st_a, "running", 7), "host A: %s, expected running", st_a);
	m0 = guest_markers(ser_a, 0);
	guest_wait_markers(ser_a, 0, m0 + 1, 60000, "the guest on host A after the tool died");
	printf("libvirt: tool killed (SIGKILL) mid-stream: migrate-send and migrate-recv ended "
	       "with it, host A %s (host B's paused domain is left for the operator)\n", st_a);
	dom_free(&d);
}
END_TEST

/* The reader of --json goes away mid-migration (its pipe closes): the
 * migration goes on to the end, and libvirt says so on both hosts (before,
 * the BrokenPipeError of the next event escaped every cleanup: exit 1, a
 * traceback, migrate-send carrying on alone). */
START_TEST(json_reader_gone)
{
	char bash[64], st_a[128], st_b[128], *err;
	const char *wrap[] = { bin("bash", bash, sizeof(bash)), "-c",
			       "set -o pipefail; \"$@\" | head -c 1 >/dev/null", "bash", NULL };
	struct dom d;
	int rc;

	dom_start(&d, "lv-pipe", RAM_FILE);
	guest_wait_markers_on_a(&d);
	d.wrap = wrap;
	/* The guest must arrive, whatever its downtime: on a loaded bed it
	 * may not converge, and migrate-send would give up (exit 11). */
	dom_migrate(&d, (const char *[]){ "--send-arg=--on-timeout=switchover", NULL });
	rc = tu_run_finish(&d.mig, 300000);
	err = tu_slurp(d.mig.err, NULL);
	if (rc && rc != 12)
		dom_dump(&d);
	/* 12: migrated, switched over above --max-downtime. */
	ck_assert_msg(rc == 0 || rc == 12, "exit %d: %s", rc, err ? err : "");
	ck_assert_msg(!err || !strstr(err, "Traceback"), "%s", err);
	domstate(&lv.a, d.name, st_a, sizeof(st_a));
	domstate(&lv.b, d.name, st_b, sizeof(st_b));
	ck_assert_msg(!strncmp(st_a, "shut off", 8), "host A: %s, expected shut off", st_a);
	ck_assert_msg(!strncmp(st_b, "running", 7), "host B: %s, expected running", st_b);
	printf("libvirt: --json reader gone after one byte: migrated all the same, host A %s, "
	       "host B %s\n", st_a, st_b);
	free(err);
	dom_free(&d);
}
END_TEST

/* Host B's libvirtd stops answering (SIGSTOP) while the guest moves: the
 * tool asks it to resume the migrated guest and hears nothing back, so it
 * cannot know whether the guest runs there.  The source must stay paused
 * (exit 10, with the commands for each host), never resumed: before, the
 * unanswered lookup counted as "domain gone", A resumed, and B's libvirt,
 * once it answered, could run a second copy. */
START_TEST(dest_unreachable_source_paused)
{
	char st_a[128], *err;
	struct json_object *ev;
	struct dom d;
	int rc;

	dom_start(&d, "lv-deaf", RAM_FILE);
	guest_wait_markers_on_a(&d);
	/* The guest rewrites its 100 MiB faster than 16 MB/s carry them: no
	 * round ever converges, and the default 30 of them took 200-240 s,
	 * longer than the wait below on a busy machine.  Three are enough
	 * for host B to stop answering during the pre-copy; then the
	 * switch-over must come (at --max-iterations migrate-send gives up by
	 * default since 1581921, and the source would just run on). */
	dom_migrate(&d, (const char *[]){ "--max-bandwidth", "16M", "--send-arg",
					  "--max-iterations", "--send-arg", "3",
					  "--send-arg=--on-timeout=switchover", NULL });
	wait_started(&d);
	ck_assert_int_eq(kill(lv.b.pid, SIGSTOP), 0);
	rc = tu_run_finish(&d.mig, 240000);
	/* Before any check: the rest of the suite needs host B. */
	kill(lv.b.pid, SIGCONT);
	err = tu_slurp(d.mig.err, NULL);
	if (rc != 10)
		dom_dump(&d);
	ck_assert_msg(rc == 10, "exit %d: %s", rc, err ? err : "");
	ck_assert_msg(err && strstr(err, "left paused") && strstr(err, "destroy") &&
		      strstr(err, "resume"), "no commands for the operator: %s", err);
	domstate(&lv.a, d.name, st_a, sizeof(st_a));
	ck_assert_msg(!strncmp(st_a, "paused", 6), "host A: %s, expected paused", st_a);
	ev = tu_event_in(d.mig.out, "failed");
	ck_assert_ptr_nonnull(ev);
	ck_assert_msg(strncmp(jstr(ev, "destination-state"), "gone", 4),
		      "an unreachable destination reported as gone");
	printf("libvirt: destination libvirtd stopped mid-migration: exit 10, host A %s, "
	       "destination reported as \"%s\"; %s", st_a, jstr(ev, "destination-state"), err);
	json_object_put(ev);
	free(err);
	dom_free(&d);
}
END_TEST

/* The destination's libvirt cannot resume the migrated guest (host B's
 * virtlockd gone, so no lease for it) after the source QEMU completed its
 * migration and let go of its disk image.  The source must run again: the
 * tool destroys B's domain, which gives the image to root (remember_owner
 * 0, as on NFS), and a source QEMU whose migration completed reopens its
 * image on `cont`, so the owner must be back before the resume (before,
 * the tool resumed first: "Could not open ...: Permission denied", exit
 * 10, the source left paused).  Last of its case: host B's virtlockd is
 * started again, under another pid than the suite knows. */
START_TEST(dest_resume_fails_source_runs)
{
	char ser_a[300], st_a[128], st_b[128], *err;
	struct stat st0;
	struct dom d;
	int rc;

	dom_start(&d, "lv-nolease", RAM_FILE);
	dom_serial(&d, &lv.a, ser_a, sizeof(ser_a));
	guest_wait_markers_on_a(&d);
	image_owner(&d, &st0);
	dom_migrate(&d, NULL);
	wait_started(&d);
	ck_assert_int_eq(kill(lv.b.lockd, SIGKILL), 0);
	rc = tu_run_finish(&d.mig, 240000);
	host_sh(&lv.b, "virtlockd -d -f /etc/libvirt/virtlockd.conf -p /run/libvirt/virtlockd.pid");
	err = tu_slurp(d.mig.err, NULL);
	if (rc != 9)
		dom_dump(&d);
	ck_assert_msg(rc == 9 && err && strstr(err, "could not resume the migrated guest"),
		      "exit %d: %s", rc, err ? err : "");
	expect_rolled_back(&d, &st0, ser_a, "the failed resume", st_a, st_b);
	printf("libvirt: the destination could not resume the migrated guest: exit %d, host A %s, "
	       "host B %s: %s", rc, st_a, st_b, err);
	free(err);
	dom_free(&d);
}
END_TEST

/* migrate-recv runs where no signal to the local end of --dest-exec
 * reaches it (as through ssh, without a pty; here setsid puts it in a
 * session of its own): after a failure it must still go, not stay
 * listening with the guest's RAM files mapped. */
START_TEST(remote_recv_stopped)
{
	char st_a[128], st_b[128];
	struct dom d;
	int rc;

	dom_start(&d, "lv-remote", RAM_FILE);
	guest_wait_markers_on_a(&d);
	d.dexec_tail = "setsid -w sh -c";
	/* migrate-send refuses the option: the failure comes after
	 * migrate-recv listens, before anything connects to it. */
	dom_migrate(&d, (const char *[]){ "--send-arg=--no-such-option", NULL });
	rc = tu_run_finish(&d.mig, 120000);
	expect_recv_gone(&d, 3000, rc);
	if (!rc)
		dom_dump(&d);
	ck_assert_msg(rc != 0, "migrate-send ran with --no-such-option");
	domstate(&lv.a, d.name, st_a, sizeof(st_a));
	domstate(&lv.b, d.name, st_b, sizeof(st_b));
	ck_assert_msg(!strncmp(st_a, "running", 7), "host A: %s, expected running", st_a);
	ck_assert_msg(!strcmp(st_b, "gone"), "host B: %s, expected no such domain", st_b);
	printf("libvirt: migrate-recv out of reach of signals: stopped by its pid after the "
	       "failure (exit %d), host A %s, host B %s\n", rc, st_a, st_b);
	dom_free(&d);
}
END_TEST

/* `rdmig-libvirt check DOMAIN` on host A, with host B as the destination
 * (reached as dom_migrate reaches it): its exit code, its output in @out. */
static int dom_check(const struct dom *d, char *out, size_t len)
{
	char nsenter[64], pid[16], dexec[128];
	char *argv[] = { (char *)bin("nsenter", nsenter, sizeof(nsenter)), "-t", pid, "-m", "--",
			 (char *)d->tool, "check", (char *)d->name, "--connect", lv.a.uri,
			 "--dest-connect", lv.b.uri, "--dest-exec", dexec, NULL };

	snprintf(pid, sizeof(pid), "%d", lv.a.pid);
	snprintf(dexec, sizeof(dexec), "%s -t %d -m -- sh -c", nsenter, lv.b.pid);
	return run(argv, out, len, 60000);
}

/* check and migrate agree (issue 32): a domain migrate refuses, check
 * refuses too, with the same exit status (2) and in the same words (every
 * problem line check prints is in migrate's message), and neither leaves
 * anything behind: host B has no such domain, host A's says @st_a (a
 * prefix).  Each of @words (NULL-terminated) is in both outputs. */
static void both_refuse(struct dom *d, const char *st_a, const char *const *words)
{
	char out[8192], prefix[128], st[128], *err, *line, *save = NULL;
	const char *const *w;
	int rc, mrc, lines = 0;

	rc = dom_check(d, out, sizeof(out));
	dom_migrate(d, NULL);
	mrc = tu_run_finish(&d->mig, 180000);
	err = tu_slurp(d->mig.err, NULL);
	ck_assert_ptr_nonnull(err);
	if (mrc != 2)
		dom_dump(d);
	ck_assert_msg(rc == 2, "%s: check: exit %d, migrate: exit %d: %s", d->name, rc, mrc, out);
	ck_assert_msg(mrc == 2, "%s: migrate: exit %d, check: exit 2: %s", d->name, mrc, err);
	for (w = words; *w; w++) {
		ck_assert_msg(strstr(out, *w), "%s: check does not say \"%s\": %s", d->name, *w, out);
		ck_assert_msg(strstr(err, *w), "%s: migrate does not say \"%s\": %s", d->name, *w,
			      err);
	}
	snprintf(prefix, sizeof(prefix), "rdmig-libvirt: %s: ", d->name);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, prefix, strlen(prefix)) || !strncmp(line + strlen(prefix),
								   "warning:", 8))
			continue;
		lines++;
		ck_assert_msg(strstr(err, line + strlen(prefix)), "%s: check says \"%s\", migrate "
			      "does not: %s", d->name, line + strlen(prefix), err);
	}
	ck_assert_msg(lines > 0, "%s: check printed no problem", d->name);
	domstate(&lv.b, d->name, st, sizeof(st));
	ck_assert_msg(!strcmp(st, "gone"), "%s: host B: %s, expected no such domain", d->name, st);
	domstate(&lv.a, d->name, st, sizeof(st));
	ck_assert_msg(!strncmp(st, st_a, strlen(st_a)), "%s: host A: %s, expected %s", d->name, st,
		      st_a);
	printf("libvirt: %s: check and migrate refuse it alike (exit 2), host A %s: %s", d->name,
	       st, err);
	free(err);
}

/* The QMP socket in the domain's XML is not its QEMU's: a clone of the
 * domain with the same -qmp path took it, then a process of ours.  Both
 * are refused before anything moves (before, the tool migrated the clone's
 * guest under this domain's name and then destroyed this one). */
START_TEST(qmp_socket_not_its_own)
{
	char out[8192], path[300], pat[200], st[128], *err;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct dom d, clone;
	int rc, fd;

	dom_start(&d, "lv-q1", RAM_FILE);
	snprintf(pat, sizeof(pat), "/run/rdmig/%s.qmp", d.uuid);
	dom_start_qmp(&clone, "lv-q2", RAM_FILE, pat);
	guest_wait_markers_on_a(&d);
	rc = dom_check(&d, out, sizeof(out));
	ck_assert_msg(rc == 2 && strstr(out, "lv-q2"), "check: exit %d: %s", rc, out);
	dom_migrate(&d, NULL);
	rc = tu_run_finish(&d.mig, 120000);
	err = tu_slurp(d.mig.err, NULL);
	if (rc != 2)
		dom_dump(&d);
	ck_assert_msg(rc == 2 && err && strstr(err, "lv-q2"), "exit %d: %s", rc, err ? err : "");
	free(err);
	domstate(&lv.b, d.name, st, sizeof(st));
	ck_assert_msg(!strcmp(st, "gone"), "host B: %s, expected no such domain", st);
	domstate(&lv.a, clone.name, st, sizeof(st));
	ck_assert_msg(!strncmp(st, "running", 7), "host A: the clone is %s", st);

	/* The clone goes; a process of ours takes the path. */
	virsh(&lv.a, out, sizeof(out), "destroy", clone.name, NULL);
	virsh(&lv.a, out, sizeof(out), "undefine", clone.name, NULL);
	snprintf(pat, sizeof(pat), "/run/rdmig/%s.qmp", d.uuid);
	on_host(&lv.a, pat, path, sizeof(path));
	unlink(path);
	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 4), 0);
	rc = dom_check(&d, out, sizeof(out));
	ck_assert_msg(rc == 2 && strstr(out, "not its QEMU"), "check: exit %d: %s", rc, out);
	dom_migrate(&d, NULL);
	rc = tu_run_finish(&d.mig, 120000);
	err = tu_slurp(d.mig.err, NULL);
	if (rc != 2)
		dom_dump(&d);
	ck_assert_msg(rc == 2 && err && strstr(err, "not its QEMU"), "exit %d: %s", rc,
		      err ? err : "");
	domstate(&lv.a, d.name, st, sizeof(st));
	ck_assert_msg(!strncmp(st, "running", 7), "host A: %s, expected running", st);
	domstate(&lv.b, d.name, st, sizeof(st));
	ck_assert_msg(!strcmp(st, "gone"), "host B: %s, expected no such domain", st);
	printf("libvirt: QMP socket taken by a clone, then by another process: refused (exit 2) "
	       "before anything moved: %s", err);
	free(err);
	close(fd);
	dom_free(&clone);
	dom_free(&d);
}
END_TEST

/* Starts vm_qmp_impostor_py on @h as a process of QEMU's user (another
 * guest's QEMU after an escape, say: its mount namespace, as libvirt-qemu)
 * at /run/rdmig/impostor.sock; its output goes to @out. */
static void impostor_start(struct tu_proc *p, const struct lvhost *h, const char *out)
{
	char nsenter[64], setpriv[64], py[64], pid[16], *text = NULL;
	char *argv[] = { (char *)bin("nsenter", nsenter, sizeof(nsenter)), "-t", pid, "-m", "--",
			 (char *)bin("setpriv", setpriv, sizeof(setpriv)), "--reuid=libvirt-qemu",
			 "--regid=libvirt-qemu", "--clear-groups", (char *)bin("python3", py, sizeof(py)),
			 "-c", (char *)vm_qmp_impostor_py, "/run/rdmig/impostor.sock", NULL };
	uint64_t t0 = tu_now_ms();

	snprintf(pid, sizeof(pid), "%d", h->pid);
	ck_assert_int_eq(tu_spawn(p, out, argv), 0);
	while (tu_now_ms() - t0 < 30000) {
		free(text);
		text = tu_slurp(out, NULL);
		if (text && strstr(text, "listening"))
			break;
		usleep(50 * 1000);
	}
	ck_assert_msg(text && strstr(text, "listening"), "the impostor did not start: %s",
		      text ? text : "");
	free(text);
}

/* Writes @path: a stand-in for @real that first renames the impostor's
 * socket over @d's QMP socket, as libvirt-qemu, in whichever host's mount
 * namespace it runs: the window between the tool's check of the socket
 * and the command's own connection. */
static void swapper(const struct dom *d, const char *path, const char *real)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fprintf(f, "#!/bin/sh\n"
		"setpriv --reuid=libvirt-qemu --regid=libvirt-qemu --clear-groups \\\n"
		"    mv -f /run/rdmig/impostor.sock /run/rdmig/%s.qmp || exit 99\n"
		"exec %s \"$@\"\n", d->uuid, real);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(path, 0755), 0);
}

/* Security round 4 (issue 30): the tool checks the QMP socket's peer on
 * each host, then the commands connect to the path again.  A process of
 * QEMU's user renames its own socket over the path in between (_i: 0 on
 * the destination before migrate-recv connects, 1 on the source before
 * migrate-send does).  The command must refuse the impostor before a byte
 * reaches it, naming both pids; the source domain runs on, host B has no
 * domain.  Before (2cee698) the commands took whatever answered: the
 * impostor got QMP commands and, on the destination, the guest's RAM. */
START_TEST(qmp_socket_swapped_after_check)
{
	const struct lvhost *h = _i ? &lv.a : &lv.b;
	char wrap[400], log[400], ser_a[300], st_a[128], st_b[128], *err, *said;
	const char *extra[3];
	struct tu_proc imp;
	struct stat st0;
	struct dom d;
	int rc;

	dom_start(&d, _i ? "lv-swap-src" : "lv-swap-dst", RAM_FILE);
	guest_wait_markers_on_a(&d);
	dom_serial(&d, &lv.a, ser_a, sizeof(ser_a));
	image_owner(&d, &st0);
	snprintf(wrap, sizeof(wrap), "%s/swap-then-run", d.dir);
	snprintf(log, sizeof(log), "%s/impostor.out", d.dir);
	swapper(&d, wrap, _i ? d.sendbin : d.recvbin);
	impostor_start(&imp, h, log);
	extra[0] = _i ? "--migrate-send" : "--migrate-recv";
	extra[1] = wrap;
	extra[2] = NULL;
	dom_migrate(&d, extra);
	rc = tu_run_finish(&d.mig, 180000);
	err = tu_slurp(d.mig.err, NULL);
	said = tu_slurp(log, NULL);
	tu_kill(&imp, SIGKILL);
	tu_wait(&imp, 5000);
	if (rc != 2)
		dom_dump(&d);
	ck_assert_msg(said && strstr(said, "connected"), "the swap did not happen (the "
		      "impostor was never connected to): exit %d: %s", rc, err ? err : "");
	ck_assert_msg(!strstr(said, "got "), "the %s talked to the impostor: %s",
		      _i ? "source" : "destination", said);
	ck_assert_msg(rc == 2 && err && strstr(err, "not by QEMU pid"), "exit %d: %s", rc,
		      err ? err : "");
	expect_rolled_back(&d, &st0, ser_a, "the refused swap", st_a, st_b);
	expect_recv_gone(&d, 10000, rc);
	printf("libvirt: QMP socket swapped after the check on host %s: refused (exit %d), host "
	       "A %s, host B %s: %s", h->name, rc, st_a, st_b, err);
	free(said);
	free(err);
	dom_free(&d);
}
END_TEST

/* A domain whose RAM rdmig cannot carry: refused (exit 2) by check and by
 * migrate, with the XML that fixes it; nothing on host B, the guest runs
 * on A with its lease. */
static void refused(enum ram_kind kind, const char *name, const char *what)
{
	const char *words[] = { what, "<source type='file'/>", "<access mode='shared'/>", NULL };
	struct dom d;

	dom_start(&d, name, kind);
	both_refuse(&d, "running", words);
	expect_lease(&d, "A");
	dom_free(&d);
}

START_TEST(memfd_refused)
{
	refused(RAM_MEMFD, "lv-memfd", "memfd");
}
END_TEST

START_TEST(private_refused)
{
	refused(RAM_PRIVATE, "lv-private", "not in a shared file");
}
END_TEST

/* Issue 32: a shut-off domain passed check (exit 0), then migrate refused
 * it (exit 2). */
START_TEST(shut_off_refused)
{
	const char *words[] = { "shut off", "only a running (or paused) domain", NULL };
	struct dom d;

	dom_init(&d, "lv-off");
	dom_define_as(&d, RAM_FILE, NULL);
	both_refuse(&d, "shut off", words);
	dom_free(&d);
}
END_TEST

/* Issue 32: a QMP socket named after the domain, not its UUID, passed
 * check ("rdmig can move it") and migrated, though docs/libvirt.md and the
 * manual ask for the UUID (a copy of the XML under another name keeps the path). */
START_TEST(socket_named_not_uuid)
{
	const char *words[] = { "/run/rdmig/lv-named.qmp", "does not have the domain's UUID",
				NULL, NULL };
	char fix[80];
	struct dom d;

	dom_start_qmp(&d, "lv-named", RAM_FILE, "/run/rdmig/lv-named.qmp");
	snprintf(fix, sizeof(fix), "/run/rdmig/%s.qmp", d.uuid);
	words[2] = fix;
	both_refuse(&d, "running", words);
	dom_free(&d);
}
END_TEST

/* Issue 32: memory_backing_dir was verified by neither: a domain whose
 * RAM file lay off tmpfs passed check and migrated without a word.  Here
 * host A's memory_backing_dir is on ramfs (not tmpfs, as a disk's file
 * system is not) while the domain starts; its QEMU maps its RAM file
 * there.  The ramfs goes over all of /dev/shm: libvirt carries the mounts
 * of /dev into QEMU's own mount namespace one by one, not those nested in
 * them. */
START_TEST(ram_not_on_tmpfs)
{
	const char *words[] = { "not tmpfs", "on ramfs", "memory_backing_dir", NULL };
	struct dom d;

	/* And the directory libvirtd makes QEMU's at its start, made again. */
	host_sh(&lv.a, "mount -t ramfs -o mode=1777 lv-ramfs /dev/shm && "
		"mkdir -p /dev/shm/libvirt/libvirt/qemu && "
		"chown libvirt-qemu:libvirt-qemu /dev/shm/libvirt/libvirt/qemu");
	dom_start(&d, "lv-ramfs", RAM_FILE);
	both_refuse(&d, "running", words);
	dom_free(&d);
	host_sh(&lv.a, "umount /dev/shm || umount -l /dev/shm");
}
END_TEST

/* Issue 32: after `virsh define` of a corrected XML on a running domain,
 * check still asked for what the definition already had.  Now both say the
 * definition is right and a restart is what is missing; after the restart
 * check says yes; with the definition broken again while the corrected
 * domain runs, check says yes and warns of its next start. */
START_TEST(corrected_not_restarted)
{
	const char *words[] = { "persistent definition (virsh dumpxml --inactive) is right",
				"a restart", "not in a shared file", NULL };
	char out[8192], xml[360];
	struct dom d;
	int rc;

	dom_start(&d, "lv-fixed", RAM_PRIVATE);
	dom_define_as(&d, RAM_FILE, NULL);
	both_refuse(&d, "running", words);

	ck_assert_msg(virsh(&lv.a, out, sizeof(out), "destroy", d.name, NULL) == 0, "%s", out);
	dom_run(&d);
	rc = dom_check(&d, out, sizeof(out));
	ck_assert_msg(rc == 0 && strstr(out, "rdmig can move it") && !strstr(out, "warning"),
		      "check after the restart: exit %d: %s", rc, out);
	printf("libvirt: lv-fixed restarted: check: %s", out);

	snprintf(xml, sizeof(xml), "%s/private.xml", d.dir);
	dom_xml(&d, RAM_PRIVATE, NULL, xml);
	ck_assert_msg(virsh(&lv.a, out, sizeof(out), "define", xml, NULL) == 0, "%s", out);
	rc = dom_check(&d, out, sizeof(out));
	ck_assert_msg(rc == 0 && strstr(out, "warning") && strstr(out, "next start") &&
		      strstr(out, "not in a shared file"), "check with the persistent definition "
		      "broken: exit %d: %s", rc, out);
	printf("libvirt: lv-fixed running right, defined wrong: check: %s", out);
	dom_free(&d);
}
END_TEST

/* The socket's directory on the destination: its QEMU could not create
 * the socket there (here: it exists, root's, 0755).  Before, check said
 * yes, and migrate started the destination domain and failed with
 * libvirt's "bind socket" (exit 9).  The domain's socket is in a directory
 * of its own, /run/rdmig-lv: on host A a tmpfs mounted there for QEMU's
 * user; host B sees the directory under it (/run is one file system for
 * the two hosts of the bed). */
START_TEST(dest_socket_dir)
{
	const char *words[] = { "on the destination host", "/run/rdmig-lv is 0:0 mode 755",
				"cannot create its socket", NULL };
	char qmp[80];
	struct dom d;

	host_sh(&lv.a, "mkdir -p /run/rdmig-lv && chown 0:0 /run/rdmig-lv && "
		"chmod 755 /run/rdmig-lv && mount -t tmpfs -o mode=750,uid=$(id -u libvirt-qemu),"
		"gid=$(id -g libvirt-qemu) lv-sock /run/rdmig-lv");
	dom_init(&d, "lv-sockdir");
	snprintf(qmp, sizeof(qmp), "/run/rdmig-lv/%s.qmp", d.uuid);
	dom_define_as(&d, RAM_FILE, qmp);
	dom_run(&d);
	both_refuse(&d, "running", words);
	dom_free(&d);
	host_sh(&lv.a, "umount /run/rdmig-lv || umount -l /run/rdmig-lv");
}
END_TEST

/* The integer @key of @o, or -1 when it has none (an older tool's report). */
static long long jnum_or(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) ? (long long)json_object_get_int64(v) : -1;
}

/* "median (min-max)" of @n figures (sorted in place). */
static const char *med3(uint64_t *v, int n, char *buf, size_t len)
{
	int i, j;

	for (i = 1; i < n; i++)
		for (j = i; j > 0 && v[j - 1] > v[j]; j--) {
			uint64_t t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	snprintf(buf, len, "%" PRIu64 " (%" PRIu64 "-%" PRIu64 ")", v[n / 2], v[0], v[n - 1]);
	return buf;
}

/* Polls virsh domstate --reason of @d on both hosts until stopped: one
 * "HOST: STATE" line each time a host's answer changes, in @r's stdout. */
static void states_watch(struct tu_run *r, const struct dom *d)
{
	char bash[64], script[1200];
	char *argv[] = { (char *)bin("bash", bash, sizeof(bash)), "-c", script, NULL };

	snprintf(script, sizeof(script),
		 "st() { virsh -q -c \"$1\" domstate --reason %s 2>/dev/null | head -n1 || true; }\n"
		 "a= b=\n"
		 "while :; do\n"
		 "  n=$(st '%s'); [ \"$n\" = \"$a\" ] || { a=$n; echo \"A: ${a:-no such domain}\"; }\n"
		 "  n=$(st '%s'); [ \"$n\" = \"$b\" ] || { b=$n; echo \"B: ${b:-no such domain}\"; }\n"
		 "done\n", d->name, lv.a.uri, lv.b.uri);
	tu_run_spawn(r, d->dir, "states", argv);
}

#define LEGS 3

/* docs/libvirt.md's table, not part of make check
 * (CK_RUN_CASE=libvirt-bench asks for it): one running domain moves A to B,
 * back, and to B again with docs/libvirt.md's example (--persistent
 * --undefinesource --max-downtime 300).
 * Each leg: the tool's wall clock (its start to its exit, as the operator
 * waits), migrate-send's total time and downtime, and the guest-visible
 * downtime as virsh sees it on the two hosts (the source's Suspended to the
 * destination's Resumed), next to what the tool reported. */
START_TEST(bench_legs)
{
	const char *const extra[] = { "--persistent", "--undefinesource", "--max-downtime", "300",
				      NULL };
	const struct lvhost *h[] = { &lv.a, &lv.b };
	uint64_t wall[LEGS], total[LEGS], down[LEGS], seen[LEGS], said[LEGS], step[LEGS][NSTEPS];
	uint64_t col[LEGS];
	char ser[300], m1[64], m2[64], m3[64], m4[64], m5[64], line[512];
	size_t i, n;
	struct tu_run ev_from, ev_to, states;
	struct json_object *done;
	struct dom d;
	uint64_t t0;
	int leg, rc, m0;

	dom_start(&d, "lv-bench", RAM_FILE);
	guest_wait_markers_on_a(&d);
	for (leg = 0; leg < LEGS; leg++) {
		const struct lvhost *from = h[leg % 2], *to = h[(leg + 1) % 2];

		events_watch(&ev_from, from, d.dir, "events-from");
		events_watch(&ev_to, to, d.dir, "events-to");
		states_watch(&states, &d);
		usleep(500 * 1000);
		t0 = tu_now_ms();
		dom_migrate_on(&d, from, to, extra);
		rc = tu_run_finish(&d.mig, 300000);
		wall[leg] = tu_now_ms() - t0;
		usleep(500 * 1000);
		events_stop(&ev_from);
		events_stop(&ev_to);
		events_stop(&states);
		if (rc && rc != 12)
			dom_dump(&d);
		else
			tu_dump("the tool's stderr", d.mig.err);
		tu_dump("virsh domstate --reason on each host, as it changed", states.out);
		ck_assert_msg(rc == 0 || rc == 12, "leg %d (%s to %s): exit %d", leg + 1, from->name,
			      to->name, rc);
		done = tu_event_in(d.mig.out, "completed");
		ck_assert_ptr_nonnull(done);
		expect_limit_kept_or_said(rc, done, 300);
		total[leg] = tu_jnum(done, "total-time");
		down[leg] = tu_jnum(done, "downtime");
		said[leg] = tu_jnum(done, "guest-downtime");
		expect_steps(done, wall[leg], step[leg], line, sizeof(line));
		printf("libvirt-bench: leg %d: libvirt's resume %lld ms, estimated %lld ms; steps: "
		       "%s\n", leg + 1, jnum_or(done, "resume-time"), jnum_or(done, "resume-estimate"),
		       line);
		json_object_put(done);
		seen[leg] = event_ms(&ev_to, d.name, "Resumed") - event_ms(&ev_from, d.name,
									    "Suspended");
		ck_assert_msg(event_ms(&ev_from, d.name, "Suspended") && event_ms(&ev_to, d.name,
			      "Resumed"), "leg %d: no Suspended on %s or no Resumed on %s",
			      leg + 1, from->name, to->name);
		printf("libvirt-bench: leg %d, %s to %s: wall clock %" PRIu64 " ms, migrate-send "
		       "total %" PRIu64 " ms (wall / total %.2f), downtime %" PRIu64 " ms, guest "
		       "down %" PRIu64 " ms by virsh's events (the tool said %" PRIu64 ")\n",
		       leg + 1, from->name, to->name, wall[leg], total[leg],
		       (double)wall[leg] / (double)total[leg], down[leg], seen[leg], said[leg]);
		/* The guest runs at the destination before it moves again. */
		on_host(to, d.serial, ser, sizeof(ser));
		m0 = guest_markers(ser, 1);
		guest_wait_markers(ser, 1, m0 + 1, 120000, "the guest after the leg");
	}
	printf("libvirt-bench: medians (min-max) of %d legs: wall clock %s ms, migrate-send total "
	       "%s ms, downtime %s ms, guest down %s ms by virsh's events (the tool said %s)\n",
	       LEGS, med3(wall, LEGS, m1, sizeof(m1)), med3(total, LEGS, m2, sizeof(m2)),
	       med3(down, LEGS, m3, sizeof(m3)), med3(seen, LEGS, m4, sizeof(m4)),
	       med3(said, LEGS, m5, sizeof(m5)));
	for (i = n = 0; i < NSTEPS; i++) {
		for (leg = 0; leg < LEGS; leg++)
			col[leg] = step[leg][i];
		n += (size_t)snprintf(line + n, n < sizeof(line) ? sizeof(line) - n : 0, "%s%s %s",
				      i ? ", " : "", lv_steps[i], med3(col, LEGS, m1, sizeof(m1)));
	}
	printf("libvirt-bench: steps, medians (min-max) ms: %s\n", line);
	dom_free(&d);
}
END_TEST

/* A case of the suite: both hosts' daemons up around it. */
static TCase *lv_case(Suite *s, const char *name, int timeout_s)
{
	TCase *tc = tu_case(s, name, timeout_s);

	tcase_add_unchecked_fixture(tc, hosts_up, hosts_down);
	return tc;
}

void libvirt_cases(Suite *s)
{
	/* Both daemons once for all the tests of a case (they start in
	 * seconds, but probe QEMU's capabilities under TCG first). */
	TCase *tc = lv_case(s, "libvirt-9.0", 600);

	tcase_add_test(tc, live_migration);
	tcase_add_test(tc, recv_killed_source_runs);
	tcase_add_test(tc, switchover_failure_source_runs);
	tcase_add_test(tc, cancel_source_runs);

	/* What the tool must survive (CK_RUN_CASE=libvirt-faults runs them
	 * alone, RDMIG_LIBVIRT_TOOL=an older tool to see them fail). */
	tc = lv_case(s, "libvirt-faults", 600);
	tcase_add_test(tc, qmp_socket_not_its_own);
	tcase_add_loop_test(tc, qmp_socket_swapped_after_check, 0, 2);
	tcase_add_test(tc, remote_recv_stopped);
	tcase_add_test(tc, json_reader_gone);
	tcase_add_test(tc, tool_killed_children_stop);
	tcase_add_test(tc, dest_unreachable_source_paused);
	/* Last: it restarts host B's virtlockd. */
	tcase_add_test(tc, dest_resume_fails_source_runs);

	/* What check and migrate refuse, alike, before anything runs at the
	 * destination (CK_RUN_CASE=libvirt-check runs them alone). */
	tc = lv_case(s, "libvirt-check", 300);
	tcase_add_test(tc, shut_off_refused);
	tcase_add_test(tc, socket_named_not_uuid);
	tcase_add_test(tc, corrected_not_restarted);
	tcase_add_test(tc, memfd_refused);
	tcase_add_test(tc, private_refused);
	tcase_add_test(tc, dest_socket_dir);
	/* Last: a failure would leave host A's RAM on ramfs. */
	tcase_add_test(tc, ram_not_on_tmpfs);

	/* Only when asked for by name: three migrations for docs/libvirt.md's
	 * table. */
	if (tu_case_asked("libvirt-bench")) {
		tc = lv_case(s, "libvirt-bench", 1200);
		tcase_add_test(tc, bench_legs);
	}
}
