/* The cgroup v2 throttle: the target's threads move into a threaded child
 * of the cgroup each is in ("rdmig-throttle.PID", PID migrate-send's),
 * whose cpu.max gives them (100 - pct) percent of the CPUs they could use
 * (the CFS bandwidth controller: CONFIG_CFS_BANDWIDTH).
 *
 * Why a threaded child: only threads, not their whole process, are to be
 * slowed (a QEMU's vCPUs, not its monitor or its migration thread), and
 * cgroup v2 puts threads of one process in different cgroups only inside a
 * threaded subtree.  Making the child threaded turns the threads' cgroup
 * into the subtree's root (cgroup.type "domain threaded"); the cpu
 * controller, a threaded one, may then be enabled there although the
 * cgroup holds processes.  So this works for a QEMU or a process in the
 * root cgroup, in a service's cgroup, and in libvirt's per-vCPU threaded
 * cgroups alike (a child each: their own limits still bind).  What it
 * needs: cgroup v2 mounted, the cpu controller available to the threads'
 * cgroup (its parent's cgroup.subtree_control: systemd's Delegate=yes for
 * a unit, libvirt's own cgroups have it), and write access there (root).
 *
 * Release puts every thread of the child back into its cgroup and removes
 * the child; the cpu controller, if enabled here, is disabled again once
 * no child cgroup is left (another migrate-send's would lose its limit). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "proc.h"
#include "throttle_int.h"

/* A thread held by its quota may hold a lock others wait for (QEMU's
 * big lock, taken by a vCPU thread for I/O): they wait up to a period.
 * So the period is short, 10 ms, and longer only as the throttle needs:
 * CFS takes no quota below 1 ms, so 99 % needs 100 ms. */
#define PERIOD_US 10000u
#define MAX_PERIOD_US 100000u
#define MIN_QUOTA_US 1000u
#define MAX_GROUPS 16
#define MAX_TIDS 1024

struct cg_group {
	char rel[512];          /* the threads' cgroup below the mount, "." for its root */
	unsigned nthreads;
	int fd;                 /* its directory, while made */
	int child;              /* our threaded child's, while made */
	bool made, added_cpu;
};

struct cg {
	int rootfd;             /* the cgroup2 mount */
	char mount[512];
	char mroot[512];        /* the mount's root within the hierarchy ("/") */
	const struct proc_ref *proc;
	pid_t tids[MAX_TIDS];
	unsigned ntids;
	bool all;               /* every thread of the process */
	char name[64];
	struct cg_group g[MAX_GROUPS];
	unsigned ng;
	unsigned pct;           /* applied */
	long ncpu;
	char where[1200];
};

/* ---- files ------------------------------------------------------------------ */

static int write_at(int dirfd, const char *file, const char *text)
{
	int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC);
	ssize_t n;
	int rc = 0;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	if (n < 0)
		rc = -errno;
	else if ((size_t)n != strlen(text))
		rc = -EIO;
	close(fd);
	return rc;
}

/* The first @len - 1 bytes of @file, NUL-terminated. */
static int read_at(int dirfd, const char *file, char *buf, size_t len)
{
	int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

/* Whether the word @w is in the space-separated list @list. */
static bool has_word(const char *list, const char *w)
{
	size_t n = strlen(w);
	const char *p;

	for (p = list; (p = strstr(p, w)); p += n)
		if ((p == list || p[-1] == ' ') && (!p[n] || p[n] == ' ' || p[n] == '\n'))
			return true;
	return false;
}

/* mountinfo's octal escapes (\040 for a space) undone in place. */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++, o++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o = *s;
		}
	}
	*o = '\0';
}

