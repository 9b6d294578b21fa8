"""The built documentation site: every rendered default is the code's, every link a file.

The site is built once per session with ``mkdocs build --strict`` in a temporary
directory, or read from the directory ``HWRNG_DOCS_SITE`` names (``nox -s docs``
builds it and then runs this module against it; there a missing site fails).
Without either, where mkdocs is not installed, the module is skipped.

Each default the API reference shows, in a signature or in a parameters table, is
compared with :func:`inspect.signature` of the object itself: the rendered text
is evaluated in the object's module and must give the same value. The trainer
integrations import their trainer, which may be missing: where importing an
object fails for a missing module other than the object's own, its definition
is read from the source with :mod:`ast` and the rendered text must be the same
expression as the default written there.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = "required"  # what a parameters table shows for a parameter without a default


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site: ``HWRNG_DOCS_SITE``'s, or one built here with ``--strict``."""
    named = os.environ.get("HWRNG_DOCS_SITE")
    if named:
        built = Path(named).resolve()
        assert (built / "index.html").is_file(), f"HWRNG_DOCS_SITE={named}: no index.html there"
        return built
    pytest.importorskip("mkdocs", reason="the docs tools are not installed (pip install .[docs])")
    pytest.importorskip("mkdocstrings_handlers.python")
    built = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(built)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return built


# -- what the API reference renders ------------------------------------------------


@dataclass
class Rendered:
    """One documented object of a page: its signature's text and its parameters' rows."""

    identifier: str
    page: str
    signature: str | None = None
    rows: list[list[str]] = field(default_factory=list)


class _Reference(HTMLParser):
    """Collect, per ``doc-heading``, the signature block and the ``Parameters`` tables.

    mkdocstrings renders an object as a heading whose ``id`` is its path, an
    optional ``doc-signature`` block (``<pre><code>``), then its docstring's
    sections; a section is a ``doc-section-title`` span and a table whose
    ``doc-section-item`` rows have the cells Name, Type, Description, Default.
    A method's heading follows its class's sections, so every block belongs
    to the nearest heading before it.
    """

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.page = page
        self.objects: list[Rendered] = []
        self._in_signature_div = False
        self._signature: list[str] | None = None
        self._title: list[str] | None = None
        self._parameters_table_next = False
        self._in_parameters_table = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        if tag in {"h1", "h2", "h3", "h4", "h5", "h6"} and "doc-heading" in classes:
            identifier = attributes.get("id")
            if identifier:
                self.objects.append(Rendered(identifier, self.page))
        elif tag == "div" and "doc-signature" in classes:
            self._in_signature_div = True
        elif tag == "code" and self._in_signature_div:
            self._signature = []
        elif tag == "span" and "doc-section-title" in classes:
            self._title = []
        elif tag == "table" and self._parameters_table_next:
            self._parameters_table_next = False
            self._in_parameters_table = True
        elif tag == "tr" and self._in_parameters_table and "doc-section-item" in classes:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "code" and self._signature is not None:
            if self.objects:
                self.objects[-1].signature = "".join(self._signature)
            self._signature = None
            self._in_signature_div = False
        elif tag == "span" and self._title is not None:
            self._parameters_table_next = "".join(self._title).strip().endswith("Parameters:")
            self._title = None
        elif tag == "td" and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self.objects:
                self.objects[-1].rows.append(self._row)
            self._row = None
        elif tag == "table" and self._in_parameters_table:
            self._in_parameters_table = False

    def handle_data(self, data: str) -> None:
        for buffer in (self._signature, self._title, self._cell):
            if buffer is not None:
                buffer.append(data)


def _rendered_objects(site: Path) -> list[Rendered]:
    objects = []
    for page in sorted((site / "api").rglob("*.html")):
        parser = _Reference(page.relative_to(site).as_posix())
        parser.feed(page.read_text(encoding="utf-8"))
        objects.extend(parser.objects)
    return objects


def _parsed_signature(rendered: Rendered) -> ast.FunctionDef | None:
    """A rendered ``name(...) -> type`` signature as a parsed ``def``; None if not a call."""
    text = None if rendered.signature is None else rendered.signature.strip()
    if text is None or "(" not in text or not text.split("(", 1)[0].strip().isidentifier():
        return None  # an attribute's ``name: type = value``, not a call
    function = ast.parse(f"def _{text[text.index('(') :]}:\n    pass").body[0]
    assert isinstance(function, ast.FunctionDef)
    return function


def _signature_defaults(rendered: Rendered) -> dict[str, str | None] | None:
    """Each parameter of a rendered ``name(...)`` signature: its default's text, or None."""
    function = _parsed_signature(rendered)
    if function is None:
        return None
    return {name: None if node is None else ast.unparse(node) for name, node in _defaults(function)}


