#!/usr/bin/env bash
# minitx on a CUDA GPU, checked and measured in one command (at most ~6 minutes on an H100).
#
#   scripts/gpu_check.sh --prepare            # on a machine with PyPI and Multi30k, beforehand
#   scripts/gpu_check.sh OUT_DIR              # on the GPU machine (no network needed)
#   scripts/gpu_check.sh OUT_DIR --cpu-dry-run  # the same steps on the CPU, tiny sizes (~1 min)
#
# --prepare downloads the wheels a CUDA torch image usually lacks (datasets, jsonargparse,
# their dependencies, matplotlib, rich, pytest, captum; the versions installed where it
# runs) into the ignored folder .whl/, and copies Multi30k ($MINITX_DATA_DIR, else
# ../shared/data/multi30k) into the ignored folder .gpu-data/multi30k: copy the checkout with
# both to the GPU machine.
#
# On the GPU the steps are, each with its own time limit, each logged to OUT_DIR/<step>.log:
#   setup        install the wheels of .whl/ the image lacks into /tmp/site; check CUDA
#   cuda_tests   tests/test_cuda.py (explicit attention vs fused kernels, bf16-mixed training,
#                cached decoding, a GPU checkpoint on the CPU)
#   bench        scripts/benchmark.py --sections train decode --device cuda
#   bench_large  the train section again with 8,192-token batches
#   train        the default run (Multi30k de-en) for what is left of the budget, at most
#                3 minutes of training, then its test BLEU, greedy and beam 5
# A failing step does not stop the others; the exit status is 1 if any failed. The figures
# are collected in OUT_DIR/summary.txt. --cpu-dry-run skips the install (it uses the current
# environment), runs the benchmark with --smoke and the tiny config for 10 updates.
#
# Environment: PYTHON (default python3), GPU_CHECK_BUDGET (seconds, default 340; the dry
# run 1700), GPU_CHECK_STEPS (the steps to run, default all: to rerun the ones that failed
# in the time a lent GPU has left, e.g. "setup cuda_tests"; the GPU needs setup every time).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
WHEELS=$REPO/.whl
GPU_DATA=$REPO/.gpu-data/multi30k
SITE=/tmp/site

# What --prepare downloads (CPython 3.12, x86-64 Linux), at the versions installed where it
# runs: the roots below and all they require, read from the installed packages' metadata
# (Requires-Dist; environment markers evaluated for CPython 3.12 on x86-64 Linux, an extra
# followed only where it is asked for), down to what the image is expected to have. The roots
# are what minitx requires (pyproject.toml) beyond a CUDA torch image, jsonargparse with the
# extra minitx asks for, and pytest, which the cuda_tests step runs.
WHEEL_ROOTS="datasets jsonargparse[signatures] matplotlib rich huggingface_hub captum pytest"
# Requirements the image is expected to meet itself (neither downloaded nor walked into): a
# CUDA torch image with Lightning, torchmetrics, sentencepiece, sacrebleu, tensorboard, pyarrow
# and safetensors (minitx's other requirements), which bring numpy, pyyaml, pillow, packaging,
# tqdm and filelock. Small pure-Python packages such an image may have too (fsspec,
# typing-extensions) are downloaded anyway: setup installs a wheel only where the image lacks
# its package.
IMAGE_HAS="torch lightning torchmetrics sentencepiece sacrebleu tensorboard pyarrow safetensors
numpy pyyaml pillow packaging tqdm filelock"
MAX_WHEELS_MIB=55  # .whl/ and .gpu-data/ travel together; keep both under 64 MiB

usage() {
    echo "error: usage: scripts/gpu_check.sh --prepare | OUT_DIR [--cpu-dry-run]" >&2
    exit 2
}

