"""The figures of a table report (docs/design.md section 10), drawn with matplotlib's Agg canvas.

- `table.png` (`write_effects_chart`): one panel per metric with finished runs (tables/effects.py):
  for a score, each row's change against the baseline row; otherwise the row's value. Ours is a bar
  (mean over seeds) with a ±1 sample sd whisker and a dot per seed, the significance mark of the
  marked metric (↑/↓, tables/row_significance.py) above it; the paper's, hatched, beside it where
  the paper gives it. Rows not run are left out and named under the figure.
- `curves.png` (`write_learning_curves`, tables/learning_curves.py): the validation metric and the
  training loss of every finished run against its updates, the stages of a run one after another.
- `grid.png` (`write_grid_chart`): a grid's panels, one per metric, its parts side by side.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from lightning_docmt.atomic_files import save_figure_atomically
from lightning_docmt.tables.effects import Panel, metric_label, metric_panel
from lightning_docmt.tables.learning_curves import RunCurve, learning_curves
from lightning_docmt.tables.report import marked_metric
from lightning_docmt.tables.spec import Table
from lightning_docmt.tables.summaries import RowSummary

SEED_DOT = dict(s=14, color="black", zorder=3)
LEGEND = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def write_table_figures(table: Table, summaries: Sequence[RowSummary], marks: Mapping[str, str],
                        out_dir: Path) -> dict[str, Path]:
    """`table.png` and `curves.png` of a table in `out_dir`; `marks`: row -> significance mark."""
    shown = [s for s in summaries if s.ran]
    panels = [metric_panel(shown, metric, table.baseline) for metric in table.metrics]
    not_run = [s.row.name for s in summaries if not s.ran]
    curves = learning_curves([r for s in shown for r in s.records])
    return {"png": write_effects_chart(table.title, panels, not_run, out_dir / "table.png", marks=marks,
                                       marked_metric=marked_metric(table)),
            "curves_png": write_learning_curves(table.title, curves, out_dir / "curves.png")}


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def draw_panel(ax, panel: Panel, marks: Mapping[str, str], *, x_offset: float = 0.0,
               group_width: float = 0.8, color: str = "C0", label_ours: str = "ours: mean ± sd") -> list[float]:
    """Draw `panel`'s rows at x = x_offset + 0, 1, ...; returns the x of our bars."""
    paper = panel.has_paper
    width = group_width / (2 if paper else 1)
    x = x_offset + np.arange(len(panel.effects))
    ours_x = x - width / 2 if paper else x
    ax.bar(ours_x, [e.mean for e in panel.effects], width, yerr=[e.sd or 0.0 for e in panel.effects],
           capsize=3, color=color, alpha=0.8, label=label_ours)
    for i, effect in enumerate(panel.effects):
        values = list(effect.seeds.values())
        jitter = np.linspace(-width / 6, width / 6, len(values)) if len(values) > 1 else [0.0]
        ax.scatter(ours_x[i] + np.asarray(jitter), values, label="a seed" if i == 0 else None, **SEED_DOT)
        mark = marks.get(effect.row, "")
        if mark:
            top = max(effect.mean + (effect.sd or 0.0), *values, 0.0)
            ax.annotate(mark, (ours_x[i], top), ha="center", va="bottom", fontsize=12)
    if paper:
        ax.bar(x + width / 2, [np.nan if e.paper is None else e.paper for e in panel.effects], width,
               fill=False, hatch="//", edgecolor="dimgray", label="paper")
    if panel.against is not None:
        ax.axhline(0.0, color="grey", linewidth=0.8)
    return list(ours_x)


def panel_title(panel: Panel) -> str:
    label = metric_label(panel.metric)
    return f"{label}: change against `{panel.against}`" if panel.against else label


def write_effects_chart(title: str, panels: Sequence[Panel], not_run: Sequence[str], path: Path, *,
                        marks: Mapping[str, str], marked_metric: str) -> Path:
    """`marks`: row -> its significance mark on `marked_metric`."""
    drawn = [p for p in panels if p.effects]
    rows = max((len(p.effects) for p in drawn), default=1)
    fig = _figure(max(6.0, 0.9 * rows + 4.0), 2.6 * max(len(drawn), 1) + 1.0)
    for k, panel in enumerate(drawn):
        ax = fig.add_subplot(len(drawn), 1, k + 1)
        draw_panel(ax, panel, marks if panel.metric == marked_metric else {})
        names = [e.row for e in panel.effects]
        ax.set_xticks(range(len(names)), labels=names, rotation=25 if len(names) > 4 else 0,
                      ha="right" if len(names) > 4 else "center", fontsize=8)
        ax.set_title(panel_title(panel), fontsize=9)
        ax.set_ylabel(("Δ " if panel.against else "") + metric_label(panel.metric), fontsize=8)
        ax.legend(**LEGEND)
    if not drawn:
        fig.text(0.5, 0.5, "no finished runs", ha="center")
    footer = "not run: " + ", ".join(not_run) if not_run else ""
    if any(p.metric == marked_metric for p in drawn) and any(marks.values()):
        footer += ("; " if footer else "") + "↑/↓: significantly better/worse than the baseline in every seed"
    _finish(fig, title, footer, path)
    return path


