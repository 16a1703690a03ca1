# weightfs — every target installs what it needs itself (a fresh Debian machine, as root).
GO       ?= go
BIN      := bin
PKGS     := fuse3 python3-numpy python3-xxhash python3-zstandard pocl-opencl-icd ocl-icd-libopencl1
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Long tests (the 20-version ~100M-parameter run, kill -9 trials) are part of `make test`.
TEST_TIMEOUT ?= 14m

.PHONY: all deps build test demo bench lint clean

all: build

# deps installs the system packages the mount, the Python reference apply and the OpenCL
# backend need (only those that are missing).
deps:
	@missing=""; for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

build:
	$(GO) build -o $(BIN)/weightfs ./cmd/weightfs
	$(GO) build -o $(BIN)/weightfs-gen ./cmd/weightfs-gen

test: deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

demo: deps build
	./scripts/demo.sh

bench: deps build
	$(GO) run ./bench -out docs/benchmarks.json

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

clean:
	rm -rf $(BIN) demo
