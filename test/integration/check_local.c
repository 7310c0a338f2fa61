/* Test as a second local user, and as the host's own limits: what another
 * account on the destination host gains by creating migrate-recv's files
 * first (nothing: each is refused, nothing is written into it), what a full
 * filesystem does to a daemon (a refusal with the numbers, the space of a
 * failed migration given back, a migration that loses a page fails alone),
 * the limits that hold without options, and a reused pid on the source
 * host (it gets no signal).
 *
 * The second user is real: a child that drops to uid and gid 1234 before
 * it touches anything.  Every test prints one "local:" line with what it
 * saw, for docs/security.md's table.  Like the security suite they run
 * against whatever build RDMIG_BUILD names, so an older build can be shown
 * to fail them. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "qemu_vm.h"
#include "runs.h"
#include "suite.h"
#include "suites.h"
#include "testutil.h"

#define MIB (1ull << 20)
#define OTHER_UID 1234
#define PLANTED 0x5a

struct lx {
	char dir[256], recvbin[512], sendbin[512], key[320], addr[64];
	struct tu_run recv, send[3];
};

static void lx_init(struct lx *f)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(f, 0, sizeof(*f));
	tu_tmpdir(f->dir, sizeof(f->dir));
	/* The other user must reach the directories made for it below. */
	ck_assert_int_eq(chmod(f->dir, 0755), 0);
	tu_build_path("bin/migrate-recv", f->recvbin, sizeof(f->recvbin));
	tu_build_path("bin/migrate-send", f->sendbin, sizeof(f->sendbin));
	snprintf(f->key, sizeof(f->key), "%s/key", f->dir);
	tu_write_key(f->key);
}

static void lx_free(struct lx *f)
{
	unsigned i;

	for (i = 0; i < 3; i++)
		tu_run_stop(&f->send[i]);
	tu_run_stop(&f->recv);
	tu_rmdir(f->dir);
}

/* Data in every other page, zero between: the destination gets these pages
 * one by one inside control messages, written there by the CPU. */
static void write_striped(const char *path, size_t len, uint64_t seed)
{
	char *buf = calloc(1, len);
	size_t off;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_ge(fd, 0);
	for (off = 0; off < len; off += 8192)
		tu_fill_random(buf + off, 4096, seed + off);
	ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
	free(buf);
}


static void one_line(const char *path, char *buf, size_t len)
{
	char *t = tu_slurp(path, NULL), *p;

	snprintf(buf, len, "%s", t ? t : "");
	for (p = buf; *p; p++)
		if (*p == '\n')
			*p = ' ';
	free(t);
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return n;
}

static void mount_tmpfs(const char *dir, const char *size)
{
	char opts[64];

	snprintf(opts, sizeof(opts), "size=%s,mode=1777", size);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	ck_assert_msg(mount("tmpfs", dir, "tmpfs", 0, opts) == 0, "mount -t tmpfs %s: %s "
		      "(needs root: run it in tools/softroce)", dir, strerror(errno));
}

/* ---- the other user ------------------------------------------------------------ */

enum act { PLANT, FILL };

/* In a child running as uid/gid OTHER_UID: PLANT creates @path (O_EXCL) with
 * mode 0666 holding @len bytes of PLANTED; FILL writes @path until its
 * filesystem is full.  Plain C: Check's asserts do not cross this fork. */
static void as_other(enum act what, const char *path, size_t len)
{
	static char buf[1 << 16];
	pid_t pid = fork();
	int st = 0, fd;
	ssize_t n;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) || setgid(OTHER_UID) || setuid(OTHER_UID))
			_exit(3);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0666);
		if (fd < 0 || fchmod(fd, 0666))
			_exit(4);
		memset(buf, PLANTED, sizeof(buf));
		if (what == PLANT) {
			while (len) {
				n = write(fd, buf, len < sizeof(buf) ? len : sizeof(buf));
				if (n <= 0)
					_exit(5);
				len -= (size_t)n;
			}
		} else {
			while (write(fd, buf, sizeof(buf)) > 0)
				;
		}
		_exit(close(fd) ? 6 : 0);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "uid %d could not %s %s (%d)",
		      OTHER_UID, what == PLANT ? "create" : "fill", path, WEXITSTATUS(st));
}

/* The planted file is as the other user left it: theirs, @len bytes of
 * PLANTED, nothing of the guest's in it. */
static void assert_untouched(const char *path, size_t len)
{
	struct stat st;
	size_t n, i;
	unsigned char *d;

	ck_assert_msg(lstat(path, &st) == 0, "%s is gone", path);
	ck_assert_msg(st.st_uid == OTHER_UID, "%s now belongs to uid %u", path,
		      (unsigned)st.st_uid);
	d = (unsigned char *)tu_slurp(path, &n);
	ck_assert_msg(n == len, "%s holds %zu bytes, the other user left %zu", path, n, len);
	for (i = 0; i < n && d[i] == PLANTED; i++)
		;
	ck_assert_msg(i == n, "%s: byte %zu was written (0x%02x)", path, i, i < n ? d[i] : 0);
	free(d);
}

/* ---- the commands ------------------------------------------------------------------ */

/* migrate-recv --listen ADDR:0 --json @args, not waiting for it to listen. */
static void recv_spawn(struct lx *f, const char *const *args)
{
	char listen[64];

	snprintf(listen, sizeof(listen), "%s:0", tu_addr());
	tu_run_cmd(&f->recv, f->dir, "recv",
		   (const char *[]){ f->recvbin, "--listen", listen, "--json", NULL }, args);
}

static void recv_listen(struct lx *f, const char *const *args)
{
	tu_recv_listen(&f->recv, f->dir, f->recvbin, NULL, args, 20000, NULL, 0, f->addr,
		       sizeof(f->addr));
}

/* migrate-send --connect ADDR --json --auth-key KEY --timeout 10 --ram @ram @args. */
static void send_spawn(struct lx *f, int i, const char *ram, const char *const *args)
{
	char tag[16];

	snprintf(tag, sizeof(tag), "send%d", i);
	tu_run_cmd(&f->send[i], f->dir, tag,
		   (const char *[]){ f->sendbin, "--connect", f->addr, "--json", "--auth-key",
				     f->key, "--timeout", "10", "--ram", ram, NULL }, args);
}

