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


MAX_POSITIONAL = 8
MAX_TUPLE = 4
# Signatures a library fixes: a Pallas kernel receives its refs by position, a custom_vjp's
# backward returns one cotangent per primal input.
FIXED_BY_AN_API = {"bert_jax/modeling/fused_norm.py:_fused_norm_backward",
                   "bert_jax/modeling/fused_norm.py:_fused_bwd"}
# Still to be given settings objects (the encoder's inputs, the kernel geometry): listed so that a new one fails, and one fixed must leave the list.
TO_GROUP = {"bert_jax/modeling/fused_norm.py:_geometry",
            "bert_jax/modeling/model.py:__call__"}


def long_signatures(source: str, name: str) -> set[str]:
  """'NAME:FUNCTION' for each function of `source` taking more than MAX_POSITIONAL positional
  parameters (self and cls not counted) or returning a tuple display of more than MAX_TUPLE."""
  found = set()
  for node in ast.walk(ast.parse(source)):
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      continue
    params = node.args.posonlyargs + node.args.args
    count = len(params) - (1 if params and params[0].arg in ("self", "cls") else 0)
    wide = any(isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple)
               and len(r.value.elts) > MAX_TUPLE for r in ast.walk(node))
    if count > MAX_POSITIONAL or wide:
      found.add(f"{name}:{node.name}")
  return found


def test_no_function_takes_nine_positional_parameters_or_returns_five_values():
  found = set()
  for path in sorted(PACKAGE.rglob("*.py")):
    found |= long_signatures(path.read_text(encoding="utf-8"),
                             str(path.relative_to(PACKAGE.parent)))
  assert not found - FIXED_BY_AN_API - TO_GROUP, (
      "pass a settings object (a dataclass) or keyword-only parameters instead: "
      + ", ".join(sorted(found - FIXED_BY_AN_API - TO_GROUP)))
  assert not TO_GROUP - found, f"now grouped, take off TO_GROUP: {sorted(TO_GROUP - found)}"


def test_the_signature_check_finds_both_shapes():
  source = ("def many(a, b, c, d, e, f, g, h, i):\n  pass\n\n"
            "def keywords(a, b, c, d, e, f, g, h, *, i):\n  pass\n\n"
            "class C:\n  def method(self, a, b, c, d, e, f, g, h):\n    return a, b, c, d, e\n\n"
            "def four():\n  return 1, 2, 3, 4\n")
  assert long_signatures(source, "x.py") == {"x.py:many", "x.py:method"}
