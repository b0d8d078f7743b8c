"""`config/yaml_file.YamlFile`: a YAML mapping with the line of every key; files are parsed once per
text, and every load hands out its own mapping."""

from __future__ import annotations

import pytest

from lightning_docmt.config.yaml_file import YamlFile
from lightning_docmt.errors import DocMTInputError


def test_a_file_loaded_twice_gives_equal_mappings_that_are_not_shared(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  d_model: 64\ntrain:\n  lr: 1e-3\n")
    first, second = YamlFile.load(path), YamlFile.load(path)
    assert first.data == second.data and second.data.train.lr == 0.001
    first.data.model.d_model = 128  # a caller that changes its mapping changes no one else's
    assert second.data.model.d_model == 64 and YamlFile.load(path).data.model.d_model == 64
    assert second.line_of(["train", "lr"]) == 4


def test_a_changed_file_is_read_again(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("lr: 1\n")
    assert YamlFile.load(path).data.lr == 1
    path.write_text("lr: 2\n")  # same size, possibly the same modification time
    assert YamlFile.load(path).data.lr == 2


@pytest.mark.parametrize("text, message", [("a: [1\n", "invalid YAML"), ("- a\n", "must be a mapping"),
                                           ("a: 1\na: 2\n", "invalid YAML")])
def test_a_bad_file_is_an_error_every_time_it_is_loaded(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    for _ in range(2):
        with pytest.raises(DocMTInputError, match=message):
            YamlFile.load(path)
