"""riftco's own Metal runtime (backends/metal/objc_runtime.py), proven without a Mac.

1. Apple's declared API: every selector the bridge sends (``objc.SELECTORS``) has the
   encodings ``api_table.json`` took from Apple's declarations (pyobjc's macOS metadata),
   and the fake Objective-C runtime refuses anything else, including another arity.
2. The runtime on ``objc_fake.FakeObjC`` (a fake libobjc + Metal over PoCL whose command
   buffers run only when waited for): batching, sync points, the upload hazard, command
   buffer faults and recovery, compiler logs, and lifetimes balanced object by object.
3. A short training run through the real runtime code at threadgroup size 1024, against
   the CPU backend from the same weights and batches.
4. Choosing the runtime: objc by default on a Mac, metalcompute as an announced fallback.
"""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from riftco.backends.metal import objc as objc_mod
from riftco.backends.metal import objc_runtime as ort

try:
    from riftco.backends.opencl import runtime as clrt

    _devices, _why = clrt.enumerate_devices()
except Exception as exc:  # pyopencl missing or broken
    _devices, _why = [], f"pyopencl import failed: {exc}"
needs_cl = pytest.mark.skipif(not _devices, reason=f"the fake runs on OpenCL: {_why}")


def _table():
    import json
    from importlib import resources

    return json.loads(
        resources.files("riftco.backends.metal").joinpath("api_table.json").read_text()
    )


# -- 1. the declared API ------------------------------------------------------------------
def test_every_selector_matches_apples_declaration():
    table = _table()["selectors"]
    assert sorted(objc_mod.SELECTORS) == sorted(table), "regenerate: make_api_table.py"
    for name, sig in objc_mod.SELECTORS.items():
        entry = table[name]
        assert name.count(":") == len(entry["arguments"]) == len(sig.arguments), name
        assert (sig.returns, list(sig.arguments)) == (entry["returns"], entry["arguments"]), name


def test_functions_and_constants_match_the_table():
    table = _table()
    assert table["functions"]["MTLCreateSystemDefaultDevice"] == {
        **table["functions"]["MTLCreateSystemDefaultDevice"], "returns": "@", "owned": True,
    }  # fmt: skip
    enums = table["enums"]
    assert ort.LANGUAGE_VERSION == enums["MTLLanguageVersion2_3"]
    assert ort.STORAGE_SHARED == enums["MTLResourceStorageModeShared"]
    assert ort.STATUS_COMPLETED == enums["MTLCommandBufferStatusCompleted"]
    assert ort.STATUS_ERROR == enums["MTLCommandBufferStatusError"]


def test_prototypes_are_exact_c_types():
    sig = objc_mod.SELECTORS["dispatchThreadgroups:threadsPerThreadgroup:"]
    assert sig.prototype() == "void(*)(void *, void *, MTLSize, MTLSize)"
    sig = objc_mod.SELECTORS["newLibraryWithSource:options:error:"]
    assert sig.prototype() == "void *(*)(void *, void *, void *, void *, void **)"


@pytest.fixture
def fake():
    from riftco.backends.metal.objc_fake import FakeObjC

    if not _devices:
        pytest.skip(f"the fake runs on OpenCL: {_why}")
    return FakeObjC()


def test_fake_refuses_selectors_outside_the_table(fake, monkeypatch):
    from riftco.backends.metal.objc_fake import ObjCFault

    monkeypatch.setitem(objc_mod.SELECTORS, "newBufferWithBytes:length:options:",
                        objc_mod.Signature("@", ("^v", "Q", "Q")))  # fmt: skip
    o = objc_mod.ObjC(fake)
    device = int(objc_mod.ffi.cast("uintptr_t", fake.create_system_default_device()))
    with pytest.raises(ObjCFault, match="not in api_table.json"):
        o.send(device, "newBufferWithBytes:length:options:", objc_mod.ffi.NULL, 4, 0)


