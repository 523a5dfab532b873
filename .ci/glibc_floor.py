"""The glibc a native library needs: the highest GLIBC_x.y symbol version it references.

    python glibc_floor.py FLOOR FILE...

For each ELF shared object FILE (a wheel's `.so`, an addon's `.node`) prints
`FILE: glibc X.Y (N versioned symbols)`, read from its version-needed section (what the dynamic
loader checks), and exits 1 when one needs a glibc newer than FLOOR (e.g. 2.17), naming it.
Reads the files with pyelftools (a dependency of auditwheel, in the pinned tools' venv).
"""

from __future__ import annotations

import sys

from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection


def version(text: str) -> tuple[int, ...]:
    """`2.17` as `(2, 17)`."""
    return tuple(int(part) for part in text.split("."))


def needed(path: str) -> list[tuple[int, ...]]:
    """The GLIBC versions `path` needs, from every library it names (libc, libm, libpthread...)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        found = []
        for section in elf.iter_sections():
            if not isinstance(section, GNUVerNeedSection):
                continue
            for _library, auxiliaries in section.iter_versions():
                for aux in auxiliaries:
                    name = aux.name
                    if name.startswith("GLIBC_") and name[6:7].isdigit():
                        found.append(version(name[6:]))
        return found


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    floor = version(argv[1])
    failed = False
    for path in argv[2:]:
        versions = needed(path)
        if not versions:
            print(f"{path}: references no GLIBC symbol version", file=sys.stderr)
            failed = True
            continue
        top = max(versions)
        shown = ".".join(map(str, top))
        print(f"{path}: glibc {shown} ({len(versions)} versions needed)")
        if top > floor:
            print(f"{path}: needs glibc {shown}, above the floor {argv[1]}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
