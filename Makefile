# The kit's commands. Everything runs inside .venv, made once from any Python >= 3.11.
#   make lab    open the course in JupyterLab        make test   run every test
#   make bench  run the speed comparisons             make lint   ruff + mypy
#   make figures  draw the figures of docs/lecturers.md again (docs/figures/)
# Grading (docs/instructors/): make release (also to the nbgrader exchange), collect
#   (the exchange, or ZIP=... an LMS download), autograde, feedback, grades, restore
#   (copies of the gradebook and of folders); make student-kit: what students get;
#   make hub: a JupyterHub for the class on this machine (as root)

VENV := .venv
BIN := $(VENV)/bin
# The first Python >= 3.11 on PATH (override with: make test PYTHON=/path/to/python3.12).
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	2>/dev/null && { echo $$p; break; }; done)

.PHONY: hub lab test bench bench-gpu figures lint format clean release collect autograde autograde-container validate feedback grades restore student-kit

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "error: the kit needs Python 3.11 or newer on PATH" \
		"(or PYTHON=/path/to/python3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# One stamp per extra: installed once, again only when pyproject.toml changes.
$(VENV)/.installed-%: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[$*]"
	@touch $@

# Jupyter refuses to start as root (containers, CI) unless told it is deliberate.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

# The venv's bin first on PATH: the formgrader runs `alembic` from it to set up the gradebook.
# LAB_ARGS passes options to JupyterLab (a test: LAB_ARGS="--no-browser --port=8890").
# deploy/instructor: the Formgrader's pages run no script a student wrote.
lab: $(VENV)/.installed-course
	PATH="$(CURDIR)/$(BIN):$$PATH" \
		JUPYTER_CONFIG_PATH="$(CURDIR)/deploy/instructor$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(BIN)/jupyter lab $(ALLOW_ROOT) $(LAB_ARGS)

# Everything, then the GPU tests again on a CuPy double (tests/shared/fakecupy.py), so that the
# GPU code paths run even where there is no GPU.
test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest
	AUTODIFF_FAKE_GPU=1 $(BIN)/python -m pytest -m gpu -q

# --- grading with nbgrader (nbgrader_config.py; classroom/) ---
GRADE := $(BIN)/python -m classroom

release: $(VENV)/.installed-course
	$(GRADE) release

# make collect [ASSIGNMENT=name]: the latest submissions in the nbgrader exchange;
# make collect ZIP=download.zip [ASSIGNMENT=name]: an LMS download.
collect: $(VENV)/.installed-course
	$(GRADE) collect $(if $(ZIP),"$(ZIP)") $(ASSIGNMENT)

# Each submission runs in a bubblewrap sandbox, JOBS at a time (SANDBOX=none: no sandbox).
autograde: $(VENV)/.installed-course
	$(GRADE) autograde $(ASSIGNMENT) $(if $(STUDENT),--student "$(STUDENT)") $(if $(FORCE),--force) \
		--jobs $(or $(JOBS),1) --sandbox $(or $(SANDBOX),auto) $(if $(WAIT),--wait)

# Where there is no bubblewrap (macOS): the same grading in a Linux container with
# bubblewrap (deploy/grading.Dockerfile), by Podman or Docker. User namespaces must be
# allowed in it, hence the security options; student code still runs in bubblewrap.
ENGINE ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null)
CONTAINER_RUN = $(ENGINE) run --rm --user "$$(id -u):$$(id -g)" -e HOME=/tmp \
	--security-opt seccomp=unconfined --security-opt apparmor=unconfined \
	--security-opt systempaths=unconfined -v "$(CURDIR)":/course autodiff-grading

autograde-container:
	@test -n "$(ENGINE)" || { echo "error: needs podman or docker (or bubblewrap: make autograde)"; exit 2; }
	$(ENGINE) build -t autodiff-grading -f deploy/grading.Dockerfile .
	$(CONTAINER_RUN) autograde $(ASSIGNMENT) $(if $(STUDENT),--student "$(STUDENT)") \
		$(if $(FORCE),--force) --jobs $(or $(JOBS),1) $(if $(WAIT),--wait)

# A notebook run as grading runs it (sandbox, limits), with each test's verdict: NB=path
validate: $(VENV)/.installed-course
	@test -n "$(NB)" || { echo "usage: make validate NB=submitted/alice/a1/a1.ipynb"; exit 2; }
	$(GRADE) validate "$(NB)" --sandbox $(or $(SANDBOX),auto)

feedback: $(VENV)/.installed-course
	$(GRADE) feedback $(ASSIGNMENT)

grades: $(VENV)/.installed-course
	$(GRADE) grades

# The gradebook as it was before the last grading run. WHICH=list shows the kept copies,
# WHICH=<name or number> puts back that one, WHICH=submitted|autograded|feedback
# ASSIGNMENT=<name> [STAMP=<stamp>] a folder's copies. What is replaced is kept first.
restore: $(VENV)/.installed-course
	$(GRADE) restore $(WHICH) $(if $(WAIT),--wait) \
		$(if $(filter submitted submissions autograded feedback,$(WHICH)),"$(ASSIGNMENT)" $(STAMP))

# dist/autodiff-student-kit/ and its zip (deploy/student-kit/README.md): lectures, the
# released assignments, the package; no solutions, no hidden tests, no instructor tools.
# It publishes nothing: make release (or the Formgrader's release button) does.
student-kit: $(VENV)/.installed-course
	$(GRADE) kit

