"""scripts/gpu_check.sh: its CPU dry run goes through every step and writes the summary, so
the GPU check is known to work before a GPU is lent; it refuses bad command lines; and
--prepare derives the wheels to download from the installed packages' requirements."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import shutil
import subprocess
from pathlib import Path

import packaging
import pytest
from helpers import PYTHON, SCRIPTS_DIR, subprocess_env
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SCRIPT = SCRIPTS_DIR / "gpu_check.sh"
SECTIONS = [
    "== steps ==",
    "== setup ==",
    "== cuda tests ==",
    "== benchmark ==",
    "== benchmark, larger batches ==",
    "== default run ==",
]
STEPS = ["setup", "cuda_tests", "bench", "bench_large", "train"]


def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {**subprocess_env(), "PYTHON": PYTHON}
    env.pop("MINITX_DATA_DIR", None)  # the dry run trains on the toy corpus
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.slow
@pytest.mark.ci_step
def test_cpu_dry_run_runs_every_step_and_writes_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_script("--cpu-dry-run", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    positions = [summary.find(section) for section in SECTIONS]
    assert -1 not in positions and positions == sorted(positions), summary
    for step in STEPS:
        assert f"{step}: ok" in summary, summary
        assert (out / f"{step}.log").is_file()
    assert "skipped" in summary  # no CUDA here: the cuda tests ran and skipped
    assert "ratio minitx / torch.nn.Transformer" in summary
    assert "with KV cache" in summary
    assert "updates: 10" in summary
    assert "validation after update 10: BLEU" in summary
    assert "test/bleu_greedy: " in summary and "test/bleu_beam5: " in summary
    assert (out / "train" / "metrics.csv").is_file()


def run_failing_dry_run(out: Path, **env: str) -> subprocess.CompletedProcess:
    """The dry run with a Python that always fails (`false`): every step it runs fails."""
    return subprocess.run(
        ["bash", str(SCRIPT), str(out), "--cpu-dry-run"],
        capture_output=True,
        text=True,
        env={**subprocess_env(), "PYTHON": "false", "OMP_NUM_THREADS": "1", **env},
        timeout=120,
    )


def test_a_failing_step_makes_the_exit_status_one(tmp_path: Path) -> None:
    """A step that fails is reported, the others still run, and the script ends with 1."""
    out = tmp_path / "out"
    done = run_failing_dry_run(out)
    assert done.returncode == 1, done.stdout + done.stderr
    steps = (out / "steps.txt").read_text(encoding="utf-8")
    for step in STEPS:
        assert f"{step}: FAILED" in steps, steps
    assert "failed steps: setup cuda_tests bench bench_large train" in done.stderr


def test_gpu_check_steps_runs_only_the_steps_named(tmp_path: Path) -> None:
    """GPU_CHECK_STEPS reruns chosen steps (what a lent GPU's last minutes allow); the others
    are reported as skipped, not as passed."""
    out = tmp_path / "out"
    done = run_failing_dry_run(out, GPU_CHECK_STEPS="setup bench")
    assert done.returncode == 1, done.stdout + done.stderr
    steps = (out / "steps.txt").read_text(encoding="utf-8").splitlines()
    assert [line.split(":")[0] for line in steps] == STEPS
    for line in steps:
        ran = line.split(":")[0] in ("setup", "bench")
        assert ("FAILED" in line) == ran and ("skipped" in line) == (not ran), line
    assert "failed steps: setup bench" in done.stderr


@pytest.mark.parametrize(
    ("variable", "value", "error"),
    [
        (
            "GPU_CHECK_STEPS",
            "setup train_fast",
            "GPU_CHECK_STEPS names 'train_fast'; the steps are: ",
        ),
        ("GPU_CHECK_BUDGET", "abc", "GPU_CHECK_BUDGET is 'abc'; give a positive whole number"),
        ("GPU_CHECK_BUDGET", "0", "GPU_CHECK_BUDGET is '0'; give a positive whole number"),
    ],
)
def test_a_bad_environment_variable_exits_2(
    variable: str, value: str, error: str, tmp_path: Path
) -> None:
    """Before anything is written; a budget that is not a number was bash's "unbound variable"."""
    env = {**os.environ, "PYTHON": "false", variable: value}
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {error}"), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [[], ["--cpu-dry-run"], ["out", "--gpu"], ["--prepare", "x"]])
def test_bad_command_lines_exit_2(args: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHON": "false"},
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: usage: ")


# What --prepare expects the GPU image to have: never downloaded, never walked into.
IMAGE = {"torch", "lightning", "torchmetrics", "sentencepiece", "sacrebleu", "tensorboard"}
IMAGE |= {"pyarrow", "safetensors", "numpy", "pyyaml", "pillow", "packaging", "tqdm", "filelock"}
ROOTS = ["datasets", "jsonargparse", "matplotlib", "rich", "huggingface-hub", "captum", "pytest"]
# The GPU machine's Python, for environment markers.
TARGET = {
    "python_version": "3.12",
    "python_full_version": "3.12.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "platform_python_implementation": "CPython",
    "implementation_name": "cpython",
}


def run_prepare(
    tmp_path: Path, *python_args: str, **env: str
) -> tuple[subprocess.CompletedProcess, dict[str, str] | None]:
    """--prepare in a copy of the script (its .whl/ in tmp_path, not the checkout's), with a
    PYTHON that records what `-m pip download` is asked for instead of downloading, then
    fails. Returns the result and the pins asked for (canonical name: version), None when
    pip was not called."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts")
    asked = tmp_path / "pip-download.txt"
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'if [ "$1 $2 $3" = "-m pip download" ]; then printf "%s\\n" "$@" >"{asked}"; exit 1; fi\n'
        f'exec "{PYTHON}" {" ".join(python_args)} "$@"\n'
    )
    python.chmod(0o755)
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "gpu_check.sh"), "--prepare"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": str(python), **env},
        timeout=120,
    )
    if not asked.exists():
        return done, None
    args = asked.read_text(encoding="utf-8").split()
    for flag in ("--no-deps", "--only-binary=:all:", "--python-version", "3.12"):
        assert flag in args, args
    pins = dict(arg.split("==") for arg in args if "==" in arg)
    return done, {canonicalize_name(name): version for name, version in pins.items()}


def test_prepare_downloads_what_the_roots_require_beyond_the_image(tmp_path: Path) -> None:
    """The wheels --prepare asks pip for are the installed versions of the roots and all they
    require for CPython 3.12 on x86-64 Linux, down to the image's packages: a hand-kept list
    went stale (six, which python-dateutil 4 no longer needs, while it needs tzdata)."""
    done, pins = run_prepare(tmp_path)
    assert pins is not None, done.stderr
    assert done.returncode == 1, done.stderr  # the recording pip fails
    assert set(ROOTS) <= set(pins), pins
    assert {"docstring-parser", "typeshed-client"} <= set(pins)  # jsonargparse[signatures]
    assert not IMAGE & set(pins), IMAGE & set(pins)
    for name, version in pins.items():
        assert metadata.version(name) == version, name
        extras = ["signatures"] if name == "jsonargparse" else []
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if any(
                req.marker is None or req.marker.evaluate({**TARGET, "extra": extra})
                for extra in ["", *extras]
            ):
                assert canonicalize_name(req.name) in set(pins) | IMAGE, f"{line} (of {name})"
    # Neither extras asked by no one (jsonargparse[urls]: requests) nor another platform's or
    # Python's requirements (pytest: colorama on Windows, tomli before 3.11).
    assert not {"requests", "colorama", "tomli", "exceptiongroup"} & set(pins)


def write_site(site: Path, packages: dict[str, list[str]]) -> None:
    """A folder of installed packages' metadata alone: NAME-VERSION: its Requires-Dist."""
    for spec, requires in packages.items():
        name, version = spec.rsplit("-", 1)
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        lines += [f"Requires-Dist: {req}" for req in requires]
        (info / "METADATA").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_prepare_walks_markers_and_extras_for_the_gpu_python(tmp_path: Path) -> None:
    """On made-up metadata: markers are evaluated for CPython 3.12 on x86-64 Linux, whatever
    runs --prepare; an extra is followed only where asked for; the image's packages are not
    walked into; a package required but not installed ends it in one line, status 2, before
    anything is written."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "packaging").symlink_to(Path(packaging.__file__).parent)
    # Not installed: the image's packages (numpy, torch, pillow), another extra's (requests,
    # ipywidgets), another platform's (colorama) or Python's (tomli): a walk into any of them
    # would end it with status 2.
    write_site(
        site,
        {
            "datasets-5.0": ["python-dateutil", "numpy>=2", 'torch; extra == "torch"'],
            "python-dateutil-2.9": ["six>=1.5"],
            "jsonargparse-4.40": [
                'docstring-parser; extra == "signatures"',
                'requests; extra == "urls"',
            ],
            "docstring-parser-0.17": [],
            "matplotlib-3.10": ["pillow>=8", "kiwisolver"],
            "kiwisolver-1.4": [],
            "rich-14.0": ['ipywidgets; extra == "jupyter"'],
            "huggingface_hub-1.0": [
                'hf-xet; platform_machine == "x86_64"',
                'tomli; python_version < "3.12"',
            ],
            "hf-xet-1.2": [],
            "captum-0.9": ["torch>=2.3", "matplotlib"],
            "pytest-9.0": ['colorama; sys_platform == "win32"'],
        },
    )
    # With -S, Python sees these packages and no others.
    done, pins = run_prepare(tmp_path / "without-six", "-S", PYTHONPATH=str(site))
    assert done.returncode == 2, done.stderr
    assert pins is None and not (tmp_path / "without-six" / "repo" / ".whl").exists()
    assert done.stderr.splitlines() == [
        f"error: six (required by python-dateutil) is not installed for {tmp_path}/without-six/"
        "python (its version is the one downloaded)"
    ]

    write_site(site, {"six-1.17": []})
    done, pins = run_prepare(tmp_path / "with-six", "-S", PYTHONPATH=str(site))
    assert done.returncode == 1 and pins is not None, done.stderr
    assert pins == {
        "datasets": "5.0",
        "python-dateutil": "2.9",
        "six": "1.17",
        "jsonargparse": "4.40",
        "docstring-parser": "0.17",
        "matplotlib": "3.10",
        "kiwisolver": "1.4",
        "rich": "14.0",
        "huggingface-hub": "1.0",
        "hf-xet": "1.2",
        "captum": "0.9",
        "pytest": "9.0",
    }
