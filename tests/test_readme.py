"""The README and docs/ say what the code does: commands, figures, links, wording.

Every `python -m bert_jax.X` command of the README's and docs/*.md's bash blocks is checked as
written (placeholders such as CKPT or $GLUE_DIR stay): the program's --help lists every flag
it gives; a --config command's config file loads, its --config.* overrides name keys, and the
program's config check passes up to paths that a user fills in or an earlier command writes.
The quick start is the two commands CI runs the second of; each fine-tuning recipe of the
README is its config's docstring recipe, with the same figures; every relative link resolves.
tests/test_readme_walkthrough.py runs the README's commands in order on stand-in data.
"""
import contextlib
import functools
import importlib
import io
import os
import pathlib
import re
import shlex

from absl import flags
import pytest

from bert_jax import cli
from bert_jax import config_help
from bert_jax.training import sharding

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README] + DOCS
# The placeholders a user fills in; docs/finetuning.md says where to get each.
PLACEHOLDERS = {"GLUE_DIR", "SQUAD_DIR", "CONLL_DIR", "STSB_DIR", "BEIR_DIR", "HOME"}


def _text(path: pathlib.Path) -> str:
  return path.read_text(encoding="utf-8")


def shell_lines(text: str) -> list[str]:
  """Every command line of a page's bash blocks, continuation lines joined."""
  lines = []
  for block in re.findall(r"```bash\n(.*?)```", text, re.S):
    lines += [l for l in re.sub(r"\\\n\s*", " ", block).splitlines() if l.strip()
              and not l.lstrip().startswith("#")]
  return lines


def split_chain(line: str) -> list[list[str]]:
  """The commands of one line, `&&`, `||` and `;` chains split."""
  parts, part = [], []
  for w in shlex.split(line, comments=True) + ["&&"]:
    if w in ("&&", "||", ";"):
      if part:
        parts.append(part)
      part = []
    else:
      part.append(w)
  return parts


def bert_jax_commands(text: str) -> list[list[str]]:
  """argv (from `bert_jax.X` on) of every `python -m bert_jax.X ...` command of a page."""
  commands = []
  for line in shell_lines(text):
    for part in split_chain(line):
      if "-m" in part[:-1] and part[part.index("-m") + 1].startswith("bert_jax."):
        commands.append(part[part.index("-m") + 1:])
  return commands


def sections(text: str) -> dict[str, str]:
  """`## title` -> the section's text."""
  parts = re.split(r"^## ", text, flags=re.M)[1:]
  return {p.split("\n", 1)[0].strip(): p for p in parts}


COMMANDS = bert_jax_commands(_text(README))
ALL_COMMANDS = [(page.relative_to(ROOT).as_posix(), argv) for page in PAGES
                for argv in bert_jax_commands(_text(page))]


def test_the_readme_is_a_front_page_with_a_section_per_use():
  text = _text(README)
  assert len(text.splitlines()) <= 250
  assert {"Install", "Quick start", "Pretrain", "Fine-tune: GLUE, SQuAD, NER",
          "Sentence embeddings and retrieval", "Convert to and from Hugging Face",
          "Pods and multi-host", "From Python", "Documentation"} <= set(sections(text))
  programs = {c[0] for c in COMMANDS}
  assert {"bert_jax.pretrain", "bert_jax.finetune", "bert_jax.convert", "bert_jax.embed",
          "bert_jax.retrieval_eval", "bert_jax.config_help"} <= programs
  configs = {a.split(":")[0] for c in COMMANDS for a in c if a.startswith("configs/")}
  assert {"configs/pretrain.py", "configs/glue.py", "configs/squad.py", "configs/ner.py",
          "configs/sentence_embeddings.py"} <= configs
  for extra in ("[gpu]", "[tpu]", "[ann]", "[test]", "[test,parity]"):
    assert f"pip install -e '.{extra}'" in text


def test_the_quick_start_is_the_two_commands_ci_runs_the_second_of():
  block = re.findall(r"```bash\n(.*?)```", sections(_text(README))["Quick start"], re.S)
  assert len(block) == 1
  lines = block[0].strip().splitlines()
  assert len(lines) == 2
  first, second = (split_chain(l) for l in lines)
  assert first[0] == ["pip", "install", "-e", "."]
  assert first[1][:3] == ["python", "-m", "bert_jax.pretrain"]
  assert "configs/pretrain.py:tiny" in first[1]
  assert second == [["pip", "install", "-e", ".[test,parity]"], ["pytest", "-q", "tests"]]
  ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
  assert lines[1] in ci.splitlines(), ".ci/run no longer runs the README's test command"
  assert 'pytest -q -m "not slow" tests' in _text(README)


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


@pytest.mark.parametrize("page,argv", ALL_COMMANDS,
                         ids=[f"{p}: {' '.join(c)[:70]}" for p, c in ALL_COMMANDS])
