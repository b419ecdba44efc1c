"""Entity-level precision, recall and F1 as CoNLL's conlleval script defines them.

An entity (chunk) is a maximal run of tagged words, read with conlleval's
startOfChunk / endOfChunk rules for IOB tags, which read IOB1 and IOB2 alike:

  a chunk starts at  B-X (always); I-X after O; any X after a tag of another type
  a chunk ends before B-*; O; a tag of another type (and at the sentence end)

so `I-PER I-PER` (IOB1) and `B-PER I-PER` (IOB2) are one PER chunk, `I-PER B-PER`
two, `O I-PER` starts a chunk and `B-PER I-LOC` is a PER then a LOC chunk. A
predicted chunk is correct when a gold chunk has the same type, start and end.
precision = correct / predicted chunks, recall = correct / gold chunks,
f1 = 2PR / (P + R) (0 when P + R is 0, and P or R is 0 without chunks);
accuracy is the fraction of words whose predicted tag equals the gold tag. Values
are fractions in [0, 1] (conlleval prints percentages), the scale seqeval's
default (non-strict) mode gives.
"""
import collections
from typing import Sequence


def split_tag(tag: str) -> tuple[str, str]:
  """'B-PER' -> ('B', 'PER'); 'O' -> ('O', '')."""
  if tag == "O":
    return "O", ""
  return tag[0], tag[2:]


def chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
  """The entities of one sentence, by conlleval's rules.

  Args:
    tags: the IOB tags of the sentence's words ('O', 'B-X', 'I-X').

  Returns:
    (type, first word, last word) of every chunk, in order.
  """
  found = []
  prev_tag, prev_type, start = "O", "", 0
  for i, tag in enumerate(list(tags) + ["O"]):
    kind, typ = split_tag(tag)
    ends = (prev_tag != "O" and (kind in ("B", "O") or prev_type != typ))
    starts = kind == "B" or (kind == "I" and (prev_tag == "O" or prev_type != typ))
    if ends:
      found.append((prev_type, start, i - 1))
    if starts:
      start = i
    prev_tag, prev_type = kind, typ
  return found


def evaluate(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
  """conlleval's scores of predicted tags against gold tags.

  Args:
    gold: per sentence, the gold tag of each word.
    predicted: per sentence, the predicted tag of each word (same lengths).

  Returns:
    {'precision', 'recall', 'f1', 'accuracy'} over all entities / words, and
    'f1_<TYPE>' for every entity type in gold or predictions.

  Raises:
    ValueError: the sentences or their lengths differ.
  """
  if len(gold) != len(predicted):
    raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
  correct, n_gold, n_pred = (collections.Counter() for _ in range(3))
  words = right = 0
  for i, (g, p) in enumerate(zip(gold, predicted)):
    if len(g) != len(p):
      raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
    words += len(g)
    right += sum(a == b for a, b in zip(g, p))
    gold_chunks, pred_chunks = set(chunks(g)), set(chunks(p))
    n_gold.update(c[0] for c in gold_chunks)
    n_pred.update(c[0] for c in pred_chunks)
    correct.update(c[0] for c in gold_chunks & pred_chunks)

  def prf(c, ng, np_):
    precision = c / np_ if np_ else 0.0
    recall = c / ng if ng else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1

  precision, recall, f1 = prf(sum(correct.values()), sum(n_gold.values()), sum(n_pred.values()))
  results = {"precision": precision, "recall": recall, "f1": f1,
             "accuracy": right / words if words else 0.0}
  for typ in sorted(set(n_gold) | set(n_pred)):
    results[f"f1_{typ}"] = prf(correct[typ], n_gold[typ], n_pred[typ])[2]
  return results
