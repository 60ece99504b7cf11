#!/usr/bin/env python3
"""Every role's README.md: a hand-written intro, then sections generated from its argument specs.

README.md = the intro (everything above MARKER, kept verbatim), MARKER, then for each entry point of
meta/argument_specs.yml (main first, the others by name) its short description, its description and
a table of its options (nested options under their parent, dotted). A default is the spec's, or else
the value defaults/main.yml gives the variable. A description in the table is the option's first
sentence; the spec has the rest.

    python tests/role_readme.py --write   # rewrite every README that differs
    python tests/role_readme.py --check   # exit 1 naming every stale README

A README without MARKER is all intro (the generated part is appended).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- Generated from meta/argument_specs.yml by tests/role_readme.py: edit the intro above, not below. -->"
# A rendered default longer than this is left to the file it comes from.
MAX_DEFAULT = 120
# Ansible's documentation markup: name( ... ) with balanced parentheses inside.
MARKUP = re.compile(r"\b(RV|[BCEIMOPUVLR])\(")
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.")


def _markup_end(text: str, start: int) -> int:
    """Index of the parenthesis closing the one before `start`, or -1."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _code(value: str, table: bool) -> str:
    if table:
        value = value.replace("|", "\\|")
    fence = "``" if "`" in value else "`"
    pad = " " if fence == "``" or value.startswith(" ") or value.endswith(" ") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def _plain(value: str, table: bool) -> str:
    # Only a "<" that could open an HTML tag or comment; the rest reads the same raw and rendered.
    value = re.sub(r"<(?=[A-Za-z/!?])", "&lt;", value)
    return value.replace("|", "\\|") if table else value


def markdown(text: str, table: bool = False) -> str:
    """Ansible markup (C(), O(), V(), I(), B(), M(), P(), U(), L(), ...) as Markdown."""
    out, pos = [], 0
    while (match := MARKUP.search(text, pos)) is not None:
        end = _markup_end(text, match.end())
        if end < 0:
            break
        out.append(_plain(text[pos : match.start()], table))
        kind, inner = match.group(1), text[match.end() : end]
        if kind == "I":
            out.append(f"*{_plain(inner, table)}*")
        elif kind == "B":
            out.append(f"**{_plain(inner, table)}**")
        elif kind == "U":
            out.append(_plain(inner, table))
        elif kind in ("L", "R"):
            label, _, target = inner.partition(",")
            out.append(f"[{_plain(label.strip(), table)}]({target.strip()})" if kind == "L" else _plain(label, table))
        elif kind == "P":
            name, _, plugin_type = inner.partition("#")
            out.append(_code(name, table) + (f" ({plugin_type})" if plugin_type else ""))
        else:  # C, O, V, E, RV, M: literal values and names
            out.append(_code(inner, table))
        pos = end + 1
    out.append(_plain(text[pos:], table))
    return "".join(out)


def paragraphs(description) -> list[str]:
    """A spec description (a string or a list of them) as whitespace-normalised paragraphs."""
    if description is None:
        return []
    items = description if isinstance(description, list) else [description]
    return [" ".join(str(item).split()) for item in items if str(item).strip()]


def first_sentence(text: str) -> str:
    """Up to the first '.', '!' or '?' that ends a sentence outside parentheses."""
    depth = 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char in ".!?" and depth == 0 and text[i + 1 : i + 2] == " ":
            rest = text[i + 1 :].lstrip()
            word = text[: i + 1].rsplit(" ", 1)[-1]
            if rest[:1].isupper() and word.lower() not in ABBREVIATIONS:
                return text[: i + 1]
    return text


def render_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def default_cell(option: dict, name: str, role_defaults: dict | None) -> str:
    if option.get("default") is not None:
        value, source = option["default"], "`meta/argument_specs.yml`"
    elif role_defaults is not None and name in role_defaults:
        value, source = role_defaults[name], "`defaults/main.yml`"
    else:
        return ""
    rendered = render_value(value)
    if len(rendered) > MAX_DEFAULT or "\n" in rendered:
        return f"see {source}"
    return _code(rendered, table=True)


