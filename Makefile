# rdmig: RDMA live-migration transport.  Plain GNU make; every output goes
# under build/ so `make clean` leaves the tree as cloned.

VERSION     := 0.3.0
MAJOR       := 0
PREFIX      ?= /usr/local
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
BINDIR      ?= $(PREFIX)/bin
MANDIR      ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR     ?=

# Sanitizer builds live apart so they never mix objects with normal ones.
B := build$(if $(SANITIZE),-san)
CC ?= cc
PROTOC_C ?= protoc-c

# SANITIZE=address,undefined builds everything with those sanitizers.
SANITIZE ?=
ifneq ($(SANITIZE),)
SANFLAGS := -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
# One unit test asks for an impossible allocation on purpose.
export ASAN_OPTIONS ?= allocator_may_return_null=1:detect_leaks=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
endif

PKGS      := libibverbs librdmacm libprotobuf-c libsodium libxxhash
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null)

CFLAGS ?= -O2 -g
# Client requests let valgrind know what the NIC wrote; optional.
VALGRIND_CFLAGS := $(if $(wildcard /usr/include/valgrind/memcheck.h),-DRDMIG_HAVE_VALGRIND)
WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wformat=2 -Wno-format-nonliteral
# librdmig is a folder per part (docs/layout.md); its headers are included
# by bare name, every folder on the include path.
LIB_DIRS := $(patsubst %/,%,$(sort $(dir $(wildcard src/lib/*/*.[ch]))))
LIB_INC  := $(addprefix -I,$(LIB_DIRS))
ALL_CFLAGS := -std=gnu11 -DRDMIG_VERSION=\"$(VERSION)\" $(WARN) $(CFLAGS) $(SANFLAGS) -D_GNU_SOURCE -MMD -MP $(VALGRIND_CFLAGS) \
        -Iinclude $(LIB_INC) -I$(B)/gen $(PKG_CFLAGS)
LIB_CFLAGS := $(filter-out $(LIB_INC),$(ALL_CFLAGS)) -fPIC -fvisibility=hidden
ALL_LDFLAGS := $(LDFLAGS) $(SANFLAGS)

ifeq ($(V),)
Q = @
say = @printf '  %-7s %s\n' $(1) $(2);
else
Q =
say =
endif

# ---- generated protobuf-c sources (never committed) -------------------------
PROTOS    := $(wildcard proto/*.proto)
GEN_C     := $(patsubst proto/%.proto,$(B)/gen/%.pb-c.c,$(PROTOS))
GEN_H     := $(GEN_C:.c=.h)

$(B)/gen/%.pb-c.c $(B)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(@D)
	$(call say,PROTOC,$<)$(PROTOC_C) --proto_path=proto --c_out=$(B)/gen $<

# ---- librdmig ---------------------------------------------------------------
LIB_SRC  := $(wildcard src/lib/*.c src/lib/*/*.c)
LIB_OBJ  := $(patsubst src/lib/%.c,$(B)/obj/lib/%.o,$(LIB_SRC)) \
            $(patsubst $(B)/gen/%.c,$(B)/obj/gen/%.o,$(GEN_C))
LIB_A    := $(B)/lib/librdmig.a
LIB_SO   := $(B)/lib/librdmig.so.$(VERSION)
LIB_SONAME := librdmig.so.$(MAJOR)
LIB_MAP  := src/lib/librdmig.map

# Each part compiles with its own headers and those of the parts it stands
# on, all the way down (docs/layout.md), and no others: a header included
# against the layering is not found.  A new part needs its row here.
LIB_SEES_util     :=
LIB_SEES_wire     := util
LIB_SEES_fabric   := util
LIB_SEES_memory   := util
LIB_SEES_session  := util wire fabric
LIB_SEES_policy   := util wire fabric session
LIB_SEES_precopy  := util wire fabric memory
LIB_SEES_postcopy := util wire fabric memory session
LIB_SEES_source   := util wire fabric memory session policy precopy postcopy
LIB_SEES_dest     := util wire fabric memory session policy postcopy
lib_sees = $(addprefix -Isrc/lib/,$(filter-out .,$(1)) $(LIB_SEES_$(1)))

$(B)/obj/lib/%.o: src/lib/%.c | $(GEN_H)
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) $(LIB_CFLAGS) $(call lib_sees,$(*D)) -c -o $@ $<

# Generated code is not ours to warn about beyond the defaults.
$(B)/obj/gen/%.o: $(B)/gen/%.c $(GEN_H)
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) -std=gnu11 $(CFLAGS) $(SANFLAGS) -fPIC -fvisibility=hidden \
		-I$(B)/gen $(PKG_CFLAGS) -c -o $@ $<

$(LIB_A): $(LIB_OBJ)
	@mkdir -p $(@D)
	$(call say,AR,$@)rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(LIB_OBJ) $(LIB_MAP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) -shared -Wl,-soname,$(LIB_SONAME) \
		-Wl,--version-script=$(LIB_MAP) -Wl,--no-undefined $(ALL_LDFLAGS) \
		-o $@ $(LIB_OBJ) $(PKG_LIBS)
	$(Q)ln -sf librdmig.so.$(VERSION) $(B)/lib/$(LIB_SONAME)
	$(Q)ln -sf $(LIB_SONAME) $(B)/lib/librdmig.so

# pkg-config files: the installed one is written by `make install` for the
# PREFIX/LIBDIR given then; the uninstalled one lets a program build
# against this tree (PKG_CONFIG_PATH=build pkg-config ... rdmig picks it).
pc_text = printf '%s\n' 'prefix=$(1)' 'libdir=$(2)' 'includedir=$(3)' '' \
	'Name: rdmig' 'Description: RDMA live-migration transport' 'Version: $(VERSION)' \
	'Requires.private: libibverbs librdmacm libprotobuf-c libsodium libxxhash' \
	'Libs: -L$${libdir} -lrdmig' 'Cflags: -I$${includedir}'

$(B)/rdmig-uninstalled.pc: Makefile
	@mkdir -p $(@D)
	$(call say,GEN,$@)$(call pc_text,$(CURDIR),$(abspath $(B)/lib),$(CURDIR)/include) > $@

lib: $(LIB_A) $(LIB_SO) $(B)/rdmig-uninstalled.pc

# ---- commands ---------------------------------------------------------------
# src/cli/send.c and recv.c hold the two mains; src/cli/send_*.c are the
# parts of migrate-send alone, src/cli/recv_*.c those of migrate-recv, and
# every other src/cli/*.c is shared by both.  tools/memload.c is the test
# and benchmark workload.
CLI_SEND   := $(wildcard src/cli/send*.c)
CLI_RECV   := $(wildcard src/cli/recv*.c)
CLI_MAINS  := $(CLI_SEND) $(CLI_RECV)
CLI_SHARED := $(filter-out $(CLI_MAINS),$(wildcard src/cli/*.c))
CLI_LIBS   := $(shell pkg-config --libs json-c 2>/dev/null) -lev
CLI_CFLAGS := $(ALL_CFLAGS) $(shell pkg-config --cflags json-c 2>/dev/null) -Isrc/cli
CLI_SHARED_OBJ := $(patsubst src/cli/%.c,$(B)/obj/cli/%.o,$(CLI_SHARED))
# The write tracker (dirty.h) is dirty.c and the dirty_*.c below it; the
# integration suite and dirtybench link it without the commands.
DIRTY_OBJ := $(patsubst src/cli/%.c,$(B)/obj/cli/%.o,$(wildcard src/cli/dirty*.c))

$(B)/obj/cli/%.o: src/cli/%.c | $(GEN_H)
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) $(CLI_CFLAGS) -c -o $@ $<

$(B)/bin/migrate-send: $(patsubst src/cli/%.c,$(B)/obj/cli/%.o,$(CLI_SEND)) $(CLI_SHARED_OBJ) $(LIB_A)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_A) $(PKG_LIBS) $(CLI_LIBS) -lpthread

$(B)/bin/migrate-recv: $(patsubst src/cli/%.c,$(B)/obj/cli/%.o,$(CLI_RECV)) $(CLI_SHARED_OBJ) \
		$(LIB_A)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_A) $(PKG_LIBS) $(CLI_LIBS) -lpthread

$(B)/obj/tools/%.o: tools/%.c
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(B)/bin/memload: $(B)/obj/tools/memload.o
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(ALL_LDFLAGS) -o $@ $^

# Only what exists is built, so the tree builds at every step of its history.
BINS := $(if $(wildcard src/cli/send.c),$(B)/bin/migrate-send) \
        $(if $(wildcard src/cli/recv.c),$(B)/bin/migrate-recv) \
        $(if $(wildcard tools/memload.c),$(B)/bin/memload)

# ---- examples ---------------------------------------------------------------
# A VMM's view of librdmig (rdmig(3)): each built the way an outside program
# would, with pkg-config against this tree and the shared library.
EXAMPLES := $(patsubst examples/%.c,$(B)/bin/%,$(wildcard examples/*.c))
EXAMPLE_PC = PKG_CONFIG_PATH=$(abspath $(B)) pkg-config

$(B)/bin/vmm-%: examples/vmm-%.c $(LIB_SO) $(B)/rdmig-uninstalled.pc
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) -std=gnu11 $(WARN) $(CFLAGS) $(SANFLAGS) \
		$$($(EXAMPLE_PC) --cflags rdmig) -o $@ $< $$($(EXAMPLE_PC) --libs rdmig) \
		-Wl,-rpath,$(abspath $(B)/lib)

examples: $(EXAMPLES)

# `make install` into a scratch prefix, then the examples built against the
# installed files only, through the installed rdmig.pc.
INSTALL_TEST := $(abspath $(B))/install-test
check-install:
	rm -rf $(INSTALL_TEST)
	$(MAKE) --no-print-directory install DESTDIR= PREFIX=$(INSTALL_TEST) > /dev/null
	@set -e; pc="PKG_CONFIG_PATH=$(INSTALL_TEST)/lib/pkgconfig PKG_CONFIG_DISABLE_UNINSTALLED=1 pkg-config"; \
	test "$$(env $$pc --variable=prefix rdmig)" = "$(INSTALL_TEST)" || \
		{ echo "check-install: the installed rdmig.pc is not for $(INSTALL_TEST)"; exit 1; }; \
	for e in $(wildcard examples/*.c); do \
		out=$(INSTALL_TEST)/$$(basename $$e .c); \
		$(CC) -std=gnu11 $(WARN) $(SANFLAGS) $$(env $$pc --cflags rdmig) -o $$out $$e \
			$$(env $$pc --libs rdmig); \
		lib=$$(LD_LIBRARY_PATH=$(INSTALL_TEST)/lib ldd $$out | awk '/librdmig/ {print $$3}'); \
		case "$$lib" in $(INSTALL_TEST)/lib/*) ;; \
		*) echo "check-install: $$out loads librdmig from '$$lib'"; exit 1;; esac; \
		rc=0; LD_LIBRARY_PATH=$(INSTALL_TEST)/lib $$out > /dev/null 2>&1 || rc=$$?; \
		test $$rc = 2 || { echo "check-install: $$out exited $$rc, not 2 (usage)"; exit 1; }; \
	done
	@echo "check-install: installed to $(INSTALL_TEST), examples built with its pkg-config"

# ---- tests --------------------------------------------------------------------
UNIT_SRC := $(wildcard test/unit/*.c)
UNIT_BIN := $(B)/test/unit-tests
INTEG_COMMON := $(wildcard test/common/*.c)
INTEG_SRC := $(wildcard test/integration/check_*.c)
# Helpers only the integration suite links (QEMU guests over QMP).
INTEG_SUPPORT := $(wildcard test/integration/support/*.c)
INTEG_BIN := $(B)/test/integration-tests
PEER_SRC  := $(filter-out $(INTEG_SRC),$(wildcard test/integration/*.c))
PEER_BIN  := $(patsubst test/integration/%.c,$(B)/test/%,$(PEER_SRC))
# RDMIG_SRCDIR: tests that hold the code to the man pages or the checked-in
# corpora read them from the tree they were built from.
TEST_CFLAGS = $(ALL_CFLAGS) $(CHECK_CFLAGS) -Itest/common -Itest/integration/support \
	-Isrc/cli $(shell pkg-config --cflags json-c) -I$(dir $<) \
	-DRDMIG_SRCDIR=\"$(CURDIR)\"
TEST_LIBS := $(LIB_A) $(PKG_LIBS) $(CHECK_LIBS) -lpthread $(shell pkg-config --libs json-c)

$(B)/obj/test/%.o: test/%.c | $(GEN_H)
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) $(TEST_CFLAGS) -c -o $@ $<

COMMON_OBJ := $(patsubst test/%.c,$(B)/obj/test/%.o,$(INTEG_COMMON))

# The commands' pure decoders are unit-tested too (the post-copy socket's
# message).
UNIT_CLI_OBJ := $(B)/obj/cli/pcsock_msg.o $(B)/obj/cli/clierr.o

$(UNIT_BIN): $(patsubst test/%.c,$(B)/obj/test/%.o,$(UNIT_SRC)) $(COMMON_OBJ) $(UNIT_CLI_OBJ) $(LIB_A)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(TEST_LIBS)

$(INTEG_BIN): $(patsubst test/%.c,$(B)/obj/test/%.o,$(INTEG_SRC) $(INTEG_SUPPORT)) \
		$(COMMON_OBJ) $(B)/obj/cli/qmp.o $(B)/obj/cli/qmp_cmd.o $(B)/obj/cli/qmp_peer.o \
		$(B)/obj/cli/qemu_ram.o $(B)/obj/cli/cli.o $(B)/obj/cli/proc.o \
		$(B)/obj/cli/safeopen.o $(B)/obj/cli/clierr.o \
		$(B)/obj/cli/inject.o $(DIRTY_OBJ) $(LIB_A)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(TEST_LIBS)

$(B)/test/%: $(B)/obj/test/integration/%.o $(COMMON_OBJ) $(LIB_A)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(TEST_LIBS)

# The test VMM reads the device state's header as migrate-recv writes it.
$(B)/test/pcvmm: $(B)/obj/cli/pcsock_msg.o $(B)/obj/cli/clierr.o

# LD_PRELOAD shims the fault tests put into a command under test.
SHIM_SRC := $(wildcard test/integration/shim/*.c)
SHIM_SO  := $(patsubst test/integration/shim/%.c,$(B)/test/lib%.so,$(SHIM_SRC))

$(B)/test/lib%.so: test/integration/shim/%.c
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) -std=gnu11 $(WARN) $(CFLAGS) -fPIC -shared -o $@ $< -ldl

tests: $(UNIT_BIN) $(INTEG_BIN) $(PEER_BIN) $(BINS) $(SHIM_SO) $(B)/guest/bootsect.img $(B)/bin/guestcheck

# Integration tests find the binaries they drive through this variable.
export RDMIG_BUILD := $(abspath $(B))

# One bed run holds every suite, the libvirt suite with its faults case
# alone ~12 min of it: room for a 2-core machine under a competing load.
SOFTROCE_TIMEOUT ?= 3600

check: bootstrap-if-needed qemu-root-if-needed kernel-root-if-needed
	$(MAKE) all tests
	@echo "== unit tests (host)"
	$(UNIT_BIN)
	@echo "== unit tests under valgrind$(if $(SANITIZE), (skipped: sanitizer build))"
	$(if $(SANITIZE),,$(MAKE) --no-print-directory check-valgrind)
	@echo "== make install into a scratch prefix; the examples built with its pkg-config"
	$(MAKE) --no-print-directory check-install
	@echo "== --help agrees with the man pages"
	RDMIG_BUILD=$(abspath $(B)) test/cli-help-vs-man.sh
	@echo "== static analysis"
	$(MAKE) --no-print-directory lint
	@echo "== fuzzing (short)"
	$(MAKE) --no-print-directory fuzz FUZZ_TIME=15
	@echo "== integration tests (Soft-RoCE)"
	tools/softroce --timeout $(SOFTROCE_TIMEOUT) -- $(INTEG_BIN)
	@echo "== write tracking on Debian 13's kernel (6.12: wp-async), Soft-RoCE"
	$(MAKE) --no-print-directory check-kernel-6.12
	@echo "== two hosts: a destination that dies (Soft-RoCE, two guests)"
	$(MAKE) --no-print-directory check-two-guests

# The suites whose code differs by kernel, booted on Debian 13's 6.12 (the
# rest of the integration suite just ran on the bed's default, Debian 12's
# 6.1): write tracking itself (dirty: wp-async and soft-dirty-scan), live
# migrations of a process (cli) and of QEMU guests (qemu), which take
# wp-async there.  267 s on 2026-11-25 (boot included; the kernel root was
# cached: building it once takes another ~50 s).  And post-copy (the embed
# suite's case), whose userfaultfd the kernel serves: about 50 s more; and
# its recovery (postcopy_recover: a vCPU waiting through a pause), about as
# long again.
KERNEL_612_SUITES := dirty cli qemu
check-kernel-6.12: tests kernel-root-if-needed
	RDMIG_SOFTROCE_KERNEL=$$(tools/kernel-root --print | cut -d' ' -f1) \
	tools/softroce --timeout $(SOFTROCE_TIMEOUT) -- sh -c 'rc=0; for s in $(KERNEL_612_SUITES); do \
		echo "== suite $$s on $$(uname -r)"; CK_RUN_SUITE=$$s $(INTEG_BIN) || rc=1; done; \
		echo "== post-copy on $$(uname -r)"; \
		CK_RUN_SUITE=embed CK_RUN_CASE=postcopy $(INTEG_BIN) || rc=1; \
		CK_RUN_SUITE=embed CK_RUN_CASE=postcopy_recover $(INTEG_BIN) || rc=1; exit $$rc'

check-unit: $(UNIT_BIN)
	$(UNIT_BIN)

# Memory errors and leaks in the unit tests (no fork: valgrind follows one
# process).
check-valgrind: $(UNIT_BIN)
	CK_FORK=no valgrind -q --error-exitcode=1 --leak-check=full \
		--errors-for-leak-kinds=definite,indirect $(UNIT_BIN)

# Static analysis we trust enough to require zero findings.
lint:
	cppcheck --quiet --enable=warning,portability --error-exitcode=1 --inline-suppr \
		-Iinclude $(LIB_INC) -Isrc/cli src/lib src/cli tools/memload.c tools/dirtybench.c tools/regbench.c examples
	@echo "lint: cppcheck found nothing"

# libFuzzer targets, one per decoder: `make fuzz` runs each for FUZZ_TIME
# seconds on a scratch copy of its seed corpus; `make check` runs them
# briefly.  Crashes are written to build/fuzz/ and fail the target.  The
# fuzzers carry their own sanitizers, so they live in build/ in every build.
FUZZ_TARGETS := privdata codec dest chan control names pcset pcsock
FUZZ_TIME ?= 120
fuzz: bootstrap-if-needed
	@test/fuzz/build.sh
	@set -e; for t in $(FUZZ_TARGETS); do \
		w=build/fuzz/work-$$t; rm -rf $$w; mkdir -p $$w; \
		cp test/fuzz/corpus/$$t/* $$w/; \
		echo "== fuzz $$t for $(FUZZ_TIME) s"; \
		if ! build/fuzz/fuzz_$$t -max_total_time=$(FUZZ_TIME) \
			-artifact_prefix=build/fuzz/ $$w > build/fuzz/$$t.log 2>&1; then \
			tail -40 build/fuzz/$$t.log; echo "fuzz $$t: FAILED"; exit 1; fi; \
		grep -E '^(#[0-9]+.*DONE|Done)' build/fuzz/$$t.log | tail -1; \
	done

# ---- bench (issue 6) ----------------------------------------------------------
# `make bench`: link limit, migration throughput and cost, zero pages, live
# migration over Soft-RoCE, plus the native zero-scan vs memory-read figure;
# see tools/bench.  zerobench links the data path's zero check directly.
$(B)/bin/zerobench: $(B)/obj/tools/zerobench.o $(B)/obj/tools/benchutil.o \
		$(B)/obj/lib/memory/zero.o $(B)/obj/lib/util/util.o
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(ALL_LDFLAGS) -o $@ $^

# dirtybench times one round of write tracking (src/cli/dirty.h) by size
# and method, for the scale table.
$(B)/obj/tools/dirtybench.o: tools/dirtybench.c | $(GEN_H)
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) $(CLI_CFLAGS) -c -o $@ $<

$(B)/bin/dirtybench: $(B)/obj/tools/dirtybench.o $(B)/obj/tools/benchutil.o $(DIRTY_OBJ) \
		$(B)/obj/cli/inject.o $(B)/obj/cli/proc.o $(B)/obj/cli/cli.o $(B)/obj/cli/safeopen.o \
		$(B)/obj/cli/clierr.o $(B)/obj/cli/opts.o $(LIB_A)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_A) $(PKG_LIBS) $(CLI_LIBS) -lpthread

# regbench times registering a RAM file in pin-all's pieces on N threads,
# for the registration rows.
$(B)/obj/tools/regbench.o: tools/regbench.c | $(GEN_H)
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) $(CLI_CFLAGS) -c -o $@ $<

$(B)/bin/regbench: $(B)/obj/tools/regbench.o $(B)/obj/tools/benchutil.o $(B)/obj/cli/cli.o $(B)/obj/cli/safeopen.o $(B)/obj/cli/clierr.o $(LIB_A)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_A) $(PKG_LIBS) $(CLI_LIBS) -libverbs -lpthread

bench: all tests $(B)/bin/zerobench $(B)/bin/dirtybench $(B)/bin/regbench qemu-root-if-needed \
		kernel-root-if-needed
	tools/bench

.PHONY: bench
# ---- end bench -----------------------------------------------------------------

# ---- two guests (issue 5) -------------------------------------------------------
# Faults that need two kernels (a destination host that dies): two guests
# joined by a link, the faults suite's two_guests case running in guest A.
check-two-guests: tests
	CK_RUN_SUITE=faults CK_RUN_CASE=two_guests tools/softroce --two-guests \
		--timeout 600 -- $(INTEG_BIN)

.PHONY: check-two-guests
# ---- end two guests -------------------------------------------------------------

# ---- libvirt (issue 21) --------------------------------------------------------
# The libvirt suite alone: domains moved by tools/rdmig-libvirt between two
# libvirt daemons in the bed (make check runs it with the other suites).
check-libvirt: bootstrap-if-needed
	$(MAKE) all tests
	CK_RUN_SUITE=libvirt tools/softroce --timeout 1200 -- $(INTEG_BIN)

.PHONY: check-libvirt
# ---- end libvirt -----------------------------------------------------------------

# Re-running bootstrap is cheap when everything is installed; when something
# is missing it installs it (as root) or says exactly what to run.
bootstrap-if-needed:
	@tools/bootstrap

# The qemu suite runs every test on a second QEMU too (Debian 13's 10.0 in
# its own root, chrooted): built once per machine, outside the checkout
# (tools/qemu-root says where), silent when it is there.
qemu-root-if-needed: bootstrap-if-needed
	@tools/qemu-root

# The bed boots Debian 13's kernel (6.12) too, for the write tracking that
# needs Linux 6.7+ (PAGEMAP_SCAN): kept in its own root, outside the
# checkout, built once per machine (tools/kernel-root says where); the
# host's own kernel is not touched.
kernel-root-if-needed: bootstrap-if-needed
	@tools/kernel-root

# The main job, end to end on a fresh machine: live-migrate a running QEMU
# guest with migrate-send/migrate-recv --qmp over Soft-RoCE; it runs on at
# the destination with its memory whole.
demo: bootstrap-if-needed
	$(MAKE) all tests
	tools/demo

# The same with a process (memload dirtying a 256 MiB RAM file).
demo-memload: bootstrap-if-needed
	$(MAKE) all
	tools/demo-memload

# ---- test guest (issue 11) -----------------------------------------------------
# A boot-sector QEMU guest that counts its passes over [1 MiB, 101 MiB) in
# its RAM, and the checker that proves a migrated copy of that RAM is
# consistent (test/guest/bootsect.S says how).  The image is assembled here,
# never committed; `guestcheck image` sets its dirty rate.  A BIOS loads
# exactly one sector, so any other size means the layout broke.
$(B)/guest/bootsect.o: test/guest/bootsect.S
	@mkdir -p $(@D)
	$(call say,AS,$<)as --32 -o $@ $<

$(B)/guest/bootsect.img: $(B)/guest/bootsect.o
	$(call say,LD,$@)ld -m elf_i386 -Ttext 0x7c00 --oformat binary -o $@.tmp $<
	$(Q)size=$$(stat -c %s $@.tmp); if [ "$$size" != 512 ]; then \
		echo "$@: $$size bytes, a boot sector is 512" >&2; rm -f $@.tmp; exit 1; fi
	$(Q)mv $@.tmp $@

$(B)/obj/test/guest/guestcheck.o: test/guest/guestcheck.c
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(B)/bin/guestcheck: $(B)/obj/test/guest/guestcheck.o
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(ALL_LDFLAGS) -o $@ $^
# ---- end test guest -------------------------------------------------------------

# ---- install ----------------------------------------------------------------
install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf librdmig.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(LIB_SONAME)
	ln -sf $(LIB_SONAME) $(DESTDIR)$(LIBDIR)/librdmig.so
	install -m 644 include/rdmig.h $(DESTDIR)$(INCLUDEDIR)/
	$(call pc_text,$(PREFIX),$(LIBDIR),$(INCLUDEDIR)) > $(DESTDIR)$(PKGCONFIGDIR)/rdmig.pc
	$(foreach s,1 3 7,$(if $(wildcard man/*.$(s)),install -d $(DESTDIR)$(MANDIR)/man$(s) && \
		install -m 644 $(wildcard man/*.$(s)) $(DESTDIR)$(MANDIR)/man$(s)/;))
	$(if $(BINS),install -d $(DESTDIR)$(BINDIR) && install -m 755 $(BINS) $(DESTDIR)$(BINDIR)/)
	install -m 755 tools/rdmig-libvirt $(DESTDIR)$(BINDIR)/

all: lib $(BINS) $(EXAMPLES)

clean:
	rm -rf build build-san

.PHONY: all lib examples check-install tests check check-unit check-valgrind lint fuzz demo demo-memload bootstrap-if-needed qemu-root-if-needed install clean kernel-root-if-needed check-kernel-6.12
.DEFAULT_GOAL := all

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
.SECONDARY:
