# Sluice — every target works from a clean clone. See README.md.
SHELL := /bin/bash
MODULES := api probe proxy scheduler agent cli integration testkit
BINARIES := ./proxy/cmd/lbproxy ./scheduler/cmd/lbscheduler ./agent/cmd/lbagent ./cli/cmd/lbctl
GO ?= go
FUZZTIME ?= 10s
TEST_FLAGS ?= -race -count=1 -timeout 15m
# staticcheck for make lint; .ci/run installs this version (it supports Go 1.26)
STATICCHECK ?= staticcheck
STATICCHECK_VERSION := v0.8.2
# make mutate: the mutation tester, from the Go module proxy, into bin/tools
GREMLINS_VERSION := v0.6.0
MUTATE_PKGS ?= api/validate proxy/internal/balance proxy/internal/configwatch scheduler/plan scheduler/internal/publish

.PHONY: all build devtools test unit e2e lint fuzz mutate run bench chaos images deploy-up deploy-down clean tidy

all: build

## build: every binary into bin/ (static, CGO_ENABLED=0)
build:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ $(BINARIES)

## test: unit and package tests of every module with the race detector, then the
##       allocation-count tests (build tag !race: the race detector's sync.Pool drops objects) without it
test:
	@set -e; for m in $(MODULES); do \
	  echo "== go test $$m"; \
	  (cd $$m && $(GO) test $(TEST_FLAGS) ./...); \
	done
	@echo "== go test bench (its own module, outside go.work)"
	cd bench && GOWORK=off $(GO) test $(TEST_FLAGS) ./...
	@echo "== go test proxy (allocation counts, no race detector)"
	cd proxy && $(GO) test -count=1 -timeout 5m -run 'Allocs$$' ./server/

## devtools: the demo backend and the local fleet launcher
devtools:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./integration/cmd/demo-backend ./integration/cmd/sluice-dev

## e2e: the end-to-end scenarios over the real binaries (integration/e2e)
e2e: build devtools
	cd integration && SLUICE_BIN=$(CURDIR)/bin $(GO) test -count=1 -timeout 25m -tags e2e -v ./e2e/...

## lint: go vet, staticcheck and a go mod tidy check on every module (integration's e2e and chaos suites too) and a gofmt check
lint:
	@command -v $(STATICCHECK) >/dev/null || { echo "lint: $(STATICCHECK) not found: go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)"; exit 1; }
	@set -e; for m in $(MODULES); do echo "== lint $$m"; (cd $$m && $(GO) vet ./... && $(STATICCHECK) ./... && \
	  if ! $(GO) mod tidy -diff >/dev/null; then echo "$$m: go.mod/go.sum not tidy (make tidy)"; exit 1; fi); done
	@cd integration && $(STATICCHECK) -tags e2e ./e2e/... && $(STATICCHECK) -tags chaos ./chaos/...
	@echo "== lint bench"; cd bench && GOWORK=off $(GO) vet ./... && GOWORK=off $(STATICCHECK) ./... && \
	  if ! GOWORK=off $(GO) mod tidy -diff >/dev/null; then echo "bench: go.mod/go.sum not tidy"; exit 1; fi
	@out=$$(gofmt -l $(MODULES) bench); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## tidy: go mod tidy in every module
tidy:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) mod tidy); done

## mutate: mutation testing (gremlins) over MUTATE_PKGS, kill ratio per package (slow; not in .ci/run); see docs/TESTING.md
mutate:
	@$(GO) version -m bin/tools/gremlins 2>/dev/null | grep -qE '^\s+mod\s+github.com/go-gremlins/gremlins\s+$(GREMLINS_VERSION)\s' || \
	  GOBIN=$(CURDIR)/bin/tools $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)
	@bash scripts/mutate.sh $(CURDIR)/bin/tools/gremlins $(MUTATE_PKGS)

## fuzz: each fuzz target for FUZZTIME
fuzz:
	@bash scripts/fuzz.sh $(FUZZTIME)

## run: the local two-IDC fleet on loopback (embedded etcd)
run: build devtools
	./bin/sluice-dev --bin bin

## bench: lbproxy vs nginx (with and without an access log) vs HAProxy, plain (bench/run.sh; ROUNDS, DURATION, PHASE, RATE, NAMES),
##        then over TLS: HTTP/1.1, HTTP/2, new connections (bench/tlsrun.sh; TLS_DURATION, HS_DURATION),
##        then every instance algorithm's pick against wrr's (bench/picks.sh; COUNT); ≈ 12 min; see docs/BENCHMARKS.md
bench:
	ROUNDS=$${ROUNDS:-3} DURATION=$${DURATION:-5s} PHASE=$${PHASE:-4s} bash bench/run.sh
	ROUNDS=$${ROUNDS:-3} DURATION=$${TLS_DURATION:-5s} HS_DURATION=$${HS_DURATION:-4s} bash bench/tlsrun.sh
	COUNT=$${COUNT:-5} bash bench/picks.sh

clean:
	rm -rf bin

# images, deploy-up, deploy-down, chaos: the Docker fleet (deploy/README.md)
-include deploy/deploy.mk
