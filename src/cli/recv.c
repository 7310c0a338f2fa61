/* migrate-recv: receives RAM files (and device state) from migrate-send over
 * RDMA.  One libev loop drives the listener, every migration's fds and
 * timers, the control socket and the signals, so a daemon serves several
 * migrations at once without threads.  See migrate-recv(1). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ev.h>

#include "cli.h"
#include "control.h"
#include "rdmig.h"

static const char usage_text[] =
	"usage: migrate-recv --listen HOST:PORT (--ram NAME=PATH... | --ram-dir DIR) [options]\n"
	"\n"
	"Receives RAM files (and device state) from migrate-send over RDMA.\n"
	"\n"
	"  -l, --listen HOST:PORT   address to listen on ([V6ADDR]:PORT for IPv6; port 0: any)\n"
	"  -r, --ram NAME=PATH      put block NAME into the file PATH (repeatable)\n"
	"  -d, --ram-dir DIR        put every block into DIR/NAME\n"
	"  -s, --state-out FILE|-   write the device state to FILE (or standard output)\n"
	"  -j, --json               JSON events on stdout, one per line\n"
	"      --control SOCK       control socket (status, cancel)\n"
	"      --daemon             serve migrations one after another and at once,\n"
	"                           each into DIR/N/ (needs --ram-dir)\n"
	"      --auth-key FILE      accept only sources holding this shared key\n"
	"      --channels N         grant a source at most N connections, 1..64 (default 8)\n"
	"  -t, --timeout S          bound on every wait for the peer (default 30)\n"
	"  -v, --verbose            log what the library does\n"
	"  -V, --version            print the version and exit\n"
	"  -h, --help               print this help and exit\n"
	"\n"
	"A block file with a PATH.incomplete marker next to it is not a usable image.\n";

enum { OPT_CONTROL = 256, OPT_DAEMON, OPT_AUTH_KEY, OPT_CHANNELS };

static const struct option long_opts[] = {
	{ "listen", required_argument, NULL, 'l' },
	{ "ram", required_argument, NULL, 'r' },
	{ "ram-dir", required_argument, NULL, 'd' },
	{ "state-out", required_argument, NULL, 's' },
	{ "json", no_argument, NULL, 'j' },
	{ "control", required_argument, NULL, OPT_CONTROL },
	{ "daemon", no_argument, NULL, OPT_DAEMON },
	{ "auth-key", required_argument, NULL, OPT_AUTH_KEY },
	{ "channels", required_argument, NULL, OPT_CHANNELS },
	{ "timeout", required_argument, NULL, 't' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "version", no_argument, NULL, 'V' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

struct recv_opts {
	char host[256], port[16];
	int have_addr;
	struct cli_ram *rams;   /* --ram: mapped up front when the file exists */
	unsigned nrams;
	const char *ram_dir, *state_out, *control;
	int json, daemon, verbose;
	uint64_t timeout_s, channels;
	uint8_t *key;
	size_t key_len;
};

struct app;

/* One migration: a destination handle, its watchers and its files. */
struct mig {
	struct app *app;
	struct mig *next;
	unsigned id;            /* daemon: the N of DIR/N; else 0 */
	struct rdmig_dest *d;
	ev_io io[RDMIG_DEST_MAX_FDS];
	int nio;
	ev_timer timer;
	bool accepted;
	bool set_checked;       /* every --ram block was announced */
	uint64_t t0;
	char dir[2048];         /* where blocks named by the source go */
	struct cli_ram *files;  /* every block file of this migration */
	unsigned nfiles;
	int state_fd;
	char state_path[2100], state_part[2200];
	bool usage_err;         /* the failure is this side's configuration */
};

struct app {
	struct recv_opts o;
	struct ev_loop *loop;
	struct rdmig_listener *l;
	ev_io listen_w;
	ev_signal sigs[3];
	struct ctl_server *ctl;
	struct mig *migs;       /* accepted, in progress */
	struct mig *waiting;    /* single mode: the handle awaiting its source */
	unsigned next_id;
	int exit_code;
	struct cli_bar bar;
};

