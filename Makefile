# kimi-k3: every target bootstraps its own .venv from pyproject.toml (pinned), so a clean clone just works.
# `make help` lists the targets.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= gb300-disagg
STACKS := gb200 gb200-disagg gb300 gb300-disagg
# STACK reaches shell commands: it must name one stack file here (no spaces, quotes or ';'), checked before any
# target runs, and is quoted where it is used.
# $(value STACK): unexpanded, so a `STACK=$$(shell ...)` given on the command line is refused, never run.
KNOWN_STACKS := $(sort $(patsubst Pulumi.%.yaml,%,$(wildcard Pulumi.*.yaml)))
ifneq ($(words $(value STACK)) $(filter $(value STACK),$(KNOWN_STACKS)),1 $(value STACK))
$(error STACK=$(value STACK) is not a stack of this project; allowed: $(KNOWN_STACKS))
endif
# A local file backend by default: no Pulumi Cloud account needed. Override to use another backend.
PULUMI_BACKEND_URL ?= file://$(CURDIR)/.pulumi-state
export PULUMI_BACKEND_URL
# Per-user values (token, reservation, CIDRs, secrets salt) live here, never in the tracked Pulumi.<stack>.yaml.
USER_CONFIG = .pulumi-user/Pulumi.$(STACK).yaml
# STACK is a stack file's name (checked above), so it needs no quoting here.
PULUMI_ARGS = --stack $(STACK) --config-file $(USER_CONFIG)
MIN_PYTHON := 3.11

.PHONY: venv lint test test-slow test-perf perf-venv pareto guard render check plan bench pulumi-cli stack token preview up park unpark clean rehearse rehearse-venv test-rehearse help python-version diff user-config engine-tools test-engine test-faults

help:  ## list the targets
	@echo "make TARGET [STACK=gb300-disagg]    (stacks: $(STACKS))"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/\1|\2/' | awk -F'|' '{printf "  %-14s %s\n", $$1, $$2}'
	@echo "After make, the CLI is .venv/bin/kimi-k3 (or: . .venv/bin/activate, then kimi-k3 --help)."

python-version:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < tuple(map(int, "$(MIN_PYTHON)".split("."))))' 2>/dev/null || { \
	  echo "kimi-k3 needs Python >= $(MIN_PYTHON); '$(PYTHON)' is $$($(PYTHON) --version 2>&1 || echo missing)."; \
	  echo "Install Python $(MIN_PYTHON)+ and run: make PYTHON=python3.11 (or python3.12, python3.13)"; exit 1; }

# The venv is built from scratch (a half-built or stale one is removed first) and removed again if pip fails.
$(BIN)/kimi-k3: pyproject.toml constraints.txt
	@$(MAKE) --no-print-directory python-version
	@echo "Building $(VENV) with $$($(PYTHON) --version) (pinned packages, ~750 MB; about 2 minutes the first time)..."
	@rm -rf $(VENV)
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --disable-pip-version-check --progress-bar off -c constraints.txt -e '.[dev]' \
	  | grep --line-buffered -E '^(Collecting|Successfully installed)'; \
	  $(BIN)/python -c 'import kimi_k3.commands.main' 2>/dev/null || { rm -rf $(VENV); \
	  echo "pip failed; $(VENV) removed. Run make again (or make PYTHON=python3.X with another Python $(MIN_PYTHON)+)."; exit 1; }
	@touch $@
	@echo "Done: $(BIN)/kimi-k3 --version -> $$($(BIN)/kimi-k3 --version)"

venv:  ## build .venv (pinned); rebuilt when broken or when pyproject.toml/constraints.txt change
	@test ! -e $(BIN)/kimi-k3 || $(BIN)/python -c 'import kimi_k3.commands.main' 2>/dev/null || { \
	  echo "$(VENV) is broken (its Python or packages are gone); rebuilding it."; rm -rf $(VENV); }
	@$(MAKE) --no-print-directory $(BIN)/kimi-k3

