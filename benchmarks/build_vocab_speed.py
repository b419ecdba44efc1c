r"""WordPiece vocab learning: build_vocab's learner against tf-text's, time and coverage.

  python benchmarks/build_vocab_speed.py [--input builtin] [--vocab_size 3000]
      [--max_sentences N] [--min_count 10]

Reads and cleans the sentences once, as `python -m bert_jax.build_vocab` does,
then learns a vocab of the same size with each learner:

  tokenizers  bert_jax's (vocab_builder.build_wordpiece: `tokenizers`' WordPiece
              trainer)
  tf-text     tensorflow_text's bert_vocab_from_dataset (BERT's word split on
              the normalised text, lower_thresh --min_count), its specials
              placed as build_vocab places them

and tokenizes the same sentences with bert_jax's WordPieceTokenizer on each
vocab. Coverage is given per word (whitespace- and punctuation-split, as the
tokenizer splits): the share of words that become [UNK] and the mean word
pieces per word. Lower is better for both; a learner is as good as the other
when both are close.
"""
import argparse
import time

from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax.data.tokenizers import vocab_builder


def reference_vocab(sentences, vocab_size: int, num_unused: int, min_count: int) -> list[str]:
  """The vocab tf-text's learner gives, in build_vocab's layout (specials first)."""
  from bert_jax.runtime.cpu_tensorflow import tf  # pylint: disable=g-import-not-at-top
  from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset  # pylint: disable=g-import-not-at-top
  head = (["[PAD]"] + [f"[unused{i}]" for i in range(num_unused)]
          + list(vocab_builder.SPECIALS_AFTER_UNUSED))
  ds = tf.data.Dataset.from_tensor_slices(sentences).batch(1024)
  learned = bert_vocab_from_dataset.bert_vocab_from_dataset(
      ds, vocab_size=vocab_size - len(head), reserved_tokens=[],
      bert_tokenizer_params={"lower_case": False}, learn_params={"lower_thresh": min_count})
  return head + [t for t in learned if t not in set(head) and t.strip()][:vocab_size - len(head)]


def coverage(tokens: list[str], texts: list[str]) -> tuple[float, float]:
  """([UNK] words / words, pieces / words) of `texts` tokenized with the vocab `tokens`.

  A word is one piece that does not continue another: a word's first piece, or the one
  [UNK] that stands for a word the vocab cannot spell.
  """
  tok = tokenizer_lib.WordPieceTokenizer(tokens, lowercase=True, backend="tokenizers")
  pieces = words = unknown = 0
  for ids in tok.tokenize_to_ids(texts):
    pieces += len(ids)
    words += sum(not tok.is_continuation[i] for i in ids)
    unknown += ids.count(tok.unk_id)
  return unknown / max(words, 1), pieces / max(words, 1)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--input", default="builtin", help="as build_vocab's --input")
  parser.add_argument("--vocab_size", type=int, default=3000)
  parser.add_argument("--max_sentences", type=int, default=5_000_000)
  parser.add_argument("--min_count", type=int, default=10)
  parser.add_argument("--num_unused", type=int, default=99)
  args = parser.parse_args()
  start = time.perf_counter()
  sentences = vocab_builder.read_sentences(args.input, "sentence_per_line", True,
                                           args.max_sentences)
  texts = [s.decode("utf-8") for s in sentences.numpy()]
  print(f"read and cleaned {len(texts):,} sentences in {time.perf_counter() - start:.1f} s")
  print(f"{'learner':<12} {'learn s':>9} {'tokens':>7} {'[UNK] words':>12} {'pieces/word':>12}")
  for name, learn in (("tokenizers", vocab_builder.build_wordpiece), ("tf-text", reference_vocab)):
    start = time.perf_counter()
    vocab = learn(sentences, args.vocab_size, args.num_unused, args.min_count)
    seconds = time.perf_counter() - start
    unk, per_word = coverage(vocab, texts)
    print(f"{name:<12} {seconds:>9.1f} {len(vocab):>7,} {unk:>12.4%} {per_word:>12.3f}",
          flush=True)


if __name__ == "__main__":
  main()
