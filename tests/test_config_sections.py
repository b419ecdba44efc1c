"""Every config key is documented, in its config file or in bert_jax/config_sections.py;
parse_arg reads every config's argument."""
import importlib.util
import inspect
import pathlib
import re

import ml_collections
import pytest

from bert_jax import config_sections

_ROOT = pathlib.Path(__file__).resolve().parents[1]
# Config file, an argument of get_config.
_CONFIGS = [("pretrain.py", "tiny"), ("glue.py", "task=mrpc"), ("squad.py", "version=1.1")]
# Section functions of config_sections.py; finetune's arguments (it fills a given config).
_SECTIONS = {"model": None, "optimizer": None, "mesh": None,
             "finetune": dict(data_source="tsv", max_seq_length=128, learning_rate=1e-5,
                              num_epochs=1.0)}
# `X.key = value`: a key assignment.
_ASSIGN = re.compile(r"\s+\w+\.([\w.]+) = (.*)$")
# A section call, as a whole value (`model()`) or as a statement that fills `c`.
_SECTION_CALL = re.compile(r"\s*(?:config_sections\.)?(\w+)\((c\b)?")


def _flatten(config, prefix=""):
  out = {}
  for key, value in config.items():
    if hasattr(value, "items"):
      out.update(_flatten(value, prefix + key + "."))
    else:
      out[prefix + key] = value
  return out


def _documented(lines: list[str], where: str, first: int = 1) -> set[str]:
  """Keys that `lines` (a config file or section function) assign or get from a section.

  Asserts that the first assignment of each key follows a comment; a later one (e.g. a
  per-variant override) is explained where it happens.
  """
  found = set()
  for i, line in enumerate(lines):
    assign, call = _ASSIGN.match(line), _SECTION_CALL.match(line)
    if call and call.group(1) in _SECTIONS and call.group(2):  # finetune(c, ...)
      found |= _section_documented(call.group(1))
    if not assign:
      continue
    key, value = assign.groups()
    call = _SECTION_CALL.match(value)
    if call and call.group(1) in _SECTIONS:  # c.model = model(): documented there.
      found |= {f"{key}.{k}" for k in _section_documented(call.group(1))}
    elif value.startswith("ml_collections.ConfigDict()") or key in found:
      continue
    else:
      assert lines[i - 1].strip().startswith("#"), f"{where}:{first + i} {key} has no comment"
      found.add(key)
  return found


def _section_documented(name: str) -> set[str]:
  lines, first = inspect.getsourcelines(getattr(config_sections, name))
  return _documented(lines, "config_sections.py", first)


def _build(name: str) -> ml_collections.ConfigDict:
  if name != "finetune":
    return getattr(config_sections, name)()
  c = ml_collections.ConfigDict()
  config_sections.finetune(c, **_SECTIONS[name])
  return c


@pytest.mark.parametrize("name", _SECTIONS)
def test_sections_are_fully_documented(name):
  assert set(_flatten(_build(name))) == _section_documented(name)


def test_an_undocumented_key_fails():
  with pytest.raises(AssertionError, match="x.py:3 batch_size has no comment"):
    _documented(["  # Documented.", "  c.seed = 0", "  c.batch_size = 32"], "x.py")
  model_keys = {"model." + k for k in _section_documented("model")}
  assert _documented(["  c.model = config_sections.model()"], "x.py") == model_keys


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
  # Equal: the shared sections are used whole, and every key is documented.
  assert keys == _documented(path.read_text().splitlines(), filename)


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