# The rehearsal's own venv (Dynamo runtime/frontend/mocker + AIPerf): its pins conflict with the Pulumi side's.
REHEARSE_VENV := .venv-rehearse
# As .venv's: pip's output filtered to one line per package (its whole log kept in $(REHEARSE_VENV)/pip.log), the
# venv removed again if pip fails. --no-deps for ai-dynamo: it declares aisimulate, a PyPI stub that downloads from
# outside PyPI (see requirements-rehearse.txt).
$(REHEARSE_VENV)/bin/aiperf: requirements-rehearse.txt constraints-rehearse.txt
	@echo "Building $(REHEARSE_VENV): Dynamo 1.6.1 (frontend, KV router, mocker) and AIPerf 0.13.0 from PyPI (pinned, ~1.5 GB; about 5 minutes the first time on 2 idle cores, longer when they are busy)..."
	@rm -rf $(REHEARSE_VENV) $(REHEARSE_VENV).pip.log
	@$(PYTHON) -m venv $(REHEARSE_VENV)
	@{ $(REHEARSE_VENV)/bin/pip install --disable-pip-version-check --progress-bar off -c constraints-rehearse.txt -r requirements-rehearse.txt \
	  && $(REHEARSE_VENV)/bin/pip install --disable-pip-version-check --progress-bar off --no-deps -c constraints-rehearse.txt ai-dynamo==1.6.1; } 2>&1 \
	  | tee $(REHEARSE_VENV).pip.log | grep --line-buffered -E '^(Collecting|Successfully installed|ERROR)'; \
	  $(REHEARSE_VENV)/bin/python -c 'import importlib.metadata as m; m.version("ai-dynamo"); m.version("aiperf")' 2>/dev/null || { \
	  echo "pip failed (its log: $(REHEARSE_VENV).pip.log); $(REHEARSE_VENV) removed. Run make rehearse-venv again."; rm -rf $(REHEARSE_VENV); exit 1; }
	@mv $(REHEARSE_VENV).pip.log $(REHEARSE_VENV)/pip.log
	@touch $@
	@echo "Done: $(REHEARSE_VENV), $$(du -sh $(REHEARSE_VENV) | cut -f1)"

rehearse-venv: $(REHEARSE_VENV)/bin/aiperf  ## the rehearsal's own venv (Dynamo + AIPerf from PyPI, ~1.5 GB)

# The same paths tools/relayout/relayout.py formats once; the contract is pyproject.toml's [tool.importlinter].
LINT_PATHS := __main__.py kimi_k3 components policies tests tests_aiconfigurator tools bench
lint: venv  ## ruff format --check, ruff check and the import contract (layers; pods/ imports only the stdlib)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/lint-imports

test: venv  ## the test suite within its budget (what CI runs first: .ci/run)
	# PYTHONDONTWRITEBYTECODE= : keep compiled and assertion-rewritten modules (a warm second run: 92.6 s -> 76.3 s)
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n auto --dist loadfile   # one worker per core; a test file stays on one worker

test-slow: venv  ## lanes beyond the make test budget: day-two changes, the Makefile and README commands as written
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -m slow -n auto --dist loadfile   # the same two workers as make test

# The aiconfigurator lane: installs the `perf` extra (large: pandas, pyarrow, scipy) into .venv and checks that the
# committed table recipes/facts/perf-raw.yaml still equals what aiconfigurator computes (.ci/run runs it after `make test`).
$(VENV)/.perf-installed: $(BIN)/kimi-k3
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,perf]'
	touch $@

perf-venv: $(VENV)/.perf-installed  ## install the perf extra (aiconfigurator; large) into .venv

test-perf: perf-venv  ## the aiconfigurator lane (installs the large perf extra into .venv)
	$(BIN)/pytest tests_aiconfigurator

pareto: venv  ## Pareto plots of every stack in build/
	mkdir -p build
	for s in $(STACKS); do $(BIN)/kimi-k3 plan $$s --pareto build/pareto-$$s.png >/dev/null || exit 1; done
	@echo "Pareto plots: $(foreach s,$(STACKS),build/pareto-$(s).png)"

render: venv  ## write build/STACK/ (manifests.yaml, resources.json) and print the critical path
	$(BIN)/kimi-k3 render '$(STACK)'

check: venv  ## the policy rules on every stack
	$(BIN)/kimi-k3 check $(STACKS)

plan: venv  ## memory, KV capacity, cold start and cost of STACK
	$(BIN)/kimi-k3 plan '$(STACK)'

# The stack's serving graph on this machine: real Dynamo frontend + KV router, mocker engines, AIPerf; no cloud.
# TRACE=FILE replays a mooncake_trace file instead of the built-in runs (docs/traces.md); its path is quoted, and a
# quote in it is refused (it reaches a shell command).
rehearse: venv rehearse-venv  ## STACK's serving graph on loopback: Dynamo frontend + mockers + AIPerf (TRACE=FILE: replay it)
	$(if $(findstring ',$(value TRACE)),$(error TRACE=$(value TRACE): a path with a quote; allowed: a file path without '))
	$(BIN)/kimi-k3 rehearse '$(STACK)' $(if $(value TRACE),--trace '$(value TRACE)') $(REHEARSE_ARGS)

# Real processes (frontend, mockers, AIPerf) for every stack, and the cleanup on success, failure and interrupt.
test-rehearse: venv rehearse-venv  ## real rehearsal processes (frontend, mockers, AIPerf) for every stack, and their cleanup
	$(BIN)/pytest -m rehearse   # every test marked rehearse, wherever it lives (never a hand list of files)

diff: venv  ## what the working tree changes in every stack vs main (resources, GPUs, cost, policy)
	$(BIN)/kimi-k3 diff

bench: venv rehearse-venv  ## benchmarks with their budgets (bench/)
	for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

pulumi-cli:  ## check the Pulumi CLI is on PATH; if not, print how to install it
	@command -v pulumi >/dev/null || { echo "The Pulumi CLI is not installed. Install it (https://www.pulumi.com/docs/iac/download-install/):"; \
	  echo "  curl -fsSL https://get.pulumi.com | sh      # or: brew install pulumi/tap/pulumi"; \
	  echo "Offline, without the CLI: make render STACK=$(STACK)"; exit 1; }

