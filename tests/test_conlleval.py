"""conlleval scoring against seqeval, and the refusal of tags that are not IOB."""
import warnings

import pytest

from bert_jax.tasks.ner import conlleval


def test_valid_tags_score_as_seqeval_and_other_tags_are_refused():
  seqeval = pytest.importorskip(
      "seqeval.metrics", reason="needs seqeval (pip install -e .[test]) to compare with")
  valid = [([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "B-LOC"]]),
           ([["I-PER", "B-PER", "O", "I-LOC"]], [["I-PER", "I-PER", "O", "B-LOC"]]),
           ([["B-ORG", "I-MISC"], ["O"]], [["B-ORG", "I-ORG"], ["I-PER"]])]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # seqeval warns on sentences without entities
    for gold, pred in valid:
      assert conlleval.evaluate(gold, pred)["f1"] == pytest.approx(
          seqeval.f1_score(gold, pred, zero_division=0)), (gold, pred)
    # seqeval (like conlleval.pl) reads IOBES: these are the same entities there, f1 1.0;
    # bert_jax read S-LOC as a chunk from word 0 and scored 0.5.
    iobes, iob2 = [["B-PER", "E-PER", "O", "S-LOC"]], [["B-PER", "I-PER", "O", "B-LOC"]]
    assert seqeval.f1_score(iobes, iob2) == 1.0
  with pytest.raises(ValueError, match=r"^gold sentence 0, word 1: tag 'E-PER' is not IOB"):
    conlleval.evaluate(iobes, iob2)
  with pytest.raises(ValueError, match=r"^predicted sentence 1, word 0: tag 'PER' is not IOB"):
    conlleval.evaluate([["O"], ["O"]], [["O"], ["PER"]])
  for tag in ("S-LOC", "E-PER", "PER", "B-", "b-PER", "B_PER", ""):
    with pytest.raises(ValueError, match=rf"word 0: tag '{tag}' is not IOB"):
      conlleval.chunks([tag])
