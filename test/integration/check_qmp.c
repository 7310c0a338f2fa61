/* The QMP client (src/cli/qmp.h) against real QEMUs: stock
 * qemu-system-x86_64 under TCG (no KVM needed), 64 MiB guests that sit in
 * SeaBIOS, RAM files under /dev/shm.  Needs no RDMA.  Every QEMU is started
 * with PR_SET_PDEATHSIG, so a failing test (which exits at once) takes its
 * QEMUs with it. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "suite.h"
#include "suites.h"
#include "testutil.h"

/* The module is part of the commands, not of librdmig: build it in here. */
#include "qemu_vm.h"
#include "qemu_ram.h"

#define MARK 0x5a5aa5a5u
/* Guest-physical address of a test word: above what SeaBIOS touches in a
 * guest that finds nothing to boot. */
#define MARK_GPA 0x300000u

/* The 32-bit word at guest-physical @gpa, read by QEMU itself (HMP xp). */
static uint32_t guest_word(struct vm *v, uint64_t gpa)
{
	struct cli_err err = { "" };
	char cmd[64];
	struct json_object *ret;
	const char *text, *x;
	uint32_t w;
	int r;

	snprintf(cmd, sizeof(cmd), "xp /1wx 0x%" PRIx64, gpa);
	r = qmp_call(v->q, "human-monitor-command",
		     vm_args1("command-line", json_object_new_string(cmd)), &ret, &err);
	ck_assert_msg(r == 0, "%s: %s", cmd, err.msg);
	text = json_object_get_string(ret);
	x = strstr(text, ": 0x");
	ck_assert_msg(x != NULL, "%s: %s", cmd, text);
	w = (uint32_t)strtoul(x + 2, NULL, 16);
	json_object_put(ret);
	return w;
}

/* Whether @pid has a shared mapping of the file (@dev, @ino). */
static int maps_file(pid_t pid, dev_t dev, ino_t ino)
{
	char path[64], line[512], perms[8];
	unsigned long long s, e, off, inode;
	unsigned int maj, min;
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &s, &e, perms, &off, &maj, &min,
			       &inode) == 7 && perms[3] == 's' && makedev(maj, min) == dev &&
			inode == (unsigned long long)ino;
	fclose(f);
	return found;
}

static const struct qram_backend *by_id(const struct qram_backend *b, size_t n, const char *id)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(b[i].id, id))
			return &b[i];
	ck_abort_msg("backend %s not found among %zu", id, n);
	return NULL;
}

/* Writes @val at @off of the file at @path through a shared mapping, as a
 * command does, and checks QEMU sees it at @gpa. */
static void poke_through(struct vm *v, const struct qram_backend *b, uint64_t off, uint64_t gpa,
			 uint32_t val)
{
	int fd = open(b->path, O_RDWR);
	struct stat st;
	char *m;

	ck_assert_msg(fd >= 0, "open %s: %s", b->path, strerror(errno));
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_msg(st.st_dev == b->dev && st.st_ino == b->ino, "%s opens another file", b->path);
	m = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_msg(m != MAP_FAILED, "mmap %s: %s", b->path, strerror(errno));
	memcpy(m + off, &val, sizeof(val));
	munmap(m, b->size);
	close(fd);
	ck_assert_uint_eq(guest_word(v, gpa), val);
}

