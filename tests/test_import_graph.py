"""The package's import graph: no circles, and the library never imports a program.

Every import statement counts, at module level or inside a function. Programs are
the modules run as `python -m bert_jax.X` (those with a `__main__` block) and
bert_jax.cli, their command-line support; everything else is the library, which
programs, tests and users import. A library module that needs something a
program holds means that thing belongs in the library (bert_jax.inference.embedding under
bert_jax.embed, bert_jax.inference.mask_filling under bert_jax.fill_mask,
bert_jax.tasks.squad.metrics under bert_jax.squad_eval).
"""
import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "bert_jax"


def _modules() -> dict[str, pathlib.Path]:
  out = {}
  for path in PACKAGE.rglob("*.py"):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return out


MODULES = _modules()


def _imported(name: str, node) -> list[str]:
  """The package modules an import statement of module `name` loads."""
  if isinstance(node, ast.Import):
    targets = [a.name for a in node.names]
  else:
    base = node.module or ""
    if node.level:
      package = name.split(".") if MODULES[name].name == "__init__.py" else name.split(".")[:-1]
      base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
  found = []
  for target in targets:
    while target not in MODULES and "." in target:
      target = target.rsplit(".", 1)[0]
    if target in MODULES and target != name:
      found.append(target)
  return found


def _graph() -> dict[str, set[str]]:
  graph = {}
  for name, path in MODULES.items():
    tree = ast.parse(path.read_text(encoding="utf-8"))
    graph[name] = {t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                   for t in _imported(name, node)}
  return graph


def _programs() -> set[str]:
  return {name for name, path in MODULES.items()
          if '__name__ == "__main__"' in path.read_text(encoding="utf-8")} | {"bert_jax.cli"}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return found


def test_the_graph_sees_the_package():
  graph = _graph()
  assert len(graph) > 60
  assert "bert_jax.tasks.glue.task" in graph["bert_jax.tasks.registry"]  # a module-level import
  assert "bert_jax.data.sources.prepared_data" in graph["bert_jax.data.sources.registry"]
  assert {"bert_jax.pretrain", "bert_jax.finetune", "bert_jax.embed"} <= _programs()


def test_no_import_circles():
  assert _circles(_graph()) == []


def test_circles_are_found():
  assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_library_imports_no_program():
  graph, programs = _graph(), _programs()
  wrong = {name: sorted(graph[name] & programs) for name in sorted(graph)
           if name not in programs and graph[name] & programs}
  assert wrong == {}, "library modules that import programs: " + repr(wrong)


# The library's subpackages, lowest first: a module imports only from its own layer or
# those below it (docs/DESIGN.md, "Layout").
LAYERS = ("configuration", "runtime", "data", "members", "modeling", "batching", "training",
          "checkpoints", "conversion", "inference", "objectives", "tasks", "finetuning",
          "pretraining")


def _layer(name: str) -> int:
  """A module's layer; bert_jax itself and its top-level modules are above every layer."""
  parts = name.split(".")
  return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)


def test_the_top_level_holds_programs_and_the_api_only():
  top = {name for name in MODULES if name.count(".") == 1 and MODULES[name].suffix == ".py"
         and MODULES[name].name != "__init__.py"}
  assert top - _programs() == {"bert_jax.api"}
  assert {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} == set(LAYERS)


def test_no_layer_imports_a_layer_above_it():
  graph = _graph()
  upward = sorted((name, target) for name in graph for target in graph[name]
                  if _layer(target) > _layer(name))
  assert upward == [], "imports from a lower layer to a higher one: " + repr(upward)


def test_upward_imports_are_found():
  assert _layer("bert_jax.runtime.startup") < _layer("bert_jax.modeling.model")
  assert _layer("bert_jax.tasks.glue.data") < _layer("bert_jax.finetune")


# bert_jax.data's wings, lowest first: a source reads text and knows no tokenizer; a tokenizer
# (building a vocabulary reads a source's text) knows no stream; the stream uses both.
WINGS = ("sources", "tokenizers", "stream")


def _wing(name: str) -> int:
  """A bert_jax.data module's wing; -1 for the data package itself and modules outside it."""
  parts = name.split(".")
  return WINGS.index(parts[2]) if parts[:2] == ["bert_jax", "data"] and len(parts) > 3 else -1


def _against_the_wings(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
  return sorted((name, target) for name in graph for target in graph[name]
                if _wing(name) >= 0 and _wing(target) > _wing(name))


def test_every_data_module_is_in_a_wing():
  assert {n for n in MODULES if n.startswith("bert_jax.data.") and _wing(n) < 0} == {
      f"bert_jax.data.{wing}" for wing in WINGS}


def test_the_data_wings_keep_their_order():
  graph = _graph()
  assert "bert_jax.data.sources.registry" in graph["bert_jax.data.tokenizers.vocab_builder"]
  assert "bert_jax.data.tokenizers.tokenizer" in graph["bert_jax.data.stream.pretrain_data"]
  assert _against_the_wings(graph) == [], "data modules importing a wing above their own"


def test_imports_against_the_wings_are_found():
  graph = {"bert_jax.data.sources.registry": {"bert_jax.data.stream.segments"},
           "bert_jax.data.tokenizers.wordpiece": {"bert_jax.data.sources.raw_docs",
                                                  "bert_jax.data.stream.rows"},
           "bert_jax.data.stream.rows": {"bert_jax.data.tokenizers.tokenizer"}}
  assert _against_the_wings(graph) == [
      ("bert_jax.data.sources.registry", "bert_jax.data.stream.segments"),
      ("bert_jax.data.tokenizers.wordpiece", "bert_jax.data.stream.rows")]


# A run's checkpoints (train state on a mesh) are training's; a bundle is loaded without them.
RUN_CHECKPOINTS = "bert_jax.checkpoints.run_checkpoints"


def _training_imports_of_model_users(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
  """(module, training module) for each import of training by inference/ or the Python API:
  using a trained model needs nothing from training (loading lives in checkpoints/loading.py)."""
  users = [name for name in graph if name == "bert_jax.api" or name == "bert_jax.inference"
           or name.startswith("bert_jax.inference.")]
  return sorted((name, target) for name in users for target in graph[name]
                if target in ("bert_jax.training", RUN_CHECKPOINTS)
                or target.startswith("bert_jax.training."))


def test_using_a_trained_model_imports_nothing_from_training():
  found = _training_imports_of_model_users(_graph())
  assert found == [], "inference/ and api.py modules that import training: " + repr(found)


def test_training_imports_of_model_users_are_found():
  graph = {"bert_jax.api": {"bert_jax.checkpoints.loading"},
           "bert_jax.inference.embedding": {RUN_CHECKPOINTS, "bert_jax.runtime"},
           "bert_jax.finetune": {"bert_jax.checkpoints.run_checkpoints"}}
  assert _training_imports_of_model_users(graph) == [
      ("bert_jax.inference.embedding", "bert_jax.checkpoints.run_checkpoints")]
  graph["bert_jax.api"].add("bert_jax.training")
  assert _training_imports_of_model_users(graph)[0] == ("bert_jax.api", "bert_jax.training")
