"""How training writes its checkpoints: whole or not at all, beside their final name.

Lightning's own `TorchCheckpointIO` serialises into memory and lets fsspec write the bytes
through a temporary file in the system's temporary directory, then *moves* it over the
checkpoint. When the runs directory is on another filesystem (a mounted disk, a network
share) that move is a copy: a kill during it leaves a truncated ``last.ckpt`` (the previous
good one lost) and an orphan in ``$TMPDIR``; a full disk leaves a truncated file under the
real name. `AtomicCheckpointIO` writes through `minitx.checkpoint.write_checkpoint` instead:
a temporary file in the checkpoint's own directory, flushed, then renamed (atomic on every
local filesystem).
"""

from __future__ import annotations

from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.types import _PATH

from minitx.checkpoint import write_checkpoint


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose `save_checkpoint` replaces the file atomically (see module doc).

    Loading and removing are Lightning's own.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        """Write `checkpoint` to `path` (a local file) whole, or leave `path` unchanged.

        Raises:
            TypeError: `storage_options` given (as Lightning's `TorchCheckpointIO`).
            OutputError: no room on the destination's disk.
        """
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint takes no storage_options")
        write_checkpoint(checkpoint, path)
