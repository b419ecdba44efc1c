"""docs/configuration.md is what `python -m bert_jax.config_reference` prints today.

The page is generated from the config files (every key, its default and the comment above
its declaration); a config change that is not regenerated into the page fails here.
"""
import contextlib
import io
import pathlib

from bert_jax import config_help
from bert_jax import config_reference

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"


def test_the_committed_page_is_the_generated_one():
  generated = config_reference.render()
  committed = PAGE.read_text(encoding="utf-8")
  assert committed == generated, (
      f"docs/configuration.md differs from the configs; regenerate it: "
      f"{config_reference.COMMAND}")


def test_the_command_prints_the_page():
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    config_reference.main([])
  assert out.getvalue() == PAGE.read_text(encoding="utf-8")


def test_every_config_file_and_every_key_is_on_the_page():
  page = PAGE.read_text(encoding="utf-8")
  listed = {c.path for c in config_reference.CONFIG_FILES}
  assert listed == {f"configs/{p.name}" for p in (ROOT / "configs").glob("*.py")}
  for config_file in config_reference.CONFIG_FILES:
    spec = str(ROOT / config_file.path) + (
        f":{config_file.reference}" if config_file.reference else "")
    loaded = config_help.load(spec)
    keys = config_help.flatten(loaded.config)
    assert len(keys) > 10
    for key, value in keys.items():
      comment = loaded.comments.get(key)
      assert comment, f"{config_file.path}: {key} has no comment above its declaration"
      row = f"| `{key}` | `{repr(value).replace('|', chr(92) + '|')}` |"
      assert row in page, f"{config_file.path}: {row} is not on the page"


def test_a_changed_default_or_comment_changes_the_page(tmp_path):
  """The comparison above can fail: a config whose default or comment differs renders
  differently."""
  (tmp_path / "configs").mkdir()
  for p in (ROOT / "configs").glob("*.py"):
    (tmp_path / "configs" / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
  before = config_reference.render(tmp_path)
  assert before == config_reference.render()
  ner = tmp_path / "configs" / "ner.py"
  text = ner.read_text(encoding="utf-8")
  ner.write_text(text.replace('c.label_scheme = "IOB1"', 'c.label_scheme = "IOB2"'),
                 encoding="utf-8")
  changed_default = config_reference.render(tmp_path)
  assert changed_default != before and "`'IOB2'`" in changed_default
  ner.write_text(text.replace("# Tagging scheme of the training targets",
                              "# The scheme of the training targets"), encoding="utf-8")
  assert "The scheme of the training targets" in config_reference.render(tmp_path)


def test_the_varying_defaults_table_names_what_the_variant_changes():
  lines = config_reference.section(config_reference.CONFIG_FILES[0])
  rows = {line.split(" | ")[0].strip("| `") for line in lines
          if line.startswith("| `") and line.count("|") == 8}
  tiny = config_help.flatten(config_help.load(str(ROOT / "configs/pretrain.py:tiny")).config)
  base = config_help.flatten(config_help.load(str(ROOT / "configs/pretrain.py:base")).config)
  assert {k for k in base if tiny[k] != base[k]} <= rows
  assert {"batch_size", "total_steps", "optimizer.name", "variant"} <= rows
