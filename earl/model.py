"""EARL (Gao, Dai, Callan 2020) as a plain ``nn.Module``: T_doc and T_qry (Eqs. 9-16) are ``BertModel`` s without
pooler; K judge blocks (Eqs. 17-21) attend from the query tokens to the document's keys and values (what S2 stores,
Eq. 25); the score is w^T Pool(H_K) (Eq. 22). `build_earl` initialises from BERT (Sec. 3.4); Tied variants share
T_doc's first l layers as modules, the embeddings copied (as luyug/MORES ``modeling.MORES``).

Where the equations and BERT differ, BERT's computation (its copied weights were trained with it):
- Eq. 19 as ``LayerNorm(FFN(Q_self) + Q_self)`` (post-norm, as MORES's ``BertLayer`` s), not the LayerNorm first;
- GELU (``config.hidden_act``), not Eq. 4's ReLU; attention scaled by sqrt(d_model / h), per head, not sqrt(d_model);
- dropout on the attention probabilities and before each residual.
MORES's 2-class cross-entropy head is an option (``loss="cross_entropy"``: the score is the log-odds).
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.encoders.dropout import attention
from common.encoders.precision import full_precision
from earl import COPY_CROSS, LOSS, POOL, TIED

#: Pool of Eq. 22: the [CLS] position (ClsPool) or the mean over real query tokens (AvePool).
Pool = Literal["cls", "mean"]
#: Training losses: the paper's hinge loss (Sec. 3.4), or the 2-class cross-entropy (MORES's; the BERT ranker's).
Loss = Literal["hinge", "cross_entropy"]


class BlockAttention(nn.Module):
    """``LayerNorm(Dropout(MultiHead(X, K, V) W^O) + X)`` (Eqs. 2-3, 17-18), parameters named as BERT's."""

    def __init__(self, hidden_size: int, num_heads: int, dropout: float, attention_dropout: float, eps: float):
        super().__init__()
        self.num_heads, self.head_size = num_heads, hidden_size // num_heads
        self.query = nn.Linear(hidden_size, hidden_size)  # W_X of Eq. 3
        self.key = nn.Linear(hidden_size, hidden_size)  # W_Y
        self.value = nn.Linear(hidden_size, hidden_size)  # W_Z
        self.dense = nn.Linear(hidden_size, hidden_size)  # W^O of Eq. 2
        self.norm = nn.LayerNorm(hidden_size, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.attention_dropout = attention_dropout

    def heads(self, x: Tensor) -> Tensor:  # (B, n, h) -> (B, H, n, h / H)
        return x.unflatten(-1, (self.num_heads, self.head_size)).transpose(1, 2)

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, key_mask: Tensor) -> Tensor:
        """softmax(Q K^T / sqrt(h / H)) V per head (Eq. 1), `key_mask` True at real keys: (B, n, h) before W^O."""
        mask = key_mask[:, None, None, :]  # (B, 1, 1, m)
        p = self.attention_dropout if self.training else 0.0
        out = attention(self.heads(queries), self.heads(keys), self.heads(values), mask, p)  # (B, H, n, h / H)
        return out.transpose(1, 2).flatten(2)

    def output(self, attended: Tensor, residual: Tensor) -> Tensor:
        return self.norm(self.dropout(self.dense(attended)) + residual)

    def forward(self, x: Tensor, mask: Tensor, first_only: bool = False) -> Tensor:
        """Self-attention of `x` (B, n, h) under `mask` (Eq. 18): (B, n, h), or with `first_only` (B, 1, h)."""
        queries = x[:, :1] if first_only else x
        return self.output(self.attend(self.query(queries), self.key(x), self.value(x), mask), queries)


class FeedForward(nn.Module):
    """``LayerNorm(Dropout(act(x W_1 + b_1) W_2 + b_2) + x)``: Eqs. 4 and 19 as BERT computes them."""

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str, dropout: float, eps: float):
        super().__init__()
        from transformers.activations import ACT2FN

        self.intermediate = nn.Linear(hidden_size, intermediate_size)  # W_1, b_1
        self.output = nn.Linear(intermediate_size, hidden_size)  # W_2, b_2
        self.act = ACT2FN[activation]
        self.norm = nn.LayerNorm(hidden_size, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.dropout(self.output(self.act(self.intermediate(x)))) + x)


