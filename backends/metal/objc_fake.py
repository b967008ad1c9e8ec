"""A fake Objective-C runtime with a fake Metal behind it, over PoCL: the objc runtime on Linux.

What ``standin.py`` is for metalcompute, this is for ``objc_runtime.py``, one level lower:
it implements the four C entry points of ``objc.ObjCLibrary``, and ``objc_msgSend`` is a
cffi *callback* of the exact prototype the bridge casts to, so every message really goes
through libffi's marshalling (MTLSize by value, ``NSError **`` out-parameters, C strings).

It is strict where Metal and Objective-C are, so bugs show on Linux:

- **Declared API only.** A selector that is not in ``api_table.json`` (Apple's encodings),
  or sent through a prototype other than the table's, is refused; so is a selector the
  receiver's class does not implement (``unrecognized selector``) and any message to a
  freed object.
- **Lifetimes counted.** Each object has a retain count and per-object retain/release
  tallies; ``new``/``alloc``/``MTLCreateSystemDefaultDevice`` return +1, ``commandBuffer``,
  ``computeCommandEncoder`` and ``stringWithUTF8String:`` return autoreleased objects, which
  need an ``NSAutoreleasePool`` (autoreleasing with none is an error, as Cocoa logs it);
  an over-release is an error; :meth:`FakeObjC.live` lists what is alive.
- **Deferred execution.** Dispatches run on PoCL only when a command buffer is waited for
  (in queue order, earlier committed ones first), reading the buffers' host bytes *then*:
  work the runtime forgot to commit never runs, and a host write into a buffer that
  pending work uses changes what that work reads, as it would on a GPU running late.
- **Encoding rules.** No dispatch without a pipeline, more threads per group than the
  pipeline allows, a buffer index above 30, encoding after ``endEncoding``, a second
  encoder while one is open, ``commit`` with an open encoder, committing twice, or waiting
  on an uncommitted command buffer.
- **Faults on demand.** :meth:`FakeObjC.fail_command_buffer` makes a chosen command buffer
  end with ``MTLCommandBufferStatusError`` and an NSError, as a GPU page fault would.

Group sizes: each pipeline's ``maxTotalThreadsPerThreadgroup`` is a multiple of 32 derived
from the function name (64 ... 1024) unless ``RIFTCO_STANDIN_GROUP_SIZE`` (or
``group_size=``) fixes it, as in the metalcompute stand-in. Programs build with fast math
exactly when the runtime's ``MTLCompileOptions`` ask for it.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Callable
from importlib import resources
from typing import Any

import numpy as np
from riftco.backends.opencl import runtime as clrt
from riftco.env_values import whole_number
from riftco.errors import KernelCompileError

from .objc import C_TYPES, ffi

cl = clrt.cl
GROUP_CHOICES = (64, 96, 224, 352, 512, 1024)
GROUP_ENV = "RIFTCO_STANDIN_GROUP_SIZE"
#: The fault description a failed command buffer carries (shaped like Metal's).
FAULT_TEXT = (
    "Execution of the command buffer was aborted due to an error during execution. "
    "Caused GPU Address Fault Error (0000000b:kIOGPUCommandBufferCallbackErrorPageFault)"
)


class ObjCFault(RuntimeError):
    """What Objective-C or Metal would crash, assert or log on; the fake raises it."""


def load_table() -> dict[str, Any]:
    text = resources.files("riftco.backends.metal").joinpath("api_table.json").read_text()
    return json.loads(text)


def prototype_of(entry: dict[str, Any]) -> str:
    """The C prototype Apple's declaration implies (what ``objc_msgSend`` must be cast to)."""
    args = ", ".join(["void *", "void *", *(C_TYPES[a] for a in entry["arguments"])])
    return f"{C_TYPES[entry['returns']]}(*)({args})"


_VOIDP = ffi.typeof("void *")


def _handle(pointer: Any) -> int:
    return int(ffi.cast("uintptr_t", pointer))


