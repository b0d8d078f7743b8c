"""The metrics a run adds to its test loop's: contrastive suites (`eval.contrastive`) and speed.

Tiny profile on a small synthetic corpus (a few seconds of training); one fitted run is shared.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Iterator

import pytest
import torch

from lightning_docmt.config import composition as config_lib
from lightning_docmt.data import synthetic
from lightning_docmt.data.contrastive_suites import chance_rates
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation.contrastive_scoring import evaluate_suite, with_random_contexts
from lightning_docmt.inference import decoding
from lightning_docmt.inference.loaded_model import load_checkpoint
from lightning_docmt.training import run as train
from lightning_docmt.training.speed import DECODE_SPEED_METRIC, TRAIN_SPEED_KEY, TRAIN_SPEED_METRIC
from tests.helpers.cli_run import docmt
from tests.helpers.paths import CONTRASTIVE_SUITES
from tests.helpers.run_env import single_process_run_env

NAME = "tiny?docs=20&test_docs=5"
SUITES = CONTRASTIVE_SUITES
STEPS = 10


def compose(root: Path, *overrides: str):
    return config_lib.compose(None, [
        f"data.corpus=synthetic:{NAME}", f"data.cache_dir={root / 'cache'}",
        f"logging.runs_dir={root / 'runs'}", f"train.max_steps={STEPS}",
        f"train.val_every_steps={STEPS}", "eval.valid_bleu=false",
        "trainer.log_every_n_steps=1", *overrides], profile="tiny")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with single_process_run_env():
        yield tmp_path_factory.mktemp("run_metrics")


@pytest.fixture(scope="module")
def fitted(root: Path) -> dict:
    cfg = compose(root, "eval.contrastive=[corpus]")
    run_dir = train.fit_run(cfg)
    record = json.loads((run_dir / "run.json").read_text())
    return {"cfg": cfg, "run_dir": run_dir, "record": record,
            "metrics": json.loads((run_dir / "metrics.json").read_text())}


@pytest.mark.fit
def test_single_suite_metrics_are_the_contrastive_command_figures(fitted):
    expected = evaluate_suite(load_checkpoint(fitted["record"]["checkpoint"]),
                              synthetic.contrastive_suite(NAME))
    contrastive = {k: v for k, v in fitted["metrics"].items() if k.startswith("contrastive/")}
    assert expected["by_phenomenon"]  # the comparison below covers every phenomenon
    shuffled = evaluate_suite(load_checkpoint(fitted["record"]["checkpoint"]),
                              with_random_contexts(synthetic.contrastive_suite(NAME)))
    assert contrastive == {"contrastive/accuracy": expected["accuracy"],
                           **{f"contrastive/{name}": part["accuracy"]
                              for name, part in expected["by_phenomenon"].items()},
                           "contrastive/random_ctx/accuracy": shuffled["accuracy"],
                           **{f"contrastive/{k}": v
                              for k, v in chance_rates(synthetic.contrastive_suite(NAME)).items()}}


@pytest.mark.fit
def test_train_speed_is_the_logged_target_tokens_over_the_training_seconds(fitted):
    stored = torch.load(fitted["record"]["checkpoint"], weights_only=False)[TRAIN_SPEED_KEY]
    with open(fitted["run_dir"] / "main" / "metrics.csv", newline="") as f:
        logged = [float(row["train/tokens"]) for row in csv.DictReader(f) if row["train/tokens"]]
    assert len(logged) == STEPS  # one row per training step (log_every_n_steps=1)
    assert stored["target_tokens"] == sum(logged)
    assert 0 < stored["seconds"]
    assert fitted["metrics"][TRAIN_SPEED_METRIC] == pytest.approx(
        stored["target_tokens"] / stored["seconds"])


@pytest.mark.fit
def test_a_run_reports_the_sentence_pairs_its_last_stage_trained_on(fitted, root):
    """`data/train_pairs`, the x of a data-size curve: every training sentence, or the fraction's."""
    train_docs = [d for d in synthetic.generate(NAME).documents if d.split == "train"]
    assert fitted["metrics"][train.TRAIN_PAIRS] == sum(len(d) for d in train_docs)
    half = json.loads((train.fit_run(compose(root, "data.train_fraction=0.5")) / "metrics.json").read_text())
    assert 0 < half[train.TRAIN_PAIRS] < fitted["metrics"][train.TRAIN_PAIRS]


