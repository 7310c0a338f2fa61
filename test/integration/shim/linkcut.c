/* A test shim, loaded with LD_PRELOAD into a process under test:
 *
 *   RDMIG_TEST_CUT=PATH [RDMIG_TEST_CUT_HOLD_MS=MS]
 *
 * cuts the process's RDMA connections once the file PATH exists: every
 * rdma_cm id it made and still has is disconnected (its QP goes to the
 * error state, the peer gets a DISCONNECTED event), as when the link or
 * the peer's end of it dies.  For MS milliseconds after (0 by default)
 * every rdma_connect() fails with ECONNREFUSED, so the link stays down that
 * long whatever the process tries.  After each cut the shim removes PATH
 * and writes how many cuts it made to PATH.done; creating PATH again cuts
 * again.  Nothing of this is part of the library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#define IDS_MAX 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_cm_id *ids[IDS_MAX];
static atomic_llong hold_until_ms;

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

typedef int (*create_fn)(struct rdma_event_channel *, struct rdma_cm_id **, void *,
			 enum rdma_port_space);
typedef int (*destroy_fn)(struct rdma_cm_id *);
typedef int (*connect_fn)(struct rdma_cm_id *, struct rdma_conn_param *);

int rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *ctx,
		   enum rdma_port_space ps)
{
	create_fn real = (create_fn)dlsym(RTLD_NEXT, "rdma_create_id");
	int rc = real(ch, id, ctx, ps), i;

	if (rc)
		return rc;
	pthread_mutex_lock(&lock);
	for (i = 0; i < IDS_MAX; i++)
		if (!ids[i]) {
			ids[i] = *id;
			break;
		}
	pthread_mutex_unlock(&lock);
	return 0;
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	destroy_fn real = (destroy_fn)dlsym(RTLD_NEXT, "rdma_destroy_id");
	int i;

	pthread_mutex_lock(&lock);
	for (i = 0; i < IDS_MAX; i++)
		if (ids[i] == id)
			ids[i] = NULL;
	pthread_mutex_unlock(&lock);
	return real(id);
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	connect_fn real = (connect_fn)dlsym(RTLD_NEXT, "rdma_connect");

	if (now_ms() < atomic_load(&hold_until_ms)) {
		errno = ECONNREFUSED;
		return -1;
	}
	return real(id, param);
}

static void *watch(void *arg)
{
	const char *path = arg;
	const char *hold = getenv("RDMIG_TEST_CUT_HOLD_MS");
	char done[4096];
	int i, n, fd, cuts = 0;

	/* Looked up, not linked: a process without librdmacm (the env that
	 * starts the one under test) loads the shim too. */
	destroy_fn disconnect = (destroy_fn)dlsym(RTLD_DEFAULT, "rdma_disconnect");

	snprintf(done, sizeof(done), "%s.done", path);
	for (;;) {
		while (access(path, F_OK))
			usleep(20000);
		atomic_store(&hold_until_ms, now_ms() + (hold ? atoll(hold) : 0));
		n = 0;
		pthread_mutex_lock(&lock);
		for (i = 0; disconnect && i < IDS_MAX; i++)
			if (ids[i] && ids[i]->qp && disconnect(ids[i]) == 0)
				n++;
		pthread_mutex_unlock(&lock);
		unlink(path);
		fd = open(done, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dprintf(fd, "%d cuts, %d connections in the last\n", ++cuts, n);
			close(fd);
		}
	}
	return NULL;
}

__attribute__((constructor)) static void start(void)
{
	static char path[4000];
	const char *p = getenv("RDMIG_TEST_CUT");
	pthread_t th;

	if (!p || !*p || strlen(p) >= sizeof(path))
		return;
	strcpy(path, p);
	if (!pthread_create(&th, NULL, watch, path))
		pthread_detach(th);
}
