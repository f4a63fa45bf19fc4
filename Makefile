GO ?= go
BIN := bin
STATICCHECK := $(BIN)/staticcheck
export GODEBUG := execwait=2

.PHONY: build test run lint interop-deps clean

build: $(BIN)/broker $(BIN)/demo-agent

$(BIN)/broker: FORCE
	$(GO) build -o $@ ./cmd/broker

$(BIN)/demo-agent: FORCE
	$(GO) build -o $@ ./testdata/fakeagent

FORCE:

# Interop tests run real agents from npm: the ACP SDK example agent,
# codex-acp and claude-agent-acp (against fake model servers).
interop-deps:
	cd testdata/interop && npm ci --no-audit --no-fund --loglevel=error

test: interop-deps
	$(GO) test -race -count=1 ./...

run: build
	$(BIN)/broker --config config.example.toml

$(STATICCHECK):
	GOBIN=$(abspath $(BIN)) $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: $(STATICCHECK)
	$(GO) vet ./...
	$(STATICCHECK) ./...

clean:
	rm -rf $(BIN)
