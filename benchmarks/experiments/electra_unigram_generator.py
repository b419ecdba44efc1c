r"""ELECTRA's discriminator against a frozen unigram generator: how fast replaced-token detection
is learnt when the replacements are drawn from the corpus's token frequencies, whatever the
generator predicts. The real generator of a tiny run sits at about this level (MLM accuracy
0.12-0.14), so this separates the discriminator's own pace from the generator's.

  python benchmarks/experiments/electra_unigram_generator.py \
      --config configs/pretrain.py:tiny,recipe=electra --workdir DIR \
      --config.data.source=files --config.data.files=FILES --config.data.vocab_file=VOCAB \
      [any other pretraining flag]

The unigram counts are taken from the run's own data files with its own tokenizer (WordPiece,
lowercased, as the config says); every other flag goes to `python -m bert_jax.pretrain`. The
held-out rtd_auc in metrics.jsonl is the figure; compare it with the same command without this
wrapper (`python -m bert_jax.pretrain ...`).
"""
import glob
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bert_jax import pretrain  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top,wrong-import-position


def _flag(name: str) -> str:
  prefix = f"--config.{name}="
  found = [a[len(prefix):] for a in sys.argv[1:] if a.startswith(prefix)]
  if not found:
    raise SystemExit(f"give {prefix}...: the unigram counts are taken from it")
  return found[-1]


def unigram_log_probs() -> jnp.ndarray:
  """log P(token) over the run's data files, tokenized as the run tokenizes them."""
  with open(_flag("data.vocab_file"), encoding="utf-8") as f:
    vocab = [line.rstrip("\n") for line in f]
  tok = tokenizer_lib.cached_tokenizer("wordpiece", vocab, True)
  counts = np.zeros(len(vocab), np.float64)
  for pattern in _flag("data.files").split(","):
    for path in sorted(glob.glob(pattern)):
      with open(path, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
      for ids in tok.tokenize_to_ids(lines):
        np.add.at(counts, np.asarray(ids, np.int64), 1)
  p = np.maximum(counts, 0.5) / counts.sum()
  print(f"unigram entropy {float(-(p * np.log(p)).sum()):.3f} nats over {int(counts.sum()):,} "
        "tokens", flush=True)
  return jnp.asarray(np.log(p), jnp.float32)


def main() -> None:
  if {"-h", "--help"} & set(sys.argv[1:]):
    print(__doc__)
    return
  log_p = unigram_log_probs()
  sample = jax.random.categorical

  def unigram(key, logits, axis=-1):  # the generator's sampling call, its logits ignored
    return sample(key, jnp.broadcast_to(log_p, logits.shape), axis=axis)

  jax.random.categorical = unigram
  pretrain.main(sys.argv[1:])


if __name__ == "__main__":
  main()
