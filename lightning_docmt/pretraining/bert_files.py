"""An encoder pretrained in the project, written as a Hugging Face BERT directory, so that every
reader of pretrained checkpoints reads it as it reads a downloaded one (`nn/pretrained.py`,
`data/vocab/wordpiece.py`, `transformers.BertModel`):

    config.json                                   BERT's config keys (model_type bert)
    model.safetensors                             the encoder's tensors under BERT's names, the
                                                  inverse of `nn/pretrained.embedding_tensors`
                                                  and `layer_tensors`
    tokenizer.json, vocab.txt,                    the WordPiece tokenizer trained on the same text
    tokenizer_config.json, special_tokens_map.json  (BERT's basic tokenizer: punctuation split,
                                                  every CJK character a word, as BERT-Chinese)
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable

from torch import Tensor

from lightning_docmt.nn.pretrained import PretrainedEncoder

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0-4 of a trained tokenizer


def train_wordpiece(texts: Iterable[str], vocab_size: int, lowercase: bool):
    """A BERT WordPiece tokenizer (`tokenizers` implementation) whose vocabulary is a function of
    `texts` alone: the specials, every character (by falling count, then code point), `##c` for each
    character that occurs inside a word, then whole words by falling count (then alphabetically) up
    to `vocab_size` ids. Words are BERT's: split at whitespace and punctuation, every CJK character
    a word (so a Chinese vocabulary is its characters, as BERT-Chinese's is).

    NOT IN PAPER, reading D24: `tokenizers`' own WordPiece trainer breaks frequency ties in a
    different order on every run (its vocabulary, even its token set, changed between two trainings
    on the same text), so two pretraining runs of one file would not share ids; this ranking does
    not merge subwords, so a word outside the vocabulary is spelt in characters."""
    from tokenizers import BertWordPieceTokenizer
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer

    normalizer = BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=lowercase,
                                lowercase=lowercase)
    words: Counter[str] = Counter()
    for text in texts:
        words.update(w for w, _ in BertPreTokenizer().pre_tokenize_str(normalizer.normalize_str(text)))
    chars: Counter[str] = Counter()
    inner: Counter[str] = Counter()
    for word, count in words.items():
        chars.update({c: count for c in word})
        inner.update({c: count for c in word[1:]})
    ranked = lambda counts: sorted(counts, key=lambda t: (-counts[t], t))  # noqa: E731
    tokens = [*SPECIAL_TOKENS, *ranked(chars), *(f"##{c}" for c in ranked(inner))]
    if len(tokens) > vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is below the {len(tokens)} specials and characters of the text")
    known = set(tokens)
    tokens += [w for w in ranked(words) if w not in known][:vocab_size - len(tokens)]
    return BertWordPieceTokenizer({t: i for i, t in enumerate(tokens)}, clean_text=True, handle_chinese_chars=True,
                                  strip_accents=lowercase, lowercase=lowercase)


def save_tokenizer(tokenizer, directory: Path, lowercase: bool, max_tokens: int) -> None:
    """The tokenizer's files, as `transformers.AutoTokenizer` loads a BERT tokenizer."""
    tokenizer.save(str(directory / "tokenizer.json"))
    tokenizer.save_model(str(directory))  # vocab.txt
    names = dict(zip(("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"), SPECIAL_TOKENS))
    (directory / "special_tokens_map.json").write_text(json.dumps(names, indent=1))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase, "strip_accents": None if lowercase else False,
         "tokenize_chinese_chars": True, "model_max_length": max_tokens, **names}, indent=1))


def bert_state(encoder: PretrainedEncoder) -> dict[str, Tensor]:
    """The encoder's tensors under `BertModel`'s names (fused Q/K/V split into query, key, value)."""
    embed = encoder.embed
    state = {"embeddings.word_embeddings.weight": embed.weight,
             "embeddings.position_embeddings.weight": embed.positions.weight,
             "embeddings.token_type_embeddings.weight": embed.segment.weight,
             "embeddings.LayerNorm.weight": embed.norm.weight, "embeddings.LayerNorm.bias": embed.norm.bias}
    for k, layer in enumerate(encoder.layers):
        p, attn = f"encoder.layer.{k}.", layer["self_attn"]
        qkv_weight = attn.fn.attn.in_proj_weight.chunk(3, dim=0)  # 3 x (D, D)
        qkv_bias = attn.fn.attn.in_proj_bias.chunk(3, dim=0)  # 3 x (D,)
        for part, weight, bias in zip(("query", "key", "value"), qkv_weight, qkv_bias):
            state[f"{p}attention.self.{part}.weight"], state[f"{p}attention.self.{part}.bias"] = weight, bias
        state.update({
            f"{p}attention.output.dense.weight": attn.fn.attn.out_proj.weight,
            f"{p}attention.output.dense.bias": attn.fn.attn.out_proj.bias,
            f"{p}attention.output.LayerNorm.weight": attn.norm.weight,
            f"{p}attention.output.LayerNorm.bias": attn.norm.bias,
            f"{p}intermediate.dense.weight": layer["ffn"].fn.fc1.weight,
            f"{p}intermediate.dense.bias": layer["ffn"].fn.fc1.bias,
            f"{p}output.dense.weight": layer["ffn"].fn.fc2.weight,
            f"{p}output.dense.bias": layer["ffn"].fn.fc2.bias,
            f"{p}output.LayerNorm.weight": layer["ffn"].norm.weight,
            f"{p}output.LayerNorm.bias": layer["ffn"].norm.bias})
    return {name: tensor.detach().float().contiguous().cpu() for name, tensor in state.items()}


def save_bert(encoder: PretrainedEncoder, directory: Path, heads: int) -> None:
    """`config.json` and `model.safetensors` of `encoder` (its sizes read from its modules)."""
    from safetensors.torch import save_file

    first = encoder.layers[0]
    layout = encoder.layout
    config = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": layout.vocab_size,
              "hidden_size": encoder.width, "num_hidden_layers": len(encoder.layers),
              "num_attention_heads": heads, "intermediate_size": first["ffn"].fn.fc1.out_features,
              "hidden_act": layout.activation, "max_position_embeddings": layout.max_positions,
              "type_vocab_size": layout.type_vocab_size, "layer_norm_eps": layout.layer_norm_eps,
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
              "pad_token_id": 0}
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    save_file(bert_state(encoder), str(directory / "model.safetensors"))