@pytest.mark.parametrize(
    "signature",
    [objc_mod.Signature("@", ("Q",)), objc_mod.Signature("@", ("q", "Q")),
     objc_mod.Signature("Q", ("Q", "Q"))],
    ids=["arity", "argument type", "return type"],
)  # fmt: skip
def test_fake_refuses_another_prototype(fake, monkeypatch, signature):
    from riftco.backends.metal.objc_fake import ObjCFault

    monkeypatch.setitem(objc_mod.SELECTORS, "newBufferWithLength:options:", signature)
    o = objc_mod.ObjC(fake)
    device = int(objc_mod.ffi.cast("uintptr_t", fake.create_system_default_device()))
    with pytest.raises(ObjCFault, match="Apple declares"):
        o.send(device, "newBufferWithLength:options:", *([16, 0][: len(signature.arguments)]))


def test_fake_refuses_unrecognized_selectors_and_poolless_autorelease(fake):
    from riftco.backends.metal.objc_fake import ObjCFault

    o = objc_mod.ObjC(fake)
    device = int(objc_mod.ffi.cast("uintptr_t", fake.create_system_default_device()))
    with pytest.raises(ObjCFault, match=r"-\[MTLDevice commit\]: unrecognized selector"):
        o.send(device, "commit")
    with pytest.raises(ObjCFault, match="no pool in place"):
        o.string("leaks")  # autoreleased with no NSAutoreleasePool
    o.release(device)
    with pytest.raises(ObjCFault, match="freed"):
        o.send(device, "name")


# -- 2. the runtime on the fake -----------------------------------------------------------
@pytest.fixture
def rt(fake):
    runtime = ort.ObjCMetalRuntime(fake)
    program = runtime.compile(
        "__kernel void copy(__global const float* a, __global float* b)"
        " { size_t i = get_global_id(0); if (i < 2) b[i] = a[i]; }\n"
        "__kernel void inc(__global float* x) { if (get_global_id(0) == 0) x[0] += 1.0f; }\n",
        "test.cl",
    )
    yield fake, runtime, program.kernel("copy"), program.kernel("inc")
    runtime.close()


def _f32(values):
    return np.asarray(values, dtype=np.float32)


def test_dispatches_batch_into_one_command_buffer_until_a_sync_point(rt):
    fake, runtime, _, inc = rt
    x = runtime.allocate(4)
    runtime.upload(x, _f32([0]))
    for _ in range(10):
        runtime.launch(inc, 1, [x])
    assert fake.command_buffers_made == 1 and fake.dispatches_run == 0  # encoded, not run
    assert runtime.counters["command_buffers"] == 0  # not even committed yet
    np.testing.assert_array_equal(runtime.download(x, 4).view(np.float32), [10.0])
    assert runtime.counters["command_buffers"] == 1 and fake.dispatches_run == 10
    assert fake.waits == 1 and runtime.counters["drains"] == 1


def test_the_cap_commits_without_waiting_and_bounds_what_is_in_flight(rt, monkeypatch):
    monkeypatch.setattr(ort, "MAX_BATCH", 3)
    monkeypatch.setattr(ort, "MAX_IN_FLIGHT", 2)
    fake, runtime, _, inc = rt
    x = runtime.allocate(4)
    runtime.upload(x, _f32([0]))
    for _ in range(7):
        runtime.launch(inc, 1, [x])
    assert runtime.counters["command_buffers"] == 2 and fake.dispatches_run == 0
    for _ in range(2):  # the third commit puts 3 in flight: the oldest is waited for
        runtime.launch(inc, 1, [x])
    assert fake.dispatches_run == 3 and fake.waits == 1
    np.testing.assert_array_equal(runtime.download(x, 4).view(np.float32), [9.0])


def test_upload_into_a_buffer_pending_work_reads_waits_for_it(rt):
    fake, runtime, copy, _ = rt
    a, b = runtime.allocate(8), runtime.allocate(8)
    runtime.upload(a, _f32([1, 2]))
    runtime.launch(copy, 2, [a, b])
    runtime.upload(a, _f32([7, 8]))  # the pending copy must read [1, 2]
    assert fake.dispatches_run == 1
    np.testing.assert_array_equal(runtime.download(b, 8).view(np.float32), [1, 2])


