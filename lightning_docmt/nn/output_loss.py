"""The training loss fused with the output projection: no (tokens, V) tensor is ever held whole.

`output_label_smoothed_nll(hidden, weight, target, eps, pad_id)` equals
`label_smoothed_nll(hidden @ weight.T, target, eps, pad_id)` (`nn/reference_loss.py`), value and gradients, but
works through the target tokens in chunks of about `CHUNK_ELEMENTS / V` rows and computes the
gradients during the forward pass, from the closed form of the label-smoothed loss's derivative:

    d loss_t / d z_v = p_v - q_v,   q_y = 1 - eps,   q_v = eps / (V - 1) for v != y

(z: the logits of token t, p = softmax(z), y: its reference token). Backward then only scales the
stored gradients by the incoming scalar gradient.

Why: on a CPU the unfused loss spends more time than the output matmul itself. Each step allocates
several fresh (tokens, V) float32 tensors (logits cast, log-softmax, the scatter and add of its
gradient), each larger than glibc's 32 MB mmap threshold, so every one is faulted in page by page
and returned to the kernel when freed. One chunk's buffers of `CHUNK_ELEMENTS` float32 values
(8 MB; and the product and the gradient in a lower compute dtype) serve every chunk of a call
instead, and the fused gradient needs one pass over a chunk, not five: the exponentials of the
log-normaliser (`exp(z - max z)`, computed in place of the logits) are divided by their sum to give
p, so each logit is exponentiated once. Measured on the `cpu` profile (d_model 192, V 8,000, ~2,100
target tokens per batch): see `benchmarks/training_step.py`.

Evaluation: the gradients are computed only when grad mode is on where the loss is called. Inside
a `torch.autograd.Function`'s forward grad mode is always off, and `ctx.needs_input_grad` says only
whether the inputs require grad, which the parameters still do during Lightning's validation and
test loops (run under `torch.no_grad`, or `torch.inference_mode` in `trainer.test` outside gloo
DDP): deciding there would do the backward matmuls of every evaluation batch for nothing.
`output_label_smoothed_nll` therefore reads `torch.is_grad_enabled()` before entering the Function
and passes it in.

Mixed precision: under autocast the matmuls run in the autocast dtype (as `nn.Linear` would), the
softmax and the loss in float32, and the weight gradient is accumulated over chunks in float32.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lightning_docmt.batch import PAD_ID
from lightning_docmt.nn.model_hooks import OutputLoss

CHUNK_ELEMENTS = 1 << 21  # float32 logits per chunk: 8 MB, under glibc's largest mmap threshold


def output_label_smoothed_nll(hidden: Tensor, weight: Tensor, target: Tensor, eps: float,
                              pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """hidden (B, T, D), output weight (V, D), target (B, T) -> (smoothed loss sum, nll sum, tokens).

    Only the smoothed loss carries a gradient; the NLL sum is for logging. Under `torch.no_grad` or
    `torch.inference_mode` only the values are computed (see the module docstring).
    """
    mask = target.ne(pad_id)  # (B, T)
    tokens = hidden[mask]  # (N, D): padding positions contribute nothing, so they are not computed
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        compute_dtype = torch.get_autocast_dtype(device_type)
    else:
        compute_dtype = torch.promote_types(hidden.dtype, weight.dtype)
    loss, nll = _FusedOutputLoss.apply(tokens, weight, target[mask], eps, compute_dtype,
                                       torch.is_grad_enabled())
    return loss, nll, mask.sum()


def output_loss_of(model: nn.Module, label_smoothing: float = 0.0) -> OutputLoss:
    """The `OutputLoss` a model's `loss_terms` is handed: `output_label_smoothed_nll` with the
    model's bias-free `output` projection, `label_smoothing` and the batch contract's padding."""
    return lambda hidden, target: output_label_smoothed_nll(hidden, model.output.weight, target,
                                                            label_smoothing, PAD_ID)


class _FusedOutputLoss(torch.autograd.Function):
    """(N, D) hidden states, (V, D) weight, (N,) targets -> (loss sum, nll sum), float32 scalars.

    `grad_enabled`: grad mode at the call site; without it no gradient is computed.
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, target: Tensor, eps: float,
                compute_dtype: torch.dtype, grad_enabled: bool) -> tuple[Tensor, Tensor]:
        vocab = weight.size(0)
        smooth = eps / (vocab - 1)
        want_hidden_grad = grad_enabled and ctx.needs_input_grad[0]
        want_weight_grad = grad_enabled and ctx.needs_input_grad[1]
        chunk = max(1, CHUNK_ELEMENTS // vocab)
        with torch.autocast(hidden.device.type, enabled=False), torch.no_grad():
            h_all = hidden.to(compute_dtype)
            w = weight.to(compute_dtype)
            loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
            nll = torch.zeros((), dtype=torch.float32, device=hidden.device)
            grad_hidden = torch.empty_like(hidden) if want_hidden_grad else None
            grad_weight = (torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
                           if want_weight_grad else None)
            # one chunk's buffers, reused by every chunk: the float32 logits, and the product and the
            # gradient in the compute dtype when it is lower (fresh (n, V) tensors at every chunk cost
            # page faults, more than the arithmetic on them)
            rows = min(chunk, h_all.size(0))
            scores = torch.empty(rows, vocab, dtype=torch.float32, device=hidden.device)
            low = (torch.empty(rows, vocab, dtype=compute_dtype, device=hidden.device)
                   if compute_dtype != torch.float32 else None)
            for start in range(0, h_all.size(0), chunk):
                h = h_all[start:start + chunk]  # (n, D)
                y = target[start:start + chunk, None]  # (n, 1)
                n = h.size(0)
                if low is None:
                    logits = torch.mm(h, w.t(), out=scores[:n])  # (n, V)
                else:
                    logits = scores[:n].copy_(torch.mm(h, w.t(), out=low[:n]))  # (n, V), exact upcast
                target_logit = logits.gather(1, y)  # (n, 1)
                logit_sum = logits.sum(-1, keepdim=True)  # (n, 1)
                # logsumexp as torch.logsumexp computes it, keeping exp(z - max) for the gradient
                peak = logits.amax(-1, keepdim=True)  # (n, 1)
                exp_shifted = logits.sub_(peak).exp_()  # (n, V) exp(z - max), in place of the logits
                exp_sum = exp_shifted.sum(-1, keepdim=True)  # (n, 1)
                log_norm = peak + exp_sum.log()  # (n, 1)
                token_nll = log_norm - target_logit  # (n, 1)
                # -sum_{v != y} log p_v = V * log_norm - sum_v z_v - nll
                others = vocab * log_norm - logit_sum - token_nll
                loss += ((1.0 - eps) * token_nll + smooth * others).sum()
                nll += token_nll.sum()
                if grad_hidden is None and grad_weight is None:
                    continue
                grad_logits = exp_shifted.div_(exp_sum).sub_(smooth)  # p - smooth, in place
                grad_logits.scatter_add_(1, y, torch.full_like(token_nll, smooth - (1.0 - eps)))
                if low is not None:
                    grad_logits = low[:n].copy_(grad_logits)  # (n, V) in the compute dtype
                if grad_hidden is not None:
                    grad_hidden[start:start + chunk] = grad_logits @ w
                if grad_weight is not None:
                    grad_weight += (grad_logits.t() @ h).float()
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        grad_h = grad_hidden * grad_loss.to(grad_hidden.dtype) if grad_hidden is not None else None
        grad_w = (grad_weight * grad_loss).to(ctx.weight_dtype) if grad_weight is not None else None
        return grad_h, grad_w, None, None, None, None
