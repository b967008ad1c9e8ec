"""Regenerate ``api_table.json``: Apple's declared encodings of every selector riftco sends.

    pip download --no-deps --only-binary=:all: --platform macosx_11_0_universal2 \\
        pyobjc-framework-Metal pyobjc-framework-Cocoa -d /tmp/pyobjc
    python -m riftco.backends.metal.make_api_table /tmp/pyobjc

Why a table: a wrong prototype cast of ``objc_msgSend`` is undefined behaviour on arm64
that no Linux run can observe. The table holds what Apple declares, read from the
metadata pyobjc generates from the macOS SDK headers (``Metal/_metadata.py``,
``Foundation/_metadata.py`` inside the macOS wheels, which pip downloads on any platform);
``tests/backends/metal/test_metal_objc.py`` checks riftco's declarations
(``objc.SELECTORS``) against it and the fake Objective-C runtime refuses any message whose
prototype differs from it.

pyobjc writes metadata only where its bridge needs more than the runtime tells it, so a
few NSObject basics and class properties have none; :data:`HEADER_DECLARATIONS` gives
those with the SDK header line they come from, and the table marks them ``"from":
"header"``. The selectors taken are those ``objc.SELECTORS`` names: a new one without an
Apple declaration makes this script fail.
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

from riftco.backends.metal.objc import FUNCTIONS, SELECTORS

TABLE = Path(__file__).with_name("api_table.json")

#: Selectors pyobjc's metadata leaves out (their types are plain), as the macOS SDK
#: headers declare them: (header, declaration, return encoding, argument encodings).
HEADER_DECLARATIONS: dict[str, tuple[str, str, str, list[str]]] = {
    "alloc": ("objc/NSObject.h", "+ (instancetype)alloc;", "@", []),
    "init": ("objc/NSObject.h", "- (instancetype)init;", "@", []),
    "new": ("objc/NSObject.h", "+ (instancetype)new;", "@", []),
    "retain": ("objc/NSObject.h", "- (instancetype)retain;", "@", []),
    "drain": ("Foundation/NSAutoreleasePool.h", "- (void)drain;", "v", []),
    "localizedDescription": (
        "Foundation/NSError.h",
        "@property (readonly, copy) NSString *localizedDescription;",
        "@",
        [],
    ),
    "stringWithUTF8String:": (
        "Foundation/NSString.h",
        "+ (nullable instancetype)stringWithUTF8String:(const char *)nullTerminatedCString;",
        "@",
        ["^t"],
    ),
    "setFastMathEnabled:": (
        "Metal/MTLLibrary.h",
        "@property (readwrite, nonatomic) BOOL fastMathEnabled;",
        "v",
        ["Z"],
    ),
    "setLanguageVersion:": (
        "Metal/MTLLibrary.h",
        "@property (readwrite, nonatomic) MTLLanguageVersion languageVersion; "
        "/* typedef NS_ENUM(NSUInteger, MTLLanguageVersion) */",
        "v",
        ["Q"],
    ),
}

#: Enum values the runtime uses, read from the Metal metadata's enum table.
ENUMS = (
    "MTLLanguageVersion2_3",
    "MTLResourceStorageModeShared",
    "MTLCommandBufferStatusCompleted",
    "MTLCommandBufferStatusError",
    "MTLLibraryErrorCompileWarning",
)


def _metadata_sources(folder: Path) -> dict[str, tuple[str, str]]:
    """``{framework: (wheel name, _metadata.py text)}`` from the wheels in ``folder``."""
    found: dict[str, tuple[str, str]] = {}
    for wheel in sorted(folder.glob("pyobjc_*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                parts = name.split("/")
                if len(parts) == 2 and parts[1] == "_metadata.py":
                    found[parts[0]] = (wheel.name, z.read(name).decode())
    return found


def _registrations(text: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Every literal ``r(b"Class", b"selector", {...})`` call: selector -> [(class, info)]."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id != "r" or len(node.args) != 3:
            continue
        try:
            cls, sel, info = (ast.literal_eval(a) for a in node.args)
        except ValueError:  # a computed entry (sel32or64 ...): not one riftco uses
            continue
        out.setdefault(sel.decode(), []).append((cls.decode(), info))
    return out


def _enum_values(text: str) -> dict[str, int]:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "enums":
            raw = ast.literal_eval(node.value)
            pairs = (item.split("@", 1) for item in raw.strip("$").split("$") if "@" in item)
            return {k: int(v) for k, v in pairs}
    return {}


def _functions(text: str) -> dict[str, Any]:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "functions":
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                break
    return {}


def _text(code: Any) -> str:
    return code.decode() if isinstance(code, bytes) else str(code)


def _from_metadata(selector: str, info: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(returns, arguments) when the entry declares every argument, else None."""
    arity = selector.count(":")
    args = info.get("arguments", {})
    if "retval" not in info or any(i + 2 not in args or "type" not in args[i + 2]
                                   for i in range(arity)):  # fmt: skip
        return None
    return _text(info["retval"]["type"]), [_text(args[i + 2]["type"]) for i in range(arity)]


