"""Work a cold build does off its critical path (issue #27): the glue templates compiled once per installation
(emit/capi.TemplateCache), the kernel cache written while the units compile (emit/unit_build.CacheWriter) and the
artifact's files hashed on every core (artifact.sha256_files)."""
from __future__ import annotations

import hashlib

import jinja2
import pytest

from fluidml_xc import build as build_mod
from fluidml_xc.artifact import sha256_files
from fluidml_xc.build import BuildOptions, compile_graph
from fluidml_xc.emit import capi, unit_build
from fluidml_xc.emit.capi import ModelSpec, TensorSpec, render_sources
from fluidml_xc.emit.units import OBJECT_MAGIC
from fluidml_xc.pipeline import import_graph
from fluidml_xc.target.boards import get_board
from test_kernel_units import FakeCache, _model

SPEC = ModelSpec(name="affine", inputs=[TensorSpec("x", (2, 3), "float32")],
                 outputs=[TensorSpec("y", (2, 3), "float32")], arena_bytes=24, ops=[("mul", "Mul")])


def _render(out):
    """The glue rendered by a fresh environment (what a new build process does)."""
    capi._environment.cache_clear()
    out.mkdir()
    return [p.read_bytes() for p in render_sources(SPEC, out)]


def test_templates_compile_once_then_load_the_same_code(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path / "cache"))
    first = _render(tmp_path / "first")
    assert len(list((tmp_path / "cache" / "templates").iterdir())) == 2  # model.h and the glue

    def refuse(*args, **kwargs):
        raise AssertionError("a template was compiled again")
    monkeypatch.setattr(jinja2.Environment, "compile", refuse)
    assert _render(tmp_path / "second") == first
    capi._environment.cache_clear()


def test_a_template_cache_that_cannot_be_written_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "templates").write_text("a file where the folder would be")
    assert _render(tmp_path / "out") == _render(tmp_path / "again")
    capi._environment.cache_clear()


class RecordingCache(FakeCache):
    def __init__(self, events: list[str], fail: bool = False):
        super().__init__()
        self.events, self.fail = events, fail

    def put(self, key: str, data: bytes) -> bool:
        if self.fail:
            raise RuntimeError("the disk is on fire")
        self.events.append("object" if data.startswith(OBJECT_MAGIC) else "entry")
        return super().put(key, data)


def _build(tmp_path, monkeypatch, cache, compiled_event: list[str] | None = None):
    monkeypatch.setattr(build_mod, "kernel_cache", lambda: cache)
    if compiled_event is not None:
        compile_code = unit_build.compile_code
        monkeypatch.setattr(unit_build, "compile_code",
                            lambda text, spec: (compiled_event.append("compile"), compile_code(text, spec))[1])
    workdir = tmp_path / "w"
    workdir.mkdir()
    return compile_graph(import_graph(_model()), get_board("x86_64"), BuildOptions(board="x86_64", workers=1), workdir)


def test_objects_are_stored_as_they_are_compiled(tmp_path, monkeypatch):
    """An object reaches the cache before the last unit is compiled (not all of them after the last); every one
    of them and every unit's record does."""
    events: list[str] = []
    cache = RecordingCache(events)
    compiled = _build(tmp_path, monkeypatch, cache, events)
    assert events.count("compile") == compiled.kernels.compiled == events.count("object")
    assert events.index("object") < len(events) - 1 - events[::-1].index("compile")
    assert events.count("entry") >= compiled.kernels.emitted


def test_a_cache_write_error_reaches_the_build(tmp_path, monkeypatch):
    with pytest.raises(RuntimeError, match="on fire"):
        _build(tmp_path, monkeypatch, RecordingCache([], fail=True))


def test_files_hashed_on_threads_are_their_sha256(tmp_path):
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"f{i}")
        paths[-1].write_bytes(bytes([i]) * (i * 700_001))
    assert sha256_files(paths) == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_model_o_is_merged_while_the_glue_compiles(tmp_path, monkeypatch):
    """The merge of model.o (build._link_units) waits here until the glue's compile has started: a build that merged
    first and compiled the glue after would wait in vain."""
    import threading

    import numpy as np
    import onnx
    import onnx.numpy_helper

    from fluidml_xc.emit import link
    from modelrun import matmul_relu_model, rand, run

    glue_started, merge_saw_it = threading.Event(), []
    link_units, glue_object = build_mod._link_units, link._glue_object

    def merge(*args):
        merge_saw_it.append(glue_started.wait(timeout=30))
        return link_units(*args)

    def glue(*args):
        glue_started.set()
        return glue_object(*args)
    monkeypatch.setattr(build_mod, "_link_units", merge)
    monkeypatch.setattr(link, "_glue_object", glue)
    model = matmul_relu_model(0)
    onnx.save(model, str(tmp_path / "m.onnx"))
    result = build_mod.build_model(tmp_path / "m.onnx", BuildOptions(board="x86_64", out_dir=tmp_path / "out",
                                                                     record_last=False, cache=False))
    assert merge_saw_it == [True]
    w, b = (onnx.numpy_helper.to_array(t) for t in model.graph.initializer)
    x = rand(2, 8, seed=3)
    np.testing.assert_allclose(run(result.artifact, {"x": x})["y"], np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)
