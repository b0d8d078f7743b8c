"""The Zhang et al. 2018 table files (experiments/zhang2018/) against docs/papers/zhang2018.md.

Composition only (no training): the rows switch what the paper's tables vary and nothing else,
the two-step stages follow section 1.4 (theta_s frozen, theta_d trained, trap 4), the stage-1
Transformer is one stage shared by every row of a table (stage reuse), and the paper's surviving
numbers sit in the right rows.
"""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from lightning_docmt.config.registry import import_all_archs
from lightning_docmt.models.zhang_doc import THETA_D_GLOBS
from lightning_docmt.tables.spec import compose_row, load_table
from lightning_docmt.training.stages import stage_config, stage_key
from lightning_docmt.training.update_size import update_size
from tests.helpers.paths import EXPERIMENTS

ZHANG = EXPERIMENTS / "zhang2018"
TABLES = sorted(ZHANG.glob("t*.yaml"))
PROFILES = [None, "tiny", "cpu", "paper"]


@pytest.fixture(scope="module", autouse=True)
def _archs():
    import_all_archs()


def compose(name: str, row: str, profile: str | None = None):
    return compose_row(load_table(ZHANG / name), row, profile)


def leaves(cfg) -> dict[str, object]:
    """Dotted key -> value of every leaf of a composed config."""
    out: dict[str, object] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = node

    walk(OmegaConf.to_container(cfg, resolve=True), "")
    return out


def changed_keys(a, b) -> set[str]:
    la, lb = leaves(a), leaves(b)
    return {k for k in la.keys() | lb.keys() if la.get(k) != lb.get(k)} - {"logging.name"}


def test_every_runnable_table_is_there():
    names = {p.name for p in TABLES}
    assert names == {"t1_context_length.yaml", "t2_context_layers.yaml", "t3_comparison.yaml",
                     "t4_fr_en.yaml", "t6_efficiency.yaml", "t7_two_step.yaml",
                     "t8_context_integration.yaml", "t9_gating.yaml"}
    for path in TABLES:
        table = load_table(path)
        assert table.id == f"zhang2018.{path.name.split('_')[0]}"


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_the_rows_of_a_table_share_one_step_1_transformer(path, profile):
    """Stage reuse: the `sent` stage has one key across the rows, so it trains once per table."""
    table = load_table(path)
    keys = set()
    for row in table.rows:
        cfg = compose_row(table, row.name, profile)
        if "sent" in cfg.train.schedule:
            scfg = stage_config(cfg, "sent")
            assert scfg.model.arch == "transformer"
            keys.add(stage_key(scfg, "sent", ""))
    assert len(keys) == 1


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_every_stage_trains_the_papers_update_at_paper_scale_and_one_batch_on_a_cpu(path):
    """Reading Z8: 24K tokens per update, the same on 1 or 4 devices, in every stage of every row
    (a sentence row too: it keeps the zhang_doc preset); the cpu profile: one batch per update."""
    table = load_table(path)
    for row in table.rows:
        paper, cpu = compose_row(table, row.name, "paper"), compose_row(table, row.name, "cpu")
        for name in paper.train.schedule:
            assert [update_size(stage_config(paper, name), world).budget for world in (1, 4)] \
                == [24000, 24000], (row.name, name)
            assert update_size(stage_config(cpu, name), 1).accumulate == 1


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_step_2_trains_theta_d_alone_from_the_transformer(path):
    """Trap 4: every zhang_doc stage that starts from a stage trains exactly theta_d."""
    table = load_table(path)
    for row in table.rows:
        cfg = compose_row(table, row.name)
        for name in cfg.train.schedule:
            stage = cfg.train.stages[name]
            if stage.init_from is None:
                continue
            assert stage.arch == "zhang_doc" and list(stage.trainable) == THETA_D_GLOBS
            assert cfg.train.stages[stage.init_from].arch == "transformer"
            assert stage.init_from in cfg.train.schedule[: cfg.train.schedule.index(name)]
            # trap K9: a schedule of its own, warmed up within the stage (not the tail of step 1's)
            optim = stage_config(cfg, name).train.optim
            assert not stage.continue_schedule and optim.warmup_steps < stage.max_steps


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_defaults_are_the_papers_final_system(path):
    """docs/papers/zhang2018.md section 7: N_c=1, gating on, context attention on both sides, 2 previous source
    sentences, beam 4, length penalty 0.6, case-insensitive BLEU; a table changes only its own knob."""
    table = load_table(path)
    varied = {"t1": "context.prev_sentences", "t2": "model.context_layers",
              "t8": "model.context_attn", "t9": "model.context_gating"}.get(table.id.split(".")[1])
    for row in table.rows:
        cfg = compose_row(table, row.name)
        assert (cfg.decode.beam, cfg.decode.len_penalty, cfg.eval.lowercase) == (4, 0.6, True)
        if cfg.model.arch != "zhang_doc" or cfg.train.schedule == ["sent"]:
            continue
        final = {"context.prev_sentences": 2, "context.next_sentences": 0, "context.side": "source",
                 "model.context_layers": 1, "model.context_gating": True,
                 "model.context_attn.encoder": True, "model.context_attn.decoder": True}
        for key, value in final.items():
            if varied is None or not key.startswith(varied):
                assert OmegaConf.select(cfg, key) == value, (row.name, key)