def _check_partial(
    selector: str, ret: str, args: list[str], partial: list[tuple[str, dict[str, Any]]]
) -> None:
    """A header declaration must agree with any type pyobjc does record."""
    for cls, info in partial:
        said = info.get("retval", {}).get("type")
        if said is not None and _text(said) != ret:
            raise SystemExit(f"{selector}: header returns {ret}, {cls} metadata says {said!r}")
        for index, spec in info.get("arguments", {}).items():
            if (
                "type" in spec
                and 0 <= index - 2 < len(args)
                and _text(spec["type"]) != args[index - 2]
            ):
                raise SystemExit(f"{selector}: header says {args}, {cls} metadata says {spec}")


def build(folder: Path) -> dict[str, Any]:
    sources = _metadata_sources(folder)
    missing = [f for f in ("Metal", "Foundation") if f not in sources]
    if missing:
        raise SystemExit(f"no {', '.join(missing)} metadata in the wheels under {folder}")
    selectors: dict[str, Any] = {}
    for selector in sorted(SELECTORS):
        entry = None
        partial: list[tuple[str, dict[str, Any]]] = []
        for framework in ("Metal", "Foundation"):
            wheel, text = sources[framework]
            for cls, info in _registrations(text).get(selector, []):
                types = _from_metadata(selector, info)
                partial.append((cls, info))
                if types is not None:
                    entry = {"returns": types[0], "arguments": types[1],
                             "declared_on": cls + (" (protocol)" if info.get("required") else ""),
                             "from": f"{wheel} {framework}/_metadata.py"}  # fmt: skip
                    break
            if entry:
                break
        if entry is None and selector in HEADER_DECLARATIONS:
            header, decl, ret, args = HEADER_DECLARATIONS[selector]
            _check_partial(selector, ret, args, partial)
            entry = {"returns": ret, "arguments": args, "declared_on": header,
                     "from": "header", "declaration": decl}  # fmt: skip
        if entry is None:
            raise SystemExit(f"no Apple declaration found for selector {selector!r}")
        selectors[selector] = entry
    metal_wheel, metal_text = sources["Metal"]
    enums = _enum_values(metal_text)
    functions = _functions(metal_text)
    table_functions = {}
    for name in sorted(FUNCTIONS):
        spec = functions[name]
        table_functions[name] = {
            "returns": _text(spec[0])[:1],
            "arguments": [],
            "owned": bool(spec[2].get("retval", {}).get("already_cfretained")),
            "from": f"{metal_wheel} Metal/_metadata.py",
        }
    return {
        "about": "Apple's declared encodings of every selector riftco's Metal runtime sends; "
        "regenerate with python -m riftco.backends.metal.make_api_table WHEEL_DIR",
        "wheels": sorted(w for w, _ in sources.values()),
        "selectors": selectors,
        "functions": table_functions,
        "enums": {name: enums[name] for name in ENUMS},
        "structs": {"MTLSize": "{MTLSize=QQQ}"},
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__)
        return 2
    table = build(Path(args[0]))
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {TABLE} ({len(table['selectors'])} selectors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
