"""Summarise the runs of a table and write it: Markdown, CSV (docs/design.md section 10); the
figures are drawn by figures.py, the table-level wandb run is dashboard.py's.

For every row and metric: our mean and sample standard deviation over the finished seeds, the
values per seed, the change against the baseline row (tables/effects.py), the paper's number and
its change against its baseline row. Our absolute numbers are never set against the paper's: the
corpora differ. Failed runs are listed with their error and log file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from lightning_docmt.atomic_files import write_csv_atomically, write_text_atomically
from lightning_docmt.provenance import ENV_PREFIX
from lightning_docmt.tables import contrastive_columns
from lightning_docmt.tables.effects import DIAGNOSTIC_MEANINGS, Effect, bare, metric_panel, seed_values
from lightning_docmt.tables.spec import Table
from lightning_docmt.tables.summaries import FAILED, MetricSummary, RowSummary, RunRecord

# Per row: (mark, p-values per seed) of its test BLEU against the table's baseline row
# (tables/row_significance.py); rows without a test are absent.
Significance = Mapping[str, tuple[str, Sequence[float]]]


def marked_metric(table: Table) -> str:
    """The column the significance marks go in: the BLEU of the split the table reports on."""
    return "valid/bleu" if table.evaluate == "valid_report" else "test/bleu"


def write_markdown(table: Table, summaries: Sequence[RowSummary], path: Path,
                   *, context: str = "", significance: Significance | None = None,
                   changes: Sequence[str] = ()) -> Path:
    """The table as Markdown: per metric our mean ± sd (n), and, where they mean something, the
    change against the baseline row (seed by seed, tables/effects.py) and the paper's number and
    change; rows not run are named in one line; per-seed values and p-values of the marked metric;
    then `changes`, the lines of the changes between rows (tables/change_results.py)."""
    significance = significance or {}
    marked = marked_metric(table)
    shown = [s for s in summaries if s.ran]
    panels = {metric: metric_panel(shown, metric, table.baseline) for metric in table.metrics}
    with_paper = {metric for metric in table.metrics if any(s.metrics[metric].paper is not None for s in summaries)}
    header = ["Row"]
    for metric in table.metrics:
        header.append(metric)
        header += ["Δ base"] if panels[metric].against else []
        if metric in with_paper:
            header += ["paper"] + (["paper Δ"] if panels[metric].against else [])
    header.append("Status")
    explained = (f" Δ base: the row minus the baseline row `{table.baseline}`, seed by seed (mean ± sd "
                 f"over the seeds both finished); paper Δ: the same in the paper. ↑/↓: {marked} "
                 "significantly better/worse than the baseline row (paired bootstrap, p < 0.05) in "
                 "every seed." if table.baseline else "")
    lines = [f"# {table.title}", "",
             f"Table `{table.id}` (`{table.path}`). Ours: mean ± sample standard deviation over the "
             "finished seeds (n)." + explained + (f" {context}" if context else ""),
             "", "| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + ["---"]) + "|"]
    for summary in shown:
        cells = [summary.row.name]
        for metric in table.metrics:
            m, digits, column = summary.metrics[metric], decimals(metric), panels[metric]
            mark = significance.get(summary.row.name, ("", ()))[0] if metric == marked else ""
            cells.append(ours_cell(m, digits) + (f" {mark}" if mark else ""))
            effect = column.effect_of(summary.row.name)
            if column.against:
                cells.append(change_cell(effect, digits, baseline=summary.row.name == table.baseline))
            if metric in with_paper:
                cells.append(number_cell(m.paper, digits))
                if column.against:
                    paper_change = effect.paper if effect is not None else None
                    cells.append("—" if summary.row.name == table.baseline
                                 else number_cell(paper_change, digits, signed=True))
        cells.append(summary.status)
        lines.append("| " + " | ".join(cells) + " |")
    not_run = [s.row.name for s in summaries if not s.ran]
    if not_run:
        lines += ["", "Not run: " + ", ".join(f"`{name}`" for name in not_run) + "."]
    lines += per_seed_section(shown, marked if marked in table.metrics else table.metrics[0], significance,
                              tested=table.baseline is not None)
    lines += changes
    failures = [r for s in summaries for r in s.records if r.status == FAILED]
    if failures:
        lines += ["", "Failed runs:", ""]
        lines += [f"- `{r.row}` {failed_run(r)}" for r in failures]
    signatures = sorted({f"{key}: {value}" for s in summaries for r in s.records
                         for key, value in r.metrics.items()
                         if isinstance(value, str) and key.endswith("signature")})
    if signatures:
        lines += ["", "Signatures:", ""] + [f"- `{s}`" for s in signatures]
    provenance = run_provenance([r for s in summaries for r in s.records if r.succeeded])
    if provenance:
        lines += ["", "Runs (numbers from different precisions or code are not bit-comparable):", ""]
        lines += provenance
    lines += context_columns_legend(table.metrics)
    rates = contrastive_columns.footnote(table.metrics, [r.metrics for s in summaries for r in s.records])
    if rates:
        lines += ["", "Contrastive suites (accuracies are fractions):", ""] + rates
    notes = [f"- `{s.row.name}`: {s.row.notes}" for s in summaries if s.row.notes]
    if table.notes or notes:
        lines += ["", "Notes:", ""] + ([table.notes.strip(), ""] if table.notes else []) + notes
    write_text_atomically(path, "\n".join(lines) + "\n")
    return path


def failed_run(record: RunRecord) -> str:
    """`seed 2: <error> (log: <path>)`; a row whose config does not compose has neither seed nor log."""
    seed = f"seed {record.seed}: " if record.seed is not None else "(every seed): "
    return seed + f"{record.error}" + (f" (log: `{record.log_path}`)" if record.log_path else "")


def change_cell(effect: Effect | None, digits: int, *, baseline: bool) -> str:
    """`+0.05 ± 0.10`: an effect's mean and sd; `—` on the baseline row itself."""
    if baseline:
        return "—"
    if effect is None:
        return "n/a"
    spread = f" ± {effect.sd:.{digits}f}" if effect.sd is not None else ""
    return f"{effect.mean:+.{digits}f}{spread}"


