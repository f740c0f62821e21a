"""Drop-in replacement of transformers' ``LongformerSelfAttention`` on the QDS attention kernels.

QDS-Transformer (Jiang et al., Findings of EMNLP 2020, Sec. 4.3) is Longformer
(Beltagy et al. 2020) with query-directed global tokens, and its official code
and checkpoint use Longformer's modules and parameter names. This module keeps
those names and shapes (``query``, ``key``, ``value``, ``query_global``,
``key_global``, ``value_global``) and the forward signature and return
convention of transformers' ``LongformerSelfAttention``, and computes the
attention with `common.kernels.qds_attention` (window = 2 * one-sided window).
`use_qds_attention` swaps it into a ``LongformerModel`` (or any model holding
one) with the existing weights, so a Longformer or QDS checkpoint runs on these
kernels.

Differences from transformers' module:

- attention dropout: the kernels return the attention output, not its
  probabilities, so dropout (``attention_probs_dropout_prob``) is applied to
  the per-head attention output instead of to the probabilities. Same
  expectation, different noise; in eval mode (or with p = 0) the two agree.
- ``output_attentions=True`` raises NotImplementedError: the kernels never form
  the probabilities (use the original module to look at attention maps).
- the sequence length need not be a multiple of the window (transformers
  asserts it), and `use_qds_attention` stops ``LongformerModel`` padding the
  input to one: padding tokens are masked keys, so the other rows are unchanged.
- the global query projection runs on the valid global rows only (transformers
  does the same, with a global token on padding among them, which
  ``LongformerModel`` never makes: its padding and global masks are disjoint).
- what the kernels derive from the global tokens and the padding is built
  once per encoder call and shared by its layers (`common.kernels.layouts`),
  with one read-back to the host, the global tokens' count; the layers read
  nothing back (transformers' find the global tokens with ``nonzero`` in each).
- ``LongformerModel.forward`` builds its (B, N) additive padding mask through
  ``create_bidirectional_mask``, which materialises a dense (B, 1, N, N) mask
  only for the first row to be kept (results/kernels/README.md). `use_qds_attention` rebinds that name in transformers' Longformer
  module to `_padding_mask_row`, which builds that row alone, with the same
  values; every other caller of the function is untouched.
- half precision: transformers takes the softmax in fp32 whatever the input
  dtype; here the kernel's own precision applies (`common.kernels`: ``tvm``
  computes in fp32, the others in their inputs' dtype). Under autocast
  (``bf16-mixed``) the projections return bf16, and every buffer built here
  takes their dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers.models.longformer import modeling_longformer
from transformers.models.longformer.modeling_longformer import (
    LongformerAttention, LongformerEncoder, LongformerModel, LongformerSelfAttention,
)

from common.kernels import qds_attention
from common.kernels.layouts import close_scope, global_tokens_of, open_scope, shared


class QDSLongformerSelfAttention(nn.Module):
    """``LongformerSelfAttention`` with the same parameters, computed by `qds_attention(..., impl=impl)`."""

    def __init__(self, config, layer_id: int, impl: str = "auto"):
        super().__init__()
        if config.hidden_size % config.num_attention_heads != 0:
            raise ValueError(
                f"The hidden size ({config.hidden_size}) is not a multiple of the number of attention "
                f"heads ({config.num_attention_heads})"
            )
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.embed_dim = config.hidden_size

        self.query = nn.Linear(config.hidden_size, self.embed_dim)
        self.key = nn.Linear(config.hidden_size, self.embed_dim)
        self.value = nn.Linear(config.hidden_size, self.embed_dim)
        # separate projections of the global tokens' rows (Longformer Sec. 3.2)
        self.query_global = nn.Linear(config.hidden_size, self.embed_dim)
        self.key_global = nn.Linear(config.hidden_size, self.embed_dim)
        self.value_global = nn.Linear(config.hidden_size, self.embed_dim)

        self.dropout = config.attention_probs_dropout_prob
        self.output_dropout = nn.Dropout(self.dropout)  # a module, so that common.encoders.dropout.use_fast_dropout finds it

        self.layer_id = layer_id
        # LongformerModel turns an int window into one per layer; a module built alone may get the int.
        window = config.attention_window
        attention_window = window if isinstance(window, int) else window[layer_id]
        if attention_window <= 0 or attention_window % 2:
            raise ValueError(
                f"`attention_window` for layer {layer_id} has to be positive and even, got {attention_window}"
            )
        self.one_sided_attn_window_size = attention_window // 2
        self.config = config
        self.impl = impl

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        is_index_masked: Tensor | None = None,
        is_index_global_attn: Tensor | None = None,
        is_global_attn: bool | None = None,
        output_attentions: bool = False,
    ) -> tuple[Tensor]:
        """Arguments as transformers' ``LongformerSelfAttention.forward``; returns ``(attn_output,)``, (B, N, E).

        ``attention_mask`` (B, N) is LongformerModel's extended mask: negative = padding, 0 = local,
        positive = global. ``is_index_masked``, ``is_index_global_attn`` and ``is_global_attn`` are
        derived from it, as ``LongformerEncoder`` does, where not given.
        """
        if output_attentions:
            raise NotImplementedError(
                "QDSLongformerSelfAttention computes attention with sparse kernels that never form the attention "
                "probabilities; run the model with output_attentions=False, or use transformers' "
                "LongformerSelfAttention to inspect attention maps"
            )
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
            # The global rows attend to every key with the *_global projections (Longformer Sec. 3.2), so
            # their keys and values are needed at every position but their queries only at the global rows:
            # the kernels read no other row, which stays zero (a projection of every position costs as much
            # as the sparse attention itself). The rows are indexed by the positions found once per encoder call.
            # The buffer takes the projection's dtype, which autocast may have lowered (bf16-mixed).
            tokens = global_tokens_of(is_global, is_index_masked)
            rows = (tokens.batch, tokens.position)  # (T,) each, T the batch's global tokens
            projected = self.query_global(hidden_states[rows])  # (T, E)
            queries = projected.new_zeros(batch, n, self.embed_dim).index_put(rows, projected)  # (B, N, E)
            global_qkv = (self._heads(queries), self._heads(self.key_global(hidden_states)),
                          self._heads(self.value_global(hidden_states)))  # (B, H, N, D) each
        else:
            # transformers' is_global_attn=False path: pure sliding window, global projections unused. The
            # all-False mask is one tensor per encoder call, so that the kernels' layout is shared by its layers.
            is_global, global_qkv = shared(torch.zeros_like, is_index_masked), None
        window = 2 * self.one_sided_attn_window_size
        out = qds_attention(q, k, v, is_global, is_index_masked, window, global_qkv, impl=self.impl)  # (B, H, N, D)
        # Dropout on the attention output: the kernels expose no probabilities (see the module docstring).
        out = self.output_dropout(out)
        return (out.transpose(1, 2).reshape(batch, n, self.embed_dim),)

    def _heads(self, x: Tensor) -> Tensor:
        """(B, N, E) -> (B, H, N, D)."""
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

    def extra_repr(self) -> str:
        return f"impl={self.impl!r}, window={2 * self.one_sided_attn_window_size}"


def use_qds_attention(model: nn.Module, impl: str = "auto") -> nn.Module:
    """Replace every ``layer.attention.self`` of the Longformer(s) in `model` in place; returns `model`.

    Each new module takes the old one's weights (state_dict), device, dtype and train/eval mode. Each
    ``LongformerEncoder`` gets forward hooks that share the kernels' layout among its layers in each call
    (`common.kernels.layouts`).
    Raises ValueError if `model` holds no transformers ``LongformerSelfAttention``.
    """
    attentions = [
        m for m in model.modules() if isinstance(m, LongformerAttention) and isinstance(m.self, LongformerSelfAttention)
    ]
    if not attentions:
        raise ValueError(f"{type(model).__name__} contains no transformers LongformerSelfAttention to replace")
    for longformer in (m for m in model.modules() if isinstance(m, LongformerModel)):
        # The kernels take any length: the padding to a multiple of the window would be computed and dropped.
        longformer._pad_to_window_size = _no_window_padding
    modeling_longformer.create_bidirectional_mask = _padding_mask_row
    for encoder in (m for m in model.modules() if isinstance(m, LongformerEncoder)):
        # One attention layout per encoder call, shared by its layers (common.kernels.layouts); the scope
        # closes when the forward raises too.
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
    """What ``LongformerModel.forward`` keeps of ``create_bidirectional_mask``'s eager (B, 1, N, N) mask, its
    first query row, as (B, 1, 1, N): 0 for the tokens of a (B, N) 0/1 `attention_mask`, the dtype's minimum
    for padding. Longformer computes in eager attention, whose mask this is."""
    dtype = inputs_embeds.dtype
    row = torch.where(attention_mask.bool(), torch.zeros((), dtype=dtype, device=attention_mask.device),
                      torch.finfo(dtype).min)
    return row[:, None, None, :]
