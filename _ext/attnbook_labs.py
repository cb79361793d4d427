"""Sphinx extension: the book's numbering of chapters, sections, figures and labs.

* Labs carry their own number in their title ("Lab 3 — Scaling by √d"). The toc numbers every
  part, so Sphinx would also number each lab as a section of its chapter ("3.1. Lab 3 — ...").
  After Sphinx assigns section numbers, drop them for the labs' documents; chapters, their
  equations and figures keep theirs.
* Chapter 0 ("Getting started") sits in a part of its own that is not numbered (a numbered part
  there would shift every later chapter by one), so Sphinx would number its figures with the
  unnumbered pages' shared counter ("Fig. 2", after the introduction's). Number it as chapter 0:
  its sections 0.1, 0.2, ... and its figures and equations 0.1, 0.2, ...; the other unnumbered
  pages (introduction, appendices) count their figures 1, 2, ... without chapter 0's.
"""

from __future__ import annotations

from docutils import nodes
from sphinx import addnodes

LAB_PREFIX = "notebooks/"
CHAPTER_ZERO = "book/00_at_a_glance"


def drop_lab_numbers(app, env) -> list[str]:
    """Remove the section numbers Sphinx assigned to lab pages (returns no extra docs)."""
    for docname in list(env.toc_secnumbers):
        if docname.startswith(LAB_PREFIX):
            env.toc_secnumbers[docname] = {}
            for node in env.tocs[docname].findall(nodes.reference):
                node.attributes.pop("secnumber", None)
            env.titles[docname].attributes.pop("secnumber", None)  # <title>, prev/next links
    return []


def number_chapter_zero(app, env) -> list[str]:
    """Give chapter 0 the numbers of a numbered chapter 0 (returns the document to rewrite)."""
    if CHAPTER_ZERO not in env.tocs:
        return []
    secnums: dict[str, tuple[int, ...]] = {}
    numstack = [-1]  # the page title becomes (0,), its sections (0, 1), (0, 2), ...

    def walk(node, titlenode=None) -> None:
        for sub in node.children:
            if isinstance(sub, nodes.bullet_list):
                numstack.append(0)
                walk(sub, titlenode)
                numstack.pop()
                titlenode = None
            elif isinstance(sub, (nodes.list_item, addnodes.only)):
                walk(sub, titlenode)
                titlenode = None
            elif isinstance(sub, addnodes.compact_paragraph):
                numstack[-1] += 1
                reference = sub[0]
                secnums[reference["anchorname"]] = tuple(numstack)
                reference["secnumber"] = list(numstack)
                if titlenode is not None:
                    titlenode["secnumber"] = list(numstack)
                    titlenode = None
            # a toctree (the chapter's lab) is numbered, or not, by drop_lab_numbers

    walk(env.tocs[CHAPTER_ZERO], env.titles.get(CHAPTER_ZERO))
    env.toc_secnumbers[CHAPTER_ZERO] = secnums
    fignumbers = env.toc_fignumbers
    for ids in fignumbers.get(CHAPTER_ZERO, {}).values():  # each figure type, in document order
        for k, figure_id in enumerate(ids, start=1):
            ids[figure_id] = (0, k)
    # The unnumbered pages shared one counter with chapter 0: count again without it.
    counters: dict[str, int] = {}
    for docname, types in fignumbers.items():  # in the order Sphinx numbered them
        if docname == CHAPTER_ZERO or env.toc_secnumbers.get(docname, {}).get(""):
            continue
        for figtype, ids in types.items():
            for figure_id, number in ids.items():
                if len(number) == 1:
                    counters[figtype] = counters.get(figtype, 0) + 1
                    ids[figure_id] = (counters[figtype],)
    return [CHAPTER_ZERO]


def forget_chapter_zero_numbers(app, env) -> list[str]:
    """Drop chapter 0's numbers of the previous build before the toc is numbered again.

    A reused environment (an incremental build) keeps the numbers :func:`number_chapter_zero`
    gave chapter 0's title and toc; sphinx-external-toc's collector would then renumber an
    unnumbered page that already has numbers and fail with ``KeyError: 'book/00_at_a_glance'``.
    Runs before the collector (priority 500); chapter 0 is numbered again after it.
    """
    if CHAPTER_ZERO in env.titles:
        env.titles[CHAPTER_ZERO].attributes.pop("secnumber", None)
    if CHAPTER_ZERO in env.tocs:
        for node in env.tocs[CHAPTER_ZERO].findall(nodes.reference):
            node.attributes.pop("secnumber", None)
    return []


def setup(app):
    app.connect("env-get-updated", forget_chapter_zero_numbers, priority=400)
    # After sphinx's own toctree collector (priority 500) has assigned the numbers.
    app.connect("env-get-updated", drop_lab_numbers, priority=900)
    app.connect("env-get-updated", number_chapter_zero, priority=901)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
