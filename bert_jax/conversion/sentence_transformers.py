"""sentence-transformers folders <-> the embedding a bundle records.

`modules.json` lists the modules a text goes through (Transformer, Pooling, optional Dense
and Normalize), with max_seq_length and prompts in their own files. `read_modules` turns them
into bundle.json's `embedding` and the Dense params; `write_modules` writes them back beside
an export, so sentence-transformers encodes as bert_jax embeds. A module or pooling mode
bert_jax cannot compute is refused in one line.
"""
import json
import os
from typing import Any, Optional

from etils import epath
import numpy as np

from bert_jax.modeling import pooling
from bert_jax.runtime import atomic_files
from bert_jax.runtime.text_files import read_json
from bert_jax.runtime import write_errors

MODULES_FILE = "modules.json"
SETTINGS_FILE = "sentence_bert_config.json"
PROMPTS_FILE = "config_sentence_transformers.json"
_PACKAGE = "sentence_transformers.models."  # what an export writes (every release reads it)
_PACKAGE_ROOT = "sentence_transformers."
# Pooling's config keys, by the mode a bundle records.
_MODE_KEYS = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
              "max": "pooling_mode_max_tokens",
              "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
              "weightedmean": "pooling_mode_weightedmean_tokens",
              "lasttoken": "pooling_mode_lasttoken"}
# Pooling's mode names in releases that save them by name, where they differ from a bundle's.
_MODE_NAMES = {"mean_sqrt_len_tokens": "mean_sqrt_len"}
# Dense's activation_function (a torch class path), by the name a bundle records.
_ACTIVATIONS = {"identity": "torch.nn.modules.linear.Identity",
                "tanh": "torch.nn.modules.activation.Tanh",
                "relu": "torch.nn.modules.activation.ReLU",
                "gelu": "torch.nn.modules.activation.GELU",
                "sigmoid": "torch.nn.modules.activation.Sigmoid"}


def is_folder(src: str) -> bool:
  """Whether `src` is a sentence-transformers folder (has modules.json)."""
  return (epath.Path(src) / MODULES_FILE).is_file()


def _refuse(src: epath.Path, module: dict, why: str) -> None:
  raise ValueError(f"{src / MODULES_FILE}: module {module.get('name', '?')} "
                   f"({module.get('path') or 'the model folder'}, {module.get('type')}) {why}")


# transformers' model_max_length for a tokenizer that sets none (int(1e30)): no length at all.
_NO_LENGTH = 10**9


def _pooling_mode(src: epath.Path, module: dict, hidden_size: int) -> tuple[str, bool]:
  """(the one mode of a Pooling module, whether it pools over a prompt's tokens too)."""
  path = src / module["path"] / "config.json"
  cfg = read_json(path, missing=f"{path} is missing (the Pooling module's settings)")
  modes = [mode for mode, key in _MODE_KEYS.items() if cfg.get(key)]
  unknown = sorted(k for k, v in cfg.items() if k.startswith("pooling_mode_") and v
                   and k not in _MODE_KEYS.values())
  # Later releases save the modes by name: "pooling_mode": "mean" (or a list of them).
  named = cfg.get("pooling_mode")
  for name in [named] if isinstance(named, str) else named or []:
    mode = _MODE_NAMES.get(name, name)
    (modes if mode in _MODE_KEYS else unknown).append(mode if mode in _MODE_KEYS else name)
  if unknown:
    _refuse(src, module, f"pools by {', '.join(unknown)}, which bert_jax cannot compute")
  if len(modes) != 1:
    _refuse(src, module, f"pools by {' and '.join(modes) or 'no mode'}; bert_jax computes one "
            f"mode at a time ({', '.join(_MODE_KEYS)}), not several concatenated")
  dim = cfg.get("word_embedding_dimension", cfg.get("embedding_dimension", hidden_size))
  if dim != hidden_size:
    _refuse(src, module, f"pools vectors of {dim} but the model's hidden size is {hidden_size}")
  return modes[0], bool(cfg.get("include_prompt", True))


