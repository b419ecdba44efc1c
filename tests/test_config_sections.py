"""Every config key is documented, in its config file or in bert_jax/config_sections.py."""
import importlib.util
import pathlib
import re

import pytest

from bert_jax import config_sections

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_SECTIONS_PATH = _ROOT / "bert_jax" / "config_sections.py"
# Config file, an argument of get_config.
_CONFIGS = [("pretrain.py", "tiny"), ("glue.py", "task=mrpc"), ("squad.py", "version=1.1")]
# Local variable name in config_sections.py -> the section it builds.
_SECTION_VARS = {"m": "model", "o": "optimizer", "s": "mesh"}


def _flatten(config, prefix=""):
  out = {}
  for key, value in config.items():
    if hasattr(value, "items"):
      out.update(_flatten(value, prefix + key + "."))
    else:
      out[prefix + key] = value
  return out


def _documented(path: pathlib.Path, var_prefix: dict[str, str], known=frozenset()) -> set[str]:
  """Keys assigned in `path`; asserts the first assignment of each follows a comment."""
  lines = path.read_text().splitlines()
  found = set(known)
  for i, line in enumerate(lines):
    m = re.match(r"\s+(\w)\.([\w.]+) = (.*)$", line)
    if not m or m.group(1) not in var_prefix:
      continue
    value = m.group(3)
    if value.startswith("ml_collections.ConfigDict()") or value.startswith("config_sections."):
      continue  # A section needs no comment of its own.
    if var_prefix[m.group(1)] + m.group(2) in found:
      continue  # A later override (e.g. per variant) is explained where it happens.
    assert lines[i - 1].strip().startswith("#"), f"{path.name}:{i + 1} {m.group(2)} has no comment"
    found.add(var_prefix[m.group(1)] + m.group(2))
  return found


def _sections_documented() -> set[str]:
  return _documented(_SECTIONS_PATH, {k: v + "." for k, v in _SECTION_VARS.items()})


def test_sections_are_fully_documented():
  built = set()
  for name in _SECTION_VARS.values():
    built |= {f"{name}.{k}" for k in _flatten(getattr(config_sections, name)())}
  assert built == _sections_documented()


@pytest.mark.parametrize("filename,arg", _CONFIGS)
def test_every_key_has_a_comment(filename, arg):
  path = _ROOT / "configs" / filename
  spec = importlib.util.spec_from_file_location(f"cfg_{filename[:-3]}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  keys = set(_flatten(module.get_config(arg)))
  documented = _documented(path, {"c": ""}, known=_sections_documented())
  assert keys <= documented, sorted(keys - documented)
  # The shared sections are used whole by every entry point.
  assert {k for k in keys if k.split(".")[0] in _SECTION_VARS.values()} == _sections_documented()
