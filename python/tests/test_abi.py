"""The binding's declarations against cabi/exports.json, the list of the C ABI.

The list holds the C signature of every export of the library and of every
callback type they take, as cgo writes them, at the ABI version it was written
at (cabi/ABI.md, "The list of exports"); the Go test TestExportList keeps it
true to the library. Here ``_native._SIGNATURES``, ``_native.PROGRESS``,
``_native.REWRITE_PROGRESS`` and ``_native.ABI_VERSION`` are checked against it, so
that a signature restated wrongly in Python fails here, not as a crash in a call.
"""

from __future__ import annotations

import copy
import ctypes
import json
from pathlib import Path
from typing import Any

import pytest

from croupier import _native

LIST = Path(__file__).parents[2] / "cabi" / "exports.json"

# The C type each ctypes type of the binding stands for; POINTER(t) is t's
# with a star. A void* stands for any data pointer: the binding keeps the
# address of a string it must free as c_void_p.
C_TYPES: dict[Any, str] = {
    None: "void",
    ctypes.c_int: "int",
    ctypes.c_int64: "int64_t",
    ctypes.c_uint64: "uint64_t",
    ctypes.c_char_p: "char*",
    ctypes.c_void_p: "void*",
    _native.ArrowSchema: "struct ArrowSchema",
    _native.ArrowArray: "struct ArrowArray",
    _native.ArrowArrayStream: "struct ArrowArrayStream",
    _native.PROGRESS: "croupier_progress",
    _native.REWRITE_PROGRESS: "croupier_rewrite_progress",
}

# The callback types of the binding, by the name of their C typedef.
CALLBACKS: dict[str, Any] = {
    name: t
    for t, name in C_TYPES.items()
    if isinstance(t, type) and issubclass(t, ctypes._CFuncPtr)
}

Signature = tuple[list[Any], Any]  # (argtypes, restype), as in _native._SIGNATURES


def exports_list() -> dict[str, Any]:
    return json.loads(LIST.read_text())


def c_type(t: Any) -> str:
    """The C spelling of the ctypes type t."""
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return c_type(t._type_) + "*"
    if t not in C_TYPES:
        raise KeyError(f"{t!r} has no C type in test_abi.C_TYPES: add it")
    return C_TYPES[t]


def same_type(declared: str, listed: str) -> bool:
    """Whether a parameter declared as C type ``declared`` passes as ``listed``:
    qualifiers aside, the same type, or a void pointer for any data pointer."""
    listed = listed.removeprefix("const ")
    if declared == listed:
        return True
    stars = declared.count("*")
    return declared.rstrip("*") == "void" and stars > 0 and listed.count("*") == stars


def mismatches(name: str, declared: Signature, listed: dict[str, Any]) -> list[str]:
    """Each difference between a declaration and the list's entry for ``name``."""
    argtypes, restype = declared
    params = listed["params"]
    out = []
    if not same_type(c_type(restype), listed["result"]):
        out.append(f"{name}: returns {c_type(restype)}, the list says {listed['result']}")
    if len(argtypes) != len(params):
        out.append(f"{name}: {len(argtypes)} parameters, the list has {len(params)}")
    for i, (t, (ctype, pname)) in enumerate(zip(argtypes, params, strict=False)):
        if not same_type(c_type(t), ctype):
            out.append(f"{name}: parameter {i} ({pname}) is {c_type(t)}, the list says {ctype}")
    return out


def differences(signatures: dict[str, Signature], abi: dict[str, Any]) -> list[str]:
    """Every way the declarations ``signatures`` and the callback types of the
    binding differ from the list ``abi``: exports missing on either side, and
    signatures that differ."""
    listed = {fn["name"]: fn for fn in abi["exports"]}
    out = [f"{n}: exported, not in _SIGNATURES" for n in sorted(listed.keys() - signatures.keys())]
    out += [f"{n}: in _SIGNATURES, not exported" for n in sorted(signatures.keys() - listed.keys())]
    for name in sorted(listed.keys() & signatures.keys()):
        out += mismatches(name, signatures[name], listed[name])
    callbacks = {fn["name"]: fn for fn in abi["callbacks"]}
    out += [
        f"{n}: a callback type of the list, not in the binding"
        for n in sorted(callbacks.keys() - CALLBACKS.keys())
    ]
    for name in sorted(callbacks.keys() & CALLBACKS.keys()):
        fn = CALLBACKS[name]
        out += mismatches(name, (list(fn._argtypes_), fn._restype_), callbacks[name])
    return out


def test_abi_version_is_the_lists() -> None:
    listed = exports_list()["abi_version"]
    assert listed == _native.ABI_VERSION, (
        f"{LIST} was written at C ABI version {listed}, but _native.ABI_VERSION is "
        f"{_native.ABI_VERSION}: the two move together with cabi's abiVersion"
    )


def test_declarations_are_the_lists() -> None:
    """Every export is declared, every declaration is an export, and each
    declares the listed result and parameter types; so are the callback types."""
    found = differences(_native._SIGNATURES, exports_list())
    assert not found, f"the binding differs from {LIST}:\n" + "\n".join(found)


def drift(abi: dict[str, Any], name: str, change: str) -> dict[str, Any]:
    """A copy of the list with the export or callback type ``name`` changed."""
    abi = copy.deepcopy(abi)
    fn = next(fn for fn in abi["exports"] + abi["callbacks"] if fn["name"] == name)
    if change == "param type":
        fn["params"][1][0] = "int64_t*"
    elif change == "result":
        fn["result"] = "int64_t"
    elif change == "extra param":
        fn["params"].insert(0, ["int", "flags"])
    elif change == "removed":
        abi["exports"].remove(fn)
    elif change == "added":
        abi["exports"].append({**fn, "name": "croupier_new"})
    return abi


OPEN = "croupier_table_open"


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        (OPEN, "param type", f"{OPEN}: parameter 1 (optionsJSON) is char*, the list says int64_t*"),
        (OPEN, "result", f"{OPEN}: returns int, the list says int64_t"),
        (OPEN, "extra param", f"{OPEN}: 4 parameters, the list has 5"),
        (OPEN, "removed", f"{OPEN}: in _SIGNATURES, not exported"),
        (OPEN, "added", "croupier_new: exported, not in _SIGNATURES"),
        (
            "croupier_progress",
            "param type",
            "croupier_progress: parameter 1 (done) is int64_t, the list says int64_t*",
        ),
    ],
)
def test_a_drift_is_named(name: str, change: str, message: str) -> None:
    """Each way the list can differ from the binding is found, and named."""
    found = differences(_native._SIGNATURES, drift(exports_list(), name, change))
    assert message in found, found