def _dense(src: epath.Path, module: dict, width: int) -> tuple[tuple, dict]:
  """A Dense module: (features, bias, activation) and its params {kernel [in, out], bias}."""
  folder = src / module["path"]
  cfg = read_json(folder / "config.json",
                  missing=f"{folder / 'config.json'} is missing (the Dense module's settings)")
  by_path = {v: k for k, v in _ACTIVATIONS.items()}
  activation = by_path.get(cfg.get("activation_function"))
  if activation is None:
    _refuse(src, module, f"applies activation {cfg.get('activation_function')!r}; bert_jax "
            f"computes {', '.join(_ACTIVATIONS.values())}")
  if cfg.get("in_features") != width:
    _refuse(src, module, f"takes vectors of {cfg.get('in_features')} but gets {width}")
  weights = folder / "model.safetensors"
  if not weights.is_file():
    _refuse(src, module, "has no model.safetensors (bert_jax reads safetensors only and never "
            "unpickles pytorch_model.bin: save the model again with sentence-transformers 3 or "
            "later, which writes safetensors)")
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  tensors = load_file(os.fspath(weights))
  kernel = np.asarray(tensors["linear.weight"], np.float32).T  # torch Linear is [out, in]
  bias = bool(cfg.get("bias", True))
  if kernel.shape != (width, cfg.get("out_features")):
    _refuse(src, module, f"holds linear.weight of {kernel.T.shape}, not its config's "
            f"[{cfg.get('out_features')}, {width}]")
  params = {"kernel": kernel}
  if bias:
    params["bias"] = np.asarray(tensors["linear.bias"], np.float32)
  return (int(kernel.shape[1]), bias, activation), params


def model_dir(src: str) -> str:
  """The Transformer module's folder (the folder itself, or early releases' 0_Transformer/)."""
  if not is_folder(src):
    return src
  modules = read_json(epath.Path(src) / MODULES_FILE, missing=src)
  first = modules[0] if isinstance(modules, list) and modules else {}
  return os.path.join(src, first.get("path", "")) if isinstance(first, dict) else src


def read_modules(src: str, hidden_size: int) -> Optional[dict[str, Any]]:
  """dict(embedding record, Dense params under pooling.DENSE_GROUP, lowercases_text: whether
  its Transformer module lowercases the text before the tokenizer) of a sentence-transformers
  folder, None without modules.json; hidden_size is what Pooling and the first Dense take."""
  root = epath.Path(src)
  if not is_folder(src):
    return None
  modules = read_json(root / MODULES_FILE, missing=f"{root / MODULES_FILE} is missing")
  if not isinstance(modules, list) or not modules:
    raise ValueError(f"{root / MODULES_FILE}: expected a list of modules, got {modules!r}")
  kinds = []
  for module in modules:
    # The class by its name: sentence-transformers 5.1 saves `sentence_transformers.models.Pooling`,
    # later releases the class's module path (`sentence_transformers.base.modules.pooling.Pooling`).
    kind = str(module.get("type", ""))
    if kind.startswith(_PACKAGE_ROOT):
      kind = kind.rsplit(".", 1)[-1]
    if kind not in ("Transformer", "Pooling", "Dense", "Normalize"):
      _refuse(root, module, "is not a module bert_jax computes (Transformer, Pooling, Dense, "
              "Normalize)")
    kinds.append(kind)
  order = "".join(k[0] for k in kinds)  # T P D* N?
  if not (order.startswith("TP") and set(order[2:].rstrip("N")) <= {"D"}
          and order[2:].count("N") <= 1):
    raise ValueError(f"{root / MODULES_FILE}: modules {kinds}; bert_jax computes Transformer, "
                     "Pooling, then Dense layers, then Normalize, in that order")
  record: dict[str, Any] = {"source": f"sentence-transformers modules ({' -> '.join(kinds)})"}
  mode, include_prompt = _pooling_mode(root, modules[1], hidden_size)
  record.update(pooling=mode, normalize=kinds[-1] == "Normalize")
  params, layers, width = {}, [], hidden_size
  for i, module in enumerate(m for m, k in zip(modules, kinds) if k == "Dense"):
    layer, params[f"layer_{i}"] = _dense(root, module, width)
    layers.append(layer)
    width = layer[0]
  if layers:
    record["dense"] = pooling.dense_record(layers)
  settings = root / SETTINGS_FILE
  lowercases = False
  if settings.is_file():
    found = read_json(settings, missing=str(settings))
    length = found.get("max_seq_length")
    if length:
      record["max_seq_length"] = int(length)
    lowercases = bool(found.get("do_lower_case"))
  if "max_seq_length" not in record:
    # Later releases keep the length as the tokenizer's model_max_length only.
    tok_cfg = root / modules[0].get("path", "") / "tokenizer_config.json"
    length = read_json(tok_cfg, missing=str(tok_cfg)).get("model_max_length") if (
        tok_cfg.is_file()) else None
    if isinstance(length, int) and 2 <= length < _NO_LENGTH:
      record["max_seq_length"] = length
  prompts_file = root / PROMPTS_FILE
  if prompts_file.is_file():
    found = read_json(prompts_file, missing=str(prompts_file))
    # sentence-transformers saves empty 'query' and 'document' prompts for every model.
    prompts = {k: v for k, v in (found.get("prompts") or {}).items() if v}
    if prompts:
      record["prompts"] = prompts
      default = found.get("default_prompt_name")
      # A default naming an empty prompt (left out above) prepends nothing: no default.
      record["default_prompt_name"] = default if default in prompts else None
      if not include_prompt:
        record["include_prompt"] = False
  pooling.embedding_record(record, str(root / MODULES_FILE))
  return dict(embedding=record, params={pooling.DENSE_GROUP: params} if params else {},
              lowercases_text=lowercases)


