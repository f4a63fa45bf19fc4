GO ?= go
BIN := bin
STATICCHECK := $(BIN)/staticcheck
export GODEBUG := execwait=2

.PHONY: build test run lint sandbox-deps browser-deps promtool-deps netns-deps rules interop-deps interop bench fuzz soak clean

build: $(BIN)/broker $(BIN)/demo-agent

# The broker is stamped with its version (git describe) and, from a git
# checkout, the revision and time of its commit: broker version says them.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

$(BIN)/broker: FORCE
	$(GO) build -buildvcs=auto -ldflags "-X main.version=$(VERSION)" -o $@ ./cmd/broker

$(BIN)/demo-agent: FORCE
	$(GO) build -o $@ ./testdata/fakeagent

FORCE:

# Interop tests run real agents from npm: the ACP SDK example agent,
# codex-acp and claude-agent-acp (against fake model servers).
interop-deps:
	cd testdata/interop && npm ci --no-audit --no-fund --loglevel=error

# Agents run in a bubblewrap sandbox by default, and the tests run them
# so: it is installed when missing and this user may (root, apt-get).
# Elsewhere the tests that need it are skipped, and make run runs the
# demo agent unconfined; both say so.
sandbox-deps:
	@if ! command -v bwrap >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing bubblewrap"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
		else \
			echo "bubblewrap is missing and this user cannot install it (apt-get install bubblewrap, as root): tests that need it are skipped"; \
		fi; \
	fi

# The partition tests run agent hosts in network namespaces made with ip
# (iproute2), and drop their packets with nft (nftables): both installed
# when missing and this user may (root, apt-get). Elsewhere those tests
# are skipped and say so.
netns-deps:
	@if ! command -v ip >/dev/null 2>&1 || ! command -v nft >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing iproute2 and nftables"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 nftables >/dev/null; \
		else \
			echo "ip or nft is missing and this user cannot install them (apt-get install iproute2 nftables, as root): the partition tests are skipped"; \
		fi; \
	fi

