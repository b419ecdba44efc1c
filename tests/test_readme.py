"""Every `python -m bert_jax.X` command of the README names real flags and config keys.

The commands are taken from the README's bash blocks as written (placeholders
such as CKPT or DIR stay). For each: the program's --help lists every flag the
command gives; a --config command's config file loads, its --config.* overrides
name keys, and the program's config check passes (e.g. fine-tuning on TSV files
needs --config.data_dir). Running every command for real is the closing check of
a release (a fresh clone and virtualenv), too slow for the suite.
"""
import contextlib
import importlib
import io
import pathlib
import re
import shlex

from absl import flags
import pytest

from bert_jax import cli
from bert_jax import config_help
from bert_jax.training import sharding

ROOT = pathlib.Path(__file__).resolve().parents[1]


def readme_commands() -> list[list[str]]:
  """argv of every `python -m bert_jax.X ...` command in the README's bash blocks."""
  text = (ROOT / "README.md").read_text(encoding="utf-8")
  commands = []
  for block in re.findall(r"```bash\n(.*?)```", text, re.S):
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
      words = shlex.split(line, comments=True)
      parts, part = [], []
      for w in words + ["&&"]:
        if w in ("&&", "||", ";"):
          parts.append(part)
          part = []
        else:
          part.append(w)
      for part in parts:
        if "-m" in part[:-1] and part[part.index("-m") + 1].startswith("bert_jax."):
          commands.append(part[part.index("-m") + 1:])
  return commands


COMMANDS = readme_commands()


def test_the_readme_has_the_documented_commands():
  programs = {c[0] for c in COMMANDS}
  assert {"bert_jax.pretrain", "bert_jax.finetune", "bert_jax.convert", "bert_jax.embed",
          "bert_jax.fill_mask", "bert_jax.tokenize", "bert_jax.build_vocab",
          "bert_jax.config_help"} <= programs


def _help_text(module) -> str:
  out = io.StringIO()
  with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
    module.main(["--help"])
  assert e.value.code in (0, None)
  return out.getvalue()


def _flag_names(args: list[str]) -> list[str]:
  names = []
  for a in args:
    if a.startswith("--") and not a.startswith("--config.") and a != "--":
      names.append(a[2:].split("=", 1)[0])
  return names


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c)[:80] for c in COMMANDS])
def test_readme_command_is_valid_as_written(argv):
  name, args = argv[0], argv[1:]
  module = importlib.import_module(name)
  if name == "bert_jax.config_help":
    loaded = config_help.load(str(ROOT / args[0]))
    assert config_help.flatten(loaded.config)
    return
  help_text = _help_text(module)
  for flag in _flag_names(args):
    plain = flag[2:] if flag.startswith("no") and f"--[no]{flag[2:]}" in help_text else flag
    assert f"--{plain}" in help_text or f"--[no]{plain}" in help_text, (
        f"{' '.join(argv)}: {name} has no flag --{flag}")
  spec = cli._config_spec(args)  # pylint: disable=protected-access
  if spec is None:
    return
  spec = str(ROOT / spec)
  overrides = [a for a in args if a.startswith("--config.")]
  loaded = config_help.load(spec)
  assert config_help.unknown_override(loaded.config, overrides) is None
  values = flags.FlagValues()
  holder = cli.define_config(values, "config", ["--config", spec] + overrides)
  values(["prog", "--config", spec] + overrides)
  config = holder.value
  if name not in ("bert_jax.pretrain", "bert_jax.finetune"):
    return
  try:
    mesh = sharding.mesh_from_config(config.mesh)
  except ValueError:  # a pod's mesh (e.g. 4 x 8 devices): its keys were checked above
    return
  check = (importlib.import_module("bert_jax.finetune").check_config
           if name == "bert_jax.finetune"
           else importlib.import_module("bert_jax.objectives.pretrain_setup").check_config)
  try:
    check(config, mesh)
  except (ValueError, FileNotFoundError) as e:  # placeholder paths, or outputs of earlier commands
    assert "does not exist" in str(e) or "matches no file" in str(e), str(e)


def test_every_path_the_python_examples_load_is_written_by_a_readme_command():
  """Issue 33: the API examples load exactly what the README's commands write (a workdir, its
  export/, or a conversion's --dst), not paths no command produces."""
  text = (ROOT / "README.md").read_text(encoding="utf-8")
  python = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
  loaded = set(re.findall(r'Encoder\.load\("([^"]+)"\)', python))
  assert len(loaded) >= 4, loaded
  written = set()
  for argv in COMMANDS:
    for flag in ("--workdir", "--dst", "--output"):
      if flag in argv:
        written.add(argv[argv.index(flag) + 1])
  for path in sorted(loaded):
    base = path[:-len("/export")] if path.endswith("/export") else path
    assert base in written, f"README's Python example loads {path}; no README command writes {base}"