def written_names(name: str) -> bool:
  """Whether `name` (a file or folder in an export) is one `write_modules` writes."""
  return (name in (MODULES_FILE, SETTINGS_FILE, PROMPTS_FILE)
          or name.split("_", 1)[-1] in ("Pooling", "Dense", "Normalize")
          and name.split("_", 1)[0].isdigit())


def write_modules(dst: epath.Path, record: dict, dense_params: dict, hidden_size: int,
                  max_length: int, shown: str) -> list[str]:
  """Writes modules.json and the modules' folders beside an export (the Transformer module);
  returns the module names in order."""
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  if record.get("pooling", "mean") == "pooler":
    raise ValueError("the bundle embeds with BERT's pooler (dense + tanh on [CLS]), which "
                     "sentence-transformers has no module for; export it with --to hf only")
  modules = [("Transformer", "", None)]
  mode = record.get("pooling", "mean")
  pooling_cfg = {"word_embedding_dimension": hidden_size,
                 "include_prompt": record.get("include_prompt", True),
                 **{key: m == mode for m, key in _MODE_KEYS.items()}}
  modules.append(("Pooling", "1_Pooling", {"config.json": pooling_cfg}))
  width = hidden_size
  for i, (features, bias, activation) in enumerate(record.get("dense", ())):
    p = dense_params[f"layer_{i}"]
    tensors = {"linear.weight": np.ascontiguousarray(np.asarray(p["kernel"], np.float32).T)}
    if bias:
      tensors["linear.bias"] = np.asarray(p["bias"], np.float32)
    cfg = {"in_features": width, "out_features": features, "bias": bias,
           "activation_function": _ACTIVATIONS[activation]}
    modules.append(("Dense", f"{len(modules)}_Dense", {"config.json": cfg,
                                                       "model.safetensors": tensors}))
    width = features
  if record.get("normalize"):
    modules.append(("Normalize", f"{len(modules)}_Normalize", {}))
  files = {MODULES_FILE: [{"idx": i, "name": str(i), "path": path, "type": _PACKAGE + kind}
                          for i, (kind, path, _) in enumerate(modules)],
           SETTINGS_FILE: {"max_seq_length": max_length, "do_lower_case": False}}
  if record.get("prompts"):
    files[PROMPTS_FILE] = {"prompts": record["prompts"],
                           "default_prompt_name": record.get("default_prompt_name")}
  for _, path, contents in modules[1:]:
    (dst / path).mkdir()
    for name, value in contents.items():
      files[f"{path}/{name}"] = value
  for name, value in files.items():
    with write_errors.writing(f"{shown}/{name}"):
      if name.endswith(".safetensors"):
        save_file(value, os.fspath(dst / name), metadata={"format": "pt"})
        atomic_files.with_default_mode(dst / name)  # safetensors writes 0600
      else:
        (dst / name).write_text(json.dumps(value, indent=2) + "\n")
  return [kind for kind, _, _ in modules]
