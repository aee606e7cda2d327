"""The package's surface: every public name documented and in the type stubs."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import dispatch

STUBS = Path(dispatch.__file__).resolve().parent / "__init__.pyi"


def stub_names() -> set:
    tree = ast.parse(STUBS.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def test_every_public_name_is_in_the_stubs():
    missing = set(dispatch.__all__) - stub_names()
    assert not missing, f"not in {STUBS.name}: {sorted(missing)}"


def test_every_public_name_and_method_has_a_docstring():
    undocumented = []
    for name in dispatch.__all__:
        obj = getattr(dispatch, name)
        if not inspect.getdoc(obj):
            undocumented.append(name)
        if inspect.isclass(obj) and obj.__module__.startswith("dispatch"):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not callable(member) and not isinstance(member, property):
                    continue
                if not inspect.getdoc(member):
                    undocumented.append(f"{name}.{attr}")
    assert not undocumented, f"no docstring: {undocumented}"