def _signature_annotations(rendered: Rendered) -> dict[str, str]:
    """Each annotated parameter of a rendered signature: its annotation's text."""
    function = _parsed_signature(rendered)
    if function is None:
        return {}
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, arguments.vararg, *arguments.kwonlyargs]
    return {
        a.arg: ast.unparse(a.annotation)
        for a in [*every, arguments.kwarg]
        if a is not None and a.annotation is not None
    }


# -- what the code says ----------------------------------------------------------------


#: No default: the parameter is required.
MISSING = inspect.Parameter.empty


@dataclass
class Expected:
    """The real parameters of a documented object, by name, and how to compare a default.

    ``values`` holds live default values (from :func:`inspect.signature`) and
    ``namespace`` the globals rendered text is evaluated in; or, for an object
    whose module cannot be imported here, ``sources`` holds each default's
    expression as written in the source.
    """

    values: dict[str, Any] | None = None
    namespace: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, ast.expr | None] | None = None

    def names(self) -> set[str]:
        return set(self.values if self.values is not None else self.sources or {})

    def mismatch(self, name: str, text: str | None) -> str | None:
        """Why the rendered default ``text`` (None: none shown) is not ``name``'s, or None."""
        if self.values is not None:
            return _value_mismatch(self.values[name], text, self.namespace)
        assert self.sources is not None
        node = self.sources[name]
        if node is None or text is None:
            same = node is None and text is None
        else:
            same = ast.dump(ast.parse(text, mode="eval").body) == ast.dump(node)
        return None if same else f"the source has {_describe_node(node)}"


def _describe_node(node: ast.expr | None) -> str:
    return "no default" if node is None else ast.unparse(node)


def _value_mismatch(real: Any, text: str | None, namespace: dict[str, Any]) -> str | None:
    if real is MISSING or text is None:
        return None if (real is MISSING) == (text is None) else f"the code has {_describe(real)}"
    try:
        shown = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        shown = eval(text, dict(namespace))  # a name or expression of the object's module
    if shown is real or (type(shown) is type(real) and shown == real):
        return None
    return f"the code has {_describe(real)}"


def _describe(value: Any) -> str:
    return "no default" if value is MISSING else repr(value)