@pytest.mark.fit
def test_a_mixed_run_reports_the_share_its_last_stage_trained_on(fitted, root):
    """`data/mix_share`: the in-domain share of the target tokens of the batches the last stage drew
    (`data.mix`, Donato et al. 2021, Table 6); its `done.json` also keeps the share asked for and
    the pairs of each corpus."""
    other = f"synthetic:{NAME}&seed=2"
    run_dir = train.fit_run(compose(root, f"data.mix.corpus={other}", "data.mix.share=0.5"))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    done = json.loads((Path(json.loads((run_dir / "run.json").read_text())["checkpoint"]).parent
                       / "done.json").read_text())
    pairs = sum(len(d) for d in synthetic.generate(other.removeprefix("synthetic:")).documents
                if d.split == "train")
    assert done["mix"] == {"corpus": other, "share": 0.5, "realised_share": metrics[train.MIX_SHARE],
                           "in_domain_pairs": fitted["metrics"][train.TRAIN_PAIRS], "out_of_domain_pairs": pairs}
    assert abs(metrics[train.MIX_SHARE] - 0.5) < 0.05
    assert metrics[train.TRAIN_PAIRS] == fitted["metrics"][train.TRAIN_PAIRS] + pairs
    assert train.MIX_SHARE not in fitted["metrics"]  # a run without data.mix


@pytest.mark.fit
def test_a_reused_stage_reports_its_stored_speed_and_suites_do_not_change_its_key(fitted, root):
    run_dir = train.fit_run(compose(root))  # the same stage, without contrastive suites
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    assert stages["main"]["reused"] is True
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics[TRAIN_SPEED_METRIC] == fitted["metrics"][TRAIN_SPEED_METRIC]
    assert not [k for k in metrics if k.startswith("contrastive/")]


@pytest.mark.fit
def test_several_suites_are_named_by_their_stem(fitted, root):
    other = root / "other.jsonl"
    synthetic.write_contrastive_suite("tiny?test_docs=3&seed=2", other)
    cfg = compose(root, f"eval.contrastive=[corpus,'{other}']")
    scores = train.test_checkpoint(cfg, Path(fitted["record"]["checkpoint"]), root / "several")
    names = sorted(k for k in scores if k.endswith("/accuracy"))
    assert names == ["contrastive/corpus/accuracy", "contrastive/corpus/random_ctx/accuracy",
                     "contrastive/other/accuracy", "contrastive/other/random_ctx/accuracy"]
    assert scores["contrastive/corpus/accuracy"] == fitted["metrics"]["contrastive/accuracy"]
    assert "contrastive/other/sense" in scores


@pytest.mark.fit
def test_a_published_suite_by_name_is_scored_beside_its_chance_rates(fitted, root):
    cfg = compose(root, "eval.contrastive=[corpus,discevalmt]", f"eval.suites_dir={SUITES}")
    scores = train.test_checkpoint(cfg, Path(fitted["record"]["checkpoint"]), root / "named")
    named = {k: v for k, v in scores.items() if k.startswith("contrastive/discevalmt/")}
    assert set(named) == {f"contrastive/discevalmt/{k}" for k in (
        "accuracy", "anaphora", "lexical_choice", "random_ctx/accuracy", "chance", "majority")}
    assert named["contrastive/discevalmt/chance"] == named["contrastive/discevalmt/majority"] == 0.5
    assert scores["contrastive/corpus/accuracy"] == fitted["metrics"]["contrastive/accuracy"]


@pytest.mark.fit
def test_the_contrastive_command_prints_the_rates_beside_the_accuracy(fitted):
    outcome = docmt("contrastive", "--ckpt", fitted["record"]["checkpoint"], "--suite", "discevalmt",
                    "--suites-dir", SUITES)
    assert outcome.code == 0, outcome.err
    assert "on 400 examples (chance 0.5000, majority 0.5000; with another example's context" in outcome.out


@pytest.mark.fit
def test_decode_speed_is_test_sentences_over_beam_search_seconds(fitted, root, monkeypatch):
    delay = 0.05  # seconds per sentence added to beam search: at most 1 / delay sentences per s
    translate = decoding.best_tokens

    def slow(network, batch, *args, **kwargs):
        time.sleep(delay * batch["src"].size(0))
        return translate(network, batch, *args, **kwargs)

    monkeypatch.setattr(decoding, "best_tokens", slow)
    scores = train.test_checkpoint(fitted["cfg"], Path(fitted["record"]["checkpoint"]),
                                   root / "slow", suites={})
    # Counted per sentence (a batch holds tens of them) and timed by the delay, with room for the
    # decoding itself on a busy machine.
    assert 0.25 / delay < scores[DECODE_SPEED_METRIC] <= 1 / delay


