"""A small typed bridge to the Objective-C runtime through cffi's ABI mode (no compiler).

Why it looks like this: on arm64 ``objc_msgSend`` must be called through a pointer cast to
the method's exact C prototype (variadic calls pass arguments differently), and structs
such as ``MTLSize`` go by value. So every selector riftco sends is declared once in
:data:`SELECTORS` with Apple's type encodings (``backends/metal/api_table.json`` holds
Apple's own, and ``tests/backends/metal/test_metal_objc.py`` fails when the two differ);
the bridge turns each declaration into one cast function pointer and converts arguments by it.

The C side is reached through an :class:`ObjCLibrary`: :func:`load_system_library` dlopens
libobjc, Foundation, CoreGraphics and Metal on macOS; ``objc_fake.FakeObjC`` answers the
same four calls on Linux with cffi callbacks of the very prototypes the bridge casts to,
so the marshalling below runs for real in the tests.

Object handles are plain ints (0 is nil). Ownership follows Cocoa's rules and is the
caller's business: what ``alloc``/``new``/``copy``/``Create`` returns is owned and released
once; other returns are borrowed or autoreleased and need :meth:`ObjC.autorelease_pool`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import cffi

ffi = cffi.FFI()
ffi.cdef(
    """
    typedef struct { unsigned long width; unsigned long height; unsigned long depth; } MTLSize;
    void *objc_getClass(const char *name);
    void *sel_registerName(const char *name);
    void objc_msgSend(void);
    void *MTLCreateSystemDefaultDevice(void);
    """
)

#: C type of each Objective-C type encoding riftco uses (64-bit: NSUInteger is unsigned
#: long). BOOL is ``_Bool`` on arm64; pyobjc writes it ``Z``. Pointers to text (``*``,
#: ``r*``, pyobjc's ``^t``) are all ``char *``.
C_TYPES = {
    "@": "void *",
    "#": "void *",
    "^v": "void *",
    "^@": "void **",
    "*": "char *",
    "r*": "char *",
    "^t": "char *",
    "Q": "unsigned long",
    "q": "long",
    "I": "unsigned int",
    "i": "int",
    "Z": "_Bool",
    "B": "_Bool",
    "d": "double",
    "f": "float",
    "v": "void",
    "Vv": "void",
    "{MTLSize=QQQ}": "MTLSize",
}


@dataclass(frozen=True)
class Signature:
    """A method's return and argument encodings (without the implicit ``self``, ``_cmd``)."""

    returns: str
    arguments: tuple[str, ...] = ()

    def prototype(self) -> str:
        """The C function-pointer type ``objc_msgSend`` is cast to for this method."""
        args = ", ".join(["void *", "void *", *(C_TYPES[a] for a in self.arguments)])
        return f"{C_TYPES[self.returns]}(*)({args})"


def _sig(returns: str, *arguments: str) -> Signature:
    return Signature(returns, tuple(arguments))


#: Every selector the Metal runtime sends, with its declared encodings. A selector missing
#: here cannot be sent (``ObjC.send`` refuses it); the test compares this with the table.
SELECTORS: dict[str, Signature] = {
    # NSObject / Foundation
    "alloc": _sig("@"),
    "init": _sig("@"),
    "new": _sig("@"),
    "retain": _sig("@"),
    "release": _sig("Vv"),
    "drain": _sig("v"),
    "stringWithUTF8String:": _sig("@", "^t"),
    "UTF8String": _sig("^t"),
    "localizedDescription": _sig("@"),
    # MTLDevice
    "name": _sig("@"),
    "hasUnifiedMemory": _sig("Z"),
    "recommendedMaxWorkingSetSize": _sig("Q"),
    "maxThreadgroupMemoryLength": _sig("Q"),
    "newCommandQueue": _sig("@"),
    "newBufferWithLength:options:": _sig("@", "Q", "Q"),
    "newLibraryWithSource:options:error:": _sig("@", "@", "@", "^@"),
    "newComputePipelineStateWithFunction:error:": _sig("@", "@", "^@"),
    # MTLCompileOptions
    "setLanguageVersion:": _sig("v", "Q"),
    "setFastMathEnabled:": _sig("v", "Z"),
    # MTLLibrary, MTLComputePipelineState
    "newFunctionWithName:": _sig("@", "@"),
    "maxTotalThreadsPerThreadgroup": _sig("Q"),
    "threadExecutionWidth": _sig("Q"),
    # MTLBuffer
    "contents": _sig("^v"),
    "length": _sig("Q"),
    # MTLCommandQueue, MTLCommandBuffer
    "commandBuffer": _sig("@"),
    "computeCommandEncoder": _sig("@"),
    "commit": _sig("v"),
    "waitUntilCompleted": _sig("v"),
    "status": _sig("q"),
    "error": _sig("@"),
    # MTLComputeCommandEncoder
    "setComputePipelineState:": _sig("v", "@"),
    "setBuffer:offset:atIndex:": _sig("v", "@", "Q", "Q"),
    "dispatchThreadgroups:threadsPerThreadgroup:": _sig("v", "{MTLSize=QQQ}", "{MTLSize=QQQ}"),
    "endEncoding": _sig("v"),
}

#: C functions (not methods) the runtime calls, with their encodings.
FUNCTIONS: dict[str, Signature] = {"MTLCreateSystemDefaultDevice": _sig("@")}


