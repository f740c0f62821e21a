"""Transformers' ``LongformerSelfAttention`` on the QDS attention kernels (QDS-Transformer Sec. 4.3, Longformer).

Same parameter names and shapes (``query`` ... ``value_global``), forward signature and return convention, so a
Longformer or QDS checkpoint runs on `common.kernels.qds_attention`; `use_qds_attention` swaps it in. Differences:

- dropout applies to the per-head attention output, not the probabilities (the kernels form none): same expectation,
  other noise; ``output_attentions=True`` raises NotImplementedError;
- any sequence length (no padding to a multiple of the window: padding tokens are masked keys);
- the global query projection runs on the valid global rows only;
- the kernels' layout is built once per encoder call and shared by its layers (`common.kernels.layouts`);
- ``LongformerModel``'s (B, N) padding mask is built as one row (`_padding_mask_row`), not a dense (B, 1, N, N);
- half precision: the kernel's own (``tvm`` computes in fp32, the others in their inputs' dtype).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers.models.longformer import modeling_longformer
from transformers.models.longformer.modeling_longformer import (LongformerAttention, LongformerEncoder,
                                                                LongformerModel, LongformerSelfAttention)

from common.kernels import qds_attention
from common.kernels.layouts import close_scope, global_tokens_of, open_scope, shared


class QDSLongformerSelfAttention(nn.Module):
    """``LongformerSelfAttention`` with the same parameters, computed by `qds_attention(..., impl=impl)`."""

    def __init__(self, config, layer_id: int, impl: str = "auto"):
        super().__init__()
        self.num_heads, self.embed_dim = config.num_attention_heads, config.hidden_size
        self.head_dim = config.hidden_size // config.num_attention_heads
        for name in ("query", "key", "value", "query_global", "key_global", "value_global"):
            setattr(self, name, nn.Linear(config.hidden_size, self.embed_dim))
        self.dropout = config.attention_probs_dropout_prob
        self.output_dropout = nn.Dropout(self.dropout)
        window = config.attention_window
        self.window = window if isinstance(window, int) else window[layer_id]
        self.config, self.layer_id, self.impl = config, layer_id, impl

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None,
                is_index_masked: Tensor | None = None, is_index_global_attn: Tensor | None = None,
                is_global_attn: bool | None = None, output_attentions: bool = False) -> tuple[Tensor]:
        """Transformers' arguments; ``attention_mask`` (B, N): negative = padding, 0 = local, positive = global."""
        if output_attentions:
            raise NotImplementedError(
                "QDSLongformerSelfAttention computes attention with sparse kernels that never form the attention "
                "probabilities; run the model with output_attentions=False, or use transformers' "
                "LongformerSelfAttention to inspect attention maps")
        batch, n, _ = hidden_states.shape
        if attention_mask is None:
            attention_mask = hidden_states.new_zeros(batch, n)
        if is_index_masked is None:
            is_index_masked = attention_mask < 0
        if is_index_global_attn is None:
            is_index_global_attn = attention_mask > 0
        if is_global_attn is None:
            is_global_attn = global_tokens_of(is_index_global_attn, is_index_masked).total > 0

        q, k, v = (self._heads(proj(hidden_states)) for proj in (self.query, self.key, self.value))  # (B, H, N, D)
        if is_global_attn:
            is_global = is_index_global_attn
            # Global queries only at the global rows (T of them), other rows zero: the kernels read no other.
            tokens = global_tokens_of(is_global, is_index_masked)
            rows = (tokens.batch, tokens.position)  # (T,) each, T the batch's global tokens
            projected = self.query_global(hidden_states[rows])  # (T, E)
            queries = projected.new_zeros(batch, n, self.embed_dim).index_put(rows, projected)  # (B, N, E)
            global_qkv = (self._heads(queries), self._heads(self.key_global(hidden_states)),
                          self._heads(self.value_global(hidden_states)))  # (B, H, N, D) each
        else:
            is_global, global_qkv = shared(torch.zeros_like, is_index_masked), None
        out = qds_attention(q, k, v, is_global, is_index_masked, self.window, global_qkv, impl=self.impl)
        out = self.output_dropout(out)
        return (out.transpose(1, 2).reshape(batch, n, self.embed_dim),)

    def _heads(self, x: Tensor) -> Tensor:
        """(B, N, E) -> (B, H, N, D)."""
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

    def extra_repr(self) -> str:
        return f"impl={self.impl!r}, window={self.window}"


def use_qds_attention(model: nn.Module, impl: str = "auto") -> nn.Module:
    """Replace every ``LongformerSelfAttention`` in `model` in place, keeping weights, device, dtype and mode."""
    attentions = [m for m in model.modules()
                  if isinstance(m, LongformerAttention) and isinstance(m.self, LongformerSelfAttention)]
    if not attentions:
        raise ValueError(f"{type(model).__name__} contains no transformers LongformerSelfAttention to replace")
    for longformer in (m for m in model.modules() if isinstance(m, LongformerModel)):
        longformer._pad_to_window_size = _no_window_padding
    modeling_longformer.create_bidirectional_mask = _padding_mask_row
    for encoder in (m for m in model.modules() if isinstance(m, LongformerEncoder)):
        encoder.register_forward_pre_hook(open_scope)
        encoder.register_forward_hook(close_scope, always_call=True)
    for attention in attentions:
        old = attention.self
        new = QDSLongformerSelfAttention(old.config, old.layer_id, impl=impl)
        new.load_state_dict(old.state_dict())
        reference = old.query.weight
        attention.self = new.to(device=reference.device, dtype=reference.dtype).train(old.training)
    return model


def _no_window_padding(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, pad_token_id):
    """``LongformerModel._pad_to_window_size`` padding nothing (a padding length of 0)."""
    return 0, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds


def _padding_mask_row(config, inputs_embeds: Tensor, attention_mask: Tensor, **kwargs) -> Tensor:
    """The first row of ``create_bidirectional_mask``'s eager mask, (B, 1, 1, N): 0 for tokens, min for padding."""
    dtype = inputs_embeds.dtype
    row = torch.where(attention_mask.bool(), torch.zeros((), dtype=dtype, device=attention_mask.device),
                      torch.finfo(dtype).min)
    return row[:, None, None, :]
