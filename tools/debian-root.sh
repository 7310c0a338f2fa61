# tools/debian-root.sh: what tools/qemu-root and tools/kernel-root share,
# sourced by both.  Each builds one Debian root with debootstrap into a cache
# outside the checkout, shared by every checkout on the machine, and differs
# only in its packages, what makes its root complete and how a new root is
# checked.
#
# A root is built in a temporary directory next to it and renamed into place
# once complete, so an interrupted build never leaves a half root where the
# tests look; a stamp file inside names what it was built from, and a root
# whose stamp does not match the script's is rebuilt.  One build at a time
# (flock on ROOT.lock).  Building needs root (debootstrap, chroot); when the
# root is already there anyone may run the scripts and they print nothing.
#
# The sourcing script sets PROG, SUITE, PACKAGES, STAMP, ROOT_VAR and
# MIRROR_VAR (the names of its environment variables) and DEFAULT_ROOT, and
# defines usage and complete (0 when $ROOT is a whole root of its kind).
# Then it calls dr_setup "$@", answers --print itself, calls dr_build,
# checks $tmp (the new root) and ends with dr_install "what is in it".

ROOT=${!ROOT_VAR:-$DEFAULT_ROOT}
MIRROR=${!MIRROR_VAR:-http://deb.debian.org/debian}
# What the root is built from: a root with another stamp is rebuilt.
readonly KEY="suite=$SUITE variant=minbase include=$PACKAGES"

fail() {
	echo "$PROG: $*" >&2
	exit 1
}

# Sets mode (ensure, refresh or print) from the arguments, checks $ROOT
# and leaves when an existing root needs nothing done.
dr_setup() {
	mode=ensure
	case ${1:-} in
	'') ;;
	--refresh) mode=refresh ;;
	--print) mode=print ;;
	-h | --help) usage; exit 0 ;;
	*) echo "$PROG: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
	[ $# -le 1 ] || { usage >&2; exit 2; }
	case $ROOT in
	/*) ;;
	*) fail "$ROOT_VAR must be an absolute path, not '$ROOT'" ;;
	esac
	ROOT=${ROOT%/}
	[ -n "$ROOT" ] || fail "$ROOT_VAR must not be /"
	if [ "$mode" = print ]; then
		complete || fail "no complete root at $ROOT: run tools/$PROG as root"
		return 0
	fi
	if [ "$mode" = ensure ] && complete; then
		exit 0
	fi
}

# debootstrap mounts /proc and /sys inside its target; a run that dies can
# leave them there, and removing a tree with a live /sys mounted in it must
# never happen: unmount first, and never cross into another filesystem.
dr_remove_tree() {
	local dir=$1 m
	[ -e "$dir" ] || return 0
	while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done < <(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts | sort -r)
	rm -rf --one-file-system -- "$dir"
}

# Builds the root into a new directory, $tmp (removed on exit unless
# dr_install takes it), with debootstrap's log in $log.  @1 says what is
# built, for the line that announces it.
dr_build() {
	local what=$1 parent d why

	[ "$(id -u)" = 0 ] ||
		fail "the root at $ROOT ($what) is missing or stale: run as root: tools/$PROG"
	command -v debootstrap >/dev/null ||
		fail "debootstrap not found: run tools/bootstrap (installs debootstrap)"
	parent=$(dirname "$ROOT")
	mkdir -p "$parent" || fail "cannot create $parent: set $ROOT_VAR to a writable place"
	exec 9>"$ROOT.lock" || fail "cannot open $ROOT.lock: set $ROOT_VAR to a writable place"
	flock -w 900 9 || fail "another tools/$PROG held $ROOT.lock for 15 minutes"
	# Another run may have built it while we waited.
	if [ "$mode" = ensure ] && complete; then
		exit 0
	fi
	# What an earlier run left: temporary trees and a previous root set aside.
	for d in "$ROOT".tmp.* "$ROOT".old.*; do
		[ -e "$d" ] || continue
		dr_remove_tree "$d"
	done
	# mktemp puts a random suffix in place of the X's: ROOT.tmp.a1B2c3.
	tmp=$(mktemp -d "$ROOT.tmp.XXXXXX") || fail "cannot create a directory next to $ROOT"
	chmod 755 "$tmp"
	trap 'dr_remove_tree "$tmp"' EXIT
	log=$ROOT.log
	echo "$PROG: building Debian $SUITE's $what in $ROOT (debootstrap from $MIRROR; log in $log)" >&2
	if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp" "$MIRROR" >"$log" 2>&1; then
		why=$(grep -E '^[EW]: ' "$log" | tail -n 1)
		[ -n "$why" ] || why=$(tail -n 1 "$log")
		fail "debootstrap $SUITE failed (${why:-no output}): check that $MIRROR is reachable (or set $MIRROR_VAR); full log in $log"
	fi
	# The downloaded packages stay in the root otherwise (~100 MB).
	rm -f "$tmp"/var/cache/apt/archives/*.deb
}

# Stamps the checked $tmp with @2 (what is in it) and puts it in place: the
# old root (if any) aside first, since rename cannot replace a non-empty
# directory; then the new one in one rename.  @1 is said when it is ready.
dr_install() {
	local ready=$1 what=$2 old=

	printf '%s\n%s\n' "$KEY" "$what" >"$tmp/$STAMP"
	if [ -e "$ROOT" ]; then
		old=$ROOT.old.$$
		mv -T -- "$ROOT" "$old" || fail "cannot move the old root $ROOT aside"
	fi
	mv -T -- "$tmp" "$ROOT" || fail "cannot rename $tmp to $ROOT"
	trap - EXIT
	[ -z "$old" ] || dr_remove_tree "$old"
	echo "$PROG: $ROOT ready: $ready" >&2
}
