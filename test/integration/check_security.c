/* Test as the attacker: build/test/evil_peer plays a hostile peer against the
 * real migrate-send and migrate-recv over Soft-RoCE, and each test checks
 * what it gained: nothing.  A replayed or relayed answer opens no
 * destination; handshakes that never authenticate are dropped in bounded
 * time and cost bounded resources; a peer's ring or image size does not
 * decide what the destination pins; an image counts as complete only once
 * the source holds the confirmation; --ram-dir overwrites nothing; the
 * control socket serves only its owner; a filesystem too small is refused
 * before any page moves.
 *
 * Every test prints one "security:" line with the figures of
 * docs/security.md's table (attack, outcome, the limit that applied, time
 * to drop).  They run against whatever build RDMIG_BUILD names, so an
 * older build can be shown to fail them; options an older migrate-recv
 * does not know are left out (and said so), so what fails there is the
 * attack, not the command line. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "suite.h"
#include "suites.h"
#include "fixture.h"
#include "runs.h"
#include "testutil.h"

#define KIB 1024ull
#define MIB (1ull << 20)
/* Handshake deadline of the destinations here (--timeout 5), and what a
 * slow emulated bed may add before the drop is seen. */
#define HANDSHAKE_MS 5000
#define GRACE_MS 2500
#define NOBODY 65534

struct sx {
	char dir[256], dst[300], key[300], recvbin[512], sendbin[512], evilbin[512];
	char addr[64], port[16], help[8192];
	struct tu_run recv, send, evil;
};

/* evil_peer is part of this test, not of the build under test: it sits
 * next to this binary whatever RDMIG_BUILD says. */
static void evil_path(char *buf, size_t len)
{
	char self[400];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	ck_assert_int_gt(n, 0);
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(buf, len, "%s/evil_peer", self);
}

static void sx_init(struct sx *f)
{
	/* A failing test ends its process: its security: line must be out. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(f, 0, sizeof(*f));
	tu_tmpdir(f->dir, sizeof(f->dir));
	snprintf(f->dst, sizeof(f->dst), "%s/dst", f->dir);
	ck_assert_int_eq(mkdir(f->dst, 0755), 0);
	/* The key of the keyed peers: an attacker is the one without it. */
	snprintf(f->key, sizeof(f->key), "%s/key", f->dir);
	tu_write_key(f->key);
	tu_build_path("bin/migrate-recv", f->recvbin, sizeof(f->recvbin));
	tu_build_path("bin/migrate-send", f->sendbin, sizeof(f->sendbin));
	evil_path(f->evilbin, sizeof(f->evilbin));
}

static void sx_free(struct sx *f)
{
	tu_run_stop(&f->evil);
	tu_run_stop(&f->send);
	tu_run_stop(&f->recv);
	tu_rmdir(f->dir);
}

/* Whether this build's migrate-recv has @opt (older ones lack the limits). */
static bool recv_knows(struct sx *f, const char *opt)
{
	if (!f->help[0]) {
		struct tu_run r;
		char *text;

		memset(&r, 0, sizeof(r));
		tu_run_spawn(&r, f->dir, "help", (char *[]){ f->recvbin, "--help", NULL });
		ck_assert_int_eq(tu_run_finish(&r, 20000), 0);
		text = tu_slurp(r.out, NULL);
		snprintf(f->help, sizeof(f->help), "%s", text ? text : "");
		free(text);
	}
	return strstr(f->help, opt) != NULL;
}

/* Appends "@opt @val" to @a when this build knows @opt. */
static void opt_if_known(struct sx *f, struct tu_argv *a, const char *opt, const char *val)
{
	if (!recv_knows(f, opt)) {
		printf("security: note: %s has no %s; running without it\n", f->recvbin, opt);
		return;
	}
	tu_argv_add(a, (const char *[]){ opt, val, NULL });
}

/* migrate-recv --json --listen ADDR:0 @args; waits until it listens. */
static void sx_recv(struct sx *f, const char *const *args)
{
	tu_recv_listen(&f->recv, f->dir, f->recvbin, NULL, args, 20000, f->port,
		       sizeof(f->port), f->addr, sizeof(f->addr));
}

/* migrate-send --connect @addr @args. */
static void sx_send(struct sx *f, const char *addr, const char *const *args)
{
	tu_run_cmd(&f->send, f->dir, "send",
		   (const char *[]){ f->sendbin, "--connect", addr, NULL }, args);
}

/* evil_peer MODE ADDR @args, output in DIR/@tag.{out,err}. */
static void sx_evil(struct sx *f, const char *tag, const char *mode, const char *const *args)
{
	tu_run_cmd(&f->evil, f->dir, tag,
		   (const char *[]){ f->evilbin, mode, f->addr, NULL }, args);
}

/* Waits for evil_peer and returns its exit status, its result line in @line. */
static int evil_result(struct sx *f, int timeout_ms, char *line, size_t len)
{
	int code = tu_run_finish(&f->evil, timeout_ms);
	char *text = tu_slurp(f->evil.out, NULL), *nl;

	snprintf(line, len, "%s", text ? text : "");
	free(text);
	nl = strchr(line, '\n');
	if (nl)
		*nl = '\0';
	if (code != 0 && code != 1)
		tu_run_dump(&f->evil, "evil_peer");
	return code;
}

/* The value of KEY=VALUE (or KEY="VALUE") in a result line, "" when absent. */
static const char *kv(const char *line, const char *key, char *buf, size_t len)
{
	char pat[64];
	const char *p, *end;

	snprintf(pat, sizeof(pat), " %s=", key);
	buf[0] = '\0';
	p = strstr(line, pat);
	if (!p)
		return buf;
	p += strlen(pat);
	if (*p == '"') {
		end = strchr(++p, '"');
	} else {
		end = strchr(p, ' ');
	}
	if (!end)
		end = p + strlen(p);
	snprintf(buf, len, "%.*s", (int)(end - p), p);
	return buf;
}

static long kv_num(const char *line, const char *key)
{
	char buf[64];

	kv(line, key, buf, sizeof(buf));
	return buf[0] ? strtol(buf, NULL, 10) : -1;
}

/* Lines of printable text: what a peer said reaches the operator as it was
 * sent, with nothing after it. */
static bool printable(const char *s)
{
	for (; s && *s; s++)
		if (*s != '\n' && (*s < 0x20 || *s > 0x7e))
			return false;
	return s != NULL;
}

/* @text on one line (newlines become " | "), for a security: line. */
static const char *flat(const char *text, char *buf, size_t len)
{
	size_t i, o = 0;

	for (i = 0; text && text[i] && o + 4 < len; i++) {
		if (text[i] != '\n') {
			buf[o++] = text[i];
		} else if (text[i + 1]) {
			memcpy(buf + o, " | ", 3);
			o += 3;
		}
	}
	buf[o] = '\0';
	return buf;
}

/* Names in @dir, comma-separated (empty when there are none). */
static int list_dir(const char *dir, char *buf, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t o = 0;
	int n = 0;

	buf[0] = '\0';
	ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (o < len)
			o += (size_t)snprintf(buf + o, len - o, "%s%s", n ? "," : "", de->d_name);
		n++;
	}
	closedir(d);
	return n;
}

/* ---- what a process holds ---------------------------------------------------------- */

struct usage {
	int fds;
	long rss_kb;
	uint64_t mr_bytes;
};

/* Bytes registered by @pid: the sum of mrlen in `rdma -j resource show mr`. */
static uint64_t mr_bytes(const char *dir, pid_t pid)
{
	struct tu_run r;
	struct json_object *all, *v;
	uint64_t sum = 0;
	size_t i;
	char *text;

	memset(&r, 0, sizeof(r));
	tu_run_spawn(&r, dir, "rdma", (char *[]){ "/usr/bin/rdma", "-j", "resource", "show",
						  "mr", NULL });
	ck_assert_int_eq(tu_run_finish(&r, 30000), 0);
	text = tu_slurp(r.out, NULL);
	all = json_tokener_parse(text && *text ? text : "[]");
	free(text);
	ck_assert_msg(all && json_object_is_type(all, json_type_array),
		      "rdma -j resource show mr did not print a JSON array");
	for (i = 0; i < json_object_array_length(all); i++) {
		struct json_object *mr = json_object_array_get_idx(all, i);

		if (json_object_object_get_ex(mr, "pid", &v) && json_object_get_int64(v) == pid &&
		    json_object_object_get_ex(mr, "mrlen", &v))
			sum += (uint64_t)json_object_get_int64(v);
	}
	json_object_put(all);
	return sum;
}

static void measure(const char *dir, pid_t pid, struct usage *u)
{
	u->mr_bytes = mr_bytes(dir, pid);
	tu_proc_usage(pid, &u->fds, &u->rss_kb);
}

static void peak(struct usage *p, const struct usage *u)
{
	p->fds = u->fds > p->fds ? u->fds : p->fds;
	p->rss_kb = u->rss_kb > p->rss_kb ? u->rss_kb : p->rss_kb;
	p->mr_bytes = u->mr_bytes > p->mr_bytes ? u->mr_bytes : p->mr_bytes;
}

/* ---- replay ------------------------------------------------------------------------- */

/* Runs harvest --variant @variant with a real keyed migrate-send pointed at
 * it; returns evil_peer's status, the result line in @line and the source's
 * exit status in *sc. */
