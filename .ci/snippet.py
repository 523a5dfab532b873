"""Prints the one fenced code block of a Markdown file that has a given language and contains a
given text: `python3 .ci/snippet.py FILE LANG TEXT`. .ci/dist.sh runs the README's examples this
way, so what it runs is what the README shows. No block or more than one is an error that names
the file, the language and the text."""

import re
import sys

path, lang, text = sys.argv[1:4]
with open(path, encoding="utf-8") as f:
    markdown = f.read()
blocks = [
    body
    for tag, body in re.findall(r"^```([\w-]*)\n(.*?)^```$", markdown, flags=re.M | re.S)
    if tag == lang and text in body
]
if len(blocks) != 1:
    sys.exit(f"{path}: {len(blocks)} ```{lang} blocks contain {text!r}, not one")
sys.stdout.write(blocks[0])