def test_upload_waits_for_a_committed_command_buffer_still_in_flight(rt, monkeypatch):
    monkeypatch.setattr(ort, "MAX_BATCH", 1)  # every dispatch committed at once, not waited
    fake, runtime, copy, _ = rt
    a, b = runtime.allocate(8), runtime.allocate(8)
    runtime.upload(a, _f32([1, 2]))
    runtime.launch(copy, 2, [a, b])
    assert runtime.counters["command_buffers"] == 1 and fake.dispatches_run == 0
    runtime.upload(a, _f32([7, 8]))  # in flight, committed: still reads a
    assert fake.dispatches_run == 1
    np.testing.assert_array_equal(runtime.download(b, 8).view(np.float32), [1, 2])


def test_upload_into_an_unused_buffer_does_not_submit(rt):
    fake, runtime, copy, _ = rt
    a, b, c = (runtime.allocate(8) for _ in range(3))
    runtime.upload(a, _f32([1, 2]))
    runtime.launch(copy, 2, [a, b])
    runtime.upload(c, _f32([3, 4]))
    assert runtime.counters["command_buffers"] == 0 and fake.dispatches_run == 0
    assert runtime.counters["upload_waits_skipped"] == 1


def test_a_faulting_command_buffer_raises_and_riftco_recovers(rt):
    fake, runtime, copy, inc = rt
    a, b = runtime.allocate(8), runtime.allocate(8)
    runtime.upload(a, _f32([1, 2]))
    fake.fail_command_buffer(fake.command_buffers_made + 1)
    runtime.launch(copy, 2, [a, b])
    runtime.launch(inc, 1, [b])
    with pytest.raises(ort.MetalCommandBufferError) as info:
        runtime.synchronize()
    text = str(info.value)
    assert "fake Metal device" in text and "GPU Address Fault" in text
    assert "2 dispatches, first copy, last inc" in text
    runtime.launch(copy, 2, [a, b])  # usable afterwards
    np.testing.assert_array_equal(runtime.download(b, 8).view(np.float32), [1, 2])


def test_compiler_log_raises_on_failure_and_is_kept_on_success(rt):
    from riftco.errors import KernelCompileError

    _, runtime, _, _ = rt
    with pytest.raises(KernelCompileError, match=r"(?s)broken\.cl on fake Metal.*undeclared"):
        runtime.compile("__kernel void k(__global float* x) { x[0] = nope; }", "broken.cl")
    program = runtime.compile(
        "#warning riftco says hello\n__kernel void k(__global float* x) { x[0] = 1.0f; }",
        "warns.cl",
    )
    assert "riftco says hello" in program.build_log.text
    with pytest.raises(KernelCompileError, match="'missing' not found in warns.cl"):
        program.kernel("missing")


def test_pipeline_states_are_made_once_per_function(rt):
    fake, runtime, copy, _ = rt
    made = fake.made["MTLComputePipelineState"]
    program = runtime.compile("__kernel void k(__global float* x) { x[0] = 1.0f; }", "k.cl")
    assert program.kernel("k") is program.kernel("k")
    assert fake.made["MTLComputePipelineState"] == made + 1


def test_a_kernel_outlives_its_program(rt):
    """Found by the fake (a message to a freed pipeline): the kernel object must keep its
    pipeline state alive after the program object is gone, and release it once after."""
    fake, runtime, _, _ = rt
    kernel = runtime.compile(
        "__kernel void one(__global float* x) { x[0] = 1.0f; }", "one.cl"
    ).kernel("one")
    gc.collect()  # the program (and its library) is gone
    x = runtime.allocate(4)
    runtime.launch(kernel, 1, [x])
    np.testing.assert_array_equal(runtime.download(x, 4).view(np.float32), [1.0])
    pipeline = kernel.pipeline
    del kernel
    gc.collect()
    assert fake.releases[pipeline] == fake.retains[pipeline] + 1