static int harvest(struct sx *f, const char *variant, const char *src, const char *key,
		   int *sc, char *line, size_t len)
{
	char port[32], eaddr[80], rs[400];
	int code;

	sx_evil(f, variant, "harvest", (const char *const[]){ "--variant", variant, "--listen",
							     tu_addr(), "--timeout", "5000",
							     NULL });
	if (tu_wait_line(f->evil.err, "evil_peer: listening on port ", port, sizeof(port),
			 20000)) {
		tu_run_dump(&f->evil, "evil_peer");
		ck_abort_msg("evil_peer did not listen");
	}
	snprintf(eaddr, sizeof(eaddr), "%s:%s", tu_addr(), port);
	snprintf(rs, sizeof(rs), "ram=%s", src);
	sx_send(f, eaddr, (const char *const[]){ "--ram", rs, "--auth-key", key, "--timeout",
						 "5", NULL });
	code = evil_result(f, 60000, line, len);
	*sc = tu_run_finish(&f->send, 30000);
	return code;
}

/* A source's answer, collected by posing as its destination, opens nothing:
 * (a) an all-zero challenge is not answered at all; (b) a relay that hands
 * the source the real destination's challenge (and its exact ACCEPT) gets
 * an answer bound to the wrong connection, replayed on a connection whose
 * RTU it never sent.  The destination turns it away, creates nothing, and
 * still takes the real source afterwards. */
START_TEST(replay_refused)
{
	struct sx f;
	char src[320], rs[400], dst[400], line[2048], v[1200], said[1200];
	char list[512], turned[2048], one[4096];
	char *err;
	int code, sc, rc;

	sx_init(&f);
	snprintf(src, sizeof(src), "%s/ram", f.dir);
	snprintf(dst, sizeof(dst), "%s/ram", f.dst);
	tu_write_random(src, MIB, 11);
	sx_recv(&f, (const char *const[]){ "--ram-dir", f.dst, "--auth-key", f.key, "--timeout",
					   "5", NULL });

	/* (a) an all-zero challenge, as the old destination had before its
	 * ESTABLISHED */
	code = harvest(&f, "zero", src, f.key, &sc, line, sizeof(line));
	err = tu_slurp(f.send.err, NULL);
	printf("security: replay (a) zero challenge: attacker exit %d: %s | migrate-send exit %d: "
	       "%s\n", code, line, sc, flat(err, one, sizeof(one)));
	ck_assert_msg(code == 1, "the attack was not refused: %s", line);
	ck_assert_msg(!strcmp(kv(line, "answer", v, sizeof(v)), "none"),
		      "the source answered a zero challenge: %s", line);
	ck_assert_msg(sc == 4 && err && strstr(err, "challenge"),
		      "migrate-send exit %d: %s", sc, err ? err : "");
	free(err);

	/* (b) relay of the real challenge */
	code = harvest(&f, "relay", src, f.key, &sc, line, sizeof(line));
	kv(line, "dest-said", said, sizeof(said));
	printf("security: replay (b) relayed challenge, no RTU: attacker exit %d: %s | "
	       "migrate-send exit %d\n", code, line, sc);
	ck_assert_msg(code == 1, "the attack was not refused: %s", line);
	ck_assert_msg(!strcmp(kv(line, "answer", v, sizeof(v)), "obtained"),
		      "the relay got no answer to replay, so nothing was tested: %s", line);
	ck_assert_msg(!strcmp(kv(line, "block-map-resp", v, sizeof(v)), "no"), "%s", line);
	ck_assert_msg(strstr(said, "authentication failed"), "destination said: %s", said);
	if (tu_wait_line(f.recv.err, "migrate-recv: turned away a connection from ", turned,
			 sizeof(turned), 10000))
		turned[0] = '\0';
	ck_assert_msg(strstr(turned, "authentication failed"),
		      "migrate-recv did not say it turned the relay away: %s", turned);
	ck_assert_msg(tu_run_running(&f.recv), "migrate-recv stopped waiting");
	ck_assert_msg(list_dir(f.dst, list, sizeof(list)) == 0, "--ram-dir holds %s", list);

	/* The real source still gets through. */
	snprintf(rs, sizeof(rs), "ram=%s", src);
	sx_send(&f, f.addr, (const char *const[]){ "--ram", rs, "--auth-key", f.key, "--timeout",
						   "5", NULL });
	sc = tu_run_finish(&f.send, 60000);
	rc = tu_run_finish(&f.recv, 60000);
	if (sc || rc) {
		tu_run_dump(&f.send, "send");
		tu_run_dump(&f.recv, "recv");
	}
	ck_assert_int_eq(sc, 0);
	ck_assert_int_eq(rc, 0);
	ck_assert_msg(tu_same_file(src, dst), "the legitimate migration's image differs");
	printf("security: replay: migrate-recv turned the relay away (%s); the real source "
	       "migrated 1 MiB byte-identical afterwards\n", turned);
	sx_free(&f);
}
END_TEST

/* A destination that offers its device-state ring (STATE_RING) as its first
 * frame, before it proved the key (it has none): the source answers with
 * an ERROR and registers nothing for it; the ring is taken only after the
 * block map's answer, which comes only after authentication.  Before
 * (2cee698) the source acted on STATE_RING in any state and registered its
 * ring for whoever sent it first (security round 4, issue 30). */
START_TEST(state_ring_before_auth_refused)
{
	struct sx f;
	char src[320], rs[400], port[32], eaddr[80], line[2048], one[4096], *err;
	int code, sc;

	sx_init(&f);
	snprintf(src, sizeof(src), "%s/ram", f.dir);
	tu_write_random(src, MIB, 12);
	snprintf(f.addr, sizeof(f.addr), "%s:1", tu_addr());
	sx_evil(&f, "ring", "ring", (const char *const[]){ "--listen", tu_addr(), "--timeout",
							   "5000", NULL });
	if (tu_wait_line(f.evil.err, "evil_peer: listening on port ", port, sizeof(port),
			 20000)) {
		tu_run_dump(&f.evil, "evil_peer");
		ck_abort_msg("evil_peer did not listen");
	}
	snprintf(eaddr, sizeof(eaddr), "%s:%s", tu_addr(), port);
	snprintf(rs, sizeof(rs), "ram=%s", src);
	sx_send(&f, eaddr, (const char *const[]){ "--ram", rs, "--auth-key", f.key, "--timeout",
						  "5", NULL });
	code = evil_result(&f, 60000, line, sizeof(line));
	sc = tu_run_finish(&f.send, 30000);
	err = tu_slurp(f.send.err, NULL);
	printf("security: STATE_RING before authentication: attacker exit %d: %s | migrate-send "
	       "exit %d: %s\n", code, line, sc, flat(err, one, sizeof(one)));
	ck_assert_msg(code == 1, "the source took the ring: %s", line);
	ck_assert_msg(sc != 0 && err && strstr(err, "STATE_RING before"), "migrate-send exit %d: "
		      "%s", sc, err ? err : "");
	free(err);
	sx_free(&f);
}
END_TEST

/* ---- handshakes that never end ----------------------------------------------------------- */

/* Six connections that request AUTH and only ever send KEEPALIVEs, against
 * a daemon allowing four handshakes with a 5 s handshake deadline: each is
 * dropped within the deadline, the extra ones are refused busy (or evict a
 * stale one), a real source started 1.5 s in still migrates, and the daemon
 * ends with what it started with. */