user-config: venv
	@$(BIN)/python -m kimi_k3.config.user_values '$(STACK)' >/dev/null

stack: venv pulumi-cli  ## create STACK in the backend (if new) and its per-user config .pulumi-user/Pulumi.STACK.yaml
	@mkdir -p .pulumi-state
	pulumi stack select --create '$(STACK)'
	@$(BIN)/python -m kimi_k3.config.user_values '$(STACK)' >/dev/null

token: stack
	@pulumi config get kimi-k3:hfToken $(PULUMI_ARGS) >/dev/null 2>&1 || { \
	  echo "Set your per-user values first (with this backend: export PULUMI_BACKEND_URL=$(PULUMI_BACKEND_URL)):"; \
	  echo "  pulumi config set --secret kimi-k3:hfToken $(PULUMI_ARGS)        # prompts for the token"; \
	  echo "  pulumi config set --path kimi-k3:cluster.gpuNodes.capacityReservationId cr-... $(PULUMI_ARGS)"; \
	  echo "  pulumi config set --path 'kimi-k3:cluster.publicAccessCidrs[0]' YOUR.IP.ADDR.ESS/32 $(PULUMI_ARGS)"; exit 1; }

preview: token  ## pulumi preview of STACK with the policy pack
	pulumi preview $(PULUMI_ARGS) --policy-pack policies --diff

# Before anything is created: what `up` would do to the deployed graph and cache (kimi-k3 check --against the
# stack's own state; policies/README.md, upgrade rules). A new stack has nothing deployed yet.
guard: stack
	@state=$$(mktemp); trap 'rm -f "$$state"' EXIT; \
	pulumi stack export --stack '$(STACK)' --file "$$state" || exit 1; \
	if grep -q '"urn"' "$$state" 2>/dev/null; then \
	  $(BIN)/kimi-k3 check '$(STACK)' --against "$$state" || { \
	    echo "make up: stopped before changing anything: the change above would replace or delete the graph or the model cache (docs/operating.md)"; exit 1; }; \
	else echo "make up: nothing deployed yet on stack '$(STACK)': no upgrade check"; fi

up: token guard  ## pulumi up of STACK with the policy pack (creates the AWS resources)
	pulumi up $(PULUMI_ARGS) --policy-pack policies

# Teardown that keeps the weights (eks): delete EKS, nodes, NAT, add-ons and the graph; keep the model cache's
# filesystem and its network (docs/aws.md, Teardown). `make unpark` rebuilds everything onto the same weights.
# `parked` is a per-deployment value: it goes into the per-user config, not the shared stack file.
park: token  ## delete everything of STACK but the filesystem with the weights (docs/aws.md, Teardown)
	pulumi config set --path 'kimi-k3:cluster.parked' true $(PULUMI_ARGS)
	pulumi up $(PULUMI_ARGS) --policy-pack policies

unpark: token  ## rebuild STACK onto the kept weights
	pulumi config rm --path 'kimi-k3:cluster.parked' $(PULUMI_ARGS)
	pulumi up $(PULUMI_ARGS) --policy-pack policies

# The engine lane (docs/engine-lane.md): Pulumi CLI + Python host, Kubernetes provider, etcd and kube-apiserver
# built from Go modules (tools/engine/versions.env; cached in build/engine/), then the real preview/up/destroy
# against a local API server in a network namespace with only loopback. A `pulumi` on PATH is used instead of ours.
ENGINE_TOOLS = $(if $(shell command -v pulumi),provider kube etcd monitoring-crds,)
engine-tools:  ## build the engine lane's Go tools (pinned in tools/engine/versions.env) into build/engine/
	tools/engine/build.sh $(ENGINE_TOOLS)

test-engine: venv  ## the real Pulumi engine against a local API server (network namespace, loopback only)
	@bin=$$(tools/engine/build.sh $(ENGINE_TOOLS)) && \
	  ENGINE_BIN=$$bin unshare --net -- sh -c 'ip link set lo up && exec $(BIN)/pytest -p no:cacheprovider -q -rs -s tools/engine/test_engine_lane.py'

# The fault lane (docs/faults.md): interrupted up, API server restart, drift, two operators, teardown and return,
# the cache across moves, bad state; same tools and network namespace as test-engine, its own API server.
test-faults: venv  ## faults under the real engine and API server; prints faults tried, survived, data lost
	@bin=$$(tools/engine/build.sh $(ENGINE_TOOLS)) && \
	  ENGINE_BIN=$$bin unshare --net -- sh -c 'ip link set lo up && exec $(BIN)/pytest -p no:cacheprovider -q -rs -s tools/engine/test_fault_lane.py'

clean:  ## remove build output and .venv (the next make rebuilds it); keeps .pulumi-state and .pulumi-user
	rm -rf build rendered .pytest_cache $(VENV)
