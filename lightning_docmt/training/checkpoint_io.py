"""Lightning's checkpoints written atomically (`AtomicCheckpointIO`), as every other checkpoint of the
toolkit is (`checkpoints.save_atomically`).

Lightning's own local save writes the file through fsspec's transaction, whose temporary file lies
in the system's temporary folder: where that is another filesystem than the run's, the commit is a
copy that truncates the previous `last.ckpt` or `resume.ckpt` first, so a kill or a full disk
during it leaves neither the old checkpoint nor the new one. Here the temporary file lies beside
the checkpoint and is renamed over it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from lightning_docmt.checkpoints import save_atomically


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose save is `save_atomically` (local paths)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        save_atomically(checkpoint, target)