def _method(selector: str) -> str:
    return "m_" + selector.replace(":", "_")


class FakeObject:
    """An Objective-C object: a class name, a retain count, methods named ``m_<selector>``."""

    cls_name = "NSObject"

    def __init__(self, rt: FakeObjC) -> None:
        self.rt = rt
        self.refs = 1
        self.handle = rt._register(self)

    def m_retain(self) -> int:
        self.rt.retain(self)
        return self.handle

    def m_release(self) -> None:
        self.rt.release(self)

    def m_init(self) -> int:
        return self.handle

    def dealloc(self) -> None:
        """Release what this object holds (called when its count reaches zero)."""


class FakeClass:
    """A class object: immortal, answers class methods (``alloc``, ``new``, factories)."""

    def __init__(self, rt: FakeObjC, name: str, make: Callable[[], FakeObject] | None) -> None:
        self.rt, self.cls_name, self._make = rt, name, make
        self.refs = 1
        self.handle = rt._register(self, counted=False)

    def m_alloc(self) -> int:
        if self._make is None:
            raise ObjCFault(f"+[{self.cls_name} alloc] is not modelled")
        return self._make().handle

    def m_new(self) -> int:
        return self.m_alloc()

    def m_stringWithUTF8String_(self, text: Any) -> int:  # noqa: N802 - the selector
        if self.cls_name != "NSString":
            raise ObjCFault(f"+[{self.cls_name} stringWithUTF8String:]: unrecognized selector")
        s = NSString(self.rt, ffi.string(text).decode())
        return self.rt.autorelease(s)


class NSString(FakeObject):
    cls_name = "NSString"

    def __init__(self, rt: FakeObjC, text: str) -> None:
        super().__init__(rt)
        self.text = text
        self._utf8 = ffi.new("char[]", text.encode())

    def m_UTF8String(self) -> Any:  # noqa: N802
        return self._utf8


class NSError(FakeObject):
    cls_name = "NSError"

    def __init__(self, rt: FakeObjC, text: str, code: int) -> None:
        super().__init__(rt)
        self.code = code
        self.description = NSString(rt, text)

    def m_localizedDescription(self) -> int:  # noqa: N802
        return self.description.handle

    def dealloc(self) -> None:
        self.rt.release(self.description)


class NSAutoreleasePool(FakeObject):
    cls_name = "NSAutoreleasePool"

    def __init__(self, rt: FakeObjC) -> None:
        super().__init__(rt)
        self.objects: list[FakeObject] = []

    def m_init(self) -> int:
        self.rt.pools.append(self)
        return self.handle

    def m_drain(self) -> None:
        if not self.rt.pools or self.rt.pools[-1] is not self:
            raise ObjCFault("an autorelease pool drained out of order")
        self.rt.pools.pop()
        for obj in self.objects:
            self.rt.release(obj)
        self.objects = []
        self.rt.release(self)


class CompileOptions(FakeObject):
    cls_name = "MTLCompileOptions"
    language_version = 0
    fast_math = True  # Metal's default

    def m_setLanguageVersion_(self, version: int) -> None:  # noqa: N802
        known = {v for k, v in self.rt.table["enums"].items() if k.startswith("MTLLanguage")}
        if version not in known:
            raise ObjCFault(f"MTLCompileOptions.languageVersion {version} is not a declared value")
        self.language_version = version

    def m_setFastMathEnabled_(self, on: bool) -> None:  # noqa: N802
        self.fast_math = bool(on)


class Buffer(FakeObject):
    cls_name = "MTLBuffer"

    def __init__(self, rt: FakeObjC, length: int, shared: bool) -> None:
        super().__init__(rt)
        # Not zeros: Metal does not promise zero-filled memory; nothing may rely on it.
        self.host = np.full(length, 0xCD, dtype=np.uint8)
        self.shared = shared
        self.device_buffer = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, size=length)

    def m_contents(self) -> Any:
        return ffi.cast("void *", self.host.ctypes.data) if self.shared else ffi.NULL

    def m_length(self) -> int:
        return int(self.host.size)