/* ---- command line ---------------------------------------------------- */

static int add_ram(struct recv_opts *o, const char *arg)
{
	struct cli_ram *n, *r;
	const char *path;
	int rc;

	n = realloc(o->rams, (o->nrams + 1) * sizeof(*n));
	if (!n)
		return cli_usage("out of memory");
	o->rams = n;
	r = &o->rams[o->nrams];
	memset(r, 0, sizeof(*r));
	rc = cli_parse_ram(arg, r->name, sizeof(r->name), &path);
	if (rc)
		return cli_usage("bad --ram '%s': expected NAME=PATH%s", arg,
				 rc == -ERANGE ? " with NAME of at most 64 bytes" : "");
	if (strlen(path) >= sizeof(r->path) - 16)
		return cli_usage("bad --ram '%s': path too long", arg);
	snprintf(r->path, sizeof(r->path), "%s", path);
	for (unsigned i = 0; i < o->nrams; i++)
		if (!strcmp(o->rams[i].name, r->name))
			return cli_usage("--ram %s given twice", r->name);
	o->nrams++;
	return 0;
}

static int one_opt(struct recv_opts *o, int c, const char *arg)
{
	switch (c) {
	case 'l':
		if (cli_parse_addr(arg, o->host, sizeof(o->host), o->port, sizeof(o->port)))
			return cli_usage("bad address '%s': expected HOST:PORT or [V6ADDR]:PORT", arg);
		o->have_addr = 1;
		return 0;
	case 'r': return add_ram(o, arg);
	case 'd': o->ram_dir = arg; return 0;
	case 's': o->state_out = arg; return 0;
	case 'j': o->json = 1; return 0;
	case OPT_CONTROL: o->control = arg; return 0;
	case OPT_DAEMON: o->daemon = 1; return 0;
	case OPT_AUTH_KEY:
		free(o->key);
		return cli_read_key(arg, &o->key, &o->key_len);
	case 't':
		if (cli_parse_uint(arg, 86400, &o->timeout_s) || !o->timeout_s)
			return cli_usage("bad --timeout '%s': expected a number from 1 to 86400", arg);
		return 0;
	case OPT_CHANNELS:
		if (cli_parse_uint(arg, 64, &o->channels) || !o->channels)
			return cli_usage("bad --channels '%s': expected a number from 1 to 64", arg);
		return 0;
	case 'v': o->verbose = 1; return 0;
	default: return CLI_EX_INTERNAL;
	}
}

static int check_args(struct recv_opts *o)
{
	if (!o->have_addr)
		return cli_usage("--listen HOST:PORT is required");
	if (!o->nrams && !o->ram_dir)
		return cli_usage("--ram NAME=PATH or --ram-dir DIR is required");
	if (o->ram_dir && strlen(o->ram_dir) > 1900)
		return cli_usage("--ram-dir %.40s...: path too long", o->ram_dir);
	if (o->state_out && strlen(o->state_out) > 2000)
		return cli_usage("--state-out %.40s...: path too long", o->state_out);
	if (o->nrams && o->ram_dir)
		return cli_usage("--ram and --ram-dir cannot be combined");
	if (o->daemon && !o->ram_dir)
		return cli_usage("--daemon needs --ram-dir DIR");
	if (o->daemon && o->state_out)
		return cli_usage("--daemon writes the state to DIR/N/state: drop --state-out");
	if (o->state_out && !strcmp(o->state_out, "-") && o->json)
		return cli_usage("--state-out - and --json both need standard output");
	return -1;
}

