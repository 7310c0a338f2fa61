/* A test shim, loaded with LD_PRELOAD into a command under test:
 *
 *   RDMIG_TEST_OPEN_AS=PATH=OTHER
 *
 * makes the command's open(PATH, ...) open OTHER instead, without O_CREAT
 * and O_EXCL.  The fault tests put a FIFO nobody reads at OTHER to hold
 * migrate-recv at a known point (opening its state file, a block's marker)
 * or to let it write only a page of its state: they used to put the FIFO
 * at PATH itself, which migrate-recv now refuses, since it creates every
 * file of its own with O_EXCL.  Nothing of this is part of the commands. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef int (*open_fn)(const char *, int, ...);

/* OTHER when @path is the PATH named in the environment, else NULL. */
static const char *other_for(const char *path)
{
	const char *spec = getenv("RDMIG_TEST_OPEN_AS"), *eq;

	if (!spec || !path)
		return NULL;
	eq = strchr(spec, '=');
	if (!eq || (size_t)(eq - spec) != strlen(path) || strncmp(spec, path, (size_t)(eq - spec)))
		return NULL;
	return eq + 1;
}

static int redirect(const char *name, const char *path, int flags, mode_t mode)
{
	open_fn real = (open_fn)dlsym(RTLD_NEXT, name);
	const char *other = other_for(path);

	if (other)
		return real(other, flags & ~(O_CREAT | O_EXCL));
	return real(path, flags, mode);
}

int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	return redirect("open", path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	return redirect("open64", path, flags, mode);
}
