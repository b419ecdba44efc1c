"""Original Google BERT TF1 checkpoints -> bert_jax bundles (bert_model.ckpt.*,
bert_config.json, vocab.txt); MLM and NSP heads kept, optimizer slots and global_step
skipped."""
import os
from typing import Any, Optional

from etils import epath

from bert_jax.checkpoints import bundle
from bert_jax import conversion
from bert_jax.conversion import name_map
from bert_jax.modeling.model_config import BertConfig, from_hf_dict
from bert_jax.runtime.text_files import read_json

# Optimizer state and counters found in Google's and NVIDIA's checkpoints.
IGNORE = (r".*/adam_[mv]", r".*/(Adam|Adam_1|Momentum)", r"global_step", r"good_steps",
          r"bad_steps", r"loss_scale", r"current_loss_scale")


def find_checkpoint(src: str) -> str:
  """The checkpoint prefix of a directory or prefix path (DIR/bert_model.ckpt)."""
  p = epath.Path(src)
  if not p.is_dir():
    if epath.Path(src + ".index").exists():
      return src
    raise FileNotFoundError(f"TF checkpoint not found: {src} (no directory, no {src}.index)")
  if (p / "bert_model.ckpt.index").exists():
    return os.fspath(p / "bert_model.ckpt")
  indexes = sorted(f.name[:-len(".index")] for f in p.iterdir() if f.name.endswith(".index"))
  if len(indexes) == 1:
    return os.fspath(p / indexes[0])
  if not indexes:
    raise FileNotFoundError(f"{src}: no TF checkpoint (*.index) found; a Google BERT directory "
                            "holds bert_model.ckpt.index, bert_model.ckpt.data-*, "
                            "bert_config.json and vocab.txt")
  raise ValueError(f"{src} holds several checkpoints {indexes}; pass the prefix as --src")


def read_config(directory: str) -> BertConfig:
  """Reads bert_config.json."""
  path = epath.Path(directory) / "bert_config.json"
  d = read_json(path, missing=f"{directory} has no bert_config.json")
  return from_hf_dict(d, source=str(path))


def load_tf1(src: str, *, drop_unexpected: bool = False,
             lowercase: Optional[bool] = None) -> dict[str, Any]:
  """Reads a Google BERT TF1 checkpoint into our params (as hf.load_hf; lowercase None:
  guessed from the vocab)."""
  prefix = find_checkpoint(src)
  directory = os.path.dirname(prefix)
  config = read_config(directory)
  vocab = epath.Path(directory) / "vocab.txt"
  if not vocab.exists():
    raise FileNotFoundError(f"{directory} has no vocab.txt")
  n = bundle.count_vocab(str(vocab))
  if n != config.vocab_size:
    raise ValueError(f"{vocab}: {n} tokens but bert_config.json has vocab_size {config.vocab_size}")
  from bert_jax.runtime.cpu_tensorflow import tf  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(prefix)
  shapes = {k: tuple(v) for k, v in reader.get_variable_to_shape_map().items()}
  source = name_map.TensorSource(shapes, reader.get_tensor, prefix)
  params, dropped = name_map.to_ours(source, name_map.TF1_RULES, config, ignore=IGNORE,
                                     drop_unexpected=drop_unexpected)
  if lowercase is None:
    low, reason = bundle.guess_lowercase(str(vocab)), "guessed from the vocab's capital letters"
  else:
    low, reason = lowercase, "given on the command line"
  return dict(params=params, config=config, vocab_file=str(vocab), lowercase=low,
              lowercase_reason=reason, dropped=dropped, heads=bundle.heads_of(params))


def tf1_to_bundle(src: str, dst: str, **options) -> dict[str, Any]:
  """Converts a Google BERT TF1 checkpoint into a bert_jax bundle; see `conversion.to_bundle`."""
  return conversion.to_bundle(load_tf1, "tf1", src, dst, **options)
