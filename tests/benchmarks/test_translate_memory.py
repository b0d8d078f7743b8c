"""`docmt translate`'s peak memory is flat in the length of the document
(`benchmarks/translate_memory.py`: each translation in a fresh process, its VmHWM).

A 10,000-sentence input peaks within max(10%, 30 MiB) of a 1,000-sentence one, for the
Transformer and a previous-sentence context model (`concat`, one previous sentence) on ONE
document, and for a document-order model (`yk_rnn` shared, side mix, which carries its states
across every chunk boundary) on documents of 7 sentences: one document would take minutes (a batch
per sentence; `docs/benchmarks.md` has those figures), and documents of 7 fill the 128 rows of a
batch at both lengths, so that only the length differs. Greedy decoding of one token per sentence
and sentences of 2 to 6 words keep this under half a minute (28 s here), most of it six processes
importing torch.

Measured with these settings on the 2-core development machine (1 torch thread), peak RSS at
1,000 / 10,000 sentences: transformer 247.2 / 249.2 MiB, concat 249.3 / 250.6 MiB, yk_rnn_shared
255.3 / 261.3 MiB (another run: 248.0 / 250.6, 249.5 / 252.2, 260.4 / 264.1). The few MiB are the
first chunk filling up (2,048 sentences); beyond it the peak stays put (`docs/benchmarks.md`: the
same at 100,000 sentences, where the code before streaming grew by 38 MiB).
"""

from __future__ import annotations

import pytest

from tests.benchmarks.benchmark_scripts import load_benchmark

SIZES = [1000, 10000]
GREEDY = ("decode.beam=1", "decode.max_len_a=0", "decode.max_len_b=1")  # one output token per sentence
WORDS = (2, 6)


def margin(peak_mib: float) -> float:
    return max(0.10 * peak_mib, 30.0)


@pytest.mark.subprocess
def test_peak_memory_of_a_translation_is_flat_in_the_length_of_the_document(tmp_path):
    bench = load_benchmark("translate_memory")
    reports = [bench.measure(["transformer", "concat"], SIZES, 1, tmp_path, words=WORDS,
                             overrides=(*GREEDY, "context.prev_sentences=1")),
               bench.measure(["yk_rnn_shared"], SIZES, 1, tmp_path, per_document=7, words=WORDS, overrides=GREEDY)]
    rows = {arch: row for report in reports for arch, row in report["rows"].items()}
    assert list(rows) == ["transformer", "concat", "yk_rnn_shared"]
    for arch, row in rows.items():
        small, large = row["1000"]["peak_rss_mib"], row["10000"]["peak_rss_mib"]
        assert row["1000"]["code"] == row["10000"]["code"] == 0
        assert large - small <= margin(small), (arch, small, large)
        assert row["growth_mib"] == round(large - small, 1)
