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
	$(PY) -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Runs (or, when it is already stored, resumes) the quickstart study, prints its report, draws its
# pictures and one HTML page, then trains plain ERM at the study's fixed settings so the rare digit
# can be compared class by class.
demo: $(STAMP)
	$(VENV)/bin/robust-tune run studies/quickstart.toml
	$(VENV)/bin/robust-tune report quickstart --trials
	$(VENV)/bin/robust-tune report quickstart --plots runs/pictures --format html --out runs/quickstart.html --force
	@echo "Pictures of the quickstart: runs/pictures/quickstart-*.png; all of it on one page: runs/quickstart.html"
	@echo "ERM (plain training) at the quickstart's fixed settings; compare class 3 with the worst class above:"
	$(VENV)/bin/robust-tune train --method erm -p epochs=20 -p lr_head=0.05 -p lr_backbone=0.05 -p momentum=0 \
		--imbalance-class 3 --imbalance-keep 0.05 --imbalance-in train

# Two test processes (pytest-xdist), each test module kept in one of them so its fixtures are built once;
# one thread each, so the two do not fight over the cores.
test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadscope

bench: $(STAMP)
	$(VENV)/bin/robust-tune bench

clean:
	rm -rf $(VENV) runs .pytest_cache
