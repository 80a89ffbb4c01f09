"""Release directories (minitx/release.py, minitx-export): a round trip that changes nothing,
small files, one-line errors for damaged ones, and the hub wiring (faked: no network)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import PYTHON, TOY_CORPUS_DIR, TOY_TEST_SOURCES, subprocess_env
from preloaded import run_python
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from minitx import release
from minitx.attention import SCORES
from minitx.cli import export as export_cli
from minitx.cli import translate as translate_cli
from minitx.decoding import DecodingConfig
from minitx.errors import CheckpointError, MissingFileError, OutputError, SourceUnreachableError
from minitx.model import Transformer, TransformerConfig
from minitx.translator import Translator
from minitx.vocab import frame_source, frame_target

SENTENCES = TOY_TEST_SOURCES[:6]


@pytest.fixture(scope="module")
def original(tiny_checkpoint: Path) -> Translator:
    return Translator.from_pretrained(tiny_checkpoint)


@pytest.fixture(scope="module")
def release_dir(original: Translator, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("release") / "de-en"
    original.save_pretrained(directory)
    return directory


@pytest.fixture
def copy_of(release_dir: Path, tmp_path: Path):
    """A fresh copy of the release directory, to damage."""

    def make() -> Path:
        return Path(shutil.copytree(release_dir, tmp_path / "copy"))

    return make


def dir_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


# ------------------------------------------------------------------------------ round trip
def test_files_of_a_release(release_dir: Path, original: Translator) -> None:
    written = set(release.RELEASE_FILES) - {release.EVALUATION_FILE}  # none given: no scores
    assert sorted(p.name for p in release_dir.iterdir()) == sorted(written)
    config = json.loads((release_dir / "config.json").read_text(encoding="utf-8"))
    assert config["format"] == release.FORMAT and config["format_version"] == 2
    assert config["model"] == original.model.config.to_dict()
    assert config["model_sha256"] == release.model_checksum(config["model"])
    assert len(config["model_sha256"]) == 64
    assert (config["src_lang"], config["tgt_lang"]) == original.languages == ("de", "en")
    assert (release_dir / "tokenizer.model").read_bytes() == original.tokenizer.model_bytes
    assert (release_dir / "train_config.yaml").read_text(encoding="utf-8") == (
        original.train_config
    )
    card = (release_dir / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\n") and "- de\n- en\n" in card  # hub metadata: languages
    assert "builtin:toy" in card and "Translator.from_pretrained" in card
    assert "minitx-train --config train_config.yaml" in card


def test_a_resumed_runs_training_config_is_written_for_a_new_run(
    original: Translator, tmp_path: Path
) -> None:
    """A resumed run's config names the checkpoint it resumed from: `minitx-train --config
    train_config.yaml`, which the card offers, failed elsewhere ("checkpoint not found") and
    resumed that run where the file was."""
    assert "\nckpt_path: null\n" in original.train_config
    resumed = original.train_config.replace(
        "\nckpt_path: null\n", "\nckpt_path: runs/tiny/x/checkpoints/last.ckpt\n"
    )
    translator = Translator(
        original.model, original.tokenizer, languages=original.languages, train_config=resumed
    )
    translator.save_pretrained(tmp_path / "release")
    written = (tmp_path / "release" / "train_config.yaml").read_text(encoding="utf-8")
    assert written == original.train_config


def test_evaluating_a_release_given_as_dot_writes_beside_it_not_into_it(
    copy_of: Callable[[], Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`cd de-en && minitx-evaluate --checkpoint .` wrote a hidden `.test....hyp` into the
    release, which its next export then refused as a file of someone else's."""
    from minitx.cli import evaluate as evaluate_cli

    copy = copy_of()
    monkeypatch.chdir(copy)
    args = ["--checkpoint", ".", "--data", str(TOY_CORPUS_DIR), "--limit", "2", "--beam", "1"]
    assert evaluate_cli.main(args) == 0
    assert sorted(p.name for p in copy.iterdir()) == sorted(
        set(release.RELEASE_FILES) - {release.EVALUATION_FILE}
    )
    (hyp,) = copy.parent.glob(f"{copy.name}.test.*.greedy.hyp")
    assert len(hyp.read_text(encoding="utf-8").splitlines()) == 2
    capsys.readouterr()


class OwnScore(nn.Module):
    """A score registered by the test itself, as a user's module would."""

    def __init__(self, *, d_head: int) -> None:
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-2, -1)


def test_a_card_names_the_components_minitx_does_not_ship(original: Translator) -> None:
    """Whoever downloads a release of a model with a score of one's own could not tell which
    module to import: the loading error names the score, not where it comes from."""
    assert "does not ship" not in release.model_card(
        release.Release(original.model, original.tokenizer)
    )
    with SCORES.temporarily("own", OwnScore):
        config = TransformerConfig(**{**original.model.config.to_dict(), "score": "own"})
        card = release.model_card(release.Release(Transformer(config), original.tokenizer))
    assert f"This model uses score `own` (module `{__name__}`), which minitx does not ship" in card


def test_round_trip_gives_identical_logits_and_translations(
    release_dir: Path, original: Translator
) -> None:
    loaded = Translator.from_pretrained(release_dir)
    assert loaded.languages == original.languages
    assert loaded.train_config == original.train_config
    before, after = original.model.state_dict(), loaded.model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # tied matrices stay tied, not two copies
    assert loaded.model.output.weight.data_ptr() == loaded.model.tgt_embed.weight.data_ptr()
    ids = original.tokenizer.encode(SENTENCES[:2])
    src = torch.tensor([frame_source(ids[0])])
    tgt = torch.tensor([frame_target(ids[1][:5])[0]])
    with torch.inference_mode():
        assert torch.equal(original.model(src, tgt), loaded.model(src, tgt))
    for decoding in (DecodingConfig.for_beam(1), DecodingConfig.for_beam(4)):
        assert loaded.translate(SENTENCES, decoding) == original.translate(SENTENCES, decoding)
    assert loaded.translate_n_best(SENTENCES, beam_size=4, n_best=3) == (
        original.translate_n_best(SENTENCES, beam_size=4, n_best=3)
    )
    assert Translator.from_pretrained(release_dir).translate(SENTENCES) == (
        original.translate(SENTENCES)
    )


def test_release_holds_the_weights_once_and_no_optimizer_state(
    release_dir: Path, tiny_checkpoint: Path, original: Translator
) -> None:
    unique = {p.data_ptr(): p for p in original.model.state_dict().values()}
    weight_bytes = sum(p.numel() * p.element_size() for p in unique.values())
    with safe_open(release_dir / "model.safetensors", framework="pt") as f:
        assert len(list(f.keys())) == len(unique)  # one entry per distinct tensor
    assert (release_dir / "model.safetensors").stat().st_size < 1.02 * weight_bytes
    # The sentencepiece model (mostly its normalisation table) is the same bytes in both files
    # and a third of this tiny model's release; the rest is under 40% of the checkpoint.
    tokenizer = len(original.tokenizer.model_bytes)
    ckpt = tiny_checkpoint.stat().st_size
    assert dir_size(release_dir) - tokenizer < 0.4 * (ckpt - tokenizer)
    assert dir_size(release_dir) < 0.45 * ckpt


def test_save_pretrained_replaces_an_earlier_release(
    release_dir: Path, original: Translator, tmp_path: Path
) -> None:
    directory = Path(shutil.copytree(release_dir, tmp_path / "again"))
    without_config = Translator(original.model, original.tokenizer, languages=("de", "en"))
    without_config.save_pretrained(directory)
    assert not (directory / "train_config.yaml").exists()  # no stale file left behind
    assert "does not hold its training config" in (directory / "README.md").read_text("utf-8")
    assert Translator.from_pretrained(directory).translate(SENTENCES[:2]) == (
        original.translate(SENTENCES[:2])
    )


def test_an_interrupted_export_leaves_the_earlier_release_whole(
    release_dir: Path, original: Translator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weights are written first: an export stopped after them (here, while writing the
    card) must leave neither new weights under the old card nor a half release."""
    directory = Path(shutil.copytree(release_dir, tmp_path / "de-en"))
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    doubled = Transformer(original.model.config)
    doubled.load_state_dict({k: 2 * v for k, v in original.model.state_dict().items()})
    other = Translator(doubled, original.tokenizer, languages=("de", "en"))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(release, "model_card", interrupted)
    for out in (directory, tmp_path / "new"):
        with pytest.raises(KeyboardInterrupt):
            other.save_pretrained(out)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["de-en"]  # no new one, no temporary


def test_save_pretrained_refuses_a_directory_with_other_files(
    original: Translator, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(OutputError, match=r"holds other files \(notes.txt\)"):
        original.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_save_pretrained_refuses_a_directory_inside_a_release(
    original: Translator, tmp_path: Path
) -> None:
    outer = tmp_path / "rel"
    original.save_pretrained(outer)
    before = sorted(p.name for p in outer.iterdir())
    for inside in (outer / "sub", outer / "a" / "b"):
        with pytest.raises(OutputError, match=rf"lies inside the release {outer}; give a"):
            original.save_pretrained(inside)
    assert sorted(p.name for p in outer.iterdir()) == before
    original.save_pretrained(outer)  # the release itself may still be replaced
    original.save_pretrained(outer / ".." / "beside")  # beside it, not inside
    assert (tmp_path / "beside" / "config.json").is_file()
    (tmp_path / "link").symlink_to(outer)  # inside it by a link
    with pytest.raises(OutputError, match="lies inside the release"):
        original.save_pretrained(tmp_path / "link" / "sub")


# ------------------------------------------------------------------------------ one path
def test_ckpt_release_dir_and_hub_id_load_through_one_path(
    tiny_checkpoint: Path, release_dir: Path, original: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `.ckpt`, a release directory and a hub repo id (a local stand-in: the download
    returns the release directory) all go through `release.load`, from every entry point, and
    translate identically."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kw: release_dir)
    loaded_from = []
    load = release.load

    def recording_load(source, **kwargs):
        loaded_from.append(str(source))
        return load(source, **kwargs)

    monkeypatch.setattr(release, "load", recording_load)
    sources = [tiny_checkpoint, release_dir, "me/minitx-de-en"]
    greedy = DecodingConfig.for_beam(1)
    expected = original.translate(SENTENCES), original.translate(SENTENCES, greedy)
    for source in sources:
        translator = Translator.from_pretrained(source)
        got = translator.translate(SENTENCES), translator.translate(SENTENCES, greedy)
        assert got == expected, source
        assert translator.languages == original.languages == ("de", "en")
        assert translator.train_config == original.train_config
    assert loaded_from == [str(source) for source in sources]


def test_the_commands_checkpoint_option_loads_through_the_same_path(
    tiny_checkpoint: Path,
    release_dir: Path,
    original: Translator,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """``--checkpoint`` takes a `.ckpt`, a release directory and a hub repo id, each loaded
    once through `release.load`, and translates as the Translator does."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kw: release_dir)
    loaded_from = []
    load = release.load

    def recording_load(source, **kwargs):
        loaded_from.append(str(source))
        return load(source, **kwargs)

    monkeypatch.setattr(release, "load", recording_load)
    sources = [str(tiny_checkpoint), str(release_dir), "me/minitx-de-en"]
    expected = original.translate(SENTENCES, DecodingConfig.for_beam(1))
    for source in sources:
        assert translate_cli.main(["--checkpoint", source, "--beam", "1", *SENTENCES]) == 0
        assert capsys.readouterr().out.splitlines() == expected, source
    assert loaded_from == sources


def test_load_returns_model_tokenizer_config_languages_and_train_config(
    tiny_checkpoint: Path, release_dir: Path, original: Translator
) -> None:
    for source in (tiny_checkpoint, release_dir):
        loaded = release.load(source)
        assert loaded.model.config == original.model.config
        assert loaded.tokenizer.model_bytes == original.tokenizer.model_bytes
        assert loaded.languages == ("de", "en")
        assert loaded.train_config == original.train_config


def test_a_release_written_before_the_tokenizer_checksum_still_loads(
    copy_of, original: Translator
) -> None:
    directory = copy_of()
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_sha256"] == hashlib.sha256(original.tokenizer.model_bytes).hexdigest()
    _edit_config(directory, lambda c: c.pop("tokenizer_sha256"))
    assert release.load(directory).tokenizer.model_bytes == original.tokenizer.model_bytes


def test_a_missing_source_is_the_same_error_from_every_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither a local path nor a repo id: `MissingFileError` (a `FileNotFoundError`, and one
    ``error:`` line in the commands) naming what the path may be, whoever loads it."""
    monkeypatch.chdir(tmp_path)
    assert issubclass(MissingFileError, FileNotFoundError)
    for loader in (Translator.from_pretrained, release.load):
        for missing in ("runs/tiny/last.ckpt", "no_such_dir"):
            with pytest.raises(MissingFileError, match=re.escape(f"not found: {missing} (pass")):
                loader(missing)


# ------------------------------------------------------------------------------ damage
def _edit_config(directory: Path, change, *, reseal: bool = True) -> None:
    """Apply `change` to config.json; `reseal`: write the edited model's checksum too (a
    forger's edit, which the later checks must still catch), else leave the old one."""
    path = directory / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    change(config)
    if reseal and isinstance(config.get("model"), dict):
        config["model_sha256"] = release.model_checksum(config["model"])
    path.write_text(json.dumps(config), encoding="utf-8")


def _bad_json(directory: Path) -> None:
    (directory / "config.json").write_text('{"format": "minitx-release",', encoding="utf-8")


def _wrong_d_model(directory: Path) -> None:
    _edit_config(directory, lambda c: c["model"].update(d_model=2 * c["model"]["d_model"]))


def _edit_weights(directory: Path, change) -> None:
    """Apply `change` to the release's tensors (name -> tensor) and write them back."""
    path = directory / "model.safetensors"
    with safe_open(path, framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    change(tensors)
    save_file(tensors, path)


def _q_proj(tensors: dict) -> str:
    """The name of a query projection's weight: a tensor every model has."""
    return next(k for k in tensors if k.endswith("q_proj.weight"))


def _wrong_shape_weights(directory: Path) -> None:
    def grow(tensors: dict) -> None:
        name = _q_proj(tensors)
        tensors[name] = torch.zeros(tensors[name].shape[0] + 1, tensors[name].shape[1])

    _edit_weights(directory, grow)


def _extra_tensor(directory: Path) -> None:
    _edit_weights(directory, lambda tensors: tensors.update({"backdoor.weight": torch.zeros(2, 2)}))


def _edited_n_heads(directory: Path) -> None:
    """Twice the heads: no weight changes shape, so only the checksum can tell."""
    _edit_config(
        directory, lambda c: c["model"].update(n_heads=2 * c["model"]["n_heads"]), reseal=False
    )


def _format_1(directory: Path) -> None:
    """A release as the first format wrote it: no checksum."""
    _edit_config(directory, lambda c: (c.update(format_version=1), c.pop("model_sha256")))


def _missing_tensor(directory: Path) -> None:
    """One tensor of the model gone: no shape differs, so only the strict load can tell."""
    _edit_weights(directory, lambda tensors: tensors.pop(_q_proj(tensors)))


def _other_tokenizer(directory: Path, *, size: int | None = None) -> None:
    """A tokenizer of another model: trained on the toy corpus's English side alone, with
    `size` pieces (default: this one's)."""
    from minitx.tokenizer import Tokenizer

    path = directory / "tokenizer.model"
    size = size or Tokenizer.load(path).vocab_size
    sentences = (TOY_CORPUS_DIR / "train.en").read_text(encoding="utf-8").splitlines()
    Tokenizer.train(sentences, vocab_size=size).save(path)


def _older_release_with_a_smaller_tokenizer(directory: Path) -> None:
    """A release written before tokenizer_sha256, its tokenizer replaced by one of half the
    pieces: the sizes still tell."""
    from minitx.tokenizer import Tokenizer

    _edit_config(directory, lambda c: c.pop("tokenizer_sha256"))
    _other_tokenizer(directory, size=Tokenizer.load(directory / "tokenizer.model").vocab_size // 2)


def _nan_weights(directory: Path) -> None:
    def poison(tensors: dict) -> None:
        name = _q_proj(tensors)
        tensors[name] = torch.full_like(tensors[name], float("nan"))

    _edit_weights(directory, poison)


def _integer_weights(directory: Path) -> None:
    def cast(tensors: dict) -> None:  # whole numbers: loading would make them floats silently
        name = _q_proj(tensors)
        tensors[name] = (tensors[name] * 100).to(torch.int64)

    _edit_weights(directory, cast)


DAMAGE = {
    "bad-json": (_bad_json, r"config\.json: not valid JSON"),
    "unknown-key": (  # the path once: it was said twice
        lambda d: _edit_config(d, lambda c: c.update(extra=1)),
        r"^[^:]*config\.json: unknown keys \['extra'\]",
    ),
    "unknown-model-key": (
        lambda d: _edit_config(d, lambda c: c["model"].update(d_modle=64)),
        r"TransformerConfig: unknown keys \['d_modle'\]",
    ),
    "wrong-d_model": (_wrong_d_model, r"model\.safetensors: the weights do not fit"),
    "huge-d_model": (
        lambda d: _edit_config(d, lambda c: c["model"].update(d_model=10**9)),
        r"config\.json: TransformerConfig\.d_model must be at most 8192 \(the largest minitx "
        r"builds\), got 1000000000",
    ),
    "no-src_lang": (
        lambda d: _edit_config(d, lambda c: c.pop("src_lang")),
        r"config\.json: src_lang is missing",
    ),
    "huge-layers": (
        lambda d: _edit_config(d, lambda c: c["model"].update(n_decoder_layers=10**6)),
        r"config\.json: TransformerConfig\.n_decoder_layers must be at most 128",
    ),
    "edited-n_heads": (
        _edited_n_heads,
        r"config\.json: the model config does not match its checksum .* re-export",
    ),
    "no-checksum": (
        lambda d: _edit_config(d, lambda c: c.pop("model_sha256"), reseal=False),
        r"config\.json: the model config does not match its checksum",
    ),
    "format-1": (_format_1, r"config\.json: release format 1 .* no config checksum.* re-export"),
    "extra-tensor": (_extra_tensor, r"the model has no tensor 'backdoor\.weight'"),
    "newer-format": (
        lambda d: _edit_config(d, lambda c: c.update(format_version=99)),
        r"format 99 .* upgrade minitx",
    ),
    "foreign-json": (
        lambda d: (d / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8"),
        r"not a minitx release config",
    ),
    "missing-weights": (
        lambda d: (d / "model.safetensors").unlink(),
        r"missing model\.safetensors",
    ),
    "missing-tokenizer": (
        lambda d: (d / "tokenizer.model").unlink(),
        r"missing tokenizer\.model",
    ),
    "wrong-shape-weights": (_wrong_shape_weights, r"size mismatch for .*q_proj\.weight"),
    "integer-weights": (
        _integer_weights,
        r"model\.safetensors: .*q_proj\.weight holds I64 values, not floating-point weights",
    ),
    "nan-weights": (
        _nan_weights,
        r"model\.safetensors: the weights hold NaN or inf .*diverged .*, or the file is damaged",
    ),
    "format-version-text": (
        lambda d: _edit_config(d, lambda c: c.update(format_version="2")),
        r"config\.json: format_version must be a positive integer, got '2'",
    ),
    "model-not-an-object": (
        lambda d: _edit_config(d, lambda c: c.update(model=[64, 4])),
        r"config\.json: 'model' must be an object of TransformerConfig settings",
    ),
    "numeric-language": (
        lambda d: _edit_config(d, lambda c: c.update(src_lang=49)),
        r"config\.json: src_lang 49 is no language code .* or null",
    ),
    "markup-language": (  # it loaded, and evaluate printed it in a long "no split" error
        lambda d: _edit_config(d, lambda c: c.update(tgt_lang="<script>\nx")),
        r"config\.json: tgt_lang '<script>\\nx' is no language code .* re-export",
    ),
    "missing-tensor": (
        _missing_tensor,
        r"model\.safetensors: the weights do not fit .*Missing key\(s\) .*q_proj\.weight",
    ),
    "garbage-tokenizer": (
        lambda d: (d / "tokenizer.model").write_bytes(b"\x00" * 100),
        r"tokenizer\.model: not a sentencepiece model",
    ),
    "other-tokenizer": (  # the same size: it loaded and translated garbage
        _other_tokenizer,
        r"tokenizer\.model: not the tokenizer this release was exported with .*tokenizer_sha256",
    ),
    "older-release-other-tokenizer": (
        _older_release_with_a_smaller_tokenizer,
        r"pieces, but .*config\.json says the model has",
    ),
    "garbage-weights": (
        lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 100),
        r"model\.safetensors: not a readable safetensors file",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_release_is_one_error_line(
    damage: str, copy_of, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    directory = copy_of()
    change, message = DAMAGE[damage]
    change(directory)
    with pytest.raises(CheckpointError, match=message):
        Translator.from_pretrained(directory)
    assert translate_cli.main(["--checkpoint", str(directory), "ein hund"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: "), err


def test_a_run_directory_given_as_checkpoint_points_to_its_checkpoints(
    tiny_checkpoint: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run directory, or its checkpoints/, is what a newcomer passes first."""
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    checkpoints = tiny_checkpoint.parent
    for directory in (checkpoints.parent, checkpoints):
        assert translate_cli.main(["--checkpoint", str(directory), "ein hund"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {directory}: not a minitx release but a directory of "), err
        assert f"pass one of them, e.g. {checkpoints}{os.sep}" in err and ".ckpt" in err, err


def test_a_file_of_a_release_or_a_ctranslate2_directory_says_what_to_pass(
    release_dir: Path, tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A release's config.json or model.safetensors was "not a file written by torch.save",
    and minitx-ct2's output "not a complete minitx release: missing model.safetensors"."""
    for name in ("config.json", "model.safetensors"):
        assert translate_cli.main(["--checkpoint", str(release_dir / name), "ein hund"]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"error: {release_dir / name} is one file of a release directory: pass the "
            f"directory, {release_dir}\n"
        )
    ct2 = tmp_path / "model-ct2"  # the files minitx-ct2 writes, as far as the check reads
    ct2.mkdir()
    (ct2 / "model.bin").write_bytes(b"\0")
    (ct2 / "config.json").write_text("{}", encoding="utf-8")
    for given in (ct2, ct2 / "model.bin", ct2 / "config.json"):  # a file of it: "torch.save"
        assert translate_cli.main(["--checkpoint", str(given), "ein hund"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {ct2}: a CTranslate2 model (model.bin), not a minitx"), err
        assert "Ct2Translator" in err and err.count("\n") == 1
    shutil.copyfile(tiny_checkpoint, ct2 / "model.ckpt")  # a checkpoint beside it still loads
    assert release.load(ct2 / "model.ckpt").model is not None


@pytest.mark.parametrize(
    "damage", ["wrong-d_model", "huge-d_model", "wrong-shape-weights", "extra-tensor"]
)
def test_a_release_is_checked_before_its_model_is_allocated(
    damage: str, copy_of, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sizes and the safetensors header's shapes are compared with config.json before the
    model exists: neither a real-sized model is built nor its weights read."""
    directory = copy_of()
    DAMAGE[damage][0](directory)

    def no_real_model(config):
        assert torch.empty(0).device.type == "meta", "a model was allocated before the check"
        return Transformer(config)

    monkeypatch.setattr(release, "Transformer", no_real_model)
    monkeypatch.setattr(release, "load_model", lambda *a, **k: pytest.fail("weights were read"))
    with pytest.raises(CheckpointError, match=DAMAGE[damage][1]):
        release.load_pretrained(directory)


def test_an_intact_release_passes_the_checks(release_dir: Path) -> None:
    config = release.read_config(release_dir)
    release.check_weight_shapes(release_dir / "model.safetensors", config["model"])
    assert (
        config["model"].n_heads
        == json.loads((release_dir / "config.json").read_text(encoding="utf-8"))["model"]["n_heads"]
    )


@pytest.mark.parametrize("damage", ["format-1", "edited-n_heads"])
def test_re_exporting_over_a_refused_release_fixes_it(
    damage: str, copy_of, tiny_checkpoint: Path, capsys: pytest.CaptureFixture
) -> None:
    """The refusal says "re-export"; minitx-export replaces the older or edited release."""
    directory = copy_of()
    DAMAGE[damage][0](directory)
    assert translate_cli.main(["--checkpoint", str(directory), "ein hund"]) == 2
    assert "re-export" in capsys.readouterr().err
    assert export_cli.main(["--checkpoint", str(tiny_checkpoint), "--out", str(directory)]) == 0
    assert release.load(directory).model.config == release.load(tiny_checkpoint).model.config


def test_a_full_disk_under_the_weights_is_one_error_line_and_leaves_no_release(
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """safetensors reports a failed write as its own SafetensorError, not an OSError: the
    export ended in a traceback."""
    from safetensors import SafetensorError

    def full_disk(*args: object, **kwargs: object) -> None:
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(release, "save_model", full_disk)
    out = tmp_path / "rel"
    assert export_cli.main(["--checkpoint", str(tiny_checkpoint), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write into --out {out}: ") and err.count("\n") == 1, err
    assert "No space left on device" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_damaged_release_and_hub_id_through_the_command(copy_of) -> None:
    """`minitx-translate` (`python -m minitx.cli.translate`) as a real process: exit 2 and one
    `error:` line for a damaged directory and, offline, for a hub repo id that is not a local
    path."""
    directory = copy_of()
    _wrong_d_model(directory)
    env = {**subprocess_env(), "HF_HUB_OFFLINE": "1"}
    env.pop("MINITX_DEBUG", None)
    for target, message in (
        (str(directory), "the weights do not fit the model of config.json"),
        ("someone/minitx-de-en", "'someone/minitx-de-en' is not a local file or directory"),
    ):
        proc = subprocess.run(
            [PYTHON, "-m", "minitx.cli.translate", "--checkpoint", target, "ein hund"],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
        assert message in proc.stderr
    assert "release directory" in proc.stderr  # how to do without the hub


# ------------------------------------------------------------------------------ export command
def test_export_command_end_to_end(tiny_checkpoint: Path, original: Translator, tmp_path) -> None:
    out = tmp_path / "exported"
    proc = run_python(  # a preloaded fork: the command's own work, as a process
        [PYTHON, "-m", "minitx.cli.export", "--checkpoint", str(tiny_checkpoint)]
        + ["--out", str(out)],
        env=subprocess_env(),
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"wrote {out / 'model.safetensors'}" in proc.stdout
    assert "of the checkpoint's" in proc.stdout
    assert Translator.from_pretrained(out).translate(SENTENCES) == original.translate(SENTENCES)


def test_the_weights_checksum_is_the_same_from_a_checkpoint_and_its_release(
    tiny_checkpoint: Path, release_dir: Path, original: Translator
) -> None:
    """What `minitx-evaluate --json` records and `minitx-export --evaluation` compares: the
    weights, not the file they came in; another model's weights give another digest."""
    from minitx.release import weights_checksum

    digest = weights_checksum(original.model)
    assert weights_checksum(Translator.from_pretrained(release_dir).model) == digest
    other = Translator.from_pretrained(tiny_checkpoint).model
    with torch.no_grad():
        next(other.parameters())[0, 0] += 1e-3
    assert weights_checksum(other) != digest


def test_export_records_the_evaluation_in_the_card(
    release_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from minitx.cli import evaluate as evaluate_cli

    report = tmp_path / "eval.json"
    args = ["--checkpoint", str(release_dir), "--data", str(TOY_CORPUS_DIR), "--limit", "3"]
    hyp = ["--hyp-out", str(tmp_path / "{beam}.hyp")]
    assert evaluate_cli.main([*args, *hyp, "--beam", "1", "2", "--json", str(report)]) == 0
    out = tmp_path / "scored"
    assert export_cli.main(["--checkpoint", str(release_dir), "--out", str(out)]) == 0
    before = (out / "README.md").read_text(encoding="utf-8")
    assert "Not measured" in before
    assert (
        export_cli.main(
            ["--checkpoint", str(release_dir), "--out", str(out), "--evaluation", str(report)]
        )
        == 0
    )
    card = (out / "README.md").read_text(encoding="utf-8")
    for result in json.loads(report.read_text(encoding="utf-8"))["results"]:
        line = f"- `{result['decoding']}`: BLEU {result['bleu']:.2f}, chrF {result['chrf']:.2f}"
        assert f"{line} (`{result['signature']}`)" in card
    assert "- `greedy`: BLEU" in card and "`nrefs:1|" in card
    assert "sacreBLEU on the first 3 lines of the `test` split of" in card  # --limit 3
    kept = (out / "evaluation.json").read_text(encoding="utf-8")
    assert str(tmp_path) not in kept  # the report's local paths stay local

    # markup in a report's text is quoted as code in the card: shown, not run in a page
    marked = json.loads(report.read_text(encoding="utf-8"))
    marked["results"][0]["decoding"] = "<script>alert(1)</script>"
    marked_report = tmp_path / "marked.json"
    # with a byte order mark, as Notepad saves it: it was "not a readable JSON file"
    marked_report.write_text("\ufeff" + json.dumps(marked), encoding="utf-8")
    args = ["--checkpoint", str(release_dir), "--out", str(out)]
    assert export_cli.main([*args, "--evaluation", str(marked_report)]) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "- `<script>alert(1)</script>`: BLEU" in card and card.count("<script>") == 1

    # exported again without --evaluation (to push it, as the guide does): the scores stay
    again = tmp_path / "again"
    for source, target in ((out, out), (out, again)):
        assert export_cli.main(["--checkpoint", str(source), "--out", str(target)]) == 0
        assert (target / "README.md").read_text(encoding="utf-8") == card
    # from Python too (the export guide's Translator route)
    from_python = tmp_path / "python"
    Translator.from_pretrained(out).save_pretrained(from_python)
    assert (from_python / "README.md").read_text(encoding="utf-8") == card
    # the same weights from elsewhere (the checkpoint, no report) into the release: its scores
    # are of these weights and stay (they were dropped without a word)
    assert export_cli.main(["--checkpoint", str(release_dir), "--out", str(again)]) == 0
    assert (again / "README.md").read_text(encoding="utf-8") == card
    # other weights: the scores go, and that is said
    other = Translator.from_pretrained(release_dir)
    with torch.no_grad():
        next(other.model.parameters())[0, 0] += 1e-3
    with caplog.at_level(logging.WARNING, logger="minitx.release"):
        other.save_pretrained(again)
    assert f"{again / 'evaluation.json'} left out: " in caplog.text
    assert "scores other weights than this model's" in caplog.text
    assert "Not measured" in (again / "README.md").read_text(encoding="utf-8")
    assert not (again / "evaluation.json").exists()
    capsys.readouterr()


