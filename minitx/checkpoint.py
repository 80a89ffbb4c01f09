"""Checkpoint files: what minitx puts into Lightning's `.ckpt` and how it reads it back safely.

A minitx checkpoint is self-contained. Beside Lightning's own entries (`state_dict`,
optimizer and loop state, ...) it holds a `minitx` entry with:
- `model_config`: the `TransformerConfig` as a plain dict;
- `tokenizer`: the sentencepiece model bytes;
- `data`: the source and target language codes;
- `train_config`: the resolved training config (YAML text), when trained by the CLI.

Loading (`read_checkpoint`) never executes code stored in the file; writing
(`write_checkpoint`) never leaves a half-written checkpoint under its real name. Training's
checkpoint plugin calls both. This module imports torch, the model and the tokenizer; never
Lightning.
"""

from __future__ import annotations

import hashlib
import pickle
import re
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from minitx.errors import CheckpointError, MissingFileError, UnregisteredError
from minitx.model import Transformer, TransformerConfig
from minitx.registry import UNREGISTERED_WHEN_LOADING
from minitx.textio import atomic_path
from minitx.tokenizer import Tokenizer

CHECKPOINT_KEY = "minitx"
"""Key of the minitx payload in a checkpoint."""

MODEL_PREFIX = "model."
"""Prefix of the Transformer's parameters in the LightningModule's state dict."""


def write_payload(
    checkpoint: dict[str, Any],
    *,
    model_config: TransformerConfig,
    tokenizer: Tokenizer | None,
    languages: tuple[str | None, str | None] | None = None,
) -> None:
    """Add the minitx entry to a checkpoint dict that Lightning is about to save."""
    payload = checkpoint.setdefault(CHECKPOINT_KEY, {})
    payload["model_config"] = model_config.to_dict()
    if tokenizer is not None:
        payload["tokenizer"] = tokenizer.model_bytes
    if languages is not None:
        payload["data"] = {"src_lang": languages[0], "tgt_lang": languages[1]}


def tensor_bytes(obj: Any) -> int:
    """The bytes of every tensor in a nested dict / list / tuple (a checkpoint's size, about)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, Mapping):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    return 0


def write_checkpoint(checkpoint: Mapping[str, Any], path: str | Path) -> None:
    """Save `checkpoint` with `torch.save` so that `path` is whole or unchanged
    (`minitx.textio.atomic_path`); the parent directory is created when missing.

    Raises:
        OutputError: no room on the destination's disk (the message names `path`, the space
            needed and the space free; the previous file is unchanged).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, size_hint=tensor_bytes(checkpoint)) as tmp, open(tmp, "wb") as out:
        torch.save(dict(checkpoint), out)  # a file object: a full disk raises ENOSPC itself


TORCH_FILE_MAGIC = (b"PK", b"\x80")
"""How a `torch.save` file can begin: a zip archive (the format since torch 1.6) or a pickle's
protocol header (the legacy format; a plain pickle too, which the safe loader then refuses)."""


def read_checkpoint(path: str | Path, *, mmap: bool = False) -> dict[str, Any]:
    """Read a `torch.save` file with `weights_only=True`, whatever torch's own default is
    (before 2.6 it unpickles anything): the one reader of `.ckpt` files, for inference and
    for training's resume, so a crafted file is refused, never run. `mmap` maps a zip-format
    file (torch's since 1.6) instead of loading its tensors into memory (its bytes are still
    read once, for their CRC-32s); a legacy-format file is read whole.

    Raises:
        MissingFileError: no file at `path` (a `FileNotFoundError`).
        CheckpointError: unreadable (truncated / not a torch file), bytes that fail their
            CRC-32s, or holding objects other than tensors and plain data; or a release
            (minitx-export's directory, or its weights), which holds no training state.
    """
    path = Path(path)
    weights = path.suffix == ".safetensors"
    if weights or (path.is_dir() and any(path.glob("*.safetensors"))):
        # else "a directory", or "truncated, corrupt or another kind of file"
        what = "the weights of a release" if weights else "a release directory"
        raise CheckpointError(
            f"{path} is {what} (minitx-export writes them), not a .ckpt checkpoint: a release "
            "holds the weights only, with no optimizer or loop state (pass the .ckpt written "
            "under <run dir>/checkpoints/)"
        )
    if not path.is_file():
        what = "is a directory, not a .ckpt file" if path.is_dir() else "not found"
        if path.exists() and not path.is_dir():  # /dev/null, a pipe: there, but no file
            what = "is not a regular file"
        raise MissingFileError(
            f"checkpoint {what}: {path} (pass the .ckpt written under <run dir>/checkpoints/)"
        )
    unreadable = (
        f"{path}: not a readable minitx checkpoint (truncated, corrupt or another kind of file)"
    )
    with path.open("rb") as file:
        head = file.read(2)
    if not head.startswith(TORCH_FILE_MAGIC):  # torch would call a text file "unsafe" below
        raise CheckpointError(
            f"{unreadable}: it is not a file written by torch.save; pass the .ckpt written "
            "under <run dir>/checkpoints/, or a release directory"
        )
    try:
        with warnings.catch_warnings():  # a legacy file's protocol is not 2: "file an issue"
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            # torch maps only the zip format: a legacy file would fail on that, not be refused
            zipped = head == b"PK"
            checkpoint = torch.load(
                path, map_location="cpu", weights_only=True, mmap=mmap and zipped
            )
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" in str(exc):
            # torch's text goes on to advise weights_only=False: not advice to pass on
            found = re.search(r"GLOBAL ([\w.]+)", str(exc))
            named = f" ({found.group(1)})" if found else ""
            raise CheckpointError(
                f"{path}: refused to load: the file holds objects other than tensors and plain "
                f"data{named}, and loading them could execute code; a minitx checkpoint never does"
            ) from exc
        raise CheckpointError(f"{unreadable}: {exc}") from exc
    except Exception as exc:  # torch raises KeyError, RuntimeError, EOFError, ... for damaged files
        raise CheckpointError(f"{unreadable}: {type(exc).__name__}: {exc}") from exc
    if zipped and (damaged := _failed_crc(path)) is not None:
        raise CheckpointError(f"{unreadable}: {damaged}")
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"{unreadable}: it holds a {type(checkpoint).__name__}, not a dict")
    weights = checkpoint.get("state_dict", {})
    if not isinstance(weights, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()
    ):  # every reader (and Lightning's) would fail on it with a traceback
        raise CheckpointError(
            f"{path}: damaged checkpoint: its 'state_dict' is not a mapping of tensor names to "
            "tensors; use a checkpoint minitx-train wrote"
        )
    return checkpoint


