/* The destination's image files: the block files migrate-recv writes, their
 * ".incomplete" markers, and the room they take.
 *
 * Nobody else may have them first.  A local user who reads the paths from
 * ps and creates the files before migrate-recv does would own the guest's
 * memory (read it, change it before QEMU loads it, delete the marker), so
 * every file is created with O_EXCL|O_NOFOLLOW, an existing file is used
 * only when the operator says so (and is ours) or when it is the very file
 * the destination QEMU maps, and no file is made in a directory another
 * user could rename things in (img_safe_dir).
 *
 * Room is promised, not taken: an image stays sparse where the source sends
 * zero pages (a guest's RAM is mostly untouched), so the files are not
 * preallocated; instead every migration's remaining need is counted
 * against the filesystem's free space before it is admitted
 * (img_unallocated), and a fault on a page the filesystem could not
 * provide after all fails that one migration (faultguard.h).
 *
 * Functions return 0 or a negative errno with one line in @err; none
 * prints or exits. */
#ifndef RDMIG_CLI_IMAGE_H
#define RDMIG_CLI_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cli.h"

enum img_mode {
	IMG_NEW,      /* must not exist: created O_EXCL|O_NOFOLLOW, mode 0600 */
	IMG_EXISTING, /* the operator's existing file (--use-existing): a
		       * regular file of ours with one name, no link on its
		       * path (safeopen.h) */
	IMG_QEMU,     /* the very file the destination QEMU maps (@r's dev and
		       * ino, which must be set), reached as safeopen.h
		       * does: /proc/PID/fd/N, /proc/PID/root/..., or a
		       * path without links */
};

/* Whether files made in @dir are safe from other local users: @dir and
 * every directory above it belong to root or to us, and none can be
 * written by others unless it has the sticky bit (as /tmp and /dev/shm
 * do), where nobody can remove or rename what another user made.  -EPERM
 * naming the directory and the fix otherwise. */
int img_safe_dir(const char *dir, struct cli_err *err);

/* Opens (or for IMG_NEW creates) @r->path and maps it read-write.  @len 0:
 * the file's length is used (it must not be empty); otherwise the file gets
 * that length.  A file created here is removed again when this fails. */
int img_open(struct cli_ram *r, uint64_t len, enum img_mode mode, struct cli_err *err);
/* Bytes @r's file may still claim from its filesystem as data lands: its
 * length less what it holds.  The whole length when the file at the path
 * is not the one we mapped any more. */
uint64_t img_unallocated(const struct cli_ram *r);
/* Free bytes of the filesystem holding @path, and its device. */
int img_fs_free(const char *path, uint64_t *bytes, dev_t *dev);

/* Creates PATH.incomplete (O_EXCL|O_NOFOLLOW); a marker already there is
 * kept only when it is a plain file of ours (a failed earlier run's). */
int img_mark_incomplete(struct cli_ram *r, struct cli_err *err);
/* Writes the mapped data back (msync). */
int img_sync(struct cli_ram *r, struct cli_err *err);
/* Removes the marker: the image is complete. */
int img_complete(struct cli_ram *r, struct cli_err *err);
/* Unmaps @r; with @discard, also removes the file and its marker when this
 * run created them (a failed daemon migration gives its space back).  A
 * file made here that has no marker and was never completed is removed
 * whatever @discard says: it would pass for a complete image. */
void img_close(struct cli_ram *r, int discard);

#endif
