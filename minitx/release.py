"""Release files: a trained model as a small directory to share, and the Hugging Face hub.

A release directory holds what inference needs and nothing else (no optimizer state):

- `model.safetensors`: the Transformer's weights (tied matrices stored once);
- `config.json`: the format and its version, the minitx version that wrote it, the
  `TransformerConfig` (as `model`) and the source and target languages;
- `tokenizer.model`: the sentencepiece model, the bytes the checkpoint carries;
- `README.md`: a model card (languages, data, how to load it, BLEU with its signature when
  an evaluation is given), its last line an HTML comment with its checksum: a card edited
  after export is not replaced by the next export of the directory (`check_release_dir`);
- `train_config.yaml`: the resolved training config, when the checkpoint holds one.
- `evaluation.json`: the scores the card shows, when an evaluation is given; a re-export of
  the directory keeps them.

Reading one never executes code: safetensors holds tensors only, `config.json` is plain JSON
validated through `TransformerConfig.from_dict`, and the tokenizer is sentencepiece data.
Nothing is allocated before the files agree: `config.json` must match its checksum
(`model_sha256`, written by `save_pretrained`: an edited `n_heads` changes no weight's shape),
and `tokenizer.model` its own (`tokenizer_sha256`: another model's tokenizer of the same size
would load and translate garbage; releases written before it have none, and load as before),
its sizes must lie within `minitx.model_config.MODEL_MAXIMA` (as every model config's must),
and every tensor named in the safetensors header must have the shape the config implies and
a floating-point type (`check_weight_shapes`, on a model built on the meta device).

`load` is minitx's one loading path (a `.ckpt` file, a release directory or a hub repo id):
`Translator.from_pretrained`, every command's ``--checkpoint``, the demo and the experiments
load through it. This module sits beside `checkpoint`: it imports the model, the tokenizer and
the checkpoint reader; never Lightning or the inference API.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

import minitx
from minitx.activations import ACTIVATIONS
from minitx.attention import SCORES
from minitx.checkpoint import (
    CHECKPOINT_KEY,
    CheckpointError,
    check_finite,
    check_shapes,
    languages_of,
    load_checkpoint,
    model_from_checkpoint,
    weight_shapes,
    weights_digest,
)
from minitx.errors import (
    ConfigError,
    MissingFileError,
    OutputError,
    SourceUnreachableError,
    UnregisteredError,
    check_known_keys,
)
from minitx.model import Transformer, TransformerConfig
from minitx.outputs import (
    check_dir_takes_files,
    check_not_the_working_dir,
    file_in_the_way,
    written_whole,
)
from minitx.positional import POSITIONAL_ENCODINGS
from minitx.registry import UNREGISTERED_WHEN_LOADING
from minitx.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

FORMAT = "minitx-release"
"""The `format` entry of `config.json`."""
FORMAT_VERSION = 2
"""Version of the release layout; a reader refuses a newer one, and an older one: format 1 had
no `model_sha256` (re-export it with minitx-export)."""

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.model"
CARD_FILE = "README.md"
CARD_CHECKSUM = re.compile(r"^<!-- minitx card sha256 ([0-9a-f]{64}) -->$", re.M)
"""The card's last line: the sha256 of the text above it, as the export wrote it."""
TRAIN_CONFIG_FILE = "train_config.yaml"
EVALUATION_FILE = "evaluation.json"
"""The scores the card shows, kept so that a re-export (to push, say) shows them again."""
FLOAT_DTYPES = ("F32", "BF16", "F16", "F64")
"""The safetensors types a release's weights may have: floating point (read as float32)."""
REQUIRED_FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE)
"""What `load_pretrained` needs; the card, the training config and the scores are for people."""
RELEASE_FILES = (*REQUIRED_FILES, CARD_FILE, TRAIN_CONFIG_FILE, EVALUATION_FILE)
EVALUATION_KEYS = (
    "weights_sha256",
    "data",
    "data_dir_env",
    "split",
    "limit",
    "sentences",
    "src_lang",
    "tgt_lang",
    "bf16",
)
RESULT_KEYS = ("decoding", "beam", "bleu", "chrf", "signature")
"""What a release keeps of a `minitx-evaluate --json` report: what its card shows and checks,
not the report's local paths (the checkpoint's, the data's, the hypotheses')."""

CONFIG_KEYS = (
    "format",
    "format_version",
    "minitx_version",
    "model",
    "model_sha256",
    "tokenizer_sha256",
    "src_lang",
    "tgt_lang",
)

LANGUAGE_CODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,34}")
"""What a release's card takes as a language: a code such as de, pt-BR or zh_Hant."""
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class Release:
    """A trained model with what it needs to translate: what `load` returns.

    Attributes:
        model: the Transformer, weights loaded (CPU, eval mode not set).
        tokenizer: its joint sentencepiece tokenizer.
        languages: (source, target) language codes, or Nones when unknown.
        train_config: the resolved training config (YAML text), when known.
        evaluation: the scores of a release directory's card (`EVALUATION_FILE`), if any.
    """

    model: Transformer
    tokenizer: Tokenizer
    languages: tuple[str | None, str | None] = (None, None)
    train_config: str | None = None
    evaluation: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------- reading
