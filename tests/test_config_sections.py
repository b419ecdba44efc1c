"""Every config key is documented, in its config file or in bert_jax/config_sections.py;
parse_arg reads every config's argument."""
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


def _config_module(filename):
  path = _ROOT / "configs" / filename
  spec = importlib.util.spec_from_file_location(f"cfg_{filename[:-3]}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize("filename,arg", _CONFIGS)
def test_every_key_has_a_comment(filename, arg):
  path = _ROOT / "configs" / filename
  keys = set(_flatten(_config_module(filename).get_config(arg)))
  documented = _documented(path, {"c": ""}, known=_sections_documented())
  assert keys <= documented, sorted(keys - documented)
  # The shared sections are used whole by every entry point.
  assert {k for k in keys if k.split(".")[0] in _SECTION_VARS.values()} == _sections_documented()


def test_parse_arg_names_flags_and_a_bare_value():
  parse = lambda arg: config_sections.parse_arg(arg, positional="variant", variant="tiny",
                                                phase2=False, steps=10, lr=0.5)
  assert parse(None).to_dict() == dict(variant="tiny", phase2=False, steps=10, lr=0.5)
  assert parse("base,phase2").to_dict() == dict(variant="base", phase2=True, steps=10, lr=0.5)
  a = parse("variant=large,phase2=False,steps=7,lr=1e-3")
  assert (a.variant, a.phase2, a.steps, a.lr) == ("large", False, 7, 1e-3)
  assert parse("phase2=TRUE,mini").variant == "mini" and parse("phase2=TRUE").phase2
  assert config_sections.parse_arg("1.1", positional="version", version="").version == "1.1"


@pytest.mark.parametrize("arg,message", [
    ("base,phase3,lr=1", r"^unknown config options \['lr', 'phase3'\]; known: \['phase2', "
                         r"'steps', 'variant'\] \(e.g. configs/x.py:base,phase2\)$"),
    ("base,large", r"unknown config options \['large'\]"),
    ("mini,variant=base", r"'variant' given twice"),
    ("steps=1.5", r"'steps' takes int, not '1.5'"),
    ("phase2=yes", r"'phase2' is true or false, not 'yes'"),
])
def test_parse_arg_errors_name_the_known_options(arg, message):
  with pytest.raises(ValueError, match=message):
    config_sections.parse_arg(arg, positional="variant", example="configs/x.py:base,phase2",
                              variant="tiny", phase2=False, steps=10)


def test_pretrain_config_arguments():
  get_config = _config_module("pretrain.py").get_config
  assert get_config(None).variant == "tiny" and get_config("tiny").seq_len == 128
  base, phase2 = get_config("base"), get_config("base,phase2")
  assert (phase2.variant, phase2.seq_len, phase2.data.max_predictions_per_seq) == ("base", 512, 80)
  assert phase2.total_steps == base.total_steps // 9
  assert get_config("base,phase2=false").to_dict() == base.to_dict()
  with pytest.raises(ValueError, match=r"unknown config options \['phase3'\]; known: "
                                       r"\['phase2', 'variant'\]"):
    get_config("base,phase3")
  with pytest.raises(ValueError, match=r"unknown variant 'huge'; known: \['base', "):
    get_config("huge")
