"""Table files (docs/design.md section 3): one YAML file per paper table, one run per row and seed.

    id: zhang2018.t8                      # also the results folder and the wandb group
    title: Effect of context integration (Zhang et al. 2018, Table 8)
    metrics: [test/bleu]                  # the columns; keys of what a run returns, or
                                          # contrastive:<suite>[:<key>] (tables/contrastive_columns.py)
    base: [model.arch=zhang_doc, data.corpus=bible:en-fr]     # overrides shared by every row
    seeds: [1, 2, 3]                      # optional; else the run config's train.seed
    baseline: none                        # optional: the row whose test BLEU every other row is
                                          # tested against, per seed (tables/row_significance.py)
    evaluate: test                        # optional: `valid` for a selection table (a sweep): the
                                          # rows are trained and scored on valid only, the test
                                          # split is never decoded; its metrics are `val/...`.
                                          # `valid_report`: the report a test table gives (beam
                                          # BLEU, chrF, CXMI, the random-context control,
                                          # significance) on the valid split, test never read;
                                          # its metrics are `valid/...` (data.report_split)
    curve: {metric: ..., x: ..., series: ...}   # optional: a figure of a metric against an x
                                          # each run reports (tables/curve.py)
    changes: [{name: ..., of: [[row, against]], paper: {...}}]   # optional: changes between rows
                                          # the paper states (tables/changes.py)
    notes: free text                      # optional
    rows:
      - {name: none, overrides: [model.context_attn.encoder=false], paper: {test/bleu: 45.97}}

`paper` maps a metric to the paper's number, or null where the paper gives none; a row may carry
its own `notes`. Errors name the file, the line and the row.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from omegaconf import DictConfig, OmegaConf

from lightning_docmt.config.composition import Layer, compose, compose_layers, override_layers
from lightning_docmt.config.yaml_file import YamlFile
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation.contrastive_scoring import CORPUS_SUITE
from lightning_docmt.tables import contrastive_columns
from lightning_docmt.tables.changes import Change, parse_changes
from lightning_docmt.tables.curve import Curve, parse_curve
from lightning_docmt.tables.values import is_finite_number

TABLE_KEYS = ("id", "title", "metrics", "base", "rows", "seeds", "baseline", "evaluate", "curve", "changes",
              "notes")
EVALUATED_SPLITS = ("test", "valid", "valid_report")
ROW_KEYS = ("name", "overrides", "paper", "notes")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # used as a folder name


@dataclass(frozen=True)
class TableRow:
    name: str
    overrides: tuple[str, ...]
    paper: dict[str, float | None]
    notes: str
    index: int  # position in `rows:`


@dataclass(frozen=True)
class Table:
    file: YamlFile
    id: str
    title: str
    metrics: tuple[str, ...]
    base: tuple[str, ...]
    rows: tuple[TableRow, ...]
    seeds: tuple[int, ...] | None
    notes: str
    baseline: str | None = None
    evaluate: str = "test"  # "valid": a selection table, scored on valid, test never decoded
    curve: Curve | None = None
    changes: tuple[Change, ...] = ()

    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def paper(self) -> str:
        """The paper part of the id (`zhang2018` of `zhang2018.t8`), used as a wandb tag."""
        return self.id.split(".")[0]

    def row(self, name: str) -> TableRow:
        for row in self.rows:
            if row.name == name:
                return row
        names = [r.name for r in self.rows]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise DocMTInputError(f"no row '{name}'{hint}; rows: {', '.join(names)}", path=self.path)

    def select(self, rows: str | Sequence[str] = "all") -> list[TableRow]:
        """`'all'`, a comma-separated string of row names, or a list of names (kept in table order)."""
        if isinstance(rows, str):
            if rows == "all":
                return list(self.rows)
            rows = [name.strip() for name in rows.split(",") if name.strip()]
        wanted = {self.row(name).name for name in rows}
        return [row for row in self.rows if row.name in wanted]


def is_table_file(file: YamlFile) -> bool:
    return "rows" in file.data


def is_grid_file(file: YamlFile) -> bool:
    """A grid of table files (`parts:`, tables/grid.py)."""
    return "parts" in file.data


Fail = Callable[..., DocMTInputError]  # fail(message, *keys): the error at the line of `keys`


@dataclass(frozen=True)
class SpecFile:
    """What table and grid files share, checked: their keys, `id`, `title`, `metrics`, `notes`."""

    file: YamlFile
    data: dict[str, Any]
    metrics: list[str]
    notes: str
    fail: Fail


def read_spec_file(path: str | Path, kind: str, allowed: Sequence[str], required: Sequence[str]) -> SpecFile:
    """Load a `kind` file ("table", "grid") whose keys are among `allowed` and include `required`."""
    file = YamlFile.load(path)
    data: dict[str, Any] = OmegaConf.to_container(file.data, resolve=False)  # type: ignore[assignment]

    def fail(message: str, *keys: str | int) -> DocMTInputError:
        return DocMTInputError(message, path=file.path, line=file.line_of(keys) if keys else None)

    for key in data:
        if key not in allowed:
            raise fail(f"unknown {kind} key '{key}'{hint(key, allowed)}", key)
    for key in ("id", "title", "metrics", *required):
        if key not in data:
            raise fail(f"missing {kind} key '{key}'")
    if not (isinstance(data["id"], str) and SAFE_NAME.match(data["id"])):
        raise fail(f"'id' must be a name of letters, digits and _.+- , got {data['id']!r}", "id")
    if not isinstance(data["title"], str):
        raise fail("'title' must be a string", "title")
    metrics = _string_list(data["metrics"])
    if not metrics or len(set(metrics)) != len(metrics):
        raise fail("'metrics' must be a non-empty list of distinct metric names", "metrics")
    notes = data.get("notes", "")
    if not isinstance(notes, str):
        raise fail("'notes' must be a string", "notes")
    return SpecFile(file=file, data=data, metrics=metrics, notes=notes, fail=fail)


def load_table(path: str | Path) -> Table:
    """Parse and validate a table file (override syntax included; composing rows is `compose_row`)."""
    spec = read_spec_file(path, "table", TABLE_KEYS, ("rows",))
    file, data, metrics, notes, fail = spec.file, spec.data, spec.metrics, spec.notes, spec.fail
    table_id = data["id"]
    for metric in metrics:
        problem = contrastive_columns.check_column(metric)
        if problem:
            raise fail(problem, "metrics")
    base = _string_list(data.get("base", []))
    if base is None:
        raise fail("'base' must be a list of key=value strings", "base")
    override_layers(base, "table base override", path=file.path,
                    lines=[file.line_of(["base", i]) for i in range(len(base))])
    seeds = data.get("seeds")
    if seeds is not None:
        if not (isinstance(seeds, list) and seeds and all(_is_int(s) for s in seeds)
                and len(set(seeds)) == len(seeds)):
            raise fail("'seeds' must be a non-empty list of distinct integers", "seeds")
        seeds = tuple(seeds)
    if not (isinstance(data["rows"], list) and data["rows"]):
        raise fail("'rows' must be a non-empty list", "rows")
    rows = tuple(_parse_row(raw, i, metrics, file, fail) for i, raw in enumerate(data["rows"]))
    seen: set[str] = set()
    for row in rows:
        if row.name in seen:
            raise fail(f"row '{row.name}': duplicate row name", "rows", row.index)
        seen.add(row.name)
    baseline = data.get("baseline")
    if baseline is not None and baseline not in seen:
        raise fail(f"'baseline' must name a row ({', '.join(r.name for r in rows)}), got "
                   f"{baseline!r}", "baseline")
    evaluate = data.get("evaluate", "test")
    if evaluate not in EVALUATED_SPLITS:
        raise fail(f"'evaluate' must be one of {', '.join(EVALUATED_SPLITS)}, got {evaluate!r}", "evaluate")
    if evaluate == "valid":  # the valid split's scores, and its own contrastive suite (`corpus`)
        not_valid = [m for m in metrics
                     if not m.startswith("val/") and not contrastive_columns.is_corpus_column(m)]
        if not_valid:  # a selection table must not show anything measured on test
            raise fail(f"'evaluate: valid' scores on the valid split only: metric '{not_valid[0]}' "
                       f"is neither a val/ metric nor a column of the corpus' own suite "
                       f"({contrastive_columns.PREFIX}{CORPUS_SUITE}[:<key>])", "metrics")
        if baseline is not None:
            raise fail("'baseline' tests test BLEU: a table with 'evaluate: valid' has none", "baseline")
    if evaluate == "valid_report":  # the test report's scores, on the valid split
        not_valid = [m for m in metrics if not m.startswith("valid/") and m != "initial_damage"]
        if not_valid:
            raise fail(f"'evaluate: valid_report' reports on the valid split: metric '{not_valid[0]}' is "
                       f"not a valid/ metric (valid/bleu, valid/chrf, valid/cxmi, valid/random_ctx/...)",
                       "metrics")
    curve = parse_curve(data["curve"], metrics, [r.name for r in rows], fail) if "curve" in data else None
    changes = parse_changes(data["changes"], metrics, [r.name for r in rows], fail) if "changes" in data else ()
    return Table(file=file, id=table_id, title=data["title"], metrics=tuple(metrics),
                 base=tuple(base), rows=rows, seeds=seeds, notes=notes, baseline=baseline,
                 evaluate=evaluate, curve=curve, changes=changes)


def compose_row(table: Table | str | Path, row_name: str, profile: str | None = None,
                cli_overrides: Sequence[str] = (), *, seed: int | None = None) -> DictConfig:
    """The run config of one row: table `base:`, the row's `overrides:`, then the command line.

    `logging.group` is the table id and `logging.name` the row name (the command line can still
    change them); `logging.tags` gain [paper, table id, arch]; `seed` (from `--seeds`) sets
    `train.seed` last.
    """
    table = table if isinstance(table, Table) else load_table(table)
    row = table.row(row_name)
    line = table.file.line_of
    layers = override_layers(table.base, "table base override", path=table.path,
                             lines=[line(["base", i]) for i in range(len(table.base))])
    layers += override_layers(row.overrides, f"row '{row.name}' override", path=table.path,
                              lines=[line(["rows", row.index, "overrides", i])
                                     for i in range(len(row.overrides))])
    names = {"logging": {"group": table.id, "name": row.name}}
    if table.evaluate == "valid_report":
        names["data"] = {"report_split": "valid"}
    layers.append(Layer(source=f"table '{table.id}'", values=OmegaConf.create(names)))
    layers += override_layers(cli_overrides, "command line override")
    if seed is not None:
        layers.append(Layer(source=f"seed {seed}", key="train.seed",
                            values=OmegaConf.create({"train": {"seed": seed}})))
    cfg = compose_layers(layers, profile=profile)
    contrastive_columns.with_suites(cfg, table.metrics)  # the suites of contrastive:<suite> columns
    cfg.logging.tags = list(dict.fromkeys([*cfg.logging.tags, table.paper, table.id,
                                           cfg.model.arch]))
    return cfg


def compose_file(path: str | Path, overrides: Sequence[str] = (), *, row: str | None = None,
                 profile: str | None = None, seed: int | None = None) -> DictConfig:
    """`docmt fit FILE [--row NAME] [--seed S] [--profile P]`: a table row or a plain run config."""
    file = YamlFile.load(path)
    if is_grid_file(file):
        raise DocMTInputError("a grid of table files (`parts:`): run it with `docmt table`, or one "
                              "row of a part with `docmt fit PART.yaml --row NAME`", path=path)
    if is_table_file(file):
        table = load_table(path)
        if row is None:
            raise DocMTInputError(f"a table file needs --row NAME; rows: "
                                  f"{', '.join(r.name for r in table.rows)}", path=path)
        return compose_row(table, row, profile, overrides, seed=seed)
    if row is not None:
        raise DocMTInputError("--row applies to table files only (this file has no 'rows:')",
                              path=path)
    seed_override = [f"train.seed={seed}"] if seed is not None else []
    return compose(path, [*overrides, *seed_override], profile=profile)


def _parse_row(raw: Any, index: int, metrics: list[str], file: YamlFile, fail) -> TableRow:
    if not isinstance(raw, dict):
        raise fail(f"rows[{index}] must be a mapping with 'name' and 'overrides'", "rows", index)
    name = raw.get("name")
    if not (isinstance(name, str) and SAFE_NAME.match(name)):
        raise fail(f"rows[{index}]: 'name' must be a name of letters, digits and _.+- , "
                   f"got {name!r}", "rows", index)
    label = f"row '{name}'"
    for key in raw:
        if key not in ROW_KEYS:
            raise fail(f"{label}: unknown key '{key}'{hint(key, ROW_KEYS)}", "rows", index, key)
    overrides = _string_list(raw.get("overrides", []))
    if overrides is None:
        raise fail(f"{label}: 'overrides' must be a list of key=value strings", "rows", index,
                   "overrides")
    override_layers(overrides, f"{label} override", path=file.path,
                    lines=[file.line_of(["rows", index, "overrides", i])
                           for i in range(len(overrides))])
    paper_raw = raw.get("paper") or {}
    if not isinstance(paper_raw, dict):
        raise fail(f"{label}: 'paper' must map metrics to numbers or null", "rows", index, "paper")
    paper: dict[str, float | None] = {metric: None for metric in metrics}
    for metric, value in paper_raw.items():
        if metric not in metrics:
            raise fail(f"{label}: paper number for '{metric}', which is not in the table's "
                       f"metrics{hint(metric, metrics)}", "rows", index, "paper", metric)
        if value is not None and not is_finite_number(value):
            raise fail(f"{label}: paper value of '{metric}' must be a number or null, got "
                       f"{value!r}", "rows", index, "paper", metric)
        paper[metric] = None if value is None else float(value)
    notes = raw.get("notes", "")
    if not isinstance(notes, str):
        raise fail(f"{label}: 'notes' must be a string", "rows", index, "notes")
    return TableRow(name=name, overrides=tuple(overrides), paper=paper, notes=notes, index=index)


def _string_list(value: Any) -> list[str] | None:
    """`value` if it is a list of strings, else None."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def hint(name: str, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(str(name), valid, n=1)
    return f" (did you mean '{close[0]}'?)" if close else f"; valid: {', '.join(valid)}"
