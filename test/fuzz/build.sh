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
common="-std=gnu11 -D_GNU_SOURCE -g -Iinclude -Isrc/lib -I$out/gen $pb_cflags"
warn="-Wall -Wextra -Werror -Wno-unused-parameter"
# The decoder: framing and the type table, the pre-scan, the per-message checks,
# the arena it unpacks into.
codec_src="src/lib/codec.c src/lib/pbscan.c src/lib/msgcheck.c src/lib/arena.c"
san="-O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"

# The generated code is compiled without -Werror: it is not ours to warn about.
$CC $common -O1 -fsanitize=address,undefined -fno-sanitize-recover=all \
	-c -o "$out/rdmig.pb-c.o" "$out/gen/rdmig.pb-c.c"

echo "  LD      $out/fuzz_privdata"
$CC $common $warn $san -o "$out/fuzz_privdata" \
	test/fuzz/fuzz_privdata.c src/lib/privdata.c src/lib/util.c
echo "  LD      $out/fuzz_codec"
$CC $common $warn $san -o "$out/fuzz_codec" \
	test/fuzz/fuzz_codec.c $codec_src src/lib/util.c "$out/rdmig.pb-c.o" $pb_libs

# The destination handler over stand-ins for the transport (see the file).
echo "  LD      $out/fuzz_dest"
$CC $common $warn $san -o "$out/fuzz_dest" test/fuzz/fuzz_dest.c \
	$codec_src src/lib/privdata.c src/lib/util.c src/lib/blocks.c \
	src/lib/creg.c src/lib/zero.c src/lib/bitmap.c src/lib/config.c src/lib/auth.c \
	src/lib/session.c src/lib/populate.c src/lib/regq.c src/lib/cost.c src/lib/pcset.c \
	"$out/rdmig.pb-c.o" $pb_libs $(pkg-config --libs libsodium libxxhash) -lpthread

# Post-copy's page set and keys as a destination takes them.
echo "  LD      $out/fuzz_pcset"
$CC $common $warn $san -o "$out/fuzz_pcset" test/fuzz/fuzz_pcset.c src/lib/pcset.c \
	src/lib/bitmap.c src/lib/util.c

# Data-channel admission: the rule alone (chan_admit), fabric stubbed out.
echo "  LD      $out/fuzz_chan"
$CC $common $warn $san -o "$out/fuzz_chan" test/fuzz/fuzz_chan.c src/lib/chan.c \
	src/lib/privdata.c src/lib/util.c test/fuzz/stub_fabric.c $(pkg-config --libs libsodium)

# What the commands read from a control-socket client, and block names
# turned into file names.
cli_cflags="-Isrc/cli $(pkg-config --cflags json-c)"
echo "  LD      $out/fuzz_control"
$CC $common $cli_cflags $warn $san -o "$out/fuzz_control" test/fuzz/fuzz_control.c \
	src/cli/control.c src/cli/clierr.c $(pkg-config --libs json-c) -lev
echo "  LD      $out/fuzz_names"
$CC $common $cli_cflags $warn $san -o "$out/fuzz_names" test/fuzz/fuzz_names.c \
	src/cli/cli.c src/cli/safeopen.c src/cli/clierr.c src/lib/util.c $(pkg-config --libs json-c libsodium) -lrdmacm

if [ "${1:-}" = --seeds ]; then
	$CC $common -Itest/common $warn -o "$out/gen_seeds" test/fuzz/gen_seeds.c \
		test/common/ctrl_seeds.c $codec_src src/lib/privdata.c src/lib/util.c "$out/gen/rdmig.pb-c.c" $pb_libs
	mkdir -p test/fuzz/corpus/privdata test/fuzz/corpus/codec test/fuzz/corpus/dest \
		test/fuzz/corpus/pcset
	"$out/gen_seeds" test/fuzz/corpus/privdata test/fuzz/corpus/codec test/fuzz/corpus/dest \
		test/fuzz/corpus/pcset
	echo "  SEEDS   test/fuzz/corpus"
fi
