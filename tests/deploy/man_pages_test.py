#!/usr/bin/env python3
"""The manual pages (issue 35 item 4): fabricscope-agent(8), fabricscope-aggregator(8) and
fabricscope-pcap(1), generated at build time by each binary's --help-man from the option
declarations its --help reads (deploy/CMakeLists.txt).

Each page must render with `groff -ww -man` without a single warning, and `man -l` must show it;
every flag of the daemons' option tables (their --help-markdown) must stand in its page, and
pcap's --json and --top in its own.

Usage: man_pages_test.py MAN_DIR AGENT AGGREGATOR
"""
import os
import re
import subprocess
import sys


def rendered(page):
    env = dict(os.environ, MANWIDTH='100', MANPAGER='cat', PAGER='cat')
    out = subprocess.run(['man', '-l', page], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise AssertionError(f'man -l {page}: exit {out.returncode}: {out.stderr.strip()}')
    return subprocess.run(['col', '-bx'], input=out.stdout, capture_output=True,
                          text=True, check=True).stdout


def main(man_dir, agent, aggregator):
    failures = []
    pages = {'fabricscope-agent.8': agent, 'fabricscope-aggregator.8': aggregator,
             'fabricscope-pcap.1': None}
    for name, binary in pages.items():
        page = os.path.join(man_dir, name)
        if not os.path.exists(page):
            failures.append(f'{page}: not generated')
            continue
        groff = subprocess.run(['groff', '-ww', '-man', '-Tutf8', '-z', page],
                               capture_output=True, text=True)
        if groff.returncode != 0 or groff.stderr.strip():
            failures.append(f'{name}: groff -ww: exit {groff.returncode}: {groff.stderr.strip()}')
        text = rendered(page)
        if binary is not None:
            table = subprocess.run([binary, '--help-markdown'], capture_output=True, text=True,
                                   check=True).stdout
            flags = re.findall(r'^\| `(--[a-z0-9-]+)`', table, re.M)
            if len(flags) < 10:
                failures.append(f'{name}: only {len(flags)} flags in --help-markdown')
        else:
            flags = ['--json', '--top']
        missing = [f for f in flags if f not in text]
        if missing:
            failures.append(f'{name}: flags not in the page: {" ".join(missing)}')
        for section in ('NAME', 'SYNOPSIS', 'DESCRIPTION', 'OPTIONS'):
            if not re.search(rf'^{section}$', text, re.M):
                failures.append(f'{name}: no {section} section')
        print(f'{name}: {len(text.splitlines())} lines rendered, {len(flags)} flags checked')
    for f in failures:
        print('FAIL', f)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(*sys.argv[1:4]))
