"""The table-level wandb run of a table report (docs/design.md section 10): `<table id>/table` in
the table's group, beside its (row, seed) runs (`training/dashboard.py`), written under
`results/<table id>/wandb/`; every call guarded (`wandb_runs.py`).

It holds the report: `table` (a `wandb.Table` of the rows: per row and metric n, mean, sd, the
paper's number, status), a bar chart per metric, the PNG (`chart`), `table.md` and `table.csv` as
run files, and the tests against the baseline row: `significance` (a `wandb.Table`: row, seed, the
(row, seed) run's name, the marked metric, its change against the baseline in that seed, p-value,
the row's mark) and the summary keys `p_value/<row>/seed<S>` and `delta/<row>/seed<S>`. The
p-values live here rather than in the (row, seed) runs' summaries because they are known only
once the baseline's runs are, after those runs finished, and wandb cannot resume an offline run:
a second `wandb.init` with the run's id writes another offline run that `wandb sync` uploads over
the first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from lightning_docmt.tables.report import marked_metric
from lightning_docmt.tables.row_significance import RowSignificance
from lightning_docmt.tables.spec import Table
from lightning_docmt.tables.summaries import RowSummary
from lightning_docmt.wandb_runs import start_run

REPORT_FILES = ("md", "csv")  # the report's files saved to the run (`run_table`'s outputs)


def significance_rows(table: Table, tested: Mapping[str, RowSignificance]) -> list[list[Any]]:
    """`[row, seed, run name, metric, delta, p-value, mark]` per row tested and seed."""
    metric = marked_metric(table)
    return [[row, seed, f"{row}/seed{seed}", metric, delta, p_value, t.mark]
            for row, t in tested.items() for seed, delta, p_value in zip(t.seeds, t.deltas, t.p_values)]


def log_table_to_wandb(table: Table, summaries: Sequence[RowSummary], outputs: Mapping[str, Path],
                       tested: Mapping[str, RowSignificance], *, project: str, out_dir: Path) -> bool:
    """Log the report (`outputs`: the written files by kind, `run_table`'s) and the significance
    tests `tested` to a new table-level run. Returns whether everything was logged."""
    dashboard = start_run(project=project, group=table.id, name=f"{table.id}/table", job_type="table",
                          tags=list(dict.fromkeys([table.paper, table.id])), dir=str(out_dir),
                          config={"table": table.id, "title": table.title, "metrics": list(table.metrics),
                                  "baseline": table.baseline})
    if not dashboard.alive:
        return False
    import wandb

    run = dashboard.run

    def results_table() -> None:
        columns = ["row", "metric", "n", "ours", "std", "paper", "status"]
        data = [[s.row.name, metric, m.n, m.mean, m.std, m.paper, s.status]
                for s in summaries for metric, m in s.metrics.items()]
        run.log({"table": wandb.Table(columns=columns, data=data)})

    def significance() -> None:
        rows = significance_rows(table, tested)
        run.log({"significance": wandb.Table(
            columns=["row", "seed", "run", "metric", "delta", "p_value", "mark"], data=rows)})
        run.summary.update({f"{key}/{row}/seed{seed}": value for row, seed, _, _, delta, p_value, _ in rows
                            for key, value in (("p_value", p_value), ("delta", delta))})

    def bar_chart(metric: str) -> None:
        bars = [[f"{s.row.name} ({who})", value] for s in summaries
                for who, value in (("ours", s.metrics[metric].mean),
                                   ("paper", s.metrics[metric].paper)) if value is not None]
        run.log({f"chart/{metric}": wandb.plot.bar(
            wandb.Table(columns=["bar", metric], data=bars), "bar", metric,
            title=f"{table.id}: {metric}")})

    steps: list[tuple[str, Callable[[], Any]]] = [("table", results_table), ("significance", significance)]
    steps += [(f"bar chart {metric}", lambda metric=metric: bar_chart(metric)) for metric in table.metrics]
    if "png" in outputs:
        steps.append(("image", lambda: run.log({"chart": wandb.Image(str(outputs["png"]))})))
    steps += [(f"save {kind}", lambda kind=kind: run.save(str(outputs[kind]), base_path=str(out_dir),
                                                          policy="now"))
              for kind in REPORT_FILES if kind in outputs]
    logged = [dashboard.call(what, call) for what, call in steps]
    return dashboard.finish() and all(logged)
