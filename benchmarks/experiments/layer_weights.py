r"""The layer weights a layers_attention GLUE export gives dev examples.

What it showed (MRPC from all-MiniLM-L6-v2, 1,000 training pairs, 1 epoch, lr 1e-4, 2026-11-24):
the learned query barely moved from its zero start (norm 0.011), giving the last four layers
weights of 0.2498-0.2504, so the layers_attention head ran as the plain mean of their [CLS]
vectors; the three sequence heads (cls, mean, layers_attention) scored within one standard
deviation of each other at that budget.

  python benchmarks/experiments/layer_weights.py --export WORKDIR/export \
      --data_dir $GLUE_DIR [--examples 128] [--max_length 64]

Reads the export's task, head_layers and query (bundle.json, aggregation/query),
runs the encoder on the first `--examples` dev examples and prints the query's
norm and the softmax weights of each of the last head_layers layers (mean, min,
max over the examples): uniform weights (1 / head_layers) mean the head is the
plain mean of those layers' [CLS] vectors.
"""
import argparse
import os
import sys

import jax
import numpy as np

# The repository root (two levels up), so that bert_jax imports from a plain checkout.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bert_jax import Encoder
from bert_jax.modeling import model as model_lib
from bert_jax.tasks.glue import data as glue


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--export", required=True, help="a layers_attention fine-tuning export")
  p.add_argument("--data_dir", required=True, help="the GLUE folder (MRPC/, RTE/, ...)")
  p.add_argument("--examples", type=int, default=128)
  p.add_argument("--max_length", type=int, default=64)
  args = p.parse_args()
  enc = Encoder.load(args.export)
  if enc.info.get("head") != "layers_attention":
    p.error(f"{args.export} has head {enc.info.get('head', 'cls')!r}, not layers_attention")
  k = enc.info["head_layers"]
  query = np.asarray(enc.pretrained.params["aggregation"]["query"])
  task = glue.get_task(enc.task)
  examples = glue.read_split(task, task.dev_splits[0], source="tsv", data_dir=args.data_dir)
  arrays = glue.encode_examples(enc.tokenizer, examples[:args.examples], args.max_length)
  bert = model_lib.BertModel(enc.config, add_pooler=False)
  hidden = jax.jit(lambda p, i, m, s: bert.apply({"params": p}, i, m, s,
                                                 output_hidden_states=True)["hidden_states"])(
      enc.pretrained.params["bert"], arrays["input_ids"], arrays["input_mask"],
      arrays["segment_ids"])
  vectors = np.stack([np.asarray(h)[:, 0] for h in hidden[-k:]], 1)  # [n, k, hidden]
  scores = vectors @ query / np.sqrt(vectors.shape[-1])
  weights = np.exp(scores - scores.max(1, keepdims=True))
  weights /= weights.sum(1, keepdims=True)
  first = enc.config.num_layers - k + 1
  print(f"{enc.task}, {len(vectors)} dev examples; query norm {np.linalg.norm(query):.4f}; "
        f"mean [CLS] norm of layers {first}..{enc.config.num_layers}: "
        f"{np.linalg.norm(vectors, axis=-1).mean(0).round(2)}")
  for name, values in (("mean", weights.mean(0)), ("min", weights.min(0)),
                       ("max", weights.max(0))):
    print(f"weights {name}: {values.round(4)}")


if __name__ == "__main__":
  main()