/* migrate-recv exits @want at start-up and says what @needle says. */
static void recv_refuses(struct lx *f, const char *const *args, int want, const char *needle,
			 char *said, size_t len)
{
	int rc;

	recv_spawn(f, args);
	rc = tu_run_finish(&f->recv, 20000);
	one_line(f->recv.err, said, len);
	if (rc != want || !strstr(said, needle))
		tu_run_dump(&f->recv, "recv");
	ck_assert_msg(rc == want, "migrate-recv exited %d, not %d: %s", rc, want, said);
	ck_assert_msg(strstr(said, needle), "migrate-recv did not say \"%s\": %s", needle, said);
}

/* ---- files nobody else can have first --------------------------------------------- */

/* One keyed migration into --ram a=@ram --state-out @state: it must fail
 * on a file the other user made, naming it; returns migrate-recv's line. */
static void planted_fails(struct lx *f, const char *src, const char *ram, const char *state,
			  const char *needle, char *said, size_t len)
{
	char rd[400], rs[400];
	int sc, rc;

	snprintf(rd, sizeof(rd), "a=%s", ram);
	snprintf(rs, sizeof(rs), "a=%s", src);
	recv_listen(f, (const char *const[]){ "--ram", rd, "--state-out", state, "--auth-key",
					      f->key, "--timeout", "10", NULL });
	send_spawn(f, 0, rs, NULL);
	sc = tu_run_finish(&f->send[0], 60000);
	rc = tu_run_finish(&f->recv, 30000);
	one_line(f->recv.err, said, len);
	if (!sc || !rc || !strstr(said, needle)) {
		tu_run_dump(&f->send[0], "send");
		tu_run_dump(&f->recv, "recv");
	}
	ck_assert_msg(sc != 0 && rc != 0, "send exit %d, recv exit %d", sc, rc);
	ck_assert_msg(strstr(said, needle), "migrate-recv did not name %s: %s", needle, said);
	ck_assert(!tu_has_event(f->recv.out, "completed"));
}

START_TEST(precreated_files_refused)
{
	char shared[300], open_dir[300], src[300], ram[400], mark[420], state[400], part[420];
	char rd[420], said[8192], s1[8192], s2[8192], s3[8192], s4[8192], s5[8192];
	struct lx f;

	lx_init(&f);
	/* Like /dev/shm: every user may create files, nobody may remove
	 * another's (sticky). */
	snprintf(shared, sizeof(shared), "%s/shared", f.dir);
	ck_assert_int_eq(mkdir(shared, 0755), 0);
	ck_assert_int_eq(chmod(shared, 01777), 0);
	snprintf(src, sizeof(src), "%s/src.ram", f.dir);
	tu_write_random(src, 4 * MIB, 1);
	snprintf(ram, sizeof(ram), "%s/a.ram", shared);
	snprintf(mark, sizeof(mark), "%s.incomplete", ram);
	snprintf(state, sizeof(state), "%s/st", shared);
	snprintf(part, sizeof(part), "%s.part", state);
	snprintf(rd, sizeof(rd), "a=%s", ram);

	/* The image itself: refused as it is, and with --use-existing. */
	as_other(PLANT, ram, 4 * MIB);
	recv_refuses(&f, (const char *const[]){ "--ram", rd, "--auth-key", f.key, NULL }, 2,
		     "already exists", s1, sizeof(s1));
	recv_refuses(&f, (const char *const[]){ "--ram", rd, "--use-existing", "--auth-key",
						 f.key, NULL }, 2, "belongs to uid 1234", s2, sizeof(s2));
	assert_untouched(ram, 4 * MIB);
	ck_assert_int_eq(unlink(ram), 0);

	/* Its marker: a migration that cannot mark its image fails, and leaves
	 * no unmarked file that would pass for a complete image. */
	as_other(PLANT, mark, 0);
	planted_fails(&f, src, ram, state, mark, s3, sizeof(s3));
	assert_untouched(mark, 0);
	ck_assert_msg(!tu_exists(ram), "%s was left without its marker", ram);
	ck_assert_int_eq(unlink(mark), 0);

	/* The device state's .part file. */
	as_other(PLANT, part, 0);
	planted_fails(&f, src, ram, state, part, said, sizeof(said));
	assert_untouched(part, 0);
	ck_assert(!tu_exists(state));
	ck_assert_int_eq(unlink(part), 0);

	/* The state file itself, which FILE.part would replace at the end. */
	as_other(PLANT, state, 0);
	planted_fails(&f, src, ram, state, state, s4, sizeof(s4));
	assert_untouched(state, 0);
	ck_assert_int_eq(unlink(state), 0);

	/* An image of ours with a second name: whoever made the link could
	 * be reading along. */
	{
		char second[440];

		snprintf(second, sizeof(second), "%s.link", ram);
		tu_write_random(ram, 4 * MIB, 5);
		ck_assert_int_eq(link(ram, second), 0);
		recv_refuses(&f, (const char *const[]){ "--ram", rd, "--use-existing", "--auth-key",
							 f.key, NULL }, 2, "2 names", s5, sizeof(s5));
		unlink(second);
		unlink(ram);
	}
	printf("local: uid %d pre-created the files in a sticky 1777 directory: the image -> "
	       "%s; with --use-existing -> %s; the marker -> %s; the state's .part -> %s; the "
	       "state file -> %s; each of the other user's files still holds only what they "
	       "wrote; an image of ours with a second name -> %s\n", OTHER_UID, s1, s2, s3, said,
	       s4, s5);

	/* A directory others may write without the sticky bit is refused
	 * outright: they could rename our files away and put theirs. */
	snprintf(open_dir, sizeof(open_dir), "%s/open", f.dir);
	ck_assert_int_eq(mkdir(open_dir, 0755), 0);
	ck_assert_int_eq(chmod(open_dir, 0777), 0);
	snprintf(rd, sizeof(rd), "a=%s/a.ram", open_dir);
	recv_refuses(&f, (const char *const[]){ "--ram", rd, "--auth-key", f.key, NULL }, 2,
		     "has no sticky bit", s1, sizeof(s1));
	recv_refuses(&f, (const char *const[]){ "--ram-dir", open_dir, "--auth-key", f.key,
						 NULL }, 2, "has no sticky bit", s2, sizeof(s2));
	ck_assert_int_eq(count_entries(open_dir), 0);
	printf("local: a 0777 directory without the sticky bit: --ram -> %s; --ram-dir -> %s\n",
	       s1, s2);
	lx_free(&f);
}
END_TEST