def per_seed_section(summaries: Sequence[RowSummary], metric: str, significance: Significance, *,
                     tested: bool) -> list[str]:
    """A Markdown table of `metric` per seed; with `tested` (a baseline row), each seed's p-value
    against the baseline."""
    seeds = sorted({r.seed for s in summaries for r in s.records if r.succeeded})
    if not seeds:
        return []
    digits = decimals(metric)
    explained = " (p: paired bootstrap against the baseline row, seed by seed)" if tested else ""
    lines = ["", f"{metric} per seed{explained}:", "",
             "| Row | " + " | ".join(f"seed {seed}" for seed in seeds) + (" | p |" if tested else " |"),
             "|---|" + "---:|" * (len(seeds) + tested)]
    for summary in summaries:
        values = seed_values(summary, metric)
        cells = [number_cell(values[seed], digits) if seed in values else "n/a" for seed in seeds]
        if tested:
            cells.append(", ".join(f"{p:.3f}" for p in significance.get(summary.row.name, ("", ()))[1]) or "—")
        lines.append(f"| {summary.row.name} | " + " | ".join(cells) + " |")
    return lines


def context_columns_legend(metrics: Sequence[str]) -> list[str]:
    """A report's paragraph on what each context-usage column among `metrics` measures
    (evaluation/context_usage.py; a stack's branches alone: branch_usage.py), as a test table names
    them (`cxmi`) or a table that reports on the valid split does (`valid/cxmi`); none when no such
    column is shown."""
    shown = [m for m in metrics if bare(m) in DIAGNOSTIC_MEANINGS]
    split = "valid" if any(m.startswith("valid/") for m in shown) else "test"
    meanings = [f"- `{m}`: {DIAGNOSTIC_MEANINGS[bare(m)]}" for m in shown]
    return ["", f"Context columns (on the {split} split):", "", *meanings] if meanings else []


