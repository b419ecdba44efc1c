"""Top-k predictions for each [MASK] with a checkpoint that has the MLM head.

  python -m bert_jax.fill_mask --checkpoint BUNDLE [--top_k 5] [--json] \
      "The capital of France is [MASK]."

The literal `[MASK]` marks masked positions (several per text are allowed);
the rest of the text is WordPiece-tokenized as usual. Each text becomes
[CLS] ... [SEP]; probabilities are the softmax over the vocabulary.
"""
import argparse
import functools
import json
import sys
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax import bundle as bundle_lib
from bert_jax import model as model_lib

MASK = "[MASK]"


@functools.lru_cache(maxsize=4)
def _load_tokenizer(vocab_file: str, lowercase: bool):
  from bert_jax.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  return tokenizer_lib.WordPieceTokenizer(vocab_file, lowercase=lowercase)


@functools.lru_cache(maxsize=8)
def _predict_fn(config, with_nsp: bool, top_k: int):
  """jitted (params, ids, mask, positions) -> top-k (probs, ids) [texts, masks, k]."""
  net = model_lib.BertForPreTraining(config, with_nsp=with_nsp)

  @jax.jit
  def predict(params, ids, mask, positions):
    logits = net.apply({"params": params}, ids, mask, jnp.zeros_like(ids),
                       positions)["mlm_logits"]  # [texts, masks, vocab]
    return jax.lax.top_k(jax.nn.softmax(logits, axis=-1), top_k)
  return predict


def require_mlm(b: bundle_lib.Bundle, path: str) -> None:
  """Raises ValueError when the checkpoint has no MLM head."""
  if "mlm" not in b.heads:
    raise ValueError(f"{path} has no MLM head (heads: {list(b.heads)}); fill_mask needs a "
                     "pretraining checkpoint (BertForPreTraining / BertForMaskedLM layout)")


def encode(tokenizer, texts: Sequence[str], max_length: int) -> tuple[list, list]:
  """Ids with [MASK] where the text says `[MASK]`, and the masked positions.

  Args:
    tokenizer: a bert_jax.data.tokenizer tokenizer.
    texts: texts holding `[MASK]` at least once.
    max_length: the model's max positions.

  Returns:
    (ids per text, masked positions per text).

  Raises:
    ValueError: a text without [MASK], or one too long for the model.
  """
  all_ids, all_pos = [], []
  for n, text in enumerate(texts, 1):
    parts = text.split(MASK)
    if len(parts) < 2:
      raise ValueError(f"text {n} ({text!r}) has no {MASK}")
    pieces = tokenizer.tokenize_to_ids(parts)
    ids, pos = [tokenizer.cls_id], []
    for i, piece in enumerate(pieces):
      if i:
        pos.append(len(ids))
        ids.append(tokenizer.mask_id)
      ids += piece
    ids.append(tokenizer.sep_id)
    if len(ids) > max_length:
      raise ValueError(f"text {n} is {len(ids)} tokens long; the model takes at most {max_length}")
    all_ids.append(ids)
    all_pos.append(pos)
  return all_ids, all_pos


def fill_mask(b: bundle_lib.Bundle, texts: Sequence[str], top_k: int = 5,
              tokenizer=None) -> list[list[list[tuple[str, float]]]]:
  """Top-k (token, probability) for every [MASK] of every text.

  Args:
    b: a bundle with the MLM head.
    texts: texts with `[MASK]`.
    top_k: predictions per mask.
    tokenizer: a WordPieceTokenizer (default: from the bundle's vocab).

  Returns:
    result[text][mask] = [(token, probability), ...] best first.
  """
  require_mlm(b, "the checkpoint")
  tokenizer = tokenizer or _load_tokenizer(b.vocab_file, b.lowercase)
  ids, positions = encode(tokenizer, texts, b.config.max_position_embeddings)
  length = max(len(x) for x in ids)
  num_masks = max(len(p) for p in positions)
  ids_arr = np.full((len(ids), length), tokenizer.pad_id, np.int32)  # [texts, len]
  mask_arr = np.zeros_like(ids_arr)
  pos_arr = np.zeros((len(ids), num_masks), np.int32)  # [texts, masks]
  for i, (x, p) in enumerate(zip(ids, positions)):
    ids_arr[i, :len(x)], mask_arr[i, :len(x)], pos_arr[i, :len(p)] = x, 1, p
  with_nsp = "nsp" in b.heads
  params = model_lib.match_scan_layout(b.params, b.config)
  if not with_nsp:
    params = {k: v for k, v in params.items() if k != "nsp"}
    params["bert"] = {k: v for k, v in params["bert"].items() if k != "pooler"}
  predict = _predict_fn(b.config, with_nsp, top_k)
  with jax.default_matmul_precision("float32" if b.config.dtype == "float32" else "default"):
    probs, top = jax.device_get(predict(params, ids_arr, mask_arr, pos_arr))
  result = []
  for i, p in enumerate(positions):
    result.append([[(tokenizer.inv_vocab[int(t)], float(q)) for t, q in zip(top[i, j], probs[i, j])]
                   for j in range(len(p))])
  return result


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m bert_jax.fill_mask", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--checkpoint", required=True, help="a bert_jax checkpoint with the MLM head")
  p.add_argument("--top_k", type=int, default=5)
  p.add_argument("--json", action="store_true", help="print one JSON list instead of text")
  p.add_argument("texts", nargs="+", help="texts holding [MASK]")
  return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  meta = bundle_lib.load_bundle(args.checkpoint, with_params=False)
  require_mlm(meta, args.checkpoint)
  if not 1 <= args.top_k <= meta.config.vocab_size:
    raise ValueError(f"--top_k {args.top_k} must be in [1, {meta.config.vocab_size}]")
  for n, text in enumerate(args.texts, 1):
    if MASK not in text:
      raise ValueError(f"text {n} ({text!r}) has no {MASK}")
  b = bundle_lib.load_bundle(args.checkpoint)
  result = fill_mask(b, args.texts, args.top_k)
  if args.json:
    print(json.dumps([{"text": t, "masks": [[{"token": tok, "prob": p} for tok, p in m]
                                            for m in r]}
                      for t, r in zip(args.texts, result)]))
    return 0
  for text, masks in zip(args.texts, result):
    print(text)
    for j, preds in enumerate(masks, 1):
      print(f"  {MASK} {j}: " + "  ".join(f"{tok} {p:.4f}" for tok, p in preds))
  return 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
