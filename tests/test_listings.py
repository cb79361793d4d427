"""Every chapter page's visible code fits its step (issue 49, item 2), checked on the built site.

A chapter shows the code it derives, and longer code or a later chapter's feature sits in a
collapsed block (a dropdown admonition, a toggle, a closed <details>) or behind a link to the
source. Counted on each chapter page of the built site (book/00 to book/22): the code blocks a
reader sees without opening anything, notebook outputs left out, in non-blank lines. Each page
must have

- no visible block longer than :data:`MAX_BLOCK` lines,
- at most :data:`MAX_PAGE` visible lines of code in all,
- no visible listing that names what a later chapter introduces (:data:`LATER_NAMES`).

Names are matched as parts of identifiers: every identifier of a visible block (comments and
docstrings included) is split into its words at ``_`` and at camelCase humps (``apply_rope`` is
apply, rope; ``KVCache`` is kv, cache; ``RoPE`` and ``ALiBi`` are also read whole), and a name
of one or more words is found where those words follow each other in one identifier. So
``rope`` finds ``rope_base`` and ``apply_rope`` but not ``property``.

The site is ``_build/html`` (``make test`` builds it before the unit tests), or the folder in
ATTNBOOK_SITE_DIR (a build made with ``--path-output``). Without a built site the tests skip.

``python tests/test_listings.py [SITE]`` prints the table per chapter: visible lines, the
longest visible block, and the later names found with the chapter that introduces each.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("ATTNBOOK_SITE_DIR", ROOT / "_build" / "html"))

MAX_BLOCK = 60  # lines in one visible block
MAX_PAGE = 150  # visible lines of code on one chapter page

# What a later chapter introduces, and the chapter that introduces it. A name is allowed on the
# pages of its own chapter and after. Words are lower case, joined by "_" (see the docstring).
LATER_NAMES: dict[str, int] = {
    # Ch. 10: the online softmax and tiled attention.
    "online_softmax": 10,
    "tiled": 10,
    "block_size": 10,
    # Ch. 11: the fused path, and the class that carries every later chapter's option.
    "fused": 11,
    "attention_layer": 11,
    # Ch. 12: decoding with a KV cache, and its sliding window.
    "cache": 12,
    "cached": 12,
    "decode": 12,
    "window": 12,
    # Ch. 13: many heads, grouped-query and multi-query attention.
    "heads": 13,
    "d_head": 13,
    "multi_head": 13,  # attnbook's MultiHeadAttention (PyTorch's MultiheadAttention is older)
    "n_kv_heads": 13,
    "repeat_kv": 13,
    "gqa": 13,
    "mqa": 13,
    # Ch. 14: a tiny model.
    "tiny_model": 14,
    # Ch. 15: ring attention across devices.
    "ring_attention": 15,
    "shard": 15,
    "world_size": 15,
    # Ch. 16-19: the GPU, Triton kernels, Flash-Decoding.
    "triton": 17,
    "tl": 17,
    "flash_forward": 17,
    "flash_backward": 18,
    "flash_decoding": 19,
    # Ch. 20: positions in attention.
    "rope": 20,
    "rotary": 20,
    "alibi": 20,
    "yarn": 20,
    "sinusoidal": 20,
    "with_positions": 20,
    "default_positions": 20,
    "positions=": 20,  # a keyword or parameter named positions (the position ids of ch. 20)
    # Ch. 21: masks as functions.
    "mask_mod": 21,
    "score_mod": 21,
    "materialize": 21,
    "block_mask": 21,
    "tile_plan": 21,
    "block_empty": 21,
    "block_full": 21,
    "block_partial": 21,
    "softcap": 21,
    "flex_attention": 21,
    "and_mods": 21,
    "or_mods": 21,
    # Ch. 22: the attention of real models.
    "from_transformers": 22,
}
# Identifiers that hold a listed word but not the later feature.
NOT_LATER = {"empty_cache", "lru_cache", "cache_clear", "cache_size_limit"}


@dataclass
class Page:
    """What one chapter page shows without opening anything."""

    chapter: int
    name: str
    blocks: list[str] = field(default_factory=list)  # the visible code blocks' text

    @property
    def lines(self) -> int:
        return sum(_lines(b) for b in self.blocks)

    @property
    def longest(self) -> int:
        return max((_lines(b) for b in self.blocks), default=0)

    def later_names(self) -> dict[str, int]:
        """Later chapters' names in the visible blocks -> the chapter that introduces each."""
        found = {}
        for block in self.blocks:
            for name, chapter in names_in(block).items():
                if chapter > self.chapter:
                    found[name] = chapter
        return dict(sorted(found.items()))


def _lines(block: str) -> int:
    """Lines of code: the block's non-blank lines (issue 49 counted them so)."""
    return sum(1 for line in block.splitlines() if line.strip())


def words(identifier: str) -> list[str]:
    """An identifier's words: split at "_" and camelCase humps, lower case (KVCache: kv, cache)."""
    parts = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", identifier)
    return [p.lower() for p in parts]


def names_in(code: str) -> dict[str, int]:
    """The :data:`LATER_NAMES` that some identifier of ``code`` contains, with their chapters.

    A name that ends in "=" is a keyword or parameter: ``positions=p``, ``positions: Tensor``
    (not ``self.positions``, not ``==``).
    """
    found = {}
    wanted = {name: name.split("_") for name in LATER_NAMES if not name.endswith("=")}
    for identifier in set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code)) - NOT_LATER:
        # Both splits: camelCase humps (KVCache: kv, cache) and "_" alone (RoPE: rope).
        for w in (words(identifier), [p.lower() for p in identifier.split("_") if p]):
            for name, parts in wanted.items():
                n = len(parts)
                if any(w[i:i + n] == parts for i in range(len(w) - n + 1)):
                    found[name] = LATER_NAMES[name]
    for name in LATER_NAMES:
        if name.endswith("=") and re.search(rf"(?<![\w.]){name[:-1]}\s*[=:](?!=)", code):
            found[name] = LATER_NAMES[name]
    return found