START_TEST(open_status_events_errors)
{
	struct cli_err err = { "" };
	char dir[64], obj[256], chr[300], pretty_sock[128];
	/* A second monitor that spreads each message over many lines. */
	const char *args[] = { "-machine", "pc,memory-backend=mem", "-m", "64M", "-object", obj,
			       "-chardev", chr, "-mon", "chardev=pretty,mode=control,pretty=on", NULL };
	struct qmp_migration mig;
	struct qmp *other;
	struct vm v;
	bool on = true;
	int fd;

	vm_dir(dir, sizeof(dir), "qmp");
	snprintf(obj, sizeof(obj), "memory-backend-file,id=mem,size=64M,mem-path=%s/vm.ram,share=on", dir);
	snprintf(pretty_sock, sizeof(pretty_sock), "%s/pretty.sock", dir);
	snprintf(chr, sizeof(chr), "socket,id=pretty,path=%s,server=on,wait=off", pretty_sock);
	vm_start(&v, dir, "vm", args);
	ck_assert_int_eq(qmp_pid(v.q), v.p.pid);
	vm_expect_status(&v, "running");

	ck_assert_msg(qmp_open(&other, pretty_sock, 2000, &err) == 0, "pretty: %s", err.msg);
	ck_assert_msg(qmp_call(other, "query-status", NULL, NULL, &err) == 0, "%s", err.msg);
	qmp_close(other);
	/* One client per QMP socket: a second one is never greeted. */
	ck_assert_int_eq(qmp_open(&other, v.sock, 300, &err), -ETIMEDOUT);
	ck_assert_msg(strstr(err.msg, "another client") != NULL, "%s", err.msg);

	ck_assert_msg(qmp_stop(v.q, &err) == 0, "stop: %s", err.msg);
	vm_expect_status(&v, "paused");
	ck_assert_msg(qmp_event_wait(v.q, "STOP", 2000, NULL, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(qmp_event_take(v.q, "STOP", NULL), 0);
	ck_assert_msg(qmp_cont(v.q, &err) == 0, "cont: %s", err.msg);
	ck_assert_msg(qmp_event_wait(v.q, "RESUME", 2000, NULL, &err) == 0, "%s", err.msg);
	vm_expect_status(&v, "running");

	ck_assert_int_eq(qmp_migrate_query(v.q, &mig, &err), 0);
	ck_assert_str_eq(mig.status, "none");

	/* QEMU's own words come back, as one line. */
	ck_assert_int_eq(qmp_call(v.q, "no-such-command", NULL, NULL, &err), -EREMOTEIO);
	ck_assert_str_eq(err.msg, "The command no-such-command has not been found");
	ck_assert_int_eq(qmp_migrate(v.q, "fd:nosuch", &err), -EREMOTEIO);
	ck_assert_msg(strstr(err.msg, "nosuch") != NULL, "migrate fd:nosuch: %s", err.msg);
	/* QEMU 7.2 counts a refused migrate as a failed migration. */
	ck_assert_int_eq(qmp_migrate_query(v.q, &mig, &err), 0);
	fprintf(stderr, "qmp: after a refused migrate: %s \"%s\"\n", mig.status, mig.error);
	ck_assert_str_eq(mig.status, "failed");
	ck_assert_int_eq(qmp_closefd(v.q, "nosuch", &err), -EREMOTEIO);
	ck_assert_msg(strstr(err.msg, "nosuch") != NULL, "closefd nosuch: %s", err.msg);
	ck_assert_int_eq(qmp_migrate_cap_get(v.q, "no-such-cap", &on, &err), -ENOENT);
	ck_assert_int_eq(qmp_migrate_cap_get(v.q, "x-ignore-shared", &on, &err), 0);
	ck_assert(!on);

	/* getfd then closefd: the name is known, then gone. */
	fd = open("/dev/null", O_RDONLY);
	ck_assert_msg(qmp_getfd(v.q, fd, "spare", &err) == 0, "getfd: %s", err.msg);
	close(fd);
	ck_assert_msg(qmp_closefd(v.q, "spare", &err) == 0, "closefd: %s", err.msg);
	ck_assert_int_eq(qmp_closefd(v.q, "spare", &err), -EREMOTEIO);

	vm_stop(&v);
	tu_rmdir(dir);
}
END_TEST

START_TEST(stopped_or_dead_qemu_fails_by_deadline)
{
	struct cli_err err = { "" };
	char dir[64], st[32];
	const char *args[] = { "-m", "64M", NULL };
	struct vm v;
	uint64_t t0, took;
	int r;

	vm_dir(dir, sizeof(dir), "qmp");
	vm_start(&v, dir, "vm", args);
	ck_assert_int_eq(kill(v.p.pid, SIGSTOP), 0);
	qmp_set_timeout(v.q, 500);
	t0 = tu_now_ms();
	r = qmp_status(v.q, st, sizeof(st), &err);
	took = tu_now_ms() - t0;
	ck_assert_msg(r == -ETIMEDOUT, "query-status on a stopped QEMU: %d %s", r, err.msg);
	ck_assert_msg(took >= 450 && took < 2000, "took %" PRIu64 " ms", took);
	ck_assert_msg(strstr(err.msg, "500 ms") != NULL, "%s", err.msg);

	/* The late answer to the call that timed out is dropped, not taken
	 * for the next one's. */
	ck_assert_int_eq(kill(v.p.pid, SIGCONT), 0);
	qmp_set_timeout(v.q, 5000);
	ck_assert_msg(qmp_stop(v.q, &err) == 0, "stop: %s", err.msg);
	vm_expect_status(&v, "paused");

	tu_kill(&v.p, SIGKILL);
	tu_wait(&v.p, 5000);
	t0 = tu_now_ms();
	r = qmp_status(v.q, st, sizeof(st), &err);
	ck_assert_msg(r == -ECONNRESET, "query-status on a dead QEMU: %d %s", r, err.msg);
	ck_assert(tu_now_ms() - t0 < 1000);
	vm_stop(&v);
	tu_rmdir(dir);
}
END_TEST

START_TEST(backends_found_and_mapped)
{
	struct cli_err err = { "" };
	char dir[64], mem[256], priv[256], fdp[64];
	const char *args[] = {
		"-machine", "pc,memory-backend=mem", "-m", "64M,slots=2,maxmem=1G",
		"-object", mem,
		"-object", "memory-backend-memfd,id=extra,size=8M,share=on",
		"-device", "pc-dimm,id=dimm0,memdev=extra",
		/* In no guest memory: the one left of 8 MiB once extra is named. */
		"-object", "memory-backend-memfd,id=spare,size=8M,share=on",
		/* In no guest memory and alike: nothing tells them apart. */
		"-object", "memory-backend-memfd,id=twin1,size=2M,share=on",
		"-object", "memory-backend-memfd,id=twin2,size=2M,share=on",
		"-object", "memory-backend-ram,id=anon,size=4M",
		"-object", priv, NULL };
	const struct qram_backend *b;
	struct qram_backend *list;
	struct vm v;
	struct stat st;
	size_t n;
	int r;

	vm_dir(dir, sizeof(dir), "qmp");
	snprintf(mem, sizeof(mem), "memory-backend-file,id=mem,size=64M,mem-path=%s/vm.ram,share=on", dir);
	snprintf(priv, sizeof(priv), "memory-backend-file,id=priv,size=4M,mem-path=%s/priv.ram,share=off", dir);
	vm_start(&v, dir, "vm", args);
	r = qram_backends(v.q, &list, &n, &err);
	ck_assert_msg(r == 0, "qmp_backends: %d %s", r, err.msg);
	ck_assert_uint_eq(n, 7);
	snprintf(fdp, sizeof(fdp), "/proc/%d/fd/", (int)v.p.pid);

	b = by_id(list, n, "mem");
	ck_assert(b->kind == QRAM_FILE && b->size == 64 << 20 && b->shared && b->in_guest);
	snprintf(mem, sizeof(mem), "%s/vm.ram", dir);
	ck_assert_str_eq(b->path, mem);
	ck_assert_int_eq(stat(mem, &st), 0);
	ck_assert(st.st_dev == b->dev && st.st_ino == b->ino && maps_file(v.p.pid, b->dev, b->ino));
	poke_through(&v, b, MARK_GPA, MARK_GPA, MARK);

	b = by_id(list, n, "extra");
	ck_assert(b->kind == QRAM_MEMFD && b->size == 8 << 20 && b->shared && b->in_guest);
	ck_assert_msg(!strncmp(b->path, fdp, strlen(fdp)), "extra: path %s", b->path);
	ck_assert(maps_file(v.p.pid, b->dev, b->ino));
	/* The DIMM is the first at the start of device memory, 4 GiB. */
	poke_through(&v, b, 0x1000, 0x100001000ull, MARK + 1);

	b = by_id(list, n, "spare");
	ck_assert(b->kind == QRAM_MEMFD && b->size == 8 << 20 && b->shared && !b->in_guest);
	ck_assert_msg(!strncmp(b->path, fdp, strlen(fdp)), "spare: path %s", b->path);
	ck_assert(maps_file(v.p.pid, b->dev, b->ino));
	ck_assert(b->ino != by_id(list, n, "extra")->ino);

	ck_assert_str_eq(by_id(list, n, "twin1")->path, "");
	ck_assert_str_eq(by_id(list, n, "twin2")->path, "");
	b = by_id(list, n, "anon");
	ck_assert(b->kind == QRAM_RAM && !b->shared && !b->in_guest && !*b->path);
	b = by_id(list, n, "priv");
	ck_assert(b->kind == QRAM_FILE && !b->shared && !*b->path && b->size == 4 << 20);

	r = qram_check(v.q, list, n, &err);
	ck_assert_msg(r == 0, "qmp_guest_ram_shared: %s", err.msg);
	free(list);
	vm_stop(&v);
	tu_rmdir(dir);
}
END_TEST

static void expect_not_shared(struct vm *v, const char *id)
{
	struct qram_backend *list;
	struct cli_err err = { "" };
	size_t n;
	int r = qram_backends(v->q, &list, &n, &err);

	ck_assert_msg(r == 0, "%s: qmp_backends: %s", v->name, err.msg);
	ck_assert(by_id(list, n, id)->in_guest && !by_id(list, n, id)->shared);
	r = qram_check(v->q, list, n, &err);
	ck_assert_msg(r == -ENOTSUP, "%s: qmp_guest_ram_shared: %d %s", v->name, r, err.msg);
	ck_assert_msg(strstr(err.msg, id) && strstr(err.msg, "share=on"), "%s", err.msg);
	fprintf(stderr, "qmp: %s: %s\n", v->name, err.msg);
	free(list);
}

START_TEST(unshared_guest_ram_refused)
{
	char dir[64], obj[256];
	/* Plain -m: QEMU makes a memory-backend-ram named pc.ram. */
	const char *plain[] = { "-m", "64M", NULL };
	const char *priv[] = { "-machine", "pc,memory-backend=mem", "-m", "64M", "-object", obj, NULL };
	struct vm a, b;

	vm_dir(dir, sizeof(dir), "qmp");
	snprintf(obj, sizeof(obj), "memory-backend-file,id=mem,size=64M,mem-path=%s/vm.ram,share=off", dir);
	vm_start(&a, dir, "plain", plain);
	vm_start(&b, dir, "private", priv);
	expect_not_shared(&a, "pc.ram");
	expect_not_shared(&b, "mem");
	vm_stop(&a);
	vm_stop(&b);
	tu_rmdir(dir);
}
END_TEST

/* A QEMU that maps its guest RAM file read-only (readonly=on, r--s) could
 * be anyone posing as QEMU: a file it may only read must not be handed to
 * a command that would open it read-write with its own, often root,
 * rights and write the source's memory into it.  On both QEMUs (_i, one of
 * VM_QEMU_*): 10.0 in its own root, its file seen through /proc/PID/root. */
START_TEST(readonly_guest_ram_refused)
{
	const struct vm_qemu *qemu = &vm_qemus[_i];
	struct cli_err err = { "" };
	char dir[64], obj[256], ram[128], inner[256];
	const char *args[] = { "-machine", "pc,memory-backend=mem", "-object", obj,
			       "-incoming", "defer", NULL };
	struct qram_backend *b = NULL;
	size_t n = 0;
	struct vm v;
	int fd, r;

	vm_dir(dir, sizeof(dir), "qmp");
	snprintf(ram, sizeof(ram), "%s/ro.ram", dir);
	fd = open(ram, O_RDWR | O_CREAT | O_EXCL, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 64 << 20), 0);
	close(fd);
	snprintf(obj, sizeof(obj), "memory-backend-file,id=mem,size=64M,mem-path=%s,share=on,"
		 "readonly=on", vm_inner_path(qemu, dir, "ro.ram", inner, sizeof(inner)));
	vm_start_qemu(&v, qemu, dir, "readonly", args);
	r = qram_backends(v.q, &b, &n, &err);
	free(b);
	ck_assert_msg(r == -EACCES, "qmp_backends: %d %s", r, err.msg);
	ck_assert_msg(strstr(err.msg, "mem") && strstr(err.msg, "read-only"), "%s", err.msg);
	fprintf(stderr, "qmp: readonly, QEMU %s: %s\n", v.version, err.msg);
	vm_stop(&v);
	tu_rmdir(dir);
}
END_TEST

/* Whoever answers on the QMP socket could swap the file a backend's path
 * names between the look and the open (a symlink, a file renamed over
 * it): the command must map the file QEMU maps, or refuse, naming both. */
START_TEST(swapped_ram_file_refused)
{
	struct cli_err err = { "" };
	char dir[64], obj[256], ram[128], other[140];
	const char *args[] = { "-machine", "pc,memory-backend=mem", "-object", obj, "-S", NULL };
	struct cli_ram *rams = NULL;
	unsigned n = 0;
	struct vm v;
	int fd, r;

	vm_dir(dir, sizeof(dir), "qmp");
	snprintf(ram, sizeof(ram), "%s/vm.ram", dir);
	snprintf(other, sizeof(other), "%s/other.ram", dir);
	snprintf(obj, sizeof(obj), "memory-backend-file,id=mem,size=64M,mem-path=%s,share=on", ram);
	vm_start(&v, dir, "swap", args);
	r = qram_blocks(v.q, &rams, &n, &err);
	ck_assert_msg(r == 0 && n == 1, "qram_blocks: %d %s", r, err.msg);
	/* Another file of the same size takes the name. */
	fd = open(other, O_RDWR | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 64 << 20), 0);
	close(fd);
	ck_assert_int_eq(rename(other, ram), 0);
	r = cli_ram_map_ro(&rams[0], &err);
	if (!r)
		cli_ram_unmap(&rams[0]);
	ck_assert_msg(r == -ESTALE, "a swapped file was mapped: %d %s", r, err.msg);
	ck_assert_msg(strstr(err.msg, ram) && strstr(err.msg, "no longer the file QEMU maps"), "%s",
		      err.msg);
	fprintf(stderr, "qmp: swapped file: %s\n", err.msg);
	free(rams);
	vm_stop(&v);
	tu_rmdir(dir);
}
END_TEST