def _defaults(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[tuple[str, Any]]:
    """Each parameter of a parsed ``def`` and its default's node (None: required)."""
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    padded = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    yield from ((a.arg, d) for a, d in zip(positional, padded, strict=True))
    if arguments.vararg is not None:
        yield arguments.vararg.arg, None
    yield from (
        (a.arg, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
    )
    if arguments.kwarg is not None:
        yield arguments.kwarg.arg, None


def _import_prefix(parts: list[str]) -> tuple[Any, list[str]] | tuple[None, str]:
    """Import the longest module prefix of ``parts``: (module, the rest), or (None, module).

    (None, module) when that module exists but needs one that is not installed.
    """
    module = importlib.import_module(parts[0])
    end = 1
    while end < len(parts):
        name = ".".join(parts[: end + 1])
        if not hasattr(module, "__path__") or importlib.util.find_spec(name) is None:
            break  # not a submodule: the rest are attributes
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name is not None and f"{name}.".startswith(f"{error.name}."):
                raise
            return None, name
        end += 1
    return module, parts[end:]


def _from_source(module: str, rest: list[str]) -> Expected | None:
    """The parameters of ``module.rest`` read from the source, for a module that cannot import."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    node: ast.AST = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for part in rest:
        node = next(
            child
            for child in ast.iter_child_nodes(node)
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and child.name == part
        )
    if isinstance(node, ast.ClassDef):  # rendered with its __init__'s parameters
        initialiser = (c for c in node.body if isinstance(c, ast.FunctionDef))
        node = next((c for c in initialiser if c.name == "__init__"), node)
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    return Expected(sources=dict(_defaults(node)))


def _attribute(obj: Any, part: str) -> Any:
    """``obj.part`` as stored; a module's name exported lazily (its ``__getattr__``) as read."""
    try:
        return inspect.getattr_static(obj, part)
    except AttributeError:
        if inspect.ismodule(obj):
            return getattr(obj, part)
        raise


def _expected(identifier: str) -> Expected | None:
    """The real parameters of the object the reference names ``identifier``; None if none."""
    module, rest = _import_prefix(identifier.split("."))
    if module is None:
        assert isinstance(rest, str)
        return _from_source(rest, identifier.split(".")[len(rest.split(".")) :])
    obj = module
    for part in rest:
        obj = _attribute(obj, part)
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if not callable(obj) or inspect.ismodule(obj):
        return None
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    owner = sys.modules.get(getattr(obj, "__module__", None) or "", module)
    return Expected(
        values={name: p.default for name, p in signature.parameters.items()},
        namespace=vars(owner),
    )


# -- the checks --------------------------------------------------------------------------


def test_every_rendered_default_is_the_codes(site: Path) -> None:
    problems: list[str] = []
    checked: set[tuple[str, str]] = set()
    for rendered in _rendered_objects(site):
        shown = _signature_defaults(rendered)
        if shown is None and not rendered.rows:
            continue
        expected = _expected(rendered.identifier)
        if expected is None:
            problems.append(f"{rendered.identifier}: parameters rendered, but it takes none")
            continue
        where = f"{rendered.page}: {rendered.identifier}"
        names = expected.names() - {"self", "cls"}
        for name, text in (shown or {}).items():
            if name in {"self", "cls"}:
                continue
            if name not in names:
                problems.append(f"{where}: the signature shows {name!r}, the code has no such")
            elif why := expected.mismatch(name, text):
                problems.append(f"{where}({name}): signature shows {text or 'no default'}; {why}")
            checked.add((rendered.identifier, name))
        for row in rendered.rows:
            assert len(row) == 4, f"{where}: a parameters row of {len(row)} cells: {row}"
            name, _, _, text = row
            name = name.lstrip("*")
            if name not in names:
                problems.append(f"{where}: the table documents {name!r}, the code has no such")
            elif why := expected.mismatch(name, None if text == REQUIRED else text):
                problems.append(f"{where}({name}): table shows {text}; {why}")
            checked.add((rendered.identifier, name))
    assert not problems, "\n".join(problems)
    # the parser found what it must: functions, a method, a class read from its source
    assert {
        ("hwrng.invariant.uniform_", "high"),
        ("hwrng.save", "platform"),
        ("hwrng.RNGStatesTracker.fork", "name"),
        ("hwrng.integrations.lightning.HwrngCallback", "platform"),
    } <= checked
    assert len(checked) > 200, len(checked)


def test_every_parameter_row_shows_its_own_type(site: Path) -> None:
    """A table row's type is the signature's annotation of that parameter, not a neighbour's."""
    problems = []
    compared = 0
    for rendered in _rendered_objects(site):
        annotations = _signature_annotations(rendered)
        for name, shown, _, _ in rendered.rows:
            annotation = annotations.get(name.lstrip("*"))
            if annotation is None:
                continue
            compared += 1
            if shown.replace(" ", "") != annotation.replace(" ", ""):
                problems.append(
                    f"{rendered.identifier}({name}): table {shown}, signature {annotation}"
                )
    assert not problems, "\n".join(problems)
    assert compared > 50, compared


# -- the site works from disk ---------------------------------------------------------------


class _Links(HTMLParser):
    """Every ``href``/``src`` of a page, and every ``id`` (and ``<a name>``) it defines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.targets: list[str] = []
        self.anchors: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        for key in ("href", "src"):
            value = attributes.get(key)
            if value is not None:
                self.targets.append(value)
        for key in ("id", "name") if tag == "a" else ("id",):
            value = attributes.get(key)
            if value:
                self.anchors.add(value)


def _links(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_every_internal_link_names_a_file_and_every_anchor_exists(site: Path) -> None:
    """Opened from disk (``file://``), no link may end on a directory, a missing file or anchor.

    A browser shows a directory listing for ``foo/``, where a server would
    answer with ``foo/index.html``; so every relative link must name a file,
    and no link may start at the root (``/``: the root of the disk there).
    ``404.html`` is the exception: a server answers it for any missing URL, at
    any depth, so its links start at the site's root by design.
    """
    pages = {page.resolve(): _links(page) for page in site.rglob("*.html")}
    problems = []
    followed = 0
    for page, links in sorted(pages.items()):
        if page == (site / "404.html").resolve():
            continue
        for target in links.targets:
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or target.startswith(("//", "data:")):
                continue
            followed += 1
            where = f"{page.relative_to(site.resolve())}: {target}"
            destination = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not destination.is_file():
                kind = "a directory" if destination.is_dir() else "missing"
                problems.append(f"{where}: {kind}")
            elif parts.fragment and destination.suffix == ".html":
                anchors = (pages.get(destination) or _links(destination)).anchors
                if unquote(parts.fragment) not in anchors:
                    problems.append(f"{where}: no anchor {parts.fragment!r} there")
    assert not problems, "\n".join(problems)
    assert followed > 1000, followed
