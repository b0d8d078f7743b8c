"""The layout of a named external stream's row (`data/streams.py`, Donato et al. 2021)."""

from __future__ import annotations

import pytest

from lightning_docmt.data.streams import StreamLayout
from lightning_docmt.errors import DocMTInputError

CLS, SEP, EOS, PSEP = 101, 102, 103, 104
P3, P2, P1 = [31, 32], [21], [11, 12, 13]  # oldest first
C = [1, 2, 3]
N1, N2 = [41], [51, 52]  # nearest first


def bert(prev=0, current=True, nxt=0, max_tokens=64) -> StreamLayout:
    return StreamLayout(prev=prev, current=current, next=nxt, format="pair", max_tokens=max_tokens,
                        eos_id=SEP, sep_id=SEP, bos_id=CLS)


def pegasus(prev=3, current=True, nxt=3, max_tokens=64, sep_id=PSEP) -> StreamLayout:
    return StreamLayout(prev=prev, current=current, next=nxt, format="concat", max_tokens=max_tokens,
                        eos_id=EOS, sep_id=sep_id)


def test_bert_pairs_put_the_first_group_in_segment_a_and_the_second_in_b():
    assert bert(prev=1).row(C, [P1]) == ([CLS, *P1, SEP, *C, SEP], [0] * 5 + [1] * 4)  # B_s(p,c)
    assert bert(nxt=1).row(C, [], [N1]) == ([CLS, *C, SEP, *N1, SEP], [0] * 5 + [1] * 2)  # B_s(c,n)
    assert bert().row(C, [P1], [N1]) == ([CLS, *C, SEP], [0] * 5)  # B_s(c): the neighbours unread
    assert bert(prev=2).row(C, [P3, P2, P1])[0] == [CLS, *P2, *P1, SEP, *C, SEP]  # the 2 nearest, concatenated
    assert bert(prev=1, current=False, nxt=1).row(C, [P1], [N1])[0] == [CLS, *P1, SEP, *N1, SEP]


def test_at_a_documents_edge_the_current_sentence_keeps_its_segment():
    ids, types = bert(prev=1).row(C)  # the document's first sentence
    assert ids == [CLS, SEP, *C, SEP] and types == [0, 0, 1, 1, 1, 1]
    assert bert(nxt=1).row(C)[0] == [CLS, *C, SEP, SEP]


def test_pegasus_windows_concatenate_three_previous_the_current_and_three_next():
    ids, types = pegasus().row(C, [P3, P2, P1], [N1, N2])
    assert ids == [*P3, PSEP, *P2, PSEP, *P1, PSEP, *C, PSEP, *N1, PSEP, *N2, PSEP, EOS] and set(types) == {0}
    assert pegasus(current=False).row(C, [P1], [N1])[0] == [*P1, PSEP, *N1, PSEP, EOS]  # P_s(3p,3n)
    assert pegasus(sep_id=None).row(C, [P1], [N1])[0] == [*P1, *C, *N1, EOS]
    assert pegasus(prev=1, current=False, nxt=0).row(C)[0] == [EOS]  # a document's first sentence


def test_a_concatenation_whose_separator_is_its_end_closes_the_last_sentence_once():
    """BERT's [SEP] is both (`hf:` tokenizers): `[CLS] p [SEP] c [SEP]`, not `... c [SEP] [SEP]`."""
    joined = StreamLayout(prev=1, current=True, next=0, format="concat", max_tokens=64, eos_id=SEP,
                          sep_id=SEP, bos_id=CLS)
    assert joined.row(C, [P1])[0] == [CLS, *P1, SEP, *C, SEP]
    assert joined.row(C)[0] == [CLS, *C, SEP]
    assert joined.specials(2) == 3 and joined.specials(1) == 2
    tight = StreamLayout(prev=1, current=True, next=0, format="concat", max_tokens=7, eos_id=SEP,
                         sep_id=SEP, bos_id=CLS)
    assert tight.row(C, [P1])[0] == [CLS, 13, SEP, *C, SEP]  # P1 loses its oldest tokens


def test_the_farthest_neighbours_lose_their_tokens_first_and_the_specials_stay():
    """Distances: P3 3, P2 and N2 2, P1 and N1 1 (a tie: the previous side first); 12 ids of text and
    7 specials (a separator after each of the 6 sentences, then the end)."""
    row = pegasus()
    full, _ = row.row(C, [P3, P2, P1], [N1, N2])
    assert len(full) == 19

    def cut(excess: int) -> list[int]:
        return pegasus(max_tokens=19 - excess).row(C, [P3, P2, P1], [N1, N2])[0]

    S = PSEP
    assert cut(3) == [S, S, *P1, S, *C, S, *N1, S, *N2, S, EOS]  # P3 then P2
    assert cut(5) == [S, S, *P1, S, *C, S, *N1, S, S, EOS]  # then N2
    assert cut(6) == [S, S, 12, 13, S, *C, S, *N1, S, S, EOS]  # then P1's oldest token
    assert cut(9) == [S, S, S, *C, S, S, S, EOS]  # every neighbour gone, C whole
    assert cut(10) == [S, S, S, 1, 2, S, S, S, EOS]  # then the current sentence's end
    assert cut(12) == [S] * 6 + [EOS]
    tight, types = bert(prev=1, max_tokens=5).row(C, [P1])
    assert tight == [CLS, SEP, 1, 2, SEP] and types == [0, 0, 1, 1, 1]


@pytest.mark.parametrize("layout, text", [
    (dict(prev=1, current=True, next=1, format="pair"), "two segments"),
    (dict(prev=0, current=False, next=0, format="concat"), "reads no sentence"),
    (dict(prev=1, current=True, next=0, format="tokens"), "format must be one of"),
    (dict(prev=1, current=True, next=0, format="pair", sep_id=None), "separator"),
    (dict(prev=1, current=True, next=0, format="pair", max_tokens=2), "at least 3"),
])
def test_a_layout_that_cannot_be_built_is_one_error_naming_the_key(layout, text):
    settings = dict(max_tokens=64, eos_id=SEP, sep_id=SEP, bos_id=CLS, key="context.streams.bert_pc")
    with pytest.raises(DocMTInputError, match=f"key 'context.streams.bert_pc'.*{text}"):
        StreamLayout(**{**settings, **layout})
