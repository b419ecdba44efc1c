r"""docs/configuration.md: every config key, its default and its comment, from the config files.

  python -m bert_jax.config_reference > docs/configuration.md

Config files declare every key with a comment above it (configs/*.py, and the sections they
share in bert_jax/configuration/sections.py); `bert_jax.config_help` reads those comments
from the sources. This module prints them as one Markdown page: per config file, its
argument, a table of every key (as `get_config` of a reference argument builds it) and tables
of the keys whose defaults depend on the argument. tests/test_config_reference.py
regenerates the page and compares it with the committed one, so the page cannot drift from
the configs: after changing a config, run the command above.
"""
import dataclasses
import pathlib
import sys
from typing import Optional, Sequence

from bert_jax import config_help

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMAND = "python -m bert_jax.config_reference > docs/configuration.md"


@dataclasses.dataclass(frozen=True)
class ConfigFile:
  """A config file, the argument its key table is built with, and the arguments compared."""
  path: str  # relative to the repository root
  reference: Optional[str]  # the argument of the key table ('' or None: none)
  # Groups of arguments; per group, a table of the keys whose defaults differ among them.
  compared: tuple = ()
  argument: str = ""  # what the argument means, one line


CONFIG_FILES = (
    ConfigFile("configs/pretrain.py", "base",
               (("tiny", "mini", "small", "medium", "base", "large"),
                ("base", "base,recipe=roberta", "base,recipe=albert", "base,recipe=electra",
                 "base,recipe=deberta", "base,recipe=modernbert", "base,phase2",
                 "base,fused_attention"),
                ("large", "large,lamb_64k", "large,lamb_64k,phase2")),
               "`VARIANT[,recipe=RECIPE][,lamb_64k][,phase2][,fused_attention]`: VARIANT is the "
               "model size (tiny, mini, small, medium, base, large); RECIPE one of bert (default), "
               "roberta, albert, electra, deberta, modernbert; `lamb_64k` the large-batch recipe (LAMB, 64K "
               "sequences of 128, 32K of 512 in phase 2); `phase2` is BERT's second phase "
               "(sequences of 512); `fused_attention` the accelerator recipe (no attention "
               "dropout)."),
    ConfigFile("configs/glue.py", "task=mrpc",
               (("task=mrpc", "task=stsb", "task=mnli", "task=ax"),),
               "`task=TASK`: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli or ax."),
    ConfigFile("configs/squad.py", "version=1.1", (("version=1.1", "version=2.0"),),
               "`version=1.1` or `version=2.0`."),
    ConfigFile("configs/ner.py", None, (), "none."),
    ConfigFile("configs/sentence_embeddings.py", None, (), "none."),
)


def _cell(text: str) -> str:
  """Text safe inside a Markdown table cell."""
  return str(text).replace("|", "\\|").replace("\n", " ")


def _value(value) -> str:
  return f"`{_cell(repr(value))}`"


def _spec(config_file: ConfigFile, arg: Optional[str]) -> str:
  return config_file.path + (f":{arg}" if arg else "")


def _summary(path: pathlib.Path) -> str:
  """The first line of a config file's module docstring."""
  doc = config_help.load_module(path).__doc__ or ""
  return doc.strip().splitlines()[0] if doc.strip() else ""


def section(config_file: ConfigFile, root: pathlib.Path = ROOT) -> list[str]:
  """The Markdown lines of one config file: its argument, every key, the keys that vary."""
  path = root / config_file.path
  loaded = config_help.load(_spec(config_file, config_file.reference).replace(
      config_file.path, str(path), 1))
  keys = config_help.flatten(loaded.config)
  out = [f"## {config_file.path}", "", _summary(path), "",
         f"Argument: {config_file.argument}", ""]
  out += [f"{len(keys)} keys, with their defaults for "
          f"`{_spec(config_file, config_file.reference)}`. The full recipe commands, expected "
          f"runtimes and results are in [the file's docstring](../{config_file.path}).", "",
          "| key | default | what it does |", "|---|---|---|"]
  for key, value in keys.items():
    out.append(f"| `{key}` | {_value(value)} | {_cell(loaded.comments.get(key) or '')} |")
  out.append("")
  for group in config_file.compared:
    configs = {arg: config_help.flatten(config_help.load(f"{path}:{arg}").config)
               for arg in group}
    varying = [k for k in keys if len({repr(c.get(k)) for c in configs.values()}) > 1]
    out += [f"Defaults that differ between {', '.join(f'`{a}`' for a in group)} "
            f"({len(varying)} keys):", "",
            "| key | " + " | ".join(f"`{a}`" for a in group) + " |",
            "|---|" + "---|" * len(group)]
    for key in varying:
      out.append(f"| `{key}` | " + " | ".join(_value(configs[a].get(key)) for a in group) + " |")
    out.append("")
  return out


def render(root: pathlib.Path = ROOT) -> str:
  """The whole page."""
  out = ["# Configuration reference", "",
         f"Generated from the config files by `{COMMAND}`; do not edit by hand "
         "(tests/test_config_reference.py fails when this page and the configs differ).", "",
         "Every run takes `--config FILE.py[:ARGUMENT]` and any number of "
         "`--config.KEY=VALUE` overrides (`--config.optimizer.name=lamb`). An unknown key is "
         "refused in one line naming the closest valid one, and a key the run would not read "
         "(for example `--config.data.files` with `data.source=builtin`) is refused naming what "
         "reads it. `python -m bert_jax.config_help FILE.py[:ARGUMENT] [PREFIX]`, or "
         "`--config.help` on `pretrain` and `finetune`, prints the same listing for any argument.",
         "",
         "Contents: " + ", ".join(f"[{c.path}](#{c.path.replace('/', '').replace('.', '')})"
                                  for c in CONFIG_FILES) + ".", ""]
  for config_file in CONFIG_FILES:
    out += section(config_file, root)
  return "\n".join(out).rstrip("\n") + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
  """Prints the page (no arguments)."""
  args = list(sys.argv[1:] if argv is None else argv)
  if args:
    print(__doc__.strip(), file=sys.stderr)
    raise SystemExit(0 if args[0] in ("-h", "--help") else 2)
  sys.stdout.write(render())


if __name__ == "__main__":
  main()
