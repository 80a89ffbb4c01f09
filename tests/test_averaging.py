"""Checkpoint averaging: `minitx.averaging`, the `minitx-average` command and the
`CheckpointAveraging` training callback."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from unittest import mock

import pytest
import torch
from helpers import (
    PYTHON,
    REPO_DIR,
    TINY_CONFIG,
    TOY_TEST_SOURCES,
    subprocess_env,
    train_tiny,
)
from preloaded import run_python

from minitx import release
from minitx.averaging import AVERAGED_KEY, average_checkpoints, average_state_dicts
from minitx.checkpoint import (
    CHECKPOINT_KEY,
    MODEL_PREFIX,
    CheckpointError,
    load_checkpoint,
    write_checkpoint,
)
from minitx.cli.average import main as average_main
from minitx.decoding import DecodingConfig
from minitx.errors import ConfigError
from minitx.training import CheckpointAveraging
from minitx.translator import Translator

GREEDY = DecodingConfig(strategy="greedy")
SENTENCES = TOY_TEST_SOURCES[:4]


def model_weights(path: Path) -> dict[str, torch.Tensor]:
    state = load_checkpoint(path)["state_dict"]
    return {k: v for k, v in state.items() if k.startswith(MODEL_PREFIX)}


def modified_copy(source: Path, target: Path, change) -> Path:
    """`source` with `change(checkpoint)` applied, written to `target`."""
    checkpoint = load_checkpoint(source)  # a fresh copy, ours to change
    change(checkpoint)
    write_checkpoint(checkpoint, target)
    return target


def perturbed(checkpoint: dict, seed: int = 0) -> None:
    """Different float weights of the same model (a fixed, reproducible perturbation)."""
    generator = torch.Generator().manual_seed(seed)
    state = checkpoint["state_dict"]
    done: dict[int, torch.Tensor] = {}
    for key, value in state.items():
        if key.startswith(MODEL_PREFIX) and value.is_floating_point():
            ptr = value.untyped_storage().data_ptr()  # tied weights: perturbed once
            if ptr not in done:
                noise = torch.randn(value.shape, generator=generator, dtype=value.dtype)
                value.add_(0.1 * noise)
                done[ptr] = value


# ------------------------------------------------------------------ the averaging functions


def test_average_of_one_checkpoint_is_that_checkpoint_and_copies_are_refused(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """Copies of one checkpoint (a best checkpoint and last.ckpt saved at one update, say)
    would count one set of weights twice in the mean, without a word."""
    copies = [shutil.copyfile(tiny_checkpoint, tmp_path / f"copy{i}.ckpt") for i in range(2)]
    with pytest.raises(ConfigError, match=r"copy1.ckpt holds the same weights as .*copy0.ckpt"):
        average_checkpoints(copies)
    averaged = average_checkpoints([tiny_checkpoint])
    out = tmp_path / "avg.ckpt"
    write_checkpoint(averaged, out)
    original, mean = model_weights(tiny_checkpoint), model_weights(out)
    assert original.keys() == mean.keys()
    for key in original:
        assert mean[key].dtype == original[key].dtype
        assert torch.equal(mean[key], original[key]), key
    reference = Translator.from_pretrained(tiny_checkpoint).translate(SENTENCES, GREEDY)
    assert Translator.from_pretrained(out).translate(SENTENCES, GREEDY) == reference
    assert Translator.from_pretrained(out).translate(SENTENCES) == (
        Translator.from_pretrained(tiny_checkpoint).translate(SENTENCES)
    )


def test_average_of_two_checkpoints_is_the_mean_of_their_weights(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    other = modified_copy(tiny_checkpoint, tmp_path / "other.ckpt", perturbed)
    out = tmp_path / "avg.ckpt"
    write_checkpoint(average_checkpoints([tiny_checkpoint, other]), out)
    a, b, mean = model_weights(tiny_checkpoint), model_weights(other), model_weights(out)
    changed = 0
    for key, value in mean.items():
        if value.is_floating_point():
            expected = ((a[key].double() + b[key].double()) / 2).float()
            assert torch.equal(value, expected), key
            changed += not torch.equal(value, a[key])
        else:
            assert torch.equal(value, a[key]), key
    assert changed > 0
    # the averaged file is a minitx checkpoint like any other: the payload of the first, the
    # files averaged recorded, no optimizer state of one of them
    averaged, first = load_checkpoint(out), load_checkpoint(tiny_checkpoint)
    payload = dict(averaged[CHECKPOINT_KEY])
    record = payload.pop(AVERAGED_KEY)
    assert payload == first[CHECKPOINT_KEY]
    assert [entry["file"] for entry in record] == [str(tiny_checkpoint), str(other)]
    assert record[0]["global_step"] == first["global_step"]
    assert "optimizer_states" not in averaged
    translations = Translator.from_pretrained(out).translate(SENTENCES, GREEDY)
    assert len(translations) == len(SENTENCES) and all(isinstance(t, str) for t in translations)
    # and it exports as a release directory like any checkpoint (minitx-export)
    release.save_pretrained(release.load(out), tmp_path / "release")
    exported = Translator.from_pretrained(tmp_path / "release")
    assert exported.translate(SENTENCES, GREEDY) == translations


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (  # the values in the order the message names the files: the other one's first
            lambda c: c[CHECKPOINT_KEY]["model_config"].update(d_ff=96),
            r"other.ckpt: cannot be averaged with .*: the model configs differ \(d_ff: 96 vs",
        ),
        (lambda c: c[CHECKPOINT_KEY].update(tokenizer=b"other"), "tokenizers differ"),
        (
            lambda c: c[CHECKPOINT_KEY].update(data={"src_lang": "en", "tgt_lang": "de"}),
            r"language pairs differ \(\{'src_lang': 'en', 'tgt_lang': 'de'\} vs",
        ),
    ],
    ids=["model_config", "tokenizer", "languages"],
)
def test_averaging_refuses_checkpoints_of_other_models(
    tiny_checkpoint: Path, tmp_path: Path, change, message: str
) -> None:
    other = modified_copy(tiny_checkpoint, tmp_path / "other.ckpt", change)
    with pytest.raises(CheckpointError, match=message) as info:
        average_checkpoints([tiny_checkpoint, other])
    assert str(other) in str(info.value) and "\n" not in str(info.value)


def test_averaging_runs_of_other_seeds_is_named_in_a_warning(
    tiny_checkpoint: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: two independently initialised runs averaged without a word into a broken model.
    Checkpoints of one seed (one run) average silently."""

    def reseeded(checkpoint: dict) -> None:
        payload = checkpoint[CHECKPOINT_KEY]
        assert "seed_everything: 0\n" in payload["train_config"]
        payload["train_config"] = payload["train_config"].replace(
            "seed_everything: 0\n", "seed_everything: 7\n"
        )

    def unseeded(checkpoint: dict) -> None:  # seed_everything: null, no seed set
        payload = checkpoint[CHECKPOINT_KEY]
        payload["train_config"] = payload["train_config"].replace(
            "seed_everything: 0\n", "seed_everything: null\n"
        )

    same = modified_copy(tiny_checkpoint, tmp_path / "same.ckpt", perturbed)
    # each with weights of its own: equal weights are refused
    other = modified_copy(
        tiny_checkpoint, tmp_path / "o.ckpt", lambda c: [reseeded(c), perturbed(c, 1)]
    )
    none = modified_copy(
        tiny_checkpoint, tmp_path / "n.ckpt", lambda c: [unseeded(c), perturbed(c, 2)]
    )
    with caplog.at_level("WARNING", logger="minitx.averaging"):
        average_checkpoints([tiny_checkpoint, same, none])  # null is no seed to compare
        assert caplog.text == ""
        average_checkpoints([tiny_checkpoint, same, other])
    assert f"other seeds (0 in {tiny_checkpoint}, 7 in {other})" in caplog.text


