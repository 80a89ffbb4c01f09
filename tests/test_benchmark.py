"""scripts/benchmark.py. The budget section: the split of a training run's time sums what the
profiler records once each (nested actions are not counted twice), and the section runs a
real (tiny) training run end to end and prints every share. The header: MKL's code path, read
from MKL's own verbose output."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest
from helpers import PYTHON, SCRIPTS_DIR, TINY_CONFIG, TOY_CORPUS_DIR, subprocess_env
from preloaded import run_python

spec = importlib.util.spec_from_file_location("benchmark", SCRIPTS_DIR / "benchmark.py")
benchmark = importlib.util.module_from_spec(spec)
spec.loader.exec_module(benchmark)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-tokens", "-5"], "argument --max-tokens: must be at least 1, got -5"),
        (["--train-steps", "0"], "argument --train-steps: must be at least 1, got 0"),
        (["--decode-batch", "0"], "argument --decode-batch: must be at least 1, got 0"),
        (["--peak-tflops", "-1"], "argument --peak-tflops: must be above 0, got -1"),
        (["--budget-time", "banana"], "argument --budget-time: trainer.max_time='banana': not"),
        (["--budget-time", "00:00:00:00"], "argument --budget-time: must be above 0"),
        (  # was measured in fp32 without a word
            ["--sections", "attention", "ct2", "--precisions", "bf16"],
            "--precisions applies to the train, decode, scores, padding, levers sections, none",
        ),
        (  # was an OSError naming the path alone, after the section's header
            ["--sections", "data", "--data-workdir", str(SCRIPTS_DIR / "benchmark.py")],
            f"--data-workdir {SCRIPTS_DIR / 'benchmark.py'}: not a folder; give a folder",
        ),
        (
            ["--sections", "budget", "--budget-workdir", str(SCRIPTS_DIR / "benchmark.py" / "x")],
            f"--budget-workdir {SCRIPTS_DIR / 'benchmark.py' / 'x'}: Not a directory; give",
        ),
    ],
)
def test_numbers_no_section_can_use_are_refused_before_any_runs(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Was: a traceback (a ZeroDivisionError, a ValueError from the batcher) after the
    section's header, or a negative MFU printed as a result."""
    monkeypatch.setattr("sys.argv", ["benchmark.py", "--smoke", *args])
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main()
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err
    # one line, as every command's (argparse's own printed its 20-line usage block first)
    assert err.startswith("error: ") and err.count("\n") == 1, err