def read_config_json(directory: str | Path) -> dict[str, Any]:
    """`config.json` of a release directory as written, checked only for being a minitx
    release's (its `format`), of any version and checksum: what minitx-export needs to know
    before it replaces an earlier release (a damaged or older one included).

    Raises:
        CheckpointError: not JSON, or not a minitx release config.
    """
    path = Path(directory) / CONFIG_FILE
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(values, dict) or values.get("format") != FORMAT:
        raise CheckpointError(
            f'{path}: not a minitx release config (it needs "format": "{FORMAT}"); '
            "write release directories with minitx-export"
        )
    return values


def read_config(directory: str | Path) -> dict[str, Any]:
    """`config.json` of a release directory, checked key by key.

    Returns:
        The dict, with `model` replaced by its `TransformerConfig`.

    Raises:
        CheckpointError: not JSON, not a minitx release, a newer format, unknown keys, or a
            model config `TransformerConfig` rejects.
    """
    path = Path(directory) / CONFIG_FILE
    values = read_config_json(directory)
    version = values.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{path}: format_version must be a positive integer, got {version!r}")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: written in release format {version} by minitx "
            f"{values.get('minitx_version')}; this minitx ({minitx.__version__}) reads up to "
            f"format {FORMAT_VERSION}: upgrade minitx"
        )
    if version < FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: release format {version} (minitx {values.get('minitx_version')}) has no "
            f"config checksum; this minitx reads format {FORMAT_VERSION}: re-export the "
            "release from its checkpoint (minitx-export --checkpoint RUN.ckpt --out DIR)"
        )
    try:
        check_known_keys(str(path), values, CONFIG_KEYS)
    except ConfigError as exc:  # it names the path itself
        raise CheckpointError(str(exc)) from None
    try:
        if not isinstance(values.get("model"), dict):
            raise ValueError("'model' must be an object of TransformerConfig settings")
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    if values.get("model_sha256") != model_checksum(values["model"]):
        raise CheckpointError(
            f"{path}: the model config does not match its checksum (model_sha256): the file "
            "was edited or damaged after export, and an edited setting such as n_heads loads "
            "silently and translates worse; re-export the release from its checkpoint "
            "(minitx-export --checkpoint RUN.ckpt --out DIR)"
        )
    try:
        values["model"] = TransformerConfig.from_dict(values["model"])
    except UnregisteredError as exc:
        raise CheckpointError(f"{path}: {exc}; {UNREGISTERED_WHEN_LOADING}") from None
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    for key in ("src_lang", "tgt_lang"):
        if key not in values:
            raise CheckpointError(
                f"{path}: {key} is missing (a language code, or null); the file is damaged or "
                "was edited: re-export the release from its checkpoint"
            )
        language = values[key]
        if not (
            language is None or isinstance(language, str) and LANGUAGE_CODE.fullmatch(language)
        ):
            # as the export writes them: a code reaches messages, file names and the card
            raise CheckpointError(
                f"{path}: {key} {language!r:.60} is no language code (letters, digits, - and _, "
                "such as de or pt-BR) or null; the file was edited or damaged: re-export the "
                "release from its checkpoint"
            )
    return values