prepare() {
    local pins rc
    # NAME==VERSION of each package to download, one a line; a package that is not installed
    # ends it in one line with status 2, before anything is written.
    pins=$("$PYTHON" - "$PYTHON" "$IMAGE_HAS" "$WHEEL_ROOTS" <<'EOF'
import importlib.metadata as metadata, sys


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:
    fail(f"packaging is not installed for {sys.argv[1]} (--prepare reads requirements with it)")
python, image, roots = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
image = {canonicalize_name(name) for name in image}
target = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "platform_python_implementation": "CPython", "implementation_name": "cpython"}
pins = {}  # canonical name: NAME==VERSION
walked = {}  # canonical name: its extras ("" for none) whose requirements are queued
queue = [(Requirement(root), None) for root in roots]  # (requirement, who requires it)
while queue:
    req, parent = queue.pop(0)  # in the order of the roots
    name = canonicalize_name(req.name)
    if name in image:
        continue
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        by = f" (required by {parent})" if parent else ""
        fail(f"{req.name}{by} is not installed for {python} (its version is the one downloaded)")
    pins[name] = f"{dist.metadata['Name']}=={dist.version}"
    for extra in {"", *req.extras} - walked.get(name, set()):
        walked.setdefault(name, set()).add(extra)
        for line in dist.requires or []:  # a marker may name the extra: extra == "signatures"
            sub = Requirement(line)
            if sub.marker is None or sub.marker.evaluate({**target, "extra": extra}):
                queue.append((sub, dist.metadata["Name"]))
print("\n".join(pins[name] for name in sorted(pins)))
EOF
    )
    rc=$?
    if ((rc)); then
        ((rc == 2)) || echo "error: $PYTHON could not list the wheels to download" >&2
        exit 2
    fi
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    # shellcheck disable=SC2086  # $pins: one NAME==VERSION a line, none with spaces
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$WHEELS" $pins || exit 1
    # Every requirement of a wheel must be another wheel here or something the image has.
    "$PYTHON" - "$WHEELS" "$IMAGE_HAS" <<'EOF' || exit 1
import sys, zipfile
from pathlib import Path
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

wheels = sorted(Path(sys.argv[1]).glob("*.whl"))
have = {canonicalize_name(parse_wheel_filename(w.name)[0]) for w in wheels}
have |= {canonicalize_name(n) for n in sys.argv[2].split()}
env = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "platform_python_implementation": "CPython", "implementation_name": "cpython",
       "extra": ""}
missing = set()
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    for line in lines:
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if (req.marker is None or req.marker.evaluate(env)) and (
                canonicalize_name(req.name) not in have
            ):
                missing.add(f"{req} (of {wheel.name})")
if missing:
    sys.exit("error: requirements neither in .whl/ nor in the image: " + "; ".join(sorted(missing)))
