#include "qemu_vm.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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

void vm_dir(char *dir, size_t len, const char *tag)
{
	snprintf(dir, len, "/dev/shm/rdmig-%s.XXXXXX", tag);
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

/* QEMU dies with the test process, whatever ends it. */
static void spawn_qemu(struct tu_proc *p, const char *log, char *const argv[])
{
	pid_t parent = getpid(), pid;
	int fd;

	memset(p, 0, sizeof(*p));
	snprintf(p->out_path, sizeof(p->out_path), "%s", log);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(126);
		fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			_exit(126);
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
		fd = open("/dev/null", O_RDONLY);
		dup2(fd, 0);
		execv(argv[0], argv);
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

void vm_start(struct vm *v, const char *dir, const char *name, const char *const *args)
{
	char bin[512], qmpopt[300], chr[320], err[512] = "";
	const char *argv[48] = { bin, "-accel", "tcg", "-nographic", "-nodefaults", "-qmp", qmpopt,
				 "-chardev", chr, "-mon", "chardev=cmd,mode=control" };
	size_t n = 11;
	uint64_t end = tu_now_ms() + 30000;
	int r;

	memset(v, 0, sizeof(*v));
	qemu_bin(bin, sizeof(bin));
	snprintf(v->name, sizeof(v->name), "%s", name);
	snprintf(v->sock, sizeof(v->sock), "%s/%s.sock", dir, name);
	snprintf(v->log, sizeof(v->log), "%s/%s.log", dir, name);
	snprintf(v->cmd_sock, sizeof(v->cmd_sock), "%s/%s-cmd.sock", dir, name);
	snprintf(qmpopt, sizeof(qmpopt), "unix:%s,server=on,wait=off", v->sock);
	snprintf(chr, sizeof(chr), "socket,id=cmd,path=%s,server=on,wait=off", v->cmd_sock);
	while (*args && n < 47)
		argv[n++] = *args++;
	argv[n] = NULL;
	spawn_qemu(&v->p, v->log, (char *const *)argv);
	do {
		r = qmp_open(&v->q, v->sock, 5000, err, sizeof(err));
		if (r == -ENOENT || r == -ECONNREFUSED)
			usleep(20000);
	} while ((r == -ENOENT || r == -ECONNREFUSED) && !vm_exited(v) && tu_now_ms() < end);
	if (r)
		tu_dump(name, v->log);
	ck_assert_msg(r == 0, "%s: qmp_open: %d %s", name, r, err);
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
	char st[32] = "", err[512] = "";
	int r = qmp_status(v->q, st, sizeof(st), err, sizeof(err));

	ck_assert_msg(r == 0, "%s: qmp_status: %s", v->name, err);
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

void guest_image(const char *img, unsigned delay)
{
	char bin[512], src[512], d[16], line[512];
	char *argv[] = { bin, "image", src, (char *)img, "--delay", d, NULL };

	tu_build_path("bin/guestcheck", bin, sizeof(bin));
	tu_build_path("guest/bootsect.img", src, sizeof(src));
	snprintf(d, sizeof(d), "%u", delay);
	ck_assert_msg(run_guestcheck(argv, line, sizeof(line)) == 0, "guestcheck image: %s", line);
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

int guest_check(const char *ram, char *line, size_t len)
{
	char bin[512];
	char *argv[] = { bin, "ram", (char *)ram, NULL };

	tu_build_path("bin/guestcheck", bin, sizeof(bin));
	return run_guestcheck(argv, line, len);
}
