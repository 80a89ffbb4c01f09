"""CTranslate2 export (minitx/extras/ctranslate2/): the exported model
scores and translates as minitx does; settings CTranslate2 cannot express are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import PYTHON, TOY_CORPUS_DIR, TOY_TEST_REFERENCES, TOY_TEST_SOURCES, subprocess_env
from preloaded import run_python

from minitx.activations import ACTIVATIONS
from minitx.errors import ConfigError, MissingExtraError, OutputError
from minitx.model import Transformer, TransformerConfig
from minitx.translator import Translator
from minitx.vocab import frame_source, frame_target

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="ctranslate2 is not installed (pip install 'minitx[export]')"
)

from minitx.cli.common import user_error_message  # noqa: E402
from minitx.extras.ctranslate2 import command as ct2_cli  # noqa: E402
from minitx.extras.ctranslate2.export import (  # noqa: E402
    Ct2Translator,
    check_exportable,
    export_ctranslate2,
    export_model,
)

TOY_TRAIN_SOURCES = (TOY_CORPUS_DIR / "train.de").read_text(encoding="utf-8").splitlines()
TOY_TRAIN_REFERENCES = (TOY_CORPUS_DIR / "train.en").read_text(encoding="utf-8").splitlines()
SOURCES = TOY_TEST_SOURCES + TOY_TRAIN_SOURCES[:30]
"""Sentences decoded by both runtimes (test and training sentences of the toy corpus)."""


@pytest.fixture(scope="module")
def translator(tiny_checkpoint: Path) -> Translator:
    return Translator.from_pretrained(tiny_checkpoint)


@pytest.fixture(scope="module")
def exported(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_ctranslate2(tiny_checkpoint, tmp_path_factory.mktemp("ct2") / "model")


@pytest.fixture(scope="module")
def ct2(exported: Path) -> Ct2Translator:
    return Ct2Translator(exported, intra_threads=1)


def minitx_log_probs(
    model: Transformer, translator: Translator, sources: list[str], targets: list[str]
) -> list[torch.Tensor]:
    """Teacher-forced log-probabilities of each target piece and the final eos."""
    out = []
    tok = translator.tokenizer
    with torch.inference_mode():
        for src, tgt in zip(tok.encode(sources), tok.encode(targets), strict=True):
            tgt_in, labels = frame_target(tgt)
            logits = model.eval()(torch.tensor([frame_source(src)]), torch.tensor([tgt_in]))
            logp = torch.log_softmax(logits[0].float(), dim=-1)  # (T, V)
            out.append(logp.gather(-1, torch.tensor(labels)[:, None])[:, 0])
    return out


def ct2_log_probs(ct2_model: Ct2Translator, sources: list[str], targets: list[str]):
    """The same, from the exported model (CTranslate2's `score_batch`; it appends the eos)."""
    tok = ct2_model.tokenizer
    result = ct2_model.translator.score_batch(
        [tok.id_to_piece(ids) for ids in tok.encode(sources)],
        [tok.id_to_piece(ids) for ids in tok.encode(targets)],
    )
    return [list(r.log_probs) for r in result]


def assert_same_scores(ct2_model: Ct2Translator, model: Transformer, translator: Translator):
    expected = minitx_log_probs(model, translator, TOY_TEST_SOURCES, TOY_TEST_REFERENCES)
    got = ct2_log_probs(ct2_model, TOY_TEST_SOURCES, TOY_TEST_REFERENCES)
    for row, (want, have) in enumerate(zip(expected, got, strict=True)):
        torch.testing.assert_close(
            torch.tensor(have), want, atol=1e-4, rtol=1e-4, msg=lambda m, r=row: f"pair {r}: {m}"
        )


# ----------------------------------------------------------------------- the trained model
def test_an_export_inside_a_release_is_refused(translator: Translator, tmp_path: Path) -> None:
    """It was written there: the release then held a folder of another's, and exporting the
    release again was refused for it (minitx-export refuses such an --out already)."""
    translator.save_pretrained(tmp_path / "release")
    for out in (tmp_path / "release" / "ct2", tmp_path / "release" / "sub" / "ct2"):
        with pytest.raises(OutputError, match=r"--out .* lies inside the release .*release;"):
            export_ctranslate2(tmp_path / "release", out)
        assert not out.exists()
    assert export_ctranslate2(tmp_path / "release", tmp_path / "release" / ".." / "ct2").is_dir()


def test_exported_directory_holds_model_vocabulary_and_tokenizer(exported: Path) -> None:
    names = {p.name for p in exported.iterdir()}
    assert {"model.bin", "config.json", "shared_vocabulary.json", "sentencepiece.model"} <= names
    config = json.loads((exported / "config.json").read_text())
    assert config["add_source_eos"] is True and config["decoder_start_token"] == "<s>"
    vocabulary = json.loads((exported / "shared_vocabulary.json").read_text())
    assert vocabulary[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert not any(p.name.startswith(".") for p in exported.parent.iterdir())  # no temp dir left


def test_teacher_forced_scores_equal_minitx(ct2: Ct2Translator, translator: Translator) -> None:
    assert_same_scores(ct2, translator.model, translator)


def test_greedy_translations_equal_minitx(ct2: Ct2Translator, translator: Translator) -> None:
    ours = translator.translate(SOURCES, beam_size=1)
    theirs = ct2.translate(SOURCES, beam_size=1)
    differ = [(s, a, b) for s, a, b in zip(SOURCES, ours, theirs, strict=True) if a != b]
    assert len(differ) <= 0.01 * len(SOURCES), differ


def test_beam_search_without_length_penalty_mostly_equals_minitx(
    ct2: Ct2Translator, translator: Translator
) -> None:
    # CTranslate2 normalises beam scores by length^alpha, minitx by ((5 + length) / 6)^alpha;
    # with alpha = 0 only the stopping rules differ, and nearly every sentence agrees.
    ours = translator.translate(SOURCES, beam_size=5, alpha=0.0)
    theirs = ct2.translate(SOURCES, beam_size=5, alpha=0.0)
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    assert same >= 0.9 * len(SOURCES)


def test_ct2_translate_keeps_empty_lines_and_order(exported: Path, ct2: Ct2Translator):
    sentences = [TOY_TEST_SOURCES[1], "", "  ", TOY_TEST_SOURCES[0]]
    out = Ct2Translator(exported).translate(sentences, beam_size=1)
    assert out[1:3] == ["", ""]
    assert [out[0], out[3]] == ct2.translate([TOY_TEST_SOURCES[1], TOY_TEST_SOURCES[0]], 1)


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"beam_size": -1}, "beam_size"),
        ({"beam_size": 2.5}, "beam_size"),
        ({"alpha": float("nan")}, "alpha"),
        ({"max_len_b": -3}, "max_len_b"),
        ({"batch_size": 0}, "batch_size"),
        ({"beam_size": 10_000}, r"beam size 10000 is larger than the model's target vocab"),
    ],
)
def test_ct2_refuses_settings_minitx_refuses(ct2: Ct2Translator, setting: dict, named: str):
    """As minitx's decoding settings are checked; CTranslate2 aborted the process (a C++
    dump) on beam_size -1."""
    with pytest.raises((ValueError, ConfigError), match=named):
        ct2.translate(["ein mann ."], **setting)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"intra_threads": -1}, r"intra_threads must be a whole number >= 0, got -1"),
        ({"intra_threads": "2"}, r"intra_threads must be a whole number >= 0, got '2'"),
        ({"device": "gpu"}, r"device must be one of cpu, cuda, auto, got 'gpu'"),
        ({"compute_type": "bogus"}, r"compute_type 'bogus' is not one CTranslate2 runs on cpu"),
    ],
)
def test_ct2_translator_names_a_setting_ctranslate2_cannot_use(
    exported: Path, setting: dict, message: str
) -> None:
    """CTranslate2 raised a pybind TypeError or a RuntimeError that named no argument."""
    with pytest.raises(ConfigError, match=message):
        Ct2Translator(exported, **setting)


