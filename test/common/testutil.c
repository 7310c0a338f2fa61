#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t tu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void tu_tmpdir(char *buf, size_t len)
{
	const char *base = getenv("TMPDIR");

	snprintf(buf, len, "%s/rdmig-test.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(buf)) {
		perror("mkdtemp");
		abort();
	}
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void tu_rmdir(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tu_build_path(const char *rel, char *buf, size_t len)
{
	const char *b = getenv("RDMIG_BUILD");
	char self[512];
	ssize_t n;

	if (b && *b) {
		snprintf(buf, len, "%s/%s", b, rel);
		return buf;
	}
	/* Test binaries live in build/test: the build root is one level up. */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0)
		n = 0;
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(buf, len, "%s/%s", self, rel);
	return buf;
}

/* make passes the tree it ran in; elsewhere, the current directory. */
#ifndef RDMIG_SRCDIR
#define RDMIG_SRCDIR "."
#endif

const char *tu_src_path(const char *rel, char *buf, size_t len)
{
	const char *s = getenv("RDMIG_SRCDIR");

	snprintf(buf, len, "%s/%s", s && *s ? s : RDMIG_SRCDIR, rel);
	return buf;
}

const char *tu_addr(void)
{
	const char *a = getenv("RDMIG_TEST_ADDR");

	return a && *a ? a : "10.77.0.1";
}

void tu_die_with_parent(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* The parent may have gone before the prctl. */
	if (getppid() != parent)
		_exit(126);
}

void tu_child_stdio(const char *out, const char *err)
{
	int o = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	int e = err ? open(err, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644) : dup(o);
	int n = open("/dev/null", O_RDONLY);

	if (o < 0 || e < 0 || n < 0)
		_exit(126);
	dup2(n, 0);
	dup2(o, 1);
	dup2(e, 2);
	close(n);
	close(o);
	close(e);
}

int tu_spawn(struct tu_proc *p, const char *out_path, char *const argv[])
{
	pid_t parent = getpid(), pid;

	memset(p, 0, sizeof(*p));
	snprintf(p->out_path, sizeof(p->out_path), "%s", out_path);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		tu_die_with_parent(parent);
		setpgid(0, 0);
		tu_child_stdio(out_path, NULL);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	p->pid = pid;
	return 0;
}

int tu_reap(struct tu_proc *p)
{
	if (!p->reaped && waitpid(p->pid, &p->status, WNOHANG) == p->pid)
		p->reaped = 1;
	return p->reaped;
}

char tu_proc_state(pid_t pid, pid_t *ppid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	if (ppid)
		*ppid = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return '?';
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The name is in parentheses and may hold either: the state is the
	 * field after the last ')'. */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return '?';
	if (ppid && p[3] == ' ')
		*ppid = (pid_t)atoi(p + 4);
	return p[2];
}

void tu_proc_wchan(pid_t pid, char *buf, size_t len)
{
	char path[64];
	FILE *f;
	size_t n = 0;

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	f = fopen(path, "r");
	if (f) {
		n = fread(buf, 1, len - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
}

int tu_wait(struct tu_proc *p, int timeout_ms)
{
	uint64_t end = tu_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		if (tu_reap(p))
			return 0;
		if (tu_now_ms() >= end) {
			kill(-p->pid, SIGKILL);
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &p->status, 0);
			p->reaped = 1;
			return -1;
		}
		usleep(10000);
	}
}

int tu_exit_code(const struct tu_proc *p)
{
	if (WIFEXITED(p->status))
		return WEXITSTATUS(p->status);
	if (WIFSIGNALED(p->status))
		return 128 + WTERMSIG(p->status);
	return -1;
}

void tu_kill(struct tu_proc *p, int sig)
{
	if (p->pid > 0 && !p->reaped)
		kill(p->pid, sig);
}

char *tu_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0, r;

	if (!f)
		return NULL;
	for (;;) {
		if (cap - n < 4096) {
			char *nb = realloc(buf, cap ? cap * 2 : 8192);

			if (!nb) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
			cap = cap ? cap * 2 : 8192;
		}
		r = fread(buf + n, 1, cap - n - 1, f);
		if (r == 0)
			break;
		n += r;
	}
	fclose(f);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

int tu_wait_line(const char *path, const char *prefix, char *rest, size_t len,
		 int timeout_ms)
{
	uint64_t end = tu_now_ms() + (uint64_t)timeout_ms;
	size_t plen = strlen(prefix);

	do {
		char *text = tu_slurp(path, NULL);
		char *line = text;

		while (line && *line) {
			char *nl = strchr(line, '\n');

			if (!nl)
				break; /* incomplete line: wait for the rest */
			*nl = '\0';
			if (!strncmp(line, prefix, plen)) {
				if (rest)
					snprintf(rest, len, "%s", line + plen);
				free(text);
				return 0;
			}
			line = nl + 1;
		}
		free(text);
		usleep(20000);
	} while (tu_now_ms() < end);
	return -1;
}

void tu_dump(const char *label, const char *path)
{
	char *text = tu_slurp(path, NULL);

	fprintf(stderr, "---- %s (%s) ----\n%s---- end %s ----\n", label, path,
		text ? text : "(no output)\n", label);
	free(text);
}

/* splitmix64: fast, and the same stream on every side. */
void tu_fill_random(void *buf, size_t len, uint64_t seed)
{
	unsigned char *p = buf;
	uint64_t x = seed, z;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		z = (x += 0x9e3779b97f4a7c15ULL);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
		z ^= z >> 31;
		memcpy(p + i, &z, 8);
	}
	for (; i < len; i++)
		p[i] = (unsigned char)(x >> (i % 8));
}

int tu_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

int tu_same_file(const char *a, const char *b)
{
	size_t la, lb;
	char *da = tu_slurp(a, &la), *db = tu_slurp(b, &lb);
	int same = da && db && la == lb && !memcmp(da, db, la);

	free(da);
	free(db);
	return same;
}

void tu_write_key(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);

	if (fd < 0 || write(fd, "a shared secret of 32 bytes here", 32) != 32) {
		perror(path);
		abort();
	}
	close(fd);
}

void tu_field(const char *path, const char *key, char *out, size_t len)
{
	char *text = tu_slurp(path, NULL), *p, *nl;

	out[0] = '\0';
	p = text ? strstr(text, key) : NULL;
	if (p) {
		p += strlen(key);
		nl = strchr(p, '\n');
		if (nl)
			*nl = '\0';
		snprintf(out, len, "%s", p);
	}
	free(text);
}