def _failed_crc(path: Path) -> str | None:
    """Which member of the zip-format torch file `path` fails the CRC-32 that `torch.save`
    stored for it, or None. `torch.load` does not check them, so bytes damaged on a disk or in
    a copy loaded as weights and translated garbage with no word; reading the members once
    checks them (about 35 ms for the default run's 73 MB checkpoint)."""
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                if member.CRC == 0 and member.file_size:  # written without CRCs: nothing to check
                    continue
                with archive.open(member) as data:
                    while data.read(1 << 24):  # zipfile compares the CRC at the member's end
                        pass
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        return f"its bytes are damaged ({exc})"
    return None


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint safely (`read_checkpoint`) and check that it is a minitx one.

    Raises:
        MissingFileError: no file at `path` (a `FileNotFoundError`).
        CheckpointError: unreadable (truncated / not a torch file), holds non-data objects, or
            lacks the minitx payload (e.g. a checkpoint of another project).
    """
    checkpoint = read_checkpoint(path)
    check_minitx_checkpoint(checkpoint, path)
    return checkpoint


def seed_of(checkpoint: Mapping[str, Any]) -> str | None:
    """The `seed_everything` of the run that wrote `checkpoint`, as its training config (YAML
    text) spells it, or None when it carries none."""
    text = (checkpoint.get(CHECKPOINT_KEY) or {}).get("train_config")
    # a top-level key is a line of its own (the import contracts keep YAML out of here); a
    # seed of null or false (none set) is no seed to compare
    found = (
        re.search(r"^seed_everything: *(-?\d+) *$", text, re.M) if isinstance(text, str) else None
    )
    return found.group(1) if found else None


def weights_digest(weights: Mapping[str, torch.Tensor]) -> str:
    """sha256 (hex) of a state dict: each tensor's name, dtype, shape and bytes, in its order.
    Equal weights give equal digests however they were loaded (a `.ckpt`, a release)."""
    digest = hashlib.sha256()
    for name, tensor in weights.items():
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_minitx_checkpoint(checkpoint: Mapping[str, Any], path: str | Path) -> None:
    """Refuse a read `checkpoint` (from `path`) that lacks the minitx payload (its model config
    and tokenizer) or the weights: a checkpoint of another project, or no checkpoint at all.

    Raises:
        CheckpointError: naming `path` and what a minitx checkpoint holds.
    """
    payload = checkpoint.get(CHECKPOINT_KEY)
    if (
        not isinstance(payload, dict)
        or "model_config" not in payload
        or "tokenizer" not in payload
        or "state_dict" not in checkpoint
    ):
        raise CheckpointError(
            f"{path}: not a minitx checkpoint: it lacks the '{CHECKPOINT_KEY}' entry with the "
            "model config and tokenizer, or the 'state_dict' (checkpoints written by "
            "minitx-train have both)"
        )


def languages_of(
    checkpoint: Mapping[str, Any], path: str | Path = "<checkpoint>"
) -> tuple[str | None, str | None]:
    """(source, target) language codes stored in a checkpoint, or Nones.

    Raises:
        CheckpointError: its `data` entry is not a mapping of language codes.
    """
    data = checkpoint[CHECKPOINT_KEY].get("data") or {}
    languages = (data.get("src_lang"), data.get("tgt_lang")) if isinstance(data, dict) else None
    if languages is None or not all(isinstance(x, (str, type(None))) for x in languages):
        raise CheckpointError(
            f"{path}: damaged minitx checkpoint: its 'data' entry {data!r:.80} is not a mapping "
            "of the language codes src_lang and tgt_lang"
        )
    return languages


def model_config_differences(
    a: TransformerConfig, b: TransformerConfig, *, between: str = "->"
) -> str:
    """The settings in which two model configs differ, e.g. "d_ff: 128 -> 256; n_heads: 4 -> 8"
    (`between` stands between a's value and b's); empty when they describe the same model.
    What a resumed run and checkpoint averaging refuse, each with its own error."""
    ours, theirs = a.to_dict(), b.to_dict()
    differ = [key for key in ours if ours[key] != theirs[key]]
    return "; ".join(f"{key}: {ours[key]!r} {between} {theirs[key]!r}" for key in differ)


def check_finite(state: Mapping[str, torch.Tensor], where: str | Path) -> None:
    """Refuse weights holding NaN or inf (written after training had diverged, or damaged).

    Raises:
        CheckpointError: naming `where`, how many tensors and the first one.
    """
    bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise CheckpointError(
            f"{where}: the weights hold NaN or inf ({len(bad)} tensors, e.g. {bad[0]}): training "
            "had diverged when this file was written, or the file is damaged; use an earlier "
            "checkpoint"
        )


def weight_shapes(config: TransformerConfig) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor of the model `config` describes, with no memory allocated for
    it: the model is built on the meta device (shapes only)."""
    with torch.device("meta"):
        model = Transformer(config)
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def check_shapes(
    shapes: Mapping[str, tuple[int, ...]],
    expected: Mapping[str, tuple[int, ...]],
    fit: str,
    implied_by: str,
) -> None:
    """Refuse weights whose `shapes` differ from those a model config implies (`expected`, from
    `weight_shapes`) before that model is built: a damaged or crafted config could otherwise ask
    for more memory than the machine has (the process killed, no word said) before the weights
    are compared with it.

    Raises:
        CheckpointError: ``{fit}: ...`` naming the first tensor the model lacks or the first
            shape that differs (file's and `implied_by`'s).
    """
    unknown = sorted(set(shapes) - set(expected))
    if unknown:
        raise CheckpointError(f"{fit}: the model has no tensor {unknown[0]!r}")
    for name, shape in shapes.items():
        if shape != expected[name]:
            raise CheckpointError(
                f"{fit}: size mismatch for {name}: the file holds {list(shape)}, {implied_by} "
                f"implies {list(expected[name])}"
            )


