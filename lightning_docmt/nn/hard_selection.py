"""The hard context selector of Li & Feng 2019 (docs/papers/lifeng2019.md section 2, Eqs. 19-24).

A binary tagger over the L context tokens H^doc (B, L, D), conditioned on the current sentence
H^cur; z_l = 1 keeps context token l for the soft attention:

    (20) s^src   = tanh(W_h meanpool(H^cur) + b_h)
    (21) s^doc_l = tanh(W_c H^doc_l + b_c)
    (22) s^tag_l = GRU([s^src; s^doc_l; emb(z_{l-1})], s^tag_{l-1})      one layer, hidden size D
    (23) P(z_l | z_<l) = softmax(W_p s^tag_l),  W_p in R^{2 x D}
    (24) P(z) = prod_l P(z_l | z_<l)

Readings (docs/papers/lifeng2019.md section 7):
- L3: the GRU input is the concatenation [s^src; s^doc_l; emb(z_{l-1})] with a learned 3-row label
  embedding (0, 1, and a start label for l = 1) of size D, and a zero initial state.
- NOT IN PAPER, L15: W_p has no bias (Eq. 23 writes none); meanpool is over the real positions of
  H^cur.

Since z_{l-1} is one of three labels, the GRU's input projection of step l is that of
[s^src; s^doc_l] (computed for every l at once) plus one of three precomputed label columns, so
the sequential loop does only the recurrent half of the GRU (the parameters are `nn.GRUCell`'s, and
`gru_step` is its formula).

Three ways to run the tagger, all over the same steps, with positions where `valid` is false
(padding after a row's L tokens) forced to z = 0 at probability 1:
- `beam`: the width-2 (configurable) beam search over the binary sequence (reading L1: theta_s
  training; reading L10: inference), no gradient needed;
- `sample`: Monte-Carlo draws with their log-probability (with gradient, for REINFORCE) and entropy;
- `log_prob`: the teacher-forced log-probability of a given z.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

START_LABEL = 2
"""The label embedding row read at l = 1 (reading L3); labels 0 and 1 are z's values."""


class Selection(NamedTuple):
    """z (N, L) int64 in {0, 1} (0 at invalid positions), its log-probability log P(z) (N,), and the
    summed entropy of the per-step distributions along it (N,)."""

    z: Tensor
    log_prob: Tensor
    entropy: Tensor


class SelectorInputs(NamedTuple):
    """What every step reads: the input-gate pre-activations of [s^src; s^doc_l] (N, L, 3D) and
    `valid` (N, L) bool (False: padding, forced to z = 0)."""

    gates: Tensor
    valid: Tensor

    def repeat(self, times: int) -> SelectorInputs:
        """Each row `times` times in a row: (N * times, ...) (Monte-Carlo samples of one example
        are adjacent)."""
        return SelectorInputs(self.gates.repeat_interleave(times, 0), self.valid.repeat_interleave(times, 0))