/* Returns -1 to go on, or the exit code. */
static int parse_args(struct recv_opts *o, int argc, char **argv)
{
	int c, rc;

	o->timeout_s = 30;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":l:r:d:s:jt:vVh", long_opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage_text, stdout);
			fputs("\n", stdout);
			fputs(cli_exit_help, stdout);
			return CLI_EX_OK;
		}
		if (c == 'V') {
			printf("migrate-recv (rdmig) %s\n", rdmig_version());
			return CLI_EX_OK;
		}
		if (c == '?')
			return cli_usage("unknown option '%s' (see migrate-recv --help)",
					 optopt ? (char[]){ '-', (char)optopt, 0 } : argv[optind - 1]);
		if (c == ':')
			return cli_usage("option '%s' needs an argument", argv[optind - 1]);
		rc = one_opt(o, c, optarg);
		if (rc)
			return rc;
	}
	if (optind < argc)
		return cli_usage("unexpected argument '%s' (see migrate-recv --help)", argv[optind]);
	return check_args(o);
}

/* The directory that will hold @path must exist and be writable. */
static int check_dir_of(const char *what, const char *path)
{
	char tmp[4096];
	const char *dir;

	snprintf(tmp, sizeof(tmp), "%s", path);
	dir = dirname(tmp);
	if (access(dir, W_OK | X_OK))
		return cli_usage("%s %s: directory %s: %s", what, path, dir, strerror(errno));
	return 0;
}

/* Existing --ram files are mapped now (their length is what the source must
 * announce); missing ones are created when the source names them. */
static int prepare_files(struct app *a)
{
	struct recv_opts *o = &a->o;
	char err[8192];
	struct stat st;
	unsigned i;
	int rc;

	for (i = 0; i < o->nrams; i++) {
		struct cli_ram *r = &o->rams[i];

		rc = check_dir_of("--ram", r->path);
		if (rc)
			return rc;
		if (stat(r->path, &st) && errno == ENOENT)
			continue;
		if (cli_ram_map_rw(r, 0, 0, err, sizeof(err)))
			return cli_usage("--ram %s: %s", r->name, err);
	}
	if (o->ram_dir && access(o->ram_dir, W_OK | X_OK))
		return cli_usage("--ram-dir %s: %s", o->ram_dir, strerror(errno));
	if (o->state_out && strcmp(o->state_out, "-"))
		return check_dir_of("--state-out", o->state_out);
	return 0;
}

/* ---- files of one migration ------------------------------------------------ */

static struct cli_ram *mig_add_file(struct mig *m, const char *name, const char *path)
{
	struct cli_ram *n = realloc(m->files, (m->nfiles + 1) * sizeof(*n));

	if (!n)
		return NULL;
	m->files = n;
	n = &m->files[m->nfiles++];
	memset(n, 0, sizeof(*n));
	snprintf(n->name, sizeof(n->name), "%s", name);
	snprintf(n->path, sizeof(n->path), "%s", path);
	return n;
}

/* Names come from the peer: in a directory some would collide with our
 * own files or leave it. */
static const char *bad_dir_name(const struct mig *m, const char *name)
{
	size_t len = strlen(name);

	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return "is not a file name";
	if ((len >= 11 && !strcmp(name + len - 11, ".incomplete")) ||
	    (len >= 5 && !strcmp(name + len - 5, ".part")))
		return "ends like the files migrate-recv keeps next to blocks";
	if (m->app->o.daemon && !strcmp(name, "state"))
		return "is reserved for the device state in --daemon mode";
	return NULL;
}

static const struct cli_ram *find_ram(const struct recv_opts *o, const char *name)
{
	unsigned i;

	for (i = 0; i < o->nrams; i++)
		if (!strcmp(o->rams[i].name, name))
			return &o->rams[i];
	return NULL;
}

