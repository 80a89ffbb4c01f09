"""MkDocs hook: links in the tutorials (docs/tutorials/*.ipynb) that work on the site too.

A notebook links to pages and to other notebooks by their file paths
(``../guides/experiments.md#scale``, ``02-train-and-look.ipynb``), which is what Jupyter and a
repository browser follow. mkdocs-jupyter renders a notebook to HTML without rewriting them
(MkDocs rewrites the links of Markdown pages only), so on the site they would point at
files that are not there. This hook rewrites each such link of a notebook page to the URL of
the page it names and, as MkDocs does for Markdown pages, reports a link to a file that is
not in the docs as a warning (which fails ``mkdocs build --strict``).
"""

from __future__ import annotations

import logging
import posixpath
import re

log = logging.getLogger("mkdocs.hooks.notebook_links")
LINK = re.compile(r'href="(?!(?:[a-z]+:|/|#))([^"#]+\.(?:md|ipynb))(#[^"]*)?"')


def on_page_content(html: str, page, config, files) -> str:
    """Rewrite the file links of a notebook page to site URLs."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    base = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match) -> str:
        target = posixpath.normpath(posixpath.join(base, match.group(1)))
        found = files.get_file_from_path(target)
        if found is None:
            log.warning("%s links to %s, which is not in the docs", page.file.src_uri, target)
            return match.group(0)
        return f'href="{found.url_relative_to(page.file)}{match.group(2) or ""}"'

    return LINK.sub(rewrite, html)