/* ---- room -------------------------------------------------------------------------- */

/* migrate-recv --daemon --ram-dir @dir with the key, listening. */
static void daemon_start(struct lx *f, const char *dir, const char *const *more)
{
	const char *args[24] = { "--daemon", "--ram-dir", dir, "--auth-key", f->key,
				 "--timeout", "10" };
	int n = 7;

	while (more && *more && n < 23)
		args[n++] = *more++;
	args[n] = NULL;
	recv_listen(f, args);
}

/* Daemon events on migrate-recv's stdout whose "event" is @ev. */
static int count_events(struct lx *f, const char *ev)
{
	char *text = tu_slurp(f->recv.out, NULL), *p, pat[64];
	int n = 0;

	snprintf(pat, sizeof(pat), "\"event\":\"%s\"", ev);
	for (p = text; p && (p = strstr(p, pat)); p++)
		n++;
	free(text);
	return n;
}

static void wait_events(struct lx *f, const char *ev, int n, int timeout_ms)
{
	uint64_t end = tu_now_ms() + (uint64_t)timeout_ms;

	while (count_events(f, ev) < n && tu_now_ms() < end)
		usleep(50000);
	if (count_events(f, ev) < n)
		tu_run_dump(&f->recv, "daemon");
	ck_assert_msg(count_events(f, ev) >= n, "%d %s events, %d expected",
		      count_events(f, ev), ev, n);
}

static uint64_t fs_free(const char *dir)
{
	struct statvfs v;

	ck_assert_int_eq(statvfs(dir, &v), 0);
	return (uint64_t)v.f_bavail * v.f_frsize;
}

/* The image of daemon migration @id in @mnt is the source @src. */
static void assert_image(const char *mnt, int id, const char *name, const char *src)
{
	char img[400], mark[420];

	snprintf(img, sizeof(img), "%s/%d/%s", mnt, id, name);
	snprintf(mark, sizeof(mark), "%s.incomplete", img);
	ck_assert_msg(tu_same_file(src, img), "%s differs from %s", img, src);
	ck_assert_msg(!tu_exists(mark), "%s left behind", mark);
}

/* Two 6 MiB blocks into an 8 MiB tmpfs: refused at admission with the
 * numbers, nothing created; a killed migration gives its space back; the
 * daemon then serves a small one. */
START_TEST(room_refused_and_given_back)
{
	char mnt[300], a[300], b[300], c[300], ra[400], rb[400], rc_[400], said[8192];
	char dead[32];
	uint64_t before, after;
	struct lx f;
	int sc;

	lx_init(&f);
	snprintf(mnt, sizeof(mnt), "%s/small", f.dir);
	mount_tmpfs(mnt, "8m");
	snprintf(a, sizeof(a), "%s/a", f.dir);
	snprintf(b, sizeof(b), "%s/b", f.dir);
	snprintf(c, sizeof(c), "%s/c", f.dir);
	tu_write_random(a, 6 * MIB, 2);
	tu_write_random(b, 6 * MIB, 3);
	tu_write_random(c, 4 * MIB, 4);
	snprintf(ra, sizeof(ra), "a=%s", a);
	snprintf(rb, sizeof(rb), "b=%s", b);
	snprintf(rc_, sizeof(rc_), "c=%s", c);
	daemon_start(&f, mnt, NULL);
	before = fs_free(mnt);

	send_spawn(&f, 0, ra, (const char *const[]){ "--ram", rb, NULL });
	sc = tu_run_finish(&f.send[0], 60000);
	wait_events(&f, "refused", 1, 10000);
	one_line(f.recv.out, said, sizeof(said));
	ck_assert_msg(sc != 0, "two 6 MiB blocks into 8 MiB: migrate-send exit 0");
	ck_assert_msg(strstr(said, "12.0 MiB") && strstr(said, "free"), "daemon said: %s", said);
	ck_assert_int_eq(count_entries(mnt), 0);

	/* A source killed mid-stream: its partial image goes. */
	send_spawn(&f, 1, rc_, (const char *const[]){ "--max-bandwidth", "1M", NULL });
	ck_assert_ptr_nonnull(tu_wait_event(&f.send[1], "setup", 30000));
	usleep(1500 * 1000);
	ck_assert_msg(fs_free(mnt) < before, "nothing landed before the kill");
	tu_kill(&f.send[1].p, SIGKILL);
	tu_run_finish(&f.send[1], 10000);
	wait_events(&f, "failed", 1, 20000);
	after = fs_free(mnt);
	snprintf(dead, sizeof(dead), "%s", count_entries(mnt) ? "kept" : "removed");
	ck_assert_msg(!count_entries(mnt), "the failed migration's files stayed in %s", mnt);
	ck_assert_uint_eq(after, before);

	/* And the next one fits. */
	send_spawn(&f, 2, rc_, NULL);
	sc = tu_run_finish(&f.send[2], 60000);
	if (sc)
		tu_run_dump(&f.send[2], "send");
	ck_assert_int_eq(sc, 0);
	wait_events(&f, "completed", 1, 10000);
	printf("local: daemon on an 8 MiB tmpfs: two 6 MiB blocks refused at admission (%s); a "
	       "source killed mid-stream: its files %s, %" PRIu64 " of %" PRIu64 " bytes free "
	       "again; the next 4 MiB migration completed\n", said, dead, after, before);
	lx_free(&f);
}
END_TEST

/* Three 6 MiB migrations at once into a 16 MiB tmpfs: two fit, the third
 * is refused up front naming the room promised to the others. */