def model_from_checkpoint(
    checkpoint: Mapping[str, Any], path: str | Path = "<checkpoint>"
) -> tuple[Transformer, Tokenizer]:
    """Rebuild the Transformer (weights loaded) and its tokenizer from a loaded checkpoint.

    Raises:
        CheckpointError: the config, tokenizer or weights are damaged or do not fit together.
    """
    payload = checkpoint[CHECKPOINT_KEY]
    try:
        config = TransformerConfig.from_dict(payload["model_config"])
        tokenizer = Tokenizer(payload["tokenizer"])
        expected = weight_shapes(config)  # built on meta: its components are registered
    except UnregisteredError as exc:
        raise CheckpointError(f"{path}: {exc}; {UNREGISTERED_WHEN_LOADING}") from None
    except (ValueError, TypeError, RuntimeError, AttributeError) as exc:
        raise CheckpointError(
            f"{path}: damaged minitx checkpoint: {type(exc).__name__}: {exc}"
        ) from exc
    state = {
        k[len(MODEL_PREFIX) :]: v
        for k, v in checkpoint["state_dict"].items()
        if k.startswith(MODEL_PREFIX)
    }
    typed = [k for k, v in state.items() if not v.is_floating_point()]
    if typed:  # load_state_dict would cast them to floats without a word: nonsense translations
        raise CheckpointError(
            f"{path}: damaged minitx checkpoint: {len(typed)} weight tensors are not floating "
            f"point (e.g. {typed[0]}, {state[typed[0]].dtype}); use a checkpoint minitx-train wrote"
        )
    check_shapes(
        {name: tuple(tensor.shape) for name, tensor in state.items()},
        expected,
        f"{path}: damaged minitx checkpoint: the weights do not fit its model config",
        "the model config",
    )
    check_finite(state, path)
    model = Transformer(config)  # it fits the weights: what they take, it takes once more
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise CheckpointError(
            f"{path}: damaged minitx checkpoint: the weights do not match the stored model "
            f"config: {exc}"
        ) from exc
    return model, tokenizer