/* Moves what @in yields to @out until EOF, as the commands will: the bytes
 * relayed, or -errno. */
static long relay(int in, int out, int timeout_ms)
{
	uint64_t end = tu_now_ms() + (uint64_t)timeout_ms;
	struct pollfd pfd = { .fd = in, .events = POLLIN };
	char buf[65536];
	long total = 0;
	ssize_t n, w, off;

	for (;;) {
		if (poll(&pfd, 1, (int)(end - tu_now_ms())) <= 0 || tu_now_ms() >= end)
			return -ETIMEDOUT;
		n = read(in, buf, sizeof(buf));
		if (n <= 0)
			return n < 0 ? -errno : total;
		for (off = 0; off < n; off += w) {
			w = write(out, buf + off, (size_t)(n - off));
			if (w < 0)
				return -errno;
		}
		total += n;
	}
}

static void copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY);
	static char buf[1 << 20];
	ssize_t n;

	ck_assert(in >= 0 && out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	ck_assert_int_eq(n, 0);
	close(in);
	close(out);
}

/* Discovery on a running and on an "inmigrate" QEMU alike. */
static void expect_ram_file(struct vm *v, const char *file)
{
	struct qram_backend *list;
	struct cli_err err = { "" };
	const char *path;
	size_t n;

	ck_assert_msg(qram_backends(v->q, &list, &n, &err) == 0, "%s: %s", v->name, err.msg);
	ck_assert_uint_eq(n, 1);
	path = strrchr(list[0].path, '/');
	ck_assert_msg(path && !strcmp(path + 1, file), "%s: path %s", v->name, list[0].path);
	ck_assert_msg(qram_check(v->q, list, n, &err) == 0, "%s", err.msg);
	free(list);
}

