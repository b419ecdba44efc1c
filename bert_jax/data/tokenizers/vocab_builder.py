"""Building a vocabulary from a corpus (the library of bert_jax.build_vocab)."""
import itertools
import os

import numpy as np

SPECIALS_AFTER_UNUSED = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_ALPHABET = 1000  # WordPiece: distinct characters kept, the most common first
OVERLEARN = 1.4  # WordPiece: pieces learned per piece kept (build_wordpiece)


def read_sentences(pattern: str, fmt: str, lowercase: bool, max_sentences: int,
                   quiet: bool = True):
  """Cleaned (normalised) sentences of the input as a tf.string tensor (progress on stderr
  unless quiet)."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from bert_jax.data.sources import raw_docs  # pylint: disable=g-import-not-at-top
  from bert_jax.data.sources import registry as source_registry  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime.cpu_tensorflow import tf  # pylint: disable=g-import-not-at-top
  cfg = ml_collections.ConfigDict({"source": "builtin" if pattern == "builtin" else "files",
                                   "files": pattern, "format": fmt,
                                   "block_mb": raw_docs.DEFAULT_BLOCK_MB})
  from bert_jax.runtime import console  # pylint: disable=g-import-not-at-top
  parts, total = [], 0
  shards = source_registry.list_shards(source_registry.get(cfg.source), cfg)
  progress = console.Progress("reading", len(shards), "shards", enabled=not quiet)
  for shard in shards:
    progress.update()
    sentences = source_registry.read_documents(shard, cfg).sentences[:max_sentences - total]
    sentences = tokenizer_lib.clean_text(sentences)
    if lowercase:
      sentences = tokenizer_lib.uncased_normalize(sentences)
    parts.append(sentences)
    total += int(tf.size(sentences))
    if total >= max_sentences:
      break
  progress.close()
  return tf.concat(parts, axis=0)


def build_wordpiece(sentences, vocab_size: int, num_unused: int,
                    min_count: int = 10) -> list[str]:
  """Learns a WordPiece vocab of at most vocab_size tokens (specials and unused included).

  The learner is `tokenizers`' WordPiece trainer (BPE merges written as pieces), in Rust
  threads: many times faster than tf-text's learner for no worse coverage. Words are split as
  the tokenizer splits them, so every piece is reachable. BPE keeps merges longer ones absorb,
  so it learns OVERLEARN times the room and keeps the pieces most used (fewer pieces per word);
  every character and its `##c` stay. Order is tf-text's: characters, then pieces by use.
  min_count applies to merged pieces, never to the alphabet.
  """
  import tokenizers  # pylint: disable=g-import-not-at-top
  head = ["[PAD]"] + [f"[unused{i}]" for i in range(num_unused)] + list(SPECIALS_AFTER_UNUSED)
  if vocab_size <= len(head):
    raise ValueError(f"--vocab_size {vocab_size} leaves no room after {len(head)} special tokens")
  texts = [s.decode("utf-8") for s in sentences.numpy()]
  # The trainer numbers each `##c` as it meets it in a hash map, and breaks ties between equal
  # counts by those numbers, so two runs would differ; a first pass (the alphabet alone) finds
  # them, and the second numbers them up front, in sorted order, with the specials.
  alphabet = _train_wordpiece(texts, 0, head, min_count).get_vocab()
  continuations = sorted(t for t in alphabet if t.startswith("##"))
  if len(alphabet) == len(head):
    raise ValueError(f"the input has no words to learn from ({len(texts)} sentences read)")
  ids = _train_wordpiece(texts, len(head) + int((vocab_size - len(head)) * OVERLEARN),
                         head + continuations, min_count).get_vocab()
  # Counting uses with the learned vocab alone: the trainer's tokenizer would match the `##c`
  # it was given as literals in the raw text.
  tok = _split_as_bert(tokenizers.Tokenizer(tokenizers.models.WordPiece(ids, unk_token="[UNK]")))
  uses = np.zeros(len(ids), np.int64)
  for i in range(0, len(texts), 65536):  # bounded memory for huge inputs
    encodings = tok.encode_batch(texts[i:i + 65536], add_special_tokens=False)
    uses += np.bincount(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings),
                                    np.int64), minlength=len(ids))
  by_use = lambda t: (-uses[ids[t]], t)  # pylint: disable=unnecessary-lambda-assignment
  chars = sorted(t for t, i in ids.items() if i >= len(head) and len(t) == 1)
  # Every `##c` stays, as every character does: without one, a word that needs it is [UNK].
  room = vocab_size - len(head) - len(chars) - len(continuations)
  merged = sorted((t for t, i in ids.items() if i >= len(head) + len(continuations)
                   and len(t) > 1), key=by_use)[:max(room, 0)]
  # An alphabet larger than the room is cut too.
  return (head + chars + sorted(continuations + merged, key=by_use))[:vocab_size]


def _split_as_bert(tok):
  """The tokenizer with the tokenization's word splitting (wordpiece_rust.py) on clean text."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  # The text is cleaned and cased already; only the CJK spacing of BertNormalizer is left.
  tok.normalizer = tokenizers.normalizers.BertNormalizer(
      clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False)
  tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
  return tok


def _train_wordpiece(texts: list[str], vocab_size: int, first: list[str], min_count: int):
  """`tokenizers`' WordPiece trainer on the texts; `first` get ids 0.. in order."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  tok = _split_as_bert(tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]")))
  trainer = tokenizers.trainers.WordPieceTrainer(
      vocab_size=vocab_size, min_frequency=min_count, special_tokens=first,
      # The most common characters only (as BERT's vocab tooling): rare ones would each take
      # two tokens (`c` and `##c`) from the learned pieces.
      limit_alphabet=MAX_ALPHABET, continuing_subword_prefix="##", show_progress=False)
  tok.train_from_iterator(texts, trainer, length=len(texts))
  return tok


def sentencepiece_prefix(output: str) -> str:
  """The path a SentencePiece model `output` (X or X.model) is written under: X (X.model and
  X.vocab)."""
  return output[:-len(".model")] if output.endswith(".model") else output


def build_sentencepiece(sentences, output: str, vocab_size: int) -> str:
  """Trains a unigram SentencePiece model with BERT's special pieces; returns its path."""
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  prefix = sentencepiece_prefix(output)
  spm.SentencePieceTrainer.train(
      sentence_iterator=(s.decode("utf-8") for s in sentences.numpy()),
      model_prefix=prefix, vocab_size=vocab_size, model_type="unigram",
      pad_id=0, pad_piece="[PAD]", unk_id=1, unk_piece="[UNK]", bos_id=-1, eos_id=-1,
      control_symbols=["[CLS]", "[SEP]", "[MASK]"], character_coverage=0.9995,
      hard_vocab_limit=False, num_threads=os.cpu_count() or 1, minloglevel=2)
  return prefix + ".model"
