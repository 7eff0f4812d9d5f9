# Thin front end over CMake. Every target installs the Debian packages it
# needs first (scripts/deps.sh: `build` for building and running, `test`
# adds the test suite's reference peers), so a fresh Debian 12 machine needs
# nothing else.
#   make            build (Release, -march=native)
#   make demo       build, make the demo model, serve it to three demo tenants
#   make test       build and run the whole suite (ctest)
#   make test SANITIZE=1   the same under ASan+UBSan (separate build folder)
#   make bench      build and run the benchmarks
#   make fuzz       build the libFuzzer targets (clang, ASan+UBSan, in
#                   build-fuzz) and run each for FUZZ_SECONDS (default 60)

SANITIZE ?= 0
JOBS ?= $(shell nproc)
ifeq ($(SANITIZE),1)
BUILD := build-san
CMAKE_FLAGS := -DTESSERA_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
else
BUILD := build
CMAKE_FLAGS := -DCMAKE_BUILD_TYPE=Release
endif
TESSERA := $(BUILD)/tessera
DEMO_MODEL := models/demo-15m.gguf

.PHONY: all deps deps-test build demo test bench fuzz clean

all: build

deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

$(DEMO_MODEL): | build
	@mkdir -p models
	$(TESSERA) mkmodel $(DEMO_MODEL) --preset 15m --type f32

demo: build $(DEMO_MODEL)
	@scripts/demo.sh $(TESSERA)

test: deps-test build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: deps-test build
	@for b in $(BUILD)/bench_*; do echo "== $$b"; $$b || exit 1; done
	@echo "== bench/streams.sh (1000 concurrent streams)"; TESSERA=$(TESSERA) bash bench/streams.sh 1000

# Fuzzing: its own build folder, configured with clang the first time; see
# fuzz/run.sh for what a run does and fuzz/README.md for the targets.
FUZZ_SECONDS ?= 60
fuzz: deps-test
	@CC=clang-14 cmake -S . -B build-fuzz -DTESSERA_FUZZ=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	@BUILD=build-fuzz FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run.sh

clean:
	rm -rf build build-san build-fuzz
