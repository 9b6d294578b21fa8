"""The docs site is whole: every page in the nav, every public name in the API reference.

The strict build itself (``mkdocs build --strict``: broken links, missing
anchors, unresolved cross-references) runs in ``nox -s docs``, and
``tests/test_docs_build.py`` then reads the built site; these checks need no
docs tools, so they run with the test suite.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import hwrng

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGE = re.compile(r"[\w./-]+\.md")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def _pages() -> set[str]:
    return {page.relative_to(DOCS).as_posix() for page in DOCS.rglob("*.md")}


def _nav() -> list[str]:
    """The pages named in ``mkdocs.yml``'s ``nav`` (its lines up to the next top-level key)."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:\n") + 1 :].splitlines()[1:]
    end = next(i for i, line in enumerate(nav) if line[:1].strip())
    return PAGE.findall("\n".join(nav[:end]))


def test_every_page_is_in_the_nav_once_and_every_nav_entry_is_a_page() -> None:
    nav = _nav()
    assert len(nav) == len(set(nav)), sorted(nav)
    assert set(nav) == _pages()


def test_the_readme_links_to_every_page_but_the_reference_modules() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {target for target in LINK.findall(readme) if target.startswith("docs/")}
    wanted = {f"docs/{page}" for page in _pages() if not page.startswith("api/")}
    assert wanted | {"docs/api/index.md"} <= linked


def test_every_relative_link_of_the_readme_and_the_pages_names_a_file() -> None:
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)}: {target}"


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200


def test_every_public_name_of_hwrng_is_in_the_api_reference() -> None:
    reference = (DOCS / "api" / "hwrng.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: hwrng\.(\w+)$", reference, flags=re.MULTILINE))
    public = {
        name
        for name in hwrng.__all__
        if not name.startswith("__") and not inspect.ismodule(getattr(hwrng, name))
    }
    assert documented == public, (sorted(public - documented), sorted(documented - public))
