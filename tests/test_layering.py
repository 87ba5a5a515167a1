"""The package's layers, read from the source: the core (``critic``) imports nothing above it, the critics import
no study, and no module of the core imports one that imports it back (lazy imports inside functions included;
imports for annotations only, under ``TYPE_CHECKING``, are not dependencies)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module ``name`` imports (absolute names; ``from pkg import module`` as the module), skipping
    ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
               and getattr(block.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(block)}
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return out - {name}


def _graph(package: str) -> dict[str, set[str]]:
    modules = _modules(package)
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v] & set(graph):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package, above", [("critic", ("critics", "experiments")), ("critics", ("experiments",))])
def test_a_layer_imports_nothing_above_it(package, above):
    upward = sorted(f"{name} -> {target}" for name, targets in _graph(package).items() for target in targets
                    if target.split(".")[0] in above)
    assert upward == []


@pytest.mark.parametrize("package", ["critic", "critics", "experiments"])
def test_no_package_has_an_import_cycle(package):
    assert _cycles(_graph(package)) == []


RENDERING = ("matplotlib", "critic.html", "critic.plots", "critic.report", "critics.report_html")


def _renders(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return module.startswith(RENDERING) or last in ("report", "plots", "view") or last.endswith("_plots")


def test_critics_import_no_rendering():
    """Issue 39: a critic's module (one that registers a critic) imports no plotting or report module, lazily
    or not: its figures and document view live in its view (critic.views), registered beside it."""
    graph = _graph("critics")
    models = [name for name, path in _modules("critics").items() if "@register_critic(" in path.read_text()]
    assert len(models) >= 5
    for name in models:
        assert not [m for m in graph[name] if _renders(m)], name


def test_the_walker_sees_lazy_imports_and_cycles():
    """The checks can fail: a lazy import is an edge, and two modules importing each other are a cycle."""
    graph = _graph("critic")
    assert "critic.html" in graph["critic.notebook"]  # imported inside notebook.panel_html
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_command_line_finds_its_commands_through_the_registry():
    """critic.cli imports no command module, not even lazily (``critic lm`` is registered as a reference,
    ``critic.lm.cli:add_parser``), and no command module imports critic.cli back."""
    graph = _graph("critic")
    assert sorted(t for t in graph["critic.cli"] if t.startswith("critic.lm")) == []
    assert sorted(name for name, targets in graph.items() if "critic.cli" in targets) == []


TOOLKIT = ("critic.lm", "critic.corpora")
"""The toolkit: what studies and critics share but the Critic contract does not (LMs, encoders, the offline
model files, corpora).  It imports the core; the core reaches it only through the registry (built-in plugins,
``"module:function"`` references)."""


def test_the_core_imports_nothing_of_the_toolkit():
    graph = _graph("critic")
    core = [name for name in graph if not name.startswith(TOOLKIT)]
    assert "critic.cli" in core and "critic.lm.model" not in core
    into_toolkit = sorted(f"{name} -> {target}" for name in core for target in graph[name]
                          if target.startswith(TOOLKIT))
    assert into_toolkit == []


def test_the_critics_share_the_toolkit_s_encoders_not_the_metrics_plugin_s():
    """The section critic's encoder comes from the toolkit (critic.lm.encoders); only the metrics use their
    own BERTScore and spaCy module."""
    graph = _graph("critics")
    assert "critic.lm.encoders" in graph["critics.sections.classifier"]
    assert sorted(name for name, targets in graph.items() if "critics.metrics.encoders" in targets
                  and not name.startswith("critics.metrics")) == []


def test_the_reader_knows_nothing_of_the_command_line():
    """Issue 39: the reader (formats, detection, documents) takes InputOptions, never an argparse namespace; the
    command-line options over it live in critic.cli_args."""
    graph = _graph("critic")
    assert not {"argparse", "critic.cli", "critic.cli_args"} & graph["critic.inputs"]
    assert "args." not in (ROOT / "critic" / "inputs.py").read_text(encoding="utf-8")


def test_results_and_the_use_cases_import_no_rendering():
    """Issue 39: the result objects, the criticism and the application layer import no rendering, lazily or not
    and through no module between (a notebook's display is critic.notebook's, registered with IPython)."""
    graph = _graph("critic")

    def reached(name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            for module in graph.get(todo.pop(), ()):
                if module not in seen:
                    seen.add(module)
                    todo.append(module)
        return seen

    for name in ("critic.results", "critic.panel", "critic.criticism", "critic.critic", "critic.settings",
                 "critic.workflows"):
        assert not [m for m in reached(name) if _renders(m)], name
    assert [m for m in reached("critic.notebook") if _renders(m)] == ["critic.html"]  # the check can fail


SCORING_IMPORTS_NONE_OF = ("simplemma", "critics.coref", "critics.hsmm", "critics.topics", "critics.metrics",
                           "critic.corpora", "critic.report_runner", "critic.plots", "critic.html", "gensim", "pyro",
                           "scipy.stats", "sklearn", "matplotlib", "transformers", "torch_struct", "kenlm", "spacy")
"""Issue 40: what ``critic score`` with a fitted section critic leaves unimported (other critics' plugins and
stacks, the toolkit's corpora, rendering, and simplemma while every title word is one the critic was fitted on)."""


def test_scoring_with_the_section_critic_imports_no_other_stack(tmp_path):
    """In a fresh interpreter, once the plugins' catalogue is kept: ``critic score`` of a fitted section critic
    imports its own plugin alone, and simplemma only for a title word it never saw (the check can fail)."""
    import json
    import os
    import subprocess
    import sys

    from critic.document import Document, Section, write_jsonl
    from critics.sections import SectionTransitionCritic

    def doc(name, titles):
        return Document(name, tuple(Section(t, f"{t} text") for t in titles))

    train = [doc(f"t{i}", ["NAME", "SYNOPSIS", "DESCRIPTION", *(["OPTIONS"] * (i % 2)), "SEE ALSO"]) for i in range(6)]
    SectionTransitionCritic(delta=0.1).fit(train).save(tmp_path / "sections")
    write_jsonl([doc("a", ["NAME", "DESCRIPTION", "Options"]), doc("b", ["Name", "Synopsis"])], tmp_path / "few.jsonl")
    write_jsonl([doc("c", ["NAME", "HISTORY"])], tmp_path / "new.jsonl")
    env = {**os.environ, "CRITIC_PLUGINS": ""}
    subprocess.run([sys.executable, "-m", "critic.cli", "list"], env=env, cwd=tmp_path, check=True,
                   capture_output=True)  # the catalogue kept (built once per test session)
    code = ("import json, sys\nfrom critic.cli import main\nstatus = main(sys.argv[1:])\n"
            f"print(json.dumps([status, sorted(m for m in {SCORING_IMPORTS_NONE_OF!r} if m in sys.modules), "
            "'critics.sections' in sys.modules]))")

    def score(name):
        done = subprocess.run([sys.executable, "-c", code, "score", "sections", "--input", name], env=env,
                              cwd=tmp_path, capture_output=True, text=True, check=True)
        *rows, last = done.stdout.splitlines()
        return [json.loads(r)["id"] for r in rows], json.loads(last)

    assert score("few.jsonl") == (["a", "b"], [0, [], True])
    assert score("new.jsonl") == (["c"], [0, ["simplemma"], True])