def test_t1_varies_the_number_of_previous_sentences_and_reports_contrastive_accuracy():
    table = load_table(ZHANG / "t1_context_length.yaml")
    assert "contrastive/accuracy" in table.metrics
    base = compose("t1_context_length.yaml", "k2")
    ks = []
    for row in table.rows:
        cfg = compose("t1_context_length.yaml", row.name)
        ks.append(stage_config(cfg, cfg.train.schedule[-1]).context.prev_sentences)  # the tested model's
        if row.name != "k0":
            assert changed_keys(cfg, base) <= {"context.prev_sentences"}
    assert ks == [0, 1, 2, 3, 4]  # covers the synthetic corpus's antecedent distances 1-3
    k0 = compose("t1_context_length.yaml", "k0")
    assert list(k0.train.schedule) == ["sent"] and stage_config(k0, "sent").model.arch == "transformer"


def test_t1_composes_on_the_synthetic_corpus_at_the_tiny_profile():
    cfg = compose_row(load_table(ZHANG / "t1_context_length.yaml"), "k3", "tiny",
                      ["data.corpus=synthetic:small"])
    assert cfg.data.corpus == "synthetic:small" and cfg.profile == "tiny"
    assert cfg.model.d_model == 32 and cfg.context.prev_sentences == 3


def test_t2_varies_only_the_context_encoder_depth():
    table = load_table(ZHANG / "t2_context_layers.yaml")
    base = compose("t2_context_layers.yaml", "nc1")
    depths = []
    for row in table.rows:
        cfg = compose("t2_context_layers.yaml", row.name)
        depths.append(cfg.model.context_layers)
        assert changed_keys(cfg, base) <= {"model.context_layers"}
    assert depths == [1, 2, 3, 4, 5, 6]


