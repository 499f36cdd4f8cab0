#!/usr/bin/env python3
"""Every relative link of the Markdown guides leads somewhere (issue 35 item 5).

For each Markdown file git tracks (README.md, the folders' README.md files, the changelog, the
runbook, ...): every link or image `[text](target)` outside code blocks whose target is not a URL
must name a file or folder that exists, relative to the file; a `#anchor` (alone or after a
Markdown file) must be a heading of that file, as GitHub makes anchors of headings (lower case,
punctuation but '-' and '_' dropped, spaces to '-'). A guide's "## Contents" list must be its
headings (## and ###) in order, so that it cannot go stale. Also README.md stays under 300
lines: the front door, the rest beside the code it describes.

Usage: doc_links.py REPO_ROOT. Prints each dead link as FILE:LINE: TARGET (why); exit 1 on any.
"""
import os
import re
import subprocess
import sys

LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)\)')
HEADING = re.compile(r'^(#{1,6}) (.*)')
MAX_README_LINES = 300


def slug(heading):
    h = heading.strip().lower()
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')


def outside_code(lines, keep_inline=False):
    """(line number, line) of the lines outside ``` blocks, inline code removed (or, with
    keep_inline, only its backticks: a heading's anchor keeps the code's letters)."""
    fence = False
    for n, line in enumerate(lines, 1):
        if line.startswith('```'):
            fence = not fence
            continue
        if not fence:
            yield n, line.replace('`', '') if keep_inline else re.sub(r'`[^`]*`', '', line)


def headings(path, cache={}):
    if path not in cache:
        with open(path, encoding='utf-8') as f:
            lines = f.read().split('\n')
        cache[path] = [(len(m.group(1)), m.group(2)) for _, l in outside_code(lines, keep_inline=True)
                       for m in [HEADING.match(l)] if m]
    return cache[path]


def check_contents(path, lines, errors):
    text = '\n'.join(lines)
    if '\n## Contents\n' not in text:
        return
    listed = re.findall(r'^\s*- \[[^\]]*\]\(#([^)]+)\)', text.split('\n## Contents\n', 1)[1]
                        .split('\n## ', 1)[0], re.M)
    wanted = [slug(h) for level, h in headings(path) if level in (2, 3) and h != 'Contents']
    if listed != wanted:
        errors.append(f'{path}: "## Contents" is not its headings in order '
                      f'(listed {len(listed)}, headings {len(wanted)})')


def main(root):
    files = subprocess.run(['git', '-C', root, 'ls-files', '*.md'], capture_output=True,
                           text=True, check=True).stdout.split()
    errors = []
    for rel in files:
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            continue  # deleted in the work tree, not yet committed
        with open(path, encoding='utf-8') as f:
            lines = f.read().split('\n')
        if rel == 'README.md' and len(lines) > MAX_README_LINES:
            errors.append(f'README.md: {len(lines)} lines, at most {MAX_README_LINES}')
        check_contents(path, lines, errors)
        for n, line in outside_code(lines):
            for target in LINK.findall(line):
                if re.match(r'^[a-z][a-z0-9+.-]*:', target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                    if file_part else path
                if not os.path.exists(dest):
                    errors.append(f'{rel}:{n}: {target} (no such file)')
                    continue
                if anchor and dest.endswith('.md'):
                    if anchor not in {slug(h) for _, h in headings(dest)}:
                        errors.append(f'{rel}:{n}: {target} (no heading #{anchor} there)')
    for e in errors:
        print(e)
    print(f'{len(files)} Markdown files, {len(errors)} dead links or stale contents')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else '.'))