START_TEST(held_connections_dropped)
{
	struct sx f;
	char src[320], rs[400], line[2048], drops[512], tokens[512], reason[1200];
	char list[512], path[512];
	struct tu_argv a = { .n = 0 };
	struct usage base, top, now, after;
	struct json_object *done;
	uint64_t t_made, t_legit;
	int code, sc, open_n, busy, held, early = 0, late = 0;
	long max_drop = 0;
	char *p, *tok, *save = NULL;

	sx_init(&f);
	snprintf(src, sizeof(src), "%s/ram", f.dir);
	tu_write_random(src, MIB, 12);
	tu_argv_add(&a, (const char *[]){ "--daemon", "--ram-dir", f.dst, "--auth-key", f.key,
					  "--timeout", "5", NULL });
	opt_if_known(&f, &a, "--max-handshakes", "4");
	sx_recv(&f, (const char *const *)a.v);
	measure(f.dir, f.recv.p.pid, &base);
	top = base;

	sx_evil(&f, "hold", "hold", (const char *const[]){ "6", "12", "--timeout", "5000", NULL });
	if (tu_wait_line(f.evil.err, "evil_peer: hold: all connections made", NULL, 0, 30000)) {
		tu_run_dump(&f.evil, "evil_peer");
		ck_abort_msg("evil_peer did not make its connections");
	}
	t_made = tu_now_ms();
	while (tu_now_ms() < t_made + 1500) {
		measure(f.dir, f.recv.p.pid, &now);
		peak(&top, &now);
	}
	snprintf(rs, sizeof(rs), "ram=%s", src);
	t_legit = tu_now_ms();
	sx_send(&f, f.addr, (const char *const[]){ "--ram", rs, "--auth-key", f.key, "--timeout",
						   "5", NULL });
	while (tu_run_running(&f.evil) || tu_run_running(&f.send)) {
		measure(f.dir, f.recv.p.pid, &now);
		peak(&top, &now);
		if (tu_now_ms() > t_made + 40000)
			break;
	}
	sc = tu_run_finish(&f.send, 30000);
	t_legit = tu_now_ms() - t_legit;
	code = evil_result(&f, 30000, line, sizeof(line));
	usleep(500000); /* the daemon's last teardown */
	measure(f.dir, f.recv.p.pid, &after);

	list_dir(f.dst, list, sizeof(list));
	open_n = (int)kv_num(line, "open");
	busy = (int)kv_num(line, "busy");
	held = (int)kv_num(line, "held");
	kv(line, "drop-ms", drops, sizeof(drops));
	kv(line, "first-reason", reason, sizeof(reason));
	snprintf(tokens, sizeof(tokens), "%s", drops);
	for (p = tokens, tok = strtok_r(p, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		long d = strcmp(tok, "held") ? strtol(tok, NULL, 10) : 1000000;

		max_drop = d > max_drop ? d : max_drop;
		/* Dropped well before the deadline: evicted for a newcomer. */
		if (d < HANDSHAKE_MS - 1000)
			early++;
		else
			late++;
	}
	printf("security: held handshakes: 6 connections with keepalives every 200 ms, "
	       "--max-handshakes 4 --timeout 5: %d open, %d refused busy, %d still held; dropped "
	       "after %s ms (deadline %d ms): \"%s\"; real source started 1.5 s in: exit %d in "
	       "%" PRIu64 " ms; daemon fds %d/%d/%d, VmRSS %ld/%ld/%ld kB, registered %" PRIu64
	       "/%" PRIu64 "/%" PRIu64 " bytes (start/peak/end); --ram-dir holds: %s\n", open_n,
	       busy, held, drops[0] ? drops : "-", HANDSHAKE_MS, reason, sc, t_legit, base.fds,
	       top.fds, after.fds, base.rss_kb, top.rss_kb, after.rss_kb, base.mr_bytes,
	       top.mr_bytes, after.mr_bytes, list[0] ? list : "nothing");
	ck_assert_msg(code == 1 && held == 0, "connections were still held after 12 s: %s", line);
	ck_assert_msg(max_drop <= HANDSHAKE_MS + GRACE_MS,
		      "a handshake lived %ld ms, deadline %d ms: %s", max_drop, HANDSHAKE_MS, line);
	ck_assert_msg(open_n + busy == 6 && early + late == open_n, "%s", line);
	/* At most four handshakes at once: every one beyond that was refused
	 * busy or pushed a stale one out. */
	ck_assert_msg(open_n - early <= 4, "%d handshakes lived to the deadline: %s",
		      open_n - early, line);
	/* Each newcomer that needed room (the real source, and any of ours
	 * that arrived once the others were stale) pushes out one. */
	ck_assert_msg(early <= (open_n > 4 ? open_n - 4 : 0) + 1, "%d handshakes were dropped "
		      "to make room for %d newcomers: %s", early, (open_n > 4 ? open_n - 4 : 0) + 1,
		      line);
	ck_assert_msg(sc == 0, "the real source failed (exit %d) while the handshakes were held",
		      sc);
	done = tu_event_in(f.recv.out, "completed");
	ck_assert_msg(done != NULL, "the daemon reported no completed migration");
	{
		struct json_object *d;

		ck_assert(json_object_object_get_ex(done, "dir", &d));
		snprintf(path, sizeof(path), "%s/ram", json_object_get_string(d));
	}
	json_object_put(done);
	ck_assert_msg(tu_same_file(src, path), "%s differs from the source", path);
	ck_assert_msg(list_dir(f.dst, list, sizeof(list)) == 1,
		      "--ram-dir holds %s; only the real source's directory belongs there", list);
	ck_assert_msg(!tu_has_event(f.recv.out, "failed"),
		      "a handshake was reported as a failed migration");
	ck_assert_msg(after.fds <= base.fds + 2, "fds %d at start, %d at the end", base.fds,
		      after.fds);
	ck_assert_msg(top.fds <= base.fds + 24, "fds %d at start, peak %d", base.fds, top.fds);
	ck_assert_msg(after.rss_kb <= base.rss_kb + 16 * 1024, "VmRSS %ld kB at start, %ld at "
		      "the end", base.rss_kb, after.rss_kb);
	ck_assert_msg(after.mr_bytes <= base.mr_bytes, "registered %" PRIu64 " bytes at the "
		      "end, %" PRIu64 " at start", after.mr_bytes, base.mr_bytes);
	/* Five connections at most (four handshakes and the real source),
	 * 4 MiB of control rings each, and the real source's 1 MiB image. */
	ck_assert_msg(top.mr_bytes <= 24 * MIB, "registered up to %" PRIu64 " bytes",
		      top.mr_bytes);
	ck_assert(tu_run_running(&f.recv));
	sx_free(&f);
}
END_TEST

/* ---- rings ------------------------------------------------------------------------------ */

/* A peer announcing 64 receive buffers of 16 MiB makes the destination
 * size its send ring from that: it must pin what its own limits say, not
 * what the peer asked for. */
START_TEST(huge_rings_bounded)
{
	struct sx f;
	struct usage base, now, top;
	char line[2048], list[512];
	uint64_t t_end = 0;
	int code;

	sx_init(&f);
	sx_recv(&f, (const char *const[]){ "--ram-dir", f.dst, "--timeout", "10", NULL });
	measure(f.dir, f.recv.p.pid, &base);
	top = base;
	sx_evil(&f, "rings", "rings", (const char *const[]){ "--depth", "64", "--msg-max",
							     "16777216", "--hold-ms", "6000",
							     "--timeout", "5000", NULL });
	/* Sampled until a while after the attacker left: registering what it
	 * asked for may outlast its stay. */
	while (tu_run_running(&f.recv) && (tu_run_running(&f.evil) || !t_end || tu_now_ms() < t_end)) {
		if (!t_end && !tu_run_running(&f.evil))
			t_end = tu_now_ms() + 2000;
		measure(f.dir, f.recv.p.pid, &now);
		peak(&top, &now);
	}
	code = evil_result(&f, 30000, line, sizeof(line));
	printf("security: huge rings: asked 64 x 16 MiB: attacker exit %d: %s | destination "
	       "registered %" PRIu64 " bytes at peak (%" PRIu64 " before), VmRSS peak %ld kB; "
	       "bound 8 MiB\n", code, line, top.mr_bytes, base.mr_bytes, top.rss_kb);
	ck_assert_msg(top.mr_bytes < 8 * MIB, "the destination registered %" PRIu64 " bytes "
		      "for a peer that only asked", top.mr_bytes);
	ck_assert_msg(kv_num(line, "frames-from-dest") > 0,
		      "the destination sent nothing, so its send ring was never made: %s", line);
	ck_assert_msg(tu_run_running(&f.recv), "migrate-recv did not survive the request");
	ck_assert_msg(list_dir(f.dst, list, sizeof(list)) == 0, "--ram-dir holds %s", list);
	sx_free(&f);
}
END_TEST

/* ---- limits ------------------------------------------------------------------------------- */

/* A source that holds the key but asks for a 1 TiB image, or pin-all of
 * more than the destination's cap, is refused at the block map with the
 * limit named, before anything is mapped; a real migrate-send shows the
 * destination's reason. */
START_TEST(limits_refused_at_block_map)
{
	struct sx f;
	char src[320], rs[400], line[2048], said[1200], list[512], turned[2048];
	char one[4096];
	struct tu_argv a = { .n = 0 };
	char *err, *p;
	int code, sc;

	sx_init(&f);
	snprintf(src, sizeof(src), "%s/ram", f.dir);
	tu_argv_add(&a, (const char *[]){ "--ram-dir", f.dst, "--auth-key", f.key, "--timeout",
					  "5", NULL });
	opt_if_known(&f, &a, "--max-image", "64M");
	opt_if_known(&f, &a, "--pinned-cap", "16M");
	sx_recv(&f, (const char *const *)a.v);

	sx_evil(&f, "bigmap1", "bigmap", (const char *const[]){ "--key", f.key, "--size",
								"1099511627776", "--timeout",
								"5000", NULL });
	code = evil_result(&f, 60000, line, sizeof(line));
	kv(line, "dest-said", said, sizeof(said));
	printf("security: 1 TiB block from an authenticated source, --max-image 64M: attacker "
	       "exit %d: %s\n", code, line);
	ck_assert_msg(code == 1, "the destination took a 1 TiB image: %s", line);
	ck_assert_msg(strstr(said, "1099511627776") && strstr(said, "67108864") &&
		      strstr(said, "image limit"), "destination said: %s", said);
	ck_assert_msg(list_dir(f.dst, list, sizeof(list)) == 0, "--ram-dir holds %s", list);

	sx_evil(&f, "bigmap2", "bigmap", (const char *const[]){ "--key", f.key, "--size",
								"33554432", "--pin-all",
								"--timeout", "5000", NULL });
	code = evil_result(&f, 60000, line, sizeof(line));
	kv(line, "dest-said", said, sizeof(said));
	printf("security: pin-all of 32 MiB, --pinned-cap 16M: attacker exit %d: %s\n", code,
	       line);
	ck_assert_msg(code == 1, "the destination pinned 32 MiB past its cap: %s", line);
	ck_assert_msg(strstr(said, "pinned-bytes cap") && strstr(said, "16777216"),
		      "destination said: %s", said);
	ck_assert_msg(list_dir(f.dst, list, sizeof(list)) == 0, "--ram-dir holds %s", list);

	/* The real command says the same. */
	tu_write_random(src, 32 * MIB, 13);
	snprintf(rs, sizeof(rs), "ram=%s", src);
	sx_send(&f, f.addr, (const char *const[]){ "--ram", rs, "--auth-key", f.key, "--pin-all",
						   "--timeout", "5", NULL });
	sc = tu_run_finish(&f.send, 60000);
	err = tu_slurp(f.send.err, NULL);
	printf("security: migrate-send --pin-all of 32 MiB, --pinned-cap 16M: exit %d: %s\n", sc,
	       flat(err, one, sizeof(one)));
	ck_assert_msg(sc != 0 && err && strstr(err, "pinned-bytes cap"), "migrate-send exit %d: "
		      "%s", sc, err ? err : "");
	/* The destination's reason, exactly, at the end of the line. */
	p = strstr(err, said);
	ck_assert_msg(p && p[strlen(said)] == '\n' && printable(err),
		      "migrate-send garbled the destination's reason: %s", err);
	free(err);
	ck_assert_msg(list_dir(f.dst, list, sizeof(list)) == 0, "--ram-dir holds %s", list);
	ck_assert_msg(tu_run_running(&f.recv), "migrate-recv stopped waiting");
	ck_assert(tu_wait_line(f.recv.err, "migrate-recv: turned away a connection from ", turned,
			       sizeof(turned), 5000) == 0);
	sx_free(&f);
}
END_TEST

/* ---- data pages inside messages ---------------------------------------------------------- */

/* Bytes of @path equal to @v. */
static uint64_t count_byte(const char *path, uint8_t v)
{
	size_t len = 0, i;
	char *text = tu_slurp(path, &len);
	uint64_t n = 0;

	for (i = 0; text && i < len; i++)
		n += (uint8_t)text[i] == v;
	free(text);
	return n;
}

/* A source that puts data pages in PAGES messages where the block has none:
 * past its end, across a page boundary, into a block it never announced.
 * The daemon must fail that migration with a reason and write nothing; the
 * same message with a proper run (the control) lands where it says. */
START_TEST(pages_outside_the_block)
{
	static const char *const variants[] = { "outside", "torn", "index" };
	struct sx f;
	char line[2048], said[1200], file[400], tag[32];
	bool landed = false;
	unsigned i;
	int code;

	sx_init(&f);
	/* The attacker holds no key: a daemon on a fabric the operator trusts. */
	sx_recv(&f, (const char *const[]){ "--ram-dir", f.dst, "--daemon", "--timeout", "5",
					   "--trusted-fabric", NULL });
	for (i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		snprintf(tag, sizeof(tag), "pages-%s", variants[i]);
		sx_evil(&f, tag, "pages", (const char *const[]){ "--variant", variants[i],
								 "--size", "1048576",
								 "--timeout", "5000", NULL });
		code = evil_result(&f, 30000, line, sizeof(line));
		kv(line, "dest-said", said, sizeof(said));
		printf("security: PAGES %s: attacker exit %d: %s\n", variants[i], code, line);
		fflush(stdout);
		ck_assert_msg(code == 1, "the destination took a %s run: %s", variants[i], line);
		ck_assert_msg(strstr(said, "PAGES run 0"), "destination said: %s", said);
		/* Migration i + 1's block file: nothing of the attacker's in it. */
		snprintf(file, sizeof(file), "%s/%u/ram", f.dst, i + 1);
		ck_assert_msg(!tu_exists(file) || count_byte(file, 0xaa) == 0, "%s holds 0xaa bytes",
			      file);
		ck_assert_msg(tu_run_running(&f.recv), "migrate-recv died on a %s run", variants[i]);
	}
	/* The control: a proper first page lands.  It is seen while the peer
	 * holds on: once it goes, the daemon removes the failed migration's
	 * files (the space goes back). */
	sx_evil(&f, "pages-honest", "pages", (const char *const[]){ "--variant", "honest",
								    "--size", "1048576",
								    "--timeout", "5000", NULL });
	snprintf(file, sizeof(file), "%s/4/ram", f.dst);
	while (!landed && tu_run_running(&f.evil)) {
		landed = tu_exists(file) && count_byte(file, 0xaa) == 4096;
		usleep(20000);
	}
	code = evil_result(&f, 30000, line, sizeof(line));
	printf("security: PAGES honest (control): attacker exit %d, page seen landing: %s: %s\n",
	       code, landed ? "yes" : "no", line);
	ck_assert_msg(code == 0, "a proper PAGES run was refused: %s", line);
	ck_assert_msg(landed, "the proper page never showed in %s", file);
	ck_assert(tu_run_running(&f.recv));
	sx_free(&f);
}
END_TEST

/* ---- completion nobody confirmed --------------------------------------------------------- */

/* A source that sends COMPLETE and destroys its QP before the COMPLETE_ACK
 * can land: the destination must not call the image complete, since the
 * source may have resumed (markers stay, the state keeps its .part name or
 * goes). */
START_TEST(unconfirmed_completion)
{
	struct sx f;
	char state[320], marker[400], line[2048], one[4096], *err;
	uint64_t t0;
	int code, rc;

	sx_init(&f);
	snprintf(state, sizeof(state), "%s/state", f.dir);
	snprintf(marker, sizeof(marker), "%s/ram.incomplete", f.dst);
	sx_recv(&f, (const char *const[]){ "--ram-dir", f.dst, "--state-out", state, "--timeout",
					   "5", NULL });
	t0 = tu_now_ms();
	sx_evil(&f, "vanish", "vanish", (const char *const[]){ "--size", "65536", "--timeout",
							       "5000", NULL });
	rc = tu_run_finish(&f.recv, 60000);
	t0 = tu_now_ms() - t0;
	code = evil_result(&f, 60000, line, sizeof(line));
	err = tu_slurp(f.recv.err, NULL);
	printf("security: vanish after COMPLETE: attacker exit %d: %s | migrate-recv exit %d after "
	       "%" PRIu64 " ms, completed event %s, marker %s, state %s: %s\n", code, line, rc, t0,
	       tu_has_event(f.recv.out, "completed") ? "yes" : "no",
	       tu_exists(marker) ? "kept" : "removed", tu_exists(state) ? "renamed into place" : "absent",
	       flat(err, one, sizeof(one)));
	free(err);
	ck_assert_msg(code == 0, "the mini-migration did not get to COMPLETE: %s", line);
	ck_assert_msg(rc != 0 && rc != -1, "migrate-recv exit %d", rc);
	ck_assert_msg(!tu_has_event(f.recv.out, "completed"),
		      "migrate-recv reported a completion the source never received");
	ck_assert_msg(tu_exists(marker), "%s was removed before the source had the confirmation",
		      marker);
	ck_assert_msg(!tu_exists(state), "%s was put in place before the source had the "
		      "confirmation", state);
	sx_free(&f);
}
END_TEST

/* ---- --ram-dir and --state-out -------------------------------------------------------------- */

/* One migration of block @name from @src into migrate-recv @args; returns
 * migrate-send's exit status with its stderr in @err. */
static int refused_run(struct sx *f, const char *name, const char *src, const char *const *args,
		       char *err, size_t len)
{
	char rs[400], *text;
	int sc;

	sx_recv(f, args);
	snprintf(rs, sizeof(rs), "%s=%s", name, src);
	sx_send(f, f->addr, (const char *const[]){ "--ram", rs, "--timeout", "5", NULL });
	sc = tu_run_finish(&f->send, 60000);
	text = tu_slurp(f->send.err, NULL);
	snprintf(err, len, "%s", text ? text : "");
	free(text);
	if (tu_run_finish(&f->recv, 15000) < 0)
		tu_run_stop(&f->recv);
	return sc;
}

/* --ram-dir holds images migrate-recv makes: a file that is already there,
 * or a symlink to someone else's, is refused naming it and stays as it was;
 * a block named like the --state-out file is refused too. */
START_TEST(ram_dir_does_not_overwrite)
{
	static const char precious[] = "the operator's own image, not to be overwritten\n";
	static const char victim_data[] = "a file the symlink points at\n";
	struct sx f;
	char src[320], d2[320], d3[320], file[400], link[400], victim[320], state[400];
	char err[4096], one[4096], *text;
	struct stat st;
	int sc;

	sx_init(&f);
	snprintf(src, sizeof(src), "%s/src", f.dir);
	snprintf(file, sizeof(file), "%s/ram", f.dst);
	snprintf(d2, sizeof(d2), "%s/dst2", f.dir);
	snprintf(d3, sizeof(d3), "%s/dst3", f.dir);
	snprintf(link, sizeof(link), "%s/ram", d2);
	snprintf(victim, sizeof(victim), "%s/victim", f.dir);
	snprintf(state, sizeof(state), "%s/blk", d3);
	ck_assert_int_eq(mkdir(d2, 0755), 0);
	ck_assert_int_eq(mkdir(d3, 0755), 0);
	tu_write_random(src, 64 * KIB, 14);

	/* An existing regular file. */
	tu_write_file(file, precious, sizeof(precious) - 1, 0644);
	sc = refused_run(&f, "ram", src, (const char *const[]){ "--ram-dir", f.dst, "--timeout",
							       "5", NULL }, err, sizeof(err));
	text = tu_slurp(file, NULL);
	printf("security: --ram-dir with ram already there: migrate-send exit %d, content %s: "
	       "%s\n", sc, text && !strcmp(text, precious) ? "unchanged" : "CHANGED",
	       flat(err, one, sizeof(one)));
	ck_assert_msg(sc != 0 && strstr(err, file), "migrate-send exit %d: %s", sc, err);
	ck_assert_msg(printable(err), "migrate-send garbled the destination's reason: %s", err);
	ck_assert_msg(text && !strcmp(text, precious), "%s was overwritten", file);
	free(text);

	/* A symlink to a victim. */
	tu_write_file(victim, victim_data, sizeof(victim_data) - 1, 0644);
	ck_assert_int_eq(symlink(victim, link), 0);
	sc = refused_run(&f, "ram", src, (const char *const[]){ "--ram-dir", d2, "--timeout", "5",
							       NULL }, err, sizeof(err));
	text = tu_slurp(victim, NULL);
	printf("security: --ram-dir with ram a symlink to another file: migrate-send exit %d, "
	       "victim %s: %s\n", sc, text && !strcmp(text, victim_data) ? "unchanged" :
	       "CHANGED", flat(err, one, sizeof(one)));
	ck_assert_msg(sc != 0 && strstr(err, link), "migrate-send exit %d: %s", sc, err);
	ck_assert_msg(printable(err), "migrate-send garbled the destination's reason: %s", err);
	ck_assert_msg(text && !strcmp(text, victim_data), "%s was overwritten", victim);
	ck_assert(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
	free(text);

	/* A block named like the state file. */
	sc = refused_run(&f, "blk", src, (const char *const[]){ "--ram-dir", d3, "--state-out",
							       state, "--timeout", "5", NULL },
			 err, sizeof(err));
	printf("security: block \"blk\" with --state-out DIR/blk: migrate-send exit %d, %s "
	       "%s: %s\n", sc, state, tu_exists(state) ? "EXISTS" : "absent",
	       flat(err, one, sizeof(one)));
	ck_assert_msg(sc != 0 && strstr(err, "blk") && strstr(err, "state"),
		      "migrate-send exit %d: %s", sc, err);
	ck_assert_msg(printable(err), "migrate-send garbled the destination's reason: %s", err);
	ck_assert_msg(!tu_exists(state), "%s was created", state);
	sx_free(&f);
}
END_TEST

/* ---- control socket ---------------------------------------------------------------------- */

/* Connects to @sock as uid/gid @uid (dropped before the connect, as a
 * stranger would be), sends @line and returns what happened. */
static void as_stranger(const char *sock, uid_t uid, const char *line, char *out, size_t len)
{
	size_t got;
	int fds[2];
	pid_t pid;
	ssize_t n;

	ck_assert(strlen(sock) < sizeof(((struct sockaddr_un *)0)->sun_path));
	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		char buf[1024] = "";
		size_t rgot = 0;
		int fd;

		close(fds[0]);
		if (setgroups(0, NULL) || setgid(uid) || setuid(uid)) {
			dprintf(fds[1], "cannot become uid %u: %s", (unsigned)uid, strerror(errno));
			_exit(1);
		}
		memcpy(sa.sun_path, sock, strlen(sock) + 1); /* checked by the caller */
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
			dprintf(fds[1], "connect: %s", strerror(errno));
			_exit(0);
		}
		/* The destination may answer and hang up before our line is
		 * out: what it said is still there to read. */
		if (send(fd, line, strlen(line), MSG_NOSIGNAL) < 0)
			dprintf(fds[1], "(send: %s) ", strerror(errno));
		while (rgot < sizeof(buf) - 1 && !memchr(buf, '\n', rgot)) {
			n = read(fd, buf + rgot, sizeof(buf) - 1 - rgot);
			if (n <= 0)
				break;
			rgot += (size_t)n;
		}
		buf[rgot] = '\0';
		dprintf(fds[1], "reply: %s", rgot ? buf : "(none)");
		_exit(0);
	}
	close(fds[1]);
	got = 0;
	while (got < len - 1 && (n = read(fds[0], out + got, len - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(fds[0]);
	waitpid(pid, NULL, 0);
	out[strcspn(out, "\n")] = '\0';
}

/* migrate-recv --control under umask 000: the socket is 0600 anyway, a
 * stranger cannot connect, and even through a socket made world-writable
 * afterwards its cancel is refused by credentials; the owner's status works. */
START_TEST(control_socket_owner_only)
{
	static const char cancel[] = "{\"command\":\"cancel\"}\n";
	struct sx f;
	char sock[320], direct[1200], loose[1200], mine[4096];
	struct stat st;
	mode_t old;
	int mode;

	sx_init(&f);
	snprintf(sock, sizeof(sock), "%s/recv.ctl", f.dir);
	ck_assert_int_eq(chmod(f.dir, 0755), 0); /* a stranger may traverse it */
	old = umask(0);
	sx_recv(&f, (const char *const[]){ "--ram-dir", f.dst, "--control", sock, NULL });
	umask(old);
	ck_assert_msg(stat(sock, &st) == 0, "%s: %s", sock, strerror(errno));
	mode = (int)(st.st_mode & 0777);
	as_stranger(sock, NOBODY, cancel, direct, sizeof(direct));
	usleep(300000);
	ck_assert_msg(tu_run_running(&f.recv), "a stranger's cancel stopped migrate-recv (mode %o; %s)",
		      mode, direct);
	/* Made world-writable behind its back: the credentials still decide. */
	ck_assert_int_eq(chmod(sock, 0666), 0);
	as_stranger(sock, NOBODY, cancel, loose, sizeof(loose));
	usleep(300000);
	printf("security: control socket under umask 000: mode %03o; uid %d connecting: %s; "
	       "after chmod 0666: %s\n", mode, NOBODY, direct, loose);
	ck_assert_msg(mode == 0600, "the control socket is mode %03o", mode);
	ck_assert_msg(strstr(direct, "ermission denied"), "a stranger got: %s", direct);
	ck_assert_msg(strstr(loose, "permission denied"), "a stranger got: %s", loose);
	ck_assert_msg(tu_run_running(&f.recv), "a stranger's cancel stopped migrate-recv");
	tu_control_line(sock, "{\"command\":\"status\"}\n", mine, sizeof(mine), 60000);
	printf("security: control socket: the owner's status: %s\n", mine);
	ck_assert_msg(strstr(mine, "\"return\"") && strstr(mine, "listening"), "status: %s",
		      mine);
	sx_free(&f);
}
END_TEST

/* ---- a filesystem too small ------------------------------------------------------------------ */

/* A 16 MiB block into an 8 MiB tmpfs: refused at the block map, naming the
 * block, the path, what is needed and what is free, before any page
 * moves. */
START_TEST(no_space_refused_up_front)
{
	struct sx f;
	char mnt[320], src[320], rs[400], file[400], marker[420], list[512], one[4096];
	char *rerr, *serr;
	struct json_object *failed;
	int sc, rc, iter, mounted;
	bool left_file, left_marker;
	uint64_t landed;
	struct stat st;
	long normal = -1;

	sx_init(&f);
	snprintf(mnt, sizeof(mnt), "%s/small", f.dir);
	snprintf(src, sizeof(src), "%s/ram", f.dir);
	snprintf(file, sizeof(file), "%s/ram", mnt);
	ck_assert_int_eq(mkdir(mnt, 0755), 0);
	mounted = mount("tmpfs", mnt, "tmpfs", 0, "size=8m,mode=0755") == 0;
	ck_assert_msg(mounted, "mount -t tmpfs -o size=8m %s: %s (needs root: run it in "
		      "tools/softroce)", mnt, strerror(errno));
	tu_write_random(src, 16 * MIB, 15);
	sx_recv(&f, (const char *const[]){ "--ram-dir", mnt, "--timeout", "5", NULL });
	snprintf(rs, sizeof(rs), "ram=%s", src);
	sx_send(&f, f.addr, (const char *const[]){ "--ram", rs, "--json", "--timeout", "5",
						   NULL });
	sc = tu_run_finish(&f.send, 60000);
	rc = tu_run_finish(&f.recv, 30000);
	iter = tu_has_event(f.send.out, "iteration");
	failed = tu_event_in(f.send.out, "failed");
	if (failed) {
		struct json_object *v;

		if (json_object_object_get_ex(failed, "normal-bytes", &v))
			normal = (long)json_object_get_int64(v);
		json_object_put(failed);
	}
	rerr = tu_slurp(f.recv.err, NULL);
	serr = tu_slurp(f.send.err, NULL);
	list_dir(mnt, list, sizeof(list));
	snprintf(marker, sizeof(marker), "%s.incomplete", file);
	left_file = tu_exists(file);
	left_marker = tu_exists(marker);
	/* Pages that moved are pages the tmpfs holds. */
	landed = stat(file, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
	ck_assert_int_eq(umount2(mnt, MNT_DETACH), 0);
	printf("security: 16 MiB block into an 8 MiB tmpfs: migrate-send exit %d (iteration "
	       "events: %s, normal-bytes %ld), migrate-recv exit %d, data landed %" PRIu64
	       " bytes, left in the tmpfs: %s; migrate-recv said: %s\n", sc,
	       iter ? "yes" : "none", normal, rc, landed, list[0] ? list : "nothing",
	       flat(rerr, one, sizeof(one)));
	ck_assert_msg(sc != 0 && rc != 0, "send exit %d, recv exit %d", sc, rc);
	ck_assert_msg(!iter && normal <= 0 && landed == 0, "pages moved before the failure "
		      "(normal-bytes %ld, %" PRIu64 " bytes in %s)", normal, landed, file);
	/* The whole image is weighed at admission, before any file is made. */
	ck_assert_msg(rerr && strstr(rerr, mnt) && strstr(rerr, "16.0 MiB") &&
		      strstr(rerr, "8.0 MiB free"), "migrate-recv said: %s", rerr ? rerr : "");
	ck_assert_msg(serr && strstr(serr, mnt) && strstr(serr, "free"), "migrate-send said: %s",
		      serr ? serr : "");
	/* Whatever stays must not pass for an image: a block file without its
	 * marker looks complete, and refuses the retry as "already exists". */
	ck_assert_msg(!left_file || left_marker, "%s was left without %s.incomplete: it looks "
		      "like a complete image, and a retry after freeing space is refused as "
		      "\"already exists\"", file, file);
	free(rerr);
	free(serr);
	sx_free(&f);
}
END_TEST

/* ---- device state past what was announced --------------------------------------------- */

#define STATE_HOSTILE 4

/* Keyed hostile sources against a daemon on a 48 MiB tmpfs with --max-state
 * 12M, beside an honest 16 MiB migration admitted first (at 1 MiB/s, its
 * pages pinned 2 MiB at a time, so its last pages land after the others'
 * state): one announces 64 KiB of
 * device state and sends 1 MiB; three say nothing, send 11 MiB
 * each (within --max-state) and then hold their migrations open, so their
 * state keeps its room.  The first is stopped at what it announced; the
 * daemon reserved --max-state for each of the others at admission, so the
 * third is refused for want of room; the honest migration completes
 * byte-identical.  Before (b89e3b0's parent, 2cee698) admission counted
 * images only: all three were admitted, their 33 MiB took the room the
 * honest image had been promised, and it failed (security round 4, issue
 * 30). */
START_TEST(state_past_announced_stopped)
{
	struct sx f;
	struct tu_run ev[STATE_HOSTILE];
	char mnt[320], src[320], rs[400], line[STATE_HOSTILE][2048], list[1024];
	char pat[400], said[1200], one[4096], *serr;
	struct json_object *setup;
	int code[STATE_HOSTILE], sc, i, same = 0, refused = 0, held = 0;
	glob_t g;

	sx_init(&f);
	snprintf(src, sizeof(src), "%s/ram", f.dir);
	snprintf(mnt, sizeof(mnt), "%s/small", f.dir);
	tu_write_random(src, 16 * MIB, 17);
	ck_assert_int_eq(mkdir(mnt, 0755), 0);
	ck_assert_msg(mount("tmpfs", mnt, "tmpfs", 0, "size=48m,mode=0755") == 0, "mount -t "
		      "tmpfs %s: %s (needs root: run it in tools/softroce)", mnt, strerror(errno));
	/* A small pinned-bytes cap: the honest image's pages are pinned, so
	 * taken from the tmpfs, as its data comes, not all at once ahead. */
	sx_recv(&f, (const char *const[]){ "--daemon", "--ram-dir", mnt, "--auth-key", f.key,
					   "--max-state", "12M", "--pinned-cap", "2M", "--timeout",
					   "10", NULL });
	snprintf(rs, sizeof(rs), "ram=%s", src);
	sx_send(&f, f.addr, (const char *const[]){ "--ram", rs, "--auth-key", f.key, "--json",
						   "--max-bandwidth", "1M", "--timeout", "10", NULL });
	setup = tu_wait_event(&f.send, "setup", 30000);
	ck_assert_msg(setup != NULL, "the honest source was not admitted");
	json_object_put(setup);
	for (i = 0; i < STATE_HOSTILE; i++) {
		char tag[16];

		snprintf(tag, sizeof(tag), "state%d", i);
		memset(&ev[i], 0, sizeof(ev[i]));
		tu_run_spawn(&ev[i], f.dir, tag, i ?
			     (char *[]){ f.evilbin, "state", f.addr, "--key", f.key, "--size", "4096",
					 "--state-bytes", "11534336", "--hold-ms", "30000",
					 "--timeout", "5000", NULL } :
			     (char *[]){ f.evilbin, "state", f.addr, "--key", f.key, "--size", "4096",
					 "--state-bytes", "1048576", "--announce", "65536",
					 "--timeout", "5000", NULL });
	}
	/* The honest one ends first: the others hold on for 30 s. */
	sc = tu_run_finish(&f.send, 120000);
	for (i = 0; i < STATE_HOSTILE; i++) {
		char *text;

		code[i] = tu_run_finish(&ev[i], 120000);
		text = tu_slurp(ev[i].out, NULL);
		snprintf(line[i], sizeof(line[i]), "%s", text ? text : "");
		line[i][strcspn(line[i], "\n")] = '\0';
		free(text);
		if (code[i] != 1)
			tu_run_dump(&ev[i], "evil_peer state");
	}
	serr = tu_slurp(f.send.err, NULL);
	snprintf(pat, sizeof(pat), "%s/*/ram", mnt);
	if (glob(pat, 0, NULL, &g) == 0) {
		for (size_t k = 0; k < g.gl_pathc; k++)
			same += tu_same_file(src, g.gl_pathv[k]);
		globfree(&g);
	}
	tu_run_stop(&f.recv);
	list_dir(mnt, list, sizeof(list));
	ck_assert_int_eq(umount2(mnt, MNT_DETACH), 0);
	for (i = 0; i < STATE_HOSTILE; i++)
		printf("security: state past its word, source %d (%s): exit %d: %s\n", i,
		       i ? "said nothing" : "announced 64 KiB", code[i], line[i]);
	printf("security: state past its word: the honest 16 MiB migration alongside: exit %d, "
	       "image %s; left in the tmpfs: %s; migrate-send said: %s\n", sc,
	       same ? "byte-identical" : "missing or different", list,
	       flat(serr, one, sizeof(one)));
	ck_assert_msg(sc == 0 && same == 1, "the honest migration failed (exit %d, %d identical "
		      "images): %s", sc, same, serr ? serr : "");
	free(serr);
	kv(line[0], "dest-said", said, sizeof(said));
	ck_assert_msg(code[0] == 1 && strstr(said, "65536 bytes it announced"), "the source that "
		      "announced 64 KiB was not stopped at its word: %s", line[0]);
	for (i = 1; i < STATE_HOSTILE; i++) {
		kv(line[i], "dest-said", said, sizeof(said));
		refused += code[i] == 1 && strstr(said, "no room") != NULL;
		held += code[i] == 0;
	}
	ck_assert_msg(refused >= 1 && refused + held == STATE_HOSTILE - 1, "of the three that "
		      "said nothing, %d were refused for room and %d held their state: %s | %s | "
		      "%s", refused, held, line[1], line[2], line[3]);
	sx_free(&f);
}
END_TEST

/* ---- a source that keeps the destination's queue full --------------------------------- */

/* How long the flood lasts unless the destination ends it, and how soon a
 * cancel or SIGTERM must take effect while it runs. */
#define FLOOD_S "40"
#define FLOOD_BOUND_MS 1000

/* When @r exited (tu_now_ms), waiting until @deadline; 0 if it still runs. */
static uint64_t exited_by(struct tu_run *r, uint64_t deadline)
{
	while (tu_run_running(r)) {
		if (tu_now_ms() >= deadline)
			return 0;
		usleep(5000);
	}
	return tu_now_ms();
}

/* An authenticated source that alternates ZERO_RANGES of 1 GiB (a 64 MiB
 * block sixteen times over) with ITER_END as fast as the ITER_ACKs hand its
 * credits back.  A destination that handles completions until its queue is
 * empty never returns to migrate-recv's loop: another migration, the
 * control socket and signals all wait.  While the flood runs: an honest
 * 4 MiB migration into the same daemon completes byte-identical, a cancel
 * of the flooder's migration ends it within a second, and (with a second
 * flood) so does SIGTERM the daemon. */
START_TEST(flood_does_not_hold_the_daemon)
{
	struct sx f;
	char src[320], sock[320], rs[400], path[512], cmd[128], reply[1024];
	char line_a[2048], line_b[2048], said[1200];
	struct json_object *o;
	uint64_t t_send, t_cancel, t_term, end_a, end_recv;
	long reply_ms, cancel_ms = -1, term_ms = -1, dropped;
	int sc, code_a, code_b, rc_recv = -1;
	unsigned id_a = 0;
	bool flooding_a, flooding_b, flood_on, same = false, landed = false;

	sx_init(&f);
	snprintf(src, sizeof(src), "%s/ram", f.dir);
	snprintf(sock, sizeof(sock), "%s/recv.ctl", f.dir);
	tu_write_random(src, 4 * MIB, 16);
	sx_recv(&f, (const char *const[]){ "--daemon", "--ram-dir", f.dst, "--auth-key", f.key,
					   "--control", sock, "--timeout", "5", NULL });

	/* Flood A, in full swing for a second before anything else. */
	sx_evil(&f, "flood-a", "flood", (const char *const[]){ "--key", f.key, "--seconds", FLOOD_S,
							       "--size", "67108864",
							       "--timeout", "5000", NULL });
	flooding_a = !tu_wait_line(f.evil.err, "evil_peer: flood: flooding", NULL, 0, 30000);
	if (!flooding_a)
		tu_run_dump(&f.evil, "evil_peer");
	ck_assert_msg(flooding_a, "the flood never started");
	o = tu_wait_event(&f.recv, "setup", 5000);
	ck_assert_msg(o != NULL, "the daemon reported no setup for the flooder");
	id_a = (unsigned)tu_jnum(o, "id");
	json_object_put(o);
	/* Served, not ignored: its first iteration acknowledged (each covers
	 * 1 GiB of zeroing, seconds on a loaded machine). */
	ck_assert_msg(!tu_wait_line(f.evil.err, "evil_peer: flood: served", NULL, 0, 60000),
		      "the flood was never served: no ITER_ACK within 60 s");
	usleep(1000000);

	/* (i) an honest migration meanwhile */
	snprintf(rs, sizeof(rs), "ram=%s", src);
	t_send = tu_now_ms();
	sx_send(&f, f.addr, (const char *const[]){ "--ram", rs, "--auth-key", f.key, "--timeout",
						   "10", NULL });
	sc = tu_run_finish(&f.send, 60000);
	t_send = tu_now_ms() - t_send;
	flood_on = tu_run_running(&f.evil);
	o = tu_event_in(f.recv.out, "completed");
	if (o) {
		struct json_object *d;

		if (json_object_object_get_ex(o, "dir", &d)) {
			snprintf(path, sizeof(path), "%s/ram", json_object_get_string(d));
			same = tu_same_file(src, path);
			landed = true;
		}
		json_object_put(o);
	}
	if (sc)
		tu_run_dump(&f.send, "send");

	/* (ii) cancel the flooder's migration through the control socket */
	snprintf(cmd, sizeof(cmd), "{\"command\":\"cancel\",\"id\":%u}\n", id_a);
	t_cancel = tu_now_ms();
	reply_ms = tu_control_line(sock, cmd, reply, sizeof(reply), 5000);
	end_a = exited_by(&f.evil, t_cancel + 5000);
	code_a = evil_result(&f, 60000, line_a, sizeof(line_a));
	dropped = kv_num(line_a, "dropped-at-ms");
	if (end_a)
		cancel_ms = dropped > 0 ? (long)(dropped - (long)t_cancel) :
			    (long)(end_a - t_cancel);

	/* (iii) flood B, then SIGTERM to the daemon */
	sx_evil(&f, "flood-b", "flood", (const char *const[]){ "--key", f.key, "--seconds", FLOOD_S,
							       "--size", "67108864",
							       "--timeout", "5000", NULL });
	flooding_b = !tu_wait_line(f.evil.err, "evil_peer: flood: flooding", NULL, 0, 10000);
	usleep(500000);
	t_term = tu_now_ms();
	kill(f.recv.p.pid, SIGTERM);
	end_recv = exited_by(&f.recv, t_term + 5000);
	if (end_recv) {
		term_ms = (long)(end_recv - t_term);
		rc_recv = tu_exit_code(&f.recv.p);
	}
	/* The second flooder sees its migration end with the daemon. */
	if (!exited_by(&f.evil, tu_now_ms() + 5000))
		tu_run_stop(&f.evil);
	code_b = evil_result(&f, 30000, line_b, sizeof(line_b));
	kv(line_a, "dest-said", said, sizeof(said));
	printf("security: flood of ZERO_RANGES (1 GiB each) and ITER_END into migrate-recv "
	       "--daemon: honest 4 MiB migration meanwhile: exit %d in %" PRIu64 " ms, image %s, "
	       "flood still running then: %s | cancel of the flooder (id %u): control answer "
	       "after %ld ms (%s), flooder ended after %ld ms: exit %d: %s | second flood %s, "
	       "SIGTERM: daemon exit %d after %ld ms (bound %d ms); second flooder: exit %d: %s\n",
	       sc, t_send, same ? "identical" : landed ? "DIFFERS" : "none", flood_on ? "yes" : "no",
	       id_a, reply_ms,
	       reply_ms < 0 ? "none" : reply, cancel_ms, code_a, line_a,
	       flooding_b ? "flooding" : "never started", rc_recv, term_ms, FLOOD_BOUND_MS,
	       code_b, line_b);
	ck_assert_msg(sc == 0 && same, "the honest migration failed beside the flood: exit %d, "
		      "image %s", sc, same ? "identical" : "missing or different");
	ck_assert_msg(flood_on, "the flood was over before the honest migration completed: "
		      "nothing was shown");
	ck_assert_msg(kv_num(line_a, "iter-acks") > 0, "the flood was never served: %s", line_a);
	ck_assert_msg(reply_ms >= 0 && reply_ms <= FLOOD_BOUND_MS,
		      "the control socket answered the cancel after %ld ms", reply_ms);
	ck_assert_msg(code_a == 1 && cancel_ms >= 0 && cancel_ms <= FLOOD_BOUND_MS,
		      "the cancelled flood ended after %ld ms (exit %d, destination said \"%s\")",
		      cancel_ms, code_a, said);
	ck_assert_msg(flooding_b, "the second flood never started");
	ck_assert_msg(term_ms >= 0 && term_ms <= FLOOD_BOUND_MS,
		      "SIGTERM ended the daemon after %ld ms (-1: not within 5 s)", term_ms);
	sx_free(&f);
}
END_TEST

/* ---- post-copy: the READ side (issue 33) ---------------------------------------------- */

/* The example VMMs (examples/): a destination that takes post-copy, and a
 * source that switches at once. */
#define PC_MIB "32"
#define PC_BYTES "33554432"

/* vmm-dest --postcopy over PC_MIB MiB; f->addr is then where it listens. */
static void pc_dest(struct sx *f, struct tu_run *r)
{
	char bin[512], port[32];

	tu_build_path("bin/vmm-dest", bin, sizeof(bin));
	memset(r, 0, sizeof(*r));
	tu_run_spawn(r, f->dir, "vmm-dest", (char *[]){ bin, (char *)tu_addr(), "0", "--mib",
							PC_MIB, "--postcopy", NULL });
	if (tu_wait_line(r->out, "listening ", port, sizeof(port), 20000)) {
		tu_run_dump(r, "vmm-dest");
		ck_abort_msg("vmm-dest did not listen");
	}
	snprintf(f->addr, sizeof(f->addr), "%s:%s", tu_addr(), port);
}

/* A source with the token of a paused post-copy but without the key (it
 * learnt the token as the migration's source, then lost the key, say: the
 * token alone must not be enough): evil_peer pcresume breaks its own link
 * after the switch and resumes with the right token, sending
 * POSTCOPY_RESUME at once (noauth) or after an answer made with another key
 * (badmac), or sending an ERROR instead of any proof (error: heard as the
 * source's word, it would end the post-copy for good).  The destination
 * answers none with POSTCOPY_RESUMED (which would invite the post-copy
 * channels): it drops that connection and stays paused, and the same
 * source's honest resume then completes the migration (vmm-dest exits 0). */
START_TEST(postcopy_resume_needs_the_key)
{
	static const char *const variants[] = { "noauth", "badmac", "error" };
	char bin[512], port[32], line[2048], said[1200], derr[4096], *text;
	struct tu_run dst;
	unsigned v;
	int code, dc;
	struct sx f;

	sx_init(&f);
	tu_build_path("bin/vmm-dest", bin, sizeof(bin));
	for (v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		memset(&dst, 0, sizeof(dst));
		tu_run_spawn(&dst, f.dir, "vmm-dest", (char *[]){ bin, (char *)tu_addr(), "0",
			     "--mib", PC_MIB, "--postcopy", "--recover", "--auth-key",
			     "a shared secret of 32 bytes here", NULL });
		if (tu_wait_line(dst.out, "listening ", port, sizeof(port), 20000)) {
			tu_run_dump(&dst, "vmm-dest");
			ck_abort_msg("vmm-dest did not listen");
		}
		snprintf(f.addr, sizeof(f.addr), "%s:%s", tu_addr(), port);
		sx_evil(&f, variants[v], "pcresume", (const char *const[]){ "--variant",
			variants[v], "--key", f.key, "--size", PC_BYTES, "--name", "pc.ram", NULL });
		code = evil_result(&f, 120000, line, sizeof(line));
		dc = tu_run_finish(&dst, 30000);
		text = tu_slurp(dst.err, NULL);
		flat(text, derr, sizeof(derr));
		free(text);
		printf("security: post-copy resume %s: attacker exit %d: %s | vmm-dest exit %d: %s\n",
		       variants[v], code, line, dc, derr);
		fflush(stdout);
		if (code != 1 || dc != 0)
			tu_run_dump(&dst, "vmm-dest");
		ck_assert_msg(code == 1 && strstr(line, "resumed=no"), "a resume without the key "
			      "got POSTCOPY_RESUMED: %s", line);
		kv(line, "dest-said", said, sizeof(said));
		ck_assert_msg(strstr(said, "authentication"), "the destination said: %s", said);
		ck_assert_msg(strstr(line, "then-honest=completed") && strstr(line,
			      "done-pages=8192"), "the honest resume after it did not complete: %s",
			      line);
		ck_assert_msg(dc == 0, "vmm-dest exited %d", dc);
	}
	sx_free(&f);
}
END_TEST

/* The last pages land, and then the link breaks before POSTCOPY_DONE went
 * (evil_peer pcresume done hands no credit back from the switch on, so the
 * destination reads every page but cannot say so).  The destination must
 * pause, not fail: the source still waits for POSTCOPY_DONE.  It must then
 * take the resume though its engine is done (not BUSY forever), answer
 * pages_left 0 without inviting channels, and send POSTCOPY_DONE; the
 * migration completes (vmm-dest exits 0). */
START_TEST(postcopy_resume_with_every_page_in)
{
	char bin[512], port[32], line[2048], derr[4096], *text;
	struct tu_run dst;
	int code, dc;
	struct sx f;

	sx_init(&f);
	tu_build_path("bin/vmm-dest", bin, sizeof(bin));
	memset(&dst, 0, sizeof(dst));
	tu_run_spawn(&dst, f.dir, "vmm-dest", (char *[]){ bin, (char *)tu_addr(), "0", "--mib",
		     PC_MIB, "--postcopy", "--recover", "--auth-key",
		     "a shared secret of 32 bytes here", NULL });
	if (tu_wait_line(dst.out, "listening ", port, sizeof(port), 20000)) {
		tu_run_dump(&dst, "vmm-dest");
		ck_abort_msg("vmm-dest did not listen");
	}
	snprintf(f.addr, sizeof(f.addr), "%s:%s", tu_addr(), port);
	sx_evil(&f, "done", "pcresume", (const char *const[]){ "--variant", "done", "--key", f.key,
		"--size", PC_BYTES, "--name", "pc.ram", NULL });
	code = evil_result(&f, 120000, line, sizeof(line));
	dc = tu_run_finish(&dst, 30000);
	text = tu_slurp(dst.err, NULL);
	flat(text, derr, sizeof(derr));
	free(text);
	printf("security: post-copy resume with every page in: attacker exit %d: %s | vmm-dest "
	       "exit %d: %s\n", code, line, dc, derr);
	fflush(stdout);
	if (dc != 0)
		tu_run_dump(&dst, "vmm-dest");
	ck_assert_msg(strstr(line, "left-at-resume=0 "), "the destination did not have every "
		      "page at the resume (or no resume): %s", line);
	ck_assert_msg(strstr(line, "then-honest=completed") && strstr(line, "done-pages=8192"),
		      "the resume did not complete: %s", line);
	ck_assert_msg(dc == 0, "vmm-dest exited %d", dc);
	sx_free(&f);
}
END_TEST

/* evil_peer pcsource --variant @variant against vmm-dest: its status, its
 * result line in @line, vmm-dest's exit status in *dc and stderr in @derr,
 * and how long vmm-dest took to exit after evil_peer did, in *after_ms. */
static int pc_source(struct sx *f, const char *variant, int *dc, char *line, size_t len,
		     char *derr, size_t dlen, uint64_t *after_ms)
{
	struct tu_run dst;
	char *text;
	uint64_t t;
	int code;

	pc_dest(f, &dst);
	sx_evil(f, variant, "pcsource", (const char *const[]){ "--variant", variant, "--size",
							       PC_BYTES, "--name", "pc.ram",
							       "--revoke-ms", "150", NULL });
	code = evil_result(f, 90000, line, len);
	t = tu_now_ms();
	*dc = tu_run_finish(&dst, 30000);
	*after_ms = tu_now_ms() - t;
	text = tu_slurp(dst.err, NULL);
	flat(text, derr, dlen);
	free(text);
	if (*dc && code == 0)
		tu_run_dump(&dst, "vmm-dest");
	return code;
}

/* A source that switches to post-copy with keys for memory it never
 * registered: the destination's first READ is refused by the source's
 * NIC, and the destination ends the migration, saying why, instead of
 * giving its guest a page it does not have (the guest's threads wait on
 * the page; the VMM stops).  The honest control, the same attacker with
 * its memory registered, completes. */
START_TEST(postcopy_unregistered_keys_refused)
{
	struct sx f;
	char line[2048], derr[4096], said[1200];
	uint64_t after;
	int code, dc;

	sx_init(&f);
	code = pc_source(&f, "honest", &dc, line, sizeof(line), derr, sizeof(derr), &after);
	printf("security: post-copy, honest source (control): attacker exit %d: %s | vmm-dest exit "
	       "%d: %s\n", code, line, dc, derr);
	ck_assert_msg(code == 0 && strstr(line, "completed=yes"), "the control did not "
		      "complete: %s", line);
	ck_assert_int_eq(dc, 0);
	code = pc_source(&f, "unregistered", &dc, line, sizeof(line), derr, sizeof(derr), &after);
	printf("security: post-copy, keys for unregistered memory: attacker exit %d: %s | "
	       "vmm-dest exit %d after %" PRIu64 " ms: %s\n", code, line, dc, after, derr);
	ck_assert_msg(code == 1, "the destination took pages it could not read: %s", line);
	kv(line, "dest-said", said, sizeof(said));
	ck_assert_msg(strstr(said, "RDMA READ") && strstr(said, "refused"), "the destination "
		      "said: %s", said);
	ck_assert_msg(dc == 1 && strstr(derr, "RDMA READ"), "vmm-dest exit %d: %s", dc, derr);
	ck_assert_uint_le(after, 10000);
	sx_free(&f);
}
END_TEST

/* A source that registers its memory, switches, and takes it back while
 * the destination's guest runs: the destination's next READ is refused,
 * and it ends the migration. */
START_TEST(postcopy_revoked_keys_refused)
{
	struct sx f;
	char line[2048], derr[4096], said[1200], rv[16];
	uint64_t after;
	int code, dc;

	sx_init(&f);
	code = pc_source(&f, "revoke", &dc, line, sizeof(line), derr, sizeof(derr), &after);
	printf("security: post-copy, memory taken back after the switch: attacker exit %d: %s | "
	       "vmm-dest exit %d after %" PRIu64 " ms: %s\n", code, line, dc, after, derr);
	ck_assert_msg(!strcmp(kv(line, "revoked", rv, sizeof(rv)), "yes"), "the destination had "
		      "every page before the memory went: %s", line);
	ck_assert_msg(code == 1, "the destination took pages it could not read: %s", line);
	kv(line, "dest-said", said, sizeof(said));
	ck_assert_msg(strstr(said, "RDMA READ"), "the destination said: %s", said);
	ck_assert_msg(dc == 1 && strstr(derr, "RDMA READ"), "vmm-dest exit %d: %s", dc, derr);
	sx_free(&f);
}
END_TEST

/* evil_peer pcdest --variant @variant with vmm-source (post-copy at once)
 * pointed at it: evil_peer's status and result line, and the source's exit
 * status and stderr.  With @cancel, the source is cancelled (SIGUSR1) once
 * evil_peer is done: a paused post-copy does not end by itself. */
static int pc_dest_attack_as(struct sx *f, const char *variant, bool cancel, int *sc,
			     char *line, size_t len, char *serr, size_t slen)
{
	char bin[512], port[32], eaddr[80], *text;
	struct tu_run src;
	int code;

	snprintf(f->addr, sizeof(f->addr), "%s:1", tu_addr());
	sx_evil(f, variant, "pcdest", (const char *const[]){ "--variant", variant, "--listen",
							     tu_addr(), NULL });
	if (tu_wait_line(f->evil.err, "evil_peer: listening on port ", port, sizeof(port),
			 20000)) {
		tu_run_dump(&f->evil, "evil_peer");
		ck_abort_msg("evil_peer did not listen");
	}
	snprintf(eaddr, sizeof(eaddr), "%s", port);
	tu_build_path("bin/vmm-source", bin, sizeof(bin));
	memset(&src, 0, sizeof(src));
	tu_run_spawn(&src, f->dir, "vmm-source", (char *[]){ bin, (char *)tu_addr(), eaddr,
							     "--mib", PC_MIB, "--postcopy",
							     "--rounds", "0", NULL });
	code = evil_result(f, 90000, line, len);
	if (cancel)
		kill(src.p.pid, SIGUSR1);
	*sc = tu_run_finish(&src, 30000);
	text = tu_slurp(src.err, NULL);
	flat(text, serr, slen);
	free(text);
	return code;
}

static int pc_dest_attack(struct sx *f, const char *variant, int *sc, char *line, size_t len,
			  char *serr, size_t slen)
{
	return pc_dest_attack_as(f, variant, false, sc, line, len, serr, slen);
}

/* A destination that reads outside the memory the source announced: the
 * source's NIC refuses the READ (the attacker gets a remote access
 * error), and the source fails cleanly at once, saying the destination's
 * READ was refused, instead of waiting for a destination that will never
 * say every page is in.  The control reads inside and gets its page. */
START_TEST(postcopy_read_outside_refused)
{
	struct sx f;
	char line[2048], serr[4096], nic[200];
	long gone;
	int code, sc;

	sx_init(&f);
	code = pc_dest_attack(&f, "inside", &sc, line, sizeof(line), serr, sizeof(serr));
	printf("security: post-copy, a destination reading inside (control): attacker exit %d: "
	       "%s | vmm-source exit %d\n", code, line, sc);
	ck_assert_msg(code == 0, "the control could not read: %s", line);
	code = pc_dest_attack(&f, "outside", &sc, line, sizeof(line), serr, sizeof(serr));
	gone = kv_num(line, "source-gone-ms");
	printf("security: post-copy, a destination reading outside the map: attacker exit %d: %s "
	       "| vmm-source exit %d: %s\n", code, line, sc, serr);
	kv(line, "nic", nic, sizeof(nic));
	ck_assert_msg(code == 1 && strstr(nic, "remote access error"), "the READ was not refused "
		      "by the NIC: %s", line);
	ck_assert_msg(sc != 0 && strstr(serr, "post-copy channel") && strstr(serr, "refused"),
		      "vmm-source exit %d: %s", sc, serr);
	ck_assert_msg(gone >= 0 && gone <= 3000, "the source went on for %ld ms after the refused "
		      "READ", gone);
	sx_free(&f);
}
END_TEST

/* Whoever answers at the destination's address gets the source's resume;
 * the destination itself answers a resume that failed its checks with an
 * ERROR.  Neither may end the migration: evil_peer pcdest resume-error
 * grants recovery, breaks the link after the switch, accepts the source's
 * RESUME and answers it with an ERROR; the source must pause again and come
 * back with another RESUME, as rdmig(7) says.  (Without a key here: with
 * one, an ERROR before the destination's proof is dropped all the same.) */
START_TEST(postcopy_resume_error_not_final_on_source)
{
	struct sx f;
	char line[2048], serr[4096];
	int code, sc;

	sx_init(&f);
	code = pc_dest_attack_as(&f, "resume-error", true, &sc, line, sizeof(line), serr,
				 sizeof(serr));
	printf("security: post-copy, a resume answered with ERROR: attacker exit %d: %s | "
	       "vmm-source exit %d: %s\n", code, line, sc, serr);
	fflush(stdout);
	ck_assert_msg(code == 1 && strstr(line, "retried=yes"), "the source gave up on the "
		      "ERROR: %s | vmm-source: %s", line, serr);
	ck_assert_msg(!strstr(serr, "destination reported"), "the source took the ERROR as "
		      "final: %s", serr);
	sx_free(&f);
}
END_TEST

void security_cases(Suite *s)
{
	TCase *tc = tu_case(s, "attacker", 150);

	tcase_add_test(tc, replay_refused);
	tcase_add_test(tc, held_connections_dropped);
	tcase_add_test(tc, huge_rings_bounded);
	tcase_add_test(tc, limits_refused_at_block_map);
	tcase_add_test(tc, unconfirmed_completion);
	tcase_add_test(tc, ram_dir_does_not_overwrite);
	tcase_add_test(tc, control_socket_owner_only);
	tcase_add_test(tc, no_space_refused_up_front);
	tcase_add_test(tc, pages_outside_the_block);
	/* A case of its own, so it can run alone (CK_RUN_CASE=flood). */
	tc = tu_case(s, "flood", 240);
	tcase_add_test(tc, flood_does_not_hold_the_daemon);
	/* Security round 4 (issue 30): CK_RUN_CASE=round4 runs them alone,
	 * RDMIG_BUILD=an older build to see them fail. */
	tc = tu_case(s, "round4", 240);
	tcase_add_test(tc, state_ring_before_auth_refused);
	tcase_add_test(tc, state_past_announced_stopped);
	/* Post-copy's READ side (issue 33): CK_RUN_CASE=postcopy. */
	tc = tu_case(s, "postcopy", 240);
	tcase_add_test(tc, postcopy_unregistered_keys_refused);
	tcase_add_test(tc, postcopy_revoked_keys_refused);
	tcase_add_test(tc, postcopy_read_outside_refused);
	tcase_add_test(tc, postcopy_resume_needs_the_key);
	tcase_add_test(tc, postcopy_resume_error_not_final_on_source);
	tcase_add_test(tc, postcopy_resume_with_every_page_in);
}
