# Thin front end over CMake. Every target installs the Debian packages it
# needs first (scripts/deps.sh: `build` for building and running, `test`
# adds the test suite's reference peers), so a fresh Debian 12 machine needs
# nothing else.
#   make            build (Release, -march=native)
#   make demo       build, make the demo model, serve it to three demo tenants
#   make test       build and run the whole suite (ctest)
#   make test SANITIZE=1   the same under ASan+UBSan (separate build folder)
#   make bench      build and run the benchmarks

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

.PHONY: all deps deps-test build demo test bench clean

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

clean:
	rm -rf build build-san