def test_ct2_translator_refuses_cuda_where_ctranslate2_finds_none(exported: Path) -> None:
    import ctranslate2

    if ctranslate2.get_cuda_device_count() > 0:
        pytest.skip("CTranslate2 finds a CUDA device here")
    with pytest.raises(ConfigError, match=r"device='cuda': CTranslate2 finds no CUDA device"):
        Ct2Translator(exported, device="cuda")


def test_ct2_leaves_torchs_thread_count_as_it_was(exported: Path) -> None:
    """CTranslate2 sets the process's OpenMP threads as it starts, and torch shares them:
    torch keeps its own count (it went from 1 to 2, and every torch computation after it
    in the process ran on two threads)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        Ct2Translator(exported, intra_threads=2)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_length_cap_is_minitx_s(ct2: Ct2Translator, translator: Translator) -> None:
    # a cap of 2 generated tokens (a=0, b=2) binds for every sentence
    ours = translator.translate(SOURCES[:10], beam_size=1, max_len_a=0.0, max_len_b=2)
    assert ct2.translate(SOURCES[:10], beam_size=1, max_len_a=0.0, max_len_b=2) == ours


# ----------------------------------------------------------------------- every exportable setting
def noisy_model(config: TransformerConfig) -> Transformer:
    """A model whose every parameter (norms and a bilinear matrix included) is random, so that
    a weight put in the wrong place shows."""
    torch.manual_seed(0)
    model = Transformer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"norm_first": False},
        {"positional": "learned"},
        {"positional": "none"},
        {"positional": "rotary"},
        {"score": "dot"},
        {"score": "bilinear"},
        {"score": "dot", "positional": "rotary", "norm_first": False},
        {"activation": "gelu", "scale_embeddings": False},
        {"activation": "silu", "share_embeddings": False, "tie_output": False},
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default",
)
def test_every_exportable_setting_scores_and_decodes_as_minitx(
    changes: dict, translator: Translator, tmp_path: Path
) -> None:
    vocab = translator.tokenizer.vocab_size
    config = TransformerConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=32,
        n_heads=2,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=48,
        dropout=0.0,
        **changes,
    )
    model = noisy_model(config)
    ct2_model = Ct2Translator(export_model(model, translator.tokenizer, tmp_path / "m"))
    assert_same_scores(ct2_model, model, translator)
    reference = Translator(model, translator.tokenizer)
    sources = TOY_TEST_SOURCES[:5]
    assert ct2_model.translate(sources, beam_size=1) == reference.translate(sources, beam_size=1)


# ----------------------------------------------------------------------- refusals and errors
@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"score": "additive"}, "score='additive'"),
        (
            {"score": "bilinear", "positional": "rotary"},
            "score='bilinear' with positional='rotary'",
        ),
    ],
)
def test_settings_ctranslate2_cannot_express_are_refused(changes: dict, named: str) -> None:
    with pytest.raises(ConfigError, match="cannot export to CTranslate2") as info:
        check_exportable(TransformerConfig(**changes))
    assert named in str(info.value) and "\n" not in str(info.value)


def test_an_activation_ctranslate2_lacks_is_refused() -> None:
    with ACTIVATIONS.temporarily("tanh", torch.nn.Tanh):
        with pytest.raises(ConfigError, match="activation='tanh'"):
            check_exportable(TransformerConfig(activation="tanh"))


def test_missing_ctranslate2_names_the_extra(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 -> ImportError
    with pytest.raises(MissingExtraError) as info:
        export_ctranslate2(tiny_checkpoint, tmp_path / "out")
    assert "pip install 'minitx[export]'" in user_error_message(info.value)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------- the command
def run_ct2(*args: str) -> subprocess.CompletedProcess:
    """minitx-ct2 as a process (a preloaded fork: ctranslate2 is still imported by it)."""
    return run_python(
        [PYTHON, "-m", "minitx.extras.ctranslate2.command", *args],
        env=subprocess_env(),
        timeout=180,
    )


def test_command_writes_a_loadable_int8_directory(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "int8"
    done = run_ct2(
        "--checkpoint", str(tiny_checkpoint), "--out", str(out), "--quantization", "int8"
    )
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    translated = Ct2Translator(out).translate(TOY_TEST_SOURCES[:3], beam_size=2)
    assert len(translated) == 3 and all(isinstance(t, str) for t in translated)
    before = (out / "model.bin").stat().st_mtime_ns

    again = run_ct2("--checkpoint", str(tiny_checkpoint), "--out", str(out))
    assert again.returncode == 2
    assert again.stderr.strip() == f"error: --out {out} exists already; pass --force to replace it"
    assert (out / "model.bin").stat().st_mtime_ns == before

    forced = run_ct2("--checkpoint", str(tiny_checkpoint), "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert json.loads((out / "minitx.json").read_text())["quantization"] == "float32"


def test_command_refuses_a_model_ctranslate2_cannot_run(
    translator: Translator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = TransformerConfig(
        src_vocab_size=translator.tokenizer.vocab_size,
        tgt_vocab_size=translator.tokenizer.vocab_size,
        d_model=16,
        n_heads=2,
        n_encoder_layers=1,
        n_decoder_layers=1,
        d_ff=16,
        score="additive",
    )
    model = Transformer(config)
    checkpoint = tmp_path / "additive.ckpt"
    torch.save(
        {
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "minitx": {
                "model_config": config.to_dict(),
                "tokenizer": translator.tokenizer.model_bytes,
            },
        },
        checkpoint,
    )
    assert ct2_cli.main(["--checkpoint", str(checkpoint), "--out", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: cannot export to CTranslate2: TransformerConfig.score='additive'"
    )
    assert not (tmp_path / "out").exists()


def test_command_names_out_when_the_disk_is_full(
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """CTranslate2's writer raises an OSError that names no file: the line said "cannot write
    the output (standard output, or a file the command writes)"."""
    import errno

    import minitx.extras.ctranslate2.export as export

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "export_model", full)
    out = tmp_path / "out"
    assert ct2_cli.main(["--checkpoint", str(tiny_checkpoint), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"error: cannot write into --out {out}: No space left on device; free some space there or "
        "write somewhere else"
    ]


def test_command_reports_a_missing_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--checkpoint", str(tmp_path / "nope.ckpt"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_info:  # refused while the options are read
        ct2_cli.main(argv)
    assert exit_info.value.code == 2
    assert "checkpoint not found: " in capsys.readouterr().err


def test_command_refuses_an_unknown_quantization(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "out")]
    assert ct2_cli.main([*argv, "--quantization", "int3"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: unknown CTranslate2 quantization 'int3'; choose from ")
    assert "int8" in line and not (tmp_path / "out").exists()
    # before --out's check: "--out exists already; pass --force", then this error after it
    (tmp_path / "out").mkdir()
    assert ct2_cli.main([*argv, "--quantization", "int3"]) == 2
    assert "unknown CTranslate2 quantization 'int3'" in capsys.readouterr().err