/* The first cgroup2 mount of ours, and its root within the hierarchy. */
static int find_mount(struct cg *c, struct cli_err *err)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096], root[512], point[512];
	int found = 0;

	if (!f)
		return cli_err_set(err, -errno, "/proc/self/mountinfo: %s", strerror(errno));
	while (!found && fgets(line, sizeof(line), f)) {
		const char *dash = strstr(line, " - cgroup2 ");

		if (!dash || sscanf(line, "%*s %*s %*s %511s %511s", root, point) != 2)
			continue;
		unescape(root);
		unescape(point);
		snprintf(c->mount, sizeof(c->mount), "%s", point);
		snprintf(c->mroot, sizeof(c->mroot), "%s", root);
		found = 1;
	}
	fclose(f);
	if (!found)
		return cli_err_set(err, -ENOENT, "cgroup v2 is not mounted (mount -t cgroup2 "
				   "none /sys/fs/cgroup, as systemd does)");
	c->rootfd = open(c->mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->rootfd < 0)
		return cli_err_set(err, -errno, "%s: %s", c->mount, strerror(errno));
	return 0;
}

/* Thread @tid's cgroup, relative to the mount ("." for its root). */
static int thread_cgroup(struct cg *c, pid_t tid, char *rel, size_t len, struct cli_err *err)
{
	char file[64], text[4096], *line, *save = NULL;
	size_t mlen = strlen(c->mroot);
	const char *path = NULL;
	ssize_t n;
	int fd;

	snprintf(file, sizeof(file), "task/%d/cgroup", (int)tid);
	fd = proc_openat(c->proc, file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return cli_err_set(err, fd, "thread %d of process %d: %s", (int)tid,
				   (int)c->proc->pid,
				   fd == -ENOENT ? "no such thread" : strerror(-fd));
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n < 0)
		return cli_err_set(err, -errno, "thread %d: %s", (int)tid, strerror(errno));
	text[n] = '\0';
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, "0::", 3))
			path = line + 3;
	if (!path)
		return cli_err_set(err, -ENOTSUP, "thread %d of process %d is in no cgroup v2 "
				   "hierarchy", (int)tid, (int)c->proc->pid);
	/* A mount of a sub-tree (a container's) shows paths below its root. */
	if (strcmp(c->mroot, "/")) {
		if (strncmp(path, c->mroot, mlen) || (path[mlen] && path[mlen] != '/'))
			return cli_err_set(err, -ENOTSUP, "thread %d's cgroup %s is outside "
					   "the cgroup2 mount %s (root %s)", (int)tid, path,
					   c->mount,
					   c->mroot);
		path += mlen;
	}
	while (*path == '/')
		path++;
	snprintf(rel, len, "%s", *path ? path : ".");
	return 0;
}

/* ---- the target's threads, by cgroup ------------------------------------------ */

static int add_tid(void *ctx, pid_t tid, char state)
{
	struct cg *c = ctx;

	(void)state;
	if (c->ntids == MAX_TIDS)
		return -E2BIG;
	c->tids[c->ntids++] = tid;
	return 0;
}

/* The threads (all of the process's, now, when @c->all), grouped by the
 * cgroup each is in. */
static int group_threads(struct cg *c, struct cli_err *err)
{
	char rel[512];
	unsigned i, k;
	int rc;

	if (c->all) {
		c->ntids = 0;
		rc = proc_each_thread(c->proc, add_tid, c);
		if (rc)
			return cli_err_set(err, rc, "the threads of process %d: %s",
					   (int)c->proc->pid, rc == -E2BIG ? "more than 1024" :
					   rc == -ESRCH ? "it exited" : strerror(-rc));
	}
	c->ng = 0;
	for (i = 0; i < c->ntids; i++) {
		rc = thread_cgroup(c, c->tids[i], rel, sizeof(rel), err);
		/* A thread of a whole process may end meanwhile. */
		if (rc == -ENOENT && c->all)
			continue;
		if (rc)
			return rc;
		for (k = 0; k < c->ng && strcmp(c->g[k].rel, rel); k++)
			;
		if (k == c->ng) {
			if (c->ng == MAX_GROUPS)
				return cli_err_set(err, -E2BIG, "the threads are in more than %d "
						   "cgroups", MAX_GROUPS);
			memset(&c->g[k], 0, sizeof(c->g[k]));
			snprintf(c->g[k].rel, sizeof(c->g[k].rel), "%s", rel);
			c->g[k].fd = c->g[k].child = -1;
			c->ng++;
		}
		c->g[k].nthreads++;
	}
	return 0;
}

