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

Only O, B-TYPE and I-TYPE are scored: any other tag (IOBES's S-/E-, a bare type
such as PER) is refused with a ValueError naming the sentence, word and tag.
conlleval.pl and seqeval read S- and E- as IOBES chunk marks, which the CoNLL reader
(`ner.read_conll`) refuses, so scoring them here would score what is never trained.
"""
import collections
import re
from typing import Sequence

# The tags scored: O, B-TYPE, I-TYPE (IOB1 and IOB2), as ner.read_conll reads them.
IOB_TAG = re.compile(r"^(O|[BI]-\S+)$")


def split_tag(tag: str) -> tuple[str, str]:
  """'B-PER' -> ('B', 'PER'); 'O' -> ('O', '').

  Raises:
    ValueError: the tag is not O, B-TYPE or I-TYPE.
  """
  if not IOB_TAG.match(tag):
    raise ValueError(f"tag {tag!r} is not IOB (O, B-TYPE or I-TYPE; IOB1 and IOB2 are "
                     "scored, IOBES S-/E- tags and bare types are not)")
  if tag == "O":
    return "O", ""
  return tag[0], tag[2:]


def chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
  """The entities of one sentence, by conlleval's rules.

  Args:
    tags: the IOB tags of the sentence's words ('O', 'B-X', 'I-X').

  Returns:
    (type, first word, last word) of every chunk, in order.

  Raises:
    ValueError: `word N: tag ... is not IOB (...)`.
  """
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
  """conlleval's scores of predicted tags against gold tags.

  Args:
    gold: per sentence, the gold tag of each word.
    predicted: per sentence, the predicted tag of each word (same lengths).

  Returns:
    {'precision', 'recall', 'f1', 'accuracy'} over all entities / words, and
    'f1_<TYPE>' for every entity type in gold or predictions.

  Raises:
    ValueError: the sentences or their lengths differ, or a tag is not IOB
      (`predicted sentence 3, word 1: tag 'S-LOC' is not IOB (...)`).
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