def option_rows(options: dict | None, role_defaults: dict | None, parent: str = "", depth: int = 0) -> list[str]:
    rows = []
    for name, given in (options or {}).items():
        option = given or {}
        dotted = f"{parent}.{name}" if parent else name
        kind = option.get("type", "")
        if option.get("elements"):
            kind = f"{kind} of {option['elements']}"
        choices = ", ".join(_code(render_value(c), table=True) for c in option.get("choices") or [])
        text = " ".join(paragraphs(option.get("description")))
        cells = [
            "&emsp;" * depth + _code(dotted, table=True),
            kind,
            "yes" if option.get("required") else "no",
            # Only top-level options are role variables that defaults/main.yml can set.
            default_cell(option, name, role_defaults if depth == 0 else None),
            choices,
            markdown(first_sentence(text), table=True),
        ]
        rows.append("| " + " | ".join(cells) + " |")
        rows.extend(option_rows(option.get("options"), role_defaults, dotted, depth + 1))
    return rows


def generated(role_dir: Path) -> str:
    """The part of the README below MARKER."""
    spec_file = role_dir / "meta/argument_specs.yml"
    lines = ["## Variables", ""]
    if not spec_file.is_file():
        return "\n".join([*lines, "This role has no `meta/argument_specs.yml`.", ""])
    specs = (yaml.safe_load(spec_file.read_text()) or {}).get("argument_specs") or {}
    defaults_file = role_dir / "defaults/main.yml"
    role_defaults = (yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.is_file() else None
    lines += [
        "Ansible checks these when the role starts (`meta/argument_specs.yml`). A default is the spec's,",
        "or else the one `defaults/main.yml` gives; a description is the option's first sentence (the",
        "spec has the rest).",
        "",
    ]
    for entry in sorted(specs, key=lambda e: (e != "main", e)):
        spec = specs[entry] or {}
        how = "" if entry == "main" else f" (`tasks_from: {entry}`)"
        lines += [f"### Entry point `{entry}`{how}", ""]
        if spec.get("short_description"):
            lines += [markdown(" ".join(str(spec["short_description"]).split())), ""]
        for paragraph in paragraphs(spec.get("description")):
            lines += [markdown(paragraph), ""]
        rows = option_rows(spec.get("options"), role_defaults)
        if rows:
            lines += [
                "| option | type | required | default | choices | description |",
                "| --- | --- | --- | --- | --- | --- |",
                *rows,
                "",
            ]
        else:
            lines += ["No options.", ""]
    return "\n".join(lines)


def intro(role_dir: Path) -> str:
    """The README's hand-written part: everything above MARKER, or all of a README without it."""
    readme = role_dir / "README.md"
    if not readme.is_file():
        return f"# {role_dir.name}\n\n"
    text = readme.read_text()
    match = re.search(r"(?m)^" + re.escape(MARKER) + r"$", text)
    return text[: match.start()] if match else text.rstrip("\n") + "\n\n"


def render(role_dir: Path) -> str:
    return f"{intro(role_dir)}{MARKER}\n\n{generated(role_dir)}".rstrip("\n") + "\n"


def role_dirs(roles_dir: Path) -> list[Path]:
    return sorted(p for p in roles_dir.iterdir() if p.is_dir() and ((p / "tasks").is_dir() or (p / "meta").is_dir()))


def stale(roles_dir: Path) -> list[Path]:
    """The READMEs that differ from what render() gives (a missing one included)."""
    out = []
    for role_dir in role_dirs(roles_dir):
        readme = role_dir / "README.md"
        if not readme.is_file() or readme.read_text() != render(role_dir):
            out.append(readme)
    return out


def write(roles_dir: Path) -> list[Path]:
    written = []
    for readme in stale(roles_dir):
        readme.write_text(render(readme.parent))
        written.append(readme)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite every stale README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 naming every stale README.md")
    parser.add_argument("--roles-dir", type=Path, default=ROOT / "roles", help="default: the project's roles/")
    args = parser.parse_args(argv)
    if args.write:
        for readme in write(args.roles_dir):
            print(f"wrote {os.path.relpath(readme)}")
        return 0
    found = stale(args.roles_dir)
    for readme in found:
        print(f"stale: {os.path.relpath(readme)} (run python tests/role_readme.py --write)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
