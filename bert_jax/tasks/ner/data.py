"""CoNLL-format token classification data: reading, word-piece windows, prediction files.

One word per line, its tag in the last column (a one-column file is unlabeled), blank lines
between sentences. Each file's scheme (IOB1 or IOB2) is detected, and `convert` maps either
into either keeping conlleval's entities, so the model learns one scheme and each file's
predictions are written in its own. The labels close over the training file's types (O, B-X
and I-X of each), so a tag the file lacks (IOB1's rare B-ORG) is still a label. A word's
first piece carries its label; a sentence longer than a window is split at word boundaries,
so every word is predicted once.
"""
import dataclasses
import re
from typing import Optional, Sequence

from etils import epath
import numpy as np

from bert_jax.runtime import atomic_files
from bert_jax.runtime import text_files

# Tags read: O, B-TYPE, I-TYPE (IOB1 and IOB2).
_TAG = re.compile(r"^(O|[BI]-\S+)$")
DOCSTART = "-DOCSTART-"
# Tagging schemes read, learned and written.
SCHEMES = ("IOB1", "IOB2")


@dataclasses.dataclass
class Sentence:
  """One sentence: words, tags (None when unlabeled), and each word's 1-based line number."""
  words: list
  tags: Optional[list]
  lines: list


def read_conll(path: str) -> list[Sentence]:
  """The sentences of a CoNLL file (local or gs://), all labeled or all unlabeled.

  ValueError `path:line: ...` for a line with another column count than the first, a tag not
  O / B-X / I-X, or a file without sentences.
  """
  text = text_files.read_utf8(path, "CoNLL file")
  sentences, words, tags, lines, columns = [], [], [], [], None

  def close():
    if words:
      sentences.append(Sentence(list(words), list(tags) if columns > 1 else None, list(lines)))
      words.clear(), tags.clear(), lines.clear()

  # Lines end at '\n' only: a token may hold U+2028 or another character str.splitlines
  # would end a line at, and the line numbers are the file's.
  for number, line in enumerate(text.split("\n"), 1):
    line = line[:-1] if line.endswith("\r") else line
    fields = line.split()
    if not fields or fields[0] == DOCSTART:
      close()
      continue
    if columns is None:
      columns = len(fields)
    if len(fields) != columns:
      raise ValueError(f"{path}:{number}: {len(fields)} columns, but the file's first word "
                       f"line has {columns} (word first, tag last): {line!r}")
    if columns > 1 and not _TAG.match(fields[-1]):
      raise ValueError(f"{path}:{number}: tag {fields[-1]!r} is not IOB (O, B-TYPE or I-TYPE; "
                       f"IOB1 and IOB2 are read): {line!r}")
    words.append(fields[0])
    tags.append(fields[-1])
    lines.append(number)
  close()
  if not sentences:
    raise ValueError(f"{path}: no sentences (an empty CoNLL file)")
  return sentences


def _starts(tags: Sequence[str]) -> list[bool]:
  """Whether each tag starts an entity, by conlleval's rules (B-X; I-X after O or another type)."""
  out, previous = [], "O"
  for tag in tags:
    out.append(tag != "O" and (tag[0] == "B" or previous == "O" or previous[2:] != tag[2:]))
    previous = tag
  return out


def convert(tags: Sequence[str], scheme: str) -> list[str]:
  """`tags` (IOB1, IOB2 or a mix) in `scheme` with the same entities; a well-formed sequence
  converts back unchanged."""
  if scheme not in SCHEMES:
    raise ValueError(f"tagging scheme {scheme!r} not in {list(SCHEMES)}")
  out = []
  for i, (tag, start) in enumerate(zip(tags, _starts(tags))):
    if tag == "O" or not start:
      out.append("O" if tag == "O" else "I-" + tag[2:])
    elif scheme == "IOB2" or (i > 0 and tags[i - 1] != "O" and tags[i - 1][2:] == tag[2:]):
      out.append("B-" + tag[2:])
    else:
      out.append("I-" + tag[2:])
  return out


def scheme_of(sentences: Sequence[Sentence]) -> Optional[str]:
  """'IOB1' when some I-X starts an entity, 'IOB2' when entities are tagged but none starts
  so, None without entities or tags."""
  found = None
  for s in sentences:
    for tag, start in zip(s.tags or (), _starts(s.tags or ())):
      if start and tag[0] == "I":
        return "IOB1"
      found = found or ("IOB2" if start else None)
  return found


def in_scheme(sentences: Sequence[Sentence], scheme: str) -> list[Sentence]:
  """The sentences with their tags converted to `scheme` (unlabeled ones unchanged)."""
  return [s if s.tags is None else dataclasses.replace(s, tags=convert(s.tags, scheme))
          for s in sentences]


