"""MVA (Zhou and Devlin 2021) written out by hand from the paper, for tests to hold `mva.model` against: nothing here
calls `mva.model`'s functions; a model is read only for its weights and its settings.

- The encoder is the ``BertModel`` itself, run on one unpadded input at a time (the reference encoder).
- Pooling (Sec. 2.2, with `mva.model`'s documented choices): a side's real positions are [CLS] and its words, not
  the closing [SEP]; First-K keeps the first K of them; K [CLS] embeddings take the place of the input's [CLS] and
  are fed to the encoder as ``inputs_embeds``, its first K outputs kept; temporal pooling concatenates every rho
  consecutive real positions, a last incomplete group filled with zero vectors.
- The score (Sec. 2.1): Q_K = X W_QK, Q_V = X W_QV, D_K = Y W_DK, D_V = Y W_DV as matrix products (``nn.Linear``
  keeps W transposed: X W is ``X @ weight.T``); for each query timestep i and head, softmax(Q_K,i . D_K,j / sqrt(p))
  over the document timesteps j, its weighted sum of D_V, and the dot product with Q_V,i; the heads' dot products
  summed (Table 4's H heads of size p) and the mean taken over the q query timesteps, in Python floats.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def encoder_outputs(bert, tokens: Tensor) -> Tensor:
    """(n, h) last hidden states of one unpadded ``[CLS] ... [SEP]`` row of token ids."""
    with torch.no_grad():
        return bert(input_ids=tokens[None]).last_hidden_state[0]


def real_positions(bert, tokens: Tensor) -> Tensor:
    """(n - 1, h): the outputs at [CLS] and the words, the [SEP] left out (Sec. 4's "one [CLS] token plus each actual
    (non-padding) token")."""
    return encoder_outputs(bert, tokens)[: len(tokens) - 1]


def first_k(bert, tokens: Tensor, k: int) -> Tensor:
    """First-K: the first K real positions (fewer where the input has fewer)."""
    return real_positions(bert, tokens)[:k]


def multiple_cls(bert, tokens: Tensor, cls: Tensor) -> Tensor:
    """K [CLS] embeddings `cls` (K, h) in place of the input's [CLS], fed as input embeddings: the first K outputs."""
    words = bert.embeddings.word_embeddings.weight[tokens[1:]]  # the words and [SEP], looked up by hand
    with torch.no_grad():
        out = bert(inputs_embeds=torch.cat([cls, words])[None]).last_hidden_state[0]
    return out[: len(cls)]


def temporal(bert, tokens: Tensor, rho: int) -> Tensor:
    """Temporal pooling: every rho consecutive real positions concatenated (n / rho x rho h), the last group's missing
    positions zero vectors."""
    real = real_positions(bert, tokens)
    zero = torch.zeros_like(real[0])
    groups = []
    for start in range(0, len(real), rho):
        groups.append(torch.cat([real[start + j] if start + j < len(real) else zero for j in range(rho)]))
    return torch.stack(groups)


def pooled(bert, pooling, tokens: Tensor) -> Tensor:
    """One side's timesteps (t, width) under `pooling` (a `mva.model.SidePooling`, read for its kind, K, rho and
    [CLS] embeddings only)."""
    if pooling.kind == "all":
        return real_positions(bert, tokens)
    if pooling.kind == "first_k":
        return first_k(bert, tokens, pooling.timesteps)
    if pooling.kind == "cls":
        return multiple_cls(bert, tokens, pooling.cls.detach())
    if pooling.kind == "temporal":
        return temporal(bert, tokens, pooling.factor)
    raise ValueError(pooling.kind)


def query_projections(head, queries: Tensor) -> tuple[Tensor, Tensor]:
    """Q_K = X W_QK and Q_V = X W_QV, (q, Hp), of the query timesteps X (q, width)."""
    return queries @ head.query_key.weight.detach().T, queries @ head.query_value.weight.detach().T


def doc_projections(head, documents: Tensor) -> tuple[Tensor, Tensor]:
    """D_K = Y W_DK and D_V = Y W_DV, (d, Hp), of the document timesteps Y (d, width)."""
    return documents @ head.doc_key.weight.detach().T, documents @ head.doc_value.weight.detach().T


def score_projected(query_keys: Tensor, query_values: Tensor, doc_keys: Tensor, doc_values: Tensor, projection: int,
                    heads: int) -> float:
    """(1/q) sum_i sum_heads Q_V,i . softmax(Q_K,i D_K^T / sqrt(p)) D_V of (q, Hp) Q_K, Q_V and (d, Hp) D_K, D_V,
    every timestep given real, in Python floats."""
    qk, qv, dk, dv = (m.tolist() for m in (query_keys, query_values, doc_keys, doc_values))
    p, total = projection, 0.0
    for i in range(len(qk)):
        for head in range(heads):
            cols = range(head * p, (head + 1) * p)
            logits = [sum(qk[i][c] * dk[j][c] for c in cols) / math.sqrt(p) for j in range(len(dk))]
            top = max(logits)
            weights = [math.exp(logit - top) for logit in logits]
            norm = sum(weights)
            attended = {c: sum(weights[j] / norm * dv[j][c] for j in range(len(dv))) for c in cols}
            total += sum(qv[i][c] * attended[c] for c in cols)
    return total / len(qk)


def score(head, queries: Tensor, documents: Tensor) -> float:
    """Sec. 2.1's score of query timesteps X (q, width) and document timesteps Y (d, width) under `head` (a
    `mva.model.MultiVectorAttention`, read for its weights, p and H)."""
    return score_projected(*query_projections(head, queries), *doc_projections(head, documents), head.projection,
                           head.heads)


def model_score(model, query_tokens: Tensor, doc_tokens: Tensor) -> float:
    """The whole model by hand on one unpadded query row and one unpadded document row."""
    queries = pooled(model.bert, model.query_pooling, query_tokens)
    documents = pooled(model.bert, model.doc_pooling, doc_tokens)
    return score(model.head, queries, documents)