class JudgeBlock(nn.Module):
    """One judge block: query-to-document cross-attention, query self-attention, FFN (Eqs. 17-19)."""

    def __init__(self, config):
        super().__init__()
        h, eps = config.hidden_size, config.layer_norm_eps
        attention = (h, config.num_attention_heads, config.hidden_dropout_prob, config.attention_probs_dropout_prob, eps)
        self.cross = BlockAttention(*attention)
        self.self_attention = BlockAttention(*attention)
        self.ffn = FeedForward(h, config.intermediate_size, config.hidden_act, config.hidden_dropout_prob, eps)

    def keys_values(self, documents: Tensor) -> Tensor:
        """(D W_Y + b, D W_Z + b) of Eq. 24 side by side: the reference of `EARL.document_keys_values`."""
        return torch.cat([self.cross.key(documents), self.cross.value(documents)], dim=-1)

    def forward(self, hidden: Tensor, query_mask: Tensor, keys_values: Tensor, doc_mask: Tensor,
                cross_queries: Tensor | None = None, first_only: bool = False) -> Tensor:
        """H_i = Judge(H_{i-1}, D) for (B, q, h) `hidden`, (B, d, 2h) `keys_values`; `cross_queries`: H_{i-1} W_X if
        computed; `first_only`: H_i at [CLS] alone, (B, 1, h)."""
        keys, values = keys_values.chunk(2, dim=-1)
        queries = self.cross.query(hidden) if cross_queries is None else cross_queries
        crossed = self.cross.output(self.cross.attend(queries, keys, values, doc_mask), hidden)  # Eq. 17
        selfed = self.self_attention(crossed, query_mask, first_only)  # Eq. 18
        return self.ffn(selfed)  # Eq. 19

    @torch.no_grad()
    def copy_bert_layer(self, layer, copy_cross: bool) -> None:
        """Initialise from a ``BertLayer`` (Sec. 3.4); `copy_cross`: its self-attention into the cross-attention too."""
        targets = [self.self_attention] + ([self.cross] if copy_cross else [])
        source = layer.attention
        for target in targets:
            for name in ("query", "key", "value"):
                _copy(getattr(target, name), getattr(source.self, name))
            _copy(target.dense, source.output.dense)
            _copy(target.norm, source.output.LayerNorm)
        _copy(self.ffn.intermediate, layer.intermediate.dense)
        _copy(self.ffn.output, layer.output.dense)
        _copy(self.ffn.norm, layer.output.LayerNorm)


def _copy(target: nn.Module, source: nn.Module) -> None:
    """A Linear's or LayerNorm's weight and bias."""
    target.weight.copy_(source.weight)
    target.bias.copy_(source.bias)


def pool(hidden: Tensor, mask: Tensor, kind: str) -> Tensor:
    """Pool of Eq. 22 over (B, q, h) `hidden` with (B, q) `mask` (True at real tokens): (B, h)."""
    if kind == "cls":
        return hidden[:, 0]  # ClsPool: [CLS] is prepended to every query
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (B, q, 1)
    return (hidden * weights).sum(1) / weights.sum(1)  # AvePool


