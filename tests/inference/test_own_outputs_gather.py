"""The model's own translations gathered across DDP ranks (`inference/own_outputs.gathered`).

Target-side context models score CXMI with the previous sentences they translated themselves; under
DDP each rank translates its own documents, so the scoring rank needs every rank's outputs. Two CPU
processes (gloo) run the real collective here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lightning_docmt.inference.own_outputs import OutputTokens, gathered

SENTENCES = 6
# rank -> {sentence index: token ids} it translated; sentence 5 is translated by nobody
TRANSLATED = {0: {0: [7, 8], 2: [9], 3: [4, 4, 4]}, 1: {1: [5], 4: [6, 6]}}


def _rank(rank: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        mine = OutputTokens(SENTENCES)
        for index, ids in TRANSLATED[rank].items():
            mine.record(index, ids)
        merged = gathered(mine)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps([merged[i].tolist() for i in range(len(merged))]))
    finally:
        dist.destroy_process_group()


@pytest.mark.subprocess
def test_every_rank_gets_every_rank_s_translations(tmp_path):
    mp.start_processes(_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, start_method="spawn")
    expected = [[7, 8], [5], [9], [4, 4, 4], [6, 6], []]
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text()) == expected, rank


def test_outside_ddp_the_outputs_are_returned_as_they_are():
    outputs = OutputTokens(2)
    outputs.record(1, [3])
    assert not (dist.is_available() and dist.is_initialized())
    assert gathered(outputs) is outputs and torch.equal(torch.as_tensor(outputs[1]), torch.tensor([3]))
