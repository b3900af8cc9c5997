#!/usr/bin/env bash
# The whole course test suite on a CUDA machine, in one command, at the repository root:
#
#   bash tools/gpu_suite.sh                # the CUDA machine: wheels from .whl/, GM_DEVICE=cuda
#   bash tools/gpu_suite.sh --cpu-dry-run  # anywhere: no install, no CUDA, a small subset on cpu
#
# The CUDA machine has Python 3.12 and its own torch with CUDA, but no network and no Jupyter:
# first fetch the wheels elsewhere (python3 tools/fetch_gpu_wheels.py, into .whl/) and bring
# .whl/ along. This installs them into $GM_SITE (not into the machine's environment), checks
# that torch is still the machine's own CUDA build, registers a python3 kernelspec for that
# python, then runs pytest over tests/ and notebooks/ (nbval) with GM_DEVICE=cuda, a per-test
# timeout and a deadline, and reports every failed test and nbval cell. The log, the junit XML
# and the lists of failures go to $OUT when it is set, else to build/gpu-run/.
# Exit status: 0 only when everything that ran passed and nothing was left out by the deadline.
#
# Settings (environment): GM_SUITE_TESTS="notebooks/03_gradient_accumulation.ipynb tests/..."
# runs only those paths (a rerun of what failed); GM_SUITE_DEVICE=cpu runs the GPU mode without
# CUDA (to try the wheel install on a Python 3.12 without a GPU); GM_SUITE_DEADLINE and
# GM_TEST_TIMEOUT (seconds); GM_PYTHON (default python3); GM_SITE, GM_KERNEL_PREFIX (in /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# Test files that need what the CUDA machine has not (the rest of tests/ and every notebook run).
SKIP_FILES=(
    tests/tools/test_browser.py # JupyterLab in Chromium through Selenium and chromedriver
    tests/tools/test_colab.py   # ipywidgets 7 in build/ipywidgets7, the course as a git clone
    tests/at_scale/test_frameworks_real.py # real Lightning, Accelerate and Transformers runs, on the CPU
    tests/loop_auditor/test_audit_real_code.py # a real Accelerator and Lightning Trainer, on the CPU
    tests/tools/test_site.py    # the site bundles KaTeX and lunr.js, fetched with npm
    tests/tools/test_site_browser.py # the site in Chromium through Selenium
    tests/tools/test_workshop.py # the instructor's copy: a fresh venv from PyPI, setuptools
    tests/tools/test_simulate_binder.py # tools/simulate_binder.py, which builds Binder's venv from PyPI
    tests/loop_auditor/test_distribution.py # python -m build, setuptools and a fresh venv from PyPI
)
# The --cpu-dry-run subset: this command's own tests, the GPU tests (skipped without CUDA),
# a unit test file and one notebook through nbval.
DRY_RUN_TESTS=(
    tests/tools/test_gpu_suite.py
    tests/course/test_gpu_paths.py
    tests/core/test_device.py
    notebooks/00_setup_check.ipynb
)
WHEEL_DIR=.whl
TARGET_PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64
    manylinux2014_x86_64 manylinux1_x86_64 any)

MODE=gpu
case "${1:-}" in
"") ;;
--cpu-dry-run) MODE=dry ;;
*)
    echo "usage: bash tools/gpu_suite.sh [--cpu-dry-run]" >&2
    exit 2
    ;;
esac

# Time: the device command may run 600 s. No test starts after DEADLINE s of pytest, a test
# may run TEST_TIMEOUT s, and pytest is stopped (junit XML still written) at HARD_STOP s;
# with the install and checks before it (about 30 s) the worst case stays near 540 s.
DEADLINE=${GM_SUITE_DEADLINE:-360}
TEST_TIMEOUT=${GM_TEST_TIMEOUT:-120}
HARD_STOP=$((DEADLINE + TEST_TIMEOUT + 10))

if [[ $MODE == gpu ]]; then
    PY=${GM_PYTHON:-python3}
    SITE=${GM_SITE:-/tmp/gm-site}
    DEVICE=${GM_SUITE_DEVICE:-cuda}
    REQUIRE_CUDA=(--require-cuda)
    if [[ $DEVICE == cpu ]]; then REQUIRE_CUDA=(); fi
    TESTS=(tests notebooks)
else
    PY=${GM_PYTHON:-python3}
    if [[ -x .venv/bin/python && -z ${GM_PYTHON:-} ]]; then PY=.venv/bin/python; fi
    SITE=${GM_SITE:-/tmp/gm-site-dry-run}
    DEVICE=cpu
    REQUIRE_CUDA=()
    TESTS=("${DRY_RUN_TESTS[@]}")
fi
if [[ $DEVICE != cuda && $DEVICE != cpu ]]; then
    echo "GM_SUITE_DEVICE must be cuda or cpu, not $DEVICE" >&2
    exit 2
fi
if [[ -n ${GM_SUITE_TESTS:-} ]]; then read -ra TESTS <<<"$GM_SUITE_TESTS"; fi
KERNEL_PREFIX=${GM_KERNEL_PREFIX:-/tmp/gm-kernel}
for scratch in "$SITE" "$KERNEL_PREFIX"; do # both are emptied first
    if [[ $scratch != /tmp/?* ]]; then
        echo "GM_SITE and GM_KERNEL_PREFIX must be folders under /tmp, not $scratch" >&2
        exit 2
    fi
