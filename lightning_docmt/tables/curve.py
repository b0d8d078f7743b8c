"""A table's curve (`curve:` in a table file): one metric against an x that each run reports, one
line per series of rows, the baseline row as a band, vertical marks (docs/design.md section 3).

    curve:
      metric: valid/bleu                 # y: one of the table's metrics
      x: data/train_pairs                # x: a key of every run's metrics.json, averaged over seeds
      x_label: sentence pairs the context stage trained on
      log_x: true                        # optional, default false
      baseline: transformer              # optional: a row drawn as its mean and +-1 sd band
      series:                            # a line per series, through its rows' points
        multi_context: [multi_context_12, multi_context_25, multi_context_50, multi_context]
      marks:                             # optional vertical lines, e.g. a paper's thresholds
        - {x: 300000, label: "paper: pretrained context beats the baseline"}

The points are written as `curve.csv` (series, row, x, mean, sd, seeds) beside `curve.png`, so
the figure's numbers can be read without it. Drawn from the finished runs only; a row with none is
left out of its line. Example: Donato et al. 2021's Figure 2 (experiments/donato2021/f2_data_scarcity.yaml).
"""

from __future__ import annotations

import statistics
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from lightning_docmt.atomic_files import save_figure_atomically, write_csv_atomically
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.tables.values import is_finite_number

CURVE_KEYS = ("metric", "x", "x_label", "log_x", "baseline", "series", "marks")


@dataclass(frozen=True)
class Mark:
    x: float
    label: str


@dataclass(frozen=True)
class Curve:
    metric: str
    x: str
    x_label: str
    series: dict[str, tuple[str, ...]]
    log_x: bool = False
    baseline: str | None = None
    marks: tuple[Mark, ...] = ()

    def labelled_rows(self) -> list[tuple[str, str]]:
        """(series, row) of every row the curve draws, the baseline first (series "baseline")."""
        drawn = [("baseline", self.baseline)] if self.baseline else []
        return drawn + [(name, row) for name, rows in self.series.items() for row in rows]


@dataclass(frozen=True)
class Point:
    series: str  # "baseline" for the baseline row
    row: str
    x: float
    mean: float
    sd: float | None  # sample sd over seeds; None below two
    seeds: int


def parse_curve(raw: Any, metrics: Sequence[str], rows: Sequence[str],
                fail: Callable[..., DocMTInputError]) -> Curve:
    """The `curve:` mapping of a table file, checked against its metrics and row names;
    `fail(message, *keys)` is the error at the line of `keys`."""
    if not isinstance(raw, dict):
        raise fail("'curve' must be a mapping with metric, x, x_label and series", "curve")
    for key in raw:
        if key not in CURVE_KEYS:
            raise fail(f"unknown curve key '{key}'; valid: {', '.join(CURVE_KEYS)}", "curve", key)
    for key in ("metric", "x", "x_label", "series"):
        if key not in raw:
            raise fail(f"missing curve key '{key}'", "curve")
    if raw["metric"] not in metrics:
        raise fail(f"curve metric '{raw['metric']}' is not one of the table's metrics", "curve", "metric")
    for key in ("x", "x_label"):
        if not (isinstance(raw[key], str) and raw[key]):
            raise fail(f"curve '{key}' must be a non-empty string", "curve", key)
    if not isinstance(raw.get("log_x", False), bool):
        raise fail("curve 'log_x' must be true or false", "curve", "log_x")
    baseline = raw.get("baseline")
    if baseline is not None and baseline not in rows:
        raise fail(f"curve baseline '{baseline}' is not a row", "curve", "baseline")
    series = raw["series"]
    if not (isinstance(series, dict) and series):
        raise fail("curve 'series' must map a name to a list of rows", "curve", "series")
    for name, members in series.items():
        if not (isinstance(members, list) and members and all(isinstance(m, str) for m in members)):
            raise fail(f"curve series '{name}' must be a non-empty list of rows", "curve", "series", name)
        unknown = [m for m in members if m not in rows]
        if unknown:
            raise fail(f"curve series '{name}': '{unknown[0]}' is not a row", "curve", "series", name)
    marks = []
    for index, mark in enumerate(raw.get("marks") or []):
        if not (isinstance(mark, dict) and set(mark) == {"x", "label"} and isinstance(mark["label"], str)
                and is_finite_number(mark["x"])):
            raise fail("a curve mark is {x: NUMBER, label: TEXT}", "curve", "marks", index)
        marks.append(Mark(float(mark["x"]), mark["label"]))
    return Curve(metric=raw["metric"], x=raw["x"], x_label=raw["x_label"],
                 series={name: tuple(members) for name, members in series.items()},
                 log_x=raw.get("log_x", False), baseline=baseline, marks=tuple(marks))


