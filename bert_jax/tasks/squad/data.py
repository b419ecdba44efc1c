"""SQuAD v1.1 / v2.0 examples: the JSON files (or TFDS), read as Google's run_squad.py reads
them, and back to the official evaluation JSON.

Contexts are split on whitespace and a training answer is located by answer_start (skipped and
counted with a warning when the words do not hold it). Two deliberate differences from Google's
code: a training question with several answers trains on its first, and an answer_start outside
the context is skipped like any unfound answer (Google's code raises).
"""
import dataclasses
import json
import logging
from typing import Optional, Sequence

from etils import epath

@dataclasses.dataclass
class SquadExample:
  """One question on one context.

  Attributes:
    answers: every gold answer text (evaluation; empty when impossible).
    orig_answer_text: training target ('' when impossible, None for eval).
    start_position, end_position: the target's doc tokens (-1 when impossible).
    answer_start: the target's first character in `context` (None: impossible or eval).
  """
  qas_id: str
  question_text: str
  doc_tokens: list
  answers: list
  is_impossible: bool = False
  orig_answer_text: Optional[str] = None
  start_position: Optional[int] = None
  end_position: Optional[int] = None
  context: Optional[str] = None
  answer_start: Optional[int] = None


def _is_whitespace(c: str) -> bool:
  return c in (" ", "\t", "\r", "\n") or ord(c) == 0x202F


def split_context(context: str):
  """(doc_tokens, char_to_word_offset) as run_squad: whitespace-separated tokens and per
  character its token (whitespace maps to the token before it, -1 before the first)."""
  doc_tokens, char_to_word_offset = [], []
  previous_is_whitespace = True
  for c in context:
    if _is_whitespace(c):
      previous_is_whitespace = True
    else:
      if previous_is_whitespace:
        doc_tokens.append(c)
      else:
        doc_tokens[-1] += c
      previous_is_whitespace = False
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


def _make_examples(records, is_training: bool, source: str):
  """(SquadExamples, skipped ids) from records (id, question, context, answers, is_impossible)."""
  examples, skipped = [], []
  split_cache = {}
  for record in records:
    context = record["context"]
    if context not in split_cache:
      split_cache = {context: split_context(context)}  # Questions come grouped by context.
    doc_tokens, char_to_word_offset = split_cache[context]
    answers = record["answers"]
    for a in answers:
      if not isinstance(a, dict) or not isinstance(a.get("text"), str):
        raise ValueError(f"{source}: question {record['id']!r}: an answer needs a 'text' string, "
                         f"got {a!r}")
    is_impossible = bool(record.get("is_impossible", False))
    example = SquadExample(
        qas_id=record["id"], question_text=record["question"], doc_tokens=doc_tokens,
        answers=[a["text"] for a in answers], is_impossible=is_impossible, context=context)
    if is_training:
      if is_impossible:
        example.orig_answer_text, example.start_position, example.end_position = "", -1, -1
      else:
        if not answers:
          raise ValueError(f"{source}: question {record['id']!r} has no answer and is not "
                           "marked is_impossible")
        answer = answers[0]
        offset = answer.get("answer_start")
        if isinstance(offset, bool) or not isinstance(offset, int):
          raise ValueError(f"{source}: question {record['id']!r}: answer_start must be an integer "
                           f"character offset, got {offset!r}")
        text = answer["text"]
        end_char = offset + len(text) - 1
        found = False
        if text and 0 <= offset and end_char < len(char_to_word_offset):
          start, end = char_to_word_offset[offset], char_to_word_offset[end_char]
          actual = " ".join(doc_tokens[start:end + 1])
          found = start >= 0 and actual.find(" ".join(text.split())) != -1
        if not found:
          logging.warning("%s: could not find answer %r at answer_start %d of question %s; "
                          "skipped", source, text, offset, record["id"])
          skipped.append(record["id"])
          continue
        example.orig_answer_text, example.start_position, example.end_position = (
            text, start, end)
        example.answer_start = offset
    examples.append(example)
  if skipped:
    logging.warning("%s: skipped %d of %d training questions whose answer could not be "
                    "found in the context", source, len(skipped), len(examples) + len(skipped))
  return examples, skipped


