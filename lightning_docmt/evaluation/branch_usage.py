"""Which branch carries a parallel-attention-stack model's translations (Donato, Yu & Dyer 2021,
`model.arch=pas`; docs/papers/donato2021.md, reading D2 and section 6).

In evaluation every layer's DropBranch returns 1/2 (R + S) (reading D2): R, the layer's own
sublayer (the sentence Transformer's, frozen since stage 1 in the paper's recipe), and S, the stack
over the pretrained encodings. The row's BLEU says how good the mean is, not what each side brings:
a stack that reads the source worse than the Transformer's own encoder can cost BLEU while the
teacher-forced NLL barely moves. So the split is scored twice more with every layer's rule swapped
(`nn/parallel_stack.branch_rule`):

- `branch/original/*`: R alone in every layer. With the Transformer frozen, this is the
  Transformer's own translation: its BLEU is stage 1's (the check that freezing held).
- `branch/stack/*`: S alone in every layer: what the stack has learnt to read instead.

Each gets the BLEU of a beam search (`decode.*`) and the teacher-forced NLL (nats per target
token, `<eos>` included); `branch/mean/nll` is the model's own rule scored in the same batches, so
that the three NLLs differ in the rule alone. The mean's BLEU is the row's own (decoded by the test
loop in its batches: the two decodes here differ from it in the rule, and in batch composition,
whose effect is the random-context control's floor, `random_ctx/bleu_floor`). Every pass runs
under the autocast of the test loop's precision, on the context the row's BLEU reads.
"""

from __future__ import annotations

import numpy as np

from lightning_docmt.data.cache import BinarizedSplit
from lightning_docmt.data.collate import row_lengths
from lightning_docmt.data.context_anchors import own_context
from lightning_docmt.data.sampler import TokenBudgetBatchSampler
from lightning_docmt.evaluation.context_usage import decode_bleu, sentence_log_probs
from lightning_docmt.inference.device import autocast_for
from lightning_docmt.inference.loaded_model import LoadedModel
from lightning_docmt.inference.own_outputs import OutputTokens, WithContextTargets
from lightning_docmt.nn.parallel_stack import branch_rule, drop_branches

DECODED_RULES = ("original", "stack")  # the mean's BLEU is the row's own
SCORED_RULES = ("mean", *DECODED_RULES)

# Printed under every table that shows them (tables/report.py), as the context columns are.
BRANCH_METRIC_MEANINGS = {
    "branch/original/bleu": "BLEU with every layer of the stack's model evaluated on R alone, its own "
                            "sublayer (a frozen Transformer's: that Transformer's BLEU); the row's own "
                            "rule is the mean of R and S",
    "branch/stack/bleu": "BLEU with every layer evaluated on S alone, the stack over the pretrained "
                         "encodings: what the stack reads instead of the Transformer's own sublayer",
    "branch/mean/nll": "the teacher-forced NLL (nats per target token) of the row's own rule, 1/2 (R + S), "
                       "in the batches of the two below",
    "branch/original/nll": "the NLL with R alone in every layer",
    "branch/stack/nll": "the NLL with S alone in every layer",
}


def branch_usage_metrics(model: LoadedModel, split: BinarizedSplit, references: list[str], tokenize: str, *,
                         precision: str = "32-true", own_targets: OutputTokens | None = None) -> dict[str, float]:
    """The scores of BRANCH_METRIC_MEANINGS on `split` (see the module docstring); `own_targets`: the
    model's own translations of the split, for target-side context read as its test BLEU reads it."""
    if not drop_branches(model.model):
        raise ValueError(f"model.arch={model.cfg.model.arch} has no DropBranch: no branch to score alone")
    read = split if own_targets is None else WithContextTargets(split, own_targets)
    real = own_context(split.doc_offsets)
    indices = np.arange(split.n_sentences)
    sizes = row_lengths(read, model.window, indices, real)
    batches = list(TokenBudgetBatchSampler(indices, sizes, int(model.cfg.decode.batch_max_tokens), shuffle=False))
    scores: dict[str, float] = {}
    with autocast_for(precision, model.device):
        for rule in SCORED_RULES:
            with branch_rule(model.model, rule):
                sums = sentence_log_probs(model, read, [real], int(model.cfg.data.eval_max_tokens))[0]
                scores[f"branch/{rule}/nll"] = float(-sums.total.sum() / sums.tokens.sum())
                if rule in DECODED_RULES:
                    scores[f"branch/{rule}/bleu"] = decode_bleu(model, read, real, references, tokenize, batches)
    return scores


def branch_usage_line(scores: dict[str, float], seconds: float) -> str:
    """One progress line of what `branch_usage_metrics` scored."""
    bleu = " · ".join(f"{rule} alone BLEU {scores[f'branch/{rule}/bleu']:.2f}" for rule in DECODED_RULES)
    return (f"branches: {bleu} · NLL mean/original/stack "
            + "/".join(f"{scores[f'branch/{rule}/nll']:.3f}" for rule in SCORED_RULES) + f" ({seconds:.0f}s)")