class ObjCLibrary(Protocol):
    """The four C entry points the bridge needs; the real libobjc or a fake."""

    #: Says what this is (``riftco backends`` shows it).
    description: str

    def get_class(self, name: bytes) -> Any:
        """``objc_getClass``: the class object (a ``void *``), NULL when unknown."""
        ...

    def register_selector(self, name: bytes) -> Any:
        """``sel_registerName``."""
        ...

    def message_function(self, prototype: str) -> Callable[..., Any]:
        """``objc_msgSend`` as a callable of C type ``prototype`` (``Signature.prototype``)."""
        ...

    def create_system_default_device(self) -> Any:
        """``MTLCreateSystemDefaultDevice()``: an owned ``id<MTLDevice>`` or NULL."""
        ...


FRAMEWORKS = "/System/Library/Frameworks"


class SystemLibrary:
    """libobjc and the Metal framework of this Mac, dlopened by absolute path."""

    description = "libobjc + Metal.framework (cffi ABI mode)"

    def __init__(self) -> None:
        self._objc = ffi.dlopen("/usr/lib/libobjc.A.dylib")
        ffi.dlopen(f"{FRAMEWORKS}/Foundation.framework/Foundation")  # NSString, NSError
        # MTLCreateSystemDefaultDevice returns nil in a process that has not loaded
        # CoreGraphics (Apple's documentation of that function says so).
        ffi.dlopen(f"{FRAMEWORKS}/CoreGraphics.framework/CoreGraphics")
        self._metal = ffi.dlopen(f"{FRAMEWORKS}/Metal.framework/Metal")
        self._send = ffi.addressof(self._objc, "objc_msgSend")

    def get_class(self, name: bytes) -> Any:
        return self._objc.objc_getClass(name)

    def register_selector(self, name: bytes) -> Any:
        return self._objc.sel_registerName(name)

    def message_function(self, prototype: str) -> Callable[..., Any]:
        return ffi.cast(prototype, self._send)

    def create_system_default_device(self) -> Any:
        return self._metal.MTLCreateSystemDefaultDevice()


def load_system_library() -> SystemLibrary:
    """The real Objective-C runtime; ``OSError`` with the reason where there is none."""
    if sys.platform != "darwin":
        raise OSError(f"the Objective-C runtime and Metal are macOS-only (this is {sys.platform})")
    return SystemLibrary()


class ObjCError(RuntimeError):
    """A message the bridge refuses to send (undeclared selector, nil class, bad argument)."""


def _to_int(pointer: Any) -> int:
    return int(ffi.cast("uintptr_t", pointer))


class ObjC:
    """Sends declared messages through an :class:`ObjCLibrary`; handles are ints."""

    def __init__(self, library: ObjCLibrary) -> None:
        self.library = library
        self._bound: dict[str, tuple[Any, Callable[..., Any], Signature]] = {}
        self._classes: dict[str, int] = {}

    def cls(self, name: str) -> int:
        """The class object ``name``; ``ObjCError`` when the runtime has no such class."""
        c = self._classes.get(name)
        if c is None:
            c = _to_int(self.library.get_class(name.encode()))
            if not c:
                raise ObjCError(f"Objective-C class {name} not found ({self.library.description})")
            self._classes[name] = c
        return c

    def _bind(self, selector: str) -> tuple[Any, Callable[..., Any], Signature]:
        sig = SELECTORS.get(selector)
        if sig is None:
            raise ObjCError(f"selector {selector!r} is not declared in riftco's SELECTORS")
        sel = self.library.register_selector(selector.encode())
        bound = self._bound[selector] = (sel, self.library.message_function(sig.prototype()), sig)
        return bound

    def send(self, receiver: int, selector: str, *args: Any) -> Any:
        """``[receiver selector args...]``: ``@`` returns an int handle (0 for nil), ``Z``
        a bool, integers ints, pointers cdata. ``@`` arguments take ints (0 is nil),
        ``MTLSize`` a 3-tuple, ``^@`` a ``void **`` cdata, ``^t`` bytes."""
        sel, fn, sig = self._bound.get(selector) or self._bind(selector)
        if len(args) != len(sig.arguments):
            raise ObjCError(f"{selector} takes {len(sig.arguments)} arguments, got {len(args)}")
        converted = [
            ffi.cast("void *", a) if code == "@" else a
            for code, a in zip(sig.arguments, args, strict=True)
        ]
        result = fn(ffi.cast("void *", receiver), sel, *converted)
        if sig.returns == "@":
            return _to_int(result)
        if sig.returns == "Z":
            return bool(result)
        return result

    # -- ownership helpers -------------------------------------------------------------
    def retain(self, obj: int) -> int:
        self.send(obj, "retain")
        return obj

    def release(self, obj: int) -> None:
        if obj:
            self.send(obj, "release")

    @contextlib.contextmanager
    def autorelease_pool(self) -> Iterator[None]:
        """An ``NSAutoreleasePool`` around the block: what the block's calls autorelease
        (command buffers, encoders, strings, errors) is released when it ends."""
        pool = self.send(self.send(self.cls("NSAutoreleasePool"), "alloc"), "init")
        try:
            yield
        finally:
            self.send(pool, "drain")

    def string(self, text: str) -> int:
        """An autoreleased ``NSString`` (call under :meth:`autorelease_pool`)."""
        return self.send(self.cls("NSString"), "stringWithUTF8String:", text.encode())

    def text(self, nsstring: int) -> str:
        """The Python text of an ``NSString`` handle ('' for nil)."""
        if not nsstring:
            return ""
        raw = self.send(nsstring, "UTF8String")
        return "" if raw == ffi.NULL else ffi.string(raw).decode("utf-8", "replace")

    def description(self, error: int) -> str:
        """``[error localizedDescription]`` as text ('' for nil)."""
        return self.text(self.send(error, "localizedDescription")) if error else ""
