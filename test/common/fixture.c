#include "fixture.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "testutil.h"

void tu_write_file(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	ck_assert_int_eq(close(fd), 0);
}

void tu_write_random(const char *path, size_t len, uint64_t seed)
{
	void *buf = malloc(len);

	ck_assert_ptr_nonnull(buf);
	tu_fill_random(buf, len, seed);
	tu_write_file(path, buf, len, 0644);
	free(buf);
}

void tu_assert_same(const char *a, const char *b)
{
	size_t la, lb, i;
	char *da = tu_slurp(a, &la), *db = tu_slurp(b, &lb);

	ck_assert_msg(da && db, "missing %s or %s", a, b);
	ck_assert_msg(la == lb, "%s holds %zu bytes, %s %zu", a, la, b, lb);
	if (memcmp(da, db, la)) {
		for (i = 0; i < la && da[i] == db[i]; i++)
			;
		ck_abort_msg("%s and %s differ at offset %zu of %zu", a, b, i, la);
	}
	free(da);
	free(db);
}

int tu_count_matching(const char *path, const char *a, const char *b)
{
	char *text = tu_slurp(path, NULL), *line, *save = NULL;
	int n = 0;

	for (line = text ? strtok_r(text, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save))
		n += strstr(line, a) && strstr(line, b);
	free(text);
	return n;
}

int tu_file_has(const char *path, const char *needle)
{
	char *text = tu_slurp(path, NULL);
	int found = text && strstr(text, needle);

	free(text);
	return found;
}

void tu_first_line(const char *path, char *buf, size_t len)
{
	char *text = tu_slurp(path, NULL);

	snprintf(buf, len, "%s", text ? text : "");
	buf[strcspn(buf, "\n")] = '\0';
	free(text);
}

int tu_kernel_at_least(int major, int minor)
{
	struct utsname u;
	int maj = 0, min = 0;

	ck_assert_int_eq(uname(&u), 0);
	ck_assert_int_eq(sscanf(u.release, "%d.%d", &maj, &min), 2);
	return maj > major || (maj == major && min >= minor);
}

void tu_proc_usage(pid_t pid, int *fds, long *rss_kb)
{
	char path[64], line[256];
	struct dirent *de;
	DIR *d;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	ck_assert_ptr_nonnull(d);
	*fds = 0;
	while ((de = readdir(d)))
		*fds += de->d_name[0] != '.';
	closedir(d);
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	*rss_kb = -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			*rss_kb = strtol(line + 6, NULL, 10);
	fclose(f);
}

void tu_fx_init(struct tu_fx *f)
{
	memset(f, 0, sizeof(*f));
	tu_tmpdir(f->dir, sizeof(f->dir));
	snprintf(f->src, sizeof(f->src), "%s/src", f->dir);
	snprintf(f->dst, sizeof(f->dst), "%s/dst", f->dir);
	snprintf(f->ctl, sizeof(f->ctl), "%s/send.ctl", f->dir);
	ck_assert_int_eq(mkdir(f->src, 0755), 0);
	ck_assert_int_eq(mkdir(f->dst, 0755), 0);
	tu_build_path("bin/migrate-recv", f->recvbin, sizeof(f->recvbin));
	tu_build_path("bin/migrate-send", f->sendbin, sizeof(f->sendbin));
	tu_build_path("bin/memload", f->memload, sizeof(f->memload));
	/* A daemon needs a key (or --trusted-fabric): its sources get this. */
	snprintf(f->key, sizeof(f->key), "%s/key", f->dir);
	tu_write_key(f->key);
}

void tu_fx_block(struct tu_fx *f, const char *name, size_t bytes, uint64_t seed)
{
	snprintf(f->file, sizeof(f->file), "%s/%s", f->src, name);
	snprintf(f->ram, sizeof(f->ram), "%s=%s", name, f->file);
	snprintf(f->image, sizeof(f->image), "%s/%s", f->dst, name);
	snprintf(f->mark, sizeof(f->mark), "%s.incomplete", f->image);
	if (bytes)
		tu_write_random(f->file, bytes, seed);
}

void tu_fx_recv(struct tu_fx *f, const char *const *pre, const char *const *args)
{
	tu_recv_listen(&f->recv, f->dir, f->recvbin, pre, args, 20000, f->port,
		       sizeof(f->port), f->addr, sizeof(f->addr));
}

void tu_fx_send(struct tu_fx *f, const char *const *pre, const char *const *args)
{
	struct tu_argv a = { .n = 0 };

	tu_argv_add(&a, pre);
	tu_argv_add(&a, (const char *[]){ f->sendbin, "--connect", f->addr, NULL });
	tu_argv_add(&a, f->send_opts);
	tu_argv_add(&a, args);
	tu_run_spawn(&f->send, f->dir, "send", a.v);
}

void tu_fx_load(struct tu_fx *f, const char *file, const char *size, const char *rate)
{
	tu_memload(&f->load, f->dir, f->memload, file, size, "7",
		   (const char *[]){ "--rate", rate, NULL });
	snprintf(f->pid, sizeof(f->pid), "%d", (int)f->load.p.pid);
}

int tu_fx_recv_term(struct tu_fx *f)
{
	tu_kill(&f->recv.p, SIGTERM);
	return tu_run_finish(&f->recv, 10000);
}

void tu_fx_assert_load_runs(struct tu_fx *f)
{
	ck_assert_int_eq(kill(f->load.p.pid, 0), 0);
	ck_assert_msg(tu_proc_state(f->load.p.pid, NULL) != 'T', "the workload was left stopped");
}

void tu_fx_free(struct tu_fx *f)
{
	tu_run_stop(&f->load);
	tu_run_stop(&f->recv);
	tu_run_stop(&f->send);
	tu_rmdir(f->dir);
}