@pytest.mark.parametrize("fast", [False, True], ids=["safe math (default)", "fast math"])
def test_math_mode_reaches_the_compiler(fake, fast):
    """The runtime compiles with safe math unless asked (docs/DECISIONS.md), and the fake
    honours the options it is given: PoCL folds ``x != x`` to false under fast math."""
    runtime = ort.ObjCMetalRuntime(fake, fast_math=fast)
    try:
        probe = runtime.compile(
            "__kernel void probe(__global float* out, __global const float* x)"
            " { out[0] = x[0] != x[0] ? 1.0f : 0.0f; }",
            "probe.cl",
        ).kernel("probe")
        out, x = runtime.allocate(4), runtime.allocate(4)
        runtime.upload(x, _f32([np.nan]))
        runtime.launch(probe, 1, [out, x])
        got = runtime.download(out, 4).view(np.float32)[0]
        assert got == (0.0 if fast else 1.0), f"fast_math={fast}: NaN != NaN gave {got}"
    finally:
        runtime.close()


def test_the_backend_compiles_with_safe_math_unless_told(fake, monkeypatch):
    from riftco.backends.metal.backend import MetalBackend

    monkeypatch.delenv("RIFTCO_FAST_MATH", raising=False)
    backend = MetalBackend(0, objc_library=fake)
    assert backend.runtime.fast_math is False
    backend.runtime.close()
    monkeypatch.setenv("RIFTCO_FAST_MATH", "1")
    backend = MetalBackend(0, objc_library=fake)
    assert backend.runtime.fast_math is True
    backend.runtime.close()


def _balanced(fake) -> list[str]:
    """Objects whose releases differ from their retains + 1 (the +1 of their creation)."""
    return [
        f"{cls} {h:#x}: +{fake.retains[h] + 1} -{fake.releases[h]}"
        for h, cls in fake.ever.items()
        if fake.releases[h] != fake.retains[h] + 1
    ]


def test_lifetimes_balance_after_a_workload(fake):
    """Every object made (device, queue, options, libraries, pipelines, buffers, command
    buffers, encoders, strings, errors, pools) is released exactly once more than it was
    retained, and nothing is alive once the backend is gone. Before the runtime kept its
    command buffers past the autorelease pool, the fake's over-release check fired."""
    import riftco.ops as ops
    from riftco.backends.metal.backend import MetalBackend

    backend = MetalBackend(0, objc_library=fake)
    x = backend.from_numpy(np.arange(600, dtype=np.float32).reshape(6, 100))
    for _ in range(3):
        x = ops.add_scalar(ops.softmax(x), 1.0)
    want = x.numpy()
    fake.fail_command_buffer(fake.command_buffers_made + 1)
    y = ops.exp(x)
    with pytest.raises(ort.MetalCommandBufferError):
        y.numpy()
    assert fake.live()["MTLCommandBuffer"] == 0  # retired, also the failed one
    np.testing.assert_allclose(x.numpy(), want)
    runtime = backend.runtime
    del x, y, backend
    gc.collect()
    runtime.close()
    del runtime
    gc.collect()
    assert fake.live() == {}, fake.live()
    assert _balanced(fake) == []
    # the three softmax + add rounds in one command buffer, the failed exp in another
    assert fake.made["MTLCommandBuffer"] == 2 and fake.made["NSAutoreleasePool"] > 3


def test_a_dying_buffer_is_released_only_after_the_work_that_uses_it(rt):
    fake, runtime, copy, _ = rt
    a, b = runtime.allocate(8), runtime.allocate(8)
    runtime.launch(copy, 2, [a, b])
    handle = b.handle
    del b
    gc.collect()
    assert fake.releases[handle] == 0  # pending work binds it: released later
    runtime.synchronize()
    assert fake.releases[handle] == fake.retains[handle] + 1


# -- 3. a training run through the runtime, group size 1024 --------------------------------
def _losses(device, steps: int) -> list[float]:
    from riftco.nn import GPT, GPTConfig
    from riftco.train.data import CharDataset, load_text
    from riftco.train.loop import TrainConfig, Trainer

    text, source = load_text(None)
    data = CharDataset.from_text(text[:20_000], 8, source)
    cfg = GPTConfig(vocab=data.tokenizer.vocab_size, context=8, layers=1, heads=2, width=16)
    trainer = Trainer(GPT(cfg, device=device, seed=0), data,
                      TrainConfig(steps=steps, batch_size=2, grad_clip=1.0))  # fmt: skip
    return [float(trainer.train_step()) for _ in range(steps)]


