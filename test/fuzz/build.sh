#!/bin/sh
# Builds the libFuzzer targets into build/fuzz with ASan and UBSan:
#   test/fuzz/build.sh            build every build/fuzz/fuzz_* target
#   test/fuzz/build.sh --seeds    also rewrite the seed corpora in test/fuzz/corpus
# Run one (the corpus directory grows as the fuzzer finds new inputs; give a
# scratch copy if the checked-in seeds must stay as they are):
#   build/fuzz/fuzz_codec -max_total_time=60 test/fuzz/corpus/codec
#   build/fuzz/fuzz_privdata -max_total_time=60 test/fuzz/corpus/privdata
# Needs clang with libFuzzer (Debian: clang, libclang-rt-dev or
# libfuzzer-<ver>-dev), protoc-c and libprotobuf-c.
set -eu

cd "$(dirname "$0")/../.."
out=build/fuzz
CC=${CC:-clang}
PROTOC_C=${PROTOC_C:-protoc-c}

mkdir -p "$out/gen"
"$PROTOC_C" --proto_path=proto --c_out="$out/gen" proto/rdmig.proto

pb_cflags=$(pkg-config --cflags libprotobuf-c)
pb_libs=$(pkg-config --libs libprotobuf-c)
# librdmig's headers are included by bare name: every folder of src/lib.
lib_inc=$(for d in src/lib/*/; do printf -- '-I%s ' "${d%/}"; done)
common="-std=gnu11 -D_GNU_SOURCE -g -Iinclude $lib_inc -I$out/gen $pb_cflags"
warn="-Wall -Wextra -Werror -Wno-unused-parameter"
# The decoder: framing and the type table, the pre-scan, the per-message checks,
# the arena it unpacks into.
codec_src="src/lib/wire/codec.c src/lib/wire/pbscan.c src/lib/wire/msgcheck.c
	src/lib/wire/arena.c"
san="-O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"

# The generated code is compiled without -Werror: it is not ours to warn about.
$CC $common -O1 -fsanitize=address,undefined -fno-sanitize-recover=all \
	-c -o "$out/rdmig.pb-c.o" "$out/gen/rdmig.pb-c.c"

echo "  LD      $out/fuzz_privdata"
$CC $common $warn $san -o "$out/fuzz_privdata" \
	test/fuzz/fuzz_privdata.c src/lib/wire/privdata.c src/lib/util/util.c
echo "  LD      $out/fuzz_codec"
$CC $common $warn $san -o "$out/fuzz_codec" \
	test/fuzz/fuzz_codec.c $codec_src src/lib/util/util.c "$out/rdmig.pb-c.o" $pb_libs

# The destination handler over stand-ins for the transport (see the file).
echo "  LD      $out/fuzz_dest"
$CC $common $warn $san -o "$out/fuzz_dest" test/fuzz/fuzz_dest.c \
	$codec_src src/lib/wire/privdata.c src/lib/util/util.c src/lib/util/bitmap.c \
	src/lib/memory/blocks.c src/lib/memory/creg.c src/lib/memory/zero.c \
	src/lib/memory/populate.c src/lib/memory/regq.c src/lib/session/config.c \
	src/lib/session/auth.c src/lib/session/session.c src/lib/policy/cost.c \
	src/lib/postcopy/pcset.c \
	"$out/rdmig.pb-c.o" $pb_libs $(pkg-config --libs libsodium libxxhash) -lpthread

# Post-copy's page set and keys as a destination takes them.
echo "  LD      $out/fuzz_pcset"
$CC $common $warn $san -o "$out/fuzz_pcset" test/fuzz/fuzz_pcset.c src/lib/postcopy/pcset.c \
	src/lib/util/bitmap.c src/lib/util/util.c

# Data-channel admission: the rule alone (chan_admit), fabric stubbed out.
echo "  LD      $out/fuzz_chan"
$CC $common $warn $san -o "$out/fuzz_chan" test/fuzz/fuzz_chan.c src/lib/session/chan.c \
	src/lib/wire/privdata.c src/lib/util/util.c test/fuzz/stub_fabric.c $(pkg-config --libs libsodium)

# What the commands read from a control-socket client, and block names
# turned into file names.
cli_cflags="-Isrc/cli $(pkg-config --cflags json-c)"
echo "  LD      $out/fuzz_control"
$CC $common $cli_cflags $warn $san -o "$out/fuzz_control" test/fuzz/fuzz_control.c \
	src/cli/control.c src/cli/clierr.c $(pkg-config --libs json-c) -lev
echo "  LD      $out/fuzz_names"
$CC $common $cli_cflags $warn $san -o "$out/fuzz_names" test/fuzz/fuzz_names.c \
	src/cli/cli.c src/cli/safeopen.c src/cli/clierr.c src/lib/util/util.c \
	$(pkg-config --libs json-c libsodium) -lrdmacm
# The hand-over message of migrate-recv's --postcopy-socket.
echo "  LD      $out/fuzz_pcsock"
$CC $common $cli_cflags $warn $san -o "$out/fuzz_pcsock" test/fuzz/fuzz_pcsock.c \
	src/cli/pcsock_msg.c src/cli/clierr.c

if [ "${1:-}" = --seeds ]; then
	$CC $common -Itest/common $warn -o "$out/gen_seeds" test/fuzz/gen_seeds.c \
		test/common/ctrl_seeds.c $codec_src src/lib/wire/privdata.c src/lib/util/util.c \
		"$out/gen/rdmig.pb-c.c" $pb_libs
	mkdir -p test/fuzz/corpus/privdata test/fuzz/corpus/codec test/fuzz/corpus/dest \
		test/fuzz/corpus/pcset
	"$out/gen_seeds" test/fuzz/corpus/privdata test/fuzz/corpus/codec test/fuzz/corpus/dest \
		test/fuzz/corpus/pcset
	echo "  SEEDS   test/fuzz/corpus"
fi
