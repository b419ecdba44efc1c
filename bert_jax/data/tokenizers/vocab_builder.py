"""Building a vocabulary from a corpus: its sentences, a WordPiece vocab (BERT's layout) or a
SentencePiece model (the library of bert_jax.build_vocab)."""
import os

SPECIALS_AFTER_UNUSED = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")


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
  from bert_jax.runtime import train_log  # pylint: disable=g-import-not-at-top
  parts, total = [], 0
  shards = source_registry.list_shards(source_registry.get(cfg.source), cfg)
  progress = train_log.Progress("reading", len(shards), "shards", enabled=not quiet)
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
  """Learns a WordPiece vocab; returns the tokens in id order (specials first).

  Args:
    sentences: tf.string [S], already normalised.
    vocab_size: target size including the special and unused tokens.
    num_unused: number of [unusedN] tokens.
    min_count: words seen fewer times are ignored.

  Returns:
    The vocab tokens.
  """
  from bert_jax.runtime.cpu_tensorflow import tf  # pylint: disable=g-import-not-at-top
  from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset  # pylint: disable=g-import-not-at-top
  head = ["[PAD]"] + [f"[unused{i}]" for i in range(num_unused)] + list(SPECIALS_AFTER_UNUSED)
  if vocab_size <= len(head):
    raise ValueError(f"--vocab_size {vocab_size} leaves no room after {len(head)} special tokens")
  ds = tf.data.Dataset.from_tensor_slices(sentences).batch(1024)
  try:
    learned = bert_vocab_from_dataset.bert_vocab_from_dataset(
        ds, vocab_size=vocab_size - len(head), reserved_tokens=[],
        bert_tokenizer_params={"lower_case": False}, learn_params={"lower_thresh": min_count})
  except StopIteration:  # the learner's way of saying it counted no word
    raise ValueError(f"the input has no words to learn from ({int(tf.size(sentences))} "
                     "sentences read)") from None
  reserved = set(head)
  return head + [t for t in learned if t not in reserved and t.strip()][:vocab_size - len(head)]


def build_sentencepiece(sentences, output: str, vocab_size: int) -> str:
  """Trains a unigram SentencePiece model with BERT's special pieces; returns its path."""
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  prefix = output[:-len(".model")] if output.endswith(".model") else output
  spm.SentencePieceTrainer.train(
      sentence_iterator=(s.decode("utf-8") for s in sentences.numpy()),
      model_prefix=prefix, vocab_size=vocab_size, model_type="unigram",
      pad_id=0, pad_piece="[PAD]", unk_id=1, unk_piece="[UNK]", bos_id=-1, eos_id=-1,
      control_symbols=["[CLS]", "[SEP]", "[MASK]"], character_coverage=0.9995,
      hard_vocab_limit=False, num_threads=os.cpu_count() or 1, minloglevel=2)
  return prefix + ".model"