def test_an_average_among_the_inputs_is_named_in_a_warning_and_its_record_kept(
    tiny_checkpoint: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An average counts once, so the checkpoints inside it weigh less: said, and its own
    record of them is kept (it was recorded as one plain checkpoint)."""
    one = modified_copy(tiny_checkpoint, tmp_path / "one.ckpt", perturbed)
    two = modified_copy(tiny_checkpoint, tmp_path / "two.ckpt", lambda c: perturbed(c, 1))
    inner = tmp_path / "inner.ckpt"
    write_checkpoint(average_checkpoints([tiny_checkpoint, one]), inner)
    with caplog.at_level("WARNING", logger="minitx.averaging"):
        outer = average_checkpoints([inner, two])
    assert f"{inner} (2) is itself the mean of checkpoints" in caplog.text
    record = outer[CHECKPOINT_KEY][AVERAGED_KEY]
    assert [r["file"] for r in record[0][AVERAGED_KEY]] == [str(tiny_checkpoint), str(one)]
    assert AVERAGED_KEY not in record[1]


def test_averaging_refuses_nothing_unreadable_and_diverged(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="nothing to average"):
        average_checkpoints([])
    with pytest.raises(FileNotFoundError):
        average_checkpoints([tiny_checkpoint, tmp_path / "missing.ckpt"])
    link = tmp_path / "link.ckpt"
    link.symlink_to(tiny_checkpoint)
    spelt = tiny_checkpoint.parent / "." / tiny_checkpoint.name
    for again in (tiny_checkpoint, link, spelt):  # it would weigh twice in the mean
        with pytest.raises(ConfigError, match=r"is the same file as .*each checkpoint counts once"):
            average_checkpoints([tiny_checkpoint, again])

    def diverged(checkpoint: dict) -> None:
        state = checkpoint["state_dict"]
        key = next(
            k for k, v in state.items() if k.startswith(MODEL_PREFIX) and v.dtype.is_floating_point
        )
        state[key].fill_(float("nan"))

    nan = modified_copy(tiny_checkpoint, tmp_path / "nan.ckpt", diverged)
    with pytest.raises(CheckpointError, match="NaN or inf"):
        average_checkpoints([tiny_checkpoint, nan])


def test_state_dict_mean_is_float64_keeps_ties_and_checks_integer_buffers() -> None:
    shared = torch.tensor([1.0, 2.0], dtype=torch.float16)
    first = {"w": shared, "tied": shared, "count": torch.tensor([3])}
    second_w = torch.tensor([2.0, 4.0], dtype=torch.float16)
    second = {"w": second_w, "tied": second_w, "count": torch.tensor([3])}
    mean = average_state_dicts([first, second])
    assert torch.equal(mean["w"], torch.tensor([1.5, 3.0], dtype=torch.float16))
    assert mean["w"].dtype == torch.float16
    assert mean["tied"] is mean["w"]
    assert torch.equal(mean["count"], torch.tensor([3]))
    with pytest.raises(CheckpointError, match="integer/bool buffer count"):
        average_state_dicts([first, {**second, "count": torch.tensor([4])}])
    with pytest.raises(CheckpointError, match="tied differently"):
        average_state_dicts([first, {**second, "tied": second_w.clone()}])
    with pytest.raises(CheckpointError, match="lacks"):
        average_state_dicts([first, {"w": second_w, "tied": second_w}])
    with pytest.raises(ConfigError):
        average_state_dicts([])


# ------------------------------------------------------------------ the command


def test_average_command_end_to_end(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "avg.ckpt"
    other = modified_copy(tiny_checkpoint, tmp_path / "other.ckpt", perturbed)
    proc = run_python(  # a preloaded fork; the refusal below is a fresh process (no chatter)
        [PYTHON, "-m", "minitx.cli.average", "--out", str(out), str(tiny_checkpoint), str(other)],
        cwd=REPO_DIR,
        env=subprocess_env(),
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"averaged 2 checkpoints into {out}" in proc.stdout
    assert len(load_checkpoint(out)[CHECKPOINT_KEY][AVERAGED_KEY]) == 2
    in_process = tmp_path / "in_process.ckpt"
    write_checkpoint(average_checkpoints([tiny_checkpoint, other]), in_process)
    reference = Translator.from_pretrained(in_process).translate(SENTENCES, GREEDY)
    assert Translator.from_pretrained(out).translate(SENTENCES, GREEDY) == reference


def test_one_checkpoint_averaged_is_said(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A glob that matched one file wrote a weights-only copy, said as "averaged 1
    checkpoint"."""
    from minitx.cli import average

    out = tmp_path / "one.ckpt"
    assert average.main(["--out", str(out), str(tiny_checkpoint)]) == 0
    err = capsys.readouterr().err
    assert f"note: one checkpoint given: {out} holds its weights alone, nothing averaged" in err


def test_average_command_bad_input_is_one_line_and_status_2(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    other = modified_copy(
        tiny_checkpoint,
        tmp_path / "other.ckpt",
        lambda c: c[CHECKPOINT_KEY].update(tokenizer=b"other"),
    )
    out = tmp_path / "avg.ckpt"
    proc = subprocess.run(
        [PYTHON, "-m", "minitx.cli.average", "--out", str(out), str(tiny_checkpoint), str(other)],
        capture_output=True,
        text=True,
        cwd=REPO_DIR,
        env=subprocess_env(),
        timeout=180,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    assert "tokenizers differ" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_average_command_refusals_in_process(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "avg.ckpt"
    cases = [
        ([str(tiny_checkpoint), str(tmp_path / "missing.ckpt")], "missing.ckpt"),
        ([str(tiny_checkpoint), str(REPO_DIR / "README.md")], "not a readable minitx"),
        ([str(tiny_checkpoint), str(tmp_path)], "is a directory, not a .ckpt file"),
    ]
    for inputs, message in cases:
        assert average_main(["--out", str(out), *inputs]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1
    out.write_bytes(b"keep me")
    assert average_main(["--out", str(out), str(tiny_checkpoint)]) == 2
    assert "--overwrite" in capsys.readouterr().err and out.read_bytes() == b"keep me"
    # --overwrite replaced any file (a user's script); only a checkpoint now
    assert average_main(["--out", str(out), "--overwrite", str(tiny_checkpoint)]) == 2
    assert "is not a checkpoint" in capsys.readouterr().err and out.read_bytes() == b"keep me"
    shutil.copyfile(tiny_checkpoint, out)
    assert average_main(["--out", str(out), "--overwrite", str(tiny_checkpoint)]) == 0
    assert load_checkpoint(out)[CHECKPOINT_KEY][AVERAGED_KEY][0]["file"] == str(tiny_checkpoint)
    assert average_main(["--out", str(tmp_path), str(tiny_checkpoint)]) == 2
    assert "is a directory; give a file name inside it" in capsys.readouterr().err
    assert average_main(["--out", str(tmp_path / "no" / "avg.ckpt"), str(tiny_checkpoint)]) == 2
    assert "does not exist; create it first" in capsys.readouterr().err
    # a write that fails names --out, not the temporary file written beside it first
    denied = PermissionError(13, "Permission denied", str(tmp_path / ".avg.ckpt.tmp-1.tmp"))
    with mock.patch("minitx.checkpoint.write_checkpoint", side_effect=denied):
        assert average_main(["--out", str(tmp_path / "new.ckpt"), str(tiny_checkpoint)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: cannot write --out {tmp_path / 'new.ckpt'}: Permission denied\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_average_refuses_a_device_or_a_pipe_as_out(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Was: ``--out /dev/zero --overwrite`` read the device as a zip archive until memory ran
    out, and ``--out FIFO --overwrite`` waited forever for a writer (so the pipe is tried in a
    process of its own, with a time limit)."""
    assert average_main(["--out", os.devnull, "--overwrite", str(tiny_checkpoint)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --out {os.devnull} is a device or a pipe, not a file; " + (
        "a checkpoint is written to a file of its own: give a file name\n"
    )
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    command = [PYTHON, "-m", "minitx.cli.average", "--out", str(fifo), "--overwrite"]
    proc = subprocess.run(
        [*command, str(tiny_checkpoint)],
        capture_output=True,
        text=True,
        cwd=REPO_DIR,
        env=subprocess_env(),
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: --out {fifo} is a device")


# ------------------------------------------------------------------ the training callback


def test_callback_writes_the_mean_of_the_last_epochs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = train_tiny(
        tmp_path,
        max_epochs=3,
        extra=("--checkpoint.save_top_k=-1", "--averaging.last_n", "2"),
    )
    checkpoints = run.checkpoint.parent
    averaged_path = checkpoints / "averaged.ckpt"
    assert averaged_path.is_file()
    averaged = load_checkpoint(averaged_path)
    record = averaged[CHECKPOINT_KEY][AVERAGED_KEY]
    assert [entry["epoch"] for entry in record] == [1, 2]  # the last two of three epochs
    epochs = [next(checkpoints.glob(f"epoch{e:02d}-*.ckpt")) for e in (1, 2)]
    expected = model_weights(epochs[0]), model_weights(epochs[1])
    weights = {k: v for k, v in averaged["state_dict"].items() if k.startswith(MODEL_PREFIX)}
    for key, value in weights.items():
        mean = ((expected[0][key].double() + expected[1][key].double()) / 2).to(value.dtype)
        assert torch.equal(value, mean), key
    assert "train_config" in averaged[CHECKPOINT_KEY]  # the same payload as last.ckpt
    last = load_checkpoint(run.checkpoint)
    assert any(not torch.equal(v, last["state_dict"][k]) for k, v in weights.items())
    # the end-of-training test scores what the user would ship: the averaged weights
    out = capsys.readouterr().out
    assert re.search(r"test \(\d+ sentences\), averaged checkpoint \S*/averaged\.ckpt:", out), out
    translator = Translator.from_pretrained(averaged_path)
    written = (run.run_dir / "test.greedy.hyp").read_text().splitlines()
    assert written == translator.translate(TOY_TEST_SOURCES, GREEDY)


def test_callback_is_off_by_default_and_checks_its_settings() -> None:
    assert CheckpointAveraging().last_n == 0
    with pytest.raises(ConfigError, match="last_n"):
        CheckpointAveraging(last_n=-1)
    with pytest.raises(ConfigError, match="filename"):
        CheckpointAveraging(last_n=2, filename="sub/avg.ckpt")


def test_training_refuses_to_resume_from_a_weights_only_average(
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    from minitx.cli.train import main as train_main

    out = tmp_path / "avg.ckpt"
    write_checkpoint(average_checkpoints([tiny_checkpoint]), out)
    monkeypatch.chdir(tmp_path)
    previous_env = dict(os.environ)
    try:
        with pytest.raises(SystemExit) as info:
            train_main(["--config", str(TINY_CONFIG), "--ckpt_path", str(out)])
    finally:
        os.environ.clear()  # Lightning sets PL_GLOBAL_SEED & co.
        os.environ.update(previous_env)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error: --ckpt_path" in err and "weights-only" in err
