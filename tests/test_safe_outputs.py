"""No user file destroyed, no checkpoint half-written, no run clobbered.

- Files are replaced through a temporary file in their own directory and a rename
  (`minitx.textio.atomic_path`): a kill or a full disk at any instant leaves the previous file
  whole and no orphan elsewhere. Shown with real processes killed mid-write and a real, small
  filesystem (a tmpfs; skipped where this user may not mount one).
- ``--force`` replaces only a directory minitx wrote, never ``.``, ``..`` or a directory
  holding the input (`minitx.outputs`).
- Run directories are claimed atomically: two runs started at once never share one.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import PYTHON, TINY_CONFIG, TOY_CORPUS_DIR, command_module, subprocess_env
from preloaded import PreloadedProcess, run_python
from safetensors.torch import save_file

from minitx.checkpoint import write_checkpoint
from minitx.errors import OutputError
from minitx.outputs import MARKER, check_output_dir, check_output_file, replace_dir, written_whole
from minitx.release import check_release_dir
from minitx.textio import atomic_path, write_text_atomic


@contextlib.contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of `size` (e.g. ``"3m"``) at `where`; skip the test where mounting is not
    allowed (not root, or no CAP_SYS_ADMIN)."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip() or 'not root'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def a_checkpoint(version: int, megabytes: float) -> dict:
    n = int(megabytes * 1e6 / 4)
    return {"version": version, "state_dict": {"w": torch.full((n,), float(version))}}


def orphans(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name)


def minitx(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: int = 180
) -> subprocess.CompletedProcess[str]:
    """Command ``args[0]`` (``minitx-NAME``: ``python -m`` its module) with the other
    ``args`` in a child process, its output captured as text."""
    return run_python(
        [PYTHON, "-m", command_module(args[0]), *args[1:]],
        cwd=cwd,
        env=env or subprocess_env(),
        timeout=timeout,
    )


def ct2(*args: str) -> subprocess.CompletedProcess[str]:
    return minitx("ct2", *args)


# --- atomic replacement -------------------------------------------------------------------


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "hyp.txt"
    write_text_atomic(target, "old\n")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("the writer failed")
    assert target.read_text() == "old\n"
    assert orphans(tmp_path) == []


def test_a_link_keeps_pointing_where_it_did_and_a_device_is_written_in_place(
    tmp_path: Path,
) -> None:
    """`--output link.txt` replaces the file the link points to, not the user's link; a link to
    a device (``/dev/stdout`` is one) is written through, never replaced by a file (as root,
    the rename would replace /dev/stdout itself)."""
    real = tmp_path / "real.txt"
    real.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_text_atomic(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    device = tmp_path / "device"
    device.symlink_to(os.devnull)
    write_text_atomic(device, "into the device\n")
    assert device.is_symlink() and Path(os.devnull).is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["device", "link.txt", "real.txt"]


def test_a_full_disk_keeps_the_previous_checkpoint_and_names_the_destination(
    tmp_path: Path,
) -> None:
    with small_filesystem(tmp_path / "small", "3m") as disk:
        target = disk / "last.ckpt"
        write_checkpoint(a_checkpoint(1, 1.0), target)
        with pytest.raises(OutputError) as caught:
            write_checkpoint(a_checkpoint(2, 2.5), target)
        message = str(caught.value)
        assert str(target) in message and "about 2.5 MB needed" in message
        assert "free in" in message and "\n" not in message
        assert torch.load(target, weights_only=True)["version"] == 1
        assert orphans(disk) == []


KILLED_WRITERS = textwrap.dedent(
    """
    import os, sys, torch
    from minitx.training.checkpoint_io import AtomicCheckpointIO
    target = sys.argv[1]
    io = AtomicCheckpointIO()
    for line in sys.stdin:  # a writer for each line, forked: torch and Lightning imported once
        pid = os.fork()
        if pid == 0:
            for version in range(int(line), int(line) + 1000):
                weights = torch.full((6_000_000,), float(version))
                io.save_checkpoint({"version": version, "state_dict": {"w": weights}}, target)
                print(os.getpid(), version, flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print("reaped", flush=True)
    """
)


def test_a_kill_during_the_write_leaves_a_whole_checkpoint_and_no_orphan_elsewhere(
    tmp_path: Path,
) -> None:
    """Training's checkpoint writer, killed at random instants (SIGKILL) while it replaces
    last.ckpt, with the system's temporary directory on another filesystem (where Lightning's
    own writer copied a temporary file over the checkpoint)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    with small_filesystem(tmp_path / "tmpdir", "200m") as tmpdir:
        env = {**subprocess_env(), "TMPDIR": str(tmpdir)}
        target = runs / "last.ckpt"
        rng, version = random.Random(0), 1
        writers = subprocess.Popen(
            [PYTHON, "-c", KILLED_WRITERS, str(target)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writers.stdin is not None and writers.stdout is not None
        try:
            for _ in range(4):
                writers.stdin.write(f"{version}\n")
                writers.stdin.flush()
                pid = int(writers.stdout.readline().split()[0])  # one checkpoint is whole
                time.sleep(rng.uniform(0.0, 0.3))  # kill during one of the next ones
                os.kill(pid, signal.SIGKILL)
                while writers.stdout.readline().strip() != "reaped":
                    pass
                saved = torch.load(target, weights_only=True)
                assert saved["version"] >= version
                assert torch.equal(
                    saved["state_dict"]["w"][-3:], torch.full((3,), saved["version"])
                )
                left = [p for p in tmpdir.rglob("*") if p.is_file()]  # (torch makes an empty dir)
                assert left == []  # nothing left in the temporary directory
                assert len(orphans(runs)) <= 1  # at most the killed write's own temporary file
                version = saved["version"] + 1
        finally:
            writers.stdin.close()
            writers.wait(timeout=60)
        write_checkpoint(a_checkpoint(version, 0.1), target)  # the next write tidies up
        assert orphans(runs) == []


@pytest.mark.slow
def test_training_on_a_full_disk_stops_with_one_line_and_no_truncated_checkpoint(
    tmp_path: Path,
) -> None:
    """The tiny config writes ~1.5 MB checkpoints; a 3 MB runs directory fills during the first
    epoch's checkpoints. Every .ckpt left must load, and the error must name the file."""
    with small_filesystem(tmp_path / "runs", "3m") as runs:
        done = minitx(
            "train", "--config", str(TINY_CONFIG), "--runs_dir", str(runs),
            "--trainer.max_epochs", "2", "--test", "false",
            "--trainer.enable_progress_bar", "false",
            cwd=tmp_path,
            env={**subprocess_env(), "TMPDIR": str(tmp_path)},
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr[-3000:]
        last_line = done.stderr.strip().splitlines()[-1]
        assert last_line.startswith(f"error: cannot write {runs}/tiny/"), last_line
        assert ".ckpt" in last_line and "MB needed" in last_line
        checkpoints = sorted(runs.glob("tiny/*/checkpoints/*.ckpt"))
        assert checkpoints, "the first checkpoint fitted and should be there"
        for path in checkpoints:
            assert "state_dict" in torch.load(path, weights_only=True), path
        assert orphans(checkpoints[0].parent) == []


def test_training_writes_checkpoints_through_the_atomic_writer(tmp_path: Path) -> None:
    from minitx.cli.train import build_cli
    from minitx.training.checkpoint_io import AtomicCheckpointIO

    cli = build_cli(
        ["--config", str(TINY_CONFIG), "--runs_dir", str(tmp_path), "--trainer.max_epochs", "1"]
    )
    assert isinstance(cli.trainer.strategy.checkpoint_io, AtomicCheckpointIO)


# --- --force and output paths ---------------------------------------------------------------


@pytest.fixture
def nest(tmp_path: Path, tiny_checkpoint: Path) -> Path:
    """``a/b/`` holding a checkpoint, with a file of the user's in ``a/``: the probe's layout."""
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    (inner / "my.ckpt").write_bytes(tiny_checkpoint.read_bytes())
    (tmp_path / "a" / "notes.txt").write_text("mine\n")
    return inner


@pytest.mark.parametrize(
    ("out", "why"),
    [
        ("..", "current directory or one of its parents"),
        (".", "current directory or one of its parents"),
        ("../..", "current directory or one of its parents"),
    ],
)
def test_force_never_replaces_the_current_directory_or_its_parents(
    nest: Path, out: str, why: str
) -> None:
    pytest.importorskip("ctranslate2")
    before = sorted(p.relative_to(nest.parent.parent) for p in nest.parent.parent.rglob("*"))
    done = minitx("ct2", "--checkpoint", "my.ckpt", "--out", out, "--force", cwd=nest)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and why in done.stderr
    after = sorted(p.relative_to(nest.parent.parent) for p in nest.parent.parent.rglob("*"))
    assert after == before


def test_force_never_replaces_a_directory_holding_the_input(nest: Path) -> None:
    pytest.importorskip("ctranslate2")
    done = ct2("--checkpoint", str(nest / "my.ckpt"), "--out", str(nest), "--force")
    assert done.returncode == 2 and "holds (or is) the input" in done.stderr
    assert (nest / "my.ckpt").is_file()


def test_force_replaces_only_what_minitx_wrote(tmp_path: Path, tiny_checkpoint: Path) -> None:
    pytest.importorskip("ctranslate2")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work\n")
    done = ct2("--checkpoint", str(tiny_checkpoint), "--out", str(mine), "--force")
    assert done.returncode == 2 and "has no .minitx-output file" in done.stderr
    assert (mine / "thesis.tex").read_text() == "years of work\n"

    exported = tmp_path / "exported"
    assert ct2("--checkpoint", str(tiny_checkpoint), "--out", str(exported)).returncode == 0
    assert (exported / MARKER).is_file()
    again = ct2("--checkpoint", str(tiny_checkpoint), "--out", str(exported), "--force")
    assert again.returncode == 0, again.stderr
    assert (exported / "model.bin").is_file() and not list(tmp_path.glob(".exported.*"))

    empty = tmp_path / "empty"
    empty.mkdir()
    assert ct2("--checkpoint", str(tiny_checkpoint), "--out", str(empty), "--force").returncode == 0


def test_output_rules_in_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.ckpt").write_text("x")
    with pytest.raises(OutputError, match="current directory"):
        check_output_dir(tmp_path, force=True)
    with pytest.raises(OutputError, match="input"):
        check_output_dir(tmp_path / "sub", inputs=[tmp_path / "sub" / "x.ckpt"])
    with pytest.raises(OutputError, match="also an input"):
        check_output_file(tmp_path / "in.ckpt", inputs=[tmp_path / "in.ckpt"])
    check_output_dir(tmp_path / "new", inputs=[tmp_path / "in.ckpt"])  # a new directory: fine
    with pytest.raises(OutputError, match=r"--out-dir .*notes\.txt is a file; give a directory"):
        (tmp_path / "notes.txt").write_text("mine")
        check_output_dir(tmp_path / "notes.txt", force=True, flag="--out-dir")
    # a file where a directory above the output would be: not "does not exist" (mkdir -p
    # cannot help), nor the operating system's "File exists" once the work is done
    for inside in (Path("notes.txt", "maps"), Path("notes.txt", "a", "maps")):
        with pytest.raises(OutputError) as refused:
            check_output_dir(inside, flag="--out-dir")
        assert str(refused.value) == (
            f"--out-dir {inside}: notes.txt is a file, not a directory; give another path"
        )
        with pytest.raises(OutputError, match=r"notes\.txt is a file, not a directory"):
            check_output_file(inside / "x.txt")
        with pytest.raises(OutputError, match=r"notes\.txt is a file, not a directory"):
            check_release_dir(inside, flag="--out")
    with pytest.raises(OutputError, match=r"directory nothing does not exist; create it first"):
        check_output_file(Path("nothing", "x.txt"))


def test_a_replaced_directory_is_swapped_whole(tmp_path: Path) -> None:
    out, new = tmp_path / "out", tmp_path / ".out.new"
    out.mkdir()
    (out / "a").write_text("old")
    new.mkdir()
    (new / "b").write_text("new")
    replace_dir(new, out)
    assert sorted(p.name for p in out.iterdir()) == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_swap_that_fails_puts_the_old_directory_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, new = tmp_path / "out", tmp_path / ".out.new"
    out.mkdir()
    (out / "a").write_text("old")
    new.mkdir()
    renames = []

    def replace(src, dst) -> None:  # the second rename (new -> out) fails
        renames.append((Path(src).name, Path(dst).name))
        if len(renames) == 2:
            raise OSError(28, "No space left on device")
        os.rename(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        replace_dir(new, out)
    assert (out / "a").read_text() == "old"  # the old directory is back under its name
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.new", "out"]


def test_export_refuses_a_directory_that_is_not_a_minitx_release(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """A Hugging Face model directory has the same file names as a release (config.json,
    README.md, model.safetensors): minitx-export must not write over it."""
    hf = tmp_path / "hf-model"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "marian"}\n')
    (hf / "README.md").write_text("someone else's card\n")
    done = minitx("export", "--checkpoint", str(tiny_checkpoint), "--out", str(hf))
    assert done.returncode == 2 and "not a minitx release" in done.stderr
    assert (hf / "README.md").read_text() == "someone else's card\n"


def test_average_and_translate_refuse_an_output_that_is_an_input(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    ckpt = tmp_path / "a.ckpt"
    ckpt.write_bytes(tiny_checkpoint.read_bytes())
    size = ckpt.stat().st_size
    done = minitx("average", str(ckpt), "--out", str(ckpt), "--overwrite")
    assert done.returncode == 2 and "also an input" in done.stderr
    assert ckpt.stat().st_size == size
    source = tmp_path / "in.de"
    source.write_text("ein mann .\n")
    done = minitx(
        "translate", "--checkpoint", str(ckpt), "--input", str(source), "--output", str(source)
    )
    assert done.returncode == 2 and "also an input" in done.stderr
    assert source.read_text() == "ein mann .\n"


@pytest.mark.parametrize("to", ["--output", "standard output"])
def test_translate_never_writes_onto_the_file_standard_input_reads(
    to: str,
    tmp_path: Path,
    tiny_checkpoint: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Was: ``< f.de --output f.de`` replaced the sources by their translations (exit 0), and
    ``< f.de >> f.de`` read its own translations back until the disk was full."""
    from minitx.cli import translate

    source = tmp_path / "f.de"
    source.write_text("ein mann .\n", encoding="utf-8")
    argv = ["--checkpoint", str(tiny_checkpoint), "--beam", "1"]
    with source.open(encoding="utf-8") as stdin, source.open("a", encoding="utf-8") as appended:
        monkeypatch.setattr(sys, "stdin", stdin)
        if to == "--output":
            argv += ["--output", str(source)]
        else:
            monkeypatch.setattr(sys, "stdout", appended)
        status = translate.main(argv)
    assert status == 2
    said = "is the file standard input reads" if to == "--output" else "goes to the file standard"
    assert said in capsys.readouterr().err
    assert source.read_text(encoding="utf-8") == "ein mann .\n"


BINARY = r"holds binary \(or UTF-16\) data"


@pytest.mark.parametrize(
    ("command", "args", "replaced", "message"),
    [
        ("translate", ["--output", "{ckpt}", "ein mann ."], "{ckpt}", "is also an input"),
        ("evaluate", ["--hyp-out", "{ckpt}"], "{ckpt}", "is also an input"),
        ("evaluate", ["--hyp-out", "{data}/test.de"], "{data}/test.de", "is also an input"),
        ("evaluate", ["--json", "{data}/test.en"], "{data}/test.en", "is also an input"),
        (
            "evaluate",
            ["--json", "{data}/out.txt", "--hyp-out", "{data}/out.txt"],
            None,
            "--json .*out.txt is also the file of --hyp-out",
        ),
        ("translate", ["--output", "{other}", "ein mann ."], "{other}", BINARY),
        ("evaluate", ["--hyp-out", "{weights}"], "{weights}", BINARY),
        ("evaluate", ["--json", "{other}"], "{other}", BINARY),
        (
            "translate",
            ["--output", "{release}/config.json", "ein mann ."],
            "{release}",
            "is a file of the release .*, another command's output",
        ),
        (
            "evaluate",
            ["--hyp-out", "{maps}/attention.html"],
            "{maps}",
            "is a file of the attention-maps output .*, another command's output",
        ),
    ],
    ids=[
        "translate-over-checkpoint",
        "hyp-over-checkpoint",
        "hyp-over-source",
        "json-over-references",
        "json-over-hyp",
        "translate-over-another-checkpoint",
        "hyp-over-release-weights",
        "json-over-another-checkpoint",
        "translate-over-a-release-file",
        "hyp-over-a-file-of-marked-output",
    ],  # fmt: skip
)
def test_no_output_replaces_the_checkpoint_the_corpus_or_another_output(
    command: str,
    args: list[str],
    replaced: str | None,
    message: str,
    tmp_path: Path,
    tiny_checkpoint: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    """Was: exit 0, with the checkpoint or the references replaced by hypotheses; and with
    another checkpoint, a release's weights or its config.json, or a file of an output
    minitx wrote whole (not inputs of the command) replaced by text."""
    import re

    from minitx.cli import evaluate, translate

    data = tmp_path / "data"
    data.mkdir()
    for lang in ("de", "en"):
        source = TOY_CORPUS_DIR / f"test_2016_flickr.{lang}"
        (data / f"test.{lang}").write_bytes(source.read_bytes())
    ckpt, other, weights = tmp_path / "a.ckpt", tmp_path / "b.ckpt", tmp_path / "w.safetensors"
    for copy in (ckpt, other):
        copy.write_bytes(tiny_checkpoint.read_bytes())
    save_file({"w": torch.zeros(2)}, weights)
    from minitx import release

    release.save_pretrained(release.load(tiny_checkpoint), tmp_path / "release")
    with written_whole(tmp_path / "maps", "attention-maps") as maps:  # as minitx-visualize
        (maps / "attention.html").write_text("<html></html>\n", encoding="utf-8")
    names = {"ckpt": str(ckpt), "data": str(data), "other": str(other), "weights": str(weights)}
    names |= {"release": str(tmp_path / "release"), "maps": str(tmp_path / "maps")}
    argv = ["--checkpoint", str(ckpt), *(a.format(**names) for a in args)]
    if command == "evaluate":
        argv += ["--data", str(data), "--split", "test", "--beam", "1"]
    kept = [ckpt, other, weights, *data.iterdir(), *(tmp_path / "release").iterdir()]
    kept += [tmp_path / "maps" / "attention.html"]
    before = {p: p.read_bytes() for p in kept}
    status = {"translate": translate.main, "evaluate": evaluate.main}[command](argv)
    err = capsys.readouterr().err
    assert status == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and re.search(message, errors[0]), err
    assert {p: p.read_bytes() for p in kept} == before
    if replaced is not None:
        assert replaced.format(**names) in errors[0]


def test_evaluate_writes_again_beside_the_corpus_what_it_wrote_there(
    tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture
) -> None:
    """Was: the second run refused its own hypotheses (and --json) file as "also an input":
    every file of the --data directory counted as read, not the split's own files."""
    from minitx.cli import evaluate

    data = tmp_path / "data"
    data.mkdir()
    for lang in ("de", "en"):
        source = TOY_CORPUS_DIR / f"test_2016_flickr.{lang}"
        (data / f"test.{lang}").write_bytes(source.read_bytes())
    argv = ["--checkpoint", str(tiny_checkpoint), "--data", str(data), "--split", "test"]
    argv += ["--beam", "1", "--hyp-out", str(data / "test.hyp"), "--json", str(data / "s.json")]
    for _ in range(2):
        assert evaluate.main(argv) == 0, capsys.readouterr().err
    assert (data / "test.hyp").is_file() and (data / "s.json").is_file()


# --- run directories ----------------------------------------------------------------------

CLAIMS = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from minitx.outputs import claim_run_dir
    root, start = Path(sys.argv[1]), float(sys.argv[2])
    time.sleep(max(0.0, start - time.time()))
    claimed = [claim_run_dir(root) for _ in range(20)]
    for run_dir in claimed:  # a run writes into its directory (an empty one is removed at exit)
        (run_dir / "owner").write_text(str(id(claimed)))
    print(" ".join(run_dir.name for run_dir in claimed))
    """
)


def test_run_directories_are_claimed_once_even_within_a_second(tmp_path: Path) -> None:
    start = time.time() + 2.0  # both processes claim from the same instant
    workers = [
        subprocess.Popen(
            [PYTHON, "-c", CLAIMS, str(tmp_path), str(start)],
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    names = [name for w in workers for name in w.communicate(timeout=120)[0].split()]
    assert len(names) == 40 and len(set(names)) == 40
    assert sorted(names) == sorted(p.name for p in tmp_path.iterdir())


@pytest.mark.slow
def test_two_runs_started_at_once_get_their_own_directories(tmp_path: Path) -> None:
    command = [
        PYTHON, "-m", "minitx.cli.train", "--config", str(TINY_CONFIG),
        "--runs_dir", str(tmp_path / "runs"), "--trainer.max_steps", "3", "--test", "false",
        "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    env = {**subprocess_env(), "MINITX_RUN_VERSION": ""}
    with PreloadedProcess(command, cwd=tmp_path, env=env) as one:
        with PreloadedProcess(command, cwd=tmp_path, env=env) as other:
            for run in (one, other):
                _, err = run.communicate(timeout=300)
                assert run.returncode == 0, err[-3000:]
    run_dirs = sorted((tmp_path / "runs" / "tiny").iterdir())
    assert len(run_dirs) == 2
    for run_dir in run_dirs:
        rows = (run_dir / "csv" / "metrics.csv").read_text().splitlines()
        assert len(rows) > 1  # a header and this run's own rows
        assert (run_dir / "checkpoints" / "last.ckpt").is_file()


def test_a_run_that_wrote_nothing_leaves_no_directory(tmp_path: Path) -> None:
    done = minitx(
        "train", "--config", str(TINY_CONFIG), "--runs_dir", str(tmp_path / "runs"),
        "--data.src_lang", "xx",
        cwd=tmp_path,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert list((tmp_path / "runs" / "tiny").glob("*")) == []


TERMINATED_WRITER = """
import os, signal, sys, time
from minitx.cli import launch, {command} as cmd
def terminated(*args, **kwargs):
    for arg in args:  # visualize: its maps' temporary directory, with a file in it
        if isinstance(arg, os.PathLike) and os.path.isdir(arg):
            open(os.path.join(arg, "half.png"), "w").close()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler runs here
    raise AssertionError("SIGTERM did not stop the command")
cmd.{step} = terminated
sys.exit(launch.{command}())
"""


@pytest.mark.parametrize(
    ("command", "step", "args"),
    [
        ("translate", "format_results", ["--output", "out/hyp.txt", "ein mann ."]),
        ("visualize", "visualize", ["ein mann .", "--out-dir", "out/maps"]),
    ],
    ids=["translate", "visualize"],
)
def test_sigterm_while_writing_leaves_no_temporary_file(
    command: str, step: str, args: list[str], tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """A scheduler's SIGTERM while an output is being written: status 143, one line, and
    neither the output nor its temporary file (the signal's default left ``.hyp.txt.tmp-*``)."""
    (tmp_path / "out").mkdir()
    code = TERMINATED_WRITER.format(command=command, step=step)
    done = run_python(
        [PYTHON, "-c", code, "--checkpoint", str(tiny_checkpoint), *args],
        cwd=tmp_path,
        env=subprocess_env(),
        timeout=180,
    )
    assert done.returncode == 143, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == "terminated (SIGTERM): stopped before the end"
    assert list((tmp_path / "out").iterdir()) == []


def test_force_keeps_a_minitx_directory_that_now_holds_the_users_files(tmp_path: Path) -> None:
    """A directory minitx wrote, with a file of the user's added since (a note, a subfolder),
    is refused by --force: replacing it would delete them. Its own files, or fewer of them,
    are replaced as before."""
    out = tmp_path / "maps"
    with written_whole(out, "attention-maps") as tmp:
        (tmp / "attention.html").write_text("<html></html>")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "a.png").write_bytes(b"png")
    check_output_dir(out, force=True)  # only what minitx wrote
    (out / "sub" / "a.png").unlink()
    check_output_dir(out, force=True)  # fewer of its files: still minitx's
    (out / "mine.txt").write_text("precious")
    (out / "notes").mkdir()
    (out / "notes" / "b.txt").write_text("precious")
    with pytest.raises(
        OutputError, match=r"holds files minitx did not write \(mine\.txt, notes/b\.txt\)"
    ):
        check_output_dir(out, force=True, flag="--out-dir")
    (out / "mine.txt").unlink()
    (out / "notes" / "b.txt").unlink()
    check_output_dir(out, force=True)  # an empty folder of the user's is no file


def _a_place_that_takes_no_files(tmp_path: Path) -> Path:
    """A directory no file can be created in, for this user."""
    if os.geteuid() == 0:  # root writes in a read-only directory; /proc takes no new files
        return Path("/proc")
    place = tmp_path / "read-only"
    place.mkdir()
    place.chmod(0o555)
    return place


@pytest.mark.parametrize(
    ("name", "flag"), [("ct2", "--out"), ("export", "--out"), ("visualize", "--out-dir")]
)
def test_an_output_directory_in_a_place_that_takes_no_files_is_named_before_any_work(
    name: str, flag: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Was: minitx-ct2 loaded the model, then failed naming its temporary directory
    (``/proc/.m.tmp-NNN: No such file or directory``). The checkpoint here is no checkpoint:
    the output directory is refused before the model is read."""
    import importlib

    if name == "ct2":
        pytest.importorskip("ctranslate2")
    place = _a_place_that_takes_no_files(tmp_path)
    out = place / "new" / "model"  # its missing parents would be created in `place`
    module = importlib.import_module(command_module(name))
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint")
    argv = ["--checkpoint", str(tmp_path / "junk.ckpt"), flag, str(out)]
    assert module.main(argv + (["ein Hund"] if name == "visualize" else [])) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag} {out}: cannot write in {place} ("), err
    assert err.count("\n") == 1 and ".tmp-" not in err, err


def test_an_output_file_whose_directory_takes_no_files_is_refused_before_any_work(
    tmp_path: Path,
) -> None:
    """Was: evaluate translated the whole split, then failed to write ``--hyp-out``: the
    check every output file passes before any work refuses it now."""
    place = _a_place_that_takes_no_files(tmp_path)
    with pytest.raises(OutputError, match=r"--hyp-out .*x\.hyp: cannot write in "):
        check_output_file(place / "x.hyp", flag="--hyp-out")
    check_output_file(tmp_path / "x.hyp", flag="--hyp-out")  # a directory that takes files


def test_force_replaces_only_output_of_its_own_kind(tmp_path: Path) -> None:
    """Was: minitx-visualize --force deleted a CTranslate2 export, and minitx-ct2 --force a
    folder of attention maps; each marker says what it holds."""
    out = tmp_path / "maps"
    with written_whole(out, "attention-maps") as tmp:
        (tmp / "attention.html").write_text("<html></html>")
    check_output_dir(out, force=True, kind="attention-maps")
    with pytest.raises(
        OutputError,
        match=r"--out .*maps holds minitx output of another kind \(attention-maps, "
        r"not ctranslate2\), so --force does not replace it",
    ):
        check_output_dir(out, force=True, kind="ctranslate2")
    assert (out / "attention.html").is_file()


def test_an_output_that_cannot_be_replaced_is_named_not_its_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rename refused onto the user's file (an immutable file, say) names that file, says it
    is unchanged, and leaves no temporary file; a device with no room is named too."""
    import errno
    import os

    target = tmp_path / "out.txt"
    target.write_text("old\n")

    def refuse(src: object, dst: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted", str(src))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OutputError, match=r"cannot replace .*out\.txt: Operation not permitted"):
        write_text_atomic(target, "new\n")
    monkeypatch.undo()
    assert target.read_text() == "old\n" and sorted(tmp_path.iterdir()) == [target]

    if Path("/dev/full").exists():
        with pytest.raises(OutputError, match=r"cannot write /dev/full: No space left"):
            with atomic_path("/dev/full") as path, open(path, "w") as file:
                file.write("x" * 10_000)


def test_force_cannot_tell_the_files_of_an_output_whose_marker_lists_none(tmp_path: Path) -> None:
    """A marker without the file list (an older minitx wrote it, or it was damaged) cannot
    tell the user's files from minitx's: --force says so, and replaces nothing."""
    out = tmp_path / "maps"
    out.mkdir()
    (out / MARKER).write_text('{"written_by": "minitx", "kind": "attention-maps"}\n')
    (out / "attention.html").write_text("<html></html>")
    with pytest.raises(OutputError, match=r"older minitx, whose \.minitx-output file lists no"):
        check_output_dir(out, force=True, flag="--out-dir")


@pytest.mark.skipif(sys.platform == "win32", reason="no advisory locks (fcntl) on Windows")
def test_a_run_directory_that_cannot_be_locked_trains_unguarded_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Only "held by another process" refuses a run directory; a filesystem that locks no
    directory (NFS answers EBADF) trains as before, with a warning."""
    import errno
    import fcntl

    from minitx import outputs

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with caplog.at_level("WARNING", logger="minitx.outputs"):
        outputs.hold_run_dir(tmp_path)
    assert f"{tmp_path.resolve()} cannot be locked (Bad file descriptor)" in caplog.text
    assert tmp_path.resolve() not in outputs._HELD


def test_an_output_directory_given_as_a_link_is_written_into_its_target(tmp_path: Path) -> None:
    """The link was renamed aside and a real directory took its name: the target stayed empty
    and a stray ``.link.old-PID`` link was left (rmtree refuses a link, quietly)."""
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    with written_whole(link, "attention-maps") as tmp:
        (tmp / "a.png").write_bytes(b"png")
    assert link.is_symlink() and (target / "a.png").read_bytes() == b"png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "target"]


def test_an_output_with_a_long_name_is_written(tmp_path: Path) -> None:
    """Was: a name of 229 to 255 bytes refused as "File name too long", the temporary file's
    name (the name, the host, the process) being over the limit, not the file's."""
    out = tmp_path / ("w" * 250)
    write_text_atomic(out, "hi\n")
    assert out.read_text() == "hi\n" and sorted(tmp_path.iterdir()) == [out]
    with atomic_path(out) as tmp:
        assert tmp.name.startswith(f".{'w' * 100}~") and len(tmp.name.encode()) < 255
    folder = tmp_path / ("d" * 250)  # a release, say: its temporary and old folders too
    for _ in range(2):  # made, then replaced
        with written_whole(folder, "test") as tmp:
            (tmp / "f").write_text("1")
    assert (folder / "f").read_text() == "1" and len(list(tmp_path.iterdir())) == 2