class Function(FakeObject):
    cls_name = "MTLFunction"

    def __init__(self, rt: FakeObjC, program: Any, name: str) -> None:
        super().__init__(rt)
        self.program, self.name = program, name


class Pipeline(FakeObject):
    cls_name = "MTLComputePipelineState"

    def __init__(self, rt: FakeObjC, function: Function) -> None:
        super().__init__(rt)
        self.name = function.name
        self.kernel = cl.Kernel(function.program.program, function.name)
        self.num_args = int(self.kernel.get_info(cl.kernel_info.NUM_ARGS))
        g = rt.group_size or GROUP_CHOICES[zlib.crc32(self.name.encode()) % len(GROUP_CHOICES)]
        limit = self.kernel.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, rt.cl_runtime(False).device
        )
        self.max_threads = min(g, int(limit) // 32 * 32)

    def m_maxTotalThreadsPerThreadgroup(self) -> int:  # noqa: N802
        return self.max_threads

    def m_threadExecutionWidth(self) -> int:  # noqa: N802
        return 32


class Library(FakeObject):
    cls_name = "MTLLibrary"

    def __init__(self, rt: FakeObjC, program: Any) -> None:
        super().__init__(rt)
        self.program = program

    def m_newFunctionWithName_(self, name: int) -> int:  # noqa: N802
        text = self.rt.object(name, NSString).text
        try:
            cl.Kernel(self.program.program, text)
        except cl.Error:
            return 0
        return Function(self.rt, self.program, text).handle


class Encoder(FakeObject):
    cls_name = "MTLComputeCommandEncoder"

    def __init__(self, rt: FakeObjC, command_buffer: CommandBuffer) -> None:
        super().__init__(rt)
        self.command_buffer = command_buffer
        self.pipeline: Pipeline | None = None
        self.bindings: dict[int, Buffer] = {}
        self.ended = False

    def _live(self) -> None:
        if self.ended:
            raise ObjCFault("encoding on a compute encoder after endEncoding")

    def m_setComputePipelineState_(self, pipeline: int) -> None:  # noqa: N802
        self._live()
        self.pipeline = self.rt.object(pipeline, Pipeline)

    def m_setBuffer_offset_atIndex_(self, buffer: int, offset: int, index: int) -> None:  # noqa: N802
        self._live()
        if index > 30 or offset:
            raise ObjCFault(f"setBuffer: index {index} offset {offset} (riftco binds 0..30 at 0)")
        self.bindings[index] = self.rt.object(buffer, Buffer)

    def m_dispatchThreadgroups_threadsPerThreadgroup_(self, groups: Any, threads: Any) -> None:  # noqa: N802
        self._live()
        p = self.pipeline
        if p is None:
            raise ObjCFault("dispatch with no compute pipeline state set")
        per_group = threads.width * threads.height * threads.depth
        if per_group > p.max_threads or threads.height != 1 or threads.depth != 1:
            raise ObjCFault(
                f"{p.name}: threadsPerThreadgroup {threads.width}x{threads.height}x"
                f"{threads.depth} exceeds maxTotalThreadsPerThreadgroup {p.max_threads}"
            )
        # Bindings persist across dispatches of an encoder (as in Metal): the kernel reads
        # its own arguments' indices, whatever else is still bound.
        missing = [i for i in range(p.num_args) if i not in self.bindings]
        if missing:
            raise ObjCFault(f"{p.name}: no buffer bound at index {missing}")
        bound = [self.bindings[i] for i in range(p.num_args)]
        self.command_buffer.record(p, bound, groups.width * groups.height * groups.depth,
                                   threads.width)  # fmt: skip

    def m_endEncoding(self) -> None:  # noqa: N802
        self._live()
        self.ended = True
        self.command_buffer.encoder = None


class CommandBuffer(FakeObject):
    cls_name = "MTLCommandBuffer"

    def __init__(self, rt: FakeObjC) -> None:
        super().__init__(rt)
        rt.command_buffers_made += 1
        self.number = rt.command_buffers_made
        self.status = 0  # NotEnqueued
        self.encoder: Encoder | None = None
        self.work: list[tuple[Pipeline, list[Buffer], int, int]] = []
        self.held: list[FakeObject] = []  # Metal retains what the commands reference
        self.error: NSError | None = None

    def record(self, p: Pipeline, bound: list[Buffer], groups: int, threads: int) -> None:
        for obj in (p, *bound):
            self.rt.retain(obj)
            self.held.append(obj)
        self.work.append((p, bound, groups, threads))

    def m_computeCommandEncoder(self) -> int:  # noqa: N802
        if self.status or self.encoder is not None:
            raise ObjCFault("computeCommandEncoder while an encoder is open or after commit")
        self.encoder = Encoder(self.rt, self)
        return self.rt.autorelease(self.encoder)

    def m_commit(self) -> None:
        if self.encoder is not None:
            raise ObjCFault("commit with an encoder that was not ended (endEncoding)")
        if self.status:
            raise ObjCFault("a command buffer committed twice")
        self.status = 2  # Committed
        self.rt.retain(self)  # the queue holds it until it completes
        self.rt.committed.append(self)

    def m_waitUntilCompleted(self) -> None:  # noqa: N802
        if self.status == 0:
            raise ObjCFault("waitUntilCompleted on a command buffer never committed")
        while self.status == 2:
            self.rt.run_next()
        self.rt.waits += 1

    def m_status(self) -> int:
        return self.status

    def m_error(self) -> int:
        return self.error.handle if self.error is not None else 0

    def complete(self, failed: bool) -> None:
        table = self.rt.table["enums"]
        if failed:
            self.error = NSError(self.rt, FAULT_TEXT, 3)
        self.status = table["MTLCommandBufferStatusError" if failed else
                            "MTLCommandBufferStatusCompleted"]  # fmt: skip
        held, self.held = self.held, []
        for obj in held:
            self.rt.release(obj)
        self.rt.release(self)  # the queue's reference

    def dealloc(self) -> None:
        if self.error is not None:
            self.rt.release(self.error)


class CommandQueue(FakeObject):
    cls_name = "MTLCommandQueue"

    def m_commandBuffer(self) -> int:  # noqa: N802
        return self.rt.autorelease(CommandBuffer(self.rt))


class Device(FakeObject):
    cls_name = "MTLDevice"

    def __init__(self, rt: FakeObjC) -> None:
        super().__init__(rt)
        cl_rt = rt.cl_runtime(False)
        self.name = NSString(rt, f"fake Metal device over OpenCL ({cl_rt.device_name})")
        self.working_set = int(cl_rt.device.global_mem_size)

    def dealloc(self) -> None:
        self.rt.release(self.name)

    def m_name(self) -> int:
        return self.name.handle

    def m_hasUnifiedMemory(self) -> bool:  # noqa: N802
        return True

    def m_recommendedMaxWorkingSetSize(self) -> int:  # noqa: N802
        return self.working_set

    def m_maxThreadgroupMemoryLength(self) -> int:  # noqa: N802
        return 32768

    def m_newCommandQueue(self) -> int:  # noqa: N802
        return CommandQueue(self.rt).handle

    def m_newBufferWithLength_options_(self, length: int, options: int) -> int:  # noqa: N802
        shared = options == self.rt.table["enums"]["MTLResourceStorageModeShared"]
        return Buffer(self.rt, int(length), shared).handle

    def m_newLibraryWithSource_options_error_(self, source: int, options: int, error: Any) -> int:  # noqa: N802
        text = self.rt.object(source, NSString).text
        opts = self.rt.object(options, CompileOptions)
        if not opts.language_version:
            raise ObjCFault("compiling with MTLCompileOptions whose languageVersion was never set")
        try:
            program = self.rt.cl_runtime(opts.fast_math).compile(text, "fake Metal library")
        except KernelCompileError as exc:
            self.rt.out_error(error, str(exc), 3)  # MTLLibraryErrorCompileFailure
            return 0
        if program.build_log.text.strip():
            code = self.rt.table["enums"]["MTLLibraryErrorCompileWarning"]
            self.rt.out_error(error, program.build_log.text, code)
        return Library(self.rt, program).handle

    def m_newComputePipelineStateWithFunction_error_(self, function: int, error: Any) -> int:  # noqa: N802
        return Pipeline(self.rt, self.rt.object(function, Function)).handle


class FakeObjC:
    """Implements ``objc.ObjCLibrary``; see the module docstring for what it enforces."""

    def __init__(self, group_size: int | None = None) -> None:
        if cl is None:
            raise ObjCFault(clrt.IMPORT_ERROR)
        env = whole_number(GROUP_ENV, 0, "threads")
        self.group_size = group_size or env or None
        if self.group_size is not None and self.group_size % 32:
            raise ObjCFault(f"group size {self.group_size} is not a multiple of 32")
        self.table = load_table()
        self._prototypes = {sel: prototype_of(e) for sel, e in self.table["selectors"].items()}
        self._objects: dict[int, Any] = {}
        self._next = 0x1000
        self._selectors: dict[bytes, int] = {}
        self._selector_names: dict[int, str] = {}
        self._functions: dict[str, Callable[..., Any]] = {}
        self._error: BaseException | None = None
        self._cl: dict[bool, Any] = {}
        self.pools: list[NSAutoreleasePool] = []
        self.committed: list[CommandBuffer] = []
        self.command_buffers_made = 0
        self.waits = 0
        self.dispatches_run = 0
        self._fail: set[int] = set()
        #: Per object handle: retains and releases sent or implied; objects ever made.
        self.retains: Counter[int] = Counter()
        self.releases: Counter[int] = Counter()
        self.made: Counter[str] = Counter()
        self.ever: dict[int, str] = {}  # every counted object's handle and class
        self.sent: Counter[str] = Counter()
        self._classes = {
            name: FakeClass(self, name, make)
            for name, make in {
                "NSObject": None,
                "NSString": None,
                "NSAutoreleasePool": lambda: NSAutoreleasePool(self),
                "MTLCompileOptions": lambda: CompileOptions(self),
            }.items()
        }
        self.description = (
            f"fake Objective-C runtime over OpenCL ({self.cl_runtime(False).device_name})"
        )

    # -- the ObjCLibrary surface --------------------------------------------------------
    def get_class(self, name: bytes) -> Any:
        c = self._classes.get(name.decode())
        return ffi.cast("void *", c.handle if c else 0)

    def register_selector(self, name: bytes) -> Any:
        sel = self._selectors.get(name)
        if sel is None:
            sel = self._selectors[name] = 0x10 + 8 * len(self._selectors)
            self._selector_names[sel] = name.decode()
        return ffi.cast("void *", sel)

    def message_function(self, prototype: str) -> Callable[..., Any]:
        fn = self._functions.get(prototype)
        if fn is None:
            fn = self._functions[prototype] = self._make_function(prototype)
        return fn

    def create_system_default_device(self) -> Any:
        return ffi.cast("void *", Device(self).handle)

    def _make_function(self, prototype: str) -> Callable[..., Any]:
        def on_message(receiver: Any, sel: Any, *args: Any) -> Any:
            return self._dispatch(prototype, receiver, sel, args)

        def on_error(kind: Any, value: BaseException, tb: Any) -> None:
            self._error = value.with_traceback(tb)

        raw = ffi.callback(prototype, on_message, onerror=on_error)

        def call(*args: Any) -> Any:
            result = raw(*args)
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            return result

        call.raw = raw  # type: ignore[attr-defined]  # keeps the callback alive
        return call

    def _dispatch(self, prototype: str, receiver: Any, sel: Any, args: tuple[Any, ...]) -> Any:
        name = self._selector_names.get(_handle(sel))
        if name is None:
            raise ObjCFault("a selector that was never registered")
        declared = self._prototypes.get(name)
        if declared is None:
            raise ObjCFault(f"selector {name!r} is not in api_table.json (Apple's declared API)")
        if declared != prototype:
            raise ObjCFault(f"{name} sent as {prototype}; Apple declares {declared}")
        obj = self._objects.get(_handle(receiver))
        if obj is None:
            raise ObjCFault(f"-{name} sent to a freed or unknown object {_handle(receiver):#x}")
        method = getattr(obj, _method(name), None)
        if method is None:
            raise ObjCFault(f"-[{obj.cls_name} {name}]: unrecognized selector")
        self.sent[name] += 1
        converted = [_handle(a) if isinstance(a, ffi.CData) and ffi.typeof(a) is _VOIDP else a
                     for a in args]  # fmt: skip
        result = method(*converted)
        return ffi.cast("void *", result) if declared.startswith("void *") and isinstance(
            result, int) else result  # fmt: skip

    # -- objects and counts -------------------------------------------------------------
    def _register(self, obj: Any, counted: bool = True) -> int:
        self._next += 16
        self._objects[self._next] = obj
        if counted:
            self.made[obj.cls_name] += 1
            self.ever[self._next] = obj.cls_name
        return self._next

    def object(self, handle: int, kind: type) -> Any:
        obj = self._objects.get(handle)
        if not isinstance(obj, kind):
            raise ObjCFault(f"expected a live {kind.__name__}, got {obj!r} ({handle:#x})")
        return obj

    def retain(self, obj: FakeObject) -> None:
        obj.refs += 1
        self.retains[obj.handle] += 1

    def release(self, obj: FakeObject) -> None:
        if obj.refs <= 0:
            raise ObjCFault(f"over-release of a {obj.cls_name}")
        obj.refs -= 1
        self.releases[obj.handle] += 1
        if obj.refs == 0:
            del self._objects[obj.handle]
            obj.dealloc()

    def autorelease(self, obj: FakeObject) -> int:
        if not self.pools:
            raise ObjCFault(f"a {obj.cls_name} autoreleased with no pool in place - just leaking")
        self.pools[-1].objects.append(obj)
        return obj.handle

    def out_error(self, pointer: Any, text: str, code: int) -> None:
        """Write an autoreleased NSError into an ``NSError **`` out-parameter."""
        if pointer != ffi.NULL:
            pointer[0] = ffi.cast("void *", self.autorelease(NSError(self, text, code)))

    def live(self) -> Counter[str]:
        """Objects alive now, by class (class objects are not counted)."""
        return Counter(o.cls_name for o in self._objects.values() if isinstance(o, FakeObject))

    # -- the GPU ------------------------------------------------------------------------
    def cl_runtime(self, fast_math: bool) -> Any:
        rt = self._cl.get(fast_math)
        if rt is None:
            rt = self._cl[fast_math] = clrt.OpenCLRuntime(0, fast_math=fast_math)
        return rt

    @property
    def context(self) -> Any:
        return self.cl_runtime(False).context

    def fail_command_buffer(self, number: int) -> None:
        """Make command buffer ``number`` (1 is the first made) end in a GPU fault."""
        self._fail.add(number)

    def run_next(self) -> None:
        """Execute the oldest committed command buffer (its dispatches in order)."""
        cb = self.committed.pop(0)
        failed = cb.number in self._fail
        if not failed:
            queue = self.cl_runtime(False).queue
            for pipeline, bound, groups, threads in cb.work:
                for b in bound:
                    cl.enqueue_copy(queue, b.device_buffer, b.host, is_blocking=False)
                pipeline.kernel.set_args(*(b.device_buffer for b in bound))
                cl.enqueue_nd_range_kernel(queue, pipeline.kernel, (groups * threads,), (threads,))
                for b in bound:
                    cl.enqueue_copy(queue, b.host, b.device_buffer, is_blocking=False)
                self.dispatches_run += 1
            queue.finish()
        cb.complete(failed)