def test_decode_section_measures_each_precision(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Was: the decode section measured fp32 alone, whatever --precisions said."""
    monkeypatch.setattr(benchmark, "SIZES", {**benchmark.SIZES, **benchmark.SMOKE_SIZES})
    args = benchmark.argparse.Namespace(
        checkpoint=None, decode_sentences=4, decode_batch=2, beam=2, device="cpu"
    )
    args.precisions = ["fp32", "bf16"]
    benchmark.bench_decode(args)
    rows = capsys.readouterr().out.strip().splitlines()[1:]  # after the header
    assert [row.split()[:2] for row in rows] == [
        ["fp32", "greedy"], ["fp32", "beam"], ["bf16", "greedy"], ["bf16", "beam"]
    ]  # fmt: skip


def test_smoke_shrinks_the_attention_section(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Was: --smoke timed the full 4,096-token batches up to length 512 (minutes on 2 cores)."""
    monkeypatch.setattr(benchmark, "ATTENTION_SHAPES", dict(benchmark.ATTENTION_SHAPES))
    monkeypatch.setattr(benchmark, "SIZES", dict(benchmark.SIZES))
    timed = []

    def attention_times(dtype, t: int, tokens: int, repeats: int):
        timed.append((t, tokens))
        return [1.0, 1.0], [1.0, 1.0, 1.0]

    monkeypatch.setattr(benchmark, "_attention_times", attention_times)
    # MKL names its code path once per process: a call here would leave none for the test below
    monkeypatch.setattr(benchmark, "mkl_code_path", lambda: None)
    monkeypatch.setattr("sys.argv", ["benchmark.py", "--smoke", "--sections", "attention"])
    benchmark.main()
    assert timed == [(16, 256), (32, 256)] * 2  # bf16, then fp32
    assert "B*T = 256 tokens" in capsys.readouterr().out


def test_budget_split_counts_each_second_once() -> None:
    actions = {
        "Total": 100.0,
        "run_training_epoch": 90.0,  # holds everything below: never summed
        "run_training_batch": 60.0,
        "[LightningModule]TranslationModule.optimizer_step": 59.0,  # inside a training step
        "[_TrainingEpochLoop].train_dataloader_next": 2.0,
        "[Strategy]SingleDeviceStrategy.validation_step": 12.0,
        "[_EvaluationLoop].val_next": 1.0,
        "save_checkpoint": 3.0,
        "[Callback]ModelCheckpoint{'monitor': 'val/bleu'}.on_validation_end": 2.5,  # a write
        "[Callback]ConfigInCheckpoint.on_save_checkpoint": 0.5,  # inside a write
        "[Callback]AttentionMapLogger.on_validation_end": 4.0,
        "[Callback]TokenThroughput.on_train_batch_end": 0.25,
    }
    split = benchmark.budget_split(actions)
    assert split == {
        "checkpoint writes": 3.0,
        "training steps": 60.0,
        "fetching batches": 2.0,
        "attention maps": 4.0,
        "validation": 13.0,
        "logging (other callbacks)": 0.25,
    }


@pytest.mark.slow
def test_budget_section_trains_and_prints_every_share(tmp_path) -> None:
    """A config file given from here (the run works in a folder of its own: the path was
    looked for there), and no folder left in the temporary directory."""
    (tmp_path / "tmp").mkdir()
    env = {**subprocess_env(), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")}
    env.pop("MINITX_DATA_DIR", None)  # the tiny config trains on the toy corpus
    (tmp_path / "mine").mkdir()
    shutil.copy(TINY_CONFIG, tmp_path / "mine" / "tiny.yaml")
    command = [
        PYTHON, str(SCRIPTS_DIR / "benchmark.py"), "--sections", "budget",
        "--budget-config", "mine/tiny.yaml", "--budget-time", "00:00:00:03",
    ]  # fmt: skip
    done = run_python(command, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert list((tmp_path / "tmp").iterdir()) == []
    lines = {line.strip().split("  ")[0]: line for line in done.stdout.splitlines()}
    for share in [*benchmark.budget_split({}), "the rest (setup, the loop)"]:
        assert share in lines, done.stdout
    training_seconds = float(lines["training steps"].split()[-2])
    assert training_seconds > 0, done.stdout
    assert "the share that trains" in done.stdout


def test_a_budget_run_that_is_refused_exits_2_with_its_error_last(tmp_path) -> None:
    """It exited 1 (a bug's status) and left its folder in the temporary directory."""
    (tmp_path / "tmp").mkdir()
    env = {**subprocess_env(), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "bad.yaml").write_text("data: {vocab_sizee: 100}\n")
    command = [PYTHON, str(SCRIPTS_DIR / "benchmark.py"), "--sections", "budget"]
    done = run_python([*command, "--budget-config", "bad.yaml"], env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stderr.splitlines()[-1].startswith(
        f"error: --config {tmp_path / 'bad.yaml'}: data.vocab_sizee is not a setting"
    ), done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize(
    ("branch", "expected"),
    [
        ("Intel(R) Architecture processors", "Intel(R) Architecture"),
        (
            "Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled processors",
            "Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled",
        ),
        (  # a Xeon with AMX (lscpu: family 6, model 207): no "processors" after the branch
            "Intel(R) Advanced Vector Extensions 512 (Intel(R) AVX-512) with support for INT8, "
            "BF16, FP16 (limited) instructions, and Intel(R) Advanced Matrix Extensions (Intel(R) "
            "AMX) with INT8 and BF16",
            "Intel(R) Advanced Vector Extensions 512 (Intel(R) AVX-512) with support for INT8, "
            "BF16, FP16 (limited) instructions, and Intel(R) Advanced Matrix Extensions (Intel(R) "
            "AMX) with INT8 and BF16",
        ),
    ],
    ids=["generic", "avx2", "amx"],
)
def test_mkls_code_path_is_read_from_its_verbose_header(branch: str, expected: str) -> None:
    verbose = (
        "MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture "
        f"{branch}, Lnx 2.45GHz lp64 gnu_thread\n"
        "MKL_VERBOSE SGEMM(N,N,64,64,64,...) 322.00us CNR:OFF Dyn:1 FastMM:1 TID:0  NThr:2\n"
    )
    assert benchmark.parse_mkl_code_path(verbose) == expected
    assert benchmark.parse_mkl_code_path(verbose.splitlines()[1]) is None


def test_mkls_code_path_is_caught_below_python_and_the_output_goes_on(
    capfd: pytest.CaptureFixture,
) -> None:
    """MKL writes its verbose lines to file descriptor 1: they are caught there, and what the
    process prints afterwards still reaches its standard output."""
    import torch

    if not torch.backends.mkl.is_available():
        pytest.skip("this torch has no MKL")
    path = benchmark.mkl_code_path()
    assert path and "Intel(R)" in path, path
    os.write(1, b"after\n")  # below Python, where a descriptor left redirected would lose it
    out = capfd.readouterr().out
    assert "MKL_VERBOSE" not in out and out.endswith("after\n"), out


def test_decode_section_reads_a_trained_checkpoint(tiny_checkpoint, capsys) -> None:
    """Was: --checkpoint ended in AttributeError: 'Translator' object has no attribute
    '_src_tensor' (a helper the Translator no longer has)."""
    args = benchmark.argparse.Namespace(
        checkpoint=str(tiny_checkpoint), decode_sentences=4, decode_batch=2, beam=2,
        device="cpu:0", precisions=["fp32"], data=str(TOY_CORPUS_DIR), src_lang="de",
        tgt_lang="en", peak_tflops=None,
    )  # fmt: skip
    benchmark.bench_decode(args)
    out = capsys.readouterr().out
    assert "4 test sentences, trained model" in out
    assert [row.split()[:2] for row in out.strip().splitlines()[1:]] == [
        ["fp32", "greedy"], ["fp32", "beam"]
    ]  # fmt: skip
    assert benchmark.peak_flops(args) is None  # "cpu:0" is the CPU: its peak is measured


def test_budget_figures_are_the_newest_runs(tmp_path, monkeypatch, capsys) -> None:
    """Was: the first metrics.csv in directory order, an earlier run's in a reused work
    directory; and a run without BLEU printed an empty line instead of its updates."""
    for name, steps, age in (("2026-12-05_09-00-00", 9, 0), ("2026-12-01_09-00-00", 5, 1000)):
        run = tmp_path / "runs" / "tiny" / name / "csv"
        run.mkdir(parents=True)
        rows = "".join(f"{s},64\n" for s in range(steps))
        (run / "metrics.csv").write_text(f"step,train/tokens\n{rows}", encoding="utf-8")
        os.utime(run / "metrics.csv", (1e9 - age, 1e9 - age))
    monkeypatch.setattr(benchmark, "_profiled_actions", lambda path: {"Total": 10.0})
    monkeypatch.setattr(benchmark, "budget_split", lambda actions: {"training steps": 8.0})
    benchmark._print_budget(tmp_path)
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "  9 updates, 576 target tokens in 10 s of fit; no BLEU"


def test_data_section_passes_on_its_preparation_error_in_one_line(tmp_path, monkeypatch) -> None:
    """Was: a corpus too small for the default vocabulary ended with status 1 and the child's
    whole standard error, progress bars included, around its one error line."""
    child = benchmark.subprocess.CompletedProcess(
        [], 2, stdout="", stderr="Map: 100%|###|\nerror: data.vocab_size=8000 is too large\n"
    )
    monkeypatch.setattr(benchmark.subprocess, "run", lambda *args, **kwargs: child)
    with pytest.raises(benchmark.UsageError) as refused:
        benchmark._run_child(tmp_path / "corpus-200", tmp_path / "cache")
    assert str(refused.value) == (
        "data section, corpus-200: data.vocab_size=8000 is too large (the default data "
        "settings need a larger --data-pairs)"
    )