# What a finished run records of where it ran (lightning_docmt/provenance.py) that can change its
# last digits: a table filled on several machines (e.g. from the archive, runner.py) says so. The CPU's
# name is added where a run recorded it (runs from before it was recorded do not say).
PROVENANCE_KEYS = ("precision", "device", "torch", "code")
RECORDED_ONLY_KEYS = ("cpu",)


def run_provenance(records: Sequence[RunRecord]) -> list[str]:
    """One Markdown item per distinct setting of PROVENANCE_KEYS among `records` that recorded
    any, with its runs."""
    groups: dict[str, list[str]] = {}
    for r in records:
        if not any(key.startswith(ENV_PREFIX) for key in r.metrics):
            continue
        setting = ", ".join([f"{key} {r.metrics.get(ENV_PREFIX + key, '?')}" for key in PROVENANCE_KEYS]
                            + [f"{key} {r.metrics[ENV_PREFIX + key]}" for key in RECORDED_ONLY_KEYS
                               if ENV_PREFIX + key in r.metrics])
        groups.setdefault(setting, []).append(f"{r.row}/seed{r.seed}")
    return [f"- {setting}: {len(runs)} run{'s' if len(runs) > 1 else ''} ({', '.join(runs)})"
            for setting, runs in sorted(groups.items())]


def write_csv(table: Table, summaries: Sequence[RowSummary], path: Path, *,
              significance: Significance | None = None) -> Path:
    """One line per row and metric: n, mean, sd, the values per seed (`seed:value`, `;`-separated),
    the change against the baseline row (`delta_base`, seed by seed, and its sd), the paper's
    number and change against its baseline row (`paper_delta_base`); `p_values` (per seed) and
    `mark` against the baseline row on the marked metric's lines of the rows that were tested."""
    significance = significance or {}
    marked = marked_metric(table)
    panels = {metric: metric_panel(summaries, metric, table.baseline) for metric in table.metrics}
    rows: list[list] = [["row", "metric", "n", "mean", "std", "values", "delta_base", "delta_base_std",
                         "paper", "paper_delta_base", "status", "p_values", "mark"]]
    for summary in summaries:
        for metric in table.metrics:
            m = summary.metrics[metric]
            effect = panels[metric].effect_of(summary.row.name)
            changed = effect is not None and panels[metric].against is not None
            mark, p_values = (significance.get(summary.row.name, ("", ()))
                              if metric == marked else ("", ()))
            values = ";".join(f"{seed}:{value!r}" for seed, value in seed_values(summary, metric).items())
            rows.append([summary.row.name, metric, m.n, raw_cell(m.mean), raw_cell(m.std), values,
                         raw_cell(effect.mean if changed else None),
                         raw_cell(effect.sd if changed else None), raw_cell(m.paper),
                         raw_cell(effect.paper if changed else None), summary.status,
                         ";".join(repr(p) for p in p_values), mark])
    write_csv_atomically(path, rows)
    return path


def decimals(metric: str) -> int:
    """Digits shown for `metric`: CXMI is in nats per token, typically 1e-4 to 1e-1 (a context-blind
    model's is exactly 0), so two decimals would print every small value as 0.00; scores get two."""
    return 4 if "cxmi" in metric else 2


def ours_cell(m: MetricSummary, digits: int) -> str:
    if m.mean is None:
        return "n/a"
    spread = f" ± {m.std:.{digits}f}" if m.std is not None else ""
    return f"{m.mean:.{digits}f}{spread} (n={m.n})"


def number_cell(value: float | None, digits: int, *, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def raw_cell(value: float | None) -> str:
    return "" if value is None else repr(value)