def model_checksum(model: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON (sorted keys, no spaces) of `config.json`'s `model`
    dict: what `save_pretrained` writes as `model_sha256` and `read_config` checks."""
    canonical = json.dumps(model, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def tokenizer_checksum(tokenizer: Tokenizer) -> str:
    """sha256 (hex) of the tokenizer's sentencepiece model, the bytes of `tokenizer.model`:
    what `save_pretrained` writes as `tokenizer_sha256` and `load_pretrained` checks."""
    return hashlib.sha256(tokenizer.model_bytes).hexdigest()


def weights_checksum(model: torch.nn.Module) -> str:
    """sha256 (hex) of `model`'s weights: each tensor's name, dtype, shape and bytes, in
    state-dict order. The same weights give the same digest however they were loaded (a
    `.ckpt` file, a release directory): `minitx-evaluate --json` records it as
    ``weights_sha256`` so that a model card gets only its own model's scores."""
    return weights_digest(model.state_dict())


def check_weight_shapes(weights: Path, config: TransformerConfig) -> None:
    """Compare the tensor shapes in the safetensors header of `weights` with those of the model
    `config` describes, before any memory is allocated for it: the model is built on the meta
    device (shapes only) and the file's header is read, not its tensors.

    Raises:
        CheckpointError: not a safetensors file, a tensor the model does not have, a shape
            that differs (naming the tensor and both shapes), or a tensor of integers (loading
            would cast it to floats without a word).
    """
    if not _utf8(weights):
        raise CheckpointError(
            f"{weights}: {UTF8_PATHS}; rename the directory (or give it through a link of a "
            "UTF-8 name)"
        )
    try:
        with safe_open(weights, framework="pt") as file:
            slices = {name: file.get_slice(name) for name in file.keys()}
            shapes = {name: tuple(tensor.get_shape()) for name, tensor in slices.items()}
            dtypes = {name: tensor.get_dtype() for name, tensor in slices.items()}
    except Exception as exc:  # safetensors' own error type for a damaged or foreign file
        raise CheckpointError(
            f"{weights}: not a readable safetensors file ({type(exc).__name__}: {exc})"
        ) from None
    fit = f"{weights}: the weights do not fit the model of {CONFIG_FILE}"
    check_shapes(shapes, weight_shapes(config), fit, CONFIG_FILE)
    for name in shapes:
        if dtypes[name] not in FLOAT_DTYPES:
            raise CheckpointError(
                f"{fit}: {name} holds {dtypes[name]} values, not floating-point weights (one of "
                f"{', '.join(FLOAT_DTYPES)}); write the release again with minitx-export"
            )


UTF8_PATHS = (
    "safetensors reads only files whose path is UTF-8, and this one holds bytes of another encoding"
)


def _utf8(path: Path) -> bool:
    """Whether `path` is UTF-8 (a name that is not holds its bytes as lone surrogates)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_ct2_model(directory: Path) -> bool:
    """Whether `directory` holds a CTranslate2 model (minitx-ct2's output), which minitx's own
    decoder cannot read."""
    return (directory / "model.bin").is_file() and (directory / "config.json").is_file()


def _ct2_model_message(directory: Path) -> str:
    return (
        f"{directory}: a CTranslate2 model (model.bin), not a minitx release: translate with "
        "minitx.extras.ctranslate2.export.Ct2Translator, or pass the .ckpt or release it was "
        "converted from"
    )


def load_pretrained(directory: str | Path) -> Release:
    """A `Release` from a release directory (see the module docstring); `load` calls it for a
    directory and for a downloaded repo.

    Raises:
        MissingFileError: no such directory (a `FileNotFoundError`).
        CheckpointError: a file is missing or damaged, or the weights do not fit the config.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise MissingFileError(f"release directory not found: {directory}")
    missing = [name for name in REQUIRED_FILES if not (directory / name).is_file()]
    if missing:
        # a training run directory is the first thing a newcomer tries
        found = sorted(directory.glob("*.ckpt")) or sorted(directory.glob("checkpoints/*.ckpt"))
        if found:
            raise CheckpointError(
                f"{directory}: not a minitx release but a directory of checkpoints: pass one of "
                f"them, e.g. {found[0]} (or a release directory written by minitx-export)"
            )
        if _is_ct2_model(directory):
            raise CheckpointError(_ct2_model_message(directory))
        raise CheckpointError(
            f"{directory}: not a complete minitx release: missing {', '.join(missing)} "
            f"(a release holds {', '.join(REQUIRED_FILES)}; write one with minitx-export)"
        )
    config = read_config(directory)
    model_config: TransformerConfig = config["model"]
    tokenizer_path = directory / TOKENIZER_FILE
    try:
        tokenizer = Tokenizer.load(tokenizer_path)
    except ValueError as exc:
        raise CheckpointError(f"{exc}") from None
    expected = config.get("tokenizer_sha256")  # absent from releases written before it
    if expected is not None and tokenizer_checksum(tokenizer) != expected:
        # another model's tokenizer of the same size loads and translates garbage
        raise CheckpointError(
            f"{tokenizer_path}: not the tokenizer this release was exported with (its checksum "
            f"differs from tokenizer_sha256 in {CONFIG_FILE}): it was replaced or damaged; "
            "put the release's own tokenizer.model back, or re-export the release from its "
            "checkpoint (minitx-export --checkpoint RUN.ckpt --out DIR)"
        )
    if tokenizer.vocab_size != model_config.tgt_vocab_size:
        raise CheckpointError(
            f"{tokenizer_path}: {tokenizer.vocab_size} pieces, but {directory / CONFIG_FILE} "
            f"says the model has {model_config.tgt_vocab_size}: the files come from different "
            "models"
        )
    weights = directory / WEIGHTS_FILE
    check_weight_shapes(weights, model_config)
    model = Transformer(model_config)
    try:
        load_model(model, weights, strict=True)
    except RuntimeError as exc:  # a tensor of the model missing from the file
        raise CheckpointError(
            f"{weights}: the weights do not fit the model of {CONFIG_FILE}: "
            f"{' '.join(str(exc).split())}"
        ) from None
    check_finite(model.state_dict(), weights)
    train_config_path = directory / TRAIN_CONFIG_FILE
    try:
        train_config = (
            train_config_path.read_text(encoding="utf-8") if train_config_path.is_file() else None
        )
    except UnicodeDecodeError as exc:  # for people, as the scores are: named and left out
        logger.warning("%s left out: not UTF-8 text (%s)", train_config_path, exc.reason)
        train_config = None
    languages = (config["src_lang"], config["tgt_lang"])
    return Release(model, tokenizer, languages, train_config, _read_evaluation(directory, model))


def _read_evaluation(
    directory: Path, model: Transformer, checksum: str | None = None
) -> dict[str, Any] | None:
    """The release's kept scores; a file that cannot be read, or that scored other weights (a
    hub repo keeps an older push's file), is named and left out: the model translates
    without it. `checksum`: the model's `weights_checksum`, when the caller has it (it reads
    every weight)."""
    path = directory / EVALUATION_FILE
    if not path.is_file():
        return None
    try:
        evaluation = json.loads(path.read_text(encoding="utf-8-sig"))  # a BOM: an editor's
        weights = checksum or weights_checksum(model)
        check_evaluation(evaluation, where=str(path), weights=weights)
    except (UnicodeDecodeError, json.JSONDecodeError, ConfigError) as exc:
        logger.warning("%s left out: %s", path, exc)
        return None
    return evaluation


def download(repo_id: str, *, revision: str | None = None) -> Path:
    """The release directory of a hub model repo, from the hub or the local hub cache.

    Raises:
        CheckpointError: the download failed (offline, no such repo, no access); the message
            says what was tried and how to use a local directory instead.
    """
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(repo_id, revision=revision, allow_patterns=list(RELEASE_FILES))
        )
    except (OSError, ValueError) as exc:  # hub errors are OSErrors; a bad repo id a ValueError
        reason = " ".join(str(exc).split())[:300]
        raise CheckpointError(
            f"{repo_id!r} is not a local file or directory, and downloading it as a Hugging "
            f"Face hub model repo failed ({type(exc).__name__}: {reason}); offline, pass a "
            "release directory (minitx-export --checkpoint RUN.ckpt --out DIR) or a .ckpt file"
        ) from None


def resolve(source: str | Path, *, revision: str | None = None) -> Path:
    """The local path `load` reads for `source`: the path itself where it exists, else the
    release directory that a hub repo id ("owner/name") downloads to (`download`).

    Raises:
        MissingFileError: no such file or directory, and not a repo id; or `source` is empty.
        CheckpointError: the download failed.
        TypeError: `source` is no path or name (None, say).
    """
    if not isinstance(source, (str, os.PathLike)):  # else pathlib's "argument should be a str"
        raise TypeError(
            f"give a .ckpt path, a release directory or a hub repo id, not {type(source).__name__}"
        )
    if not str(source).strip():  # Path("") is the current directory
        raise MissingFileError(
            "the checkpoint path is empty (''): give a .ckpt path, a release directory or a hub "
            "repo id (a variable holding it may be unset)"
        )
    path = Path(source)
    if path.exists():
        return path
    if _REPO_ID.match(str(source)) and not str(source).endswith(".ckpt"):
        return download(str(source), revision=revision)
    # a repo's page (a path, as the commands read it, keeps one slash of "https://")
    page = re.match(r"https?:/+(?:www\.)?(?:huggingface|hf)\.co/([\w.-]+/[\w.-]+)", str(source))
    if page:
        raise MissingFileError(
            f"{source} is the address of a hub repo's page; give the repo id, {page.group(1)}"
        )
    raise MissingFileError(
        f"checkpoint not found: {path} (pass a .ckpt written under <run dir>/checkpoints/, a "
        "release directory written by minitx-export, or a hub repo id owner/name)"
    )


def load(source: str | Path, *, revision: str | None = None) -> Release:
    """The one loading path: a `Release` from a `.ckpt` file, a release directory or a hub
    repo id ("owner/name").

    A local path wins: a directory is read as a release (`load_pretrained`), a file as a
    Lightning `.ckpt` (`minitx.checkpoint.load_checkpoint`, then `model_from_checkpoint`); a
    name that is no local path and looks like "owner/name" is fetched from the hub
    (`download`, with `huggingface_hub.snapshot_download`) and read as a release.

    Args:
        source: the `.ckpt`, the release directory or the repo id.
        revision: the hub revision (branch, tag or commit) of a repo id.

    Returns:
        The model (CPU, weights loaded), its tokenizer, languages and training config.

    Raises:
        MissingFileError: no such file or directory, and not a repo id (a
            `FileNotFoundError`); or `source` is empty.
        CheckpointError: a damaged checkpoint or release, or a failed download.
        TypeError: `source` is no path or name (None, say).
    """
    path = resolve(source, revision=revision)
    if path.is_dir():
        return load_pretrained(path)
    if path.name in RELEASE_FILES and (path.parent / WEIGHTS_FILE).is_file():
        # config.json or model.safetensors: "not a file written by torch.save" alone
        raise CheckpointError(
            f"{path} is one file of a release directory: pass the directory, {path.parent}"
        )
    try:
        checkpoint = load_checkpoint(path)
    except CheckpointError:
        if path.suffix != ".ckpt" and _is_ct2_model(path.parent):  # its model.bin, config.json
            raise CheckpointError(_ct2_model_message(path.parent)) from None
        raise
    model, tokenizer = model_from_checkpoint(checkpoint, path)
    train_config = checkpoint[CHECKPOINT_KEY].get("train_config")
    return Release(
        model,
        tokenizer,
        languages_of(checkpoint, path),
        train_config if isinstance(train_config, str) else None,
    )


# ---------------------------------------------------------------------------------- writing
def check_evaluation(
    evaluation: Mapping[str, Any],
    languages: tuple[str | None, str | None] = (None, None),
    where: str = "evaluation",
    weights: str | None = None,
) -> None:
    """Check a `minitx-evaluate --json` report before it goes into a model card.

    Args:
        languages: the model's (source, target) languages, where known.
        where: how the report is named in an error (its file).
        weights: the model's `weights_checksum`: the report must have scored these weights.

    Raises:
        ConfigError: not such a report (no `results` with BLEU and signature), it scored
            another language pair than `languages`, or other weights than `weights`.
    """
    results = evaluation.get("results") if isinstance(evaluation, Mapping) else None
    if not isinstance(results, list):
        raise ConfigError(f"{where}: not a minitx-evaluate --json report (no 'results' list)")
    if not results:
        raise ConfigError(
            f"{where}: its 'results' list is empty: no scores to record; give the report "
            "minitx-evaluate --checkpoint ... --json wrote"
        )
    for result in results:
        if not isinstance(result, Mapping) or not {"bleu", "signature"} <= set(result):
            raise ConfigError(f"{where}: each result needs 'bleu' and 'signature'")
        _check_report_values(result, where, scores=("bleu", "chrf"), counts=("beam",))
    _check_report_values(evaluation, where, scores=(), counts=("sentences", "limit"))
    if not isinstance(evaluation.get("bf16", False), bool):
        raise ConfigError(f"{where}: bf16 must be true or false, got {evaluation['bf16']!r:.40}")
    scored = (evaluation.get("src_lang"), evaluation.get("tgt_lang"))
    if all(languages) and all(scored) and tuple(scored) != tuple(languages):
        raise ConfigError(
            f"{where}: scores {scored[0]} -> {scored[1]}, but the model translates "
            f"{languages[0]} -> {languages[1]}"
        )
    if weights is not None and evaluation.get("weights_sha256") != weights:
        # a release's report names no checkpoint (the export leaves the path out)
        scored = f" (it evaluated {evaluation['checkpoint']})" if "checkpoint" in evaluation else ""
        raise ConfigError(
            f"{where}: scores other weights than this model's{scored}: another model's "
            "report, or the weights changed after it was written (a later export or push "
            "without --evaluation), or the weights file is damaged; score this model with "
            "minitx-evaluate --checkpoint ... --json and give that report"
            if "weights_sha256" in evaluation
            else f"{where}: does not say which weights it scored (no weights_sha256); write it "
            "with minitx-evaluate --checkpoint ... --json"
        )


def _card_text(text: Any) -> bool:
    """Whether `text` can stand in a model card as written: a string on one line without a
    backtick (the card quotes it as code), so that it can neither start a heading nor leave
    its quotes."""
    return isinstance(text, str) and text.isprintable() and "`" not in text


def _check_report_values(
    values: Mapping[str, Any], where: str, *, scores: Sequence[str], counts: Sequence[str]
) -> None:
    """The values of a report (or one of its results) that a model card prints: scores from 0
    to 100, whole counts, and text on one line without a backtick (the card quotes it as code).
    Else a card showed a score of "nan" or a 300-digit one, or took a heading from a report.

    Raises:
        ConfigError: naming the key and its value.
    """
    for key in (*scores, *counts):
        value = values.get(key)
        if value is None and key != "bleu":
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if key in scores and not (number and 0 <= value <= 100):
            raise ConfigError(f"{where}: {key} must be a score from 0 to 100, got {value!r:.40}")
        if key in counts and not (isinstance(value, int) and not isinstance(value, bool)):
            raise ConfigError(f"{where}: {key} must be a whole number, got {value!r:.40}")
    for key in ("signature", "decoding", "data", "split"):
        text = values.get(key)
        if text is not None and not _card_text(text):
            raise ConfigError(
                f"{where}: {key} must be text on one line without a backtick, got {text!r:.60}"
            )


def save_pretrained(
    release: Release,
    directory: str | Path,
    *,
    evaluation: Mapping[str, Any] | None = None,
    evaluation_name: str = "evaluation",
) -> list[Path]:
    """Write `release` as the release directory `directory`: written whole beside it, then
    put in its place (an earlier release there is replaced; other files are refused,
    `check_release_dir`).

    Args:
        evaluation: a `minitx-evaluate --json` report of these weights (`check_evaluation`,
            before anything is written); its BLEU scores and signatures go into the card.
            None: the release's own (`Release.evaluation`), or else the scores of the
            release in `directory` when they are of these weights.
        evaluation_name: how an error names the report (its file).

    Returns:
        The written files.

    Raises:
        ConfigError: the report does not fit these weights, or a language is no code.
        OutputError: `directory` is empty, or holds what is not an earlier release.
    """
    if not str(directory).strip():  # Path("") is the current directory
        raise OutputError("the release directory path is empty (''): give a directory to write")
    for side, language in zip(("source", "target"), release.languages, strict=True):
        if language is not None and not LANGUAGE_CODE.fullmatch(language):
            raise ConfigError(  # it goes into the card's metadata, title and code quotes
                f"the {side} language {language!r:.60} is no language code (letters, digits, "
                "- and _, such as de or pt-BR), and a release's card names it: train with "
                "data.src_lang and data.tgt_lang set to codes, or fix them in config.json"
            )
    directory = Path(directory)
    check_release_dir(directory)  # before the weights are read for their checksum
    kept = release.evaluation if evaluation is None else None
    # the same weights exported again keep the scores of the release there (checked above)
    earlier = evaluation is None and kept is None and (directory / EVALUATION_FILE).is_file()
    if evaluation is not None or kept is not None or earlier:
        checksum = weights_checksum(release.model)  # once: it reads every weight
        if earlier:  # other weights' scores are said and left out
            kept = _read_evaluation(directory, release.model, checksum)
        if kept is not None and kept.get("weights_sha256") == checksum:
            evaluation, evaluation_name = kept, EVALUATION_FILE
        elif kept is not None:  # the weights changed since it was loaded (fine-tuned, averaged)
            logger.warning(
                "the release's scores are of other weights: left out of the card and the release"
            )
        if evaluation is not None:
            check_evaluation(evaluation, release.languages, evaluation_name, checksum)
    # written whole beside it, then swapped in: an interrupted export leaves the earlier
    # release (or nothing), never new weights under an old card
    with written_whole(directory, kind=None) as tmp:
        names = _write_release(release, tmp, evaluation)
    return [directory / name for name in names]


def check_release_dir(directory: Path, flag: str = "the release directory") -> None:
    """Refuse a `directory` to write a release into that lies inside a release, or holds
    anything but an earlier release's files (`RELEASE_FILES`) whose config.json is a minitx
    release's (a Hugging Face model has the same file names). An older-format or edited
    release may be replaced: re-exporting is the fix its loading error suggests.

    Raises:
        OutputError: `directory` is a file, lies inside a release, holds other files, or
            holds another's release, or the directory it would be written in takes no new
            file.
    """
    if directory.exists() and not directory.is_dir():
        raise OutputError(f"{flag} {directory} is a file; give a directory")
    check_not_the_working_dir(directory, flag)
    if not _utf8(directory.absolute()):  # written, it would load nowhere
        raise OutputError(f"{flag} {directory}: {UTF8_PATHS}; give a directory of a UTF-8 name")
    if not directory.exists() and (blocked := file_in_the_way(directory.parent)):
        raise OutputError(f"{flag} {directory}: {blocked}")
    if (outer := enclosing_release(directory)) is not None:
        raise OutputError(
            f"{flag} {directory} lies inside the release {outer}; give a directory outside it"
        )
    check_dir_takes_files(directory, flag)
    if not directory.is_dir() or not any(directory.iterdir()):
        return
    foreign = sorted(p.name for p in directory.iterdir() if p.name not in RELEASE_FILES)
    if foreign:
        raise OutputError(
            f"{flag} {directory} holds other files ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}); give a new or empty directory"
        )
    try:
        read_config_json(directory)
    except (CheckpointError, OSError) as exc:
        raise OutputError(
            f"{flag} {directory} holds files that are not a minitx release ({CONFIG_FILE}: "
            f"{' '.join(str(exc).split())[:200]}); give a new or empty directory"
        ) from None
    if card_edited(directory):
        raise OutputError(
            f"{flag} {directory}: its {CARD_FILE} was edited after export (or has no checksum "
            "line, as an export before 2026-12-05 wrote it), and an export writes the card "
            "anew; keep your text elsewhere and remove the file, or give a new directory"
        )


def card_edited(directory: Path) -> bool:
    """Whether the release `directory`'s card (if any) is other than the text its checksum
    line was made of: changed above the line, text added below it, the line removed, or a
    README.md of other text. A card with no line, from an export before 2026-12-05, cannot be
    told from an edited one, and counts as edited."""
    try:  # a BOM or CRLF line ends an editor added change no word
        text = (directory / CARD_FILE).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        return False
    except (OSError, UnicodeDecodeError):  # unreadable: not the card an export wrote
        return True
    signed = CARD_CHECKSUM.search(text)
    if signed is None or text[signed.end() :].strip():
        return True
    body = text[: signed.start()]
    return hashlib.sha256(body.encode("utf-8")).hexdigest() != signed.group(1)


def check_not_a_release_file(out: str | os.PathLike[str], flag: str = "--output") -> None:
    """Refuse an output file that would replace one of a release's files (a release has no
    `minitx.outputs.MARKER`: its files are told by name).

    Raises:
        OutputError: `out` is named as a release file and lies in a release directory.
    """
    path = Path(out)
    if path.name in RELEASE_FILES and _is_release(path.resolve().parent):
        raise OutputError(
            f"{flag} {out} is a file of the release {path.parent}, another command's output, "
            "which this command never replaces; choose another name"
        )


def enclosing_release(path: Path) -> Path | None:
    """The release directory `path` would lie inside (resolved: rel/../new is not inside rel,
    and a link may lead into one), or None. An export written there would make the release
    hold a folder of another's, and exporting it again would be refused for it."""
    return next((p for p in path.resolve().parents if _is_release(p)), None)


def _is_release(directory: Path) -> bool:
    """Whether `directory` holds a minitx release's config.json (`read_config_json`)."""
    if not (directory / CONFIG_FILE).is_file():
        return False
    try:
        read_config_json(directory)
    except (CheckpointError, OSError):
        return False
    return True


def _write_release(
    release: Release, directory: Path, evaluation: Mapping[str, Any] | None
) -> list[str]:
    """Write the release's files into the empty `directory`; returns their names."""
    weights = directory / WEIGHTS_FILE
    try:
        save_model(release.model, str(weights), metadata={"format": "pt"})
    except SafetensorError as exc:  # its I/O errors (a full disk) are not OSErrors: make them one
        found = re.search(r"os error (\d+)", str(exc))
        raise OSError(int(found.group(1)) if found else 0, str(exc), str(weights)) from exc
    model = release.model.config.to_dict()
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "minitx_version": minitx.__version__,
        "model": model,
        "model_sha256": model_checksum(model),
        "tokenizer_sha256": tokenizer_checksum(release.tokenizer),
        "src_lang": release.languages[0],
        "tgt_lang": release.languages[1],
    }
    text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    files = {
        CONFIG_FILE: text,
        TOKENIZER_FILE: release.tokenizer.model_bytes,
        CARD_FILE: _signed(model_card(release, evaluation)),
    }
    if release.train_config is not None:
        files[TRAIN_CONFIG_FILE] = fresh_run_config(release.train_config)
    if evaluation is not None:
        kept = {key: evaluation[key] for key in EVALUATION_KEYS if key in evaluation}
        kept["results"] = [
            {key: result[key] for key in RESULT_KEYS if key in result}
            for result in evaluation["results"]
        ]
        files[EVALUATION_FILE] = json.dumps(kept, indent=2, ensure_ascii=False) + "\n"
    for name, data in files.items():
        (directory / name).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    # safetensors writes its file 0600: readable as the other files are (the umask's mode)
    with contextlib.suppress(OSError):  # a file system without modes
        shutil.copymode(directory / CONFIG_FILE, directory / WEIGHTS_FILE)
    return [WEIGHTS_FILE, *files]


