"""The repository speaks of bert_jax alone: no tracker numbers, no bug history, no one machine's
paths, no remote service's call syntax, no numbering of rounds of work.

Code says why it is as it is (the commit message says which change brought it); examples name
placeholders a user fills in (`$GLUE_DIR`) or files the repository ships.
"""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Everywhere in the tracked text files.
EVERYWHERE = {
    "a tracker's issue number": r"\bissues? #?\d+",
    "bug history": r"\(was[: ]",
    "one machine's path": r"(?<![\w.])/(work|root|home/\w+)/|/tmp/bash_jobs",
    "a remote service's call syntax": r"\$OUT\b|\bdevice call\b|\bcarry \[|\btimeout_s\b",
    "a numbered round of work": (r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|"
                                 r"tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|"
                                 r"\d+(st|nd|rd|th)) session\b|\bround \d+\b"),
    "the folder of one workplace's data": r"\.\./shared\b",
    "the workplace's name for a run": r"\bmain job\b",
}
# Besides, in what a user reads (a test suite's "session" is pytest's).
PAGES = {
    "a session of work": r"\bsession\b",
    "a round of work": r"\bround\b(?!-trip)",
    "an install from a registry that has no bert_jax": r"pip install bert_jax",
}
# Files that may hold a form: word lists, and the one place tests find the optional real data.
EXEMPT = {
    "bert_jax/assets/bert-base-uncased-vocab.txt": EVERYWHERE.keys(),
    "tests/conftest.py": ("the folder of one workplace's data",),
    "tests/test_product_words.py": EVERYWHERE.keys(),
}


def _tracked() -> list[str]:
  out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
  return [p for p in out.stdout.decode().split("\0") if p]


def _is_page(path: str) -> bool:
  return (path.endswith(".md") and not path.startswith("tests/")) or (
      path.startswith("configs/") and path.endswith(".py"))


def _offences(path: str, text: str) -> list[str]:
  rules = dict(EVERYWHERE, **(PAGES if _is_page(path) else {}))
  found = []
  for what, pattern in rules.items():
    if what in EXEMPT.get(path, ()):
      continue
    for m in re.finditer(pattern, text, re.I):
      line = text.count("\n", 0, m.start()) + 1
      found.append(f"{path}:{line}: {what}: {m.group(0)!r}")
  return found


def test_the_tracked_files_speak_of_the_product_alone():
  files = _tracked()
  assert "bert_jax/finetune.py" in files and "README.md" in files
  offences = []
  for path in files:
    try:
      text = (ROOT / path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
      continue
    offences += _offences(path, text)
  assert not offences, "\n".join(offences)


@pytest.mark.parametrize("text, path, what", [
    ("see issue 37", "bert_jax/x.py", "a tracker's issue number"),
    ("fixed in issues #12", "tests/test_x.py", "a tracker's issue number"),
    ("spearman 1.0 (was: 0.5)", "bert_jax/x.py", "bug history"),
    ("python /work/main/benchmarks/x.py", "benchmarks/x.py", "one machine's path"),
    ("ls /root/.cache", "launch/x.sh", "one machine's path"),
    ('carry [".whl"], timeout_s 590', "benchmarks/README.md", "a remote service's call syntax"),
    ("the fifth session's figures", "bert_jax/x.py", "a numbered round of work"),
    ("Reliability round 4", "bert_jax/x.py", "a numbered round of work"),
    ("--data_dir=../shared/data/glue", "configs/glue.py", "the folder of one workplace's data"),
    ("as in the main job", "bert_jax/x.py", "the workplace's name for a run"),
    ("measured this session", "docs/x.md", "a session of work"),
    ("pip install bert_jax[ann]", "README.md", "an install from a registry that has no bert_jax"),
])
def test_each_form_is_found(text, path, what):
  assert {o.split(": ")[1] for o in _offences(path, text)} == {what}


@pytest.mark.parametrize("text, path", [
    ("a session-scoped fixture", "tests/test_x.py"),
    ("tokens round-trip", "docs/x.md"),
    ("see $GLUE_DIR/MRPC", "README.md"),
    ("os.path.join(workdir, 'x')", "bert_jax/x.py"),
    ("round(x, 4)", "bert_jax/x.py"),
])
def test_ordinary_words_are_not_found(text, path):
  assert _offences(path, text) == []
