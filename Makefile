# croupier's build. `make demo` and `make test` bootstrap everything they need.
SHELL := /bin/bash
PY      := .venv/bin/python
LIB     := python/croupier/libcroupier.so
CHECKLIB := build/cgocheck2/libcroupier.so
GO_SRC  := $(shell find core permutation loader cabi drivers internal -name '*.go' -not -name '*_test.go') cabi/arrow_c.h go.mod go.sum
GOFLAGS_SO := -buildmode=c-shared -trimpath -ldflags='-s -w'
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Azurite, the Azure Blob Storage emulator of the Go tests (internal/azurite):
# 3.35.0 is the newest release that runs on Node.js 20 (3.36 wants 21).
AZURITE_VERSION := 3.35.0
AZURITE := build/azurite/node_modules/.bin/azurite-blob

.PHONY: dev build exports wheel test-wheel demo test test-go test-cgocheck test-py lint bench clean azurite

# The virtual environment is rebuilt only when requirements-dev.txt changes:
# torch from PyPI is large.
.venv/.requirements: requirements-dev.txt
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-cache-dir -r requirements-dev.txt
	cp requirements-dev.txt $@

.venv/.croupier: .venv/.requirements pyproject.toml setup.py $(LIB)
	CROUPIER_SKIP_GO_BUILD=1 $(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

dev: .venv/.croupier

build: $(LIB)

$(LIB): $(GO_SRC)
	go build $(GOFLAGS_SO) -o $@ ./cabi

# cabi/exports.json, the C signatures of the library's exports, rewritten from
# the build; refused while abiVersion is the list's and the signatures changed
# (cabi/ABI.md, "The list of exports").
exports:
	go generate ./cabi

$(CHECKLIB): $(GO_SRC)
	GOEXPERIMENT=cgocheck2 go build -buildmode=c-shared -o $@ ./cabi

# A wheel holding libcroupier.so, tagged py3-none-manylinux_2_<glibc>_<arch>
# (setup.py): a machine with that glibc or newer installs it without Go.
wheel: $(LIB)
	rm -f dist/croupier-*.whl
	CROUPIER_SKIP_GO_BUILD=1 $(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .

# The wheel installed into a fresh environment with no Go on PATH, running
# the demo and the table and permutation tests (about 2 minutes on 2 cores).
test-wheel: wheel
	python/tests/check_wheel.sh dist/croupier-$$(cat VERSION)-py3-none-manylinux_*.whl

demo: dev
	$(PY) examples/demo.py

test: test-go test-cgocheck test-py

# Then the core again without cgo: arrow-go's pure-Go zstd and Go-heap
# buffers (about 40 s on 2 cores); and the side effects of importing croupier,
# with the packages and size of examples/go-minimal printed (-v).
test-go: $(AZURITE)
	go vet ./...
	go test -race -count=1 ./...
	CGO_ENABLED=0 go test -count=1 ./core/table/... ./core/cmem/...
	CGO_ENABLED=0 go test -count=1 -v ./internal/sideeffects/...

# Installed from the npm registry into build/ (about 15 s, 190 MB).
azurite: $(AZURITE)

$(AZURITE):
	mkdir -p build/azurite
	echo '{"private": true}' > build/azurite/package.json
	cd build/azurite && npm install --no-audit --no-fund --omit=dev --save-exact azurite@$(AZURITE_VERSION)

# The export path under the strictest cgo pointer checks.
test-cgocheck: dev $(CHECKLIB)
	CROUPIER_LIBRARY=$(abspath $(CHECKLIB)) $(PY) -m pytest -q -p no:cacheprovider python/tests/test_formats.py python/tests/test_leak.py

test-py: dev
	$(PY) -m pytest -q

lint: dev
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	go vet ./...
	go run $(STATICCHECK) ./...
	.venv/bin/ruff check python examples bench
	.venv/bin/ruff format --check python examples bench
	.venv/bin/mypy

clean:
	rm -rf build dist $(LIB) python/croupier/libcroupier.h

# The benchmark harness (bench/run.py): object store, loader and peers,
# permutation build, commits, larger than memory, ranks, token budgets,
# mixtures, following, distant store. Its peers' libraries
# and matplotlib are installed here only; `make test` and CI never need them.
# BENCH_FLAGS=--quick is a smoke run at tiny sizes that leaves bench/RESULTS.md
# alone; BENCH_FLAGS="--only memory,ranks" runs only the parts named.
BENCH_FLAGS ?=

.venv/.bench: .venv/.requirements bench/requirements.txt bench/requirements-nodeps.txt
	$(PY) -m pip install --quiet -c requirements-dev.txt -r bench/requirements.txt
	$(PY) -m pip install --quiet --no-deps -r bench/requirements-nodeps.txt
	touch $@

bench: dev .venv/.bench
	$(PY) bench/run.py $(BENCH_FLAGS)
