# weightfs — every target installs what it needs itself (a fresh Debian machine, as root).
GO       ?= go
BIN      := bin
PKGS     := fuse3 iproute2 zstd python3-numpy python3-xxhash python3-zstandard python3-torch python3-pip python3-setuptools pocl-opencl-icd ocl-icd-libopencl1
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Long tests (20 versions of a model with the ~100M model's tensors, kill -9 trials) are part of `make test`.
# TEST_TIMEOUT is go test's limit per package: far above what the longest packages (store,
# tests) take on a loaded 2-core machine, so that only a hung test meets it; the waits inside
# the tests are shorter still (minutes), so a test that waits in vain fails as itself and
# cleans up. scripts/test.sh shows progress and removes what a timed-out run leaves.
TEST_TIMEOUT ?= 45m

# The S3 tests run a real S3 server on loopback: versitygw (Apache-2.0), built from the Go
# module proxy into the user cache directory once (about 2 minutes on 2 cores). The tests look
# for it there too (or at $WEIGHTFS_S3_SERVER) and build it themselves if it is missing.
VERSITYGW    := v1.8.0
S3SERVER_DIR := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/weightfs-s3/versitygw-$(VERSITYGW)

# install puts the binary, mount(8)'s helper (a link to it: the binary acts as the helper when
# run as mount.weightfs) and the systemd unit in place; DESTDIR stages them for a package.
PREFIX  ?= /usr/local
SBINDIR ?= /sbin
UNITDIR ?= $(PREFIX)/lib/systemd/system

.PHONY: all deps build static test demo bench lint clean s3server install uninstall

all: build

# deps installs the system packages the mount, the Python reference apply, the Python client
# (python/: numpy, torch, xxhash; pip and setuptools install it offline), the OpenCL backend and
# the bench's figure 9 (iproute2: ip and tc for its shaped link) and the bench's comparison
# with the zstd command (zstd; skipped without it) need (only those that are missing).
deps:
	@missing=""; for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# s3server builds the test S3 server into its cache directory unless it is there.
s3server:
	@if [ ! -x "$(S3SERVER_DIR)/versitygw" ]; then \
		echo "building the test S3 server versitygw $(VERSITYGW) into $(S3SERVER_DIR) (once; about 2 minutes; each package as it is built:)"; \
		mkdir -p "$(S3SERVER_DIR)" && cd / && GOBIN="$(S3SERVER_DIR)" $(GO) install -v github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW) && \
		echo "built the test S3 server: $(S3SERVER_DIR)/versitygw"; \
	else \
		echo "test S3 server: $(S3SERVER_DIR)/versitygw (built before)"; \
	fi

# -buildvcs=auto stamps the git revision into the binary (weightfs --version) wherever the
# source is a git checkout, whatever GOFLAGS says; elsewhere it builds without it.
build:
	$(GO) build -buildvcs=auto -o $(BIN)/weightfs ./cmd/weightfs
	$(GO) build -o $(BIN)/weightfs-gen ./cmd/weightfs-gen

# static builds bin/weightfs-static without cgo: one file that runs on any Linux of the same
# architecture, with no GPU support (the diff runs on the CPU; `weightfs gpus` says so).
static:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o $(BIN)/weightfs-static ./cmd/weightfs

# test prints each package's result as it ends, failing tests with their output, and the
# running tests every two minutes of silence (scripts/test.sh).
# TEST_VET=no leaves go vet out of make test: .ci/run sets it when make lint, which runs the
# same go vet ./..., has just passed. make test on its own vets.
TEST_VET ?= yes
test: deps s3server
ifneq ($(TEST_VET),no)
	$(GO) vet ./...
endif
	GO="$(GO)" TEST_TIMEOUT="$(TEST_TIMEOUT)" ./scripts/test.sh

demo: deps build
	./scripts/demo.sh

bench: deps build s3server
	$(GO) run ./bench -out docs/benchmarks.json

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(SBINDIR) $(DESTDIR)$(UNITDIR)
	install -m 0755 $(BIN)/weightfs $(DESTDIR)$(PREFIX)/bin/weightfs
	ln -sfn $(PREFIX)/bin/weightfs $(DESTDIR)$(SBINDIR)/mount.weightfs
	sed 's|@BINDIR@|$(PREFIX)/bin|g' packaging/systemd/weightfs@.service > $(DESTDIR)$(UNITDIR)/weightfs@.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/weightfs@.service
	@echo "installed $(PREFIX)/bin/weightfs, $(SBINDIR)/mount.weightfs, $(UNITDIR)/weightfs@.service (under '$(DESTDIR)'); see docs/operations.md"

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/weightfs $(DESTDIR)$(SBINDIR)/mount.weightfs $(DESTDIR)$(UNITDIR)/weightfs@.service

clean:
	rm -rf $(BIN) demo