class HardSelector(nn.Module):
    """theta_r of Li & Feng 2019: W_h, b_h (`src_proj`), W_c, b_c (`ctx_proj`), the label embedding
    (`label_embed`), the GRU (`gru`) and W_p (`out`)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.src_proj = nn.Linear(d_model, d_model)  # Eq. 20: W_h, b_h
        self.ctx_proj = nn.Linear(d_model, d_model)  # Eq. 21: W_c, b_c
        self.label_embed = nn.Embedding(3, d_model)  # reading L3: z = 0, z = 1, start
        self.gru = nn.GRUCell(3 * d_model, d_model)  # Eq. 22
        self.out = nn.Linear(d_model, 2, bias=False)  # Eq. 23: W_p (reading L15)
        self.d_model = d_model

    def inputs(self, current: Tensor, current_pad: Tensor, context: Tensor, context_pad: Tensor
               ) -> SelectorInputs:
        """Eqs. 20-21 and the GRU input projection of [s^src; s^doc_l].

        current (N, S, D) with padding (N, S); context = H^doc (N, L, D) with padding (N, L).
        """
        keep = (~current_pad).unsqueeze(-1).to(current.dtype)  # (N, S, 1)
        pooled = (current * keep).sum(1) / keep.sum(1).clamp(min=1)  # (N, D) meanpool over real tokens
        s_src = torch.tanh(self.src_proj(pooled))  # Eq. 20: (N, D)
        s_doc = torch.tanh(self.ctx_proj(context))  # Eq. 21: (N, L, D)
        d = self.d_model
        w_src, w_doc = self.gru.weight_ih[:, :d], self.gru.weight_ih[:, d:2 * d]  # (3D, D) each
        gates = (F.linear(s_src, w_src, self.gru.bias_ih)[:, None, :]
                 + F.linear(s_doc, w_doc))  # (N, L, 3D)
        return SelectorInputs(gates, ~context_pad)

    def label_gates(self) -> Tensor:
        """(3, 3D): the input-gate contribution of each label's embedding."""
        return F.linear(self.label_embed.weight, self.gru.weight_ih[:, 2 * self.d_model:])

    def gru_step(self, input_gates: Tensor, hidden: Tensor) -> Tensor:
        """`nn.GRUCell`'s update from precomputed input gates (..., 3D) and the state (..., D)."""
        hidden_gates = F.linear(hidden, self.gru.weight_hh, self.gru.bias_hh)  # (..., 3D)
        i_r, i_z, i_n = input_gates.chunk(3, dim=-1)
        h_r, h_z, h_n = hidden_gates.chunk(3, dim=-1)
        reset, update = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        candidate = torch.tanh(i_n + reset * h_n)
        return (1.0 - update) * candidate + update * hidden

    def step_log_probs(self, gates_l: Tensor, previous: Tensor, hidden: Tensor, valid_l: Tensor,
                       label_gates: Tensor) -> tuple[Tensor, Tensor]:
        """One step: the new state (..., D) and log P(z_l = 0 / 1) (..., 2); at invalid positions
        z_l = 0 has probability 1."""
        hidden = self.gru_step(gates_l + label_gates[previous], hidden)  # Eq. 22
        log_probs = torch.log_softmax(self.out(hidden).float(), dim=-1)  # Eq. 23: (..., 2)
        forced = torch.tensor([0.0, float("-inf")], device=log_probs.device)
        return hidden, torch.where(valid_l[..., None], log_probs, forced)

    def walk(self, inputs: SelectorInputs, choose: Callable[[int, Tensor], Tensor]) -> Selection:
        """Run the tagger over the L steps, z_l = `choose(l, log P(z_l | z_<l))` (N,) at each; the
        log-probability of the z chosen is differentiable."""
        label_gates = self.label_gates()
        rows, length, _ = inputs.gates.shape
        hidden = inputs.gates.new_zeros(rows, self.d_model)
        previous = torch.full((rows,), START_LABEL, dtype=torch.long, device=hidden.device)
        total = hidden.new_zeros(rows, dtype=torch.float32)
        entropy = hidden.new_zeros(rows, dtype=torch.float32)
        labels = []
        for l in range(length):
            hidden, log_probs = self.step_log_probs(inputs.gates[:, l], previous, hidden, inputs.valid[:, l],
                                                    label_gates)
            label = choose(l, log_probs)  # (N,)
            total = total + log_probs.gather(1, label[:, None]).squeeze(1)
            entropy = entropy + step_entropy(log_probs)
            labels.append(label)
            previous = label
        z = torch.stack(labels, 1) if labels else torch.zeros(rows, 0, dtype=torch.long, device=hidden.device)
        return Selection(z, total, entropy)

    def log_prob(self, inputs: SelectorInputs, z: Tensor) -> Selection:
        """Eq. 24 for a given z (N, L)."""
        return self.walk(inputs, lambda l, _: z[:, l])

    def sample(self, inputs: SelectorInputs, generator: torch.Generator | None = None) -> Selection:
        """One draw of z per row (Monte-Carlo search, reading L1), with log P(z) differentiable."""
        return self.walk(inputs, lambda _, log_probs: torch.multinomial(
            log_probs.detach().exp(), 1, generator=generator).squeeze(1))

    @torch.no_grad()
    def beam(self, inputs: SelectorInputs, width: int = 2) -> Selection:
        """The most probable z found by a beam of `width` over the binary sequence (readings L1, L10)."""
        label_gates = self.label_gates()
        rows, length, _ = inputs.gates.shape
        device = inputs.gates.device
        hidden = inputs.gates.new_zeros(rows, width, self.d_model)  # (N, W, D)
        previous = torch.full((rows, width), START_LABEL, dtype=torch.long, device=device)  # (N, W)
        score = torch.full((rows, width), float("-inf"), device=device)
        score[:, 0] = 0.0  # one live beam at the start
        entropy = torch.zeros(rows, width, device=device)
        history = torch.zeros(rows, width, 0, dtype=torch.long, device=device)  # (N, W, l)
        for l in range(length):
            valid_l = inputs.valid[:, l, None].expand(-1, width)  # (N, W)
            gates_l = inputs.gates[:, l, None, :].expand(-1, width, -1)  # (N, W, 3D)
            new_hidden, log_probs = self.step_log_probs(gates_l, previous, hidden, valid_l, label_gates)
            candidates = (score[:, :, None] + log_probs).view(rows, 2 * width)  # (N, 2W): beam-major
            score, index = candidates.topk(width, dim=1)  # (N, W)
            beam, label = index // 2, index % 2  # (N, W)
            hidden = new_hidden.gather(1, beam[:, :, None].expand(-1, -1, self.d_model))
            entropy = entropy.gather(1, beam) + step_entropy(log_probs).gather(1, beam)
            history = torch.cat([history.gather(1, beam[:, :, None].expand(-1, -1, l)), label[:, :, None]], 2)
            previous = label
        best = score.argmax(1)  # (N,)
        pick = torch.arange(rows, device=device)
        return Selection(history[pick, best], score[pick, best], entropy[pick, best])


def step_entropy(log_probs: Tensor) -> Tensor:
    """Entropy of the (..., 2) distributions, 0 where one label has probability 1."""
    probs = log_probs.exp()
    return -(probs * log_probs.masked_fill(probs.eq(0), 0.0)).sum(-1)
