# Local targets run the experiment in .venv on CPU ranks (or GPUs when enough are visible).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell sha256sum requirements.lock | cut -c1-12)
NOW    := $(shell date +%Y-%m-%d_%H-%M-%S)

.DEFAULT_GOAL := help
.PHONY: help install lock run test clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

install: $(STAMP) ## make .venv with the pinned dependencies of requirements.lock

$(STAMP): requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	rm -f $(VENV)/.installed-* && touch $@

lock: ## re-resolve requirements.in into requirements.lock in a scratch venv
	rm -rf /tmp/race-lab-lock && $(PYTHON) -m venv /tmp/race-lab-lock
	/tmp/race-lab-lock/bin/pip install --quiet -r requirements.in
	{ sed -n 1,2p requirements.lock; /tmp/race-lab-lock/bin/pip freeze; } > requirements.lock.new
	mv requirements.lock.new requirements.lock

run: install ## the seed scenario with both callback variants; prints their verdicts side by side
	$(PY) -m train callback=unsynced hydra.run.dir=runs/seed/$(NOW)/unsynced
	$(PY) -m train callback=barrier hydra.run.dir=runs/seed/$(NOW)/barrier
	$(PY) -m train.report --compare runs/seed/$(NOW)/unsynced runs/seed/$(NOW)/barrier

test: install ## run the test suite (real multi-rank gloo jobs; a few minutes)
	$(PY) -m pytest -q tests

clean: ## remove runs/ (results) and caches; keeps .venv
	rm -rf runs .pytest_cache
