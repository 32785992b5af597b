"""Every link of the built book, and of the README, must lead somewhere.

    python3 check_links.py BOOK_DIR REPO_DIR

BOOK_DIR is mdBook's HTML output: each relative `href` and `src` must name a file of the book,
and each `#fragment` an element id of that file (mdBook gives every heading one). REPO_DIR's
README.md is read as GitHub renders it: each relative link must name a file or folder of the
checkout. Links to other sites are not fetched (no network here). Prints each broken link with
the page it is on and exits 1 if there is any.
"""

import html.parser
import os
import re
import sys
import urllib.parse

# Pages mdBook writes for itself: print.html repeats every chapter, 404.html and toc.html are
# chrome.
SKIPPED_PAGES = {"print.html", "404.html", "toc.html"}


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for attr in ("href", "src"):
            if attrs.get(attr) is not None and tag in ("a", "img", "link", "script"):
                self.links.append(attrs[attr])


def is_external(link):
    return bool(urllib.parse.urlsplit(link).scheme) or link.startswith("//")


def check_book(book):
    pages = {}
    for root, _, files in os.walk(book):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(root, name)
                parser = Page()
                with open(path, encoding="utf-8") as f:
                    parser.feed(f.read())
                pages[os.path.relpath(path, book)] = parser
    if "index.html" not in pages:
        return [f"{book}: no index.html: the book was not built"]
    broken = []
    for page, parsed in sorted(pages.items()):
        if os.path.basename(page) in SKIPPED_PAGES:
            continue
        for link in parsed.links:
            if is_external(link) or link.startswith("mailto:"):
                continue
            target, _, fragment = link.partition("#")
            target = urllib.parse.unquote(target)
            if target:
                resolved = os.path.normpath(os.path.join(os.path.dirname(page), target))
                if target.endswith("/"):
                    resolved = os.path.join(resolved, "index.html")
            else:
                resolved = page
            if resolved.startswith(".."):
                broken.append(f"{page}: {link} leads out of the book")
                continue
            if not os.path.exists(os.path.join(book, resolved)):
                broken.append(f"{page}: {link}: no {resolved} in the book")
                continue
            if fragment and resolved in pages and fragment not in pages[resolved].ids:
                broken.append(f"{page}: {link}: {resolved} has no #{fragment}")
    return broken


MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def check_readme(repo):
    broken = []
    readme = os.path.join(repo, "README.md")
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    for link in MARKDOWN_LINK.findall(text):
        if is_external(link) or link.startswith("#"):
            continue
        target = urllib.parse.unquote(link.partition("#")[0])
        if not os.path.exists(os.path.join(repo, target)):
            broken.append(f"README.md: {link}: no {target} in the checkout")
    return broken


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    broken = check_book(argv[1]) + check_readme(argv[2])
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    if broken:
        return 1
    print(f"every link of the book and the README leads somewhere ({argv[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
