"""docs/house.md's list of layers is the code's: every unit of zhner/ (a subpackage or a top-level module) is listed,
and each imports only units listed above it (imports inside functions count, `if TYPE_CHECKING:` blocks do not)."""
import ast
import re

from conftest import REPO

PACKAGE = REPO / "zhner"


def documented_layers() -> list[str]:
    page = (REPO / "docs" / "house.md").read_text(encoding="utf-8")
    block = page.split("<!-- layers -->", 1)[1].split("<!-- /layers -->", 1)[0]
    return re.findall(r"^- `(\w+)`:", block, flags=re.M)


def units() -> set[str]:
    found = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    return found | {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}


def imports_between_units() -> dict[tuple[str, str], str]:
    """(importing unit, imported unit) -> the first file:line where it happens."""
    known, edges = units(), {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts == ("__init__",):
            continue  # zhner.load, the door: lazy imports from above
        source = parts[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded = {line for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for sub in node.body for line in range(sub.lineno, sub.end_lineno + 1)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in guarded:
                continue
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}:{node.lineno}: relative import"
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                names = [a.name for a in node.names]
            for name in names:
                head = name.split(".")
                if head[0] == "zhner" and len(head) > 1 and head[1] in known and head[1] != source:
                    edges.setdefault((source, head[1]), f"{path.relative_to(REPO)}:{node.lineno}")
    return edges


def test_every_unit_is_a_listed_layer_once():
    layers = documented_layers()
    assert len(layers) == len(set(layers)), "a unit listed twice"
    assert set(layers) == units(), f"listed, not in zhner/: {set(layers) - units()}; in zhner/, not listed: {units() - set(layers)}"


def test_each_layer_imports_only_the_layers_above_it():
    rank = {unit: i for i, unit in enumerate(documented_layers())}
    upward = [f"{where}: {source} imports {target}" for (source, target), where in imports_between_units().items()
              if rank[target] > rank[source]]
    assert not upward, "imports of a layer below (docs/house.md lists the order):\n" + "\n".join(sorted(upward))


def test_the_check_sees_an_upward_import():
    """The check can fail: the CLI imports from the layers below it, so with the list reversed it reports them."""
    rank = {unit: i for i, unit in enumerate(reversed(documented_layers()))}
    edges = imports_between_units()
    assert ("cli", "train") in edges and any(rank[t] > rank[s] for s, t in edges)
