"""The argument parser of `docmt`: one sub-parser per command of `cli.COMMANDS`."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

DEVICE_HELP = "cpu, cuda or cuda:N (default: CUDA when available, else the CPU)"
DEVICE_HELP_TEST = "cpu, cuda or cuda:N, on one process (default: the run's trainer.* settings)"
DEVICE_HELP_TRAIN = ("cpu, cuda or cuda:N: train on that one device, in one process (sets trainer.accelerator, "
                     "devices, num_nodes and strategy; default: the run's trainer.* settings)")


OVERRIDES_HELP = "key=value settings applied last, e.g. train.max_steps=300 model.d_model=256"
PROFILE_HELP = ("tiny | cpu | paper: sizes and steps (lightning_docmt/config/profiles/), under the file's "
                "settings; tiny also caps every stage's steps (train.step_cap)")
JSON_HELP = "print one JSON object instead of the table"


def seed_list(text: str) -> list[int]:
    """`--seeds 1,2,3` -> [1, 2, 3]; anything else is argparse's one-line error (exit status 2)."""
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 1,2,3, got {text!r}") from None
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"a seed is repeated in {text!r}")
    return seeds


def package_version() -> str:
    try:
        return version("lightning_docmt")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The arguments after the config file that choose a run's config: `docmt fit` and `docmt config`
    take the same ones, so that the same arguments compose the same config."""
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.add_argument("--row", help="a row of a table YAML")
    p.add_argument("--seed", type=int, help="train.seed of the run (a table row's seed)")
    p.add_argument("--profile", help=PROFILE_HELP)
    p.add_argument("--device", help=DEVICE_HELP_TRAIN)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="docmt", description="document-level NMT experiments")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    parser.add_argument("--verbose", action="store_true", help="print everything the libraries print (model "
                        "summaries, hardware banners, deprecations); default: the suite's own lines")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("stats", help="corpus statistics of a corpus spec")
    p.add_argument("spec", help="a corpus spec, e.g. bible:en-fr, synthetic:small, iwslt:SRC.xml,TGT.xml")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = sub.add_parser("prepare", help="build vocabulary + binarized cache; print JSON stats")
    p.add_argument("config", help="a run config, a run's config.yaml, or a table YAML with --row")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.add_argument("--row", help="a row of a table YAML")
    p.add_argument("--profile", help=PROFILE_HELP)

    p = sub.add_parser("fit", help="train every stage of one run; print the run dir")
    p.add_argument("config", nargs="?", help="an experiment/table YAML or a run's config.yaml")
    add_run_options(p)
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue an interrupted run in RUN_DIR with its own config.yaml")
    p.add_argument("--results", default="results", help="where table rows are written")

    p = sub.add_parser("config", help="print the resolved config that docmt fit with the same arguments "
                                       "trains with (YAML, as the run's config.yaml); train nothing")
    p.add_argument("config", help="an experiment/table YAML (a table needs --row) or a run's config.yaml")
    add_run_options(p)

    p = sub.add_parser("test", help="metrics of a trained run on its test set")
    p.add_argument("run", help="a run directory or its config.yaml")
    p.add_argument("--ckpt", help="a checkpoint to test instead of the run's final one (with the config of "
                   "the stage that run.json records it for, else the final stage's)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.add_argument("--device", help=DEVICE_HELP_TEST)

    p = sub.add_parser("translate", help="translate JSONL documents or plain text")
    p.add_argument("--ckpt", required=True, help="a trained checkpoint (a stage's final.ckpt or a run's)")
    p.add_argument("--input", required=True, help="JSONL documents ({doc_id, src: [...]}) or plain text, "
                   "one sentence per line, documents separated by an empty line")
    p.add_argument("--output", required=True, help="written in the input's layout")
    p.add_argument("--beam", type=int, help="beam size (default: the run's decode.beam)")
    p.add_argument("--lenpen", type=float, help="length penalty (default: the run's decode.len_penalty)")
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--explain", action="store_true", help="print, for every sentence, the context "
                   "tokens the model's hard selection keeps (one JSON line each; lifeng_coattn)")

    p = sub.add_parser("contrastive", help="contrastive accuracy of a checkpoint on a suite")
    p.add_argument("--ckpt", required=True, help="a trained checkpoint (a stage's final.ckpt or a run's)")
    p.add_argument("--suite", required=True, help="a suite file (JSONL), or a published suite: "
                   "contrapro|discevalmt|scat (in --suites-dir) or NAME:DIR")
    p.add_argument("--suites-dir", help="the folder holding the published suites' folders")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.add_argument("--device", help=DEVICE_HELP)

    p = sub.add_parser("average", help="average the weights of Lightning checkpoints")
    p.add_argument("checkpoints", nargs="+", metavar="CKPT", help="Lightning checkpoints of one run")
    p.add_argument("--out", required=True, help="the averaged checkpoint (written atomically)")

    p = sub.add_parser("export", help="a checkpoint to ship: weights (optionally halved), config and "
                                       "vocabularies, without optimizer state")
    p.add_argument("checkpoint", metavar="CKPT", help="a trained checkpoint (a stage's final.ckpt or a run's)")
    p.add_argument("--out", required=True, help="the exported checkpoint (written atomically)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="the floating tensors' type in the file (default: float32)")

    p = sub.add_parser("pretrain", help="pretrain a context encoder on the Bible (a pretraining YAML, "
                                         "lightning_docmt/pretraining/); print its directory")
    p.add_argument("config", metavar="FILE", help="a pretraining YAML (experiments/donato2021/pretrain_*.yaml)")

    p = sub.add_parser("table", help="run the rows of a table YAML, or the part tables of a grid YAML")
    p.add_argument("table", help="a table YAML (rows:) or a grid YAML (parts:)")
    p.add_argument("overrides", nargs="*", help=f"{OVERRIDES_HELP}; every row gets them")
    p.add_argument("--rows", default="all", help="comma-separated row names (default: all); the report covers "
                   "every row with finished runs")
    p.add_argument("--parts", help="a grid's parts to run (default: all); its report covers every part")
    p.add_argument("--seeds", type=seed_list, help="comma-separated seeds, e.g. 1,2,3 (default: the table's "
                   "seeds:, else train.seed)")
    p.add_argument("--profile", help=PROFILE_HELP)
    p.add_argument("--device", help=f"{DEVICE_HELP_TRAIN}; every row gets it")
    p.add_argument("--dry-run", action="store_true", help="print the docmt fit command of every run, train nothing")
    p.add_argument("--results", default="results", help="the folder of the table's runs and reports")

    p = sub.add_parser("archive", help="copy a table's finished runs into the archive of measured runs "
                                        "(no checkpoints, compressed outputs) and rebuild its report there; "
                                        "or a pretrained encoder, given its pretraining file")
    p.add_argument("table", help="a table YAML (rows:), or a pretraining YAML (its encoder goes to "
                   "<archive>/pretrained/, where tables find it when the cache lacks it)")
    p.add_argument("--rows", default="all", help="comma-separated row names (default: all)")
    p.add_argument("--seeds", type=seed_list, help="comma-separated seeds (default: every finished seed found)")
    p.add_argument("--results", default="results", help="the folder the runs were written to (docmt table --results)")
    p.add_argument("--to", default="experiments/measured", help="the archive (default: experiments/measured)")

    p = sub.add_parser("demo", help="the demo table's question (does the previous sentence help, and is it "
                                     "read?) answered by trained models in about 15 minutes on 2 cores "
                                     "(lightning_docmt/cli/demo.py)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--from-scratch", action="store_true", help="train the shared sentence model too "
                     "instead of starting from the shipped one (adds most of an hour on 2 cores)")
    how.add_argument("--quick", action="store_true", help="a smoke run of every row (a few minutes): "
                     "untrained models")

    p = sub.add_parser("bench", help="benchmarks; print measured ratios")
    p.add_argument("--only", help="comma-separated benchmarks (data_scale, training_step, zhang_efficiency, "
                                  "peers, context_overhead, translate_memory); default: all")
    p.add_argument("--json", metavar="FILE", help="also write the measured ratios to FILE as JSON")
    p.add_argument("--sentences", type=int, default=2_000_000, help="data-scale corpus size")
    p.add_argument("--smoke", action="store_true",
                   help="every selected benchmark at tiny sizes (seconds): checks that they run, measures nothing")
    return parser
