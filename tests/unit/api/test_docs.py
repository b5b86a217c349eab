"""The Python API page says what the code does: its signatures, its names, its fields, examples that parse."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import mailroom

DOC = Path(__file__).resolve().parents[3] / "docs" / "python-api.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def _documented_functions() -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions of the page's Reference section, by name."""
    reference = DOC.read_text(encoding="utf-8").split("## Reference", 1)[1]
    block = re.findall(r"```python\n(.*?)```", reference, flags=re.DOTALL)[0]
    return {
        node.name: node
        for node in ast.parse(block).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def _shape(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[bool, list[tuple[str, str]], str]:
    """Async or not, each parameter with its annotation as written, the return annotation."""
    params = [(a.arg, ast.unparse(a.annotation) if a.annotation else "") for a in node.args.args]
    params += [(a.arg, ast.unparse(a.annotation) if a.annotation else "") for a in node.args.kwonlyargs]
    returns = ast.unparse(node.returns) if node.returns else ""
    return isinstance(node, ast.AsyncFunctionDef), params, returns


def test_every_public_function_is_documented_with_its_exact_signature() -> None:
    documented = _documented_functions()
    functions = {n: obj for n in mailroom.__all__ if inspect.isfunction(obj := getattr(mailroom, n))}
    assert sorted(documented) == sorted(functions)
    for name, function in functions.items():
        # The public modules use `from __future__ import annotations`: annotations are the source text.
        annotations = dict(function.__annotations__)
        params = [(p, annotations[p]) for p in inspect.signature(function).parameters]
        actual = (inspect.iscoroutinefunction(function), params, annotations["return"])
        assert _shape(documented[name]) == actual, name


def test_every_public_name_is_on_the_page() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert [name for name in mailroom.__all__ if f"`{name}`" not in text] == []


def test_every_field_of_an_email_request_is_in_the_fields_table() -> None:
    table = (
        DOC.read_text(encoding="utf-8").split("### Every field of `EmailRequest`", 1)[1].split("\n## ", 1)[0]
    )
    documented = set(re.findall(r"^\| (.*?) \|", table, flags=re.MULTILINE))
    names = {name.strip("` ") for cell in documented for name in cell.split(",")}
    fields = {f.name for f in dataclasses.fields(mailroom.EmailRequest)}
    assert fields <= names
    assert names - fields <= {"field", "---"}


def test_every_python_example_on_the_page_parses() -> None:
    blocks = _python_blocks()
    assert len(blocks) >= 5
    for block in blocks:
        # `return` in an example stands for the caller's function around it.
        ast.parse(f"async def example():\n{_indent(block)}")


def _indent(block: str) -> str:
    return "".join(f"    {line}\n" for line in block.splitlines())