def test_t7_has_the_five_rows_with_their_paper_numbers_and_data():
    table = load_table(ZHANG / "t7_two_step.yaml")
    rows = {row.name: row.paper["test/bleu"] for row in table.rows}
    assert rows == {"sent_dd": 39.53, "sent_all": 45.97, "doc_only": 36.52, "two_step_dd": 40.22,
                    "two_step": 47.93}
    fraction = {}  # row -> [(stage, arch, train_fraction, trainable, init_from)]
    for name in rows:
        cfg = compose("t7_two_step.yaml", name)
        fraction[name] = [(s, stage_config(cfg, s).model.arch, stage_config(cfg, s).data.train_fraction,
                           list(cfg.train.stages[s].trainable), cfg.train.stages[s].init_from)
                          for s in cfg.train.schedule]
    everything, d_d = 1.0, 0.47  # D_s u D_d and D_d (940K of 2M pairs), reading Z7
    theta_d = THETA_D_GLOBS
    assert fraction == {
        "sent_dd": [("sent_dd", "transformer", d_d, ["*"], None)],
        "sent_all": [("sent", "transformer", everything, ["*"], None)],
        "doc_only": [("doc_scratch", "zhang_doc", d_d, ["*"], None)],  # Eq. 23
        "two_step_dd": [("sent_dd", "transformer", d_d, ["*"], None),
                        ("doc_dd", "zhang_doc", d_d, theta_d, "sent_dd")],
        "two_step": [("sent", "transformer", everything, ["*"], None),
                     ("doc", "zhang_doc", d_d, theta_d, "sent")],  # Eqs. 24-25
    }
    # D_d is a random draw of the chapters (not Genesis onwards: another domain than the test
    # books), the same one in every row and for every training seed
    draws = {(stage_config(compose("t7_two_step.yaml", name), s).data.train_fraction_draw,
              stage_config(compose("t7_two_step.yaml", name), s).data.train_fraction_seed)
             for name in rows for s in compose("t7_two_step.yaml", name).train.schedule}
    assert draws == {("random", 1)}


def test_t7_step_1_stages_are_shared_between_rows():
    keys = {}
    for row, stage in [("sent_dd", "sent_dd"), ("two_step_dd", "sent_dd"), ("sent_all", "sent"),
                       ("two_step", "sent")]:
        keys.setdefault(stage, set()).add(
            stage_key(stage_config(compose("t7_two_step.yaml", row), stage), stage, ""))
    assert all(len(v) == 1 for v in keys.values()) and keys["sent"] != keys["sent_dd"]


def test_every_zh_en_table_shares_one_step_1_transformer_and_d_d_keeps_its_draw():
    """T7 draws D_d at random (data.train_fraction_draw): its whole-data `sent` stage is still the
    one of T1-T3, T6, T8 and T9, while the draw stays in the key of the stages that use a fraction."""
    sent = {stage_key(stage_config(compose(name, row), "sent"), "sent", "")
            for name, row in [("t7_two_step.yaml", "sent_all"), ("t8_context_integration.yaml", "none"),
                              ("t3_comparison.yaml", "transformer")]}
    assert len(sent) == 1
    cfg = compose("t7_two_step.yaml", "sent_dd")
    first = OmegaConf.merge(cfg, {"data": {"train_fraction_draw": "first"}})
    assert stage_key(stage_config(cfg, "sent_dd"), "sent_dd", "") != \
        stage_key(stage_config(first, "sent_dd"), "sent_dd", "")


def test_t8_rows_switch_exactly_the_context_attention_sides():
    table = load_table(ZHANG / "t8_context_integration.yaml")
    both = compose("t8_context_integration.yaml", "both")
    switches = {}
    for row in table.rows:
        cfg = compose("t8_context_integration.yaml", row.name)
        switches[row.name] = (cfg.model.context_attn.encoder, cfg.model.context_attn.decoder)
        allowed = {f"model.context_attn.{side}" for side, on in zip(("encoder", "decoder"),
                                                                     switches[row.name]) if not on}
        if row.name == "none":  # no theta_d at all: step 2 has nothing to train
            allowed.add("train.schedule")
            assert list(cfg.train.schedule) == ["sent"]
        assert changed_keys(cfg, both) == allowed, row.name
    assert switches == {"none": (False, False), "encoder": (True, False), "decoder": (False, True),
                        "both": (True, True)}
    paper = {row.name: row.paper["test/bleu"] for row in table.rows}
    assert paper == {"none": 45.97, "encoder": 47.51, "decoder": None, "both": 47.93}


def test_the_full_system_has_one_paper_number_in_every_table():
    """T8's "both", T9's "gating", T3's and T7's two-step rows are the same system: one number."""
    full = {load_table(ZHANG / name).row(row).paper["test/bleu"]
            for name, row in [("t8_context_integration.yaml", "both"), ("t9_gating.yaml", "gating"),
                              ("t3_comparison.yaml", "this_work"), ("t7_two_step.yaml", "two_step")]}
    assert full == {47.93}