struct pair {
	char dir[64], sobj[256], dobj[256];
	struct vm src, dst;
	int a[2], b[2]; /* source -> us, us -> destination */
};

/* Two QEMUs, the source running, the destination waiting with -incoming
 * defer and @dst_size of RAM; both set for x-ignore-shared. */
static void pair_start(struct pair *p, const char *dst_size)
{
	const char *sargs[] = { "-machine", "pc,memory-backend=mem", "-m", "64M", "-object", p->sobj, NULL };
	const char *dargs[] = { "-machine", "pc,memory-backend=mem", "-m", dst_size, "-object", p->dobj,
				"-incoming", "defer", NULL };
	struct vm *both[2] = { &p->src, &p->dst };
	struct cli_err err = { "" };
	bool on = true;
	int i;

	vm_dir(p->dir, sizeof(p->dir), "qmp");
	snprintf(p->sobj, sizeof(p->sobj),
		 "memory-backend-file,id=mem,size=64M,mem-path=%s/src.ram,share=on", p->dir);
	snprintf(p->dobj, sizeof(p->dobj),
		 "memory-backend-file,id=mem,size=%s,mem-path=%s/dst.ram,share=on", dst_size, p->dir);
	vm_start(&p->src, p->dir, "src", sargs);
	vm_start(&p->dst, p->dir, "dst", dargs);
	vm_expect_status(&p->src, "running");
	vm_expect_status(&p->dst, "inmigrate");
	for (i = 0; i < 2; i++) {
		expect_ram_file(both[i], i ? "dst.ram" : "src.ram");
		ck_assert_int_eq(qmp_migrate_cap_get(both[i]->q, "x-ignore-shared", &on, &err), 0);
		ck_assert(!on);
		ck_assert_msg(qmp_migrate_cap_set(both[i]->q, "x-ignore-shared", true, &err) == 0,
			      "%s: %s", both[i]->name, err.msg);
		ck_assert_int_eq(qmp_migrate_cap_get(both[i]->q, "x-ignore-shared", &on, &err), 0);
		ck_assert(on);
	}
	ck_assert(pipe2(p->a, O_CLOEXEC) == 0 && pipe2(p->b, O_CLOEXEC) == 0);
}

