"""`docmt translate` on long and hostile input (docs/usage.md, "Translate input"): it translates a
chunk of sentences at a time and gives exactly what a translation of the whole input gives; it
cuts over-long sentences and says so in one line; control characters, empty lines and mixed line
ends give the documented output; bad bytes, bad JSON and lone surrogates are one error line with
exit status 2 naming the file and line; and nothing is ever half-written.

Random `tiny` models over a word vocabulary (`benchmarks/translate_memory.write_checkpoint`): what
is tested does not depend on the weights. Peak memory is measured in `tests/benchmarks/test_translate_memory.py`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from lightning_docmt.data.types import Document
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference import decoding
from lightning_docmt.inference.documents_io import InputReader, Sentence, clean, raw_lines
from lightning_docmt.inference.loaded_model import load_checkpoint
from lightning_docmt.inference.translate import (
    chunks,
    explain_selection,
    no_feature_cache,
    translate_documents,
    translate_file,
)
from lightning_docmt.nn.frozen import FrozenRowEncoder
from tests.benchmarks.benchmark_scripts import load_benchmark
from tests.helpers.cli_run import docmt

BENCH = load_benchmark("translate_memory")
WORDS = BENCH.WORDS[:40]
# the document-order rows read what came before across a chunk's start (carried state, own
# translations), the others their neighbours on both sides
CHUNKED_ARCHS = {"concat": BENCH.ARCHS["concat"], "flat": BENCH.ARCHS["flat"],
                 "zhang_doc": BENCH.ARCHS["zhang_doc"], "yk_rnn_shared": BENCH.ARCHS["yk_rnn_shared"],
                 "yk_rnn_target": BENCH.ARCHS["yk_rnn_target"]}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def checkpoint(tmp_path: Path, name: str, *overrides: str) -> Path:
    return BENCH.write_checkpoint(tmp_path / f"{name}.ckpt", list(overrides), words=WORDS)


@pytest.fixture(scope="module")
def transformer(tmp_path_factory) -> Path:
    return checkpoint(tmp_path_factory.mktemp("transformer"), "transformer")


def random_documents(lengths: list[int], seed: int = 0) -> list[Document]:
    rng = random.Random(seed)
    return [Document(f"d{d}", [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) for _ in range(n)],
                     [""] * n) for d, n in enumerate(lengths)]


# ------------------------------------------------------------------------------------- chunks

def test_chunks_hold_their_sentences_once_and_the_neighbours_their_context_reads():
    sentences = [Sentence(f"s{d}.{j}", d, f"d{d}", j, 0) for d, n in enumerate([5, 1, 4]) for j in range(n)]
    items = [*sentences[:5], "\n", sentences[5], "\n", *sentences[6:]]
    pieces = list(chunks(items, size=2, reach=(2, 1)))
    assert [x for p in pieces for x in p.items] == items  # every item once, in order
    assert all(len(p.sentences) <= 2 for p in pieces)
    for p in pieces:
        first, last = p.sentences[0], p.sentences[-1]
        assert [(s.doc, s.position) for s in p.before] == [
            (first.doc, j) for j in range(max(0, first.position - 2), first.position)]
        assert all(s.doc == last.doc for s in p.after) and [s.position for s in p.after] == [
            j for j in range(last.position + 1, last.position + 2) if (last.doc, j) in
            {(s.doc, s.position) for s in sentences}]


@pytest.mark.parametrize("arch", CHUNKED_ARCHS)
def test_translating_a_chunk_at_a_time_gives_the_translation_of_the_whole(tmp_path, arch):
    """Chunks of 1, 2 and 3 sentences cut documents anywhere; each chunk reads the context of its
    first and last sentences, and a document-order model goes on with the translations and state
    the chunk before handed on: the translations are those of the whole input at once."""
    model = load_checkpoint(checkpoint(tmp_path, arch, *CHUNKED_ARCHS[arch]))
    documents = random_documents([5, 1, 4, 2])
    whole = translate_documents(model, documents, beam=2, len_penalty=0.6)
    assert [len(t) for t in whole] == [5, 1, 4, 2]
    for size in (1, 2, 3):
        assert translate_documents(model, documents, beam=2, len_penalty=0.6, chunk_sentences=size) == whole


def test_explaining_the_selection_a_chunk_at_a_time_explains_the_whole(tmp_path):
    model = load_checkpoint(checkpoint(tmp_path, "lifeng_coattn", *BENCH.ARCHS["lifeng_coattn"]))
    documents = random_documents([4, 1, 3])
    whole = explain_selection(model, documents)
    assert [(line["doc_id"], line["sentence"]) for line in whole] == [
        (d.doc_id, j) for d in documents for j in range(len(d.src))]
    assert whole[2]["context"] == documents[0].src[:2]
    assert explain_selection(model, documents, chunk_sentences=1) == whole


# ------------------------------------------------------------------------------- input rules

def test_line_ends_may_be_mixed_and_are_split_across_read_blocks(monkeypatch, tmp_path):
    import lightning_docmt.inference.documents_io as documents_io

    data = b"a\r\nb\rc\n\r\n\rd\r"
    expected = ["a", "b", "c", "", "", "d"]
    for block in (1, 2, 3, 64):
        monkeypatch.setattr(documents_io, "_BLOCK", block)
        path = tmp_path / "lines.txt"
        path.write_bytes(data)
        with open(path, "rb") as f:
            assert [line.decode() for line in raw_lines(f)] == expected, block


def test_control_characters_become_spaces_and_whitespace_one_space():
    assert clean("\x00a\x1b[0m  b\x7f\x85c\t d ") == ("a [0m b c d", True)
    assert clean(" a\u2028b ") == ("a b", False)
    assert clean("\x0c") == ("", True)


def test_plain_text_output_aligns_with_the_input_line_for_line(tmp_path, transformer):
    """\\r\\n, \\r and \\n end lines; empty (or blank, or control-only) lines stay empty output
    lines and end documents; control characters are spaces, counted once per line."""
    source = tmp_path / "docs.txt"
    source.write_bytes(b"\xef\xbb\xbfw1 w2\r\nw3\rw4  w5\n\n\n\x00w6\x1b w7\r\n \t \n\x07\nw8")
    out = tmp_path / "out.txt"
    model = load_checkpoint(transformer)
    summary = translate_file(model, source, out, beam=2, len_penalty=0.6)
    lines = out.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 10 and lines[-1] == ""  # 9 input lines, each ending with \n
    assert [i for i, line in enumerate(lines[:-1]) if not line] == [3, 4, 6, 7]
    documents = [Document("doc1", ["w1 w2", "w3", "w4 w5"], [""] * 3), Document("doc2", ["w6 w7"], [""]),
                 Document("doc3", ["w8"], [""])]
    expected = translate_documents(model, documents, beam=2, len_penalty=0.6)
    assert [lines[i] for i in (0, 1, 2, 5, 8)] == [h for doc in expected for h in doc]
    assert (summary.sentences, summary.documents, summary.truncated) == (5, 3, 0)
    assert (summary.control_lines, summary.first_control) == (2, f"{source}:6")
    assert summary.report_lines() == [
        f"translate: 2 lines held control characters, replaced by spaces (first: {source}:6)"]


def test_jsonl_keeps_empty_sentences_empty_and_out_of_the_document(tmp_path, transformer):
    source = tmp_path / "docs.jsonl"
    source.write_text(json.dumps({"doc_id": "a", "src": ["w1 w2", "", "w3\nw4", " \x00 "]}) + "\n\n"
                      + json.dumps({"src": ["w5"], "other": 1}) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    model = load_checkpoint(transformer)
    summary = translate_file(model, source, out, beam=2, len_penalty=0.6)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    expected = translate_documents(model, [Document("a", ["w1 w2", "w3 w4"], ["", ""]),
                                           Document("doc3", ["w5"], [""])], beam=2, len_penalty=0.6)
    assert rows == [{"doc_id": "a", "hyp": [expected[0][0], "", expected[0][1], ""]},
                    {"doc_id": "doc3", "hyp": expected[1]}]
    assert (summary.sentences, summary.documents, summary.control_lines) == (3, 2, 1)


def test_over_long_sentences_are_cut_to_the_positional_table_counted_and_reported(tmp_path, transformer):
    """The tiny profile's table has 256 positions: 255 subwords and the `<eos>`."""
    model = load_checkpoint(transformer)
    assert model.cfg.model.max_positions == 256
    long = " ".join(WORDS[i % len(WORDS)] for i in range(300))
    source = tmp_path / "docs.txt"
    source.write_text(f"w1\n{long}\nw2 w3\n\n{long} w9\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    summary = translate_file(model, source, out, beam=2, len_penalty=0.6)
    assert (summary.limit, summary.truncated, summary.first_truncated) == (255, 2, f"{source}:2")
    assert summary.report_lines() == [f"translate: 2 sentences longer than 255 tokens were truncated "
                                      f"to their first 255 (first: {source}:2)"]
    cut = " ".join(long.split()[:255])
    expected = translate_documents(model, [Document("doc1", ["w1", cut, "w2 w3"], [""] * 3),
                                           Document("doc2", [cut], [""])], beam=2, len_penalty=0.6)
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == [*expected[0], "", *expected[1]]


@pytest.mark.parametrize("name, data, needle", [
    ("bad.txt", b"w1\nw2 \xff w3\n", ":2: undecodable bytes at column 4 (not UTF-8)"),
    ("bad.txt", b"w1\r\xc3\n", ":2: undecodable bytes at column 1 (not UTF-8)"),
    ("bad.jsonl", b'{"src": ["w1"]}\n{"src": ["w1"\n', ":2: invalid JSON"),
    ("bad.jsonl", b'{"src": []}\n', ":1: expected"),
    ("bad.jsonl", b'{"src": ["w1"]}\n{"src": ["w1 \\ud800"]}\n', ":2: a lone surrogate \\ud800"),
    ("bad.jsonl", b'\xef\xbb\xbf{"src": ["w1"]}\n["w2"]\n', ":2: expected"),
    ("empty.txt", b"\n \r\n\x00\n", ": no sentences to translate"),
])
def test_bad_input_is_one_error_line_with_exit_2_and_no_output(tmp_path, transformer, name, data, needle):
    source = tmp_path / name
    source.write_bytes(data)
    out = tmp_path / "out.txt"
    outcome = docmt("translate", "--ckpt", transformer, "--input", source, "--output", out)
    assert outcome.code == 2, outcome.err
    assert len(outcome.err.strip().splitlines()) == 1 and f"{source}{needle}" in outcome.err
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no output, no temporary file


def test_an_output_folder_that_is_not_there_is_one_error_line(tmp_path, transformer):
    source = tmp_path / "docs.txt"
    source.write_text("w1\n", encoding="utf-8")
    outcome = docmt("translate", "--ckpt", transformer, "--input", source, "--output", tmp_path / "no" / "out.txt")
    assert outcome.code == 2 and len(outcome.err.strip().splitlines()) == 1, outcome.err
    assert f"{tmp_path / 'no'}: key '--output': no such directory" in outcome.err


def test_the_cli_reports_cut_sentences_on_stderr_and_translates_the_rest(tmp_path, transformer):
    source = tmp_path / "docs.txt"
    source.write_text("w1 w2\n" + " ".join(["w3"] * 400) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    outcome = docmt("translate", "--ckpt", transformer, "--input", source, "--output", out)
    assert outcome.code == 0, outcome.err
    assert outcome.err.strip().splitlines() == [
        f"translate: 1 sentence longer than 255 tokens was truncated to its first 255 (first: {source}:2)"]
    assert outcome.out.strip().splitlines()[-1] == f"translated 2 sentences in 1 documents -> {out}"
    assert len(out.read_text(encoding="utf-8").split("\n")) == 3


def test_a_failure_mid_stream_leaves_the_previous_output_untouched(tmp_path, transformer, monkeypatch):
    """The translations of the first chunk were written (to the temporary file) before the second
    chunk failed: the output is the old file, and the temporary file is gone."""
    source = tmp_path / "docs.txt"
    source.write_text("".join(f"w{i}\n" for i in range(6)), encoding="utf-8")
    out = tmp_path / "out.txt"
    out.write_text("previous\n")
    decode, calls = decoding.best_tokens, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise DocMTInputError("stop here")
        return decode(*args, **kwargs)

    monkeypatch.setattr(decoding, "best_tokens", failing)
    with pytest.raises(DocMTInputError, match="stop here"):
        translate_file(load_checkpoint(transformer), source, out, beam=2, len_penalty=0.6, chunk_sentences=2)
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.txt", "out.txt"]


def test_a_bad_line_late_in_the_input_is_found_before_anything_is_translated(tmp_path, transformer, monkeypatch):
    source = tmp_path / "docs.txt"
    source.write_bytes(b"w1\n" * 50 + b"\xfe\n")
    monkeypatch.setattr(decoding, "best_tokens", lambda *a, **k: pytest.fail("translated"))
    with pytest.raises(DocMTInputError, match=f"{source}:51: undecodable"):
        translate_file(load_checkpoint(transformer), source, tmp_path / "out.txt", beam=2, len_penalty=0.6)


def test_the_reader_holds_one_line_at_a_time(tmp_path):
    source = tmp_path / "docs.txt"
    source.write_text("w1\n\nw2\nw3\n", encoding="utf-8")
    reader = InputReader(source)
    items = reader.items()
    first = next(items)
    assert isinstance(first, Sentence) and (first.text, first.doc, first.line) == ("w1", 0, 1)
    assert reader.sentences == 1  # nothing read beyond the first line's item
    rest = list(items)
    assert rest[0] == "\n" and [(s.doc, s.position, s.line) for s in rest[1:]] == [(1, 0, 3), (1, 1, 4)]


def test_frozen_encoders_keep_no_features_while_translating():
    class Rows(torch.nn.Module):
        def forward(self, tokens, types, pad):
            return tokens[..., None].float().repeat(1, 1, 4)

    encoder = FrozenRowEncoder(Rows())
    network = torch.nn.ModuleDict({"encoder": encoder})
    rows = torch.tensor([[5, 6], [7, 0]])
    with no_feature_cache(network):
        encoder(rows, torch.zeros_like(rows), rows.eq(0))
        assert encoder.features == {} and encoder.cached_bytes == 0
    assert encoder.max_bytes > 0
    encoder(rows, torch.zeros_like(rows), rows.eq(0))
    assert len(encoder.features) == 2


def test_recurrent_layers_translate_with_the_native_kernels_and_stderr_stays_quiet(tmp_path, monkeypatch):
    """oneDNN's RNN primitives grew the process with every new batch shape (`translate.py`,
    `native_recurrent_kernels`): a recurrent model translates without them, and the flag is back after."""
    ckpt = checkpoint(tmp_path, "yk_rnn", *BENCH.ARCHS["yk_rnn"])
    source = tmp_path / "docs.txt"
    source.write_text("w1 w2\nw3\n\nw4\n", encoding="utf-8")
    seen, decode = [], decoding.best_tokens
    monkeypatch.setattr(decoding, "best_tokens",
                        lambda *a, **k: seen.append(torch.backends.mkldnn.enabled) or decode(*a, **k))
    assert torch.backends.mkldnn.enabled
    outcome = docmt("translate", "--ckpt", ckpt, "--input", source, "--output", tmp_path / "out.txt")
    assert outcome.code == 0 and outcome.err == "", outcome.err
    assert seen and not any(seen) and torch.backends.mkldnn.enabled
