# kimi-k3: every target bootstraps its own .venv from pyproject.toml (pinned), so a clean clone just works.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= gb300-disagg
STACKS := gb200 gb200-disagg gb300 gb300-disagg
# A local file backend by default: no Pulumi Cloud account needed. Override to use another backend.
PULUMI_BACKEND_URL ?= file://$(CURDIR)/.pulumi-state
export PULUMI_BACKEND_URL

.PHONY: venv test test-slow test-perf perf-venv pareto guard render check plan bench pulumi-cli stack token preview up park unpark clean rehearse rehearse-venv test-rehearse

$(BIN)/kimi-k3: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@

venv: $(BIN)/kimi-k3

# The rehearsal's own venv (Dynamo runtime/frontend/mocker + AIPerf): its pins conflict with the Pulumi side's.
REHEARSE_VENV := .venv-rehearse
$(REHEARSE_VENV)/bin/aiperf: requirements-rehearse.txt constraints-rehearse.txt
	@echo "Building $(REHEARSE_VENV): Dynamo 1.6.1 (frontend, KV router, mocker) and AIPerf 0.13.0 from PyPI, ~1.5 GB"
	rm -rf $(REHEARSE_VENV)
	$(PYTHON) -m venv $(REHEARSE_VENV)
	$(REHEARSE_VENV)/bin/pip install --disable-pip-version-check --progress-bar off -c constraints-rehearse.txt -r requirements-rehearse.txt
	@# --no-deps: ai-dynamo declares aisimulate, a PyPI stub that downloads from outside PyPI (see requirements-rehearse.txt)
	$(REHEARSE_VENV)/bin/pip install --disable-pip-version-check --progress-bar off --no-deps -c constraints-rehearse.txt ai-dynamo==1.6.1
	touch $@

rehearse-venv: $(REHEARSE_VENV)/bin/aiperf

test: venv
	$(BIN)/pytest -n auto --dist loadfile   # one worker per core; a test file stays on one worker (its fixtures once)

test-slow: venv
	$(BIN)/pytest -m slow

# The aiconfigurator lane: installs the `perf` extra (large: pandas, pyarrow, scipy) into .venv and checks that the
# committed table recipes/perf-raw.yaml still equals what aiconfigurator computes (.ci/run runs it after `make test`).
$(VENV)/.perf-installed: $(BIN)/kimi-k3
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,perf]'
	touch $@

perf-venv: $(VENV)/.perf-installed

test-perf: perf-venv
	$(BIN)/pytest tests_aiconfigurator

pareto: venv
	mkdir -p build
	for s in $(STACKS); do $(BIN)/kimi-k3 plan $$s --pareto build/pareto-$$s.png >/dev/null || exit 1; done

render: venv
	$(BIN)/kimi-k3 render $(STACK)

check: venv
	$(BIN)/kimi-k3 check $(STACKS)

plan: venv
	$(BIN)/kimi-k3 plan $(STACK)

# The stack's serving graph on this machine: real Dynamo frontend + KV router, mocker engines, AIPerf; no cloud.
rehearse: venv rehearse-venv
	$(BIN)/kimi-k3 rehearse $(STACK) $(REHEARSE_ARGS)

# Real processes (frontend, mockers, AIPerf) for every stack, and the cleanup on success, failure and interrupt.
test-rehearse: venv rehearse-venv
	$(BIN)/pytest -m rehearse tests/test_rehearse_live.py

bench: venv rehearse-venv
	for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

pulumi-cli:
	@command -v pulumi >/dev/null || { echo "The Pulumi CLI is not installed. Install it (https://www.pulumi.com/docs/iac/download-install/):"; \
	  echo "  curl -fsSL https://get.pulumi.com | sh      # or: brew install pulumi/tap/pulumi"; \
	  echo "Offline, without the CLI: make render STACK=$(STACK)"; exit 1; }

stack: venv pulumi-cli
	@mkdir -p .pulumi-state
	pulumi stack select --create $(STACK)

token: stack
	@pulumi config get kimi-k3:hfToken --stack $(STACK) >/dev/null 2>&1 || { \
	  echo "Set your Hugging Face token first (with this backend: export PULUMI_BACKEND_URL=$(PULUMI_BACKEND_URL)):"; \
	  echo "  pulumi config set --secret kimi-k3:hfToken hf_... --stack $(STACK)"; exit 1; }

preview: token
	pulumi preview --stack $(STACK) --policy-pack policies --diff

# Before anything is created: what `up` would do to the deployed graph and cache (kimi-k3 check --against the
# stack's own state; policies/README.md, upgrade rules). A new stack has nothing deployed yet.
guard: stack
	@state=$$(mktemp); trap 'rm -f "$$state"' EXIT; \
	pulumi stack export --stack $(STACK) --file "$$state" || exit 1; \
	if grep -q '"urn"' "$$state" 2>/dev/null; then \
	  $(BIN)/kimi-k3 check $(STACK) --against "$$state" || { \
	    echo "make up: stopped before changing anything: the change above would replace or delete the graph or the model cache (docs/operating.md)"; exit 1; }; \
	else echo "make up: nothing deployed yet on stack $(STACK): no upgrade check"; fi

up: token guard
	pulumi up --stack $(STACK) --policy-pack policies

# Teardown that keeps the weights (eks): delete EKS, nodes, NAT, add-ons and the graph; keep the model cache's
# filesystem and its network (docs/aws.md, Teardown). `make unpark` rebuilds everything onto the same weights.
park: token
	pulumi config set --path 'kimi-k3:cluster.parked' true --stack $(STACK)
	pulumi up --stack $(STACK) --policy-pack policies

unpark: token
	pulumi config rm --path 'kimi-k3:cluster.parked' --stack $(STACK)
	pulumi up --stack $(STACK) --policy-pack policies

clean:
	rm -rf build rendered .pytest_cache
