# The README's two commands are `make run` and `make test`; both build the
# virtual environment on first use and are safe to run again.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: setup run test check format bench clean

$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt torch==2.13.0
	$(PIP) install --quiet -c constraints.txt -e ".[dev,export]"
	touch $(STAMP)

setup: $(STAMP)

# The main job: train German->English on the bundled Multi30k (configs/quick.yaml,
# a fixed 1,375 steps: 4-9 minutes on 2 idle CPU cores), print test BLEU,
# translate three test sentences and draw their attention heatmaps. Re-running
# reuses the finished run in runs/quick (--resume); delete runs/quick to retrain.
run: $(STAMP)
	$(VENV)/bin/attnkit train configs/quick.yaml --out runs/quick --resume
	$(VENV)/bin/attnkit evaluate runs/quick --split test
	$(VENV)/bin/attnkit translate runs/quick \
		"Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt." \
		"Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun." \
		"Ein Mädchen in einem Karateanzug bricht ein Brett mit einem Tritt." \
		--show-attention --plot runs/quick/heatmaps

# two pytest workers of one thread each (tests/conftest.py): the suite takes about
# 9 minutes on 2 cores instead of 13; TEST_WORKERS=0 runs it in one process
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS)

check: $(STAMP)
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/ruff check src tests benchmarks

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

bench: $(STAMP)
	$(VENV)/bin/attnkit bench --quick

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