EOF
    local source=${MINITX_DATA_DIR:-$REPO/../shared/data/multi30k}
    if [[ ! -f $source/train.de.gz && ! -f $source/train.de ]]; then
        echo "error: no Multi30k in $source (set MINITX_DATA_DIR)" >&2
        exit 2
    fi
    rm -rf "$GPU_DATA" && mkdir -p "$GPU_DATA" && cp "$source"/* "$GPU_DATA"/ || exit 1
    chmod -R u+w "$GPU_DATA"
    local mib
    mib=$(du -sm "$WHEELS" | cut -f1)
    echo "$(ls "$WHEELS" | wc -l) wheels in .whl/: ${mib} MiB; .gpu-data/: $(du -sh "$GPU_DATA" | cut -f1)"
    if ((mib > MAX_WHEELS_MIB)); then
        echo "error: .whl/ is ${mib} MiB, over ${MAX_WHEELS_MIB} MiB" >&2
        exit 1
    fi
}

case ${1:-} in
--prepare) [[ $# -eq 1 ]] || usage; prepare; exit 0 ;;
--cpu-dry-run) [[ $# -eq 2 ]] || usage; DRY=1; OUT=$2 ;;
"" | -*) usage ;;
*)
    OUT=$1
    case ${2:-} in "") DRY=0 ;; --cpu-dry-run) DRY=1 ;; *) usage ;; esac
    [[ $# -le 2 ]] || usage
    ;;
esac

ALL_STEPS="setup cuda_tests bench bench_large train"
STEPS=${GPU_CHECK_STEPS:-$ALL_STEPS}
for name in $STEPS; do
    if [[ " $ALL_STEPS " != *" $name "* ]]; then
        echo "error: GPU_CHECK_STEPS names '$name'; the steps are: $ALL_STEPS" >&2
        exit 2
    fi
done
if [[ -n ${GPU_CHECK_BUDGET:-} && ! $GPU_CHECK_BUDGET =~ ^[1-9][0-9]*$ ]]; then
    echo "error: GPU_CHECK_BUDGET is '$GPU_CHECK_BUDGET'; give a positive whole number of seconds, e.g. 340" >&2
    exit 2
fi
mkdir -p "$OUT" || exit 2
export REPO PYTHON WHEELS GPU_DATA SITE DRY OUT  # for the steps that are functions
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)  # runs, checkpoints and data caches: not for OUT_DIR
export WORK
trap 'rm -rf "$WORK"' EXIT
# The dry run's limits are only there to end a hung step: five times the GPU's, since a busy
# CPU may take minutes for what takes seconds on an idle one.
SCALE=$((DRY ? 5 : 1))
BUDGET=${GPU_CHECK_BUDGET:-$((340 * SCALE))}
START=$SECONDS
FAILED=()
: >"$OUT/steps.txt"

export PYTHONPATH=$REPO
((DRY)) || export PYTHONPATH=$SITE:$REPO  # what setup installs, then the checkout
export PYTHONUNBUFFERED=1 PYTHONIOENCODING=utf-8
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1  # the GPU machine has no network: never wait for it
[[ -d $GPU_DATA ]] && export MINITX_DATA_DIR=$GPU_DATA

# step NAME CAP RESERVE COMMAND...: run COMMAND (a program or a function of this script),
# output in OUT/NAME.log, stopped after CAP seconds or sooner, so that RESERVE seconds of the
# budget stay for the steps after it.
step() {
    local name=$1 cap=$(($2 * SCALE)) reserve=$(($3 * SCALE)) left limit rc began
    shift 3
    if [[ " $STEPS " != *" $name "* ]]; then
        echo "$name: skipped (not in GPU_CHECK_STEPS)" | tee -a "$OUT/steps.txt"
        return
    fi
    left=$((BUDGET - (SECONDS - START) - reserve))
    # A budget too small for the reserve: the step runs in what is left of it all.
    ((left < 5)) && left=$((BUDGET - (SECONDS - START)))
    limit=$((cap < left ? cap : left))
    if ((limit < 5)); then
        echo "$name: FAILED (no time left in the ${BUDGET} s budget)" | tee -a "$OUT/steps.txt"
        FAILED+=("$name")
        return
    fi
    echo "== $name (at most ${limit} s)"
    began=$SECONDS
    if [[ $(type -t "$1") == function ]]; then  # timeout runs programs: a bash for functions
        timeout --kill-after=10 "$limit" bash -c "$(declare -f "$1"); $(printf '%q ' "$@")" \
            >"$OUT/$name.log" 2>&1
    else
        timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    fi
    rc=$?
    if ((rc == 0)); then
        echo "$name: ok ($((SECONDS - began)) s)" | tee -a "$OUT/steps.txt"
    else
        local why="exit status $rc"
        ((rc == 124 || rc == 137)) && why="timed out after ${limit} s"
        echo "$name: FAILED ($why, $((SECONDS - began)) s; see $name.log)" | tee -a "$OUT/steps.txt"
        FAILED+=("$name")
    fi
}

setup() {
    if ((DRY)); then
        echo "dry run: no install, the current environment ($PYTHON)"
    else
        # Only the wheels whose package the image lacks: one the image has is never replaced
        # under its dependants (a newer huggingface_hub broke the image's transformers,
        # which torchmetrics imports). The import check below shows the rest is enough.
        local chosen
        rm -rf "$SITE"  # a second run on the same machine compares against the image alone
        chosen=$("$PYTHON" - "$WHEELS" <<'EOF'
import importlib.metadata as metadata, sys
from pathlib import Path
try:
    from packaging.utils import parse_wheel_filename
except ImportError:  # no packaging: take every wheel
    print("\n".join(str(w) for w in sorted(Path(sys.argv[1]).glob("*.whl"))))
    sys.exit()
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    name, version, _, _ = parse_wheel_filename(wheel.name)
    try:
        installed = metadata.version(name)
    except metadata.PackageNotFoundError:
        print(wheel)  # the image lacks it
        installed = "none"
    print(f"{name} {version}: image has {installed}", file=sys.stderr)
EOF
        ) || return 1
        echo "installing into $SITE:"
        echo "$chosen"
        if [[ -n $chosen ]]; then
            # shellcheck disable=SC2086  # one path per line, none with spaces (wheel names)
            "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
                --upgrade --target "$SITE" $chosen || return 1
        fi
    fi
    nvidia-smi 2>/dev/null || echo "(no nvidia-smi)"
    "$PYTHON" - "$DRY" <<'EOF'
import importlib.metadata as metadata, sys
import torch
import datasets, jsonargparse, matplotlib, rich, pytest  # noqa: F401  what the steps import
import minitx.cli.train, minitx.evaluation  # noqa: F401  training, then its test

names = ["torch", "lightning", "datasets", "jsonargparse", "pyarrow", "numpy", "sentencepiece"]
print("python", sys.version.split()[0], *(f"{n} {metadata.version(n)}" for n in names))
print("MINITX_DATA_DIR", __import__("os").environ.get("MINITX_DATA_DIR"))
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
elif sys.argv[1] != "1":
    sys.exit("error: torch sees no CUDA device")
else:
    print("device: none (dry run)")
EOF
}

# train SECONDS: the default run for SECONDS of training (the dry run: the tiny config)
train() {
    cd "$WORK" || return 1
    local args=(--trainer.enable_progress_bar false --runs_dir "$WORK/runs")
    if ((DRY)); then
        args+=(--config tiny --trainer.max_steps 10)
    else
        args+=(--trainer.max_time "$(printf '00:00:%02d:%02d' $(($1 / 60)) $(($1 % 60)))"
            --trainer.accelerator gpu --data.num_workers 2)
    fi
    "$PYTHON" -m minitx.cli.train "${args[@]}"
    local rc=$?
    local run
    run=$(ls -d "$WORK"/runs/*/*/ 2>/dev/null | tail -1)
    if [[ -n $run ]]; then
        mkdir -p "$OUT/train"
        cp "$run"/config.yaml "$run"/csv/metrics.csv "$run"/test.*.hyp "$OUT/train/" 2>/dev/null
    fi
    return $rc
}

