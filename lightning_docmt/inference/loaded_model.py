"""A trained model loaded from its self-contained checkpoint, for inference without Lightning.

A checkpoint written by the training loop (`training/module.DocMTModule`) carries its resolved
config (hyper-parameters), its vocabularies (`docmt_vocab`) and the model's weights under `model.`.
`load_checkpoint` reads it without running code (`checkpoints.read_checkpoint`), builds the plain
`Seq2SeqModel` from the config (`config/registry.build_model`) and loads the weights strictly:
translating, scoring and contrastive evaluation need nothing but the checkpoint file and no
Lightning (`docmt translate`, `docmt contrastive`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from lightning_docmt.checkpoints import VOCAB_KEY, load_state, read_checkpoint, unpack_vocabularies
from lightning_docmt.config.registry import build_model
from lightning_docmt.data.first_pass import RetokenisedSide
from lightning_docmt.data.streams import retokenised_arrays
from lightning_docmt.data.tokenizers import ExternalTokenizer, external_tokenizer, stream_tokenizers
from lightning_docmt.data.vocab import Vocabulary
from lightning_docmt.data.windows import WindowSpec
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.nn.seq2seq import Seq2SeqModel

MODEL_ATTRIBUTE = "model"  # the training module's attribute holding the model: its weights' prefix
HPARAM_KEYS = ("config", "src_vocab_size", "tgt_vocab_size")  # what `load_checkpoint` builds the model from


@dataclass
class LoadedModel:
    """A plain `Seq2SeqModel` with the run config it was trained with and its vocabularies."""

    model: Seq2SeqModel
    cfg: DictConfig
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary

    @functools.cached_property
    def external(self) -> ExternalTokenizer | None:
        """The tokenizer of the model's external context stream (`context.external`), if any."""
        return external_tokenizer(self.cfg.context)

    @functools.cached_property
    def stream_tokenizers(self) -> dict[str, ExternalTokenizer]:
        """The tokenizers of the model's named streams (`context.streams`), by stream name."""
        return stream_tokenizers(self.cfg.context)

    @property
    def window(self) -> WindowSpec:
        return WindowSpec.from_config(self.cfg.context, self.external, self.stream_tokenizers)

    @property
    def retokenised(self) -> dict[str, RetokenisedSide]:
        """The arrays a split needs for the model's streams (`streams.retokenised_arrays`)."""
        return retokenised_arrays(self.window.streams, self.stream_tokenizers)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> LoadedModel:
    """The model (on `device`, in eval mode), config and vocabularies of a self-contained checkpoint
    (read without running code, loaded strictly: a checkpoint whose weights do not fit its own
    config is an error)."""
    path = Path(path)
    ckpt = read_checkpoint(path)
    if VOCAB_KEY not in ckpt or "hyper_parameters" not in ckpt:
        raise DocMTInputError("not a lightning_docmt checkpoint (no config or vocabulary inside)",
                              path=path)
    hparams = ckpt["hyper_parameters"]
    # a checkpoint of an older format, or another program's, lacks some of them: one error line, no KeyError
    absent = [key for key in HPARAM_KEYS if not isinstance(hparams, dict) or key not in hparams]
    if absent:
        raise DocMTInputError(f"not a checkpoint of this version of lightning_docmt (its hyper_parameters "
                              f"lack {', '.join(repr(k) for k in absent)})", path=path)
    cfg = OmegaConf.create(hparams["config"])
    model = build_model(cfg.model, hparams["src_vocab_size"], hparams["tgt_vocab_size"])
    # the weights as the training module saved them (`model.<name>`): a mismatch names the file's keys
    load_state(torch.nn.ModuleDict({MODEL_ATTRIBUTE: model}), ckpt["state_dict"], path)
    model.to(device).eval()
    src_vocab, tgt_vocab = unpack_vocabularies(ckpt[VOCAB_KEY])
    return LoadedModel(model, cfg, src_vocab, tgt_vocab)