def examples_from_texts(questions: Sequence[str], contexts: Sequence[str]) -> list[SquadExample]:
  """Prediction examples of questions[i] over contexts[i] (ids 'q0', ...); ValueError if the
  counts differ."""
  if len(questions) != len(contexts):
    raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts; give one "
                     "context per question")
  records = [{"id": f"q{i}", "question": q, "context": c, "answers": []}
             for i, (q, c) in enumerate(zip(questions, contexts))]
  return _make_examples(records, False, "examples_from_texts")[0]


def _json_records(dataset: list):
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        yield {"id": qa["id"], "question": qa["question"], "context": paragraph["context"],
               "answers": qa.get("answers", []),
               "is_impossible": qa.get("is_impossible", False)}


def article_slice(text: str, key: str) -> slice:
  """A config value 'start:stop' (either may be empty; '' = all) as a slice; ValueError names
  `key`."""
  if not text:
    return slice(None)
  parts = text.split(":")
  if len(parts) != 2 or not all(p.strip().lstrip("-").isdigit() or not p.strip() for p in parts):
    raise ValueError(f"config.{key}={text!r}: expected 'start:stop' article numbers, e.g. "
                     "':18' or '18:'")
  return slice(*(int(p) if p.strip() else None for p in parts))


def load_json(path: str, articles: slice = slice(None)) -> dict:
  """A SQuAD JSON file with only `articles` of its 'data'; ValueError when unreadable, not
  SQuAD, or no article is selected."""
  try:
    data = json.loads(epath.Path(path).read_text(encoding="utf-8"))
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"cannot read SQuAD file {path}: {e}") from e
  if not isinstance(data, dict) or "data" not in data:
    raise ValueError(f"{path}: not a SQuAD file (no top-level 'data' list)")
  if articles != slice(None):
    n = len(data["data"])
    data = dict(data, data=data["data"][articles])
    if not data["data"]:
      raise ValueError(f"{path}: articles {articles.start}:{articles.stop} select none of its "
                       f"{n} articles")
  return data


def read_squad_json(path: str, is_training: bool, articles: slice = slice(None)):
  """(examples in file order, ids of training questions skipped because answer_start does not
  match) of a SQuAD JSON file; is_training locates each first answer."""
  data = load_json(path, articles)
  try:
    records = list(_json_records(data["data"]))
  except (KeyError, TypeError) as e:
    raise ValueError(f"{path}: malformed SQuAD structure, missing key {e}") from e
  examples, skipped = _make_examples(records, is_training, path)
  logging.info("SQuAD %s: %d questions, %d examples", path, len(records), len(examples))
  return examples, skipped


def read_squad_tfds(version: str, split: str, tfds_data_dir: str, is_training: bool):
  """A prepared TFDS `squad/v1.1` or `squad/v2.0` split (no download), as `read_squad_json`."""
  from bert_jax.runtime import cpu_tensorflow  # pylint: disable=g-import-not-at-top
  tfds = cpu_tensorflow.import_tfds()
  name = f"squad/v{version.lstrip('v')}"
  try:
    ds = tfds.load(name, split=split, data_dir=tfds_data_dir or None, download=False)
  except Exception as e:  # TFDS raises several types for missing data.
    raise FileNotFoundError(cpu_tensorflow.not_prepared(
        f"{name} (split {split!r})", tfds_data_dir, "tfds_data_dir")) from e
  records = (record_from_tfds(ex) for ex in tfds.as_numpy(ds))
  return _make_examples(records, is_training, f"TFDS {name}/{split}")


def record_from_tfds(features: dict) -> dict:
  """One TFDS squad example (numpy) as a question record."""
  def text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)

  answers = features["answers"]
  return {
      "id": text(features["id"]),
      "question": text(features["question"]),
      "context": text(features["context"]),
      "answers": [{"text": text(t), "answer_start": int(s)}
                  for t, s in zip(answers["text"], answers["answer_start"])],
      "is_impossible": bool(features.get("is_impossible", False)),
  }


def to_eval_json(examples: Sequence[SquadExample], version: str) -> dict:
  """A SQuAD JSON of the examples' questions and gold answers, for squad_eval."""
  qas = [{"id": ex.qas_id, "question": ex.question_text,
          "answers": [{"text": a} for a in ex.answers]} for ex in examples]
  if version.lstrip("v") == "2.0":
    for qa, ex in zip(qas, examples):
      qa["is_impossible"] = ex.is_impossible
  return {"version": "1.1" if version.lstrip("v") == "1.1" else "v2.0",
          "data": [{"title": "", "paragraphs": [{"context": "", "qas": qas}]}]}
