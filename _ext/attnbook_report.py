"""Sphinx extension: a "Report a problem" link on every page, to a pre-filled GitHub issue.

The link sits in the page's sticky header bar, beside the theme's buttons, so it is in reach
wherever the reader is. It opens ``https://github.com/OWNER/REPO/issues/new`` with a title and a
body that name the page's source file, the section being read and the version of the site (the
commit it was built from, read with ``git rev-parse HEAD`` at build time; ``unknown`` outside a git
checkout). The repository is the one ``_config.yml``'s ``repository`` block names (Jupyter Book
passes it to the theme as ``repository_url``), so ``scripts/set_repository.py`` points the link at
a fork; ``attnbook_report_repository`` overrides it.

At build time the link names the page's title as its section. ``attnbook-report.js`` then
replaces the section, as the reader scrolls, with the heading nearest above the top of the
window (and its anchor), so a report says where the reader was. Without JavaScript the link
still works, naming the page. Nothing is loaded from another host: the link only navigates.
"""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path
from urllib.parse import urlencode

STATIC = Path(__file__).parent / "static"
LABEL = "Report a problem"
UNKNOWN = "unknown"


def site_commit(root: Path) -> str:
    """The commit ``root``'s checkout is at (``git rev-parse HEAD``), or "unknown" outside git.

    Args:
        root: a folder inside a git work tree (the book's source folder).

    Returns:
        The full 40-digit commit hash, or ``"unknown"`` when git or the repository is missing.
    """
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and len(commit) == 40 else UNKNOWN


def issue_body(page: str, section: str, anchor: str, commit: str, repository: str) -> str:
    """The issue's pre-filled text: where the problem is, then two prompts for the reader."""
    where = f"{section} (#{anchor})" if anchor else section
    version = commit if commit == UNKNOWN else f"{commit} ({repository}/commit/{commit})"
    return (f"**Page:** {page}\n**Section:** {where}\n**Site version:** {version}\n\n"
            "**What is wrong?**\n\n\n**What did you expect instead?**\n")


def issue_url(repository: str, page: str, section: str, commit: str, anchor: str = "") -> str:
    """The GitHub new-issue URL that reports a problem in ``section`` of ``page``.

    Args:
        repository: ``https://github.com/OWNER/REPO`` (a trailing slash or ``.git`` is dropped).
        page: the page's source file, relative to the repository root (``book/04_causal_mask.md``).
        section: the section's heading as the page shows it ("4.2. Building the mask").
        commit: the commit the site was built from, or "unknown".
        anchor: the section's HTML id, if any.

    Returns:
        ``REPOSITORY/issues/new?title=...&body=...``, query values percent-encoded.
    """
    repository = repository.rstrip("/").removesuffix(".git")
    if not repository.startswith("https://github.com/") or repository.count("/") != 4:
        raise ValueError(f"expected a repository URL https://github.com/OWNER/REPO, "
                         f"got {repository!r}")
    query = urlencode({"title": f"{page}: {section}",
                       "body": issue_body(page, section, anchor, commit, repository)})
    return f"{repository}/issues/new?{query}"


def _repository(app) -> str:
    url = app.config.attnbook_report_repository
    if not url:
        url = (app.config.html_theme_options or {}).get("repository_url", "")
    return url


def add_report_button(app, pagename, templatename, context, doctree) -> None:
    """Append the link to the theme's header buttons of a page built from a source file."""
    if doctree is None or "header_buttons" not in context:
        return
    repository = _repository(app)
    if not repository:
        return
    page = Path(app.env.doc2path(pagename, base=False)).as_posix()
    title = _plain_title(context.get("title") or pagename)
    commit = app.env.attnbook_commit
    context["header_buttons"].append({
        "type": "link",
        "url": issue_url(repository, page, title, commit),
        "tooltip": "Report a problem on this page: opens a new GitHub issue that names the "
                   "page, the section you are reading and the site's version",
        "text": LABEL,
        "icon": "fas fa-bug",
        "label": "report-problem",
    })


def _plain_title(title: str) -> str:
    """The page title as text: the theme's context holds it as HTML (``&lt;`` and tags)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", title)).split())


def read_commit(app) -> None:
    app.env.attnbook_commit = app.config.attnbook_report_commit or site_commit(Path(app.srcdir))


def add_static(app, config) -> None:
    config.html_static_path.append(str(STATIC))


def setup(app):
    app.add_config_value("attnbook_report_repository", "", "html")
    app.add_config_value("attnbook_report_commit", "", "html")
    app.connect("config-inited", add_static)
    app.connect("builder-inited", read_commit)
    # After the theme's own header buttons (priority 501), so the link comes last.
    app.connect("html-page-context", add_report_button, priority=502)
    app.add_css_file("attnbook-report.css")
    app.add_js_file("attnbook-report.js", loading_method="defer")
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