static int map_cb(void *ctx, const char *name, uint64_t length, uint32_t page_size,
		  void **host, int *zeroed, char *errbuf, size_t errlen)
{
	struct mig *m = ctx;
	const struct cli_ram *given = NULL;
	struct cli_ram *f;
	char path[4096];
	const char *why;
	int rc;

	(void)page_size;
	m->usage_err = true; /* until it worked: every failure here is ours */
	if (m->dir[0]) {
		why = bad_dir_name(m, name);
		if (why) {
			snprintf(errbuf, errlen, "the name %s", why);
			return -EINVAL;
		}
		snprintf(path, sizeof(path), "%s/%s", m->dir, name);
	} else {
		given = find_ram(&m->app->o, name);
		if (!given) {
			snprintf(errbuf, errlen, "not configured on the destination (no --ram %s=PATH)",
				 name);
			return -ENOENT;
		}
		snprintf(path, sizeof(path), "%s", given->path);
	}
	f = mig_add_file(m, name, path);
	if (!f) {
		snprintf(errbuf, errlen, "out of memory");
		return -ENOMEM;
	}
	/* --ram-dir holds images we make: start each from zero, which spares
	 * sending zero pages. */
	rc = cli_ram_map_rw(f, length, !given, errbuf, errlen);
	if (!rc)
		rc = cli_ram_mark_incomplete(f, errbuf, errlen);
	if (rc)
		return rc;
	*host = f->host;
	*zeroed = f->zeroed;
	m->usage_err = false;
	return 0;
}