START_TEST(concurrent_overfill_refused)
{
	char mnt[300], src[3][300], ram[3][1000], said[8192];
	int i, sc[3], ok = 0, refused = -1;
	struct lx f;

	lx_init(&f);
	snprintf(mnt, sizeof(mnt), "%s/mid", f.dir);
	mount_tmpfs(mnt, "16m");
	for (i = 0; i < 3; i++) {
		snprintf(src[i], sizeof(src[i]), "%s/s%d", f.dir, i);
		tu_write_random(src[i], 6 * MIB, 10 + (uint64_t)i);
		snprintf(ram[i], sizeof(ram[i]), "r=%s", src[i]);
	}
	daemon_start(&f, mnt, NULL);
	for (i = 0; i < 3; i++) {
		send_spawn(&f, i, ram[i], (const char *const[]){ "--max-bandwidth", "2M", NULL });
		if (i < 2)
			ck_assert_ptr_nonnull(tu_wait_event(&f.send[i], "setup", 30000));
	}
	for (i = 0; i < 3; i++) {
		sc[i] = tu_run_finish(&f.send[i], 60000);
		if (sc[i] == 0)
			ok++;
		else
			refused = i;
	}
	wait_events(&f, "completed", 2, 10000);
	one_line(f.recv.out, said, sizeof(said));
	ck_assert_msg(ok == 2 && refused == 2, "exits %d %d %d", sc[0], sc[1], sc[2]);
	ck_assert_msg(strstr(said, "no room for the image: it needs 6.0 MiB"), "daemon said: %s",
		      said);
	assert_image(mnt, 1, "r", src[0]);
	assert_image(mnt, 2, "r", src[1]);
	printf("local: three 6 MiB migrations at once into a 16 MiB tmpfs: two completed, the "
	       "third refused at admission (migrate-send exit %d)\n", sc[2]);
	lx_free(&f);
}
END_TEST

/* The other user fills the tmpfs while a migration writes into it: that
 * migration fails, saying why; the daemon lives, gives the space back and
 * serves the next one. */
START_TEST(filled_mid_migration_fails_alone)
{
	char mnt[300], src[300], small[300], ram[400], rsm[400], filler[400], said[8192];
	struct json_object *ev;
	struct lx f;
	int sc;

	lx_init(&f);
	snprintf(mnt, sizeof(mnt), "%s/fill", f.dir);
	mount_tmpfs(mnt, "16m");
	snprintf(src, sizeof(src), "%s/striped", f.dir);
	write_striped(src, 12 * MIB, 20);
	snprintf(small, sizeof(small), "%s/small", f.dir);
	tu_write_random(small, MIB, 21);
	snprintf(ram, sizeof(ram), "s=%s", src);
	snprintf(rsm, sizeof(rsm), "m=%s", small);
	snprintf(filler, sizeof(filler), "%s/filler", mnt);
	daemon_start(&f, mnt, NULL);
	send_spawn(&f, 0, ram, (const char *const[]){ "--max-bandwidth", "2M", NULL });
	ck_assert_ptr_nonnull(tu_wait_event(&f.send[0], "setup", 30000));
	usleep(800 * 1000);
	as_other(FILL, filler, 0);
	sc = tu_run_finish(&f.send[0], 60000);
	wait_events(&f, "failed", 1, 20000);
	ev = tu_event_in(f.recv.out, "failed");
	snprintf(said, sizeof(said), "%s", json_object_get_string(json_object_object_get(ev,
										     "error")));
	json_object_put(ev);
	ck_assert_msg(sc != 0, "migrate-send exit 0 into a full filesystem");
	ck_assert_msg(strstr(said, "full") || strstr(said, "space"), "daemon said: %s", said);
	/* Still serving: its failed image is gone, the filler goes, the next
	 * migration completes. */
	ck_assert_int_eq(count_entries(mnt), 1);
	ck_assert_int_eq(unlink(filler), 0);
	send_spawn(&f, 1, rsm, NULL);
	ck_assert_int_eq(tu_run_finish(&f.send[1], 60000), 0);
	wait_events(&f, "completed", 1, 10000);
	assert_image(mnt, 2, "m", small);
	printf("local: uid %d filled the daemon's tmpfs mid-migration: that migration failed "
	       "(migrate-send exit %d; %s); the daemon went on and completed the next\n",
	       OTHER_UID, sc, said);
	lx_free(&f);
}
END_TEST

/* ---- limits that hold by default ----------------------------------------------------- */

