"""Sentence-embedding data and objectives (Sentence-BERT; losses as sentence-transformers').

Scored pairs are `sentence1<TAB>sentence2<TAB>score` (optional header) or the STS Benchmark
release layout, told from the first line; training scores are divided by `score_max`, as
sentence-transformers' STS-B example does. Tuples are `anchor<TAB>positive[<TAB>negative]`.
Losses: cosent (CoSENTLoss, scale 20, one loss per batch spread over its rows), cosine
(CosineSimilarityLoss), mnrl (MultipleNegativesRankingLoss, in-batch negatives), triplet
(TripletLoss, euclidean, margin 5).
"""
import dataclasses
from typing import Optional

from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.inference import embedding
from bert_jax.modeling import pooling
from bert_jax.tasks.glue import data as glue

LOSSES = ("cosent", "cosine", "mnrl", "triplet")
SCORED_LOSSES = ("cosent", "cosine")  # trained on scored pairs; mnrl / triplet on tuples
# Losses that compare the examples of a batch: its rows stay as randomly drawn (not grouped
# by length), and it is not split into microbatches.
IN_BATCH_LOSSES = ("cosent", "mnrl")
# Columns of the STS Benchmark release: genre filename year id score sentence1 sentence2.
_STS_RELEASE = {"score": 4, "sentence1": 5, "sentence2": 6, "columns": 7}


@dataclasses.dataclass
class SentenceRows:
  """Texts read from a file: 2 or 3 sentences per example, gold scores (or None), the path."""
  texts: list
  scores: Optional[np.ndarray]
  path: str


def _lines(path: str) -> list:
  if not epath.Path(path).is_file():
    raise FileNotFoundError(f"sentence-embedding data: no file {path}")
  lines = list(glue.read_lines(path))
  if not lines:
    raise ValueError(f"{path}: the file is empty")
  return lines


def read_scored_pairs(path: str) -> SentenceRows:
  """Scored pairs from `path`; ValueError names an empty file or a bad line."""
  lines = _lines(path)
  first = lines[0][1].split("\t")
  if len(first) == 3:
    cols, layout = {"score": 2, "sentence1": 0, "sentence2": 1, "columns": 3}, "s1<TAB>s2<TAB>score"
    if first[2].strip().lower() == "score":
      lines = lines[1:]  # a header
  elif len(first) >= _STS_RELEASE["columns"]:
    cols, layout = _STS_RELEASE, "the STS Benchmark release (genre filename year id score s1 s2)"
  else:
    raise ValueError(f"{path}:{lines[0][0]}: expected 'sentence1<TAB>sentence2<TAB>score' or the "
                     f"STS Benchmark release layout (7 or more columns), found {len(first)} "
                     "column(s)")
  texts, scores = [], []
  for number, line in lines:
    parts = line.split("\t")
    exact = cols["columns"] == 3
    if len(parts) < cols["columns"] or (exact and len(parts) != 3):
      raise ValueError(f"{path}:{number}: expected {layout} ({cols['columns']} columns), found "
                       f"{len(parts)}")
    try:
      score = float(parts[cols["score"]])
    except ValueError:
      raise ValueError(f"{path}:{number}: score {parts[cols['score']]!r} is not a number "
                       f"(layout {layout})") from None
    if not np.isfinite(score):
      raise ValueError(f"{path}:{number}: score {score} is not finite")
    texts.append((parts[cols["sentence1"]], parts[cols["sentence2"]]))
    scores.append(score)
  if not texts:
    raise ValueError(f"{path}: no pairs (only a header)")
  return SentenceRows(texts, np.asarray(scores, np.float64), path)


def _scored(lines: list) -> bool:
  """Whether the third column is a number on every line (a header's 'score' aside)."""
  def number(text: str) -> bool:
    try:
      return np.isfinite(float(text))
    except ValueError:
      return False
  thirds = [line.split("\t")[2:3] for _, line in lines]
  if thirds and thirds[0] and thirds[0][0].strip().lower() == "score":
    thirds = thirds[1:]
  return bool(thirds) and all(t and number(t[0]) for t in thirds)


