"""Entity-level precision, recall and F1 as CoNLL's conlleval script defines them.

A chunk starts at B-X, at I-X after O, or at any tag after another type, and ends before
B-*, O, another type or the sentence end, so IOB1 and IOB2 read alike. A predicted chunk is
correct when a gold chunk has the same type, start and end. Values are fractions in [0, 1]
(conlleval prints percentages), as seqeval's default mode. Only O, B-X and I-X are scored:
other tags (IOBES's S-/E-) raise a ValueError, as the CoNLL reader refuses them anyway.
"""
import collections
import re
from typing import Sequence

# The tags scored: O, B-TYPE, I-TYPE (IOB1 and IOB2), as ner.read_conll reads them.
IOB_TAG = re.compile(r"^(O|[BI]-\S+)$")


def split_tag(tag: str) -> tuple[str, str]:
  """'B-PER' -> ('B', 'PER'); 'O' -> ('O', ''); ValueError for a tag not O, B-X or I-X."""
  if not IOB_TAG.match(tag):
    raise ValueError(f"tag {tag!r} is not IOB (O, B-TYPE or I-TYPE; IOB1 and IOB2 are "
                     "scored, IOBES S-/E- tags and bare types are not)")
  if tag == "O":
    return "O", ""
  return tag[0], tag[2:]


def chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
  """(type, first word, last word) of every chunk of one sentence's tags, in order."""
  found = []
  prev_tag, prev_type, start = "O", "", 0
  for i, tag in enumerate(list(tags) + ["O"]):
    try:
      kind, typ = split_tag(tag)
    except ValueError as e:
      raise ValueError(f"word {i}: {e}") from None
    ends = (prev_tag != "O" and (kind in ("B", "O") or prev_type != typ))
    starts = kind == "B" or (kind == "I" and (prev_tag == "O" or prev_type != typ))
    if ends:
      found.append((prev_type, start, i - 1))
    if starts:
      start = i
    prev_tag, prev_type = kind, typ
  return found


def _sentence_chunks(side: str, index: int, tags: Sequence[str]) -> set:
  """`chunks(tags)` as a set; a non-IOB tag's error names the side and sentence."""
  try:
    return set(chunks(tags))
  except ValueError as e:
    raise ValueError(f"{side} sentence {index}, {e}") from None


def evaluate(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
  """conlleval's scores: precision, recall, f1, accuracy, and f1_<TYPE> for every type.

  A ValueError names the sentence and word of a non-IOB tag or of mismatched lengths.
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
    gold_chunks, pred_chunks = _sentence_chunks("gold", i, g), _sentence_chunks("predicted", i, p)
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
