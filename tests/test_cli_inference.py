"""The inference commands (minitx/cli: translate, evaluate, visualize) on the tiny checkpoint.

Most tests call a command's `main(argv)` in-process (fast); a few run the commands as real
subprocesses (`python -m minitx.cli.NAME`, and the installed console scripts `minitx-NAME`),
for piped standard input, exit statuses and the entry points themselves.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import logging
import os
import re
import selectors
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from helpers import (
    PYTHON,
    TOY_CORPUS_DIR,
    TOY_TEST_REFERENCES,
    TOY_TEST_SOURCES,
    parse_alignment,
    subprocess_env,
)
from helpers import command_module as script_module
from preloaded import run_python
from sacrebleu.metrics import BLEU

from minitx.decoding import DEFAULT_BEAM_SIZE, DecodingConfig
from minitx.translator import Translator


def command_module(name: str) -> ModuleType:
    """The module of command minitx-NAME (its console script runs its `main`)."""
    return importlib.import_module(script_module(name))


@pytest.fixture(scope="module")
def translate_command() -> ModuleType:
    return command_module("translate")


@pytest.fixture(scope="module")
def evaluate_command() -> ModuleType:
    return command_module("evaluate")


@pytest.fixture(scope="module")
def translator(tiny_checkpoint: Path) -> Translator:
    return Translator.from_pretrained(tiny_checkpoint)


@pytest.fixture
def greedy_on_toy(tiny_checkpoint: Path, tmp_path: Path) -> list[str]:
    """minitx-evaluate's arguments for greedy decoding of the toy test split with a copy of
    the tiny checkpoint, `tmp_path / "model.ckpt"` (its hypotheses files go beside it)."""
    checkpoint = tmp_path / "model.ckpt"
    shutil.copyfile(tiny_checkpoint, checkpoint)
    return ["--checkpoint", str(checkpoint), "--data", str(TOY_CORPUS_DIR), "--beam", "1"]


def run_command(
    name: str,
    args: list[str],
    *,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    python_flags: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """minitx-NAME with `args` as a real process (`python [python_flags] -m minitx.cli.NAME`)."""
    return subprocess.run(
        [PYTHON, *(python_flags or []), "-m", f"minitx.cli.{name}", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        cwd=cwd,
        env=subprocess_env(),
        timeout=180,
    )


def toy_named(name: str, corpus: Path = TOY_CORPUS_DIR) -> str:
    """`name` with ``.toy.`` replaced by the tag minitx-evaluate gives `corpus`'s --data (its
    folder's name and a digest of its path)."""
    from minitx.cli.evaluate import data_tag

    return name.replace(".toy.", f".{data_tag(str(corpus))}.")


class FakeStdin(io.TextIOWrapper):
    """Standard input over bytes; `tty=True` makes it look like a terminal, which gives the
    reader one line at a time."""

    def __init__(self, data: bytes, *, tty: bool = False, errors: str = "strict") -> None:
        raw = io.BufferedReader(_LineReads(data)) if tty else io.BytesIO(data)
        super().__init__(raw, encoding="utf-8", errors=errors)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class _LineReads(io.RawIOBase):
    """Bytes read one line per read, as from a terminal."""

    def __init__(self, data: bytes) -> None:
        self.lines = data.splitlines(keepends=True)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:
        line = self.lines.pop(0) if self.lines else b""
        buffer[: len(line)] = line
        return len(line)


