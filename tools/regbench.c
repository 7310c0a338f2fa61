/* regbench: what registering a RAM file for RDMA costs on one host, by
 * thread count, as pin-all registers it (in pieces of 16 MiB).
 *
 *   regbench FILE --dev DEVICE [--threads N] [--piece SIZE] [--runs N]
 *
 * Maps FILE (its whole length) shared, makes its pages present for writing
 * (as the destination's populate helper does; not timed), then registers
 * it piece by piece for local and remote write on N threads that take the
 * pieces in order, and deregisters it; every run is timed apart.  Output,
 * one "key value" per line: bytes, threads, piece, then per run "run I
 * reg_s R dereg_s D", and the medians reg_s, dereg_s, reg_s_per_gib.
 * Exit status: 0, 1 when a registration failed, 2 on misuse. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "benchutil.h"
#include "cli.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define MAX_THREADS 64
#define MAX_RUNS 20

struct job {
	struct ibv_pd *pd;
	uint8_t *base;
	uint64_t len, piece, npieces;
	struct ibv_mr **mr;
	_Atomic uint64_t next;
	_Atomic int err;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *reg_thread(void *arg)
{
	struct job *j = arg;
	uint64_t i, len;

	while ((i = atomic_fetch_add(&j->next, 1)) < j->npieces && !atomic_load(&j->err)) {
		len = j->len - i * j->piece < j->piece ? j->len - i * j->piece : j->piece;
		j->mr[i] = ibv_reg_mr(j->pd, j->base + i * j->piece, len,
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!j->mr[i])
			atomic_store(&j->err, errno ? errno : EIO);
	}
	return NULL;
}

static void usage(void)
{
	fputs("usage: regbench FILE --dev DEVICE [--threads N] [--piece SIZE] [--runs N]\n", stderr);
	exit(2);
}

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	int i;

	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	return ctx;
}

int main(int argc, char **argv)
{
	const char *file = NULL, *dev = NULL;
	uint64_t piece = 16u << 20, i;
	double reg[MAX_RUNS], dereg[MAX_RUNS], t0, t1, t2;
	int threads = 1, runs = 3, r, k, fd, rc = 0;
	pthread_t th[MAX_THREADS];
	struct ibv_context *ctx;
	struct job j = { 0 };
	struct stat st;

	for (k = 1; k < argc; k++) {
		if (!strcmp(argv[k], "--dev") && k + 1 < argc)
			dev = argv[++k];
		else if (!strcmp(argv[k], "--threads") && k + 1 < argc)
			threads = atoi(argv[++k]);
		else if (!strcmp(argv[k], "--piece") && k + 1 < argc)
		{
			if (cli_parse_size(argv[++k], &piece))
				piece = 0;
		}
		else if (!strcmp(argv[k], "--runs") && k + 1 < argc)
			runs = atoi(argv[++k]);
		else if (argv[k][0] != '-' && !file)
			file = argv[k];
		else
			usage();
	}
	if (!file || !dev || threads < 1 || threads > MAX_THREADS || runs < 1 || runs > MAX_RUNS ||
	    !piece)
		usage();
	fd = open(file, O_RDWR);
	if (fd < 0 || fstat(fd, &st) || st.st_size <= 0) {
		fprintf(stderr, "regbench: cannot open %s: %s\n", file, strerror(errno));
		return 2;
	}
	j.len = (uint64_t)st.st_size;
	j.piece = piece;
	j.npieces = (j.len + piece - 1) / piece;
	j.base = mmap(NULL, j.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	j.mr = calloc(j.npieces, sizeof(*j.mr));
	ctx = open_dev(dev);
	j.pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (j.base == MAP_FAILED || !j.mr || !j.pd) {
		fprintf(stderr, "regbench: cannot set up (%s, device %s): %s\n", file, dev,
			strerror(errno));
		return 1;
	}
	if (madvise(j.base, j.len, MADV_POPULATE_WRITE))
		fprintf(stderr, "regbench: MADV_POPULATE_WRITE: %s (registration populates)\n",
			strerror(errno));
	printf("bytes %" PRIu64 "\nthreads %d\npiece %" PRIu64 "\n", j.len, threads, piece);
	for (r = 0; r < runs && !rc; r++) {
		atomic_store(&j.next, 0);
		t0 = now_s();
		for (k = 0; k < threads; k++)
			if (pthread_create(&th[k], NULL, reg_thread, &j)) {
				fprintf(stderr, "regbench: cannot start a thread\n");
				return 1;
			}
		for (k = 0; k < threads; k++)
			pthread_join(th[k], NULL);
		t1 = now_s();
		if (atomic_load(&j.err)) {
			fprintf(stderr, "regbench: ibv_reg_mr failed: %s\n",
				strerror(atomic_load(&j.err)));
			rc = 1;
		}
		for (i = 0; i < j.npieces; i++)
			if (j.mr[i]) {
				ibv_dereg_mr(j.mr[i]);
				j.mr[i] = NULL;
			}
		t2 = now_s();
		reg[r] = t1 - t0;
		dereg[r] = t2 - t1;
		printf("run %d reg_s %.3f dereg_s %.3f\n", r, reg[r], dereg[r]);
	}
	if (!rc)
		printf("reg_s %.3f\ndereg_s %.3f\nreg_s_per_gib %.3f\n", bench_median(reg, runs),
		       bench_median(dereg, runs), bench_median(reg, runs) / ((double)j.len / (1u << 30)));
	ibv_dealloc_pd(j.pd);
	ibv_close_device(ctx);
	munmap(j.base, j.len);
	free(j.mr);
	close(fd);
	return rc;
}
