"""The image decoder's C code (runtime_c/image/fxc_image.c over stb_image.h from Debian's libstb-dev), compiled only
for models whose graph holds an ImageDecoder (ops/image_decoder.py): an object per target, linked beside the model
(emit/link.py `model_parts`), and a shared library for this machine's JIT (run/backend.py, emit/measure.py).

Both are cached under the runtime's cache directory by a key of the wrapper's and stb_image.h's bytes, the target,
the flags and zig's version; stb_image.h is found at build time and its absence is one error line."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from functools import cache
from importlib import metadata
from pathlib import Path

from ..errors import ToolchainError
from ..ir import BODY_ATTR, Graph
from ..resources import data_dir
from ..target.boards import Target
from ..target.cpus import cache_root
from .link import C_FLAGS, compile_runtime_source, zig_tool

OP = "ImageDecoder"
HEADER = "stb_image.h"
HEADER_DIRS = ("/usr/include/stb", "/usr/local/include/stb")
"""Where Debian's libstb-dev puts stb_image.h ($FLUIDML_XC_STB_DIR first when set)."""
DECODER_FLAGS = ("-fwrapv",)
"""Signed overflow wraps: stb's integer IDCT overflows on corrupt coefficients (UBSan under tests/test_image_decoder.py's
fuzzing); the wrapped values are clamped to 0..255 like any other."""
HOST_FLAGS = ("-std=c99", "-O2", "-shared", "-fPIC", "-g0", *DECODER_FLAGS)


def uses_decoder(graph: Graph) -> bool:
    """Whether the graph (or a run-time Loop's body in it) holds an ImageDecoder."""
    return any((node.op_type == OP and not node.domain) or (BODY_ATTR in node.attrs and uses_decoder(node.attrs[BODY_ATTR]))
               for node in graph.nodes)


def header_dir() -> Path:
    """The directory holding stb_image.h; ToolchainError naming the package when there is none."""
    given = os.environ.get("FLUIDML_XC_STB_DIR")
    for directory in ([given] if given else []) + list(HEADER_DIRS):
        if (Path(directory) / HEADER).is_file():
            return Path(directory)
    raise ToolchainError(f"ImageDecoder needs stb_image.h (Debian's libstb-dev), found in none of {', '.join(HEADER_DIRS)}: "
                         "apt-get install libstb-dev (or set FLUIDML_XC_STB_DIR to the directory holding stb_image.h)")


def _source() -> Path:
    return data_dir("runtime_c") / "image" / "fxc_image.c"


def _key(what: str, *flags: str) -> str:
    digest = hashlib.sha256("\0".join([what, *flags, metadata.version("ziglang")]).encode())
    for path in (_source(), header_dir() / HEADER):
        digest.update(b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _cached(name: str, build) -> Path:
    """cache_root()/runtime/NAME, built by build(tmp_path) into a temporary name and renamed (safe in parallel)."""
    final = cache_root() / "runtime" / name
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-image-", dir=final.parent))
    try:
        build(work / name)
        os.replace(work / name, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def decoder_object(target: Target) -> Path:
    """fxc_image.o for the target's baseline CPU (as the runtime), compiled once into the cache."""
    name = f"{target.name}-image-{_key(target.zig_target, *C_FLAGS, *DECODER_FLAGS)}.o"
    return _cached(name, lambda out: compile_runtime_source(target, _source(), [header_dir()], out, DECODER_FLAGS))


def model_parts(graph: Graph, target: Target) -> list[Path]:
    """The runtime objects only this graph's ops call: [the decoder] when it holds an ImageDecoder, else []."""
    return [decoder_object(target)] if uses_decoder(graph) else []


@cache
def load_host_decoder() -> Path:
    """The decoder as a shared library for this machine, loaded into the process so the JIT resolves
    fxc_image_decode (once per process)."""
    import llvmlite.binding as llvm

    from ..target.jit import jit_setup

    def build(out: Path) -> None:
        src = _source()
        zig_tool("cc", [*HOST_FLAGS, f"-I{header_dir()}", src.name, "-o", out.resolve()], "compiling the image decoder",
                 cwd=src.parent)

    path = _cached(f"host-image-{_key('host', *HOST_FLAGS)}.so", build)
    jit_setup()
    llvm.load_library_permanently(str(path))
    return path


def prepare_jit(graph: Graph) -> None:
    """Load the host decoder when the graph's code calls it (before its JIT engine resolves symbols)."""
    if uses_decoder(graph):
        load_host_decoder()
