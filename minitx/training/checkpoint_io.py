"""How training writes and reads its checkpoints: whole or not at all, and never running code.

Lightning's own `TorchCheckpointIO` serialises into memory and lets fsspec write the bytes
through a temporary file in the system's temporary directory, then *moves* it over the
checkpoint. When the runs directory is on another filesystem (a mounted disk, a network
share) that move is a copy: a kill during it leaves a truncated ``last.ckpt`` (the previous
good one lost) and an orphan in ``$TMPDIR``; a full disk leaves a truncated file under the
real name. `AtomicCheckpointIO` writes through `minitx.checkpoint.write_checkpoint` instead:
a temporary file in the checkpoint's own directory, flushed, then renamed (atomic on every
local filesystem).

Reading goes through `minitx.checkpoint.read_checkpoint` too: Lightning's own loader calls
`torch.load` with torch's default, which unpickled arbitrary objects before torch 2.6, so a
crafted `--ckpt_path` file could run code on resume. Here it is refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.types import _PATH

from minitx.checkpoint import read_checkpoint, write_checkpoint


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` that writes atomically and reads weights-only (see module doc)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        """Write `checkpoint` to `path` (a local file) whole, or leave `path` unchanged."""
        if storage_options is not None:  # as Lightning's TorchCheckpointIO
            raise TypeError(f"{type(self).__name__}.save_checkpoint takes no storage_options")
        write_checkpoint(checkpoint, path)

    def load_checkpoint(
        self,
        path: _PATH,
        map_location: Callable | None = None,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        """Read `path` weights-only onto the CPU (`minitx.checkpoint.read_checkpoint`).

        `map_location` and `weights_only` are ignored: Lightning moves the restored state to
        the model's device itself, and a checkpoint is never read with pickle's full powers.
        """
        return read_checkpoint(path)