def test_a_card_edited_after_export_is_not_written_over(
    release_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The export guide re-exports a release into itself (to add scores, to push it): a card
    the user had edited was replaced without a word. Its last line is its checksum: edited
    (above or below it, or the line removed), the export is refused and the card stays."""
    out = tmp_path / "rel"
    again = ["--checkpoint", str(out), "--out", str(out)]
    assert export_cli.main(["--checkpoint", str(release_dir), "--out", str(out)]) == 0
    card = out / "README.md"
    written = card.read_text(encoding="utf-8")
    assert written.splitlines()[-1].startswith("<!-- minitx card sha256 ")
    assert export_cli.main(again) == 0 and card.read_text(encoding="utf-8") == written
    card.write_text(written.replace("## Use", "My notes.\n\n## Use"), encoding="utf-8")
    assert export_cli.main(again) == 2
    err = capsys.readouterr().err
    assert f"error: --out {out}: its README.md was edited after export" in err, err
    assert "My notes." in card.read_text(encoding="utf-8")
    edits = [
        "# My model\n",  # another text
        written + "## My notes\n",  # below the checksum line
        written.replace("## Use", "My notes.\n\n## Use").split("<!-- minitx card")[0],  # line gone
        written.split("<!-- minitx card")[0],  # an export's before 2026-12-05: cannot be told
    ]
    for edited in edits:
        card.write_text(edited, encoding="utf-8")
        assert export_cli.main(again) == 2 and "README.md was edited" in capsys.readouterr().err
        assert card.read_text(encoding="utf-8") == edited
    # what an editor or a checkout may add changes no word: a BOM, CRLF, a last blank line
    card.write_bytes(b"\xef\xbb\xbf" + (written + "\n").replace("\n", "\r\n").encode())
    assert export_cli.main(again) == 0 and card.read_text(encoding="utf-8") == written


def test_the_card_says_when_the_scores_were_decoded_in_bf16(
    release_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A report of `minitx-evaluate --bf16` went into the card as the model's scores, with no
    word of bf16, whose translations may differ from fp32's."""
    from minitx.cli import evaluate as evaluate_cli

    cards = {}
    for name, flags in (("bf16", ["--bf16"]), ("fp32", [])):
        report = tmp_path / f"{name}.json"
        args = ["--checkpoint", str(release_dir), "--data", str(TOY_CORPUS_DIR), "--limit", "3"]
        hyp = ["--hyp-out", str(tmp_path / f"{name}{{beam}}.hyp"), "--json", str(report)]
        assert evaluate_cli.main([*args, "--beam", "1", *flags, *hyp]) == 0
        out = tmp_path / name
        args = ["--checkpoint", str(release_dir), "--out", str(out), "--evaluation", str(report)]
        assert export_cli.main(args) == 0
        cards[name] = (out / "README.md").read_text(encoding="utf-8")
        kept = json.loads((out / "evaluation.json").read_text(encoding="utf-8"))
        assert kept["bf16"] is bool(flags)
    assert "scored by `minitx-evaluate`, decoded in bf16 (`--bf16`):" in cards["bf16"]
    assert "bf16" not in cards["fp32"]
    capsys.readouterr()


def test_the_card_says_when_the_hub_corpus_was_read_from_minitx_data_dir(
    release_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Scored with the default hub id while MINITX_DATA_DIR pointed at local files: the card
    names the hub corpus and says where it was read from (not the local path); scored with
    --data, a path, it says nothing of the kind."""
    from minitx.cli import evaluate as evaluate_cli

    monkeypatch.setenv("MINITX_DATA_DIR", str(TOY_CORPUS_DIR))
    cards = {}
    for name, data in (("env", []), ("path", ["--data", str(TOY_CORPUS_DIR)])):
        report = tmp_path / f"{name}.json"
        args = ["--checkpoint", str(release_dir), *data, "--limit", "3", "--beam", "1"]
        hyp = ["--hyp-out", str(tmp_path / f"{name}{{beam}}.hyp"), "--json", str(report)]
        assert evaluate_cli.main([*args, *hyp]) == 0
        out = tmp_path / name
        args = ["--checkpoint", str(release_dir), "--out", str(out), "--evaluation", str(report)]
        assert export_cli.main(args) == 0
        cards[name] = (out / "README.md").read_text(encoding="utf-8")
    assert "`bentrevett/multi30k` as read from `MINITX_DATA_DIR` (3 sentences)" in cards["env"]
    assert str(TOY_CORPUS_DIR) not in cards["env"]
    assert "MINITX_DATA_DIR" not in cards["path"]
    capsys.readouterr()


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"src_lang": "de", "tgt_lang": "en", "weights_sha256": "00", "results": '
        '[{"bleu": 1.0, "signature": "x"}]}',
    ],
    ids=["damaged", "other-weights"],
)
def test_a_damaged_or_stale_evaluation_file_is_named_and_left_out(
    release_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str
) -> None:
    """The scores are for people: the model still loads and translates without them. A hub
    repo can hold an older push's scores beside newer weights."""
    from minitx.release import load

    copy = tmp_path / "copy"
    shutil.copytree(release_dir, copy)
    (copy / "evaluation.json").write_text(content, encoding="utf-8")
    with caplog.at_level("WARNING", logger="minitx.release"):
        loaded = load(copy)
    assert loaded.evaluation is None
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        f"{copy / 'evaluation.json'} left out"
    ]
    if "weights_sha256" in content:  # it said "(it evaluated ?)" and blamed only the report
        message = caplog.records[0].getMessage()
        assert "?" not in message and "or the weights file is damaged" in message


def test_a_training_config_for_people_only_is_left_out_or_kept_out_of_the_card(
    release_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The training config is for people, as the scores are: one that is not UTF-8 (a
    traceback before) is named and left out, the model loads; a data.source that would start a
    heading or leave its code quotes stays out of the card."""
    from dataclasses import replace

    from minitx.release import load, model_card

    copy = tmp_path / "copy"
    shutil.copytree(release_dir, copy)
    (copy / "train_config.yaml").write_bytes(b"\xff\xfe bad")
    with caplog.at_level("WARNING", logger="minitx.release"):
        loaded = load(copy)
    assert loaded.train_config is None
    assert [r.getMessage() for r in caplog.records] == [
        f"{copy / 'train_config.yaml'} left out: not UTF-8 text (invalid start byte)"
    ]
    for source, shown in (("corpus/dir", True), ("a\\n## Injected", False), ("a`b", False)):
        card = model_card(replace(loaded, train_config=f'data:\n  source: "{source}"\n'))
        assert ("training data (`data.source`)" in card) == shown, card
        assert "## Injected" not in card


@pytest.mark.parametrize(
    ("in_out_dir", "evaluation", "message"),
    [
        ({"notes.txt": "mine"}, None, r"holds other files \(notes\.txt\)"),
        ({}, "[1, 2]", r"not a minitx-evaluate --json report"),
        (
            {},
            '{"src_lang": "en", "tgt_lang": "de", "results": [{"bleu": 1.0, "signature": "x"}]}',
            r"scores en -> de, but the model translates de -> en",
        ),
        (
            {},
            '{"src_lang": "de", "tgt_lang": "en", "weights_sha256": "00", "checkpoint": "b.ckpt",'
            ' "results": [{"bleu": 1.0, "signature": "x"}]}',
            r"scores other weights than this model's \(it evaluated b\.ckpt\)",
        ),
        (
            {},
            '{"src_lang": "de", "tgt_lang": "en", "results": [{"bleu": 1.0, "signature": "x"}]}',
            r"does not say which weights it scored \(no weights_sha256\)",
        ),
    ],
    ids=["foreign-out-dir", "not-a-report", "other-languages", "other-weights", "no-weights"],
)
def test_export_refuses_with_one_line(
    in_out_dir: dict,
    evaluation: str | None,
    message: str,
    tiny_checkpoint: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    out = tmp_path / "out"
    out.mkdir()
    for name, text in in_out_dir.items():
        (out / name).write_text(text, encoding="utf-8")
    args = ["--checkpoint", str(tiny_checkpoint), "--out", str(out)]
    if evaluation is not None:
        (tmp_path / "eval.json").write_text(evaluation, encoding="utf-8")
        args += ["--evaluation", str(tmp_path / "eval.json")]
    assert export_cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert re.search(message, err), err
    assert sorted(p.name for p in out.iterdir()) == sorted(in_out_dir)  # nothing written


RESULT = {"bleu": 30.0, "chrf": 55.5, "beam": 5, "signature": "nrefs:1|case:mixed"}


@pytest.mark.parametrize(
    ("evaluation", "message"),
    [
        ({}, r"^eval\.json: not a minitx-evaluate --json report"),
        ({"results": []}, r"^eval\.json: its 'results' list is empty: no scores to record"),
        ({"results": [{"bleu": 30.0}]}, r"^eval\.json: each result needs 'bleu' and 'signature'"),
        # what a card prints: a number that fits "BLEU 12.34" (a string was a traceback), whole
        # counts, text that cannot start a heading or leave its code quotes
        ({"results": [{"bleu": "99", "signature": "s"}]}, r"bleu must be a score from 0 to 100"),
        ({"results": [{"bleu": float("nan"), "signature": "s"}]}, r"bleu must be a score .* nan"),
        ({"results": [{"bleu": 1e308, "signature": "s"}]}, r"bleu must be a score from 0 to 100"),
        ({"results": [{"bleu": 1, "chrf": "x", "signature": "s"}]}, r"chrf must be a score fr"),
        ({"results": [{"bleu": 1, "beam": "x", "signature": "s"}]}, r"beam must be a whole num"),
        ({"sentences": "many", "results": [RESULT]}, r"sentences must be a whole number"),
        ({"data": "x\n## Fake", "results": [RESULT]}, r"data must be text on one line without"),
        ({"results": [{"bleu": 1, "signature": "a`<b>`"}]}, r"signature must be text on one li"),
    ],
    ids=[
        "no-results", "empty-results", "no-signature", "bleu-text", "bleu-nan", "bleu-huge",
        "chrf-text", "beam-text", "sentences-text", "data-two-lines", "signature-backtick",
    ],
)  # fmt: skip
def test_save_pretrained_checks_the_evaluation_before_writing(
    evaluation: dict, message: str, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from minitx import release
    from minitx.errors import ConfigError

    loaded = release.load(tiny_checkpoint)
    with pytest.raises(ConfigError, match=message):
        release.save_pretrained(
            loaded, tmp_path / "new", evaluation=evaluation, evaluation_name="eval.json"
        )
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("language", ["de\n## injected", "de`", "<script>", "", "d e"])
def test_export_refuses_a_language_that_is_no_code(
    language: str, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """The languages lie outside model_sha256 (config.json can be edited) and go into the
    card's metadata, title and code quotes: a newline made a heading of the rest."""
    from dataclasses import replace

    from minitx import release
    from minitx.errors import ConfigError

    loaded = release.load(tiny_checkpoint)
    for good in ("de", "pt-BR", "zh_Hant"):  # codes as datasets name them
        release.save_pretrained(replace(loaded, languages=(good, "en")), tmp_path / good)
    with pytest.raises(ConfigError, match=r"^the source language .* is no language code"):
        release.save_pretrained(replace(loaded, languages=(language, "en")), tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_an_empty_path_is_refused_not_read_as_the_current_directory(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Path("") is "."; an unset variable gives "": loading read the current directory (a
    message about "a directory of checkpoints" when it held some), saving wrote into it."""
    from minitx import release
    from minitx.errors import MissingFileError, OutputError

    monkeypatch.chdir(tmp_path)  # empty: save_pretrained("") wrote a release here
    for empty in ("", " "):
        with pytest.raises(MissingFileError, match=r"^the checkpoint path is empty \(''\)"):
            Translator.from_pretrained(empty)
        with pytest.raises(OutputError, match=r"^the release directory path is empty"):
            release.save_pretrained(release.load(tiny_checkpoint), empty)
    assert list(tmp_path.iterdir()) == []


def test_the_card_names_the_corpus_only_from_a_readable_training_config() -> None:
    assert release.data_source("data:\n  source: bentrevett/multi30k\n") == "bentrevett/multi30k"
    assert release.data_source("data: [unclosed") is None  # not YAML: no corpus, no error
    assert release.data_source("- a list") is None
    assert release.data_source(None) is None


# ------------------------------------------------------------------------------ the hub (faked)
class FakeHfApi:
    """Records what `release.push_to_hub` asks of `huggingface_hub.HfApi`."""

    calls: list = []

    def __init__(self, token=None) -> None:
        self.calls.append(("init", token))

    def create_repo(self, repo_id, *, repo_type, private, exist_ok):
        self.calls.append(("create_repo", repo_id, repo_type, private, exist_ok))

    def upload_folder(
        self, *, folder_path, repo_id, repo_type, allow_patterns, delete_patterns, commit_message
    ):
        assert delete_patterns == allow_patterns  # the repo's earlier release files go
        files = sorted(p.name for p in Path(folder_path).iterdir())
        self.calls.append(("upload_folder", repo_id, repo_type, files, sorted(allow_patterns)))
        return type("CommitInfo", (), {"commit_url": f"https://hf.co/{repo_id}/commit/1"})()


def test_push_to_hub_creates_the_repo_and_uploads_the_release(
    original: Translator, release_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path
) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    FakeHfApi.calls = []
    url = original.push_to_hub("me/minitx-de-en", private=True)
    assert url == "https://hf.co/me/minitx-de-en/commit/1"
    patterns = sorted(release.RELEASE_FILES)  # an evaluation.json too, where there is one
    files = [name for name in patterns if name != release.EVALUATION_FILE]
    assert FakeHfApi.calls == [
        ("init", None),
        ("create_repo", "me/minitx-de-en", "model", True, True),
        ("upload_folder", "me/minitx-de-en", "model", files, patterns),
    ]
    FakeHfApi.calls = []
    argv = ["--checkpoint", str(release_dir), "--out", str(tmp_path), "--push-to-hub", "me/x"]
    assert export_cli.main(argv) == 0
    assert [c[0] for c in FakeHfApi.calls] == ["init", "create_repo", "upload_folder"]
    assert "pushed to me/x: https://hf.co/me/x/commit/1" in capsys.readouterr().out


def test_a_repo_id_the_hub_refuses_is_one_error_line_before_anything_is_written(
    release_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path
) -> None:
    """`--push-to-hub "not a repo"` is refused by the hub's own rule before the release is
    written (it was written, then the push failed and the suggested command failed too)."""
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    out = tmp_path / "release"
    argv = ["--checkpoint", str(release_dir), "--out", str(out), "--push-to-hub", "not a repo"]
    assert export_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--push-to-hub 'not a repo' is not a hub repo id" in err
    assert not out.exists()


def test_a_failed_push_is_one_error_line(
    release_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path
) -> None:
    import huggingface_hub

    class NoLogin(FakeHfApi):
        def create_repo(self, *args, **kwargs):
            raise OSError("Token is required (`token=True`), but no token found.")

    monkeypatch.setattr(huggingface_hub, "HfApi", NoLogin)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    argv = ["--checkpoint", str(release_dir), "--out", str(tmp_path), "--push-to-hub", "me/x"]
    assert export_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no token found" in err and "log in" in err

    # Offline: its HTTP client's own error, which huggingface_hub lets through (a traceback)
    class ConnectError(Exception):
        __module__ = "httpx"  # as httpx (or httpx2, huggingface_hub 2's client) names it

    class Offline(FakeHfApi):
        def create_repo(self, *args, **kwargs):
            raise ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "HfApi", Offline)
    assert export_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the Hugging Face hub cannot be reached" in err, err
    assert "once the hub can be reached" in err
    with pytest.raises(SourceUnreachableError):
        Translator.from_pretrained(release_dir).push_to_hub("me/x")


def test_from_pretrained_downloads_a_repo_id(
    release_dir: Path, original: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    asked = []

    def fake_download(repo_id, **kwargs):
        asked.append((repo_id, kwargs))
        return str(release_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    loaded = Translator.from_pretrained("me/minitx-de-en", revision="v1")
    assert asked == [
        (
            "me/minitx-de-en",
            {"revision": "v1", "allow_patterns": list(release.RELEASE_FILES)},
        )
    ]
    assert loaded.translate(SENTENCES[:3]) == original.translate(SENTENCES[:3])


def test_a_local_path_wins_over_a_repo_id(
    release_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import huggingface_hub

    def no_download(*args, **kwargs):
        raise AssertionError("a local directory must not be downloaded")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_download)
    (tmp_path / "me").mkdir()
    shutil.copytree(release_dir, tmp_path / "me" / "model")
    monkeypatch.chdir(tmp_path)
    assert Translator.from_pretrained("me/model").languages == ("de", "en")
    with pytest.raises(FileNotFoundError, match="checkpoint not found: me/missing.ckpt"):
        Translator.from_pretrained("me/missing.ckpt")  # a .ckpt name is never a repo id
    assert not os.path.exists("me/missing.ckpt")


def test_a_model_with_a_score_not_registered_here_is_not_called_damaged(
    tiny_checkpoint: Path, release_dir: Path, tmp_path: Path
) -> None:
    """A checkpoint or release of a model trained with the user's own registered score
    ("cosine", docs/guides/extending.md) read as a "damaged minitx checkpoint"; the fix is
    to import the module that registers it."""
    from minitx.checkpoint import CHECKPOINT_KEY, load_checkpoint, model_from_checkpoint
    from minitx.release import load, model_checksum

    checkpoint = load_checkpoint(tiny_checkpoint)
    checkpoint[CHECKPOINT_KEY]["model_config"]["score"] = "cosine"
    with pytest.raises(CheckpointError) as caught:
        model_from_checkpoint(checkpoint, "cos.ckpt")
    copy = tmp_path / "release"
    shutil.copytree(release_dir, copy)
    config = json.loads((copy / "config.json").read_text(encoding="utf-8"))
    config["model"]["score"] = "cosine"
    config["model_sha256"] = model_checksum(config["model"])
    (copy / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(CheckpointError) as caught_release:
        load(copy)
    for message in (str(caught.value), str(caught_release.value)):
        assert "damaged" not in message
        assert "unknown attention score 'cosine'" in message
        assert "imported first" in message and "docs/guides/extending.md" in message


def test_the_weights_are_as_readable_as_the_other_release_files(release_dir: Path) -> None:
    """safetensors writes its file 0600: a release shared on a server had weights only its
    writer could read."""
    modes = {p.name: p.stat().st_mode & 0o777 for p in release_dir.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"], modes


def test_a_release_path_that_is_not_utf8_is_refused_in_one_line(
    release_dir: Path, tmp_path: Path
) -> None:
    """safetensors reads only UTF-8 paths: a release under a Latin-1 folder name was written,
    then could not be loaded ("not a readable safetensors file", as if damaged). The export
    refuses it, and a release moved there says why it does not load."""
    odd = tmp_path / os.fsdecode(b"caf\xe9")
    with pytest.raises(OutputError, match="safetensors reads only files whose path is UTF-8"):
        release.save_pretrained(release.load(release_dir), odd / "rel")
    shutil.copytree(release_dir, odd / "rel")
    with pytest.raises(CheckpointError, match="path is UTF-8.*rename the directory"):
        release.load(odd / "rel")


def test_an_export_into_the_working_directory_is_refused_in_words(
    release_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``--out .`` (inside a release, or an empty directory) failed as "cannot write into
    --out .: Device or resource busy", the rename onto the working directory's error."""
    out = tmp_path / "rel"
    assert export_cli.main(["--checkpoint", str(release_dir), "--out", str(out)]) == 0
    monkeypatch.chdir(out)
    capsys.readouterr()
    assert export_cli.main(["--checkpoint", str(release_dir), "--out", "."]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out . is the current directory or one of its parents"), err


@pytest.mark.parametrize(
    "address",
    ["https://huggingface.co/you/minitx-de-en", "https:/hf.co/you/minitx-de-en/tree/main"],
)
def test_a_hub_repos_address_is_answered_with_its_id(address: str) -> None:
    """Was "checkpoint not found: https:/huggingface.co/you/minitx-de-en" (the path had eaten
    a slash), with no word of the id to give."""
    with pytest.raises(MissingFileError, match="address of a hub repo's page; give the repo id, "):
        release.resolve(address)
    with pytest.raises(MissingFileError, match="give the repo id, you/minitx-de-en$"):
        release.resolve(Path(address))  # as a command's --checkpoint holds it
