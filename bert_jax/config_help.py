r"""Every key of a config, with its default and its comment; unknown keys named.

  python -m bert_jax.config_help configs/pretrain.py:tiny
  python -m bert_jax.config_help configs/glue.py:task=mrpc [KEY_PREFIX]
  python -m bert_jax.pretrain --config configs/pretrain.py:base --config.help   (the same)

Config files declare every key with a comment above it (`c.seq_len = 128`
after `# Tokens per sequence (static).`); the model, optimizer and mesh
sections and the keys every fine-tuning config shares are declared in
bert_jax/configuration/sections.py. This module reads those comments from the
sources, so the listing is what the files say, and checks `--config.a.b=v`
overrides before a program starts: an unknown key at any depth is one line
naming it and the closest valid key.
"""
import dataclasses
import difflib
import importlib.util
import inspect
import re
import sys
import types
from typing import Optional, Sequence

from etils import epath
import ml_collections

from bert_jax.configuration import sections as config_sections

# `X.key = value`: a key assignment (X is the config or section variable).
_ASSIGN = re.compile(r"\s+\w+\.([\w.]+) = (.*)$")
# A section call, as a whole value (`model()`) or as a statement that fills `c`.
_SECTION_CALL = re.compile(r"\s*(?:config_sections\.)?(\w+)\((c\b)?")
# The functions of configuration/sections.py that build or fill config sections.
SECTIONS = ("model", "optimizer", "mesh", "finetune", "compile_cache")


class UndocumentedKeyError(AssertionError):
  """A config key assigned without a comment above its first assignment."""


def flatten(config, prefix: str = "") -> dict:
  """{'a.b': value} for every leaf key of a (nested) ConfigDict, sorted as ConfigDict sorts."""
  out = {}
  for key, value in config.items():
    if hasattr(value, "items"):
      out.update(flatten(value, prefix + key + "."))
    else:
      out[prefix + key] = value
  return out


def _comment_above(lines: list[str], i: int) -> Optional[str]:
  """The comment block right above line i (joined), or None."""
  block = []
  j = i - 1
  while j >= 0 and lines[j].strip().startswith("#"):
    block.insert(0, lines[j].strip().lstrip("#").strip())
    j -= 1
  return " ".join(block) if block else None


def documented(lines: list[str], where: str, first: int = 1,
               strict: bool = True) -> dict[str, str]:
  """Key -> comment of every key that `lines` (a config file or section function) declares.

  A key's first assignment must follow a comment (a later one, e.g. a per-variant
  override, is explained where it happens); keys of a section taken whole
  (`c.model = config_sections.model()`, `config_sections.finetune(c, ...)`) carry
  the section's comments.

  Raises:
    UndocumentedKeyError: strict, and a key's first assignment has no comment (file
      and line named); not strict, its comment is ''.
  """
  found = {}
  for i, line in enumerate(lines):
    assign, call = _ASSIGN.match(line), _SECTION_CALL.match(line)
    if call and call.group(1) in SECTIONS and call.group(2):  # finetune(c, ...)
      found.update(section_comments(call.group(1)))
    if not assign:
      continue
    key, value = assign.groups()
    call = _SECTION_CALL.match(value)
    if call and call.group(1) in SECTIONS:  # c.model = model(): documented there.
      found.update({f"{key}.{k}": v for k, v in section_comments(call.group(1)).items()})
    elif value.startswith("ml_collections.ConfigDict()") or key in found:
      continue
    else:
      comment = _comment_above(lines, i)
      if comment is None and strict:
        raise UndocumentedKeyError(f"{where}:{first + i} {key} has no comment")
      found[key] = comment or ""
  return found


def section_comments(name: str) -> dict[str, str]:
  """Key -> comment of the keys config_sections.`name` declares."""
  lines, first = inspect.getsourcelines(getattr(config_sections, name))
  return documented(lines, "bert_jax/configuration/sections.py", first)


@dataclasses.dataclass
class LoadedConfig:
  """A config file's ConfigDict and the comments of its keys."""
  spec: str
  config: ml_collections.ConfigDict
  comments: dict


def load_module(path) -> types.ModuleType:
  """The config file at `path` as a fresh module (its get_config not yet called).

  Raises:
    FileNotFoundError: no such config file.
  """
  if not epath.Path(path).is_file():
    raise FileNotFoundError(f"config file not found: {path}")
  module_spec = importlib.util.spec_from_file_location("bert_jax_config_" + epath.Path(path).stem,
                                                       str(path))
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module