# ------------------------------------------------------------------------------ translate
def test_translate_arguments(translate_command, translator, tiny_checkpoint, capsys) -> None:
    sentences = [TOY_TEST_SOURCES[0], "ein hund", TOY_TEST_SOURCES[5]]
    assert translate_command.main(["--checkpoint", str(tiny_checkpoint), *sentences]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == translator.translate(sentences, beam_size=DEFAULT_BEAM_SIZE)
    assert "Traceback" not in err

    assert (
        translate_command.main(
            ["--checkpoint", str(tiny_checkpoint), "--beam", "1", "--batch-size", "1", *sentences]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines() == translator.translate(sentences, beam_size=1)


PLAIN_SUMMARY = r"translated {n} sentences in \d+\.\d s \(\d+\.\d sentences/s\)"


def test_translate_progress_is_one_summary_line_in_a_log(
    translate_command, translator, tiny_checkpoint, capsys
) -> None:
    sentences = TOY_TEST_SOURCES[:4]
    args = ["--checkpoint", str(tiny_checkpoint), "--beam", "1", "--batch-size", "2", *sentences]
    assert translate_command.main(args) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == translator.translate(sentences, beam_size=1)
    assert re.fullmatch(PLAIN_SUMMARY.format(n=4), err.strip()), err  # no bar frames, no \r


def test_the_summary_line_times_the_translation_alone(monkeypatch, capsys) -> None:
    """minitx-evaluate's line counted the scoring after the last batch: "1000 sentences in
    1.1 s" where its report said 0.6 s."""
    from minitx.cli import common

    now = [100.0]
    monkeypatch.setattr(common.time, "perf_counter", lambda: now[0])
    with common.sentence_progress(4, "greedy") as progress:
        for _ in range(2):
            now[0] += 0.5
            progress(2)
        now[0] += 3.0  # scoring
    assert capsys.readouterr().err == (
        "greedy: translated 4 sentences in 1.0 s (4.0 sentences/s)\n"
    )


def test_translate_progress_bar_on_a_terminal(
    translate_command, translator, tiny_checkpoint, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    sentences = TOY_TEST_SOURCES[:4]
    args = ["--checkpoint", str(tiny_checkpoint), "--beam", "1", "--batch-size", "2", *sentences]
    assert translate_command.main(args) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == translator.translate(sentences, beam_size=1)  # results unchanged
    assert "4/4" in err and "sentences/s" in err  # the bar, on standard error
    assert not re.search(PLAIN_SUMMARY.format(n=4), err)


def test_translate_input_file_keeps_lines(
    translate_command, translator, tiny_checkpoint, tmp_path, capsys
) -> None:
    """Empty lines stay empty; CRLF endings and a BOM are tolerated; --output writes a file."""
    lines = [TOY_TEST_SOURCES[0], "", TOY_TEST_SOURCES[1], "   ", TOY_TEST_SOURCES[2]]
    source = tmp_path / "input.de"
    source.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    output = tmp_path / "output.en"
    args = [
        "--checkpoint",
        str(tiny_checkpoint),
        "--input",
        str(source),
        "--output",
        str(output),
        "--beam",
        "2",
        "--alpha",
        "0.6",
    ]
    assert translate_command.main(args) == 0
    assert capsys.readouterr().out == ""
    written = output.read_text(encoding="utf-8")
    assert written.endswith("\n")
    got = written.split("\n")[:-1]
    assert len(got) == len(lines)
    assert got[1] == got[3] == ""
    assert got == translator.translate(lines, beam_size=2, alpha=0.6)


def test_translate_stdin_pipe_subprocess(translator, tiny_checkpoint) -> None:
    lines = [TOY_TEST_SOURCES[0], "", TOY_TEST_SOURCES[4]]
    proc = run_command(
        "translate",
        ["--checkpoint", str(tiny_checkpoint), "--beam", "1"],
        stdin="\n".join(lines).encode() + b"\n",
    )
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("utf-8")
    assert out.count("\n") == 3
    assert out.split("\n")[:-1] == translator.translate(lines, beam_size=1)
    assert out.split("\n")[1] == ""


def test_translate_dash_is_standard_input_and_output(translator, tiny_checkpoint, tmp_path) -> None:
    """``--input -`` and ``--output -`` as Unix commands read them, not files called "-" (to
    find, or to create); ``./-`` is a file called so."""
    lines = [TOY_TEST_SOURCES[0], TOY_TEST_SOURCES[4]]
    stdin = "\n".join(lines).encode() + b"\n"
    args = ["--checkpoint", str(tiny_checkpoint), "--beam", "1", "--input", "-"]
    proc = run_command("translate", [*args, "--output", "-"], stdin=stdin, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode("utf-8").split("\n")[:-1] == translator.translate(lines, beam_size=1)
    assert not (tmp_path / "-").exists()
    proc = run_command("translate", [*args, "--output", "./-"], stdin=stdin, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == b"", proc.stderr.decode()
    assert (tmp_path / "-").read_text(encoding="utf-8").split("\n")[:-1] == translator.translate(
        lines, beam_size=1
    )


@pytest.mark.skipif(not Path("/proc/self/fd/1").exists(), reason="needs /proc (Linux)")
def test_translate_output_through_a_link_to_standard_output(
    translator, tiny_checkpoint, tmp_path
) -> None:
    """``--output /dev/stdout`` prints: the link (here one of the test's own, made as
    /dev/stdout is) is written through, not replaced by a file."""
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    args = ["--checkpoint", str(tiny_checkpoint), "--beam", "1", "--output", str(link)]
    proc = run_command("translate", [*args, TOY_TEST_SOURCES[0]])
    assert proc.returncode == 0, proc.stderr.decode()
    assert (
        proc.stdout.decode("utf-8")
        == translator.translate([TOY_TEST_SOURCES[0]], beam_size=1)[0] + "\n"
    )
    assert link.is_symlink()


def test_output_to_dev_stdout_appended_to_a_log_keeps_the_log(
    translator, tiny_checkpoint, tmp_path
) -> None:
    """``... --output /dev/stdout >> log``: /dev/stdout is then the log file itself, which the
    rename of a finished output replaced whole, losing the log. It is written through the
    stream, as ``-``; so is evaluate's ``--json /dev/stdout``; its ``--hyp-out /dev/stdout``
    is refused."""
    log = tmp_path / "log.txt"
    log.write_text("earlier line\n")

    def appended_to_the_log(name: str, args: list[str]) -> subprocess.CompletedProcess:
        command = [PYTHON, "-m", f"minitx.cli.{name}", *args]
        return run_python(command, env=subprocess_env(), stdout=log)  # as the shell's `>> log`

    sentence = TOY_TEST_SOURCES[0]
    args = ["--checkpoint", str(tiny_checkpoint), "--beam", "1", "--output", "/dev/stdout"]
    proc = appended_to_the_log("translate", [*args, sentence])
    assert proc.returncode == 0, proc.stderr
    expected = translator.translate([sentence], beam_size=1)[0]
    assert log.read_text() == f"earlier line\n{expected}\n"
    evaluate = ["--checkpoint", str(tiny_checkpoint), "--data", str(TOY_CORPUS_DIR), "--beam", "1"]
    proc = appended_to_the_log(
        "evaluate", [*evaluate, "--hyp-out", str(tmp_path / "h.hyp"), "--json", "/dev/stdout"]
    )
    assert proc.returncode == 0, proc.stderr
    earlier, report = log.read_text().split("\n", 2)[:2], log.read_text().split("\n", 2)[2]
    assert earlier == ["earlier line", expected] and json.loads(report)["results"]
    # a file that has no stream form (hypotheses) is refused there, not renamed over the log
    before = log.read_text()
    proc = appended_to_the_log("evaluate", [*evaluate, "--hyp-out", "/dev/stdout"])
    assert proc.returncode == 2 and "is the file this command's standard output" in proc.stderr
    assert log.read_text() == before
    # into a pipe it was written through, and the hypotheses broke the JSON after them (exit 0)
    proc = run_command("evaluate", [*evaluate, "--hyp-out", "/dev/stdout", "--json", "-"])
    assert proc.returncode == 2 and not proc.stdout, proc.stdout[-300:]
    assert b"--hyp-out /dev/stdout is the pipe or terminal this command's standard" in proc.stderr
    # /dev/null is neither: written in place, as before
    hyp_to_null = [*evaluate, "--hyp-out", "/dev/null", "--json", str(tmp_path / "s.json")]
    proc = run_python(  # standard output is /dev/null too
        [PYTHON, "-m", "minitx.cli.evaluate", *hyp_to_null],
        env=subprocess_env(),
        stdout=Path(os.devnull),
    )
    assert proc.returncode == 0, proc.stderr[-500:]


def test_translate_stdin_in_process(
    translate_command, translator, tiny_checkpoint, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("sys.stdin", FakeStdin(b"eine frau\n\nzwei hunde"))  # no final newline
    assert translate_command.main(["--checkpoint", str(tiny_checkpoint), "--beam", "1"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == translator.translate(
        ["eine frau", "", "zwei hunde"], beam_size=1
    )


def test_carriage_return_line_ends_are_refused_not_read_as_one_sentence(
    translate_command, translator, tiny_checkpoint, tmp_path, monkeypatch, capsys
) -> None:
    """Was: text with \\r-only line ends translated as one sentence, exit 0 (evaluate and the
    corpus readers refused it); a stray \\r inside a line is still text."""
    text = f"{TOY_TEST_SOURCES[0]}\r{TOY_TEST_SOURCES[1]}\r".encode()
    source = tmp_path / "mac.de"
    source.write_bytes(text)
    args = ["--checkpoint", str(tiny_checkpoint), "--beam", "1"]
    assert translate_command.main([*args, "--input", str(source)]) == 2
    assert "mac.de: no \\n in the text, but carriage returns" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", FakeStdin(text))
    assert translate_command.main(args) == 2
    assert "<stdin>: no \\n in the text" in capsys.readouterr().err
    proc = run_command("translate", args, stdin=text)  # a pipe: the select-driven reader
    assert proc.returncode == 2 and b"<stdin>: no \\n in the text" in proc.stderr
    stray = f"{TOY_TEST_SOURCES[0]} \r {TOY_TEST_SOURCES[1]}"
    monkeypatch.setattr("sys.stdin", FakeStdin(stray.encode() + b"\n"))
    assert translate_command.main(args) == 0
    assert capsys.readouterr().out == translator.translate([stray], beam_size=1)[0] + "\n"


def test_translate_empty_stdin(translate_command, tiny_checkpoint, monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin", FakeStdin(b""))
    assert translate_command.main(["--checkpoint", str(tiny_checkpoint)]) == 0
    assert capsys.readouterr().out == ""


def test_translate_interactive_prompt(
    translate_command, translator, tiny_checkpoint, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("sys.stdin", FakeStdin(b"eine frau\n\nzwei hunde\n", tty=True))
    assert translate_command.main(["--checkpoint", str(tiny_checkpoint), "--beam", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.split("\n")[:-1] == translator.translate(
        ["eine frau", "", "zwei hunde"], beam_size=1
    )
    assert err.count(translate_command.PROMPT) == 4  # three lines, then EOF at the fourth prompt


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"], ids=["utf-8", "c-locale"])
def test_a_line_typed_at_the_prompt_that_is_not_utf8_is_said_and_the_prompt_goes_on(
    errors: str, translate_command, translator, tiny_checkpoint, monkeypatch, capsys
) -> None:
    """Was: a traceback, status 1 (the tokenizer's error on a lone surrogate, or the terminal's
    UnicodeDecodeError), where a piped line or an argument gets a message."""
    typed = b"eine frau\n\xff\xfe bad\nzwei hunde\n"
    monkeypatch.setattr("sys.stdin", FakeStdin(typed, tty=True, errors=errors))
    assert translate_command.main(["--checkpoint", str(tiny_checkpoint), "--beam", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.split("\n")[:-1] == translator.translate(["eine frau", "zwei hunde"], beam_size=1)
    warnings = [line for line in err.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and "(byte 0xff" in warnings[0] and "type it again" in warnings[0]
    assert "Traceback" not in err


def test_an_alignment_layer_the_model_lacks_is_refused_before_the_prompt(
    translate_command, tiny_checkpoint, monkeypatch, capsys
) -> None:
    """--alignment-layer 5 on a 1-layer model was refused only once a typed sentence was
    being translated."""
    monkeypatch.setattr("sys.stdin", FakeStdin(b"eine frau\n", tty=True))
    args = ["--checkpoint", str(tiny_checkpoint), "--print-alignment", "--alignment-layer", "5"]
    assert translate_command.main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and translate_command.PROMPT not in err, err
    assert err.startswith("error: alignment layer 5 does not exist: the model has 1"), err


def test_translate_n_best(translate_command, translator, tiny_checkpoint, capsys) -> None:
    sentences = [TOY_TEST_SOURCES[0], "", TOY_TEST_SOURCES[8]]
    assert (
        translate_command.main(
            ["--checkpoint", str(tiny_checkpoint), "--beam", "4", "--n-best", "3", *sentences]
        )
        == 0
    )
    rows = [line.split("\t") for line in capsys.readouterr().out.split("\n")[:-1]]
    assert all(len(row) == 3 for row in rows)
    by_index: dict[int, list[tuple[float, str]]] = {}
    for index, score, text in rows:
        by_index.setdefault(int(index), []).append((float(score), text))
    assert sorted(by_index) == [0, 1, 2]
    assert by_index[1] == [(0.0, "")]  # an empty input line: one empty hypothesis
    best = translator.translate(sentences, beam_size=4)
    for i in (0, 2):
        hyps = by_index[i]
        assert len(hyps) == 3
        assert [s for s, _ in hyps] == sorted((s for s, _ in hyps), reverse=True)
        assert hyps[0][1] == best[i]


def test_translate_missing_checkpoint_subprocess(tmp_path) -> None:
    proc = run_command("translate", ["--checkpoint", str(tmp_path / "no_such.ckpt"), "ein mann"])
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert err.startswith("error: ") and "no_such.ckpt" in err
    assert "Traceback" not in err
    assert proc.stdout == b""


@pytest.mark.parametrize("kind", ["truncated", "foreign", "text"])
def test_translate_bad_checkpoint(
    translate_command, tiny_checkpoint, tmp_path, capsys, kind
) -> None:
    path = tmp_path / f"{kind}.ckpt"
    if kind == "truncated":
        data = tiny_checkpoint.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "foreign":
        import torch

        torch.save({"state_dict": {}}, path)
    else:
        path.write_text("hello world\n")
    assert translate_command.main(["--checkpoint", str(path), "ein mann"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: ") and str(path) in err and err.count("\n") == 1


def test_translate_invalid_utf8_names_the_line(
    translate_command, tiny_checkpoint, tmp_path, capsys
) -> None:
    source = tmp_path / "latin1.de"
    source.write_bytes("ein mann\nzwei hunde\nein mädchen\n".encode("latin-1"))
    assert (
        translate_command.main(["--checkpoint", str(tiny_checkpoint), "--input", str(source)]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(source) in err and "line 3" in err and "UTF-8" in err


@pytest.mark.parametrize(
    ("encoding", "line", "how", "fix"),
    [
        ("utf-16-le", 1, "NUL byte", "iconv -f utf-16"),
        ("utf-16", 1, "invalid start byte", "iconv -f utf-16"),
        # one NUL in a file of UTF-8 lines: re-encoding it from UTF-16 would garble them all
        (None, 2, "NUL byte", "other lines hold none: remove it, e.g. `tr -d '\\000'`"),
        # one Latin-1 line among UTF-8 ones with umlauts, before or after it: the same
        ("mixed", 3, "invalid continuation byte", "fix or delete that line"),
        ("mixed-first", 1, "invalid continuation byte", "fix or delete that line"),
        ("latin-1", 3, "invalid continuation byte", "iconv -f latin1"),  # a Latin-1 file
    ],
    ids=["utf16-ascii", "utf16-bom", "nul-in-utf8", "latin1-in-utf8", "latin1-first", "latin1"],
)
def test_translate_refuses_utf16_and_nul_bytes_naming_utf16(
    translate_command, tiny_checkpoint, tmp_path, capsys, encoding, line, how, fix
) -> None:
    """UTF-16 of plain ASCII is valid UTF-8 with a NUL in every other byte: refused, not
    translated as garbage, and the hint names UTF-16 rather than Latin-1. A file whose lines
    before the bad byte are UTF-8 is told to fix that line, not to re-encode the file."""
    source = tmp_path / "input.de"
    text = "ein mann\nzwei hunde\n"
    if encoding == "mixed":
        data = "ein mädchen\nzwei hunde\n".encode() + "drei mädchen\n".encode("latin-1")
    elif encoding == "mixed-first":
        data = "drei mädchen\n".encode("latin-1") + "ein mädchen\nzwei hunde\n".encode()
    elif encoding == "latin-1":
        data = "ein mann\nzwei hunde\ndrei mädchen\n".encode("latin-1")
    else:
        data = text.encode(encoding) if encoding else b"ein mann\nzwei\x00 hunde\n"
    source.write_bytes(data)
    assert (
        translate_command.main(["--checkpoint", str(tiny_checkpoint), "--input", str(source)]) == 2
    )
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1
    assert f"{source}: line {line} " in err and how in err and fix in err, err


@pytest.mark.parametrize("name", ["input.de.gz", "input.txt"])
def test_translate_reads_a_gzip_input_file_as_corpora_are_read(
    translate_command, translator, tiny_checkpoint, tmp_path, capsys, name
) -> None:
    """A gzip file (known by its bytes, whatever its name) is read as its text, as evaluate
    and training read corpus files; it was refused as "not valid UTF-8, iconv -f latin1"."""
    lines = TOY_TEST_SOURCES[:3]
    source = tmp_path / name
    source.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode("utf-8")))
    args = ["--checkpoint", str(tiny_checkpoint), "--input", str(source), "--beam", "1"]
    assert translate_command.main(args) == 0
    assert capsys.readouterr().out.splitlines() == translator.translate(lines, beam_size=1)


def test_translate_says_a_damaged_or_piped_gzip_file_is_compressed(
    translate_command, tiny_checkpoint, tmp_path, monkeypatch, capsys
) -> None:
    packed = gzip.compress(b"ein mann\nzwei hunde\n")
    source = tmp_path / "cut.de.gz"
    source.write_bytes(packed[:20])
    args = ["--checkpoint", str(tiny_checkpoint)]
    assert translate_command.main([*args, "--input", str(source)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {source}: cannot read the gzip file") and "latin1" not in err
    # zcat left out of a pipe; the second holds a \r and no \n, as gzip.compress's output
    # does at some times of day (its header holds the time): it was "old Mac line ends"
    for piped in (packed, gzip.compress(b"ein mann", mtime=0)[:10] + b"\r\x00"):
        monkeypatch.setattr("sys.stdin", FakeStdin(piped))
        assert translate_command.main(args) == 2
        err = capsys.readouterr().err
        assert (
            err == "error: <stdin> is gzip-compressed, not text: decompress it, e.g. `gzip -dc`\n"
        )


def test_translate_says_a_checkpoint_given_as_its_input_is_no_text(
    translate_command, tiny_checkpoint, capsys
) -> None:
    """A checkpoint (a zip archive) as the input: said so, not "re-encode it from UTF-16"."""
    args = ["--checkpoint", str(tiny_checkpoint), "--input", str(tiny_checkpoint)]
    assert translate_command.main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {tiny_checkpoint} is a zip archive (a checkpoint, say), not text: give a text "
        "file, one sentence per line\n"
    )


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_translate_reads_a_device_as_input_in_bounded_memory(
    translate_command, tiny_checkpoint, capsys
) -> None:
    """``--input /dev/zero`` was read whole (`read_bytes`) and ended in a MemoryError."""
    args = ["--checkpoint", str(tiny_checkpoint), "--input", "/dev/zero"]
    assert translate_command.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: /dev/zero: line 1 runs past ") and err.count("\n") == 1, err


def test_translate_invalid_utf8_on_stdin(
    translate_command, tiny_checkpoint, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("sys.stdin", FakeStdin(b"ok\n\xff\xfe\n"))
    assert translate_command.main(["--checkpoint", str(tiny_checkpoint)]) == 2
    assert "<stdin>: line 2" in capsys.readouterr().err


def test_translate_missing_input_file(translate_command, tiny_checkpoint, tmp_path, capsys) -> None:
    assert (
        translate_command.main(
            ["--checkpoint", str(tiny_checkpoint), "--input", str(tmp_path / "none.de")]
        )
        == 2
    )
    assert "input file not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--beam", "2", "--n-best", "3", "x"], "--n-best"),
        (["--beam", "0", "x"], "--beam"),
        (["--batch-size", "0", "x"], "--batch-size"),
        (["--input", "f.txt", "x"], "not both"),
        (["--sample", "--beam", "2", "x"], "exclude each other"),
        (["--top-k", "3", "--seed", "1", "x"], "--top-k, --seed apply only with --sample"),
        (["--sample", "--top-p", "0", "x"], "--top-p must be in (0, 1]"),
        (["--sample", "--n-best", "0", "x"], "--n-best"),
        (["--alignment-unit", "piece", "x"], "only with --print-alignment"),
        (["--print-alignment", "--alignment-layer", "last", "x"], "integer or 'mean'"),
        (["--buffer-size", "0", "x"], "--buffer-size"),
        # it was accepted and ignored
        (["--buffer-size", "5", "x"], "--buffer-size applies only to piped standard input, not"),
        (["--buffer-size", "5", "--input", "f.txt"], "not to --input FILE"),
        (["--beam", "1", "--alpha", "2", "x"], "--alpha applies only to beam search"),
    ],
)
def test_translate_bad_arguments(translate_command, tiny_checkpoint, capsys, args, message) -> None:
    with pytest.raises(SystemExit) as exc:
        translate_command.main(["--checkpoint", str(tiny_checkpoint), *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_translate_buffer_size_is_refused_at_a_terminal(
    translate_command, tiny_checkpoint, monkeypatch, capsys
) -> None:
    """The prompt reads a line at a time: --buffer-size was accepted and ignored there."""
    monkeypatch.setattr("sys.stdin", FakeStdin(b"eine frau\n", tty=True))
    with pytest.raises(SystemExit) as exc:
        translate_command.main(["--checkpoint", str(tiny_checkpoint), "--buffer-size", "4"])
    assert exc.value.code == 2
    assert "--buffer-size applies only to piped standard input, not to a terminal" in (
        capsys.readouterr().err
    )


def test_translate_sampling(translate_command, translator, tiny_checkpoint, capsys) -> None:
    sentences = [TOY_TEST_SOURCES[0], "", TOY_TEST_SOURCES[2]]
    args = ["--checkpoint", str(tiny_checkpoint), "--sample", "--top-p", "0.9", "--seed", "3"]
    assert translate_command.main([*args, "--n-best", "3", *sentences]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.split("\n")[:-1]]
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 2, 2, 2]  # 3 samples, 1 for the empty line
    expected = translator.translate_n_best(
        sentences, DecodingConfig(strategy="sample", top_p=0.9, seed=3, n_best=3)
    )
    assert [r[2] for r in rows] == [text for hyps in expected for text, _ in hyps]
    # one sample per line without --n-best; temperature 0 is greedy decoding
    assert translate_command.main([*args, "--temperature", "0", *sentences]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == translator.translate(sentences, beam_size=1)


def test_translate_print_alignment(translate_command, translator, tiny_checkpoint, capsys) -> None:
    sentences = [TOY_TEST_SOURCES[0], "", TOY_TEST_SOURCES[6]]
    args = ["--checkpoint", str(tiny_checkpoint), "--beam", "2", "--print-alignment", *sentences]
    assert translate_command.main(args) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == "\t"  # one line per input line, empty stays empty
    texts, alignments = zip(*(line.split("\t") for line in lines), strict=True)
    assert list(texts) == translator.translate(sentences, beam_size=2)
    for source, text, alignment in zip(sentences, texts, alignments, strict=True):
        pairs = parse_alignment(alignment)
        assert [t for _, t in pairs] == list(range(len(text.split())))
        assert all(0 <= s < len(source.split()) for s, _ in pairs)
    # --n-best: INDEX, SCORE, TRANSLATION, ALIGNMENT; word pieces with --alignment-unit piece
    args += ["--n-best", "2", "--alignment-unit", "piece", "--alignment-layer", "mean"]
    assert translate_command.main(args) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.split("\n")[:-1]]
    assert [len(r) for r in rows] == [4] * 5 and [r[0] for r in rows] == list("00122")
    assert all(parse_alignment(r[3]) or not r[2] for r in rows)


def test_translate_stdin_chunks_keep_order_and_indices(
    translate_command, translator, tiny_checkpoint, monkeypatch, capsys
) -> None:
    lines = [TOY_TEST_SOURCES[0], "", TOY_TEST_SOURCES[1], "ein hund", TOY_TEST_SOURCES[4]]
    monkeypatch.setattr("sys.stdin", FakeStdin(("\n".join(lines) + "\n").encode()))
    args = ["--checkpoint", str(tiny_checkpoint), "--beam", "2", "--n-best", "2"]
    assert translate_command.main([*args, "--buffer-size", "2"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.split("\n")[:-1]]
    expected = translator.translate_n_best(lines, beam_size=2, n_best=2)
    assert [(int(i), text) for i, _, text in rows] == [
        (i, text) for i, hyps in enumerate(expected) for text, _ in hyps
    ]


class LineReader:
    """Read lines from a child's pipe with a deadline (a test must not hang on a pipe)."""

    def __init__(self, pipe) -> None:
        self.fd, self.buffer = pipe.fileno(), b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)

    def readline(self, timeout: float) -> str | None:
        """The next line without its newline; None at end of file."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                raise TimeoutError(f"no complete line within {timeout} s: {self.buffer!r}")
            data = os.read(self.fd, 4096)
            if not data:
                return None
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode("utf-8")


def test_translate_with_standard_output_closed_is_refused(
    translate_command, tiny_checkpoint, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``minitx-translate ... >&-``: Python's sys.stdout is None; the translations vanished and
    the first flush ended in an AttributeError's traceback."""
    monkeypatch.setattr(sys, "stdout", None)
    assert translate_command.main(["--checkpoint", str(tiny_checkpoint), "ein mann ."]) == 2
    assert capsys.readouterr().err == (
        "error: standard output is closed (>&-); redirect it to a file or to /dev/null instead\n"
    )


def test_translate_with_standard_error_closed_still_translates(
    translator, tiny_checkpoint, tmp_path
) -> None:
    """``minitx-translate ... 2>&- > out.txt``: the progress lines have nowhere to go; the
    translation still does (it ended with status 1 and an empty file)."""
    launcher = "import sys; from minitx.cli import launch; sys.exit(launch.translate())"
    out = tmp_path / "out.txt"
    command = [PYTHON, "-c", launcher, "--checkpoint", str(tiny_checkpoint), TOY_TEST_SOURCES[0]]
    with out.open("w") as stdout:
        status = subprocess.call(
            command, stdout=stdout, stderr=subprocess.DEVNULL, env=subprocess_env(), timeout=180,
            preexec_fn=lambda: os.close(2),
        )  # fmt: skip
    assert status == 0
    assert out.read_text(encoding="utf-8") == translator.translate(TOY_TEST_SOURCES[:1])[0] + "\n"


def test_translate_streams_a_pipe_before_its_end(translator, tiny_checkpoint, tmp_path) -> None:
    """`producer | translate`: each line's translation comes back while standard input is
    still open (the first one before the second line is even written)."""
    lines = [TOY_TEST_SOURCES[0], "", TOY_TEST_SOURCES[3]]
    expected = translator.translate(lines, beam_size=1)
    with (tmp_path / "stderr").open("wb") as stderr:
        proc = subprocess.Popen(
            [PYTHON, "-m", "minitx.cli.translate", "--checkpoint", str(tiny_checkpoint)]
            + ["--beam", "1"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=subprocess_env(),
        )
        try:
            reader = LineReader(proc.stdout)
            proc.stdin.write(lines[0].encode() + b"\n")
            proc.stdin.flush()
            assert reader.readline(timeout=150) == expected[0]  # stdin still open
            proc.stdin.write(b"\n" + lines[2].encode() + b"\n")
            proc.stdin.flush()
            assert [reader.readline(timeout=60), reader.readline(timeout=60)] == expected[1:]
            proc.stdin.close()
            assert reader.readline(timeout=60) is None
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "Traceback" not in (tmp_path / "stderr").read_text(encoding="utf-8")


# ------------------------------------------------------------------------------- evaluate
def test_evaluate_toy_corpus(
    evaluate_command, translator, tiny_checkpoint, tmp_path, capsys
) -> None:
    hyp = tmp_path / "hyp.beam{beam}.txt"
    args = [
        "--checkpoint",
        str(tiny_checkpoint),
        "--data",
        str(TOY_CORPUS_DIR),
        "--hyp-out",
        str(hyp),
    ]
    assert evaluate_command.main(args) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("beam 5 (alpha 1): BLEU ")  # the default decoding, named
    assert "tok:13a" in lines[0] and "chrF" in lines[0] and "sentences in" in lines[0]
    written = (tmp_path / "hyp.beam5.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(written) == len(TOY_TEST_SOURCES) == 10
    assert written == translator.translate(TOY_TEST_SOURCES)
    # the detailed BLEU exactly as sacreBLEU reports it, then chrF with its own signature
    detail = str(BLEU(tokenize="13a").corpus_score(written, [list(TOY_TEST_REFERENCES)]))
    assert lines[1].startswith(f"  {detail} | chrF2 = ") and "nc:6|nw:0" in lines[1]
    assert "de -> en" in err and "10 of 10 pairs" in err
    summary = "beam 5 \\(alpha 1\\): " + PLAIN_SUMMARY.format(n=10)
    assert len(re.findall(summary, err)) == 1, err  # one progress line, at the end


def test_evaluate_hyp_out_beam_placeholder_is_the_search_width(
    evaluate_command, tiny_checkpoint, tmp_path
) -> None:
    """``{beam}`` of --hyp-out is 1 for --strategy greedy: it was the default --beam, 5, which
    greedy decoding does not read."""
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(TOY_CORPUS_DIR), "--limit", "2"]
    hyp = ["--hyp-out", str(tmp_path / "h{beam}.txt")]
    assert evaluate_command.main([*args, *hyp, "--strategy", "greedy"]) == 0
    assert [p.name for p in tmp_path.glob("h*.txt")] == ["h1.txt"]


def test_evaluate_two_beams_and_json(evaluate_command, tiny_checkpoint, tmp_path, capsys) -> None:
    report = tmp_path / "scores.json"
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(TOY_CORPUS_DIR), "--beam", "1", "2"]
    args += [
        "--hyp-out",
        str(tmp_path / "b{beam}.hyp"),
        "--json",
        str(report),
        "--split",
        "validation",
    ]
    assert evaluate_command.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[::2]] == ["greedy", "beam 2 (alpha 1)"]
    assert all(line.startswith("  BLEU = ") for line in lines[1::2])
    data = json.loads(report.read_text(encoding="utf-8"))
    assert (data["split"], data["src_lang"], data["tgt_lang"], data["sentences"]) == (
        "validation",
        "de",
        "en",
        10,
    )
    assert [r["beam"] for r in data["results"]] == [1, 2]
    assert [r["alpha"] for r in data["results"]] == [None, 1.0]  # greedy ranks nothing
    for result in data["results"]:
        assert "tok:13a" in result["signature"] and "nc:6" in result["chrf_signature"]
        assert len(result["precisions"]) == 4 and result["hyp_len"] > 0 < result["ref_len"]
        assert result["brevity_penalty"] <= 1.0
        assert 0.0 <= result["bleu"] <= 100.0 and 0.0 <= result["chrf"] <= 100.0
        assert result["sentences_per_second"] > 0
        assert len(Path(result["hypotheses_file"]).read_text(encoding="utf-8").splitlines()) == 10


def test_evaluate_says_each_warning_once_for_all_its_beam_sizes(
    evaluate_command, tiny_checkpoint, tmp_path, capsys
) -> None:
    """Was: the sources were read once per beam size, and so was their warning."""
    data = tmp_path / "data"
    data.mkdir()
    for lang in ("de", "en"):
        (data / f"test.{lang}").write_text(f"{TOY_TEST_SOURCES[0]} ж\n{TOY_TEST_SOURCES[1]}\n")
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(data), "--split", "test"]
    for _ in range(2):  # and again in a second command of the same process
        hyp = str(tmp_path / "b{beam}.hyp")
        assert evaluate_command.main([*args, "--beam", "1", "2", "--hyp-out", hyp]) == 0
        err = capsys.readouterr().err
        assert err.count("vocabulary lacks, read as <unk>: 'ж' (line 1)") == 1, err


def test_evaluate_sampling(evaluate_command, tiny_checkpoint, tmp_path, capsys) -> None:
    report = tmp_path / "scores.json"
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(TOY_CORPUS_DIR), "--limit", "3"]
    args += ["--sample", "--seed", "2", "--hyp-out", str(tmp_path / "h"), "--json", str(report)]
    assert evaluate_command.main(args) == 0
    assert capsys.readouterr().out.startswith("sampling (temperature 1, seed 2): BLEU ")
    result = json.loads(report.read_text(encoding="utf-8"))["results"][0]
    assert result["beam"] is None and result["decoding"] == "sampling (temperature 1, seed 2)"


def test_evaluate_default_hypothesis_path_and_limit(
    evaluate_command, tiny_checkpoint, tmp_path, capsys
) -> None:
    checkpoint = tmp_path / "model.ckpt"
    shutil.copyfile(tiny_checkpoint, checkpoint)
    assert (
        evaluate_command.main(
            ["--checkpoint", str(checkpoint), "--data", str(TOY_CORPUS_DIR), "--limit", "3"]
        )
        == 0
    )
    assert "3 sentences" in capsys.readouterr().out
    hyp = tmp_path / toy_named("model.test.toy.first3.beam5.hyp")
    assert len(hyp.read_text(encoding="utf-8").splitlines()) == 3


def test_evaluate_with_a_limit_above_the_split_says_so_and_names_its_file_as_without(
    evaluate_command, tiny_checkpoint, tmp_path, capsys
) -> None:
    """--limit 5000 on a 10-line split said "(the first 5000 lines)" and wrote
    model.test.toy.first5000.greedy.hyp, though every line was scored."""
    checkpoint = tmp_path / "model.ckpt"
    shutil.copyfile(tiny_checkpoint, checkpoint)
    args = ["--checkpoint", str(checkpoint), "--data", str(TOY_CORPUS_DIR), "--beam", "1"]
    assert evaluate_command.main([*args, "--limit", "5000"]) == 0
    err = capsys.readouterr().err
    assert "note: --limit 5000 is more than the test split's 10 lines: scoring all of them" in err
    assert "the first" not in err
    assert [p.name for p in tmp_path.glob("*.hyp")] == [toy_named("model.test.toy.greedy.hyp")]


def test_evaluate_refuses_a_directory_as_output_before_decoding(
    evaluate_command, greedy_on_toy, tmp_path, capsys
) -> None:
    for option in ("--json", "--hyp-out"):
        assert evaluate_command.main([*greedy_on_toy, option, str(tmp_path)]) == 2
        err = capsys.readouterr().err
        # the first line: no "scoring N of N pairs" line before it
        assert err.startswith(f"error: {option} {tmp_path} is a directory; give a file name"), err
        assert "translated" not in err  # refused before the decoding
    missing = tmp_path / "no" / "scores.json"
    assert evaluate_command.main([*greedy_on_toy, "--json", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "translated" not in err, err
    assert f"directory {missing.parent} does not exist; create it first" in err
    assert not list(tmp_path.glob("*.hyp"))


def test_evaluate_another_language_pair_keeps_the_checkpoints_hypotheses(
    evaluate_command, greedy_on_toy, tmp_path, capsys
) -> None:
    """Scoring en -> de with a de -> en checkpoint warns and names the pair in its file."""
    assert evaluate_command.main([*greedy_on_toy, "--src-lang", "en", "--tgt-lang", "de"]) == 0
    assert "warning: the checkpoint was trained de -> en" in capsys.readouterr().err
    assert (tmp_path / toy_named("model.test.toy.en-de.greedy.hyp")).is_file()
    assert not (tmp_path / toy_named("model.test.toy.greedy.hyp")).exists()


@pytest.mark.parametrize(
    ("args", "empty", "message"),
    [
        (["--tgt-lang", "de"], False, "src_lang and tgt_lang are both 'de'"),  # de: the model's
        (["--data", "EMPTY"], True, "has no non-empty sentence pairs (2 lines, none with both"),
        pytest.param(  # BLEU of Japanese needs MeCab: said before the corpus is read
            ["--tgt-lang", "ja"],
            False,
            "error: BLEU of 'ja' text splits its words with MeCab: pip install 'sacrebleu[ja]'",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("MeCab") is not None, reason="MeCab is installed"
            ),
        ),
    ],
    ids=["same-language", "no-pair", "japanese-without-mecab"],
)
def test_evaluate_refusals_are_the_only_line(
    args: list[str],
    empty: bool,
    message: str,
    evaluate_command,
    greedy_on_toy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No line comes before the error: the language warning (de -> de is not the checkpoint's
    pair) and the skip notice of the empty pairs came first."""
    if empty:
        corpus = tmp_path / "empty"
        corpus.mkdir()
        (corpus / "test.de").write_text("\n\n")
        (corpus / "test.en").write_text("a\n\n")
        args = ["--data", str(corpus), "--split", "test"]
    with caplog.at_level(logging.WARNING):
        assert evaluate_command.main([*greedy_on_toy, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not caplog.records  # nothing logged either (the skip notice is a log record)


def test_evaluate_reads_a_jsonl_pattern_and_names_its_own_flags(
    evaluate_command, greedy_on_toy, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``--data DIR/{split}.jsonl`` reads DIR/test.jsonl for the test split (it looked for
    test_2016_flickr.jsonl only); a missing split's error names minitx-evaluate's --split, not
    training's data.splits; ``--hyp-out -`` is refused (it wrote a file named "-")."""
    pattern = str(tmp_path / "corpus" / "{split}.jsonl")
    (tmp_path / "corpus").mkdir()
    pairs = zip(TOY_TEST_SOURCES, TOY_TEST_REFERENCES, strict=True)
    rows = [{"translation": {"de": source, "en": reference}} for source, reference in pairs]
    Path(pattern.format(split="test")).write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [*greedy_on_toy[:2], "--data", pattern, "--beam", "1"]
    assert evaluate_command.main(args) == 0
    assert "scoring 10 of 10 pairs" in capsys.readouterr().err
    assert evaluate_command.main([*args, "--split", "validation"]) == 2
    err = capsys.readouterr().err
    assert "minitx-evaluate --split validation reads" in err and "data.splits" not in err, err
    with pytest.raises(SystemExit) as exit_info:
        evaluate_command.main([*args, "--hyp-out", "-"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: --hyp-out -: the hypotheses go to a file")
    assert not Path("-").exists() and not (tmp_path / "-").exists()


def test_a_blank_line_of_a_jsonl_split_keeps_its_hypothesis_line(
    evaluate_command, greedy_on_toy, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Was: the blank line was dropped without a word, and the hypotheses no longer lined up
    with the file's lines; now it is an empty pair, counted and kept as an empty line."""
    rows = [{"de": s, "en": r} for s, r in zip(TOY_TEST_SOURCES, TOY_TEST_REFERENCES, strict=True)]
    lines = [json.dumps(row) for row in rows[:3]]
    (tmp_path / "test.jsonl").write_text("\n".join([lines[0], "", *lines[1:]]) + "\n")
    hyp = tmp_path / "test.hyp"
    args = [*greedy_on_toy[:2], "--data", str(tmp_path / "{split}.jsonl"), "--beam", "1"]
    assert evaluate_command.main([*args, "--hyp-out", str(hyp)]) == 0
    assert "scoring 3 of 4 pairs" in capsys.readouterr().err
    written = hyp.read_text().split("\n")
    assert len(written) == 5 and written[1] == "" and all(written[i] for i in (0, 2, 3))


def test_evaluate_another_corpus_keeps_the_hypotheses_of_the_first(
    evaluate_command, greedy_on_toy, tmp_path
) -> None:
    """Two corpora with a split of the same name write two files, each named by its --data."""
    assert evaluate_command.main([*greedy_on_toy, "--limit", "2"]) == 0
    other = tmp_path / "corpora" / "other"
    shutil.copytree(TOY_CORPUS_DIR, other)
    args = [*greedy_on_toy, "--limit", "2"]
    args[args.index("--data") + 1] = str(other)
    assert evaluate_command.main(args) == 0
    assert sorted(path.name for path in tmp_path.glob("*.hyp")) == sorted(
        toy_named("model.test.toy.first2.greedy.hyp", corpus) for corpus in (other, TOY_CORPUS_DIR)
    )


@pytest.mark.parametrize("data", ["", "   "])
def test_evaluate_refuses_an_empty_data_source(
    evaluate_command, greedy_on_toy, data: str, tmp_path, capsys, monkeypatch
) -> None:
    """``--data "$DATA"`` with DATA unset was read as the current directory, whose files
    were listed as a corpus missing its splits."""
    monkeypatch.chdir(tmp_path)
    args = list(greedy_on_toy)
    args[args.index("--data") + 1] = data
    assert evaluate_command.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the data source") and "is empty" in err, err
    assert "a shell variable may be unset" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    ("data", "tag"),
    [("/no/corpora/iwslt", "iwslt"), ("builtin:toy", "builtin_toy"), ("d/{split}.jsonl", "d")],
)
def test_evaluate_data_tag(evaluate_command, data: str, tag: str) -> None:  # not directories
    assert evaluate_command.data_tag(data) == tag


def test_evaluate_data_tag_of_the_current_directory(
    evaluate_command, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--data .`` (or ``..``, or a {split} pattern in it) was tagged "data", whichever
    corpus the directory held; it is tagged with the directory's own name."""
    corpus = tmp_path / "iwslt17"
    (corpus / "sub").mkdir(parents=True)
    monkeypatch.chdir(corpus)
    tag = evaluate_command.data_tag(".")
    assert re.fullmatch(r"iwslt17-[0-9a-f]{6}", tag), tag
    assert evaluate_command.data_tag("{split}.jsonl") == tag
    monkeypatch.chdir(corpus / "sub")
    assert evaluate_command.data_tag("..") == tag
    assert evaluate_command.data_tag(str(corpus)) == tag


def test_two_corpora_in_folders_of_one_name_get_two_hypothesis_files(
    evaluate_command, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--data x/d1`` then ``--data y/d1``: the second evaluation replaced the first's
    hypotheses (both were tagged "d1")."""
    monkeypatch.chdir(tmp_path)
    for corpus in ("x/d1", "y/d1"):
        (tmp_path / corpus).mkdir(parents=True)
    first, second = evaluate_command.data_tag("x/d1"), evaluate_command.data_tag("y/d1")
    assert first.startswith("d1-") and second.startswith("d1-") and first != second


def test_evaluate_json_to_stdout(
    evaluate_command, greedy_on_toy, tmp_path, capsys, monkeypatch
) -> None:
    """--json - prints only the report on stdout (for jq); the summary moves to stderr."""
    monkeypatch.chdir(tmp_path)
    assert evaluate_command.main([*greedy_on_toy, "--limit", "3", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["sentences"] == 3 and report["results"][0]["beam"] == 1
    assert "\ngreedy: BLEU " in err and not (tmp_path / "-").exists()
    # "./-" is a file called "-", as minitx-translate reads it
    assert evaluate_command.main([*greedy_on_toy, "--limit", "3", "--json", "./-"]) == 0
    assert json.loads((tmp_path / "-").read_text(encoding="utf-8"))["sentences"] == 3
    assert capsys.readouterr().out.startswith("greedy: BLEU ")


def test_evaluate_bf16_keeps_the_fp32_hypotheses(evaluate_command, greedy_on_toy, tmp_path):
    """A --bf16 evaluation writes its own file: the fp32 hypotheses beside the checkpoint stay."""
    assert evaluate_command.main([*greedy_on_toy, "--limit", "3"]) == 0
    fp32 = tmp_path / toy_named("model.test.toy.first3.greedy.hyp")
    fp32.write_text("kept\n", encoding="utf-8")
    assert evaluate_command.main([*greedy_on_toy, "--limit", "3", "--bf16"]) == 0
    assert fp32.read_text(encoding="utf-8") == "kept\n"
    bf16 = tmp_path / toy_named("model.test.toy.first3.greedy.bf16.hyp")
    assert len(bf16.read_text(encoding="utf-8").splitlines()) == 3


@pytest.mark.parametrize("native", [True, False], ids=["bf16-cpu", "avx2-cpu"])
def test_bf16_on_a_cpu_without_bf16_is_kept_with_a_note(
    evaluate_command, greedy_on_toy, tmp_path, capsys, monkeypatch, native: bool
) -> None:
    """--bf16 where bf16 is emulated decoded 5-6x slower without a word (training says so and
    trains in fp32); the user asked for it, so it is kept, with a note that says why it is slow."""
    from minitx import hardware

    monkeypatch.setattr(hardware, "cpu_has_fast_bf16", lambda: native)
    assert evaluate_command.main([*greedy_on_toy, "--limit", "2", "--bf16"]) == 0
    err = capsys.readouterr().err
    assert ("note: --bf16: this CPU" in err) is not native, err
    assert (tmp_path / toy_named("model.test.toy.first2.greedy.bf16.hyp")).is_file()  # bf16 too


def test_evaluate_counts_empty_pairs(evaluate_command, tiny_checkpoint, tmp_path, capsys) -> None:
    """Pairs with an empty side are not scored and are counted (as in training); their line
    in the hypotheses file is empty, so it stays aligned with the source file, and the
    warnings name the file's lines. Only the split's files are needed."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    src, ref = list(TOY_TEST_SOURCES), list(TOY_TEST_REFERENCES)
    src[2], ref[5] = "", "  "
    src[6] += " ж"  # a character the vocabulary lacks, on line 7: after both skipped pairs
    (corpus / "test_2016_flickr.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (corpus / "test_2016_flickr.en").write_text("\n".join(ref) + "\n", encoding="utf-8")
    hyp = tmp_path / "out.hyp"
    assert (
        evaluate_command.main(
            ["--checkpoint", str(tiny_checkpoint), "--data", str(corpus), "--hyp-out", str(hyp)]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert "8 sentences" in out
    assert "scoring 8 of 10 pairs" in err and "empty line in the hypotheses: 2 empty" in err
    assert "1 of 8 sentences hold characters the model's vocabulary lacks" in err
    assert "'ж' (line 7)" in err  # its line in the file (was line 5, its place among the 8)
    lines = hyp.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 11 and lines[-1] == ""  # 10 lines, each ended by a newline
    assert lines[2] == lines[5] == ""
    kept = [s for i, s in enumerate(src) if i not in (2, 5)]
    expected = Translator.from_pretrained(tiny_checkpoint).translate(kept)
    assert [line for i, line in enumerate(lines[:10]) if i not in (2, 5)] == expected


def test_evaluate_writes_where_it_said_though_the_checkpoint_moves_meanwhile(
    evaluate_command, tiny_checkpoint, tmp_path, monkeypatch
) -> None:
    """Was: the hypotheses' path was worked out again after decoding; the checkpoint gone, it
    was taken for a hub repo id, and the file went to the working directory, unchecked."""
    (tmp_path / "runs").mkdir()
    ckpt = tmp_path / "runs" / "a.ckpt"
    shutil.copy(tiny_checkpoint, ckpt)
    monkeypatch.chdir(tmp_path)
    from minitx import evaluation

    decode = evaluation.evaluate

    def moved_meanwhile(*args, **kwargs):
        ckpt.rename(tmp_path / "moved.ckpt")
        return decode(*args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", moved_meanwhile)
    argv = ["--checkpoint", str(ckpt), "--data", str(TOY_CORPUS_DIR), "--beam", "1"]
    assert evaluate_command.main([*argv, "--limit", "2"]) == 0
    [written] = (tmp_path / "runs").iterdir()  # beside where the checkpoint was
    assert written.name.startswith("a.test.") and written.name.endswith(".first2.greedy.hyp")
    assert not list(tmp_path.glob("*.hyp"))


def test_evaluate_default_data_follows_minitx_data_dir(
    evaluate_command, tiny_checkpoint, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("MINITX_DATA_DIR", str(TOY_CORPUS_DIR))
    args = [
        "--checkpoint",
        str(tiny_checkpoint),
        "--hyp-out",
        str(tmp_path / "h.txt"),
        "--limit",
        "2",
    ]
    assert evaluate_command.main(args) == 0
    assert str(TOY_CORPUS_DIR) in capsys.readouterr().err


@pytest.mark.parametrize("problem", ["no-data", "bad-checkpoint", "wrong-langs", "hyp-dir"])
def test_evaluate_errors(evaluate_command, tiny_checkpoint, tmp_path, capsys, problem) -> None:
    args = [
        "--checkpoint",
        str(tiny_checkpoint),
        "--data",
        str(TOY_CORPUS_DIR),
        "--hyp-out",
        str(tmp_path / "h"),
    ]
    if problem == "no-data":
        args[3] = str(tmp_path / "missing_corpus")
    elif problem == "bad-checkpoint":
        (tmp_path / "bad.ckpt").write_bytes(tiny_checkpoint.read_bytes()[:1000])
        args[1] = str(tmp_path / "bad.ckpt")
    elif problem == "wrong-langs":
        args += ["--src-lang", "fr"]
    else:
        args[-1] = str(tmp_path / "no_dir" / "h")
    assert evaluate_command.main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "error: " in err and "Traceback" not in err


def _gzip_pair(directory: Path, stem: str) -> Path:
    """The toy test split as `stem`.de.gz / `stem`.en.gz in `directory`."""
    import gzip

    directory.mkdir(exist_ok=True)
    for lang in ("de", "en"):
        text = (TOY_CORPUS_DIR / f"test_2016_flickr.{lang}").read_bytes()
        (directory / f"{stem}.{lang}.gz").write_bytes(gzip.compress(text))
    return directory


@pytest.mark.parametrize(("stem", "split"), [("test", []), ("mine", ["--split", "mine"])])
def test_evaluate_reads_gzipped_pairs_under_the_split_name(
    evaluate_command, translator, tiny_checkpoint, tmp_path, capsys, stem, split
) -> None:
    """test.de.gz / test.en.gz (no Multi30k names) are the test split; any other pair is
    scored with --split NAME."""
    data = _gzip_pair(tmp_path / "corpus", stem)
    hyp = tmp_path / "h.txt"
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(data), "--hyp-out", str(hyp)]
    assert evaluate_command.main([*args, "--beam", "1", *split]) == 0
    assert "10 of 10 pairs" in capsys.readouterr().err
    written = hyp.read_text(encoding="utf-8").split("\n")[:-1]
    assert written == translator.translate(TOY_TEST_SOURCES, DecodingConfig.for_beam(1))


def test_evaluate_names_what_it_found_and_how_to_name_files(
    evaluate_command, tiny_checkpoint, tmp_path, capsys
) -> None:
    data = _gzip_pair(tmp_path / "corpus", "newstest")
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(data), "--beam", "1"]
    assert evaluate_command.main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert "found splits ['newstest'], languages ['de', 'en']" in err  # .gz is no language
    assert "reads test_2016_flickr.de and test_2016_flickr.en, or test.de and test.en" in err
    assert "NAME.de and NAME.en and pass --split NAME" in err


@pytest.mark.parametrize("split", ["", "../test", "{split}"])
def test_evaluate_refuses_a_split_that_is_no_file_stem(
    evaluate_command, tiny_checkpoint, capsys, split
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        evaluate_command.main(["--checkpoint", str(tiny_checkpoint), "--split", split])
    assert exit_info.value.code == 2
    assert "--split" in capsys.readouterr().err


def test_evaluate_several_beams_need_a_pattern(
    evaluate_command, tiny_checkpoint, tmp_path, capsys
) -> None:
    with pytest.raises(SystemExit) as exc:
        evaluate_command.main(
            [
                "--checkpoint",
                str(tiny_checkpoint),
                "--beam",
                "1",
                "5",
                "--hyp-out",
                str(tmp_path / "h.txt"),
            ]
        )
    assert exc.value.code == 2
    assert "{beam}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # a typo is not written into the file name
        evaluate_command.main(
            ["--checkpoint", str(tiny_checkpoint), "--hyp-out", str(tmp_path / "h{beams}.txt")]
        )
    assert exc.value.code == 2
    assert "unknown placeholder {beams}" in capsys.readouterr().err


def test_evaluate_subprocess(tiny_checkpoint, tmp_path) -> None:
    """As a real command: exit status 0, standard output holds exactly the score lines. It
    starts without Lightning (seconds on 2 cores), also where it reads a corpus and asks the
    CPU for bf16: Python's own import log, as the import contracts cannot see a package's
    ``__init__`` run by the import of one of its modules."""
    args = [
        "--bf16",
        "--checkpoint",
        str(tiny_checkpoint),
        "--data",
        str(TOY_CORPUS_DIR),
        "--limit",
        "2",
        "--hyp-out",
        str(tmp_path / "h"),
    ]
    proc = run_command("evaluate", args, cwd=tmp_path, python_flags=["-X", "importtime"])
    assert proc.returncode == 0, proc.stderr.decode()
    imported = re.findall(r"^import time:.*\|\s*([\w.]+)$", proc.stderr.decode(), re.MULTILINE)
    assert "minitx.hardware" in imported and "minitx.data.sources" in imported  # the log works
    assert not [m for m in imported if m.split(".")[0] in ("lightning", "pytorch_lightning")]
    lines = proc.stdout.decode("utf-8").splitlines()
    assert len(lines) == 2 and lines[0].startswith("beam 5 (alpha 1): BLEU ")
    assert lines[1].startswith("  BLEU = ")
    assert "tok:13a" in lines[0]
    assert "Traceback" not in proc.stderr.decode()


# ---------------------------------------------------------------------------------- visualize
def test_visualize_attention_writes_pngs_and_viewer(tiny_checkpoint, tmp_path, capsys) -> None:
    script = command_module("visualize")
    out_dir = tmp_path / "attn"
    assert (
        script.main(
            [
                "--checkpoint",
                str(tiny_checkpoint),
                TOY_TEST_SOURCES[0],
                "--out-dir",
                str(out_dir),
                "--dpi",
                "40",
            ]
        )
        == 0
    )
    pngs = sorted(p.name for p in out_dir.glob("*.png"))
    assert len(pngs) == 3  # encoder, decoder, cross: one layer each in the tiny model
    assert all((out_dir / name).read_bytes().startswith(b"\x89PNG") for name in pngs)
    assert any("cross" in name for name in pngs)
    html = (out_dir / "attention.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "</html>" in html
    out, err = capsys.readouterr()
    assert "translation:" in out and "attention.html" in out
    assert "note:" not in err


def test_visualize_labels_its_translation_with_a_hard_attention(
    tiny_checkpoint, tmp_path, capsys
) -> None:
    """The printed translation names the decoding that made it, hard attention too, as
    minitx-evaluate's results do (it said "greedy" alone)."""
    script = command_module("visualize")
    args = ["--checkpoint", str(tiny_checkpoint), TOY_TEST_SOURCES[0], "--beam", "1"]
    args += ["--attention", "hard-argmax", "--out-dir", str(tmp_path / "maps"), "--no-html"]
    assert script.main(args) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("translation:")]
    assert line.endswith("(greedy, hard-argmax cross-attention)")


def test_visualize_names_a_page_too_large_to_open(
    tiny_checkpoint, tmp_path, capsys, monkeypatch
) -> None:
    """A long sentence's page (230 MB for a 10,800-character line) was written without a word."""
    script = command_module("visualize")
    monkeypatch.setattr(script, "LARGE_PAGE_BYTES", 1_000)  # the tiny model's page is larger
    argv = ["--checkpoint", str(tiny_checkpoint), TOY_TEST_SOURCES[0], "--dpi", "40"]
    assert script.main([*argv, "--out-dir", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert f"note: {tmp_path / 'a' / 'attention.html'} is " in err and "--no-html" in err
    assert script.main([*argv, "--out-dir", str(tmp_path / "b"), "--no-html"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_visualize_writes_its_directory_whole_and_keeps_the_users_own(
    tiny_checkpoint, tmp_path, capsys, monkeypatch
) -> None:
    """--out-dir: a directory of the user's own is refused, whatever the flags; an earlier
    output is replaced only with --force, and then whole (no PNG of the earlier run stays),
    unless files of the user's were added to it."""
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    script = command_module("visualize")

    def visualize(out_dir: Path, *flags: str, kinds: tuple[str, ...] = ("cross",)) -> int:
        args = ["--checkpoint", str(tiny_checkpoint), TOY_TEST_SOURCES[0], "--out-dir"]
        return script.main([*args, str(out_dir), "--dpi", "40", "--kinds", *kinds, *flags])

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "attention.html").write_text("mine\n", encoding="utf-8")
    for flags in ((), ("--force",)):  # --force is not suggested: it would not replace it
        assert visualize(mine, *flags) == 2
        assert "has no .minitx-output file" in capsys.readouterr().err
    assert (mine / "attention.html").read_text(encoding="utf-8") == "mine\n"

    out_dir = tmp_path / "attn"
    assert visualize(out_dir, kinds=("cross", "encoder")) == 0  # an earlier, larger output
    assert (out_dir / "encoder_layer0.png").is_file()
    assert visualize(out_dir) == 2
    assert "exists already; pass --force to replace it" in capsys.readouterr().err
    assert visualize(out_dir, "--force") == 0
    written = sorted(p.name for p in out_dir.iterdir())
    assert written == [".minitx-output", "attention.html", "cross_layer0.png"]
    assert f"wrote {out_dir / 'attention.html'}" in capsys.readouterr().out
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left

    (out_dir / "notes.txt").write_text("mine\n", encoding="utf-8")  # the user's, added since
    assert visualize(out_dir, "--force") == 2
    assert "holds files minitx did not write (notes.txt)" in capsys.readouterr().err
    assert (out_dir / "notes.txt").read_text(encoding="utf-8") == "mine\n"


def test_visualize_with_attributions_says_a_sources_warning_once(
    tiny_checkpoint, tmp_path, capsys, monkeypatch
) -> None:
    """The maps and the attributions each read the sentence: a character the vocabulary lacks
    was named twice."""
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    args = ["--checkpoint", str(tiny_checkpoint), "ein mann \u0436", "--out-dir"]
    flags = ["--dpi", "40", "--kinds", "cross", "--no-html", "--attributions", "saliency"]
    assert command_module("visualize").main([*args, str(tmp_path / "out"), *flags]) == 0
    err = capsys.readouterr().err
    assert err.count("the model's vocabulary lacks") == 1, err


# ---------------------------------------------------------------------- entry points
@pytest.mark.parametrize("name", ["translate", "evaluate", "visualize"])
def test_every_inference_command_defaults_to_the_same_beam(name: str) -> None:
    from minitx.cli.common import decoding_from_args
    from minitx.decoding import DEFAULT_BEAM_SIZE, DecodingConfig

    parser = command_module(name).build_parser()
    sentence = [] if name == "evaluate" else ["a sentence"]
    args = parser.parse_args(["--checkpoint", "x.ckpt", *sentence])
    beam = args.beam[0] if isinstance(args.beam, list) else args.beam
    assert beam == DEFAULT_BEAM_SIZE == DecodingConfig().beam_size == 5
    assert decoding_from_args(args, beam) == DecodingConfig()
    assert decoding_from_args(args, 1) == DecodingConfig(strategy="greedy", beam_size=1)


def test_every_batched_entry_point_defaults_to_the_same_batch_size() -> None:
    """One default batch: the commands' --batch-size and every API that decodes in batches."""
    import inspect

    from minitx.decoding import DEFAULT_BATCH_SIZE
    from minitx.evaluation import evaluate
    from minitx.extras.ctranslate2.export import Ct2Translator

    for name in ("translate", "evaluate"):
        args = command_module(name).build_parser().parse_args(["--checkpoint", "x.ckpt"])
        assert args.batch_size == DEFAULT_BATCH_SIZE, name
    functions = [evaluate, Ct2Translator.translate] + [
        method
        for name, method in inspect.getmembers(Translator, inspect.isfunction)
        if not name.startswith("_") and "batch_size" in inspect.signature(method).parameters
    ]
    assert len(functions) >= 6  # translate, translate_n_best, translate_ids, align, ...
    for function in functions:
        default = inspect.signature(function).parameters["batch_size"].default
        assert default == DEFAULT_BATCH_SIZE, function.__qualname__
    # the CTranslate2 wrapper decodes as minitx does when given no settings
    ct2 = inspect.signature(Ct2Translator.translate).parameters
    for name in ("beam_size", "alpha", "max_len_a", "max_len_b"):
        assert ct2[name].default == getattr(DecodingConfig(), name), name


@pytest.mark.parametrize("name", ["translate", "evaluate", "visualize"])
def test_every_inference_command_runs_as_a_process(name: str) -> None:
    proc = subprocess.run(
        [PYTHON, "-m", f"minitx.cli.{name}", "--help"],
        capture_output=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"--checkpoint" in proc.stdout and b"--beam" in proc.stdout


def test_console_scripts() -> None:
    bin_dir = Path(PYTHON).parent
    if not (bin_dir / "minitx-translate").exists():
        pytest.skip(f"console scripts not installed in {bin_dir} (pip install -e . makes them)")
    proc = subprocess.run(
        [str(bin_dir / "minitx-translate"), "--help"], capture_output=True, timeout=120
    )
    assert proc.returncode == 0 and b"--n-best" in proc.stdout
    assert proc.stdout.startswith(b"usage: minitx-translate ")


def test_tokenized_translations_are_warned_of_once_in_minitx_words(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sacreBLEU warned of hypotheses that end in a tokenized period in three lines at every
    scoring (each validation of a run), naming its `force` parameter, which no minitx flag
    has: minitx says it once per process, in its words, and no score changes."""
    from minitx import metrics
    from minitx.evaluation import score

    monkeypatch.setattr(metrics, "_said_tokenized", False)
    hyps = [f"a man number {i} reads a book ." for i in range(120)]
    refs = [f"a man number {i} reads the book ." for i in range(120)]
    with caplog.at_level(logging.WARNING):
        result = score(hyps, refs)
        again = score(hyps, refs)
    assert not [r for r in caplog.records if r.name.startswith("sacrebleu")]
    warned = [r.getMessage() for r in caplog.records if r.name == "minitx.metrics"]
    assert warned == [
        "120 of 120 translations end in ' .', as tokenized text does: sacreBLEU tokenizes the "
        "text itself, so BLEU of tokenized text is not comparable with published scores; "
        "detokenize the corpus (e.g. with sacremoses) for that"
    ]
    assert result.bleu_lowercase == result.bleu == again.bleu  # all lowercase already
    from sacrebleu.metrics import BLEU

    assert result.bleu == BLEU(tokenize="13a").corpus_score(hyps, [refs]).score  # unchanged


def test_evaluate_reads_and_writes_under_a_directory_whose_name_is_not_utf8(
    evaluate_command, greedy_on_toy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder named in Latin-1 (its bytes held as lone surrogates): the hypotheses' file name
    hashed the path as UTF-8, and the report could not be written, both with a traceback after
    the whole decoding. The report is UTF-8, the undecodable byte shown as U+FFFD."""
    # standard error as Python sets it up: the path's byte printed as \udce9 (pytest's
    # capture is strict)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    monkeypatch.setattr(sys, "stderr", err)
    odd = tmp_path / os.fsdecode(b"caf\xe9")
    corpus = odd / "data"
    shutil.copytree(TOY_CORPUS_DIR, corpus)
    report = odd / "scores.json"
    args = [*greedy_on_toy, "--data", str(corpus), "--hyp-out", str(odd / "{beam}.hyp")]
    assert evaluate_command.main([*args, "--json", str(report)]) == 0
    scores = json.loads(report.read_bytes().decode("utf-8"))
    assert scores["data"] == f"{tmp_path}/caf\ufffd/data"
    assert (odd / "1.hyp").read_text(encoding="utf-8").count("\n") == 10
    assert evaluate_command.main([*greedy_on_toy, "--data", str(corpus)]) == 0  # its file name
    assert len(list(tmp_path.glob("model.test.data-*.greedy.hyp"))) == 1


def test_a_beam_wider_than_the_vocabulary_is_refused_before_the_input_is_read(
    translate_command, tiny_checkpoint: Path, capsys: pytest.CaptureFixture
) -> None:
    """The refusal came after the input was read and encoded: a warning of its characters
    (here the toy vocabulary's missing 'Ж') came first, and standard input was read whole."""
    args = ["--checkpoint", str(tiny_checkpoint), "--beam", "100000", "Ж ein mann ."]
    assert translate_command.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: beam size 100000 is larger than the model's target") and (
        err.count("\n") == 1
    ), err


def test_a_bad_line_after_the_first_block_knows_the_lines_before_it_were_utf8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files are read in blocks (1 MiB): the umlauts of a block before the bad line were not
    seen, and a Latin-1 re-encoding of the whole file was advised, garbling them."""
    from minitx import textio
    from minitx.errors import DataError

    monkeypatch.setattr(textio, "READ_BYTES", 16)
    source = tmp_path / "input.de"
    source.write_bytes("ein mädchen\n".encode() + b"ein hund\n" * 20 + "ä\n".encode("latin-1"))
    with pytest.raises(DataError, match="line 22 is not valid UTF-8.*fix or delete that line"):
        list(textio.iter_lines(source))
