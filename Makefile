# Thin wrapper around CMake. The two commands a newcomer needs: `make run` and `make test`.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test run bench bench-web clean

all: build

deps:
	@bash scripts/deps.sh

configure: deps
	@mkdir -p $(BUILD) && cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >$(BUILD)/configure.log 2>&1 || { cat $(BUILD)/configure.log; exit 1; }

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# Builds only the relay and the demo, in a tree of its own, so it never waits for the test build.
run:
	@bash scripts/deps.sh run
	@bash scripts/run.sh $(BUILD)/run

bench: build
	@for b in $(BUILD)/bin/tmk-bench-*; do echo "== $$b"; $$b || exit 1; done

bench-web: build
	@$(BUILD)/bin/tmk-bench-web

clean:
	rm -rf $(BUILD)
