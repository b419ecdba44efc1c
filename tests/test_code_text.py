"""The package's text stays short and timeless: no dated figure in its code, and docstrings that
say what a reader needs in a sentence where a paragraph was.

A date or a measurement goes stale the day the code changes; benchmarks/README.md's results
table is where figures live, each with its command and machine. The docstring share is the
lines of every module, class and function docstring over all lines of the files.
"""
import ast
import pathlib
import re
from typing import Iterable

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "bert_jax"

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
          r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
# 2026-11-24, 2026-11, 24/11/2026, Nov 2026, November 24, 2026, 24 Nov 2026.
DATE = re.compile(
    r"\b(?:19|20)\d\d-[01]\d(?:-[0-3]\d)?\b"
    r"|\b\d{1,2}/\d{1,2}/(?:19|20)\d\d\b"
    rf"|\b(?:\d{{1,2}} )?{_MONTH}\.?(?: \d{{1,2}},?)? (?:19|20)\d\d\b")

# Files of bert_jax/ that may still hold a date, to be cleaned (none at present); every other
# file fails the test on its first date.
DATED_FILES_TO_CLEAN: frozenset = frozenset()

# The folders whose docstrings were cut to a sentence where a paragraph was, and their ceiling.
FOLDERS = ("data/sources", "data/stream", "data/tokenizers", "runtime", "tasks", "inference",
           "conversion", "configuration", "pretraining")
MAX_FOLDER_SHARE = 0.17
# The whole package's ceiling: the code says why once, and figures live in the results table.
MAX_PACKAGE_SHARE = 0.20


def dates(source: str, name: str) -> list[str]:
  """'NAME:LINE: TEXT' for each date in `source`."""
  return [f"{name}:{n}: {m.group(0)}" for n, line in enumerate(source.splitlines(), 1)
          for m in DATE.finditer(line)]


def docstring_lines(source: str) -> tuple[int, int]:
  """(lines of the module's, classes' and functions' docstrings, lines of `source`)."""
  doc = 0
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      first = node.body[0] if node.body else None
      if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
          and isinstance(first.value.value, str)):
        doc += first.end_lineno - first.lineno + 1
  return doc, len(source.splitlines())


def docstring_share(sources: Iterable[str]) -> float:
  """Docstring lines over all lines of `sources` (module texts) together."""
  counts = [docstring_lines(s) for s in sources]
  total = sum(t for _, t in counts)
  return sum(d for d, _ in counts) / total if total else 0.0


def _texts(folder: pathlib.Path) -> list[str]:
  return [p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*.py"))]


def test_no_dated_figure_in_the_package():
  found, cleaned = [], []
  for path in sorted(PACKAGE.rglob("*.py")):
    name = str(path.relative_to(PACKAGE.parent))
    hits = dates(path.read_text(encoding="utf-8"), name)
    if name in DATED_FILES_TO_CLEAN:
      cleaned += [] if hits else [name]
    else:
      found += hits
  assert not found, ("a date in the code goes stale; say the reason, and put a current figure "
                     "in benchmarks/README.md's results table:\n" + "\n".join(found))
  assert not cleaned, f"no date left: take these off DATED_FILES_TO_CLEAN: {cleaned}"


def test_the_date_check_finds_each_form():
  source = ('"""Measured 2026-11-24 on a 2-core CPU."""\n'
            "x = 1  # Nov 2026: 3.2 s\n"
            "y = 2  # as of November 24, 2026\n"
            "z = 3  # 24/11/2026\n"
            "w = 4  # 2026-11\n"
            "v = 5  # 2,026 steps, 1024-dim, version 2.0, the 12-layer model\n")
  assert dates(source, "made_up.py") == [
      "made_up.py:1: 2026-11-24", "made_up.py:2: Nov 2026", "made_up.py:3: November 24, 2026",
      "made_up.py:4: 24/11/2026", "made_up.py:5: 2026-11"]


def test_each_folder_keeps_its_docstrings_short():
  shares = {f: docstring_share(_texts(PACKAGE / f)) for f in FOLDERS}
  over = {f: round(s, 3) for f, s in shares.items() if s > MAX_FOLDER_SHARE}
  assert not over, (f"docstrings over {MAX_FOLDER_SHARE:.0%} of these folders' lines: {over}; "
                    "say in a sentence what a paragraph said, and drop restated signatures")


def test_the_package_keeps_its_docstrings_under_its_ceiling():
  share = docstring_share(_texts(PACKAGE))
  assert share <= MAX_PACKAGE_SHARE, f"docstrings are {share:.1%} of bert_jax/'s lines"


def test_the_share_counts_every_docstring_line():
  source = ('"""A module.\n\nIts second paragraph.\n"""\n'  # 4 lines
            "import os\n\n\n"
            "class C:\n"
            '  """A class."""\n'  # 1 line
            "  def f(self):\n"
            '    """A method,\n    on two lines."""\n'  # 2 lines
            "    return os.sep\n\n\n"
            "async def g():\n"
            '  x = "not a docstring"\n'
            "  return x\n")
  assert docstring_lines(source) == (7, 18)
  assert docstring_share([source, "a = 1\n" * 9 + "b = 2\n"]) == 7 / 28
  assert docstring_share(['"""Only a docstring."""\n']) == 1.0
  assert docstring_share(["x = 1\n"]) == 0.0
