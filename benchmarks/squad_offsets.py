"""SQuAD answers through character offsets, per tokenizer (bert_jax.tasks.squad.offsets).

For each answerable question of a SQuAD file (its first answer, as training
reads it): the gold start/end tokens from the answer's characters, and whether
the context cut from the start token's first character to the end token's last
is exactly the answer text; also whether a training window (max_seq_length 384,
doc_stride 128) holds the answer and its row positions cut the same text; and
whether the ids that come with the offsets are those of tokenize_to_ids on the
whole context (SentencePiece's offsets tokenize word by word).

  python benchmarks/squad_offsets.py --squad $SQUAD_DIR/dev-v1.1.json \
      $DATA_DIR/tokenizers/roberta-base $DATA_DIR/tokenizers/albert-base-v2 \
      $DATA_DIR/tokenizers/deberta-v3-base

Each TOKENIZER_DIR holds a tokenizer's files as Hugging Face publishes them (roberta-base's
vocab.json and merges.txt, albert-base-v2's spiece.model, deberta-v3-base's spm.model).
"""
import argparse
import collections
import os
import time

from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax.tasks.squad import data as squad_data
from bert_jax.tasks.squad import offsets as squad_offsets


def measure(tok, examples, max_seq_length=384, doc_stride=128):
  contexts = list(dict.fromkeys(ex.context for ex in examples))
  encoded = dict(zip(contexts, tok.tokenize_with_offsets(contexts)))
  whole = tok.tokenize_to_ids(contexts)
  same_ids = sum(encoded[c][0] == ids for c, ids in zip(contexts, whole))
  exact, misses = 0, []
  for ex in examples:
    _, spans = encoded[ex.context]
    found = squad_offsets.answer_tokens(spans, ex.answer_start,
                                        ex.answer_start + len(ex.orig_answer_text))
    text = ex.context[spans[found[0]][0]:spans[found[1]][1]] if found else None
    if text == ex.orig_answer_text:
      exact += 1
    else:
      misses.append((ex.orig_answer_text, text))
  arrays, features = squad_offsets.convert_examples_to_features(
      tok, examples, max_seq_length, doc_stride, 64, is_training=True)
  in_window = collections.defaultdict(bool)
  for row, f in enumerate(features):
    start, end = int(arrays["start_positions"][row]), int(arrays["end_positions"][row])
    if start > 0:
      ex = examples[f.example_index]
      in_window[f.example_index] |= (
          ex.context[f.offsets[start][0]:f.offsets[end][1]] == ex.orig_answer_text)
  return (exact, sum(in_window.values()), len(features), misses, (same_ids, len(contexts)),
          _fast_agreement(tok, contexts, encoded))


def _fast_agreement(tok, contexts, encoded):
  """(tokens whose offsets equal transformers' fast tokenizer's, tokens compared), over the
  contexts where both give the same ids, the fast spans without leading whitespace (its
  SentencePiece '▁word' spans include the space; RoBERTa's trim_offsets drops it); None
  without transformers."""
  try:
    import transformers  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  if tok.kind == "bpe":
    d = os.path.dirname(tok.vocab_file)
    fast = transformers.RobertaTokenizerFast(vocab_file=tok.vocab_file,
                                             merges_file=os.path.join(d, "merges.txt"))
  elif tok.conventions.name == "albert":
    fast = transformers.AlbertTokenizerFast(vocab_file=tok.vocab_file)
  else:
    fast = transformers.DebertaV2TokenizerFast(vocab_file=tok.vocab_file)
  ref = fast(contexts, add_special_tokens=False, return_offsets_mapping=True)
  same = total = 0
  for c, ids, offsets in zip(contexts, ref["input_ids"], ref["offset_mapping"]):
    ours_ids, ours = encoded[c]
    if ours_ids != ids:
      continue
    total += len(ids)
    for a, (start, end) in zip(ours, offsets):
      while start < end and c[start].isspace():  # '▁word' spans start at the space
        start += 1
      same += tuple(a) == (start, end)
  return same, total


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--squad", required=True, help="a SQuAD JSON file (dev-v1.1.json)")
  parser.add_argument("tokenizers", nargs="+", metavar="TOKENIZER_DIR",
                      help="tokenizer directories, each loaded by kind from its files")
  args = parser.parse_args()
  examples, skipped = squad_data.read_squad_json(args.squad, is_training=True)
  examples = [ex for ex in examples if not ex.is_impossible]
  print(f"{args.squad}: {len(examples)} answerable questions ({len(skipped)} skipped: answer "
        f"not at answer_start)")
  for path in args.tokenizers:
    tok = tokenizer_lib.tokenizer_from_path(path)
    t0 = time.time()
    exact, windowed, rows, misses, (same, contexts), fast = measure(tok, examples)
    n = len(examples)
    print(f"{os.path.basename(path)} ({tok.kind}): exact from gold tokens {exact}/{n} = "
          f"{exact / n:.2%}; exact in a training window {windowed}/{n} = {windowed / n:.2%}; "
          f"{rows} windows; {time.time() - t0:.1f}s")
    print(f"    offset ids equal the whole-text ids (tokenize_to_ids) in {same}/{contexts} "
          f"contexts")
    if fast:
      print(f"    offsets equal transformers' fast tokenizer's offset_mapping (space-trimmed) for {fast[0]}/"
            f"{fast[1]} = {fast[0] / fast[1]:.2%} tokens")
    inside = sum(1 for gold, got in misses if got and gold in got)
    print(f"    misses: {inside} of {len(misses)} cut a longer text holding the answer (the answer "
          f"ends or starts inside a token)")
    for gold, got in misses[:5]:
      print(f"    gold {gold!r} -> {got!r}")


if __name__ == "__main__":
  main()