START_TEST(limits_hold_by_default)
{
	char src[300], dir[300], ram[400], mnt[300], a[300], b[300], ra[400], rb[400];
	char s1[8192], s2[8192], s3[8192], s4[8192], s5[8192];
	struct lx f;
	int sc;

	lx_init(&f);
	/* Keyless --daemon and --qmp are refused before anything listens. */
	snprintf(dir, sizeof(dir), "%s/dst", f.dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	recv_refuses(&f, (const char *const[]){ "--daemon", "--ram-dir", dir, NULL }, 2,
		     "--auth-key", s1, sizeof(s1));
	recv_refuses(&f, (const char *const[]){ "--qmp", "/nonexistent.sock", NULL }, 2,
		     "--trusted-fabric", s2, sizeof(s2));
	{
		struct tu_run r;

		memset(&r, 0, sizeof(r));
		tu_run_spawn(&r, f.dir, "sendqmp", (char *[]){ f.sendbin, "--connect",
			     "10.77.0.1:1", "--qmp", "/nonexistent.sock", NULL });
		ck_assert_int_eq(tu_run_finish(&r, 20000), 2);
		one_line(r.err, s3, sizeof(s3));
		ck_assert_msg(strstr(s3, "--auth-key"), "migrate-send said: %s", s3);
	}

	/* Pin-all of more than 256 MiB is refused without any --pinned-cap. */
	snprintf(src, sizeof(src), "%s/big", f.dir);
	{
		int fd = open(src, O_RDWR | O_CREAT | O_EXCL, 0644);

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(ftruncate(fd, 300 * (off_t)MIB), 0);
		close(fd);
	}
	snprintf(ram, sizeof(ram), "big=%s", src);
	recv_listen(&f, (const char *const[]){ "--ram-dir", dir, "--auth-key", f.key, NULL });
	send_spawn(&f, 0, ram, (const char *const[]){ "--pin-all", NULL });
	sc = tu_run_finish(&f.send[0], 60000);
	tu_run_finish(&f.recv, 30000);
	one_line(f.send[0].err, s4, sizeof(s4));
	ck_assert_msg(sc != 0 && strstr(s4, "pinned-bytes cap of 268435456"), "exit %d: %s", sc,
		      s4);

	/* Daemon-wide: two 6 MiB images at once over --max-total-image 10M. */
	snprintf(mnt, sizeof(mnt), "%s/tot", f.dir);
	mount_tmpfs(mnt, "64m");
	snprintf(a, sizeof(a), "%s/a", f.dir);
	snprintf(b, sizeof(b), "%s/b", f.dir);
	tu_write_random(a, 6 * MIB, 30);
	tu_write_random(b, 6 * MIB, 31);
	snprintf(ra, sizeof(ra), "a=%s", a);
	snprintf(rb, sizeof(rb), "b=%s", b);
	daemon_start(&f, mnt, (const char *const[]){ "--max-total-image", "10M", NULL });
	send_spawn(&f, 1, ra, (const char *const[]){ "--max-bandwidth", "2M", NULL });
	ck_assert_ptr_nonnull(tu_wait_event(&f.send[1], "setup", 30000));
	send_spawn(&f, 2, rb, NULL);
	ck_assert_int_ne(tu_run_finish(&f.send[2], 60000), 0);
	ck_assert_int_eq(tu_run_finish(&f.send[1], 60000), 0);
	one_line(f.send[2].err, s5, sizeof(s5));
	ck_assert_msg(strstr(s5, "--max-total-image"), "second source said: %s", s5);
	tu_run_stop(&f.recv);

	/* Device state without end: bounded by --max-state. */
	{
		char st_in[300], st_out[400], rs[400], s6[8192];
		int rc;

		snprintf(st_in, sizeof(st_in), "%s/state-in", f.dir);
		snprintf(st_out, sizeof(st_out), "%s/state", dir);
		tu_write_random(st_in, 2 * MIB, 32);
		snprintf(rs, sizeof(rs), "a=%s", a);
		recv_listen(&f, (const char *const[]){ "--ram-dir", dir, "--state-out", st_out,
						       "--max-state", "1M", "--auth-key", f.key,
						       NULL });
		send_spawn(&f, 0, rs, (const char *const[]){ "--state-in", st_in, NULL });
		sc = tu_run_finish(&f.send[0], 60000);
		rc = tu_run_finish(&f.recv, 30000);
		one_line(f.recv.err, s6, sizeof(s6));
		ck_assert_msg(sc && rc && strstr(s6, "--max-state"), "send %d, recv %d: %s", sc, rc,
			      s6);
		ck_assert(!tu_exists(st_out));
		printf("local: 2 MiB of device state into --max-state 1M -> %s\n", s6);
	}
	printf("local: keyless --daemon -> %s; keyless --qmp -> %s; migrate-send --qmp -> %s; "
	       "pin-all of 300 MiB with no --pinned-cap -> %s; a second image over "
	       "--max-total-image 10M -> %s\n", s1, s2, s3, s4, s5);
	lx_free(&f);
}
END_TEST

/* ---- names a QEMU's user can change (issue 30) ------------------------------------ */

enum swap { SWAP_LINK, SWAP_FIFO };

/* As uid OTHER_UID (QEMU's user, who owns the directory of its RAM file):
 * @path becomes a symbolic link to @target, or a FIFO, by a rename over
 * it. */
static void as_other_swap(enum swap how, const char *path, const char *target)
{
	char tmp[600];
	pid_t pid = fork();
	int st = 0;

	ck_assert_int_ge(pid, 0);
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	if (pid == 0) {
		if (setgroups(0, NULL) || setgid(OTHER_UID) || setuid(OTHER_UID))
			_exit(3);
		if (how == SWAP_LINK ? symlink(target, tmp) : mkfifo(tmp, 0666))
			_exit(4);
		_exit(rename(tmp, path) ? 5 : 0);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "uid %d could not swap %s (%d)",
		      OTHER_UID, path, WEXITSTATUS(st));
}

/* A directory of OTHER_UID's under the test's. */
static void other_dir(const struct lx *f, const char *name, char *dir, size_t len)
{
	snprintf(dir, len, "%s/%s", f->dir, name);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	ck_assert_int_eq(chown(dir, OTHER_UID, OTHER_UID), 0);
}

/* A file of root's alone: what a RAM file's name must never lead a
 * command to open.  Watched: every open and write of it shows. */
static int root_only(const char *path, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600), in;
	char buf[4096];

	ck_assert_int_ge(fd, 0);
	memset(buf, PLANTED, sizeof(buf));
	for (size_t off = 0; off < len; off += sizeof(buf))
		ck_assert_int_eq(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
	close(fd);
	in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	ck_assert_int_ge(in, 0);
	ck_assert_int_ge(inotify_add_watch(in, path, IN_OPEN | IN_MODIFY | IN_ACCESS), 0);
	return in;
}

/* The root-only file is as root_only() made it. */
static void root_untouched(const char *path, size_t len)
{
	struct stat st;
	unsigned char *d;
	size_t n, i;

	ck_assert_msg(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0,
		      "%s is no longer root's plain file", path);
	d = (unsigned char *)tu_slurp(path, &n);
	ck_assert_msg(n == len, "%s holds %zu bytes, not %zu", path, n, len);
	/* One assertion, not one a byte: each passing one is a record in
	 * Check's message file, in the bed's /tmp. */
	for (i = 0; i < n && d[i] == PLANTED; i++)
		;
	ck_assert_msg(i == n, "%s: byte %zu was written (0x%02x)", path, i, i < n ? d[i] : 0);
	free(d);
}

/* The file @rel of the checkout this test binary was built in (BUILD/test/
 * sits in it), whatever build RDMIG_BUILD names: the fake QEMU is part of
 * the test, not of the build under test. */
static void repo_file(const char *rel, char *buf, size_t len)
{
	char real[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", real, sizeof(real) - 1);
	int up;

	ck_assert_int_gt(n, 0);
	real[n] = '\0';
	for (up = 0; up < 3; up++) {
		slash = strrchr(real, '/');
		ck_assert_ptr_nonnull(slash);
		*slash = '\0';
	}
	ck_assert_uint_lt(strlen(real) + strlen(rel) + 1, len);
	memcpy(buf, real, strlen(real));
	buf[strlen(real)] = '/';
	memcpy(buf + strlen(real) + 1, rel, strlen(rel) + 1);
}

/* Asserts nothing opened @path since root_only()/watch() gave @in. */
static void never_opened(int in, const char *path, const char *by)
{
	char buf[4096] __attribute__((aligned(8)));
	const struct inotify_event *ev;
	ssize_t n = read(in, buf, sizeof(buf));

	if (n > 0) {
		ev = (const struct inotify_event *)buf;
		ck_abort_msg("%s opened %s (inotify mask 0x%x): its name led there", by, path,
			     ev->mask);
	}
	ck_assert_msg(n < 0 && errno == EAGAIN, "inotify: %s", strerror(errno));
}

static int watch(const char *path)
{
	int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);

	ck_assert_int_ge(in, 0);
	ck_assert_int_ge(inotify_add_watch(in, path, IN_OPEN | IN_MODIFY | IN_ACCESS), 0);
	return in;
}

/* test/integration/support/fake-qemu as OTHER_UID (QEMU's user): its QMP
 * socket in @odir (OTHER_UID's), its RAM file @odir/vm.ram of @size bytes,
 * made here; the status of a source (@src) or of a destination waiting;
 * @swap_to: what it links the RAM file's name to once the look at it is
 * over ("-": never).  Its output goes to @out. */
static void fake_start(struct tu_proc *p, const char *odir, uint64_t size, int src,
		       const char *swap_to, char *sock, size_t len, const char *out)
{
	char fake[600], ram[400], sz[32], uid[16];
	char *argv[] = { fake, sock, ram, sz, src ? "running" : "inmigrate", (char *)swap_to,
			 "--as", uid, NULL };
	int fd, i;

	repo_file("test/integration/support/fake-qemu", fake, sizeof(fake));
	snprintf(sock, len, "%s/qmp.sock", odir);
	snprintf(ram, sizeof(ram), "%s/vm.ram", odir);
	snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
	snprintf(uid, sizeof(uid), "%d", OTHER_UID);
	fd = open(ram, O_RDWR | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	ck_assert_int_eq(fchown(fd, OTHER_UID, OTHER_UID), 0);
	close(fd);
	ck_assert_int_eq(tu_spawn(p, out, argv), 0);
	for (i = 0; i < 200 && !tu_exists(sock); i++)
		usleep(50 * 1000);
	ck_assert_msg(tu_exists(sock), "fake-qemu did not listen");
}

/* The command of side @src (1: migrate-send, 0: migrate-recv) on QMP socket
 * @sock, with @more (NULL-terminated, may be NULL) after: its exit code
 * and its message in @said. */
static int qmp_command(struct lx *f, int src, const char *sock, const char *const *more,
		       char *said, size_t len)
{
	char listen[64], *argv[24];
	struct tu_run r;
	int n = 0, rc;

	memset(&r, 0, sizeof(r));
	argv[n++] = src ? f->sendbin : f->recvbin;
	argv[n++] = src ? "--connect" : "--listen";
	snprintf(listen, sizeof(listen), "%s:%d", tu_addr(), src);
	argv[n++] = listen;
	argv[n++] = "--qmp";
	argv[n++] = (char *)sock;
	argv[n++] = "--auth-key";
	argv[n++] = f->key;
	argv[n++] = "--timeout";
	argv[n++] = "10";
	while (more && *more && n < 23)
		argv[n++] = (char *)*more++;
	argv[n] = NULL;
	tu_run_spawn(&r, f->dir, src ? "qsend" : "qrecv", argv);
	rc = tu_run_finish(&r, 30000);
	one_line(r.err, said, len);
	if (rc != 2)
		tu_run_dump(&r, src ? "migrate-send" : "migrate-recv");
	if (rc < 0) {
		kill(-r.p.pid, SIGKILL);
		tu_wait(&r.p, 5000);
	}
	return rc;
}

/* --qmp SOCK --ram NAME=PATH on both commands (_i: 0 migrate-recv, 1
 * migrate-send), against a QEMU stand-in (fake-qemu: it answers QMP and
 * maps its RAM file as QEMU does; what the commands do before they talk
 * to a real QEMU's migration is the same).  QEMU's user owns the directory
 * of the guest's RAM file and replaces the file's name with a symbolic link
 * to a file of root's alone, then with a FIFO, then makes a directory of
 * the path a link: none is opened, each is refused by name.  Before
 * (2cee698) --qmp with --ram skipped every check: root followed the link
 * and mapped the root-only file read-write and shared, the RDMA WRITEs'
 * destination. */
START_TEST(qmp_ram_name_swapped)
{
	char odir[300], ram[400], sock[400], out[400], rarg[420], victim[300], said[8192];
	char said2[8192], said3[8192], rdir[280], linked[320];
	struct tu_proc p;
	struct lx f;
	int in, rc;

	lx_init(&f);
	other_dir(&f, "qemu", odir, sizeof(odir));
	snprintf(ram, sizeof(ram), "%s/vm.ram", odir);
	snprintf(rarg, sizeof(rarg), "mem=%s", ram);
	snprintf(out, sizeof(out), "%s/fake.out", f.dir);
	fake_start(&p, odir, 32 * MIB, _i, "-", sock, sizeof(sock), out);
	snprintf(victim, sizeof(victim), "%s/root-only", f.dir);
	in = root_only(victim, 32 * MIB);

	as_other_swap(SWAP_LINK, ram, victim);
	rc = qmp_command(&f, _i, sock, (const char *const[]){ "--ram", rarg, NULL }, said,
			 sizeof(said));
	never_opened(in, victim, _i ? "migrate-send" : "migrate-recv");
	ck_assert_msg(rc == 2 && strstr(said, "symbolic link"), "exit %d: %s", rc, said);
	close(in);
	root_untouched(victim, 32 * MIB);

	unlink(ram);
	as_other_swap(SWAP_FIFO, ram, NULL);
	in = watch(ram);
	rc = qmp_command(&f, _i, sock, (const char *const[]){ "--ram", rarg, NULL }, said2,
			 sizeof(said2));
	never_opened(in, ram, _i ? "migrate-send" : "migrate-recv");
	ck_assert_msg(rc == 2 && strstr(said2, "FIFO"), "exit %d: %s", rc, said2);
	close(in);

	/* A directory of the path made a link: not only the last name must
	 * not be followed (O_NOFOLLOW alone would follow this one). */
	snprintf(rdir, sizeof(rdir), "%s/rootdir", f.dir);
	ck_assert_int_eq(mkdir(rdir, 0700), 0);
	snprintf(victim, sizeof(victim), "%s/vm.ram", rdir);
	in = root_only(victim, 32 * MIB);
	snprintf(linked, sizeof(linked), "%s/sub", odir);
	as_other_swap(SWAP_LINK, linked, rdir);
	snprintf(rarg, sizeof(rarg), "mem=%s/sub/vm.ram", odir);
	rc = qmp_command(&f, _i, sock, (const char *const[]){ "--ram", rarg, NULL }, said3,
			 sizeof(said3));
	never_opened(in, victim, _i ? "migrate-send" : "migrate-recv");
	ck_assert_msg(rc == 2 && strstr(said3, "symbolic link"), "exit %d: %s", rc, said3);
	close(in);
	printf("local: %s --qmp --ram NAME=PATH, PATH made a link to a root-only file by QEMU's "
	       "user -> %s; made a FIFO -> %s; a directory of PATH made a link -> %s\n",
	       _i ? "migrate-send" : "migrate-recv", said, said2, said3);
	tu_kill(&p, SIGKILL);
	tu_wait(&p, 5000);
	lx_free(&f);
}
END_TEST

/* A hostile QEMU (test/integration/support/fake-qemu, as QEMU's user)
 * renames a link over its RAM file's name at the moment the command's
 * look at that backend is over (the qom-get of the next backend), before
 * the command opens the file (_i: 0 migrate-recv, 1 migrate-send).
 * Nothing may open the link's target; the command refuses.  Before
 * (2cee698) the file was opened again by name, following the link: root
 * opened the root-only target read-write, then refused it as "no longer
 * the file QEMU maps" (an open with effects: a watchdog device reboots the
 * host). */
START_TEST(qmp_name_swapped_between_look_and_open)
{
	char odir[300], sock[400], victim[300], out[400], said[8192];
	char *text;
	struct tu_proc p;
	struct lx f;
	int in, rc;

	lx_init(&f);
	other_dir(&f, "qemu", odir, sizeof(odir));
	snprintf(victim, sizeof(victim), "%s/root-only", f.dir);
	in = root_only(victim, 16 * MIB);
	snprintf(out, sizeof(out), "%s/fake.out", f.dir);
	fake_start(&p, odir, 16 * MIB, _i, victim, sock, sizeof(sock), out);
	rc = qmp_command(&f, _i, sock, NULL, said, sizeof(said));
	text = tu_slurp(out, NULL);
	tu_kill(&p, SIGKILL);
	tu_wait(&p, 5000);
	ck_assert_msg(text && strstr(text, "swapped"), "the fake never swapped: %s",
		      text ? text : "");
	never_opened(in, victim, _i ? "migrate-send" : "migrate-recv");
	ck_assert_msg(rc == 2 && strstr(said, "symbolic link"), "exit %d: %s", rc, said);
	root_untouched(victim, 16 * MIB);
	printf("local: %s --qmp, a hostile QEMU links its RAM file's name to a root-only file "
	       "between the look and the open -> %s\n", _i ? "migrate-send" : "migrate-recv",
	       said);
	free(text);
	close(in);
	lx_free(&f);
}
END_TEST

/* ---- a reused pid ------------------------------------------------------------------- */

/* A process that records every SIGCONT it gets in @mark. */
static pid_t spawn_victim_at(pid_t want, const char *mark)
{
	char last[32];
	pid_t pid;
	int fd, tries;

	for (tries = 0; tries < 20; tries++) {
		fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
		ck_assert_msg(fd >= 0, "ns_last_pid: %s (needs root)", strerror(errno));
		snprintf(last, sizeof(last), "%d", (int)want - 1);
		ck_assert_int_gt(write(fd, last, strlen(last)), 0);
		close(fd);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			char *argv[] = { "/bin/sh", "-c", "trap 'echo cont >> \"$0\"' CONT; "
					 "while :; do sleep 0.05; done", (char *)mark, NULL };

			execv(argv[0], argv);
			_exit(127);
		}
		if (pid == want)
			return pid;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	ck_abort_msg("could not get pid %d back for the victim", (int)want);
	return -1;
}

/* The workload exits mid-round and its pid goes to another process before
 * migrate-send next stops the workload: that process gets neither SIGSTOP
 * nor SIGCONT. */
START_TEST(reused_pid_gets_no_signal)
{
	char ram[300], rs[400], dst[300], mark[300], load[512], said[8192], st[512];
	struct tu_proc w;
	struct lx f;
	pid_t victim;
	int sc;

	lx_init(&f);
	snprintf(ram, sizeof(ram), "/dev/shm/rdmig-local-%d.ram", (int)getpid());
	snprintf(rs, sizeof(rs), "r=%s", ram);
	snprintf(dst, sizeof(dst), "%s/dst", f.dir);
	ck_assert_int_eq(mkdir(dst, 0700), 0);
	snprintf(mark, sizeof(mark), "%s/victim.log", f.dir);
	tu_write_random(ram, 16 * MIB, 40);
	tu_build_path("bin/memload", load, sizeof(load));
	{
		char out[400];
		char *argv[] = { load, "run", ram, "--rate", "1", NULL };

		snprintf(out, sizeof(out), "%s/memload.out", f.dir);
		ck_assert_int_eq(tu_spawn(&w, out, argv), 0);
	}
	usleep(300 * 1000);
	recv_listen(&f, (const char *const[]){ "--ram-dir", dst, "--auth-key", f.key, NULL });
	{
		char pid[16];

		snprintf(pid, sizeof(pid), "%d", (int)w.pid);
		send_spawn(&f, 0, rs, (const char *const[]){ "--live", "--pid", pid,
							      "--max-bandwidth", "4M", NULL });
	}
	ck_assert_ptr_nonnull(tu_wait_event(&f.send[0], "setup", 30000));
	usleep(500 * 1000);
	tu_kill(&w, SIGKILL);
	tu_wait(&w, 5000);
	victim = spawn_victim_at(w.pid, mark);
	sc = tu_run_finish(&f.send[0], 60000);
	one_line(f.send[0].err, said, sizeof(said));
	{
		char path[64];

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)victim);
		one_line(path, st, sizeof(st));
	}
	kill(victim, SIGKILL);
	waitpid(victim, NULL, 0);
	unlink(ram);
	ck_assert_msg(sc != 0, "migrate-send exit 0 with its workload gone");
	ck_assert_msg(!tu_exists(mark), "pid %d, reused by another process, got SIGCONT from "
		      "migrate-send (%s)", (int)victim, said);
	ck_assert_msg(!strstr(st, ") T "), "pid %d, reused, was left stopped: %s", (int)victim,
		      st);
	printf("local: the workload exited mid-round and pid %d went to another process: it got "
	       "no signal; migrate-send exit %d: %s\n", (int)victim, sc, said);
	tu_rmdir(f.dir);
	tu_run_stop(&f.recv);
}
END_TEST