def curve_points(curve: Curve, finished: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Point]:
    """The points of `curve` from the metrics of each row's finished runs (`finished[row]`); a run
    without the x key or the metric does not count, a row with no counted run has no point."""
    points = []
    for series, row in curve.labelled_rows():
        runs = [m for m in finished.get(row, ())
                if is_finite_number(m.get(curve.x)) and is_finite_number(m.get(curve.metric))]
        if not runs:
            continue
        ys = [float(m[curve.metric]) for m in runs]
        points.append(Point(series, row, statistics.fmean(float(m[curve.x]) for m in runs), statistics.fmean(ys),
                            statistics.stdev(ys) if len(ys) >= 2 else None, len(runs)))
    return points


def write_curve_csv(points: Sequence[Point], path: Path) -> Path:
    rows: list[list] = [["series", "row", "x", "mean", "sd", "seeds"]]
    for p in points:
        rows.append([p.series, p.row, repr(p.x), repr(p.mean), "" if p.sd is None else repr(p.sd), p.seeds])
    write_csv_atomically(path, rows)
    return path


def write_curve_png(curve: Curve, points: Sequence[Point], title: str, path: Path) -> Path:
    """Each series a line through its points (mean, +-1 sd bars), the baseline a band, marks as
    dotted vertical lines; the x axis spans the points and the marks."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig = Figure(figsize=(7.5, 4.6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    if curve.log_x:
        ax.set_xscale("log")
    xs = [p.x for p in points] + [m.x for m in curve.marks]
    for series in curve.series:
        mine = sorted((p for p in points if p.series == series), key=lambda p: p.x)
        if mine:
            ax.errorbar([p.x for p in mine], [p.mean for p in mine], yerr=[p.sd or 0.0 for p in mine],
                        marker="o", capsize=3, label=series)
    base = next((p for p in points if p.series == "baseline"), None)
    if base is not None and xs:
        ax.axhline(base.mean, color="black", linewidth=1, label=f"{base.row} (baseline)")
        if base.sd:
            ax.axhspan(base.mean - base.sd, base.mean + base.sd, color="black", alpha=0.08)
    for mark in curve.marks:
        ax.axvline(mark.x, color="grey", linestyle=":", linewidth=1)
        ax.annotate("\n".join(textwrap.wrap(mark.label, 28)), (mark.x, 0.02), xycoords=("data", "axes fraction"),
                    rotation=90, fontsize=7, ha="right", va="bottom", color="dimgrey")
    if xs and curve.log_x:
        ax.set_xlim(min(xs) / 2, max(xs) * 2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(curve.x_label)
    ax.set_ylabel(curve.metric)
    if points:
        ax.legend(loc="upper left", fontsize=8, frameon=False)
    else:
        ax.text(0.5, 0.5, "no finished runs", transform=ax.transAxes, ha="center")
    fig.suptitle("\n".join(textwrap.wrap(title, 80)), fontsize=10)
    fig.tight_layout()
    save_figure_atomically(fig, path, dpi=120)
    return path