def test_t9_switches_only_the_gate_and_carries_the_derived_numbers():
    table = load_table(ZHANG / "t9_gating.yaml")
    residual, gating = (compose("t9_gating.yaml", name) for name in ("residual", "gating"))
    assert changed_keys(residual, gating) == {"model.context_gating"}
    assert (residual.model.context_gating, gating.model.context_gating) == (False, True)
    paper = {row.name: row.paper["test/bleu"] for row in table.rows}
    assert paper["gating"] - paper["residual"] == pytest.approx(0.38)  # the stated gain


@pytest.mark.parametrize("name, transformer, this_work", [
    ("t3_comparison.yaml", 45.97, 47.93),  # derived: +1.96 on All = Table 7 rows 2 and 5
    ("t4_fr_en.yaml", None, None),  # lost (only the +0.89 gain survives)
])
def test_t3_t4_compare_the_transformer_with_two_step_zhang_doc(name, transformer, this_work):
    table = load_table(ZHANG / name)
    assert [row.name for row in table.rows] == ["transformer", "this_work"]
    base, ours = compose(name, "transformer"), compose(name, "this_work")
    assert list(base.train.schedule) == ["sent"] and stage_config(base, "sent").model.arch == "transformer"
    assert ours.model.arch == "zhang_doc" and list(ours.train.schedule) == ["sent", "doc"]
    assert [row.paper["test/bleu"] for row in table.rows] == [transformer, this_work]


def test_t4_translates_french_into_english():
    assert compose("t4_fr_en.yaml", "this_work").data.corpus == "bible:fr-en"


def test_t6_reports_the_speed_metrics_with_the_papers_figures():
    table = load_table(ZHANG / "t6_efficiency.yaml")
    assert {"speed/train_tokens_per_s", "speed/decode_sents_per_s"} <= set(table.metrics)
    paper = {row.name: row.paper for row in table.rows}
    assert paper["this_work"]["speed/train_tokens_per_s"] / paper["transformer"]["speed/train_tokens_per_s"] \
        == pytest.approx(31 / 41)
    assert paper["this_work"]["speed/decode_sents_per_s"] / paper["transformer"]["speed/decode_sents_per_s"] \
        == pytest.approx(364 / 872)


def test_demo_zhang_row_fine_tunes_theta_d_from_the_shared_transformer():
    demo = load_table(ZHANG.parent / "demo.yaml")
    cfgs = {row.name: compose_row(demo, row.name) for row in demo.rows}
    zhang, concat = cfgs["zhang_doc"], cfgs["concat"]
    assert list(zhang.train.stages.doc.trainable) == THETA_D_GLOBS
    assert zhang.train.stages.doc.init_from == "sent"
    assert concat.train.stages.doc.init_from == "sent"
    # every row trains as long after the shared Transformer: none wins by training longer
    transformer = cfgs["transformer"]
    assert list(transformer.train.schedule) == ["sent", "more"]
    assert transformer.train.stages.more.init_from == "sent"
    assert zhang.train.stages.doc.max_steps == concat.train.stages.doc.max_steps \
        == transformer.train.stages.more.max_steps > 0
    # the same stage recipe for every row, a schedule of its own (trap K9)
    assert not any(cfg.train.stages[cfg.train.schedule[-1]].continue_schedule for cfg in cfgs.values())
    recipes = {json.dumps(OmegaConf.to_container(stage_config(cfg, cfg.train.schedule[-1]).train.optim), sort_keys=True)
               for cfg in cfgs.values()}
    assert len(recipes) == 1
    assert zhang.context.prev_sentences == concat.context.prev_sentences == 1
    keys = {stage_key(stage_config(cfg, "sent"), "sent", "") for cfg in cfgs.values()}
    assert len(keys) == 1  # one Transformer for every demo row
