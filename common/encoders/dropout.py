"""Dropout whose mask costs one 64-bit random draw per four elements (`dropout`, `Dropout`), instead of ``bernoulli_``'s
draw per element on CPU: each int64 ``random_()`` gives four 15-bit uniform integers, so p is rounded to a multiple of
2^-15 (0.1 becomes 0.1000061) and kept elements are scaled by 1 / (1 - rounded p). `attention` applies it to attention
probabilities on CPU (elsewhere ``F.scaled_dot_product_attention`` drops); `use_fast_bert_dropout` installs both in a
Hugging Face model, ``sdpa`` itself wherever nothing is dropped. Speed: results/conformer_kernel/README.md.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: Bits of each uniform integer: a 16-bit quarter of a draw with its top bit cleared.
BITS = 15
#: Clears the top bit of each 16-bit quarter of an int64.
QUARTERS = 0x7FFF_7FFF_7FFF_7FFF


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``F.dropout(x, p, training)`` with the mask drawn as the module docstring says (p rounded to 2^-15)."""
    if not training or p == 0.0:
        return x
    threshold = round(p * 2**BITS)
    if threshold >= 2**BITS:
        return x * 0.0
    n = x.numel()
    draws = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()
    uniform = (draws & QUARTERS).view(torch.int16)[:n].view(x.shape)
    return x * (uniform >= threshold).to(x.dtype).mul_(1 / (1 - threshold / 2**BITS))


class Dropout(nn.Dropout):
    """`nn.Dropout` computed by `dropout` (see the module docstring)."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)


def use_fast_dropout(model: nn.Module) -> nn.Module:
    """Replace every `nn.Dropout` submodule of `model` by `Dropout` with the same p, in place; returns `model`."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, Dropout(child.p, inplace=child.inplace).train(child.training))
    return model


def attention(query: Tensor, key: Tensor, value: Tensor, keep: Tensor | None, p: float, training: bool = True,
              scale: float | None = None) -> Tensor:
    """softmax(Q K^T * scale) V, `keep` True where a query may attend; probabilities dropped by `dropout`."""
    if not training or p == 0.0 or query.device.type != "cpu":
        return F.scaled_dot_product_attention(query, key, value, attn_mask=keep, scale=scale,
                                              dropout_p=p if training else 0.0)
    logits = query @ key.transpose(-1, -2) * (query.size(-1) ** -0.5 if scale is None else scale)  # (..., n, m)
    if keep is not None:
        logits = logits.masked_fill(~keep, torch.finfo(logits.dtype).min)
    return dropout(logits.softmax(-1), p) @ value  # (..., n, d)


#: The Hugging Face attention implementation of `use_fast_bert_dropout` (``sdpa``'s boolean masks).
ATTENTION = "sdpa_fast_dropout"


def _hf_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                  dropout: float = 0.0, scaling: float | None = None, **kwargs) -> tuple[Tensor, None]:
    """transformers' attention interface: (B, H, n, d) heads in, (B, n, H, d) out (as ``sdpa_attention_forward``)."""
    out = attention(query, key, value, attention_mask, dropout, module.training, scaling)
    return out.transpose(1, 2).contiguous(), None


def use_fast_bert_dropout(model: nn.Module) -> nn.Module:
    """`use_fast_dropout`, and every Hugging Face model inside `model` set to attend with `ATTENTION`, in place."""
    from transformers import AttentionInterface, PreTrainedModel
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, _hf_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    for module in model.modules():
        if isinstance(module, PreTrainedModel):
            module.set_attn_implementation(ATTENTION)
    return use_fast_dropout(model)