# An element with one of these classes is collapsed until the reader opens it (sphinx-togglebutton
# hides ".toggle" and ".admonition.dropdown"; sphinx-exercise's hidden solutions are "dropdown")
# or is a notebook cell's output, not a listing.
HIDDEN_CLASSES = {"dropdown", "toggle", "toggle-hidden", "cell_output", "output"}


def _hidden(element) -> bool:
    for parent in element.parents:
        if parent.name == "details" and not parent.has_attr("open"):
            return True
        if HIDDEN_CLASSES & set(parent.get("class") or ()):
            return True
    return False


def visible_blocks(html: str) -> list[str]:
    """The text of every code block in the page's article that no collapsed element holds."""
    from bs4 import BeautifulSoup

    article = BeautifulSoup(html, "html.parser").find("article")
    if article is None:
        return []
    blocks = article.select("div.highlight pre") + article.select("pre.literal-block")
    return [pre.get_text() for pre in blocks if not _hidden(pre)]


def chapter_pages(site: Path = SITE) -> list[Page]:
    """The chapter pages book/00_* to book/21_* of the built site, in order."""
    pages = []
    for source in sorted((ROOT / "book").glob("[0-9][0-9]_*.md")):
        built = site / "book" / (source.stem + ".html")
        if not built.exists():
            raise FileNotFoundError(f"{built} (chapter {source.name} is not in the built site)")
        html = built.read_text(encoding="utf-8")
        pages.append(Page(int(source.stem[:2]), source.stem, visible_blocks(html)))
    return pages


def report(pages: list[Page]) -> str:
    rows = [f"{'chapter':<22} {'lines':>5} {'longest':>7}  later names (chapter)"]
    for p in pages:
        later = ", ".join(f"{n} ({c})" for n, c in p.later_names().items())
        rows.append(f"{p.name:<22} {p.lines:>5} {p.longest:>7}  {later}")
    n_later = sum(len(p.later_names()) for p in pages)
    n_pages = sum(1 for p in pages if p.later_names())
    rows.append(f"later names: {n_later} on {n_pages} pages; longest block "
                f"{max(p.longest for p in pages)}; most lines {max(p.lines for p in pages)}")
    return "\n".join(rows)


def _pages() -> list[Page]:
    if not (SITE / "index.html").exists():
        pytest.skip(f"no built site at {SITE}: run `make book` (make test builds it first)")
    return chapter_pages(SITE)


@pytest.fixture(scope="module")
def pages() -> list[Page]:
    return _pages()


CHAPTERS = [int(p.stem[:2]) for p in sorted((ROOT / "book").glob("[0-9][0-9]_*.md"))]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_visible_block_is_longer_than_60_lines(pages, chapter):
    (page,) = [p for p in pages if p.chapter == chapter]
    long = [(_lines(b), b.splitlines()[0]) for b in page.blocks if _lines(b) > MAX_BLOCK]
    assert not long, f"{page.name}: visible blocks over {MAX_BLOCK} lines (collapse them): {long}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_chapter_shows_at_most_150_lines_of_code(pages, chapter):
    (page,) = [p for p in pages if p.chapter == chapter]
    assert page.lines <= MAX_PAGE, (f"{page.name}: {page.lines} visible lines of code "
                                    f"(longest block {page.longest})")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_visible_listing_names_a_later_chapter(pages, chapter):
    (page,) = [p for p in pages if p.chapter == chapter]
    assert not page.later_names(), f"{page.name} shows later chapters' names: {page.later_names()}"


def test_names_are_matched_as_words_of_identifiers():
    code = "def apply_rope(x, rope_base):  # property, ropes\n    c = KVCache(); h.n_kv_heads\n"
    assert set(names_in(code)) == {"rope", "cache", "n_kv_heads", "heads"}
    assert set(names_in("# RoPE or ALiBi's bias")) == {"rope", "alibi"}
    assert names_in("property = trope; europe; torch.cuda.empty_cache()") == {}
    assert "positions=" in names_in("f(x, positions=p)") and "positions=" in names_in(
        "def f(positions: torch.Tensor | None = None)")
    assert names_in("self.positions = table\nif positions == 0: pass") == {}
    assert words("KVCache") == ["kv", "cache"] and words("apply_rope") == ["apply", "rope"]
    assert words("AttentionLayer") == ["attention", "layer"]


def test_collapsed_blocks_and_outputs_are_not_counted():
    pre = '<div class="highlight"><pre>{}</pre></div>'
    html = ("<article>" + pre.format("a = 1\nb = 2\n")
            + '<div class="admonition dropdown">' + pre.format("hidden = 1") + "</div>"
            + '<div class="toggle docutils container">' + pre.format("hidden = 2") + "</div>"
            + "<details><summary>s</summary>" + pre.format("hidden = 3") + "</details>"
            + '<details open="open"><summary>s</summary>' + pre.format("shown = 4") + "</details>"
            + '<div class="cell_output docutils container">' + pre.format("out = 5") + "</div>"
            + '<pre class="literal-block">lit = 6</pre></article>')
    assert visible_blocks(html) == ["a = 1\nb = 2\n", "shown = 4", "lit = 6"]
    assert _lines("a = 1\n\n    \nb = 2\n") == 2


if __name__ == "__main__":
    site = Path(sys.argv[1]) if len(sys.argv) > 1 else SITE
    print(f"site: {site}")
    print(report(chapter_pages(site)))