done

OUT_DIR=${OUT:-$ROOT/build/gpu-run}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/gpu-suite.log
JUNIT=$OUT_DIR/gpu-suite-junit.xml
rm -f "$JUNIT" "$OUT_DIR/failed-tests.txt" "$OUT_DIR/failed-cells.txt"

step() { printf '\n== %s\n' "$*"; }

main() {
    step "gpu_suite.sh ($MODE) $(date -u +%FT%TZ) on ${HOSTNAME:-?}, python: $PY, out: $OUT_DIR"
    local before
    before=$("$PY" tools/gpu_suite_checks.py torch)
    echo "torch before the wheels: $before"

    step "wheels: $WHEEL_DIR"
    rm -rf "$SITE"
    if [[ $MODE == gpu || -d $WHEEL_DIR ]]; then
        "$PY" tools/fetch_gpu_wheels.py --check "$WHEEL_DIR"
        local install=(-m pip install -q --no-index --no-deps --no-compile --no-cache-dir
            --target "$SITE")
        if [[ $MODE == dry ]]; then
            # Here: install the CPython 3.12 wheels as a set into a scratch folder (pip checks
            # their tags against 3.12 x86_64); this python cannot import them, so not on the path.
            install+=(--only-binary=:all: --python-version 3.12 --implementation cp)
            for platform in "${TARGET_PLATFORMS[@]}"; do install+=(--platform "$platform"); done
        fi
        if "$PY" -m pip --version >/dev/null 2>&1; then
            "$PY" "${install[@]}" "$WHEEL_DIR"/*.whl
        else
            echo "no pip for $PY: unpacking the wheels instead"
            "$PY" tools/gpu_suite_checks.py unpack "$SITE" "$WHEEL_DIR"/*.whl
        fi
        echo "installed $(find "$SITE" -maxdepth 1 -name '*.dist-info' | wc -l) packages into $SITE"
        if [[ $MODE == gpu ]]; then export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"; fi
    else
        echo "no $WHEEL_DIR here: the dry run skips the wheel check and install"
    fi
    if [[ -d $SITE ]]; then "$PY" tools/gpu_suite_checks.py deps "$SITE"; fi

    step "versions (the wheels on the path, torch the machine's own)"
    "$PY" tools/gpu_suite_checks.py env --expect "$before" --site "$SITE" "${REQUIRE_CUDA[@]}"

    step "kernelspec python3 -> $PY, in $KERNEL_PREFIX"
    rm -rf "$KERNEL_PREFIX"
    "$PY" -m ipykernel install --prefix "$KERNEL_PREFIX" --name python3 --display-name "Python 3"
    export JUPYTER_PATH="$KERNEL_PREFIX/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"
    export IPYTHONDIR=${IPYTHONDIR:-/tmp/gm-ipython} MPLCONFIGDIR=${MPLCONFIGDIR:-/tmp/gm-mpl}
    export JUPYTER_RUNTIME_DIR=${JUPYTER_RUNTIME_DIR:-/tmp/gm-jupyter-runtime}
    export GM_DEVICE=$DEVICE GM_GPU_SUITE=1 PYTHONUNBUFFERED=1
    unset PYTEST_DISABLE_PLUGIN_AUTOLOAD PYTEST_ADDOPTS GM_CI GM_STRICT_CHECKS
    timeout 180 "$PY" tools/gpu_suite_checks.py kernel "${REQUIRE_CUDA[@]}"

    local timeout_args=(--gm-test-timeout="$TEST_TIMEOUT")
    if "$PY" -c "import pytest_timeout" 2>/dev/null; then
        timeout_args=(--timeout="$TEST_TIMEOUT")
    fi
    local ignores=()
    for file in "${SKIP_FILES[@]}"; do ignores+=(--ignore="$file"); done
    # tools/ on the path for -p gpu_suite_plugin (pytest's own pythonpath comes too late), and
    # the loop auditor's package, loop_auditor/src/: the course is not installed here, and the
    # processes and kernels the tests start must import it too (with the repository's root
    # alone, loop_auditor/, its distribution's folder, is an empty namespace package).
    local paths="$ROOT/tools:$ROOT/loop_auditor/src"
    local pytest=(env "PYTHONPATH=$paths${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest
        -p gpu_suite_plugin --gm-deadline="$DEADLINE"
        "${timeout_args[@]}" --nbval-cell-timeout="$TEST_TIMEOUT" "${ignores[@]}"
        --junitxml="$JUNIT" -o junit_suite_name="gpu-suite-$MODE" -v -ra --durations=15
        "${TESTS[@]}")
    step "GM_DEVICE=$GM_DEVICE ${pytest[*]}"
    local started=$SECONDS rc=0
    timeout -s TERM -k 15 "$HARD_STOP" "${pytest[@]}" || rc=$?
    echo "pytest exit status $rc after $((SECONDS - started)) s"

    step "report"
    local report_rc=0
    "$PY" tools/gpu_suite_checks.py report "$JUNIT" --out "$OUT_DIR" || report_rc=$?
    if ((rc == 0)); then rc=$report_rc; fi
    local verdict=PASSED
    if ((rc != 0)); then verdict="FAILED (exit $rc)"; fi
    step "gpu_suite.sh ($MODE): $verdict; log $LOG, junit $JUNIT"
    return "$rc"
}

main 2>&1 | tee "$LOG"
