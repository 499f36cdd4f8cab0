# fabricscope: the two commands of README.md, and a few helpers.
#   make run    installs missing Debian packages, builds, starts the agent standalone
#   make test   installs missing Debian packages, builds, runs every test with ctest
BUILD      ?= build
BUILD_TYPE ?= RelWithDebInfo
WERROR     ?= OFF
JOBS       ?= $(shell nproc)
# Debug information: line tables only (-g1) give symbolized stack traces with file:line (glog's
# failure handler, sanitizer reports) at about three quarters of the compile time of full -g
# (one test file here: 13.2 s against 17.1 s at -O2, 10.8 s against 16.4 s under ASan at -O0).
# DEBUG_INFO=-g for variables and types in gdb.
DEBUG_INFO ?= -g1
# Extra agent flags for `make run`, e.g. ARGS="--sample-period=100us --line-rate=eth0=10gbit"
ARGS       ?=
LISTEN     ?= 127.0.0.1:9470

.PHONY: all deps configure build run test test-asan test-tsan bench screenshot clean

all: build

deps:
	@deploy/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $(DEBUG_INFO) -DNDEBUG" \
	  -DFABRICSCOPE_WERROR=$(WERROR) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@echo "fabricscope: agent in standalone mode; live page at http://$(LISTEN)/, metrics at http://$(LISTEN)/metrics (Ctrl-C stops)"
	@mkdir -p $(BUILD)/run
	$(BUILD)/agent/fabricscope-agent --http-listen=$(LISTEN) --history-path=$(BUILD)/run/history.db $(ARGS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 300

# Unit and integration tests under AddressSanitizer + UndefinedBehaviorSanitizer (not the
# packaging tests of deploy/: they run dpkg-deb and systemd-analyze, no code of ours to check).
# A unity build (8 files per compile): the sanitized build parses each heavy header (gRPC,
# protobuf, GoogleTest) once per 8 files instead of once per file, which keeps CI within its
# time on 2 cores; `make build` and `make test` compile the daemons file by file and the test
# executables 8 files at a time too (tests/CMakeLists.txt, FABRICSCOPE_UNITY_TESTS).
test-asan: deps
	@cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFABRICSCOPE_SANITIZE=ON \
	  -DCMAKE_CXX_FLAGS_DEBUG="$(DEBUG_INFO)" -DCMAKE_UNITY_BUILD=ON \
	  -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
	  -DFABRICSCOPE_BUILD_BENCH=OFF -DFABRICSCOPE_WERROR=$(WERROR) >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS) --timeout 300 -LE e2e \
	  -E '^deploy\.'

# The NCCL plugin's tests (its lock-free pools and flush thread against NCCL's concurrent
# threads) under ThreadSanitizer. TSan slows the harness's proxy thread 5-15x: a ProxyOp once
# started 103 ms after its Coll stopped, past the plugin's 100 ms linger, so the plugin lingers
# 1 s here (FABRICSCOPE_NCCL_LINGER_MS; NCCL's proxy thread may start one any time after).
test-tsan: deps
	@cmake -S . -B $(BUILD)-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFABRICSCOPE_TSAN=ON \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $(DEBUG_INFO) -DNDEBUG" \
	  -DFABRICSCOPE_BUILD_BENCH=OFF -DFABRICSCOPE_WERROR=$(WERROR) >/dev/null
	@cmake --build $(BUILD)-tsan -j $(JOBS) --target nccl_profiler_plugin_test
	TSAN_OPTIONS=halt_on_error=1 FABRICSCOPE_NCCL_LINGER_MS=1000 ctest --test-dir $(BUILD)-tsan \
	  --output-on-failure -j $(JOBS) \
	  --timeout 300 -R '^collectors\.nccl\.'

bench:
	tests/bench/run.sh

# README's picture of the live page: the cluster-in-a-box test (root: network namespaces) takes
# it in headless Chromium after its straggler phase, on real traffic; this copies it in place.
screenshot: build
	ctest --test-dir $(BUILD) --output-on-failure -R '^e2e\.cluster_in_a_box$$'
	cp $(BUILD)/tests/e2e/cluster_in_a_box/live_page_cluster.png exporters/exposition/page/screenshot.png

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