static int state_cb(void *ctx, const void *data, size_t len)
{
	struct mig *m = ctx;
	const char *p = data;
	ssize_t n;

	if (m->state_fd < 0)
		return -EBADF;
	while (len) {
		n = write(m->state_fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int open_state(struct mig *m, char *err, size_t errlen)
{
	const char *out = m->app->o.state_out;

	m->state_fd = -1;
	if (m->app->o.daemon)
		snprintf(m->state_path, sizeof(m->state_path), "%s/state", m->dir);
	else if (out && !strcmp(out, "-")) {
		m->state_fd = 1;
		return 0;
	} else if (out)
		snprintf(m->state_path, sizeof(m->state_path), "%s", out);
	else
		return 0;
	snprintf(m->state_part, sizeof(m->state_part), "%s.part", m->state_path);
	m->state_fd = open(m->state_part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
			   0600);
	if (m->state_fd < 0) {
		snprintf(err, errlen, "cannot create %s: %s", m->state_part, strerror(errno));
		return -errno;
	}
	return 0;
}

/* The image is whole: state first, then the markers go. */
static int finish_files(struct mig *m, char *err, size_t errlen)
{
	unsigned i;
	int rc;

	if (m->state_part[0]) {
		if (fsync(m->state_fd) || close(m->state_fd)) {
			m->state_fd = -1;
			snprintf(err, errlen, "cannot write %s: %s", m->state_part, strerror(errno));
			return -EIO;
		}
		m->state_fd = -1;
		if (rename(m->state_part, m->state_path)) {
			snprintf(err, errlen, "cannot rename %s to %s: %s", m->state_part,
				 m->state_path, strerror(errno));
			return -EIO;
		}
		m->state_part[0] = '\0';
	} else if (m->state_fd == 1 && fflush(stdout)) {
		snprintf(err, errlen, "cannot write the state to standard output: %s",
			 strerror(errno));
		return -EIO;
	}
	for (i = 0; i < m->nfiles; i++) {
		rc = cli_ram_complete(&m->files[i], err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

/* The library calls this before it confirms completion to the source: a
 * file that cannot be saved fails the migration on both sides, so the source
 * resumes its workload instead of believing it moved. */
static int commit_cb(void *ctx, char *errbuf, size_t errlen)
{
	return finish_files(ctx, errbuf, errlen);
}

/* ---- one migration's lifetime -------------------------------------------------- */

static void mig_step(struct mig *m);

static void mig_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	mig_step(w->data);
}

static void mig_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	mig_step(w->data);
}

static struct mig *mig_new(struct app *a)
{
	struct rdmig_config cfg;
	struct mig *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->app = a;
	m->state_fd = -1;
	ev_timer_init(&m->timer, mig_timer_cb, 0.0, 0.0);
	m->timer.data = m;
	rdmig_config_init(&cfg);
	cfg.timeout_ms = (int)(a->o.timeout_s * 1000);
	cfg.auth_key = a->o.key;
	cfg.auth_key_len = a->o.key_len;
	cfg.channels = (uint32_t)a->o.channels; /* 0: the library's default */
	cfg.commit = commit_cb;
	cfg.commit_ctx = m;
	cfg.log = cli_log;
	cfg.log_ctx = &a->bar;
	cfg.log_level = a->o.verbose ? RDMIG_LOG_INFO : RDMIG_LOG_WARN;
	cfg.map_block = map_cb;
	cfg.map_ctx = m;
	/* Without a sink the library refuses state, naming the reason. */
	if (a->o.state_out || a->o.daemon) {
		cfg.state = state_cb;
		cfg.state_ctx = m;
	}
	if (rdmig_dest_create(&m->d, &cfg)) {
		rdmig_dest_destroy(m->d);
		free(m);
		return NULL;
	}
	return m;
}

static void mig_free(struct mig *m)
{
	struct mig **pp;
	int i;

	for (pp = &m->app->migs; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	for (i = 0; i < m->nio; i++)
		ev_io_stop(m->app->loop, &m->io[i]);
	ev_timer_stop(m->app->loop, &m->timer);
	rdmig_dest_destroy(m->d);
	if (m->state_fd > 2)
		close(m->state_fd);
	/* A half-written state never takes the final name. */
	if (m->state_part[0])
		unlink(m->state_part);
	for (i = 0; i < (int)m->nfiles; i++)
		cli_ram_unmap(&m->files[i]);
	free(m->files);
	free(m);
}

static struct json_object *mig_json(struct mig *m, const char *event)
{
	struct json_object *o = event ? cli_event(event) : json_object_new_object();

	if (m->id) {
		cli_json_u64(o, "id", m->id);
		cli_json_str(o, "dir", m->dir);
	}
	return o;
}

/* Ends @m: the exit code of a single-mode run, and one report. */
static void mig_end(struct mig *m, int code, const char *msg)
{
	struct app *a = m->app;

	cli_bar_clear(&a->bar);
	if (code) {
		char line[6144];

		if (m->id)
			snprintf(line, sizeof(line), "Migration %u into %s failed: %s", m->id,
				 m->dir, msg);
		else
			snprintf(line, sizeof(line), "Migration failed: %s", msg);
		cli_err("%s", line);
		if (a->o.json)
			cli_emit_failed(line, code, mig_json(m, NULL));
	}
	if (!a->o.daemon) {
		a->exit_code = code;
		ev_break(a->loop, EVBREAK_ALL);
	}
	mig_free(m);
}

static void report_done(struct mig *m)
{
	struct rdmig_stats st;
	char a[32], b[32];

	rdmig_dest_stats(m->d, &st);
	if (m->app->o.json) {
		struct json_object *o = mig_json(m, "completed");

		cli_json_str(o, "status", "completed");
		cli_json_stats(o, &st);
		cli_emit(o);
		return;
	}
	cli_err("migration%s%s completed in %.2f s: %s in %" PRIu64 " iteration%s (%s written), "
		"state %" PRIu64 " bytes", m->id ? " into " : "",
		m->id ? m->dir : "", (double)(cli_now_ms() - m->t0) / 1000.0,
		cli_fmt_bytes(st.total, a, sizeof(a)), st.iterations,
		st.iterations == 1 ? "" : "s", cli_fmt_bytes(st.normal_bytes, b, sizeof(b)),
		st.state_bytes);
}

static int failure_code(struct mig *m, int rc, const char *msg)
{
	if (m->usage_err)
		return CLI_EX_USAGE;
	/* The block lists of the two command lines do not match. */
	if ((rc == -EINVAL || rc == -ENOENT) && !strncmp(msg, "block \"", 7))
		return CLI_EX_USAGE;
	if (!m->app->o.state_out && !m->app->o.daemon && strstr(msg, "no state sink"))
		return CLI_EX_USAGE;
	return cli_exit_code(rc, CLI_PHASE_TRANSFER, msg);
}

/* After the block map: every --ram block must have been announced. */
static int check_set(struct mig *m, char *err, size_t errlen)
{
	const struct recv_opts *o = &m->app->o;
	struct rdmig_stats st;
	unsigned i, j;

	if (m->set_checked || o->ram_dir)
		return 0;
	rdmig_dest_stats(m->d, &st);
	if (!st.total)
		return 0;
	m->set_checked = true;
	for (i = 0; i < o->nrams; i++) {
		for (j = 0; j < m->nfiles; j++)
			if (!strcmp(m->files[j].name, o->rams[i].name))
				break;
		if (j == m->nfiles) {
			snprintf(err, errlen, "block \"%s\" was not sent by the source", o->rams[i].name);
			return -ENOENT;
		}
	}
	return 0;
}

static void mig_arm_timer(struct mig *m)
{
	int t = rdmig_dest_timeout(m->d);

	ev_timer_stop(m->app->loop, &m->timer);
	if (t < 0)
		return;
	ev_timer_set(&m->timer, (double)t / 1000.0, 0.0);
	ev_timer_start(m->app->loop, &m->timer);
}

static void mig_step(struct mig *m)
{
	char err[8192];
	int rc = rdmig_dest_process(m->d);

	if (rc == 0) {
		rc = check_set(m, err, sizeof(err));
		if (rc) {
			rdmig_dest_cancel(m->d, err); /* the source learns why */
			mig_end(m, CLI_EX_USAGE, err);
			return;
		}
		mig_arm_timer(m);
		return;
	}
	if (rc < 0) {
		int code = failure_code(m, rc, rdmig_dest_error(m->d));

		snprintf(err, sizeof(err), "%s%s", rdmig_dest_error(m->d),
			 code == CLI_EX_USAGE && strstr(rdmig_dest_error(m->d), "no state sink") ?
			 " (give --state-out FILE)" : "");
		mig_end(m, code, err);
		return;
	}
	/* finish_files already ran in commit_cb, before the source was told. */
	report_done(m);
	mig_end(m, CLI_EX_OK, NULL);
}

/* The connection is accepted: files, markers and watchers, then go. */
static int mig_start(struct mig *m, char *err, size_t errlen)
{
	struct app *a = m->app;
	int fds[RDMIG_DEST_MAX_FDS], i, rc;

	if (a->o.daemon) {
		for (;;) {
			m->id = ++a->next_id;
			snprintf(m->dir, sizeof(m->dir), "%s/%u", a->o.ram_dir, m->id);
			if (!mkdir(m->dir, 0755))
				break;
			if (errno != EEXIST) {
				snprintf(err, errlen, "cannot create %s: %s", m->dir, strerror(errno));
				return -errno;
			}
		}
	} else if (a->o.ram_dir) {
		snprintf(m->dir, sizeof(m->dir), "%s", a->o.ram_dir);
	}
	for (i = 0; i < (int)m->nfiles; i++) {
		rc = cli_ram_mark_incomplete(&m->files[i], err, errlen);
		if (rc)
			return rc;
	}
	rc = open_state(m, err, errlen);
	if (rc)
		return rc;
	m->t0 = cli_now_ms();
	m->accepted = true;
	m->nio = rdmig_dest_fds(m->d, fds, RDMIG_DEST_MAX_FDS);
	for (i = 0; i < m->nio; i++) {
		ev_io_init(&m->io[i], mig_io_cb, fds[i], EV_READ);
		m->io[i].data = m;
		ev_io_start(a->loop, &m->io[i]);
	}
	m->next = a->migs;
	a->migs = m;
	if (a->o.json) {
		struct json_object *o = mig_json(m, "setup");

		cli_json_str(o, "status", "setup");
		cli_emit(o);
	}
	return 0;
}

/* Single mode: the handle made at start-up, with the existing --ram files. */
static struct mig *single_mig(struct app *a)
{
	struct mig *m = mig_new(a);
	unsigned i;

	if (!m)
		return NULL;
	for (i = 0; i < a->o.nrams; i++) {
		struct cli_ram *r = &a->o.rams[i], *f;

		if (!r->host)
			continue;
		f = mig_add_file(m, r->name, r->path);
		if (!f || rdmig_dest_add_block(m->d, r->name, r->host, r->len, 0) < 0) {
			cli_err("--ram %s: %s", r->name, f ? rdmig_dest_error(m->d) : "out of memory");
			mig_free(m);
			return NULL;
		}
		/* The migration owns the mapping from now on. */
		*f = *r;
		r->host = NULL;
	}
	return m;
}

static void listen_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct app *a = w->data;
	struct mig *m = a->o.daemon ? mig_new(a) : a->waiting;
	char err[8192];
	int rc;

	(void)revents;
	if (!m)
		return;
	rc = rdmig_dest_accept(m->d, a->l, 0);
	if (rc == -EAGAIN) {
		if (a->o.daemon)
			mig_free(m);
		return;
	}
	/* A source turned away at connection time (no key, no common version)
	 * must not end the wait for the real one: report it and keep going. */
	if ((rc == -EACCES || rc == -EPROTONOSUPPORT || rc == -EPROTO) && !a->o.daemon) {
		snprintf(err, sizeof(err), "%s", rdmig_dest_error(m->d));
		cli_err("%s; still waiting", err);
		if (a->o.json)
			cli_emit_failed(err, cli_exit_code(rc, CLI_PHASE_CONNECT, err), NULL);
		return;
	}
	if (!a->o.daemon) {
		a->waiting = NULL;
		ev_io_stop(loop, w);
	}
	if (rc) {
		snprintf(err, sizeof(err), "%s", rdmig_dest_error(m->d));
		mig_end(m, cli_exit_code(rc, CLI_PHASE_CONNECT, err), err);
		return;
	}
	rc = mig_start(m, err, sizeof(err));
	if (rc) {
		mig_end(m, CLI_EX_USAGE, err);
		return;
	}
	mig_step(m);
}

/* ---- cancellation, control socket, signals ------------------------------------- */

/* Fails every migration (id 0: all); returns how many. */
static int cancel_migrations(struct app *a, unsigned id)
{
	struct mig *m, *next;
	int n = 0;

	for (m = a->migs; m; m = next) {
		next = m->next;
		if (id && m->id != id)
			continue;
		rdmig_dest_cancel(m->d, "migrate-recv was cancelled");
		mig_end(m, CLI_EX_CANCELLED, "cancelled");
		n++;
	}
	if (!a->o.daemon && a->waiting) {
		struct mig *w = a->waiting;

		a->waiting = NULL;
		ev_io_stop(a->loop, &a->listen_w);
		mig_end(w, CLI_EX_CANCELLED, "cancelled before a source connected");
		n++;
	}
	return n;
}

static struct json_object *mig_status(struct mig *m)
{
	struct json_object *o = mig_json(m, NULL);
	struct rdmig_stats st;

	rdmig_dest_stats(m->d, &st);
	cli_json_str(o, "status", "active");
	cli_json_stats(o, &st);
	return o;
}

static struct json_object *status_reply(struct app *a)
{
	struct json_object *o, *list;
	struct mig *m;

	if (!a->o.daemon) {
		if (a->migs)
			return ctl_return(mig_status(a->migs));
		o = json_object_new_object();
		cli_json_str(o, "status", "listening");
		return ctl_return(o);
	}
	o = json_object_new_object();
	list = json_object_new_array();
	cli_json_str(o, "status", "listening");
	for (m = a->migs; m; m = m->next)
		json_object_array_add(list, mig_status(m));
	json_object_object_add(o, "migrations", list);
	return ctl_return(o);
}

static struct json_object *on_command(void *ctx, const char *cmd, struct json_object *req)
{
	struct app *a = ctx;
	struct json_object *jid;
	unsigned id = 0;

	if (!strcmp(cmd, "status"))
		return status_reply(a);
	if (strcmp(cmd, "cancel"))
		return NULL;
	if (json_object_object_get_ex(req, "id", &jid)) {
		if (!json_object_is_type(jid, json_type_int) || json_object_get_int64(jid) <= 0)
			return ctl_error("id must be a positive integer");
		id = (unsigned)json_object_get_int64(jid);
	}
	if (!cancel_migrations(a, id) && id)
		return ctl_error("no such migration");
	return ctl_return(NULL);
}

static void signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct app *a = w->data;

	(void)revents;
	if (cancel_migrations(a, 0) && a->o.daemon)
		a->exit_code = CLI_EX_CANCELLED;
	ev_break(loop, EVBREAK_ALL);
}

/* ---- main ------------------------------------------------------------------------ */

static int start_listening(struct app *a)
{
	char err[8192];
	int rc;

	rc = rdmig_listener_create(&a->l, a->o.host, a->o.port, err, sizeof(err));
	if (rc) {
		cli_err("Unable to listen on %s:%s: %s", a->o.host, a->o.port, err);
		return rc == -ETIMEDOUT ? CLI_EX_TIMEOUT : CLI_EX_CONNECT;
	}
	ev_io_init(&a->listen_w, listen_cb, rdmig_listener_fd(a->l), EV_READ);
	a->listen_w.data = a;
	ev_io_start(a->loop, &a->listen_w);
	if (a->o.json) {
		struct json_object *o = cli_event("listening");

		cli_json_str(o, "host", a->o.host);
		cli_json_u64(o, "port", (uint64_t)rdmig_listener_port(a->l));
		cli_emit(o);
	} else {
		cli_err("listening on %s:%d", a->o.host, rdmig_listener_port(a->l));
	}
	return 0;
}

static int setup(struct app *a)
{
	static const int signals[] = { SIGINT, SIGTERM, SIGHUP };
	char err[8192];
	unsigned i;
	int rc;

	cli_bar_init(&a->bar, a->o.json);
	rc = prepare_files(a);
	if (rc)
		return rc;
	a->loop = ev_default_loop(EVFLAG_AUTO);
	if (!a->loop)
		return cli_usage("cannot create the event loop");
	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < 3; i++) {
		ev_signal_init(&a->sigs[i], signal_cb, signals[i]);
		a->sigs[i].data = a;
		ev_signal_start(a->loop, &a->sigs[i]);
	}
	if (a->o.control &&
	    ctl_open(&a->ctl, a->loop, a->o.control, on_command, a, err, sizeof(err)))
		return cli_usage("%s", err);
	if (!a->o.daemon) {
		a->waiting = single_mig(a);
		if (!a->waiting)
			return CLI_EX_USAGE;
	}
	return start_listening(a);
}

static void teardown(struct app *a)
{
	unsigned i;

	while (a->migs)
		mig_free(a->migs);
	if (a->waiting)
		mig_free(a->waiting);
	ctl_close(a->ctl);
	if (a->loop) {
		ev_io_stop(a->loop, &a->listen_w);
		for (i = 0; i < 3; i++)
			ev_signal_stop(a->loop, &a->sigs[i]);
	}
	rdmig_listener_destroy(a->l);
	for (i = 0; i < a->o.nrams; i++)
		cli_ram_unmap(&a->o.rams[i]);
	free(a->o.rams);
	free(a->o.key);
	if (a->loop)
		ev_loop_destroy(a->loop);
}

int main(int argc, char **argv)
{
	static struct app a;
	int rc;

	cli_set_prog("migrate-recv");
	setvbuf(stdout, NULL, _IOLBF, 0);
	rc = parse_args(&a.o, argc, argv);
	if (rc >= 0) {
		free(a.o.rams);
		free(a.o.key);
		return rc;
	}
	rc = setup(&a);
	if (!rc) {
		ev_run(a.loop, 0);
		rc = a.exit_code;
	}
	teardown(&a);
	return rc;
}