# --- a JupyterHub for the class on this machine (docs/instructors/hub.md) ---
# As root: every student's server runs as a system account of its own. HUB_STATE (hub/)
# holds the hub's database and secrets, the proxy, the students' environment, their
# homes and the exchange. ROSTER=file of student ids, INSTRUCTORS=a,b and TAS=c name
# the course team; PORT=8000.
HUB_STATE ?= $(CURDIR)/hub
ROSTER ?= $(HUB_STATE)/roster.txt
STUDENT_VENV := $(HUB_STATE)/venv

$(HUB_STATE)/proxy/node_modules/.bin/configurable-http-proxy:
	@command -v npm >/dev/null 2>&1 || { echo "error: make hub needs npm (Node.js) for" \
		"JupyterHub's proxy: sudo apt install nodejs npm"; exit 2; }
	npm install --silent --no-audit --no-fund --prefix "$(HUB_STATE)/proxy" configurable-http-proxy@5

# The students' environment: the kit (no instructor tooling) and jupyterhub-singleuser,
# on a Python every account can run (not one in root's home, as pyenv puts it).
HUB_PYTHON ?= $(shell for p in /usr/local/bin/python3 /usr/bin/python3 /usr/bin/python3.13 \
	/usr/bin/python3.12 /usr/bin/python3.11; do test -x $$p && runuser -u nobody -- $$p -c \
	'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo $$p; break; }; done)

$(STUDENT_VENV)/.installed: dist/autodiff-student-kit/pyproject.toml pyproject.toml
	@test -n "$(HUB_PYTHON)" || { echo "error: make hub needs a Python >= 3.11 with venv" \
		"that every account can run (Debian: sudo apt install python3 python3-venv)," \
		"or HUB_PYTHON=/path/to/python3"; exit 2; }
	$(HUB_PYTHON) -m venv "$(STUDENT_VENV)"
	"$(STUDENT_VENV)/bin/python" -m pip install --quiet --disable-pip-version-check \
		"./dist/autodiff-student-kit[course]" "jupyterhub>=5.2"
	rm -rf dist/autodiff-student-kit/build dist/autodiff-student-kit/*.egg-info  # pip's, not the kit's
	@touch $@

dist/autodiff-student-kit/pyproject.toml: $(VENV)/.installed-course
	$(GRADE) kit

# The grading account's environment (the Formgrader, grading): the course's packages on
# a Python it can run. It imports autodiff from the course folder (PYTHONPATH), so it
# grades with the course's code as it is now.
GRADING_VENV := $(HUB_STATE)/grading-venv
$(GRADING_VENV)/.installed: pyproject.toml
	@test -n "$(HUB_PYTHON)" || { echo "error: make hub needs a Python >= 3.11 with venv" \
		"that every account can run (Debian: sudo apt install python3 python3-venv)," \
		"or HUB_PYTHON=/path/to/python3"; exit 2; }
	$(HUB_PYTHON) -m venv "$(GRADING_VENV)"
	"$(GRADING_VENV)/bin/python" -m pip install --quiet --disable-pip-version-check ".[hub]"
	@touch $@

hub: $(VENV)/.installed-hub $(HUB_STATE)/proxy/node_modules/.bin/configurable-http-proxy \
		$(STUDENT_VENV)/.installed $(GRADING_VENV)/.installed
	@test "$$(id -u)" = 0 || { echo "error: make hub runs as root: each student's server" \
		"runs as a system account of its own (sudo make hub)"; exit 2; }
	@test -f "$(ROSTER)" || { echo "error: no roster at $(ROSTER): one student id a line" \
		"(ROSTER=path/to/ids.txt)"; exit 2; }
	cd "$(HUB_STATE)" && HUB_STATE="$(HUB_STATE)" HUB_ROSTER="$(abspath $(ROSTER))" \
		HUB_INSTRUCTORS="$(INSTRUCTORS)" HUB_TAS="$(TAS)" HUB_PORT="$(or $(PORT),8000)" \
		HUB_SUBDOMAIN_HOST="$(or $(SUBDOMAIN_HOST),$(HUB_SUBDOMAIN_HOST))" \
		HUB_GRADING_PYTHON="$(GRADING_VENV)/bin/python" \
		PATH="$(CURDIR)/$(BIN):$$PATH" \
		"$(CURDIR)/$(BIN)/jupyterhub" -f "$(CURDIR)/deploy/hub/jupyterhub_config.py"

bench: $(VENV)/.installed-bench
	$(BIN)/python benchmarks/bench_table.py
	$(BIN)/python benchmarks/bench_parallel.py
	$(BIN)/python benchmarks/bench_conv.py
	$(BIN)/python benchmarks/bench_losses.py

# On a machine with an NVIDIA GPU (CUDA 12): CuPy from the gpu extra, PyTorch with CUDA.
bench-gpu: $(VENV)/.installed-bench $(VENV)/.installed-gpu
	$(BIN)/python benchmarks/bench_gpu.py

figures: $(VENV)/.installed-dev
	$(BIN)/python docs/figures.py

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check autodiff classroom tests benchmarks docs
	$(BIN)/ruff format --check autodiff classroom tests benchmarks docs
	$(BIN)/mypy

format: $(VENV)/.installed-dev
	$(BIN)/ruff format autodiff classroom tests benchmarks docs

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache .mypy_cache