def test_every_command_is_valid_as_written(page, argv):
  name, args = argv[0], argv[1:]
  module = importlib.import_module(name)
  if name == "bert_jax.config_help":
    loaded = config_help.load(str(ROOT / args[0]))
    keys = config_help.flatten(loaded.config)
    assert all(any(k.startswith(p) for k in keys) for p in args[1:]), (page, args)
    return
  help_text = _help_text(module)
  for flag in _flag_names(args):
    plain = flag[2:] if flag.startswith("no") and f"--[no]{flag[2:]}" in help_text else flag
    assert f"--{plain}" in help_text or f"--[no]{plain}" in help_text, (
        f"{page}: {' '.join(argv)}: {name} has no flag --{flag}")
  spec = cli._config_spec(args)  # pylint: disable=protected-access
  if spec is None:
    return
  spec = str(ROOT / spec)
  overrides = [a for a in args if a.startswith("--config.")]
  loaded = config_help.load(spec)
  assert config_help.unknown_override(loaded.config, overrides) is None, (page, argv)
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
  if name == "bert_jax.finetune":
    check = importlib.import_module("bert_jax.finetuning.setup").check_config
  else:  # as bert_jax.pretrain checks: with the data source it resolved
    source = importlib.import_module("bert_jax.data.sources.registry").get(config.data.source)
    check = functools.partial(
        importlib.import_module("bert_jax.pretraining.setup").check_config,
        source=source)
  try:
    check(config, mesh)
  except (ValueError, FileNotFoundError) as e:  # placeholders, or outputs of earlier commands
    assert "does not exist" in str(e) or "matches no file" in str(e), str(e)


def test_the_command_check_can_fail():
  """A misspelled key and an unknown flag are caught by the checks above."""
  loaded = config_help.load(str(ROOT / "configs/glue.py:task=stsb"))
  assert config_help.unknown_override(loaded.config, ["--config.data_dri=x"])
  help_text = _help_text(importlib.import_module("bert_jax.embed"))
  assert "--checkpoint" in help_text and "--no_such_flag" not in help_text


def test_placeholders_are_the_documented_ones_and_never_a_machine_path():
  finetuning = _text(ROOT / "docs" / "finetuning.md")
  for page in PAGES:
    for line in shell_lines(_text(page)):
      for name in re.findall(r"\$\{?([A-Z_]+)", line):
        assert name in PLACEHOLDERS, f"{page.name}: ${name} in {line!r}"
        assert name == "HOME" or f"`${name}`" in finetuning, f"${name} is not explained"


def _slug(heading: str) -> str:
  """GitHub's anchor of a heading."""
  s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
  return s.replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
  text = re.sub(r"```.*?```", "", _text(path), flags=re.S)
  return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_relative_link_resolves():
  checked = 0
  for page in PAGES:
    text = re.sub(r"```.*?```", "", _text(page), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
      if re.match(r"[a-z]+://", target):
        continue
      file, _, anchor = target.partition("#")
      path = (page.parent / file).resolve() if file else page
      assert path.exists(), f"{page.relative_to(ROOT)}: link to {target}: no such file"
      if anchor and path.suffix == ".md":
        assert anchor in _anchors(path), f"{page.relative_to(ROOT)}: no heading for {target}"
      checked += 1
  assert checked >= 20


def test_the_anchor_check_can_fail():
  assert _slug("Multi-host: TPU pods and GPU clusters") == "multi-host-tpu-pods-and-gpu-clusters"
  assert "no-such-heading" not in _anchors(README)


def _docstring_commands(config: pathlib.Path) -> list[list[str]]:
  doc = config_help.load_module(config).__doc__
  joined = re.sub(r"\\\n\s*", " ", doc)
  return [shlex.split(l.strip()) for l in joined.splitlines()
          if l.strip().startswith("python -m bert_jax.")]


def test_the_readme_recipes_are_their_configs_recipes_with_the_same_figures():
  """Each README pretraining / fine-tuning command is a recipe of its config's docstring, and
  each figure the README states after a fine-tuning command is the docstring's."""
  text = _text(README)
  compared = 0
  for block, after in re.findall(r"```bash\n(.*?)```\n(.*?)(?=```|\n## )", text, re.S):
    for line in shell_lines(f"```bash\n{block}```"):
      for part in split_chain(line):
        if part[:3] not in (["python", "-m", "bert_jax.pretrain"],
                            ["python", "-m", "bert_jax.finetune"]):
          continue
        config = ROOT / part[part.index("--config") + 1].split(":")[0]
        assert part in _docstring_commands(config), (
            f"README: {' '.join(part)} is not a recipe in {config.name}'s docstring")
        compared += 1
        if part[2] == "bert_jax.finetune":
          doc = config_help.load_module(config).__doc__
          for figure in re.findall(r"(?<![\w.])-?\d+\.\d+", after.strip().split("\n\n")[0]):
            assert figure in doc, f"README's {figure} after {config.name}'s recipe is not in it"
  assert compared >= 6


def test_the_python_example_loads_only_what_readme_commands_write():
  text = _text(README)
  python = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
  loaded = set(re.findall(r'Encoder\.load\("([^"]+)"\)', python))
  assert len(loaded) >= 3, loaded
  written = set()
  for argv in COMMANDS:
    for flag in ("--workdir", "--dst", "--output"):
      if flag in argv:
        written.add(argv[argv.index(flag) + 1])
  for path in sorted(loaded):
    base = path[:-len("/export")] if path.endswith("/export") else path
    assert base in written, f"README's Python example loads {path}; no README command writes {base}"


def test_the_config_reference_and_every_guide_are_linked_from_the_readme():
  text = _text(README)
  for page in DOCS:
    assert f"(docs/{page.name})" in text, f"README does not link docs/{page.name}"
  assert "(benchmarks/README.md)" in text
  assert os.path.exists(ROOT / "docs" / "configuration.md")
