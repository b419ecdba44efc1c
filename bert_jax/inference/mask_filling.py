"""Top-k predictions for each [MASK] with a checkpoint that has the MLM head (the library of
`python -m bert_jax.fill_mask` and Encoder.fill_mask). The literal `[MASK]` marks masked
positions, several per text allowed, for every tokenizer; the tokenizer's own mask token
(RoBERTa's `<mask>`) does too. Probabilities are the softmax over the vocabulary."""
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.checkpoints import bundle as bundle_lib
from bert_jax.checkpoints import loading
from bert_jax.modeling import model as model_lib
from bert_jax.runtime import console


MASK = "[MASK]"


@functools.lru_cache(maxsize=8)
def _predict_fn(config, with_nsp: bool, top_k: int, emd: bool = False):
  """jitted (params, ids, mask, positions) -> top-k (probs, ids) [texts, masks, k]; emd runs
  DeBERTa's enhanced mask decoder, as the checkpoint was pretrained."""
  net = model_lib.BertForPreTraining(config, with_nsp=with_nsp, emd=emd)

  @jax.jit
  def predict(params, ids, mask, positions):
    logits = net.apply({"params": params}, ids, mask, jnp.zeros_like(ids),
                       positions)["mlm_logits"]  # [texts, masks, vocab]
    return jax.lax.top_k(jax.nn.softmax(logits, axis=-1), top_k)
  return predict


def require_mlm(pretrained: loading.Pretrained, path: str) -> None:
  """Raises ValueError when the checkpoint has no MLM head."""
  heads = bundle_lib.heads_of(pretrained.params)
  if "mlm" not in heads:
    raise ValueError(f"{path} has no MLM head (heads: {list(heads)}); fill_mask needs a "
                     "pretraining checkpoint (BertForPreTraining / BertForMaskedLM layout)")


def encode(tokenizer, texts: Sequence[str], max_length: int) -> tuple[list, list]:
  """(ids per text, masked positions per text); ValueError for a text without [MASK] or too
  long for the model."""
  all_ids, all_pos = [], []
  mask_token = tokenizer.inv_vocab[tokenizer.mask_id]
  for n, text in enumerate(texts, 1):
    parts = text.replace(mask_token, MASK).split(MASK)
    if len(parts) < 2:
      raise ValueError(f"text {n} ({text!r}) has no {MASK}"
                       + (f" (nor {mask_token})" if mask_token != MASK else ""))
    text = MASK.join(parts)
    if tokenizer.kind == "wordpiece":
      pieces = tokenizer.tokenize_to_ids(parts)  # the text between the masks
      body = list(pieces[0])
      for piece in pieces[1:]:
        body += [tokenizer.mask_id, *piece]
    else:  # BPE and SentencePiece match their own mask token in the text (whitespace as HF)
      body = tokenizer.tokenize_to_ids([text.replace(MASK, mask_token)])[0]
    ids, _ = tokenizer.build_inputs(body)
    pos = [i for i, t in enumerate(ids) if t == tokenizer.mask_id]
    if len(ids) > max_length:
      raise ValueError(f"text {n} is {len(ids)} tokens long; the model takes at most {max_length}")
    all_ids.append(ids)
    all_pos.append(pos)
  return all_ids, all_pos


def fill_mask(pretrained: loading.Pretrained, texts: Sequence[str], top_k: int = 5,
              tokenizer=None, batch_size: int = 64,
              progress: str = "") -> list[list[list[tuple[str, float]]]]:
  """result[text][mask] = [(token, probability), ...] best first, for every [MASK].

  With more texts than batch_size every batch has that many rows (the last padded), so the
  step compiles once per padded length.
  """
  require_mlm(pretrained, "the checkpoint")
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
  config = pretrained.config
  if tokenizer is None:
    from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
    tokenizer = tokenizer_lib.for_checkpoint(pretrained)
  ids, positions = encode(tokenizer, texts, config.max_position_embeddings)
  heads = bundle_lib.heads_of(pretrained.params)
  with_nsp = "nsp" in heads
  params = model_lib.match_scan_layout(pretrained.params, config)
  if not with_nsp:
    params = {k: v for k, v in params.items() if k != "nsp"}
    params["bert"] = {k: v for k, v in params["bert"].items() if k != "pooler"}
  predict = _predict_fn(config, with_nsp, top_k, "emd" in heads)
  rows = batch_size if len(ids) > batch_size else len(ids)
  result = []
  with console.Progress(progress, len(ids), "texts",
                        enabled=bool(progress) and rows < len(ids)) as shown:
    for start in range(0, len(ids), rows):
      chunk_ids, chunk_pos = ids[start:start + rows], positions[start:start + rows]
      length = max(len(x) for x in chunk_ids)
      num_masks = max(len(p) for p in chunk_pos)
      ids_arr = np.full((rows, length), tokenizer.pad_id, np.int32)  # [texts, len]
      mask_arr = np.zeros_like(ids_arr)
      pos_arr = np.zeros((rows, num_masks), np.int32)  # [texts, masks]
      for i, (x, p) in enumerate(zip(chunk_ids, chunk_pos)):
        ids_arr[i, :len(x)], mask_arr[i, :len(x)], pos_arr[i, :len(p)] = x, 1, p
      with jax.default_matmul_precision("float32" if config.dtype == "float32" else "default"):
        probs, top = jax.device_get(predict(params, ids_arr, mask_arr, pos_arr))
      for i, p in enumerate(chunk_pos):
        result.append([[(tokenizer.inv_vocab[int(t)], float(q))
                        for t, q in zip(top[i, j], probs[i, j])] for j in range(len(p))])
      shown.update(len(chunk_ids))
  return result


def print_predictions(texts: Sequence[str], result: list, tokenizer) -> None:
  """Prints each text and, under it, the top tokens with probabilities per [MASK]; a token
  shows as the text it stands for without spaces (quoted when that leaves nothing)."""
  def shown(token):
    text = tokenizer.token_text(tokenizer.vocab[token])
    return text.strip() or repr(text)
  for text, masks in zip(texts, result):
    print(text)
    for j, preds in enumerate(masks, 1):
      print(f"  {MASK} {j}: " + "  ".join(f"{shown(tok)} {p:.4f}" for tok, p in preds),
            flush=True)
