#!/bin/sh
# Checks that each command's --help and its man page agree: the same options
# (--help's option lines against the tags of the man page's OPTIONS section)
# and the same exit codes (--help's "Exit status:" table against EXIT STATUS).
# Usage: test/cli-help-vs-man.sh [BUILD_DIR]   (default $RDMIG_BUILD or build)
# Exits 1 and names every difference on a mismatch.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${RDMIG_BUILD:-$repo/build}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

# Long options from the lines of --help that start with an option.
help_options() {
	"$1" --help | sed -n 's/^ \{1,\}\(-[A-Za-z], \)\{0,1\}\(--[a-z][a-z0-9-]*\).*/\2/p' | sort -u
}

# Exit codes from the lines of --help after "Exit status:".
help_codes() {
	"$1" --help | sed -n '/^Exit status:/,$p' | sed -n 's/^ \{1,\}\([0-9]\{1,\}\) .*/\1/p' | sort -u
}

# The lines of section $2 of man page $1.
man_section() {
	awk -v want="$2" '/^\.SH /{ sub(/^\.SH +/, ""); gsub(/"/, ""); in_s = ($0 == want); next }
		in_s { print }' "$1"
}

# Long options in the tag lines (the line after each .TP) of OPTIONS.
man_options() {
	man_section "$1" OPTIONS | awk 'tag { print; tag = 0 } /^\.TP/ { tag = 1 }' |
		grep -o '\\-\\-[a-z][a-z0-9\\-]*' | sed 's/\\-/-/g' | sort -u
}

man_codes() {
	man_section "$1" "EXIT STATUS" | awk 'tag { print; tag = 0 } /^\.TP/ { tag = 1 }' |
		sed -n 's/^\.B \([0-9]\{1,\}\)$/\1/p' | sort -u
}

compare() { # WHAT CMD HELP_FILE MAN_FILE
	if ! diff -q "$3" "$4" >/dev/null; then
		status=1
		echo "cli-help-vs-man: $2: $1 differ (< --help, > man page):" >&2
		diff "$3" "$4" | grep '^[<>]' >&2 || true
	fi
	if [ ! -s "$3" ]; then
		status=1
		echo "cli-help-vs-man: $2: no $1 found in --help" >&2
	fi
}

for cmd in migrate-send migrate-recv rdmig-libvirt; do
	case $cmd in
	rdmig-libvirt) bin=$repo/tools/$cmd ;; # a script: nothing to build
	*) bin=$build/bin/$cmd ;;
	esac
	page=$repo/man/$cmd.1
	[ -x "$bin" ] || { echo "cli-help-vs-man: $bin not built (run make)" >&2; exit 1; }
	[ -f "$page" ] || { echo "cli-help-vs-man: $page missing" >&2; exit 1; }
	help_options "$bin" >"$tmp/ho"
	man_options "$page" >"$tmp/mo"
	compare options "$cmd" "$tmp/ho" "$tmp/mo"
	help_codes "$bin" >"$tmp/hc"
	man_codes "$page" >"$tmp/mc"
	compare "exit codes" "$cmd" "$tmp/hc" "$tmp/mc"
done
[ "$status" = 0 ] && echo "cli-help-vs-man: --help and man pages agree"
exit "$status"