/* What cgroup @fd (at @path) must allow, checked before anything changes. */
static int check_dir(int fd, const char *path, struct cli_err *err)
{
	char ctl[512], type[64] = "";
	int rc = read_at(fd, "cgroup.controllers", ctl, sizeof(ctl));

	if (rc)
		return cli_err_set(err, rc, "%s/cgroup.controllers: %s", path, strerror(-rc));
	/* The root has no type: it can be anything. */
	rc = read_at(fd, "cgroup.type", type, sizeof(type));
	if (rc && rc != -ENOENT)
		return cli_err_set(err, rc, "%s/cgroup.type: %s", path, strerror(-rc));
	if (!has_word(ctl, "cpu"))
		return cli_err_set(err, -ENOTSUP, "cgroup %s has no cpu controller (its "
				   "parent does not delegate it: enable it in the parent's "
				   "cgroup.subtree_control, or Delegate=yes for a systemd unit)",
				   path);
	if (!strncmp(type, "domain invalid", 14))
		return cli_err_set(err, -ENOTSUP, "cgroup %s is of type \"domain invalid\"",
				   path);
	if (faccessat(fd, "cgroup.subtree_control", W_OK, AT_EACCESS) ||
	    faccessat(fd, "cgroup.threads", W_OK, AT_EACCESS))
		return cli_err_set(err, -EACCES, "cgroup %s: not writable here (root, or a "
				   "delegated cgroup, is needed)", path);
	return 0;
}