def write_learning_curves(title: str, curves: Sequence[RunCurve], path: Path) -> Path:
    """Two panels: the validation metric and the training loss against updates, a colour per row,
    a line per seed. A stage that several rows share (a reused sentence-level stage) is drawn once,
    in grey."""
    fig = _figure(9.0, 6.0)
    rows = list(dict.fromkeys(c.row for c in curves))
    colours = {row: f"C{i % 10}" for i, row in enumerate(rows)}
    rows_of_stage: dict[str, set[str]] = {}
    for curve in curves:
        for stage in curve.stages:
            rows_of_stage.setdefault(stage.key, set()).add(curve.row)
    metrics = sorted({c.valid_metric for c in curves if c.valid_metric})
    for k, (what, ylabel) in enumerate((("valid", " / ".join(metric_label(m) for m in metrics) or "validation"),
                                        ("train", "training loss (nats/token)"))):
        ax = fig.add_subplot(2, 1, k + 1)
        drawn: set[str] = set()
        for curve in curves:
            for stage in curve.stages:
                points = stage.valid if what == "valid" else stage.train
                shared = len(rows_of_stage[stage.key]) > 1
                if not points or (shared and stage.key in drawn):
                    continue
                label = "shared stage" if shared else curve.row
                steps, values = zip(*points)
                ax.plot(steps, values, color="grey" if shared else colours[curve.row], linewidth=1.0,
                        alpha=0.8, label=None if label in drawn else label)
                drawn |= {stage.key, label}
                if stage.start > 0:
                    ax.axvline(stage.start, color="grey", linestyle=":", linewidth=0.6)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_xlabel("updates (the stages of a run one after another; dotted: a stage begins)", fontsize=8)
        if drawn:
            ax.legend(**LEGEND)
    if not curves:
        fig.text(0.5, 0.5, "no stage logs found", ha="center")
    _finish(fig, f"{title}: learning curves", "", path)
    return path


def write_grid_chart(title: str, parts: Sequence[tuple[str, Sequence[Panel]]], columns: Sequence[str],
                     metrics: Sequence[str], path: Path, *, marks: Mapping[str, Mapping[str, str]],
                     marked_metric: str) -> Path:
    """One panel per metric; per part with finished runs (a group of bars, its name under it), its
    rows (`columns`, a colour each) as in `write_effects_chart`; `marks`: part -> row -> mark. Parts
    with no finished run are named under the figure."""
    drawn = [(name, panels) for name, panels in parts if any(p.effects for p in panels)]
    not_run = [name for name, panels in parts if not any(p.effects for p in panels)]
    colours = {row: f"C{i % 10}" for i, row in enumerate(columns)}
    width = 0.8 / max(len(columns), 1)
    fig = _figure(max(7.0, 1.2 * len(columns) * len(drawn) + 4.0), 2.8 * len(metrics) + 1.0)
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(len(metrics), 1, k + 1)
        labelled: set[str] = set()
        shown: Panel | None = None
        for g, (part, panels) in enumerate(drawn):
            panel = next(p for p in panels if p.metric == metric)
            shown = shown or panel
            for effect in panel.effects:
                offset = g + (columns.index(effect.row) - (len(columns) - 1) / 2) * width
                draw_panel(ax, Panel(metric, panel.against, (effect,)),
                           marks.get(part, {}) if metric == marked_metric else {}, x_offset=offset,
                           group_width=width, color=colours[effect.row],
                           label_ours=None if effect.row in labelled else effect.row)
                labelled.add(effect.row)
        ax.set_xticks(range(len(drawn)), labels=[name for name, _ in drawn], fontsize=8)
        ax.set_xlim(-0.5, len(drawn) - 0.5)  # every column's place, drawn or not
        if shown is not None:
            ax.set_title(panel_title(shown), fontsize=9)
            ax.set_ylabel(("Δ " if shown.against else "") + metric_label(metric), fontsize=8)
        handles, labels = ax.get_legend_handles_labels()
        unique = {label: handle for handle, label in zip(handles, labels)}
        if unique:
            ax.legend(unique.values(), unique.keys(), **LEGEND)
    footer = "no finished runs: " + ", ".join(not_run) if not_run else ""
    _finish(fig, title, footer, path)
    return path


def _finish(fig, title: str, footer: str, path: Path) -> None:
    lines = textwrap.wrap(title, 90)
    fig.suptitle("\n".join(lines), fontsize=10)
    if footer:
        fig.text(0.01, 0.005, "\n".join(textwrap.wrap(footer, 130)), fontsize=7, va="bottom")
    height = fig.get_figheight()  # inches: the title and the footer keep their own room
    fig.tight_layout(rect=(0, 0.3 / height if footer else 0, 1, 1 - (0.1 + 0.2 * len(lines)) / height))
    save_figure_atomically(fig, path, dpi=120)