if ((DRY)); then
    BENCH=(--device cpu --smoke --precisions fp32 --train-examples 64 --train-steps 2
        --max-tokens 256 --decode-sentences 4 --decode-batch 4 --peak-tflops 1)
    LARGE=(--device cpu --smoke --precisions fp32 --train-examples 64 --train-steps 1
        --max-tokens 512 --peak-tflops 1)
else
    BENCH=(--device cuda)
    LARGE=(--device cuda --max-tokens 8192 --train-examples 6000)
fi

step setup 90 240 setup
step cuda_tests 150 200 "$PYTHON" -m pytest -q -p no:cacheprovider -m cuda "$REPO/tests/test_cuda.py"
step bench 90 170 "$PYTHON" "$REPO/scripts/benchmark.py" --sections train decode "${BENCH[@]}"
step bench_large 60 150 "$PYTHON" "$REPO/scripts/benchmark.py" --sections train "${LARGE[@]}"
# What is left of the budget, less ~75 s for starting, the tokenizer and the test; at most
# 3 minutes of training.
TRAIN_SECONDS=$((BUDGET - (SECONDS - START) - 75))
((TRAIN_SECONDS > 180)) && TRAIN_SECONDS=180
((TRAIN_SECONDS < 30)) && TRAIN_SECONDS=30
step train 400 0 train "$TRAIN_SECONDS"

# ---------------------------------------------------------------------------- summary
"$PYTHON" - "$OUT" <<'EOF' >"$OUT/summary.txt"
import csv, re, sys
from pathlib import Path

out = Path(sys.argv[1])


def log(name: str) -> str:
    path = out / f"{name}.log"
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def lines(text: str, *patterns: str) -> list[str]:
    return [f"  {s.strip()}" for s in text.splitlines() if any(re.search(p, s) for p in patterns)]


print("minitx GPU check\n\n== steps ==")
print((out / "steps.txt").read_text(encoding="utf-8").rstrip())
print("\n== setup ==")
print("\n".join(lines(log("setup"), r"^python ", r"^device", r"^MINITX_DATA_DIR")) or "  (no figures)")
print("\n== cuda tests ==")
tail = [s for s in log("cuda_tests").splitlines() if re.search(r"passed|failed|skipped|error", s)]
print(f"  {tail[-1].strip('= ')}" if tail else "  (no result)")
print("\n".join(lines(log("cuda_tests"), r"^(FAILED|ERROR) ")))
for name, title in (("bench", "benchmark"), ("bench_large", "benchmark, larger batches")):
    print(f"\n== {title} ==")
    figures = lines(log(name), r"^device", r"^== ", r"target tokens/s|GFLOP/s|ratio minitx",
                    r"with KV cache")
    print("\n".join(figures) or "  (no figures)")
print("\n== default run ==")
metrics = out / "train" / "metrics.csv"
if metrics.exists():
    rows = list(csv.DictReader(metrics.open(encoding="utf-8")))
    steps = [int(r["step"]) for r in rows if r.get("step")]
    print(f"  updates: {max(steps) if steps else 0}")  # the global step of the last rows
    speeds = sorted(float(r["train/tokens_per_sec_step"]) for r in rows
                    if r.get("train/tokens_per_sec_step"))
    if speeds:
        print(f"  target tokens/s (median of the logged steps): {speeds[len(speeds) // 2]:,.0f}")
    for r in rows:
        if r.get("val/bleu"):  # logged at the step index of the last update before it
            print(f"  validation after update {int(r['step']) + 1}: BLEU {float(r['val/bleu']):.2f}")
    for key in ("test/bleu_greedy", "test/bleu_beam5"):
        value = next((r[key] for r in rows if r.get(key)), None)
        print(f"  {key}: {float(value):.2f}" if value else f"  {key}: (none)")
else:
    print("  (no metrics.csv)")
print("\n".join(lines(log("train"), r"^fit finished", r"tok/s", r"^test \(", r"BLEU .*sentences in")))
EOF
echo "summary: $OUT/summary.txt ($((SECONDS - START)) s)"
cat "$OUT/summary.txt"
if ((${#FAILED[@]})); then
    echo "failed steps: ${FAILED[*]}" >&2
    exit 1
fi