/* Hands the pipes' ends to the QEMUs (our copies closed, so that EOF comes
 * through) and starts both sides. */
static void pair_migrate(struct pair *p)
{
	struct qmp_migration m;
	struct cli_err err = { "" };

	ck_assert_msg(qmp_getfd(p->src.q, p->a[1], "mig", &err) == 0, "src getfd: %s", err.msg);
	ck_assert_msg(qmp_getfd(p->dst.q, p->b[0], "mig", &err) == 0, "dst getfd: %s", err.msg);
	close(p->a[1]);
	close(p->b[0]);
	ck_assert_msg(qmp_migrate_incoming(p->dst.q, "fd:mig", &err) == 0, "%s", err.msg);
	ck_assert_int_eq(qmp_migrate_query(p->dst.q, &m, &err), 0);
	ck_assert_msg(!strcmp(m.status, "none") || !strcmp(m.status, "setup"), "dst %s", m.status);
	ck_assert_msg(qmp_migrate(p->src.q, "fd:mig", &err) == 0, "%s", err.msg);
}

static void pair_stop(struct pair *p)
{
	vm_stop(&p->src);
	vm_stop(&p->dst);
	tu_rmdir(p->dir);
}

START_TEST(fd_migration_end_to_end)
{
	struct cli_err err = { "" };
	char from[128], to[128];
	struct qmp_migration m;
	struct pair p;
	uint32_t mark = MARK;
	long moved;
	int fd, r;

	pair_start(&p, "64M");
	ck_assert_msg(qmp_stop(p.src.q, &err) == 0, "%s", err.msg);
	snprintf(from, sizeof(from), "%s/src.ram", p.dir);
	snprintf(to, sizeof(to), "%s/dst.ram", p.dir);
	fd = open(from, O_WRONLY);
	ck_assert_int_eq(pwrite(fd, &mark, sizeof(mark), MARK_GPA), sizeof(mark));
	close(fd);
	copy_file(from, to); /* what rdmig carries */

	pair_migrate(&p);
	moved = relay(p.a[0], p.b[1], 20000);
	close(p.a[0]);
	close(p.b[1]);
	/* Device state and ROMs only: the 64 MiB of RAM stayed out. */
	ck_assert_msg(moved > 0 && moved < (4 << 20), "relayed %ld bytes", moved);
	r = qmp_migrate_wait(p.src.q, 10000, &m, &err);
	ck_assert_msg(r == 0, "source: %s (%s)", err.msg, m.status);
	r = qmp_migrate_wait(p.dst.q, 10000, &m, &err);
	ck_assert_msg(r == 0, "destination: %s (%s)", err.msg, m.status);
	ck_assert_str_eq(m.status, "completed");
	vm_expect_status(&p.src, "postmigrate");
	/* The source was paused, so the destination stays paused. */
	vm_expect_status(&p.dst, "paused");
	ck_assert_msg(qmp_cont(p.dst.q, &err) == 0, "%s", err.msg);
	vm_expect_status(&p.dst, "running");
	ck_assert_uint_eq(guest_word(&p.dst, MARK_GPA), MARK);
	ck_assert_int_eq(qmp_migrate_query(p.dst.q, &m, &err), 0);
	ck_assert_str_eq(m.status, "completed");
	pair_stop(&p);
}
END_TEST

