# tracekit: `make demo` and `make test` work on a fresh machine with Python 3.11+ and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
EXTRAS := dev,notebooks,distributed
# CPU build of PyTorch for the validator tests; installs from a local wheel where one is offered.
TORCH  := torch==2.13.0
DEMO   := build/demo

.PHONY: help venv demo test bench bench-scale lint report baseline clean

help:
	@echo "make demo    set up and analyse the embedded sample job"
	@echo "make test    set up and run the test suite"
	@echo "make bench   run the speed and memory benchmarks"
	@echo "make bench-scale  ingest + analysis with no cluster, local:1 and local:2 (Dask)"
	@echo "make lint    ruff check"
	@echo "make report  write reports for the committed corpus under reports/"
	@echo "make baseline  re-measure the CI accuracy baseline (commit it with the change that moved it)"
	@echo "make clean   remove build outputs (keeps .venv)"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	-$(BIN)/python -m pip install --quiet '$(TORCH)'
	@touch $(STAMP)

venv: $(STAMP)

demo: venv
	rm -rf $(DEMO)
	$(BIN)/tracekit analyze datasets/sample -o $(DEMO)

test: venv
	$(BIN)/python -m pytest

bench: venv
	$(BIN)/python -m benchmarks

bench-scale: venv
	$(BIN)/python -m benchmarks scale

lint: venv
	$(BIN)/ruff check tracekit tests benchmarks

report: venv
	$(BIN)/tracekit report datasets/corpus -o reports/corpus

baseline: venv
	$(BIN)/tracekit eval datasets/corpus --update-baseline datasets/baselines/accuracy.json

clean:
	rm -rf build .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -prune -exec rm -rf {} +
