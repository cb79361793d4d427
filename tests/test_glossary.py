"""The glossary (book/glossary.md) is complete, short, linked, and linked to.

- Every entry has one or two sentences, and a link to the section that defines the term; the
  section must exist (its heading gives the anchor, as myst_heading_anchors makes it).
- A term the chapters use must be in the glossary: every abbreviation (HBM, GQA, NaN, ...) and
  every emphasised phrase (``*roofline*``, ``**convex hull**``) in the prose is either a glossary
  term or listed below as not a term, with the reason. A new abbreviation or a newly emphasised
  term in a chapter fails here until the glossary has it.
- Every glossary term occurs in the chapters, and where the book (in reading order) first uses
  it, that use links to the glossary with ``{term}``.
- Every ``{term}`` role names a glossary term (Sphinx's -W build fails too; this is faster).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from nbtools import toc_pages  # noqa: E402

BOOK = ROOT / "book"
GLOSSARY = BOOK / "glossary.md"

# Pages whose prose is scanned, in reading order: the toc's book pages, less the glossary itself,
# the bibliography (a generated list) and the course guide (course logistics, not the subject).
NOT_SCANNED = {"book/glossary", "book/bibliography", "book/course_guide"}

# Abbreviations and capitalised names in the prose that are not terms of the subject: names of
# software, hardware, people and units, and the numbering of the book's parts.
NOT_TERMS_CAPS = {
    # parts of the book
    "I", "II", "III", "IV", "V", "VI", "VII",
    # software and services the book names (they are tools, not concepts)
    "PyTorch", "NumPy", "Colab", "GitHub", "MathJax", "JupyterLab", "Jupyter", "LaTeX",
    "nbval", "ipywidgets", "OpenAI", "NVIDIA", "AdamW", "LLMs", "LLM", "API", "APIs", "JIT",
    "CUTLASS", "OpenBLAS", "AVX2",  # a BLAS library and an x86 instruction set (ch. 17, Lab 17)
    "BY", "CC", "MIT", "PDF", "HTML", "URL", "CI", "OK", "ASCII", "ID", "IDs",
    # hardware models and units
    "H100", "A100", "T4", "SXM4", "SXM5", "MiB", "KiB", "GiB", "GB", "TB", "MB", "KB", "TFLOP",
    "MFLOP", "GFLOP",
    # models, papers and serving systems named as examples
    "GPT", "BERT", "RoPE", "ALiBi", "vLLM", "StreamingLLM",
    "RoFormer", "BLOOM", "MPT", "DeepSeek", "OLMo",
    # short for the glossary's "NTK-aware scaling" (ch. 20: "NTK at s = 3")
    "NTK",
    # logical operators and standards written in capitals
    "AND", "OR", "NOT", "IEEE",
}

# Emphasised words and phrases that stress a point or name an example rather than a term.
NOT_TERMS_EMPHASIS = {
    "not", "no", "all", "every", "each", "any", "only", "both", "before", "after", "which",
    "where", "what", "whom", "when", "why", "how", "and", "or", "can", "may", "must", "is",
    "are", "one", "other", "first", "last", "final", "largest", "larger", "smaller", "earlier",
    "later", "during", "outside", "inside", "within", "without", "instead", "itself", "whole",
    "same", "different", "number", "mean", "row", "column", "hint", "correct", "error", "added",
    "replaced", "transposed", "finite", "real", "blocked", "allowed", "not allowed", "ignore",
    "may attend", "visible", "future", "hard", "linear", "online", "causal", "ours", "split",
    "merge", "reverse", "explore", "predecessor", "last two", "for every", "by sequence",
    "per query block", "relative to it", "the subject", "the previous word", "top-left",
    "top left", "bottom-right", "fresh process", "one new token", "with", "from", "to",
    "float32", "float64",
    # the labels of the algorithm boxes
    "inputs", "output", "parameters",
    # example sentences and phrases quoted in the prose
    "the river bank", "the savings bank", "bank loan", "dog bites man", "man bites dog",
    # stress on an ordinary word
    "soft", "set", "equals", "right", "strict", "queries", "within one row", "not symmetric",
    "additive", "drops", "adds", "apart", "rows", "some", "real token", "true may attend",
    "in the cache", "answer", "asynchronously", "synchronise", "already rotated", "positive",
    # run-in labels of lists (readers, test advice, the cases of a table)
    "getting started", "instructors", "learners", "practitioners", "test a symmetry",
    "test padding invariance", "test the gradients", "test the interfaces",
    "an exponential overflows", "every exponential underflows", "lowers everyone elses",
    "no overflow", "only differences matter", "some underflow partly", "bytes it moves",
    # the two algorithms chapter 16 compares, named after the paper (tiled attention is a term)
    "standard attention", "the tiled algorithm",
    "bound", "uniformly",
}


def toc_book_pages() -> list[Path]:
    """The book's .md pages in reading order (root, then each part's chapters and sections)."""
    return [ROOT / (p + ".md") for p in toc_pages()
            if p.startswith("book/") and p not in NOT_SCANNED and (ROOT / (p + ".md")).exists()]


# The glossary


def glossary_entries(text: str | None = None) -> list[dict]:
    """Each entry of the ``{glossary}`` block: its terms (first is the main one) and body."""
    text = GLOSSARY.read_text(encoding="utf-8") if text is None else text
    block = re.search(r"^```\{glossary\}\n(.*?)^```\s*$", text, re.S | re.M)
    assert block, "book/glossary.md has no ```{glossary} block"
    entries, current = [], None
    for line in block.group(1).splitlines():
        if line.startswith(":"):  # directive options
            continue
        if not line.strip():
            current = None
            continue
        if not line.startswith(" "):
            if current is None or current["body"]:
                current = {"terms": [], "body": ""}
                entries.append(current)
            current["terms"].append(line.strip())
        else:
            current["body"] += " " + line.strip()
    for entry in entries:
        entry["body"] = entry["body"].strip()
    return entries


_LINK = re.compile(r"\[([^\]]+)\]\(([^)#\s]+\.md)(?:#([\w-]+))?\)")
_DEFINED = re.compile(r"(?:Symbol: (?P<symbol>.*?)\. )?Defined in (?P<link>\[.*?\]\(.*?\))\.$")


def split_entry(body: str) -> tuple[str, str | None, str]:
    """(definition, symbol or None, link) of an entry's body."""
    match = _DEFINED.search(body)
    assert match, f"the entry must end with 'Defined in [section](page.md#anchor).': {body!r}"
    return body[:match.start()].strip(), match.group("symbol"), match.group("link")


