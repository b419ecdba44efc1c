"""Checkpoint conversion to and from self-describing bert_jax checkpoints (bundles).

  python -m bert_jax.convert --from hf  --src HF_DIR     --dst BUNDLE [--cased|--uncased]
  python -m bert_jax.convert --from tf1 --src GOOGLE_DIR --dst BUNDLE [--cased|--uncased]
  python -m bert_jax.convert --to hf    --src BUNDLE     --dst HF_DIR

`--from hf` reads config.json + model.safetensors (BertModel, BertForPreTraining
or BertForMaskedLM layouts, with or without the `bert.` prefix); pickle
checkpoints (pytorch_model.bin) are refused with instructions. `--from tf1`
reads original Google BERT checkpoints (bert_model.ckpt.* + bert_config.json +
vocab.txt). Casing defaults to tokenizer_config.json's do_lower_case, else a
guess from the vocab (printed). `--to hf` writes safetensors + config.json +
vocab.txt that transformers loads as BertForPreTraining.
"""
from flax import traverse_util
import argparse
import os
import sys
from typing import Optional, Sequence

if __name__ == "__main__":
  os.environ.setdefault("JAX_PLATFORMS", "cpu")  # conversion is host work: leave GPUs alone

from bert_jax import bundle  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.conversion import hf  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.conversion import tf1  # noqa: E402  pylint: disable=g-import-not-at-top


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m bert_jax.convert", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  way = p.add_mutually_exclusive_group(required=True)
  way.add_argument("--from", dest="from_", choices=("hf", "tf1"),
                   help="convert a foreign checkpoint into a bert_jax bundle")
  way.add_argument("--to", choices=("hf",), help="export a bert_jax bundle")
  p.add_argument("--src", required=True, help="source directory (or TF1 checkpoint prefix)")
  p.add_argument("--dst", required=True, help="output directory")
  case = p.add_mutually_exclusive_group()
  case.add_argument("--cased", dest="lowercase", action="store_false", default=None,
                    help="the tokenizer keeps case (cased model)")
  case.add_argument("--uncased", dest="lowercase", action="store_true",
                    help="the tokenizer lowercases (uncased model)")
  p.add_argument("--overwrite", action="store_true", help="replace a non-empty --dst")
  p.add_argument("--drop_unexpected", action="store_true",
                 help="drop tensors outside the BERT name map (e.g. a fine-tuned classifier) "
                      "instead of failing")
  return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  if args.to:
    if args.lowercase is not None:
      print("note: --cased/--uncased are ignored with --to (the bundle records its casing)",
            file=sys.stderr)
    out = hf.bundle_to_hf(args.src, args.dst, overwrite=args.overwrite)
    print(f"wrote {args.dst}: {out['architecture']} ({bundle.describe_arch(out['config'])}, "
          f"heads {list(out['heads'])}, {out['num_tensors']} tensors)")
    return 0
  convert = hf.hf_to_bundle if args.from_ == "hf" else tf1.tf1_to_bundle
  out = convert(args.src, args.dst, lowercase=args.lowercase, overwrite=args.overwrite,
                drop_unexpected=args.drop_unexpected)
  c = out["config"]
  n = sum(x.size for x in traverse_util.flatten_dict(out["params"], sep="/").values())
  arch = bundle.describe_arch(c, ("num_layers", "hidden_size", "num_heads", "vocab_size"))
  print(f"wrote bundle {args.dst}: {arch}, {n:,} params, heads {list(out['heads'])}, "
        f"{'uncased' if out['lowercase'] else 'cased'} ({out['lowercase_reason']})")
  if out["dropped"]:
    print(f"dropped {len(out['dropped'])} tensors outside the name map: {out['dropped']}")
  return 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except (FileNotFoundError, FileExistsError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