def read_tuples(path: str, need_negative: bool) -> SentenceRows:
  """Tuples from `path`; ValueError names an empty file, a bad line, or a missing negative."""
  lines = _lines(path)
  width = len(lines[0][1].split("\t"))
  if width not in (2, 3):
    raise ValueError(f"{path}:{lines[0][0]}: expected 'anchor<TAB>positive[<TAB>negative]', "
                     f"found {width} column(s)")
  if need_negative and width != 3:
    raise ValueError(f"{path}: the triplet loss needs 'anchor<TAB>positive<TAB>negative' lines, "
                     f"found {width} columns")
  if width == 3 and _scored(lines):
    raise ValueError(f"{path}: its third column is a score on every line (sentence1<TAB>"
                     "sentence2<TAB>score), not a negative sentence: train scored pairs with "
                     "loss=cosent or cosine, or give anchor<TAB>positive[<TAB>negative] lines")
  texts = []
  for number, line in lines:
    parts = line.split("\t")
    if len(parts) != width:
      raise ValueError(f"{path}:{number}: {len(parts)} columns, but the first line has {width} "
                       "(anchor<TAB>positive[<TAB>negative] on every line)")
    texts.append(tuple(parts))
  return SentenceRows(texts, None, path)


def encode(tokenizer, rows: SentenceRows, max_seq_length: int) -> tuple[dict, int]:
  """Each sentence as [CLS] text [SEP], truncated: (input_ids, input_mask, segment_ids int32
  [n, k, max_seq_length] plus `scores` for scored pairs, the number truncated)."""
  n, k = len(rows.texts), len(rows.texts[0])
  flat = [t for example in rows.texts for t in example]
  ids, segs, truncated = embedding.encode(tokenizer, flat, max_seq_length)
  arrays = {"input_ids": np.full((n * k, max_seq_length), tokenizer.pad_id, np.int32),
            "input_mask": np.zeros((n * k, max_seq_length), np.int32),
            "segment_ids": np.zeros((n * k, max_seq_length), np.int32)}
  for i, (x, s) in enumerate(zip(ids, segs)):
    arrays["input_ids"][i, :len(x)], arrays["segment_ids"][i, :len(x)] = x, s
    arrays["input_mask"][i, :len(x)] = 1
  arrays = {key: v.reshape(n, k, max_seq_length) for key, v in arrays.items()}
  if rows.scores is not None:
    arrays["scores"] = rows.scores.astype(np.float32)
  return arrays, truncated


def cosine(u: jax.Array, v: jax.Array) -> jax.Array:
  """Row-wise cosine similarity of [batch, dim] arrays -> [batch]."""
  return jnp.sum(pooling.l2_normalize(u) * pooling.l2_normalize(v), axis=-1)


def cosent_loss(u: jax.Array, v: jax.Array, scores: jax.Array, scale: float) -> jax.Array:
  """CoSENT over the batch (a scalar); pairs of equal score contribute nothing."""
  s = cosine(u, v) * scale  # [batch]
  diff = s[:, None] - s[None, :]  # [batch, batch]: s_i - s_j
  ranked = scores[:, None] < scores[None, :]  # pair i should be less similar than pair j
  terms = jnp.where(ranked, diff, -1e12).reshape(-1)
  return jax.nn.logsumexp(jnp.concatenate([jnp.zeros((1,), terms.dtype), terms]))


def mnrl_loss(anchors: jax.Array, candidates: jax.Array, scale: float) -> jax.Array:
  """In-batch negatives: anchors [b, dim], candidates [c >= b, dim] (positives first,
  then negatives) -> cross-entropy [b] with candidate i the target of anchor i."""
  logits = scale * pooling.l2_normalize(anchors) @ pooling.l2_normalize(candidates).T  # [b, c]
  return optax.softmax_cross_entropy_with_integer_labels(logits, jnp.arange(anchors.shape[0]))


def triplet_loss(a: jax.Array, p: jax.Array, n: jax.Array, margin: float) -> jax.Array:
  """max(|a - p| - |a - n| + margin, 0) [b], euclidean as torch's pairwise_distance (eps 1e-6)."""
  dist = lambda x, y: jnp.linalg.norm(x - y + 1e-6, axis=-1)  # noqa: E731
  return jax.nn.relu(dist(a, p) - dist(a, n) + margin)


def loss_fn(loss: str, scale: float, margin: float):
  """(embeddings [b, k, dim], batch) -> per-example loss [b] for a loss in LOSSES."""
  def per_example(emb, batch):
    emb = emb.astype(jnp.float32)
    b = emb.shape[0]
    if loss == "cosent":
      return jnp.full((b,), cosent_loss(emb[:, 0], emb[:, 1], batch["scores"], scale))
    if loss == "cosine":
      return jnp.square(cosine(emb[:, 0], emb[:, 1]) - batch["scores"])
    if loss == "mnrl":
      candidates = jnp.concatenate([emb[:, i] for i in range(1, emb.shape[1])])
      return mnrl_loss(emb[:, 0], candidates, scale)
    if loss == "triplet":
      return triplet_loss(emb[:, 0], emb[:, 1], emb[:, 2], margin)
    raise ValueError(f"unknown loss {loss!r}; known: {LOSSES}")
  return per_example