def sentences(text: str) -> int:
    """How many sentences: math and code set aside, a full stop, ! or ? ends one."""
    text = re.sub(r"\$[^$]*\$|`[^`]*`", "X", text)
    text = re.sub(r"\b(e\.g|i\.e|et al|etc|cf)\.", "", text)
    return len(re.findall(r"[.!?](?=\s|$)", text))


def heading_anchors(path: Path, depth: int = 3) -> set[str]:
    """The anchors myst_heading_anchors gives a page's headings (up to ``depth``)."""
    from myst_parser.mdit_to_docutils.base import default_slugify

    text = re.sub(r"^(```+|~~~+).*?^\1\s*$", "", path.read_text(encoding="utf-8"),
                  flags=re.S | re.M)
    anchors = set()
    for hashes, title in re.findall(r"^(#{1,6})\s+(.*?)\s*$", text, re.M):
        if len(hashes) <= depth:
            title = re.sub(r"`([^`]*)`", r"\1", title)
            title = re.sub(r"\$([^$]*)\$", r"\1", title)
            anchors.add(default_slugify(title))
    return anchors


def myst_heading_depth() -> int:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    return int(config["sphinx"]["config"].get("myst_heading_anchors", 0))


ENTRIES = glossary_entries()
TERM_OF = {term: entry["terms"][0] for entry in ENTRIES for term in entry["terms"]}


