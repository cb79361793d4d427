"""Sphinx extension: labs carry their own number in their title ("Lab 3 — Scaling by √d").

The toc numbers every part, so Sphinx would also number each lab as a section of its chapter
("3.1. Lab 3 — ..."). After Sphinx assigns section numbers, drop them for the labs' documents;
chapters, their equations and figures keep theirs.
"""

from __future__ import annotations

from docutils import nodes

LAB_PREFIX = "notebooks/"


def drop_lab_numbers(app, env) -> list[str]:
    """Remove the section numbers Sphinx assigned to lab pages (returns no extra docs)."""
    for docname in list(env.toc_secnumbers):
        if docname.startswith(LAB_PREFIX):
            env.toc_secnumbers[docname] = {}
            for node in env.tocs[docname].findall(nodes.reference):
                node.attributes.pop("secnumber", None)
            env.titles[docname].attributes.pop("secnumber", None)  # <title>, prev/next links
    return []


def setup(app):
    # After sphinx's own toctree collector (priority 500) has assigned the numbers.
    app.connect("env-get-updated", drop_lab_numbers, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
