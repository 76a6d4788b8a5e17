# Two commands do all set-up: `make demo` and `make test`.
# Each creates the virtual environment when it is missing and installs the project into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

# The stamp is written last, so an interrupted install runs again; a venv left without a working pip
# (an install interrupted while the venv was being made) is made again from scratch.
$(STAMP): pyproject.toml
	@echo "set-up: the virtual environment in $(VENV) (a few minutes the first time, seconds after)"
	$(PY) -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	@echo "set-up: torch and torchvision (the largest step)"
	$(PY) -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	@echo "set-up: robust-tune and its test extra (Ax, BoTorch, Dask, ...)"
	$(PY) -m pip install --quiet -e '.[test]'
# torchattacks only for the test that checks the tool's attacks against it, bit for bit; without its
# dependencies: it pins requests~=2.25.1 (published advisories), and its attacks need only torch
	$(PY) -m pip install --quiet --no-deps torchattacks==3.5.1
# a venv made by 0.11.0 or earlier has autorank and baycomp, whose top-level package `tests` shadows the suite's
	$(PY) -m pip uninstall --quiet --yes autorank baycomp 2>/dev/null || true
	touch $(STAMP)
	@echo "set-up: done"

# Runs (or, when it is already stored, resumes) the quickstart study, prints its report, draws its pictures
# and one HTML page; then the fair comparison: hws against ERM, each tuned with the same budget, re-trained on
# the same (seed, split) pairs, and the verdict (studies/demo-campaign.toml).
demo: $(STAMP)
	$(VENV)/bin/robust-tune run studies/quickstart.toml
	$(VENV)/bin/robust-tune report quickstart --all-trials
	$(VENV)/bin/robust-tune report quickstart --plots runs/pictures --format html --out runs/quickstart.html --force
	@echo "Pictures of the quickstart: runs/pictures/quickstart-*.png; all of it on one page: runs/quickstart.html"
	@echo "The quickstart tuned hws alone. Is it better than plain training? Only against an ERM tuned as carefully:"
	$(VENV)/bin/robust-tune compare studies/demo-campaign.toml
	@echo "Above: hws and ERM, each tuned once with 8 trials, re-trained on 5-10 (seed, split) pairs: the verdict"
	@echo "is about these two configurations. Another search finds others; a campaign's default design repeats"
	@echo "each search to count that (studies/digits-campaign.toml)."

# ruff and mypy first (pyproject.toml says what each checks), then two test processes (pytest-xdist), each test module kept in one of them so its fixtures are built once;
# one thread each, so the two do not fight over the cores.
test: $(STAMP)
	$(VENV)/bin/ruff check pipeline cli tests tools
	$(VENV)/bin/mypy
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadscope

bench: $(STAMP)
	$(VENV)/bin/robust-tune bench steps

clean:
	rm -rf $(VENV) runs .pytest_cache
