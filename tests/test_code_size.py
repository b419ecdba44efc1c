"""No function of bert_jax/ over 100 lines and no class over 300: past that a reader can no
longer hold one in mind, and the split along its jobs is overdue."""
import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "bert_jax"
MAX_FUNCTION_LINES = 100
MAX_CLASS_LINES = 300


def offenders(source: str, name: str) -> list[str]:
  """'NAME:LINE QUALNAME is N lines (max M)' for each function or class of `source` that is
  too long (its lines from the `def` / `class` line, decorators not counted, to its last)."""
  found = []

  def visit(node: ast.AST, prefix: str) -> None:
    for child in ast.iter_child_nodes(node):
      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        qualname = prefix + child.name
        limit = MAX_CLASS_LINES if isinstance(child, ast.ClassDef) else MAX_FUNCTION_LINES
        lines = child.end_lineno - child.lineno + 1
        if lines > limit:
          found.append(f"{name}:{child.lineno} {qualname} is {lines} lines (max {limit})")
        visit(child, qualname + ".")
      else:
        visit(child, prefix)

  visit(ast.parse(source), "")
  return found


def test_no_function_or_class_of_the_package_is_too_long():
  found = []
  for path in sorted(PACKAGE.rglob("*.py")):
    found += offenders(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
  assert not found, "split these along their jobs:\n" + "\n".join(found)


def test_the_check_finds_a_long_function_and_a_long_class():
  body = "".join(f"  x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
  source = (f"def short():\n  return 1\n\n\ndef long():\n{body}\n\n"
            "class Big:\n" + "".join(f"  def m{i}(self):\n    return {i}\n\n" for i in range(101)))
  assert offenders(source, "made_up.py") == [
      f"made_up.py:5 long is {MAX_FUNCTION_LINES + 1} lines (max {MAX_FUNCTION_LINES})",
      "made_up.py:108 Big is 303 lines (max 300)"]
  assert offenders("def f():\n  pass\n", "ok.py") == []
