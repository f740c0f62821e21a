"""EARL (Gao, Dai, Callan 2020) written out by hand from the paper, for tests to hold `earl.model` against: nothing here
calls `earl.model`'s code; a model is read only for its weights (its modules' ``weight`` and ``bias`` tensors) and
its settings (the heads, the activation's name, LayerNorm's epsilon).

- The encoders T_doc and T_qry (Eqs. 6-16) are the ``BertModel`` s themselves, run on one unpadded input at a time
  (the reference encoders): D = T_doc(doc) and Q = T_qry(qry) of the real tokens only.
- The judge block (Eqs. 17-19) on one query and one document, both unpadded: a padded position is not masked here, it
  is absent. MultiHead(X, Y, Y) (Eqs. 1-3): X W_X, Y W_Y and Y W_Z (``nn.Linear`` keeps W transposed: X W is
  ``X @ weight.T``), split explicitly into H heads of h / H columns, per head softmax(X_i Y_i^T / sqrt(h / H)) Z_i
  over the document's rows, the heads concatenated, times W^O; then the residual and LayerNorm (the mean and the
  biased variance over the h features, the config's epsilon); the FFN (Eq. 4) with the activation BERT's config
  names (``gelu``: the exact, erf, GELU); no dropout (evaluation).
- Score (Eq. 22): w^T Pool(H_K), Pool the [CLS] row (ClsPool) or the mean of the query's rows (AvePool, every row
  real); the 2-class head of the cross-entropy option: logit_1 - logit_0.

Where the printed equations and BERT differ (`earl.model`'s docstring; docs/earl.md), the default is BERT's
computation, which the copied BERT weights need; `Printed` computes one of them as
printed instead, for tests that show each departure changes the result:

- ``scale``: Eq. 1 divides X Y^T by sqrt(d_model), the model width h, not by sqrt(h / H), the head width;
- ``relu``: Eq. 4's ReLU in place of BERT's GELU;
- ``norm_before_residual``: Eq. 19's LayerNorm(FFN(Q_self)) + Q_self in place of LayerNorm(FFN(Q_self) + Q_self).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Printed:
    """Which of the paper's printed equations to compute as printed (module docstring); all False: BERT's."""

    scale: bool = False
    relu: bool = False
    norm_before_residual: bool = False


BERT = Printed()


def linear(x: Tensor, layer) -> Tensor:
    """x W + b of an ``nn.Linear`` `layer` (its weight is W transposed)."""
    out = x @ layer.weight.detach().T
    return out if layer.bias is None else out + layer.bias.detach()


def layer_norm(x: Tensor, norm) -> Tensor:
    """LayerNorm over the last dimension: (x - mean) / sqrt(biased variance + eps), times the gain, plus the bias."""
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + norm.eps) * norm.weight.detach() + norm.bias.detach()


def activation(x: Tensor, name: str, printed: Printed = BERT) -> Tensor:
    """BERT's ``hidden_act`` (only ``gelu``, the exact one, is written out), or Eq. 4's ReLU."""
    if printed.relu:
        return torch.clamp(x, min=0)
    if name != "gelu":
        raise ValueError(f"only the exact GELU is written out here, not {name!r}")
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def multi_head(attention, x: Tensor, y: Tensor, heads: int, printed: Printed = BERT) -> Tensor:
    """MultiHead(X, Y, Y) W^O (Eqs. 1-3) of (n, h) `x` attending to (m, h) `y`, every row of `y` real; the projections
    W_X, W_Y, W_Z, W^O are `attention`'s ``query``, ``key``, ``value`` and ``dense`` layers."""
    queries, keys, values = linear(x, attention.query), linear(y, attention.key), linear(y, attention.value)
    width = x.shape[-1]
    size = width // heads
    scale = math.sqrt(width if printed.scale else size)
    outputs = []
    for head in range(heads):
        columns = slice(head * size, (head + 1) * size)
        logits = queries[:, columns] @ keys[:, columns].T / scale  # (n, m)
        weights = torch.exp(logits - logits.max(-1, keepdim=True).values)
        outputs.append(weights / weights.sum(-1, keepdim=True) @ values[:, columns])  # softmax over the m rows
    return linear(torch.cat(outputs, dim=-1), attention.dense)


def feed_forward(ffn, x: Tensor, act: str, printed: Printed = BERT) -> Tensor:
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2 (Eq. 4): `ffn`'s ``intermediate`` and ``output`` layers."""
    return linear(activation(linear(x, ffn.intermediate), act, printed), ffn.output)


def judge_block(block, q: Tensor, d: Tensor, heads: int, act: str, printed: Printed = BERT) -> Tensor:
    """Judge(Q, D) (Eqs. 17-19) of one query's (q, h) rows and one document's (d, h) rows, all real; `block`'s
    ``cross``, ``self_attention`` and ``ffn`` parts are read for their weights and LayerNorms only."""
    q_cross = layer_norm(multi_head(block.cross, q, d, heads, printed) + q, block.cross.norm)  # Eq. 17
    q_self = layer_norm(multi_head(block.self_attention, q_cross, q_cross, heads, printed) + q_cross,
                        block.self_attention.norm)  # Eq. 18
    ffn = feed_forward(block.ffn, q_self, act, printed)
    if printed.norm_before_residual:
        return layer_norm(ffn, block.ffn.norm) + q_self  # Eq. 19 as printed
    return layer_norm(ffn + q_self, block.ffn.norm)  # Eq. 19 as BERT computes a layer


def pooled(hidden: Tensor, kind: str) -> Tensor:
    """Pool of Eq. 22 over one query's (q, h) rows, all real: the [CLS] row (``cls``) or their mean (``mean``)."""
    if kind == "cls":
        return hidden[0]
    if kind == "mean":
        return hidden.sum(0) / hidden.shape[0]
    raise ValueError(kind)


def head_score(head, vector: Tensor) -> float:
    """w^T v (Eq. 22: a 1-output head without bias), or logit_1 - logit_0 of the 2-class head."""
    out = linear(vector, head)
    return float(out[0]) if out.shape[-1] == 1 else float(out[1] - out[0])


def judge(model, q: Tensor, d: Tensor, pool: str, printed: Printed = BERT) -> float:
    """T_judge(Q, D) (Eqs. 17-22) of one query's (q, h) and one document's (d, h) real rows: the K blocks of
    `model` (read for ``blocks``, ``score`` and T_doc's config), then the pool and the head."""
    config = model.doc_encoder.config
    hidden = q
    for block in model.blocks:  # Eqs. 20-21
        hidden = judge_block(block, hidden, d, config.num_attention_heads, config.hidden_act, printed)
    return head_score(model.score, pooled(hidden, pool))


def encode(bert, tokens: Tensor) -> Tensor:
    """(n, h) last hidden states of a ``BertModel`` on one unpadded row of token ids."""
    with torch.no_grad():
        return bert(input_ids=tokens[None]).last_hidden_state[0]


def model_score(model, query_tokens: Tensor, doc_tokens: Tensor, pool: str, printed: Printed = BERT) -> float:
    """score(qry, doc) (Eqs. 6-8, 22) of one unpadded query row and one unpadded document row: Q = T_qry(qry) and
    D = T_doc(doc) by `model`'s ``query_encoder`` and ``doc_encoder`` (``BertModel`` s), then `judge`."""
    q, d = encode(model.query_encoder, query_tokens), encode(model.doc_encoder, doc_tokens)
    return judge(model, q, d, pool, printed)