@needs_cl
def test_training_at_group_size_1024_follows_the_cpu_backend(monkeypatch, registry):
    import riftco
    from riftco import plugins

    monkeypatch.setenv("RIFTCO_METAL_STANDIN", "1")
    monkeypatch.setenv("RIFTCO_METAL_RUNTIME", "objc")
    monkeypatch.setenv("RIFTCO_STANDIN_GROUP_SIZE", "1024")
    plugins.reset_registry()
    metal = riftco.device("metal")
    assert metal.backend.runtime_kind == "objc"
    got = _losses(metal, 6)
    want = _losses(riftco.device("cpu"), 6)
    np.testing.assert_allclose(got, want, rtol=2e-4)


# -- 4. choosing the runtime -----------------------------------------------------------------
@pytest.fixture
def on_a_mac(monkeypatch, registry):
    """The backend module believing it runs on macOS, with its system probe forgotten."""
    from riftco.backends.metal import backend as mb

    monkeypatch.setattr(mb.sys, "platform", "darwin")
    monkeypatch.setattr(mb, "_SYSTEM_PROBE", {})
    monkeypatch.delenv("RIFTCO_METAL_STANDIN", raising=False)
    monkeypatch.delenv("RIFTCO_METAL_RUNTIME", raising=False)
    return mb


@needs_cl
def test_on_a_mac_the_objc_runtime_is_the_default(on_a_mac, monkeypatch):
    from riftco.backends.metal.objc_fake import FakeObjC

    monkeypatch.setattr(objc_mod, "load_system_library", FakeObjC)
    choice = on_a_mac.choose_runtime()
    assert (choice.kind, choice.why) == ("objc", "objc (the default)")
    assert on_a_mac.MetalBackend.is_available() == (True, "")
    (info,) = on_a_mac.MetalBackend.devices()
    assert info.details["runtime"] == "objc" and info.details["unified_memory"] is True
    backend = on_a_mac.MetalBackend(0)
    assert backend.runtime_kind == "objc"
    np.testing.assert_array_equal(
        backend.sqrt(backend.from_numpy(_f32([4, 9]))).numpy(), _f32([2, 3])
    )
    backend.runtime.close()


@needs_cl
def test_on_a_mac_a_failing_objc_runtime_falls_back_to_metalcompute_and_says_so(
    on_a_mac, monkeypatch
):
    from riftco.backends.metal import standin

    def no_libobjc():
        raise OSError("dlopen(/usr/lib/libobjc.A.dylib) failed (test)")

    monkeypatch.setattr(objc_mod, "load_system_library", no_libobjc)
    monkeypatch.setattr(on_a_mac, "load_metalcompute", lambda: (standin, ""))
    with pytest.warns(RuntimeWarning, match=r"objc runtime could not start .*\(test\)"):
        choice = on_a_mac.choose_runtime()
    assert choice.kind == "metalcompute" and "using metalcompute" in choice.why
    monkeypatch.setattr(on_a_mac, "load_metalcompute", lambda: (None, "not installed (test)"))
    with warnings.catch_warnings(record=True) as said:  # nothing to fall back to
        warnings.simplefilter("always")
        ok, reason = on_a_mac.MetalBackend.is_available()
    assert not said and not ok
    assert "objc runtime could not start" in reason and "not installed (test)" in reason


def test_an_unknown_runtime_name_is_refused_with_the_choices(monkeypatch, registry):
    from riftco.backends.metal.backend import MetalBackend

    monkeypatch.setenv("RIFTCO_METAL_RUNTIME", "swift")
    ok, reason = MetalBackend.is_available()
    assert not ok and "RIFTCO_METAL_RUNTIME='swift'" in reason and "objc, metalcompute" in reason