def test_glossary_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    assert re.search(r"^\s*- file: book/glossary\s*$", toc, re.M)


def test_terms_are_unique():
    seen = [t.lower() for e in ENTRIES for t in e["terms"]]
    assert len(seen) == len(set(seen)), sorted({t for t in seen if seen.count(t) > 1})
    assert len(ENTRIES) >= 60


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["terms"][0])
def test_entry_is_short_and_links_its_section(entry):
    definition, symbol, link = split_entry(entry["body"])
    assert 1 <= sentences(definition) <= 2, (
        f"{entry['terms'][0]}: one or two sentences, not {sentences(definition)}: {definition}")
    if symbol is not None:
        assert "$" in symbol or "`" in symbol, f"a symbol is math or code: {symbol}"
    match = _LINK.fullmatch(link)
    assert match, f"not a link to a book page: {link}"
    page = BOOK / match.group(2)
    assert page.exists(), f"{link}: no page {page.name}"
    if match.group(3):
        depth = myst_heading_depth()
        assert depth >= 2, "_config.yml must set myst_heading_anchors for section links"
        assert match.group(3) in heading_anchors(page, depth), (
            f"{link}: {page.name} has no heading with the anchor #{match.group(3)}")


# The chapters' prose


_ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*(.*?)\s*$")
# Directives whose body is code, math or generated, not prose.
_NOT_PROSE = {"code-block", "code", "code-cell", "literalinclude", "math", "bibliography",
              "glossary", "raw"}


def _blank(text: str) -> str:
    """The same text as spaces, line breaks kept, so that offsets into a page stay valid."""
    return re.sub(r"[^\n]", " ", text)


def _blocks(text: str) -> str:
    """Blank code and math blocks and every fence line; keep the prose inside prose directives
    (figures, admonitions, exercises, algorithms, tables), less their option lines."""
    out, stack, skip = [], [], None  # stack: fences of open prose directives
    for line in text.split("\n"):
        fence = _FENCE.match(line)
        if skip is not None:
            if fence and not fence.group(2) and fence.group(1)[0] == skip[0] \
                    and len(fence.group(1)) >= len(skip):
                skip = None
            out.append(_blank(line))
            continue
        if fence:
            mark, info = fence.groups()
            if not info and stack and mark[0] == stack[-1][0] and len(mark) >= len(stack[-1]):
                stack.pop()
            else:
                name = re.match(r"\{([\w:-]+)\}", info)
                if name and name.group(1) not in _NOT_PROSE:
                    stack.append(mark)
                else:
                    skip = mark
            out.append(_blank(line))
            continue
        out.append(_blank(line) if stack and re.match(r"^:[\w-]+:", line) else line)
    return "\n".join(out)