def _signed(card: str) -> str:
    """`card` with a last line of its checksum (`CARD_CHECKSUM`), an HTML comment that the
    hub's page does not show."""
    digest = hashlib.sha256(card.encode("utf-8")).hexdigest()
    return f"{card}<!-- minitx card sha256 {digest} -->\n"


def check_repo_id(repo_id: str, *, flag: str = "repo_id") -> None:
    """Refuse a hub repo id by the hub's own rule (huggingface_hub's `validate_repo_id`), before
    anything is written or uploaded.

    Raises:
        ConfigError: naming `flag`, the id and the rule it breaks.
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        reason = " ".join(str(exc).split())[:200]
        raise ConfigError(
            f"{flag} {repo_id!r} is not a hub repo id ({reason}); give one such as me/minitx-de-en"
        ) from None


def push_to_hub(
    directory: str | Path,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool = False,
) -> str:
    """Upload a release directory to a hub model repo (created when absent).

    Returns:
        The URL of the commit.

    Raises:
        SourceUnreachableError: the hub cannot be reached (offline, no such host).
        OSError: the hub refused (huggingface_hub's HfHubHTTPError: not logged in, no rights).
    """
    from huggingface_hub import HfApi

    check_repo_id(repo_id)
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(
            folder_path=str(directory),
            repo_id=repo_id,
            repo_type="model",
            allow_patterns=list(RELEASE_FILES),
            # the release replaces the repo's: an older push's evaluation.json goes too
            delete_patterns=list(RELEASE_FILES),
            commit_message="Upload minitx model",
        )
    except Exception as exc:
        # huggingface_hub wraps the hub's answers (HfHubHTTPError, an OSError) but lets its
        # HTTP client's transport errors through: name those as the hub being unreachable
        client = type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "httpcore2")
        if isinstance(exc, OSError) or not client:
            raise
        raise SourceUnreachableError(
            f"the Hugging Face hub cannot be reached ({type(exc).__name__}: {exc})"
        ) from exc
    return str(getattr(info, "commit_url", info))


# ---------------------------------------------------------------------------------- model card
def data_source(train_config: str | None) -> str | None:
    """`data.source` of a training config (YAML), when it says: the corpus a model was
    trained on (its model card; the experiments read its test split)."""
    if not train_config:
        return None
    import yaml

    try:
        values = yaml.safe_load(train_config)
    except yaml.YAMLError:
        return None
    data = values.get("data") if isinstance(values, dict) else None
    source = data.get("source") if isinstance(data, dict) else None
    return str(source) if source else None


def fresh_run_config(train_config: str) -> str:
    """A run's resolved config (YAML text, as `minitx-train` dumps it) as a new run reads it:
    without the checkpoint it resumed from (``ckpt_path``), which a copy elsewhere does not
    have, and which would resume that run where it does."""
    return re.sub(r"(?m)^ckpt_path: .*$", "ckpt_path: null", train_config)


def _evaluation_lines(evaluation: Mapping[str, Any] | None) -> list[str]:
    if evaluation is None:
        return [
            "Not measured for this export. Score it with "
            "`minitx-evaluate --checkpoint DIR --beam 1 5 --json eval.json` and export again "
            "with `--evaluation eval.json` to record the scores here.",
        ]
    split = evaluation.get("split", "?")
    limit = evaluation.get("limit")  # a partial score must not read as the split's
    part = f"the first {limit} lines of the `{split}` split" if limit else f"the `{split}` split"
    read = " as read from `MINITX_DATA_DIR`" if evaluation.get("data_dir_env") else ""
    # bf16 decoding's translations may differ from the fp32 weights' (docs/guides/inference.md)
    bf16 = ", decoded in bf16 (`--bf16`)" if evaluation.get("bf16") else ""
    lines = [
        f"sacreBLEU on {part} of `{evaluation.get('data', '?')}`{read} "
        f"({evaluation.get('sentences', '?')} sentences), scored by `minitx-evaluate`{bf16}:",
        "",
    ]
    for result in evaluation["results"]:
        decoding = result.get("decoding") or f"beam {result.get('beam', '?')}"
        chrf = result.get("chrf")
        chrf_text = f", chrF {chrf:.2f}" if isinstance(chrf, (int, float)) else ""
        # quoted as code, as every text from the report: markup in it (HTML) is shown, not run
        lines.append(
            f"- `{decoding}`: BLEU {result['bleu']:.2f}{chrf_text} (`{result['signature']}`)"
        )
    return lines


def components_of_its_own(config: TransformerConfig) -> list[str]:
    """The settings of `config` that name a component defined outside minitx and torch, e.g.
    "score `cosine` (module `my_scores`)": whoever loads the model imports that module first.
    Told by the module of the registered class (minitx's activations are torch's classes), so a
    torch class registered under a name of one's own is not found."""
    registries = {"score": SCORES, "positional": POSITIONAL_ENCODINGS, "activation": ACTIVATIONS}
    own = []
    for setting, registry in registries.items():
        name = getattr(config, setting)
        module = getattr(registry[name], "__module__", None) or "?"
        if module.split(".")[0] not in ("minitx", "torch"):
            own.append(f"{setting} `{name}` (module `{module}`)")
    return own


def model_card(release: Release, evaluation: Mapping[str, Any] | None = None) -> str:
    """The `README.md` of a release: hub metadata, languages, data, scores, how to load."""
    src, tgt = release.languages
    languages: Sequence[str] = [lang for lang in (src, tgt) if lang]
    pair = f"{src or '?'} → {tgt or '?'}"
    source = data_source(release.train_config)
    source = source if _card_text(source) else None  # the training config is the user's text
    params = sum(p.numel() for p in release.model.parameters())
    config = release.model.config
    sizes = (
        f"d_model {config.d_model}, {config.n_heads} heads, {config.n_encoder_layers}+"
        f"{config.n_decoder_layers} layers, d_ff {config.d_ff}, {config.positional} positions, "
        f"{'pre' if config.norm_first else 'post'}-LN, vocabulary {config.tgt_vocab_size}"
    )
    front = ["---", "library_name: minitx", "pipeline_tag: translation", "tags:", "- translation"]
    front += ["- minitx", "language:", *[f"- {lang}" for lang in languages], "---", ""]
    body = [
        f"# minitx {pair} translation model",
        "",
        f"A Transformer encoder–decoder ({sizes}; "
        f"{params:,} parameters) trained with minitx {minitx.__version__}, a small PyTorch "
        "+ Lightning package that shows its attention maps.",
        "",
        "## Languages and data",
        "",
        f"- source language: `{src}`, target language: `{tgt}`",
        f"- training data (`data.source`): `{source}`"
        if source
        else "- training data: not recorded in the checkpoint",
        "",
        "## Evaluation",
        "",
        *_evaluation_lines(evaluation),
        "",
        "## Use",
        "",
        f"With minitx {minitx.__version__} or later installed (`pip install <minitx checkout>`), "
        "`DIR_OR_REPO_ID` being this directory or its hub repo id:",
        "",
        "```bash",
        f'minitx-translate --checkpoint DIR_OR_REPO_ID "<a {src or "source"} sentence>"',
        "```",
        "",
        "```python",
        "from minitx.translator import Translator",
        "",
        'tr = Translator.from_pretrained("DIR_OR_REPO_ID")',
        f'tr.translate(["<a {src or "source"} sentence>"])  # beam search, beam 5',
        "```",
        "",
        "Loading runs no code from the files: `model.safetensors` (weights), `config.json` "
        "(model config, languages, format version), `tokenizer.model` (sentencepiece).",
        "",
    ]
    if own := components_of_its_own(config):
        body += [
            f"This model uses {', '.join(own)}, which minitx does not ship: import the module "
            "that registers it before loading, or loading stops with an unknown-name error "
            "(minitx's docs/guides/extending.md).",
            "",
        ]
    body += [
        "## Training",
        "",
    ]
    if release.train_config:
        body += [
            f"The resolved training config is `{TRAIN_CONFIG_FILE}`; this trains a new run "
            "with the same settings (step for step the same where the run was bound by its "
            "steps, not by a clock):",
            "",
            "```bash",
            f"minitx-train --config {TRAIN_CONFIG_FILE}",
            "```",
        ]
    else:
        body.append("The checkpoint does not hold its training config.")
    return "\n".join(front + body) + "\n"