# The web front end's tests drive a headless browser: Debian's chromium,
# installed when missing and this user may (root, apt-get). Elsewhere
# those tests are skipped and say so; in CI they fail.
browser-deps:
	@if ! command -v chromium >/dev/null 2>&1 && [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing chromium"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null; \
		else \
			echo "chromium is missing and this user cannot install it (apt-get install chromium, as root): the browser tests are skipped"; \
		fi; \
	fi

# The alerting rules in packaging/prometheus are checked with promtool,
# from the Debian package prometheus: the tool alone is taken from the
# package, into bin/ (installing the package would start a Prometheus
# server where systemd runs). Where it cannot be had, the test that needs
# it is skipped and says so; in CI it fails.
PROMTOOL := $(BIN)/promtool
promtool-deps:
	@if ! command -v promtool >/dev/null 2>&1 && [ ! -x $(PROMTOOL) ]; then \
		tmp=$$(mktemp -d); chmod 755 $$tmp; \
		if command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 && \
			{ (cd $$tmp && apt-get download -qq prometheus >/dev/null 2>&1) || \
			  { [ "$$(id -u)" = 0 ] && apt-get update -qq && (cd $$tmp && apt-get download -qq prometheus >/dev/null 2>&1); }; } && \
			dpkg-deb -x $$tmp/prometheus_*.deb $$tmp/x && mkdir -p $(BIN) && cp $$tmp/x/usr/bin/promtool $(PROMTOOL); then \
			echo "promtool taken from the Debian package prometheus into $(PROMTOOL)"; \
		else \
			echo "promtool is missing and cannot be had here (apt-get download prometheus): the alerting rules' checks are skipped"; \
		fi; \
		rm -rf $$tmp; \
	fi

# The alerting rules parse, and fire as their tests say.
rules: promtool-deps
	cd packaging/prometheus && PATH="$(abspath $(BIN)):$$PATH" promtool check rules acp-broker.rules.yml
	cd packaging/prometheus && PATH="$(abspath $(BIN)):$$PATH" promtool test rules acp-broker.rules.test.yml

# The slowest packages start first: faults (its tests run one after
# another, 9 minutes on two busy cores) and interop (4 minutes). Three
# packages run at once: the tests mostly wait on subprocesses, fakes and
# rate limits (a whole run kept two cores 20 % busy). TEST_TIMEOUT bounds
# each package, faults with three times its time to spare: go test's
# default of 10 minutes was hit on a busy machine.
TEST_TIMEOUT ?= 30m
TEST_FIRST := ./faults/ ./interop/

test: sandbox-deps browser-deps promtool-deps netns-deps interop-deps
	$(GO) test -race -count=1 -p 3 -timeout $(TEST_TIMEOUT) $(TEST_FIRST) ./...

# The real agents (SDK example, codex-acp, claude-agent-acp), directly and
# through the Discord front end.
interop: interop-deps
	$(GO) test -race -count=1 -v ./interop/

# The figures in BENCHMARKS.md. Not timed tests: run on a quiet machine.
bench: build interop-deps
	$(GO) test -run '^$$' -bench SessionUpdates -benchtime 200000x -count 3 -cpu 1 ./acp/
	$(GO) test -run '^$$' -bench DeathNoticed -benchtime 500x ./pool/
	$(GO) test -run '^$$' -bench 'Start_Network' -benchtime 50x ./pool/
	$(GO) test -run '^$$' -bench 'Proxy_StreamedResponse' -benchtime 200x ./netproxy/
	$(GO) test -run '^$$' -bench ToolCallUpdate ./store/
	$(GO) test -run '^$$' -bench Worktrees -benchtime 100x ./workspace/
	$(GO) test -run '^$$' -bench '^BenchmarkTurnOverhead$$' -benchtime 300x ./bench/
	$(GO) test -run '^$$' -bench SlackTurnOverhead -benchtime 60x ./bench/
	$(GO) test -run '^$$' -bench SendNow -benchtime 100x -count 3 ./bench/
	$(GO) test -run '^$$' -bench Recovery -benchtime 10x ./bench/
	$(GO) test -run '^$$' -bench 'IdleThreadMemory|Scale' -benchtime 1x -timeout 30m ./bench/
	$(GO) test -run '^$$' -bench Flood -benchtime 1x -timeout 30m ./bench/
	$(GO) test -run '^$$' -bench HostTurnOverhead -benchtime 120x -timeout 30m ./bench/
	$(GO) test -run '^$$' -bench HostScale -benchtime 1x -timeout 30m ./bench/
	$(GO) test -run '^$$' -bench HostLoss -benchtime 5x -timeout 30m ./bench/
	INTEROP_FIGURES=1 $(GO) test -count=1 -v -run TestFigures_ClaudeWarmFirstChunk ./interop/ | grep -E 'first chunk|^(--- |ok|FAIL)'
	$(GO) test -count=1 -run 'TestLeak_|TestStore_SizeBounded' -v ./adapter/ ./store/ | grep -E 'abandoned turns|file size'

# Each fuzz target for FUZZTIME (a duration, or a count such as 1000000x).
# A failing input is written under the package's testdata/fuzz; committed,
# it runs with the ordinary tests from then on.
FUZZTIME ?= 60s
FUZZ_TARGETS := ./acp/:FuzzConn_AgentOutput ./chat/discord/:FuzzMessage_BecomesAPrompt \
	./chat/discord/:FuzzInteraction_IsAnsweredOrRefused ./config/:FuzzLoadConfig ./config/:FuzzParse \
	./api/:FuzzStartRequest ./netproxy/:FuzzProxy_RefusesAnyRequestForAnInnerAddress

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -parallel 2 $$pkg || exit 1; \
	done

# Agents run in a bubblewrap sandbox by default; on a machine without it
# the demo still runs, unconfined, and says so. Run as root, the broker
# runs its agents as acp-agent (agent.run_as_user), a system user of
# their own, made when missing: never as root, nor as nobody, whom other
# services share (check-config warns of it, and make run falls back to it
# only where no user can be made). The HTTP API is served on loopback
# (RUN_API_LISTEN) with a token made for the run, given to the broker in
# BROKER_API_TOKEN, printed with a curl example and kept in
# state/api-token (state.dir, which agents are never shown) for scripts.
# The web front end is served on loopback too (RUN_WEB_LISTEN), its
# address printed.
RUN_API_LISTEN ?= 127.0.0.1:9480
RUN_WEB_LISTEN ?= 127.0.0.1:9490
RUN_AGENT_USER ?= acp-agent
run: build sandbox-deps
	@token=$$(openssl rand -hex 24 2>/dev/null || od -An -N24 -tx1 /dev/urandom | tr -d ' \n'); \
	if [ $${#token} -lt 32 ]; then echo "could not make a token for the API"; exit 1; fi; \
	mkdir -p state && (umask 077 && printf '%s\n' "$$token" > state/api-token); \
	export BROKER_API_TOKEN=$$token BROKER_API_LISTEN=$(RUN_API_LISTEN) BROKER_WEB_LISTEN=$(RUN_WEB_LISTEN); \
	echo "The web front end is at http://$(RUN_WEB_LISTEN)/ (sign in with /web in the chat)."; \
	echo "The HTTP API listens on $(RUN_API_LISTEN), with a token made for this run (also in state/api-token):"; \
	echo "  T=$$token"; \
	echo "  curl -s http://$(RUN_API_LISTEN)/v1/prompts -H \"Authorization: Bearer \$$T\" -d '{\"text\": \"hello from curl\"}'"; \
	if command -v bwrap >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			if ! id -u $(RUN_AGENT_USER) >/dev/null 2>&1 && command -v useradd >/dev/null 2>&1 && \
				useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin $(RUN_AGENT_USER); then \
				echo "made the system user $(RUN_AGENT_USER), whom the demo agent runs as"; \
			fi; \
			if id -u $(RUN_AGENT_USER) >/dev/null 2>&1; then \
				export BROKER_AGENT_RUN_AS_USER=$(RUN_AGENT_USER); \
			else \
				echo "no user $(RUN_AGENT_USER) could be made: the demo agent runs as nobody"; \
				export BROKER_AGENT_RUN_AS_USER=nobody; \
			fi; \
		fi; \
		$(BIN)/broker --config config.example.toml; \
	else \
		echo "bubblewrap is not installed: the demo agent runs WITHOUT a sandbox."; \
		echo "Install it (apt-get install bubblewrap) to run agents sandboxed, as agent.sandbox = \"bwrap\" asks."; \
		BROKER_AGENT_SANDBOX=none $(BIN)/broker --config config.example.toml; \
	fi

$(STATICCHECK):
	GOBIN=$(abspath $(BIN)) $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: $(STATICCHECK)
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(STATICCHECK) ./...

clean:
	rm -rf $(BIN)

# The chaos soak (see BENCHMARKS.md): a real broker against the fake
# Discord with faults, misbehaving agents, impatient users and SIGKILLs.
# SOAK_DURATION sets the length of the load (10m); the other SOAK_*
# knobs are read by soak/soak_test.go.
SOAK_DURATION ?= 10m
soak: sandbox-deps
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -v -run '^TestSoak$$' -timeout 0 ./soak/