def _missing_file(root: Path) -> str:
    return f"eval.contrastive=['{root / 'missing.jsonl'}']"


def _corpus_without_suite(root: Path) -> str:
    test_corpus = root / "plain.jsonl"
    test_corpus.write_text(json.dumps({"doc_id": "d", "src": ["a b ."], "tgt": ["c d ."]}) + "\n")
    return f"eval.contrastive=[corpus] data.test=jsonl:{test_corpus}"


def _same_name_twice(root: Path) -> str:
    for folder in ("a", "b"):
        synthetic.write_contrastive_suite("tiny?test_docs=1", root / folder / "suite.jsonl")
    return f"eval.contrastive=['{root / 'a' / 'suite.jsonl'}','{root / 'b' / 'suite.jsonl'}']"


def _named_without_folder(root: Path) -> str:
    return "eval.contrastive=[scat]"


def _named_in_another_pair(root: Path) -> str:
    return f"eval.contrastive=[contrapro] eval.suites_dir={SUITES} data.tgt_lang=fr"


@pytest.mark.parametrize("case, match", [(_missing_file, "missing.jsonl"),
                                         (_corpus_without_suite, "jsonl:"),
                                         (_same_name_twice, "two suites named 'suite'"),
                                         (_named_without_folder, "set eval.suites_dir"),
                                         (_named_in_another_pair, "'contrapro' is en-de: its target "
                                                                  "language is 'de', the run's is 'fr'")])
def test_a_bad_suite_entry_fails_before_training(case, match, tmp_path):
    cfg = compose(tmp_path, *case(tmp_path).split(" "))
    with pytest.raises(DocMTInputError, match=match) as err:
        train.fit_run(cfg)
    assert err.value.key == "eval.contrastive"
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


@pytest.mark.fit
def test_a_run_reporting_on_valid_scores_the_valid_split_and_never_reads_test(fitted, root):
    """`data.report_split=valid` (a table's `evaluate: valid_report`): the same trained stage (the
    report's split is not part of its key), its test report on the valid split under `valid/` names
    and `valid.*` files, and no test document binarized or decoded."""
    from lightning_docmt.data.prepare import cache_layout, read_meta

    cfg = compose(root, "eval.contrastive=[corpus]", "data.report_split=valid")
    run_dir = train.fit_run(cfg)
    record = json.loads((run_dir / "run.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    stage, tested = record["stages"]["main"], fitted["record"]["stages"]["main"]
    assert stage["reused"] and stage["key"] == tested["key"]
    assert {"valid/bleu", "valid/chrf", "valid/contrastive/accuracy"} <= set(metrics)
    assert not [k for k in metrics if k.startswith(("test/", "contrastive/"))]
    assert {p.name for p in run_dir.glob("valid.*")} == {"valid.hyp.txt", "valid.ref.txt", "valid.signature.json"}
    assert not list(run_dir.glob("test.*"))
    layout = cache_layout(cfg.data, cfg.vocab)
    assert read_meta(layout.split_dirs["test"])["split"] == "valid"
    references = (run_dir / "valid.ref.txt").read_text().splitlines()
    assert len(references) == read_meta(layout.split_dirs["valid"])["sentences"]
    assert references != (fitted["run_dir"] / "test.ref.txt").read_text().splitlines()


def test_reported_scores_are_renamed_and_the_files_moved(tmp_path):
    """What `reported_on_valid` renames: the test loop's, the context-usage passes' and the suites'
    scores; training speed and the environment record stay as they are."""
    (tmp_path / "test.hyp.txt").write_text("a\n")
    scores = {"test/bleu": 1.0, "cxmi": 0.1, "cxmi/first": 0.0, "random_ctx/bleu_delta": -0.2,
              "contrastive/accuracy": 0.5, TRAIN_SPEED_METRIC: 9.0, "env/code": "abc"}
    assert train.reported_on_valid(scores, tmp_path) == {
        "valid/bleu": 1.0, "valid/cxmi": 0.1, "valid/cxmi/first": 0.0, "valid/random_ctx/bleu_delta": -0.2,
        "valid/contrastive/accuracy": 0.5, TRAIN_SPEED_METRIC: 9.0, "env/code": "abc"}
    assert [p.name for p in tmp_path.iterdir()] == ["valid.hyp.txt"]
