"""Stacked LSTMs for attentional RNN NMT (Yamagishi & Komachi 2019, Eqs. 6-7; docs/papers/yamagishi.md).

`BiLSTMEncoder`: a stacked bidirectional LSTM whose output at every position is the top layer's
forward and backward states concatenated, H/2 each, so that its states have the decoder's width H
and dot attention needs no projection (reading Y1). Padded rows are packed, so padding changes
neither the states of real positions (padded positions are zero) nor the final states.

`LSTMState`: the (h, c) of every layer, batch-first (B, layers, H), so that `select_rows` reorders
it with a beam; `BiLSTMEncoder` returns the final state of each layer with its two directions
concatenated, the decoder's initial state (reading Y10).

Dropout between stacked layers is the LSTM's own (reading Y11); there is none with one layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


@dataclass
class LSTMState:
    """`hidden` and `cell` (B, layers, H), batch-first."""

    hidden: Tensor
    cell: Tensor

    @classmethod
    def from_lstm(cls, hidden: Tensor, cell: Tensor) -> LSTMState:
        """From `nn.LSTM`'s (layers, B, H) pair."""
        return cls(hidden.transpose(0, 1), cell.transpose(0, 1))

    def for_lstm(self) -> tuple[Tensor, Tensor]:
        """The (layers, B, H) pair `nn.LSTM` reads."""
        return self.hidden.transpose(0, 1).contiguous(), self.cell.transpose(0, 1).contiguous()


def between_layers(dropout: float, layers: int) -> float:
    """`nn.LSTM`'s dropout between stacked layers (none to apply with a single layer)."""
    return dropout if layers > 1 else 0.0


def join_directions(final: Tensor, layers: int) -> Tensor:
    """A bidirectional `nn.LSTM`'s final (2 layers, B, H/2) -> (B, layers, H), [forward; backward] per layer."""
    _, batch, half = final.shape
    per_layer = final.view(layers, 2, batch, half).permute(2, 0, 1, 3)  # (B, layers, 2, H/2)
    return per_layer.reshape(batch, layers, 2 * half)


class BiLSTMEncoder(nn.Module):
    """Embedded tokens (B, S, E) + padding (B, S) -> states (B, S, H) and the final `LSTMState`."""

    def __init__(self, input_size: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        if hidden % 2:
            raise ValueError(f"a bidirectional encoder of width {hidden} needs an even width (H/2 per direction)")
        self.layers = layers
        self.lstm = nn.LSTM(input_size, hidden // 2, layers, batch_first=True, bidirectional=True,
                            dropout=between_layers(dropout, layers))

    def forward(self, x: Tensor, pad: Tensor) -> tuple[Tensor, LSTMState]:
        """Every row needs at least one real position."""
        lengths = (~pad).sum(1).cpu()  # (B,)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (hidden, cell) = self.lstm(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # (B, S, H)
        return states, LSTMState(join_directions(hidden, self.layers), join_directions(cell, self.layers))