def prose(text: str) -> tuple[str, list[tuple[int, int, str]]]:
    """A page's prose, as long as the page (offsets stay valid), and the spans of its
    ``{term}`` roles with the term each links to.

    Blanked: HTML comments, code and math blocks, directive options, headings and labels, math,
    inline code, other roles (references, citations, glued numbers) and links (a link cannot
    hold another link). A ``{term}`` role leaves the text it shows."""
    def blank(m):
        return _blank(m.group(0))

    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    text = _blocks(text)
    text = re.sub(r"^#{1,6}\s.*$", blank, text, flags=re.M)
    text = re.sub(r"^\([\w-]+\)=\s*$", blank, text, flags=re.M)  # labels
    text = re.sub(r"\$\$.*?\$\$", blank, text, flags=re.S)
    text = re.sub(r"(?<![\\$])\$(?!\$)(?:[^$\n]|\n(?!\s*\n))+?(?<![\\$])\$", blank, text)
    spans = []

    def role(m):
        name, content = m.groups()
        if name != "term":
            return _blank(m.group(0))
        shown, _, target = content.partition("<")
        shown = shown.strip() if target else content.strip()
        target = target.rstrip(">").strip() if target else content.strip()
        spans.append((m.start(), m.start() + len(shown), target))
        return shown.ljust(len(m.group(0)))

    text = _ROLE.sub(role, text)
    text = re.sub(r"`[^`\n]*`", blank, text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", blank, text)
    return text, spans


def alias_pattern(alias: str) -> re.Pattern:
    """A term in running text: whole words, any line break between its words, an optional
    plural; case-insensitive unless the term itself has capitals (HBM, LayerNorm, Triton)."""
    words = [re.escape(w) for w in alias.split()]
    flags = 0 if re.search(r"[A-Z]", alias) else re.I
    plural = r"(?:s|es)?"
    if alias.endswith("y") and not alias.endswith(("ay", "ey", "oy")):  # query -> queries
        words[-1] = words[-1][:-1]
        plural = r"(?:y|ies)"
    return re.compile(r"(?<![\w\-/.])" + r"\s+".join(words) + plural + r"(?![\w\-])", flags)


PATTERNS = [(alias, TERM_OF[alias], alias_pattern(alias)) for alias in TERM_OF]


def term_uses(text: str) -> list[tuple[int, int, str]]:
    """Every use of a glossary term in the prose as (start, end, main term); a use inside a
    longer use of another term (``padding`` in ``padding mask``) does not count."""
    found = [(m.start(), m.end(), main) for _, main, pattern in PATTERNS
             for m in pattern.finditer(text)]
    found.sort(key=lambda f: (f[0], -(f[1] - f[0])))
    kept, reach = [], -1
    for start, end, main in found:
        if end <= reach and kept and kept[-1][2] != main:
            continue
        kept.append((start, end, main))
        reach = max(reach, end)
    return kept


PAGES = toc_book_pages()
PROSE = {page: prose(page.read_text(encoding="utf-8")) for page in PAGES}

# Chapters 16 to 19 were being rewritten when the glossary was made, and their links could not
# be added then: a first use there may still lack its link. Once the rewrite has linked its first
# uses (book/glossary.md lists the terms), empty this set so that they are checked too.
PENDING_PAGES: set[str] = set()


def first_uses() -> dict[str, tuple[Path, int, bool]]:
    """For each glossary entry: the page and offset of its first use, and whether that use is a
    ``{term}`` link to it."""
    first: dict[str, tuple[Path, int, bool]] = {}
    for page in PAGES:
        text, spans = PROSE[page]
        for start, end, main in term_uses(text):
            if main in first:
                continue
            linked = any(s <= start and end <= e and TERM_OF.get(t) == main for s, e, t in spans)
            first[main] = (page, start, linked)
    return first


FIRST = first_uses()


def _where(page: Path, offset: int) -> str:
    text = PROSE[page][0]
    line = text.count("\n", 0, offset) + 1
    snippet = " ".join(text[max(0, offset - 40):offset + 40].split())
    return f"{page.name}:{line} ({snippet!r})"


def test_term_roles_name_glossary_terms():
    unknown = [(page.name, target) for page in PAGES for *_, target in PROSE[page][1]
               if target not in TERM_OF]
    assert not unknown, f"{{term}} roles with no glossary entry: {unknown}"


def test_every_term_is_used():
    unused = [e["terms"][0] for e in ENTRIES if e["terms"][0] not in FIRST]
    assert not unused, f"glossary terms the chapters never use: {unused}"


def test_first_use_links_to_the_glossary():
    missing = [f"{main}: {_where(page, offset)}" for main, (page, offset, linked) in FIRST.items()
               if not linked and page.stem not in PENDING_PAGES]
    assert not missing, "link the first use with {term}`...`:\n" + "\n".join(sorted(missing))


def pending_links() -> list[str]:
    """The first uses still waiting for their link in PENDING_PAGES (for the report)."""
    return sorted(f"{page.stem}: {main}" for main, (page, _, linked) in FIRST.items()
                  if not linked and page.stem in PENDING_PAGES)


_CAPS = re.compile(r"(?<![\w\-/.])([A-Za-z]*[A-Z][A-Za-z0-9]*[A-Z][A-Za-z0-9]*|[A-Z]{2,}s?)"
                   r"(?![\w\-])")


def _alias_words() -> set[str]:
    return {w for alias in TERM_OF for w in alias.split()}


def abbreviations(text: str) -> set[str]:
    """Words with two or more capitals (HBM, SMs, NaN, LayerNorm) that are neither a glossary
    term nor a word of one ("QK" of "QK circuit"), nor a named exception."""
    words = _alias_words()
    found = set()
    for word in _CAPS.findall(text):
        bare = word[:-1] if word.endswith("s") and word[:-1] in words else word
        if bare not in NOT_TERMS_CAPS and bare not in words:
            found.add(word)
    return found


def emphasised(raw: str) -> set[str]:
    """Short phrases set in *italics* or **bold** in a page's prose, lower-cased."""
    text, _ = prose(raw)
    found = set()
    for match in re.finditer(r"(?<![*\w\\])(\*\*?)(?!\s)([^*\n]+?)(?<!\s)\1(?![*\w])", text):
        if re.search(r"[.:!?]$", match.group(2).strip()):
            continue  # a run-in heading ("**Booleans.**"), not a term
        phrase = re.sub(r"[^\w\s\-/]", "", match.group(2)).strip().lower()
        phrase = " ".join(phrase.split())
        if phrase and len(phrase.split()) <= 3 and not re.search(r"\d", phrase):
            found.add(phrase)
    return found


def _known(phrase: str) -> bool:
    """A glossary term (or its plural), the first or last word of a longer one (*zigzag* for
    "zigzag layout", *grid* for "launch grid"), or a listed non-term."""
    lower = {t.lower() for t in TERM_OF}
    ends = {w for t in lower if " " in t for w in (t.split()[0], t.split()[-1])}
    forms = {phrase, re.sub(r"(es|s)$", "", phrase), re.sub(r"s$", "", phrase)}
    return bool(forms & lower) or bool(forms & ends) or phrase in NOT_TERMS_EMPHASIS


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_abbreviations_are_in_the_glossary(page):
    found = abbreviations(PROSE[page][0])
    assert not found, (f"{page.name} uses {sorted(found)}: add them to book/glossary.md (or, "
                       "for a name that is not a term, to NOT_TERMS_CAPS with the reason)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_emphasised_terms_are_in_the_glossary(page):
    found = sorted(p for p in emphasised(page.read_text(encoding="utf-8")) if not _known(p))
    assert not found, (f"{page.name} emphasises {found}: add the terms to book/glossary.md (or "
                       "to NOT_TERMS_EMPHASIS when the emphasis only stresses a word)")


# The checks themselves catch what they are for.


def test_a_missing_abbreviation_is_caught():
    assert abbreviations("The XYZW buffer and the HBM.") == {"XYZW"}


def test_an_emphasised_new_term_is_caught():
    assert "quantum foam" in emphasised("A *quantum foam* is not *not* a term.\n")
    assert not _known("quantum foam") and _known("roofline") and _known("not")


def test_an_unlinked_first_use_is_caught():
    text, spans = prose("The {term}`roofline` plot, then a roofline again.\n")
    uses = [u for u in term_uses(text) if u[2] == "roofline"]
    assert len(uses) == 2
    assert any(s <= uses[0][0] and uses[0][1] <= e for s, e, _ in spans)
    assert not any(s <= uses[1][0] and uses[1][1] <= e for s, e, _ in spans)


def test_prose_drops_code_math_and_headings():
    text, _ = prose("# HBM title\n\nSee `HBM` and $\\mathrm{HBM}$.\n\n```python\nHBM = 1\n```\n"
                    "<!-- HBM -->\n````{figure} f.png\n:alt: HBM\n\nA caption.\n\n"
                    "```{math}\nHBM\n```\n````\nThe end.\n")
    assert "HBM" not in text and "A caption." in text and "The end." in text


def test_a_long_definition_is_caught():
    assert sentences("One. Two, with $x = 1.5$. Three.") == 3
    assert sentences("An operation (e.g. a product) on tensors.") == 1