/* A destination whose RAM does not match fails to load, and QEMU 7.2 then
 * exits: its QMP socket closes; the source reports the broken stream. */
START_TEST(failed_incoming_load)
{
	struct cli_err err = { "" };
	struct qmp_migration m;
	struct pair p;
	int r;

	signal(SIGPIPE, SIG_IGN);
	pair_start(&p, "32M");
	ck_assert_msg(qmp_stop(p.src.q, &err) == 0, "%s", err.msg);
	pair_migrate(&p);
	relay(p.a[0], p.b[1], 20000);
	close(p.a[0]);
	close(p.b[1]);
	r = qmp_migrate_wait(p.dst.q, 10000, &m, &err);
	ck_assert_msg(r == -ECONNRESET, "destination: %d %s (%s)", r, err.msg, m.status);
	ck_assert_int_eq(tu_wait(&p.dst.p, 5000), 0);
	ck_assert_int_eq(tu_exit_code(&p.dst.p), 1);
	r = qmp_migrate_wait(p.src.q, 10000, &m, &err);
	fprintf(stderr, "qmp: source after a failed load: %d %s, \"%s\"\n", r, m.status, err.msg);
	ck_assert_msg(r == 0 || (r == -EIO && *err.msg), "source: %d %s", r, err.msg);
	pair_stop(&p);
}
END_TEST

void qmp_cases(Suite *s)
{
	TCase *tc = tu_case(s, "qemu", 90);

	tcase_add_test(tc, open_status_events_errors);
	tcase_add_test(tc, stopped_or_dead_qemu_fails_by_deadline);
	tcase_add_test(tc, backends_found_and_mapped);
	tcase_add_test(tc, unshared_guest_ram_refused);
	tcase_add_loop_test(tc, readonly_guest_ram_refused, 0, VM_QEMUS);
	tcase_add_test(tc, swapped_ram_file_refused);
	tcase_add_test(tc, fd_migration_end_to_end);
	tcase_add_test(tc, failed_incoming_load);
}