class EARL(nn.Module):
    """T_doc, T_qry and K judge blocks: `encode_documents` offline, `encode_queries` per query, `judge` per document."""

    def __init__(self, doc_encoder: nn.Module, query_encoder: nn.Module, blocks: nn.ModuleList, pool: Pool, loss: Loss):
        super().__init__()
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool must be cls or mean, got {pool!r}")
        if loss not in ("hinge", "cross_entropy"):
            raise ValueError(f"loss must be hinge or cross_entropy, got {loss!r}")
        self.doc_encoder, self.query_encoder, self.blocks, self.pool = doc_encoder, query_encoder, blocks, pool
        hidden = doc_encoder.config.hidden_size
        # Eq. 22: w^T Pool(H_K); MORES's 2-class head for its cross-entropy
        self.score = nn.Linear(hidden, 2) if loss == "cross_entropy" else nn.Linear(hidden, 1, bias=False)

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def hidden_size(self) -> int:
        return self.doc_encoder.config.hidden_size

    def encode_documents(self, tokens: Tensor, mask: Tensor) -> Tensor:
        """D = T_doc(doc) (Eqs. 9-13): (B, d) token ids with [CLS] first and their mask -> (B, d, h)."""
        return self.doc_encoder(input_ids=tokens, attention_mask=mask).last_hidden_state

    def encode_queries(self, tokens: Tensor, mask: Tensor) -> Tensor:
        """Q = T_qry(qry) (Eqs. 14-16): (B, q) -> (B, q, h)."""
        return self.query_encoder(input_ids=tokens, attention_mask=mask).last_hidden_state

    def document_keys_values(self, documents: Tensor, out: Tensor | None = None) -> Tensor:
        """D' of Eq. 25, (B, d, h) -> (B, d, 2 K h), one product of the stacked weights (`out`: inference buffer)."""
        keys_values = [(block.cross.key, block.cross.value) for block in self.blocks]
        weight = torch.cat([layer.weight for pair in keys_values for layer in pair])  # (2 K h, h)
        bias = torch.cat([layer.bias for pair in keys_values for layer in pair])  # (2 K h,)
        if out is None:
            return F.linear(documents, weight, bias)
        torch.addmm(bias, documents.flatten(0, 1), weight.t(), out=out.view(-1, len(weight)))  # (B d, 2 K h)
        return out

    def judge(self, queries: Tensor, query_mask: Tensor, keys_values: Tensor, doc_mask: Tensor,
              query_index: Tensor | None = None) -> Tensor:
        """Scores (B,) of B documents from their (B, d, 2 K h) `keys_values` and (B, d) `doc_mask` against
        `queries` (Bq, q, h) ``[query_index]`` (default: query j); with ClsPool the last block computes [CLS] alone."""
        h = self.hidden_size
        first = self.blocks[0].cross.query(queries)  # (Bq, q, h): query-only
        if query_index is not None:
            # index_select, not x[query_index]: its backward adds the gradients in a fixed order
            queries, query_mask, first = (x.index_select(0, query_index) for x in (queries, query_mask, first))
        hidden = queries
        for i, block in enumerate(self.blocks):  # Eqs. 20-21
            hidden = block(hidden, query_mask, keys_values[..., 2 * h * i : 2 * h * (i + 1)], doc_mask,
                           cross_queries=first if i == 0 else None,
                           first_only=self.pool == "cls" and i == self.num_blocks - 1)
        # Eq. 22, in the parameters' precision under autocast too (`common.encoders.precision`)
        out = full_precision(self.score, pool(hidden, query_mask, self.pool), dtype=self.score.weight.dtype)
        return out[:, 1] - out[:, 0] if out.shape[-1] == 2 else out.squeeze(-1)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """End-to-end scores (B,) of an `earl.data` batch."""
        doc_mask = batch["doc_mask"].bool()
        documents = self.encode_documents(batch["doc_tokens"], batch["doc_mask"])  # (B, d, h)
        queries = self.encode_queries(batch["query_tokens"], batch["query_mask"])  # (Bq, q, h)
        return self.judge(queries, batch["query_mask"].bool(), self.document_keys_values(documents), doc_mask,
                          batch["query_index"])


def build_earl(bert, *, num_blocks: int, query_layers: int | None = None, tied: bool = TIED,
               copy_from_bert: bool = True, copy_cross: bool = COPY_CROSS, pool: Pool = POOL, loss: Loss = LOSS) -> EARL:
    """EARL over an L-layer ``BertModel`` `bert` (T_doc), Sec. 3.4: T_qry its first l = `query_layers` (default L - K;
    `tied`: the very modules), judge block i from layer l + i (`copy_from_bert`), else as BERT initialises a layer."""
    from transformers import BertModel

    layers = bert.config.num_hidden_layers
    query_layers = layers - num_blocks if query_layers is None else query_layers
    if num_blocks < 1:
        raise ValueError(f"EARL needs at least one judge block, got {num_blocks}")
    if not 0 <= query_layers <= layers:
        raise ValueError(f"T_qry takes l of T_doc's {layers} layers: l = {query_layers} is out of range")
    if copy_from_bert and query_layers + num_blocks > layers:
        raise ValueError(f"judge blocks copy BERT layers l + 1 .. l + K: l + K = {query_layers + num_blocks} > "
                         f"{layers} layers")
    query_config = copy.deepcopy(bert.config)
    query_config.num_hidden_layers = query_layers
    query_encoder = BertModel(query_config, add_pooling_layer=False).to(bert.dtype)  # BERT's dtype: exact copies
    query_encoder.embeddings.load_state_dict(bert.embeddings.state_dict())
    if tied:
        query_encoder.encoder.layer = nn.ModuleList(bert.encoder.layer[:query_layers])  # the same modules
    else:
        for i in range(query_layers):
            query_encoder.encoder.layer[i].load_state_dict(bert.encoder.layer[i].state_dict())

    blocks = nn.ModuleList(JudgeBlock(bert.config) for _ in range(num_blocks)).to(bert.dtype)
    blocks.apply(bert._init_weights)  # BERT's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorms
    if copy_from_bert:
        for i, block in enumerate(blocks):
            block.copy_bert_layer(bert.encoder.layer[query_layers + i], copy_cross=copy_cross)
    model = EARL(bert, query_encoder, blocks, pool=pool, loss=loss)
    model.score.to(bert.dtype).apply(bert._init_weights)
    return model