/* ---- a listener whose pid went to QEMU (issue 30, review) --------------------------- */

/* SO_PEERCRED names the process that called listen(), as it was: a
 * listener that exited leaves its pid to whoever gets the number next.
 * Here a child calls listen() on the test's socket and exits; a process
 * then takes its pid (ns_last_pid, as a pid wrap would); the impostor
 * answers on the socket.  migrate-recv --qmp SOCK --qmp-pid PID (the pid
 * a manager checked) and migrate-send --qmp SOCK alone must both refuse it
 * before sending a byte: the process of that pid does not hold the
 * connection.  Before (b89e3b0) the pid matched and the impostor got the
 * QMP session (found by the review of round 4). */
START_TEST(qmp_listener_pid_reused_refused)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char sock[300], mark[300], out[300], pidarg[16], said[8192], said2[8192], *text;
	pid_t listener, taken, imp;
	int fd, st, rc, rc2;
	struct lx f;

	lx_init(&f);
	snprintf(sock, sizeof(sock), "%s/qmp.sock", f.dir);
	snprintf(mark, sizeof(mark), "%s/victim.log", f.dir);
	snprintf(out, sizeof(out), "%s/impostor.out", f.dir);
	ck_assert_uint_lt(strlen(sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	listener = fork();
	ck_assert_int_ge(listener, 0);
	if (listener == 0)
		_exit(listen(fd, 4) ? 1 : 0);
	ck_assert_int_eq(waitpid(listener, &st, 0), listener);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	imp = fork();
	ck_assert_int_ge(imp, 0);
	if (imp == 0) {
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (o < 0 || dup2(o, 1) < 0 || dup2(o, 2) < 0 || dup2(fd, 3) < 0)
			_exit(126);
		execl("/usr/bin/python3", "python3", "-c", vm_qmp_impostor_py, (char *)NULL);
		_exit(127);
	}
	close(fd);
	taken = spawn_victim_at(listener, mark);
	snprintf(pidarg, sizeof(pidarg), "%d", (int)taken);
	rc = qmp_command(&f, 0, sock, (const char *const[]){ "--qmp-pid", pidarg, NULL }, said,
			 sizeof(said));
	rc2 = qmp_command(&f, 1, sock, NULL, said2, sizeof(said2));
	text = tu_slurp(out, NULL);
	kill(taken, SIGKILL);
	waitpid(taken, NULL, 0);
	kill(imp, SIGKILL);
	waitpid(imp, NULL, 0);
	printf("local: a QMP socket whose listener exited and whose pid %d another process took: "
	       "migrate-recv --qmp-pid %d -> exit %d: %s; migrate-send -> exit %d: %s\n",
	       (int)listener, (int)taken, rc, said, rc2, said2);
	ck_assert_msg(text && strstr(text, "serving"), "the impostor did not run: %s",
		      text ? text : "");
	ck_assert_msg(!strstr(text, "got "), "a command talked to the impostor: %s", text);
	ck_assert_msg(rc == 2 && strstr(said, "answered by a process other than pid"),
		      "migrate-recv exit %d: %s", rc, said);
	ck_assert_msg(rc2 == 2 && strstr(said2, "answered by a process other than pid"),
		      "migrate-send exit %d: %s", rc2, said2);
	free(text);
	lx_free(&f);
}
END_TEST

void local_cases(Suite *s)
{
	TCase *tc = tu_case(s, "softroce", 300);

	tcase_add_test(tc, precreated_files_refused);
	tcase_add_test(tc, room_refused_and_given_back);
	tcase_add_test(tc, concurrent_overfill_refused);
	tcase_add_test(tc, filled_mid_migration_fails_alone);
	tcase_add_test(tc, limits_hold_by_default);
	tcase_add_test(tc, reused_pid_gets_no_signal);
	/* Security round 4 (issue 30): CK_RUN_CASE=round4 runs them alone,
	 * RDMIG_BUILD=an older build to see them fail. */
	tc = tu_case(s, "round4", 300);
	tcase_add_loop_test(tc, qmp_ram_name_swapped, 0, 2);
	tcase_add_loop_test(tc, qmp_name_swapped_between_look_and_open, 0, 2);
	tcase_add_test(tc, qmp_listener_pid_reused_refused);
}