def load(spec: str) -> LoadedConfig:
  """Loads `FILE.py[:ARG]` as config_flags does (get_config(ARG)), with its key comments.

  Raises:
    FileNotFoundError: no such config file.
    ValueError: the file rejects ARG (its message), or has no get_config.
  """
  path, _, arg = spec.partition(":")
  module = load_module(path)
  if not hasattr(module, "get_config"):
    raise ValueError(f"{path} has no get_config(arg)")
  config = module.get_config(arg or None)
  comments = documented(epath.Path(path).read_text().splitlines(), path, strict=False)
  return LoadedConfig(spec, config, comments)


def describe(loaded: LoadedConfig, prefix: str = "") -> str:
  """Every key (under `prefix`) as `key = default` and its comment, one block per key."""
  every = flatten(loaded.config)
  keys = {k: v for k, v in every.items() if k.startswith(prefix)}
  if not keys:  # a misspelt prefix: one line with the nearest, not an empty listing
    sections = sorted({k.split(".", 1)[0] for k in every} | set(every))
    near = closest_key(prefix.rstrip("."), sections)
    raise ValueError(f"{loaded.spec}: no key starts with {prefix!r}"
                     + (f"; did you mean {near!r}?" if near else ""))
  out = [f"{loaded.spec}: {len(keys)} keys; override one with --config.KEY=VALUE"]
  for key, value in keys.items():
    out.append(f"{key} = {value!r}")
    out.append(f"    {loaded.comments.get(key) or '(no comment)'}")
  return "\n".join(out)


# Common short names of keys, for suggestions.
_ALIASES = {"lr": "learning_rate", "steps": "total_steps", "epochs": "num_epochs",
            "bs": "batch_size", "batch": "batch_size", "seq_length": "seq_len",
            "max_seq_len": "max_seq_length", "warmup": "warmup_steps", "checkpoint": "init_checkpoint"}


def closest_key(key: str, keys: Sequence[str]) -> Optional[str]:
  """The valid key most like `key`, or None.

  In order: a key with the same last part (after expanding a common short name
  such as lr -> learning_rate) in another section; the most similar whole path;
  the key with the most similar last part.
  """
  leaf = key.rsplit(".", 1)[-1]
  leaf = _ALIASES.get(leaf, leaf)
  by_leaf = {}
  for k in keys:
    by_leaf.setdefault(k.rsplit(".", 1)[-1], k)
  if leaf in by_leaf:
    return by_leaf[leaf]
  match = difflib.get_close_matches(key, keys, n=1, cutoff=0.75)
  if match:
    return match[0]
  match = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.6)
  return by_leaf[match[0]] if match else None


def unknown_override(config: ml_collections.ConfigDict, argv: Sequence[str]) -> Optional[str]:
  """One line naming the first `--config.KEY=...` of argv that is no key of `config`.

  KEY may name a leaf (`optimizer.name`) or a whole section; the line names the
  closest valid key. None when every override names a key.
  """
  keys = list(flatten(config))
  sections = {k.rsplit(".", i)[0] for k in keys for i in range(1, k.count(".") + 1)}
  for arg in argv:
    if arg == "--":
      break
    if not arg.startswith("--config."):
      continue
    key = arg[len("--config."):].split("=", 1)[0]
    if key in keys or key in sections or key == "help":
      continue
    near = closest_key(key, keys)
    hint = f"; did you mean --config.{near}?" if near else ""
    return f"unknown config key {key!r}{hint} (python -m bert_jax.config_help lists every key)"
  return None


def main(argv: Optional[Sequence[str]] = None) -> None:
  """The command line: CONFIG_FILE[:ARG] [KEY_PREFIX]."""
  args = list(sys.argv[1:] if argv is None else argv)
  if not 1 <= len(args) <= 2 or args[0] in ("-h", "--help"):
    print(__doc__.strip())
    raise SystemExit(0 if args and args[0] in ("-h", "--help") else 2)
  try:
    print(describe(load(args[0]), args[1] if len(args) > 1 else ""))
  except (FileNotFoundError, ValueError) as e:
    raise SystemExit(f"bert_jax.config_help: error: {e}") from None


if __name__ == "__main__":
  main()
