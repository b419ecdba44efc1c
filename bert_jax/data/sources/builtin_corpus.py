"""The built-in corpus: English prose every Python installation carries, no download.

A document is one standard-library module (its docstrings and comment blocks, read with `ast`,
never imported) or one topic of `pydoc_data.topics`, cleaned into sentences (code, doctests,
grammar rules and headings dropped). The text is a pure function of the standard library, so
every host with the same Python builds the same corpus; it is cached under ~/.cache/bert_jax
(or $BERT_JAX_CACHE) keyed by Python version and the library's file list, else built in memory.
"""
import ast
import hashlib
import logging
import os
import re
import sys
import sysconfig
import tempfile

# Bump when the cleaning below changes (invalidates caches).
_CORPUS_VERSION = 2
# Folders of the standard library that are not part of every installation or
# are platform specific.
_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test",
                        "__pycache__", "lib2to3"})
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_HEADING = re.compile(r"^[\s*=\-~^#+`'\".:_]*$")
_WHITESPACE = re.compile(r"\s+")


def _stdlib_files() -> tuple[str, list[str]]:
  root = sysconfig.get_paths()["stdlib"]
  files = []
  for d, dirs, names in os.walk(root):
    dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS and not x.startswith("config-"))
    files += [os.path.join(d, n) for n in names
              if n.endswith(".py") and not n.startswith("_sysconfigdata")]
  return root, sorted(files)


def _paragraph_sentences(paragraph: list[str]) -> list[str]:
  """Sentences of one paragraph (a list of raw lines), [] if it is not prose."""
  first = paragraph[0]
  if first[:1].isspace() or first.lstrip().startswith((">>>", "...", "$ ", "%")):
    return []  # Code, doctest or literal block.
  if any("::=" in line or line.lstrip().startswith(">>>") for line in paragraph):
    return []
  if len(paragraph) == 2 and _HEADING.match(paragraph[1]):
    return []  # A heading with its underline.
  text = _WHITESPACE.sub(" ", " ".join(line.strip() for line in paragraph)).strip()
  letters = sum(c.isalpha() for c in text)
  if len(text) < 12 or letters < 0.6 * len(text) or " " not in text:
    return []
  return [s.strip() for s in _SENTENCE_END.split(text) if len(s.strip()) > 1]


def clean_document(text: str) -> list[str]:
  """Cleans one docstring / help topic into sentences (may be empty)."""
  sentences, paragraph = [], []
  for line in text.expandtabs(8).split("\n") + [""]:
    if line.strip():
      paragraph.append(line.rstrip())
    elif paragraph:
      sentences += _paragraph_sentences(paragraph)
      paragraph = []
  return sentences


_COMMENT_BLOCK = re.compile(r"(?:^[ \t]*#[^\n]*\n)+", re.M)
_COMMENT_MARK = re.compile(r"^[ \t]*#+[ \t]?", re.M)


def _module_texts(source: bytes, path: str) -> list[str]:
  """Docstrings and comment blocks of one module, in source order."""
  tree = ast.parse(source, filename=path)
  items = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node, clean=True)
      if doc:
        items.append((node.body[0].lineno, doc))
  text = source.decode("utf-8", "replace")
  for m in _COMMENT_BLOCK.finditer(text):
    line = text.count("\n", 0, m.start()) + 1
    items.append((line, _COMMENT_MARK.sub("", m.group(0))))
  return [t for _, t in sorted(items, key=lambda x: x[0])]


def _documents(root: str, files: list[str]):
  """Yields each document as a list of raw texts (docstrings, comments, topics)."""
  for path in files:
    try:
      with open(path, "rb") as f:
        texts = _module_texts(f.read(), path)
    except (SyntaxError, ValueError, OSError) as e:
      logging.info("builtin corpus: skipping %s (%s)", path, e)
      continue
    yield texts
  topics_file = os.path.join(root, "pydoc_data", "topics.py")
  if os.path.exists(topics_file):
    with open(topics_file, "rb") as f:
      topics = ast.literal_eval(_topics_dict(ast.parse(f.read())))
    for name in sorted(topics):
      yield [topics[name]]


def _topics_dict(tree: ast.Module) -> ast.AST:
  for node in tree.body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "topics":
      return node.value
  return ast.Dict(keys=[], values=[])


def build_text() -> str:
  """Builds the corpus text: one sentence per line, a blank line between documents."""
  root, files = _stdlib_files()
  docs = []
  for texts in _documents(root, files):
    sentences = [s for t in texts for s in clean_document(t)]
    if sentences:
      docs.append("\n".join(sentences))
  return "\n\n".join(docs) + "\n"


def _cache_path() -> str:
  root, files = _stdlib_files()
  h = hashlib.sha256()
  for path in files:
    h.update(os.path.relpath(path, root).encode("utf-8"))
    h.update(str(os.path.getsize(path)).encode())
  v = sys.version_info
  cache_dir = os.environ.get("BERT_JAX_CACHE") or os.path.join(
      os.path.expanduser("~"), ".cache", "bert_jax")
  name = (f"builtin_corpus_v{_CORPUS_VERSION}_{sys.implementation.name}"
          f"{v.major}.{v.minor}.{v.micro}_{h.hexdigest()[:12]}.txt")
  return os.path.join(cache_dir, name)


def load_text() -> str:
  """The corpus text, from the cache when present (built and cached otherwise)."""
  path = _cache_path()
  try:
    with open(path, "r", encoding="utf-8") as f:
      return f.read()
  except OSError:
    pass
  text = build_text()
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      f.write(text)
    os.replace(tmp, path)
  except OSError as e:
    logging.info("builtin corpus: not cached (%s)", e)
  return text