def label_list(sentences: Sequence[Sentence], path: str) -> list[str]:
  """'O', then B-X and I-X of every entity type of a training file (ValueError if unlabeled)."""
  if sentences[0].tags is None:
    raise ValueError(f"{path}: a training file needs tags (word first, tag last), "
                     "its lines have one column")
  types = sorted({t[2:] for s in sentences for t in s.tags if t != "O"})
  return ["O"] + [f"B-{t}" for t in types] + [f"I-{t}" for t in types]


def check_tags(sentences: Sequence[Sentence], labels: Sequence[str], path: str) -> None:
  """Refuses (ValueError `path:line: ...`) a tag whose type the training labels lack."""
  types = {t[2:] for t in labels if t != "O"}
  for s in sentences:
    for tag, number in zip(s.tags or (), s.lines):
      if tag != "O" and tag[2:] not in types:
        raise ValueError(f"{path}:{number}: tag {tag!r} is not in the training file's labels "
                         f"{list(labels)} (entity type {tag[2:]!r} never occurs in it)")


def encode(tokenizer, sentences: Sequence[Sentence], labels: Sequence[str],
           max_seq_length: int) -> dict:
  """Word-piece windows of `sentences` (max_seq_length >= 3 with [CLS] and [SEP]).

  Returns int32 input_ids, input_mask, segment_ids, label_ids [n, len]; label_weights 1 on
  each word's first piece in a labeled file; word_index (the word at a first piece, else -1);
  sentence_index [n].
  """
  if max_seq_length < 3:
    raise ValueError(f"max_seq_length must be at least 3 for NER, got {max_seq_length}")
  capacity = max_seq_length - 2
  label_id = {t: i for i, t in enumerate(labels)}
  all_words = [w for s in sentences for w in s.words]
  pieces = tokenizer.tokenize_to_ids(all_words) if all_words else []
  rows = []  # (sentence index, [(word index, its pieces)])
  k = 0
  for si, s in enumerate(sentences):
    window, used = [], 0
    for wi in range(len(s.words)):
      ids = list(pieces[k + wi])[:capacity] or [tokenizer.unk_id]  # no piece: [UNK]
      if used + len(ids) > capacity:
        rows.append((si, window))
        window, used = [], 0
      window.append((wi, ids))
      used += len(ids)
    k += len(s.words)
    rows.append((si, window))

  n, length = len(rows), max_seq_length
  arrays = {"input_ids": np.zeros((n, length), np.int32),
            "input_mask": np.zeros((n, length), np.int32),
            "segment_ids": np.zeros((n, length), np.int32),
            "label_ids": np.zeros((n, length), np.int32),
            "label_weights": np.zeros((n, length), np.float32),
            "word_index": np.full((n, length), -1, np.int32),
            "sentence_index": np.zeros((n,), np.int32)}
  for r, (si, window) in enumerate(rows):
    tags = sentences[si].tags
    ids, pos = [tokenizer.cls_id], 1
    for wi, word_ids in window:
      arrays["word_index"][r, pos] = wi
      if tags is not None:
        arrays["label_ids"][r, pos] = label_id[tags[wi]]
        arrays["label_weights"][r, pos] = 1.0
      ids += word_ids
      pos += len(word_ids)
    ids.append(tokenizer.sep_id)
    arrays["input_ids"][r, :len(ids)] = ids
    arrays["input_mask"][r, :len(ids)] = 1
    arrays["sentence_index"][r] = si
  return arrays


def predicted_tags(logits: np.ndarray, arrays: dict, sentences: Sequence[Sentence],
                   labels: Sequence[str]) -> list[list[str]]:
  """Per sentence, the tag of every word: the argmax of logits [n, len, labels] at its first
  piece."""
  best = np.argmax(logits, axis=-1)  # [n, len]
  tags = [[None] * len(s.words) for s in sentences]
  rows, cols = np.nonzero(arrays["word_index"] >= 0)
  for r, c in zip(rows, cols):
    tags[arrays["sentence_index"][r]][arrays["word_index"][r, c]] = labels[best[r, c]]
  missing = sum(t is None for s in tags for t in s)
  if missing:
    raise AssertionError(f"{missing} words have no prediction (windows lost words)")
  return tags


def write_predictions(path: str, sentences: Sequence[Sentence],
                      predicted: Sequence[Sequence[str]]) -> None:
  """Writes `word gold predicted` lines (`word predicted` when unlabeled), blank lines
  between sentences: the input format of conlleval."""
  out = []
  for s, pred in zip(sentences, predicted):
    for i, word in enumerate(s.words):
      out.append(" ".join([word] + ([s.tags[i]] if s.tags is not None else []) + [pred[i]]))
    out.append("")
  p = epath.Path(path)
  p.parent.mkdir(parents=True, exist_ok=True)
  atomic_files.write_text(p, "\n".join(out))
