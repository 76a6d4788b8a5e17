# Two commands do all set-up: `make demo` and `make test`.
# Each creates the virtual environment when it is missing and installs the project into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Runs (or, when it is already stored, resumes) the quickstart study, then prints its report.
demo: $(STAMP)
	$(VENV)/bin/robust-tune run studies/quickstart.toml
	$(VENV)/bin/robust-tune report quickstart --trials

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(VENV)/bin/robust-tune bench

clean:
	rm -rf $(VENV) runs .pytest_cache
