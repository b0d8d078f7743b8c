"""`atomic_files.py`: a file is complete or absent, whatever fails while it is written."""

from __future__ import annotations

import csv

import matplotlib
import pytest

from lightning_docmt.atomic_files import save_figure_atomically, write_csv_atomically, write_text_atomically

matplotlib.use("Agg")


def test_a_csv_reads_back_row_for_row_and_a_failing_row_leaves_the_previous_file(tmp_path):
    path = tmp_path / "table.csv"
    write_csv_atomically(path, [["row", "value"], ["a, with comma", 1.5]])
    assert list(csv.reader(path.open(newline=""))) == [["row", "value"], ["a, with comma", "1.5"]]

    def rows():
        yield ["row", "value"]
        raise RuntimeError("the report failed mid-table")

    with pytest.raises(RuntimeError):
        write_csv_atomically(path, rows())
    assert list(csv.reader(path.open(newline="")))[1] == ["a, with comma", "1.5"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]  # no temporary file left


def test_a_figure_is_written_in_its_suffix_format_and_a_failed_save_keeps_the_old_one(tmp_path):
    from matplotlib import pyplot as plt

    path = tmp_path / "table.png"
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    save_figure_atomically(fig, path, dpi=50)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # PNG, though the temporary name ends in .tmp
    before = path.read_bytes()

    class Failing:
        def savefig(self, target, **kwargs):
            target.write_bytes(b"half a figure")
            raise OSError("No space left on device")

    with pytest.raises(OSError):
        save_figure_atomically(Failing(), path, dpi=50)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["table.png"]
    plt.close(fig)


def test_text_written_atomically_replaces_the_file_whole(tmp_path):
    path = tmp_path / "metrics.json"
    write_text_atomically(path, "{}\n")
    write_text_atomically(path, '{"test/bleu": 1.0}\n')
    assert path.read_text() == '{"test/bleu": 1.0}\n'