static int check_group(struct cg *c, const struct cg_group *g, struct cli_err *err)
{
	char path[800];
	int fd = openat(c->rootfd, g->rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;

	snprintf(path, sizeof(path), "%s/%s", c->mount, g->rel);
	if (fd < 0)
		return cli_err_set(err, -errno, "%s: %s", path, strerror(errno));
	rc = check_dir(fd, path, err);
	close(fd);
	return rc;
}

static int cg_probe(void *st, const struct thr_target *t, struct cli_err *err)
{
	struct cg *c = st;
	struct cli_err why;
	unsigned i;
	int rc;

	c->rootfd = -1;
	c->proc = t->proc;
	c->all = !t->ntids;
	if (t->ntids > MAX_TIDS)
		return cli_err_set(err, -E2BIG, "more than %d threads", MAX_TIDS);
	for (i = 0; i < t->ntids; i++)
		c->tids[i] = t->tids[i];
	c->ntids = t->ntids;
	c->ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (c->ncpu < 1)
		c->ncpu = 1;
	snprintf(c->name, sizeof(c->name), "rdmig-throttle.%d", (int)getpid());
	rc = find_mount(c, &why);
	if (!rc)
		rc = group_threads(c, &why);
	for (i = 0; !rc && i < c->ng; i++)
		rc = check_group(c, &c->g[i], &why);
	if (rc)
		return cli_err_set(err, rc, "cgroup v2: %s", why.msg);
	snprintf(c->where, sizeof(c->where), "%s%s%s/%s%s", c->mount,
		 strcmp(c->g[0].rel, ".") ? "/" : "", strcmp(c->g[0].rel, ".") ? c->g[0].rel : "",
		 c->name, c->ng > 1 ? " (and more)" : "");
	return 0;
}

/* ---- apply and release ------------------------------------------------------ */

static int set_quota(struct cg *c, struct cg_group *g, unsigned pct, struct cli_err *err)
{
	uint64_t cpus = g->nthreads < (unsigned long)c->ncpu ? g->nthreads : (uint64_t)c->ncpu;
	uint64_t period = (uint64_t)MIN_QUOTA_US * 100 / (100 - pct), quota;
	char text[64];
	int rc;

	if (period < PERIOD_US)
		period = PERIOD_US;
	if (period > MAX_PERIOD_US)
		period = MAX_PERIOD_US;
	quota = period * (100 - pct) / 100 * (cpus ? cpus : 1);
	if (quota < MIN_QUOTA_US)
		quota = MIN_QUOTA_US;
	snprintf(text, sizeof(text), "%llu %llu", (unsigned long long)quota,
		 (unsigned long long)period);
	rc = write_at(g->child, "cpu.max", text);
	return rc ? cli_err_set(err, rc, "%s/%s/%s/cpu.max: %s", c->mount, g->rel, c->name,
				strerror(-rc)) : 0;
}

/* Our threaded child of @g's cgroup, with the cpu controller on. */
static int make_child(struct cg *c, struct cg_group *g, struct cli_err *err)
{
	char ctl[512];
	int rc;

	g->fd = openat(c->rootfd, g->rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (g->fd < 0)
		return cli_err_set(err, -errno, "%s/%s: %s", c->mount, g->rel,
				   strerror(errno));
	/* Left by a migrate-send of the same pid that was killed with its
	 * keeper: taken over. */
	if (mkdirat(g->fd, c->name, 0755) && errno != EEXIST)
		return cli_err_set(err, -errno, "mkdir %s/%s/%s: %s", c->mount, g->rel, c->name,
				   strerror(errno));
	g->made = true;
	g->child = openat(g->fd, c->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (g->child < 0)
		return cli_err_set(err, -errno, "%s/%s/%s: %s", c->mount, g->rel, c->name,
				   strerror(errno));
	rc = write_at(g->child, "cgroup.type", "threaded");
	if (rc)
		return cli_err_set(err, rc, "%s/%s/%s: cannot make it threaded: %s (domain "
				   "controllers enabled in %s/%s?)", c->mount, g->rel, c->name,
				   strerror(-rc), c->mount, g->rel);
	rc = read_at(g->fd, "cgroup.subtree_control", ctl, sizeof(ctl));
	if (!rc && !has_word(ctl, "cpu")) {
		rc = write_at(g->fd, "cgroup.subtree_control", "+cpu");
		g->added_cpu = !rc;
	}
	return rc ? cli_err_set(err, rc, "%s/%s: cannot enable the cpu controller for its "
				"children: %s", c->mount, g->rel, strerror(-rc)) : 0;
}

static int move_threads(struct cg *c, struct cli_err *err)
{
	char rel[512], tid[24];
	unsigned i, k;
	int rc;

	for (i = 0; i < c->ntids; i++) {
		if (thread_cgroup(c, c->tids[i], rel, sizeof(rel), err))
			continue;       /* it ended */
		for (k = 0; k < c->ng && strcmp(c->g[k].rel, rel); k++)
			;
		if (k == c->ng)
			continue;       /* moved by someone else meanwhile: left alone */
		snprintf(tid, sizeof(tid), "%d", (int)c->tids[i]);
		rc = write_at(c->g[k].child, "cgroup.threads", tid);
		if (rc && rc != -ESRCH)
			return cli_err_set(err, rc, "cannot move thread %s into %s/%s/%s: %s",
					   tid, c->mount, c->g[k].rel, c->name, strerror(-rc));
	}
	return 0;
}

static int cg_release(void *st, struct cli_err *err);

static int cg_apply(void *st, unsigned pct, struct cli_err *err)
{
	struct cg *c = st;
	unsigned i;
	int rc = 0;

	c->pct = pct;
	if (!c->ng || !c->g[0].made) {
		if (c->all)
			rc = group_threads(c, err);
		for (i = 0; !rc && i < c->ng; i++)
			rc = make_child(c, &c->g[i], err);
		for (i = 0; !rc && i < c->ng; i++)
			rc = set_quota(c, &c->g[i], pct, err);
		if (!rc)
			rc = move_threads(c, err);
		if (rc)
			cg_release(c, NULL);
		return rc;
	}
	for (i = 0; !rc && i < c->ng; i++)
		rc = set_quota(c, &c->g[i], pct, err);
	return rc;
}

/* Frozen, the threads need no limit, and stop at once without one; then
 * the limit as it was. */
static int cg_pause(void *st, bool paused, struct cli_err *err)
{
	struct cg *c = st;
	unsigned i;
	int rc = 0, r;

	for (i = 0; i < c->ng; i++) {
		if (!c->g[i].made || c->g[i].child < 0)
			continue;
		if (paused) {
			r = write_at(c->g[i].child, "cpu.max", "max");
			if (r && !rc)
				rc = cli_err_set(err, r, "%s/%s/%s/cpu.max: %s", c->mount,
						 c->g[i].rel, c->name, strerror(-r));
		} else if (!rc) {
			rc = set_quota(c, &c->g[i], c->pct, err);
		}
	}
	return rc;
}

/* Every thread in our child back into @g's cgroup: 0, or the first
 * error of a thread that could not be read or moved. */
static int move_back(struct cg_group *g)
{
	char list[16384], *tid, *save = NULL;
	int rc = read_at(g->child, "cgroup.threads", list, sizeof(list)), r;

	if (rc)
		return rc;
	for (tid = strtok_r(list, "\n", &save); tid; tid = strtok_r(NULL, "\n", &save)) {
		r = write_at(g->fd, "cgroup.threads", tid);
		if (r && r != -ESRCH)
			rc = r;
	}
	return rc;
}

/* Whether @fd's cgroup has a child cgroup left. */
static bool has_children(int fd)
{
	int d = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = d >= 0 ? fdopendir(d) : NULL;
	struct dirent *de;
	bool any = false;

	if (!dir) {
		if (d >= 0)
			close(d);
		return true;
	}
	while (!any && (de = readdir(dir)))
		any = de->d_type == DT_DIR && strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(dir);
	return any;
}

static int cg_release(void *st, struct cli_err *err)
{
	struct cg *c = st;
	int rc = 0, r, tries;
	unsigned i;

	for (i = 0; i < c->ng; i++) {
		struct cg_group *g = &c->g[i];

		if (g->made && g->child >= 0) {
			/* A thread the target makes meanwhile starts in our child:
			 * moved back, and again, until the child can go. */
			for (tries = 0; tries < 20; tries++) {
				r = move_back(g);
				if (!unlinkat(g->fd, c->name, AT_REMOVEDIR) || errno == ENOENT)
					break;
				r = r ? r : -errno;
				usleep(1000);
			}
			if (tries == 20 && !rc)
				rc = cli_err_set(err, r, "cannot remove %s/%s/%s: %s", c->mount,
						 g->rel, c->name, strerror(-r));
		} else if (g->made && g->fd >= 0) {
			unlinkat(g->fd, c->name, AT_REMOVEDIR);
		}
		if (g->added_cpu && !has_children(g->fd))
			write_at(g->fd, "cgroup.subtree_control", "-cpu");
		if (g->child >= 0)
			close(g->child);
		if (g->fd >= 0)
			close(g->fd);
		g->child = g->fd = -1;
		g->made = g->added_cpu = false;
	}
	return rc;
}

static const char *cg_where(const void *st)
{
	return ((const struct cg *)st)->where;
}

static unsigned cg_fds(const void *st, int *fds, unsigned max)
{
	const struct cg *c = st;

	if (!max || c->rootfd < 0)
		return 0;
	fds[0] = c->rootfd;
	return 1;
}

static void cg_fini(void *st)
{
	struct cg *c = st;

	if (c->rootfd >= 0)
		close(c->rootfd);
	c->rootfd = -1;
}

const struct thr_ops thr_cgroup_ops = {
	.name = "cgroup",
	.size = sizeof(struct cg),
	.probe = cg_probe,
	.apply = cg_apply,
	.pause = cg_pause,
	.release = cg_release,
	.where = cg_where,
	.fds = cg_fds,
	.fini = cg_fini,
};
