"""Compile the C runtime and link runners and libmodel.a with ziglang's `zig cc` (static musl).

Only model.o is compiled for the board's CPU. The runtime, the glue and the runners' libc are compiled for the
target's baseline CPU (zig's baseline: x86-64, armv8-a, armv7-a + NEON): they are not hot code, they must run far
enough on any CPU of the architecture to refuse one that lacks what model.o needs (runtime_c/cpu.c), and every
board of an architecture shares one cache entry (the runtime objects in cache_dir()/runtime, musl libc and
compiler-rt in zig's global cache), built once with a notice (`RuntimeNotice`).

A build --name NAME links libNAME.a (model + glue) and ships the runtime beside it as libfxc_runtime.a, the
same bytes for every model of a board: an application links each model's library and one runtime."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import platform
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Sequence

from .. import tempfiles
from ..progress import progress_bar
from ..target.boards import Target
from ..target.cpus import cache_root
from ..target.kernel_cache import KernelCache
from ..errors import ToolchainError
from ..resources import data_dir, package_digest
from .capi import CApi

C_FLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-fdebug-compilation-dir=.")
"""-fdebug-compilation-dir and the -ffile-prefix-map of _prefix_maps keep directories out of the objects' debug
info: the same model, board and options give byte-identical artifacts wherever they are built."""
LIBRARY_SOURCES = ("npy.c", "timer.c", "rss.c", "pool.c", "cpu.c")
RUNNER_SOURCES = ("runner.c", "prof.c", "noprof.c")


@dataclass(frozen=True)
class LinkResult:
    runner: Path
    runner_prof: Path | None
    library: Path
    runtime_library: Path | None = None
    """libfxc_runtime.a beside a named library (None: the runtime is inside libmodel.a)."""


def cache_dir() -> Path:
    """Root of fluidml-xc's caches: $FLUIDML_XC_CACHE, else ~/.cache/fluidml-xc."""
    return cache_root()


def zig_cache_dir() -> Path:
    """zig's global cache (its musl and compiler-rt builds): $ZIG_GLOBAL_CACHE_DIR, else ~/.cache/zig."""
    if os.environ.get("ZIG_GLOBAL_CACHE_DIR"):
        return Path(os.environ["ZIG_GLOBAL_CACHE_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zig"


def is_host_target(target: Target) -> bool:
    return platform.machine().lower() in target.uname_machines


def cpu_flags(target: Target, cpu: str) -> list[str]:
    """zig's -mcpu for an LLVM cpu name (cortex-a72 -> cortex_a72); "native" only when building for this host."""
    if not cpu or cpu == "generic":
        return []
    if cpu == "native":
        return ["-mcpu=native"] if is_host_target(target) else []
    return ["-mcpu=" + cpu.replace("-", "_").replace(".", "_")]


def _first_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[0] if lines else "no diagnostic"


def _zig(tool: str, args: Sequence[str | os.PathLike], what: str, private_cache: Path | None = None,
         cwd: Path | None = None) -> None:
    """Run a zig tool; with private_cache, zig caches into that directory instead of ~/.cache/zig."""
    cmd = [*zig_command(), tool, *map(str, args)]
    env = None
    if private_cache is not None:
        env = {**os.environ, "ZIG_GLOBAL_CACHE_DIR": str(private_cache), "ZIG_LOCAL_CACHE_DIR": str(private_cache)}
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, cwd=cwd)
    if proc.returncode != 0:
        if "No module named ziglang" in proc.stderr:
            raise ToolchainError("ziglang is not installed: pip install ziglang")
        raise ToolchainError(f"zig {tool} failed ({what}): {_first_error(proc.stderr)}")


@functools.cache
def zig_command() -> tuple[str, ...]:
    """ziglang's zig executable, run directly: `python -m ziglang` execs the same binary after a Python start-up
    (about 0.1 s of CPU per call; a build calls zig five to seven times). Elsewhere than POSIX, or when the
    package holds no `zig` file, `python -m ziglang` itself."""
    zig = _ziglang_dir()
    if os.name == "posix" and zig is not None and os.access(zig / "zig", os.X_OK):
        return (str(zig / "zig"),)
    return (sys.executable, "-m", "ziglang")


def _base_args(target: Target, cpu: str) -> list[str]:
    return ["-target", target.zig_target, *cpu_flags(target, cpu)]


RUNTIME_CPU = ""
"""The runtime, glue and libc are compiled for zig's baseline CPU of the target (no -mcpu)."""


def compile_runtime_source(target: Target, source: Path, include_dirs: Sequence[Path], out: Path,
                           flags: Sequence[str] = ()) -> Path:
    """One C source compiled as the runtime's are (baseline CPU, C_FLAGS + `flags`, no directory in the object), for a
    runtime part kept outside the runtime's cache entry (emit/image_runtime.py)."""
    return _compile(target, RUNTIME_CPU, source, include_dirs, out, flags=flags)


def zig_tool(tool: str, args: Sequence[str | os.PathLike], what: str, cwd: Path | None = None) -> None:
    """Run `zig TOOL ARGS` (ziglang's, zig_command); a failure is one ToolchainError line naming `what`."""
    _zig(tool, args, what, cwd=cwd)


def _ziglang_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("ziglang")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]).resolve() if locations else None


def _prefix_maps() -> list[str]:
    """zig's own headers are `zig` in debug info (sources are compiled by relative name, see _compile)."""
    zig = _ziglang_dir()
    return [f"-ffile-prefix-map={zig}=zig"] if zig is not None and "=" not in str(zig) else []


def _compile(target: Target, cpu: str, source: Path, include_dirs: Sequence[Path], out: Path,
             defines: Sequence[str] = (), flags: Sequence[str] = ()) -> Path:
    """Compile from the source's directory by relative name: no directory reaches the object's debug info, and
    none reaches zig's dependency files (which cannot hold quotes)."""
    source = Path(source).resolve()
    includes = ["-I." if Path(d).resolve() == source.parent else f"-I{Path(d).resolve()}" for d in include_dirs]
    _zig("cc", [*_base_args(target, cpu), *C_FLAGS, *flags, *_prefix_maps(), *(f"-D{d}" for d in defines), *includes, "-c",
                source.name, "-o", Path(out).resolve()], f"compiling {source.name}", cwd=source.parent)
    return out


def merge_objects(objects: Sequence[Path], out_obj: Path) -> Path:
    """One relocatable object from several (ld.lld -r): the code variants of a model built for several CPUs."""
    out_obj = Path(out_obj)
    name = f".merge-{os.getpid()}-{out_obj.name}"
    with _plain_alias(out_obj.parent) as plain:
        _zig("ld.lld", ["-r", *objects, "-o", plain / name], "merging the code variants")
    os.replace(out_obj.parent / name, out_obj)
    return out_obj


def model_object_key(target: Target, objects: Sequence[bytes], weights: bytes, symbol: str, alignment: int,
                     labels: Sequence[tuple[str, int]]) -> str:
    """The cache key of a model object merged by attach_weights (or merge_objects when there are no weights): its
    objects' bytes in order, the weights, their symbol, alignment and labels, the target, zig's version and our
    sources (how the blob is assembled)."""
    text = json.dumps(["model object", 1, package_digest(), [hashlib.sha256(code).hexdigest() for code in objects],
                       hashlib.sha256(weights).hexdigest(), symbol, alignment, [[n, int(o)] for n, o in labels],
                       _base_args(target, RUNTIME_CPU), metadata.version("ziglang")])
    return hashlib.sha256(text.encode()).hexdigest()


def attach_weights(target: Target, code_objs: Sequence[Path], weights: bytes, symbol: str, out_obj: Path,
                   alignment: int = 64, labels: Sequence[tuple[str, int]] = ()) -> Path:
    """One relocatable object = the model code (one object per code variant, or per unit) + the weights blob as
    `symbol` in .rodata (hidden), shared by the variants; `labels` (name, offset): a hidden weak symbol per unit
    constant at its offset in the blob (weak: two models with the same constant link into one program).

    The blob is assembled from .incbin directives by zig cc and merged with a relocatable link (ld.lld -r),
    so the weights never pass through LLVM IR text. Each piece between two labels is a file of its own: LLVM's
    assembler reads the whole file for every .incbin, so pieces of one file cost its size per label (a 4.7 MB
    blob with 273 labels took 1.3 s to assemble, its pieces 0.05 s). zig caches that assembly in a private
    directory removed afterwards: in its global cache every build would leave a copy of its weights behind.
    """
    work = Path(tempfile.mkdtemp(prefix=".weights-", dir=out_obj.parent))
    try:
        asm = work / "weights.S"
        for name in [symbol, *(name for name, _ in labels)]:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"weights symbol {name!r} is not an identifier")
        # names relative to `work`: no directory (a user's -o path, a random temporary name) reaches the object
        asm.write_text(f'.section .rodata.{symbol},"a"\n.p2align {max(alignment.bit_length() - 1, 0)}\n'
                       f'.globl {symbol}\n.hidden {symbol}\n{symbol}:\n{_labelled_blob(work, weights, labels)}')
        blob_obj = work / "weights.o"
        with _plain_alias(work) as plain:
            _zig("cc", [*_base_args(target, RUNTIME_CPU), "-g0", "-fdebug-compilation-dir=.", "-c", "weights.S", "-o",
                        "weights.o"], "assembling the weights", private_cache=plain / "zig-cache", cwd=work)
            _zig("ld.lld", ["-r", *code_objs, blob_obj, "-o", plain / "merged.o"], "merging code and weights")
        os.replace(work / "merged.o", out_obj)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out_obj


def _labelled_blob(work: Path, weights: bytes, labels: Sequence[tuple[str, int]]) -> str:
    """The blob's pieces written to work/weights.N.bin, each included whole, a hidden weak label at each offset of
    `labels`."""
    lines, pieces, at = [], [], 0
    view = memoryview(weights)

    def piece(end: int) -> None:
        name = f"weights.{len(pieces)}.bin"
        (work / name).write_bytes(view[at:end])
        pieces.append(name)
        lines.append(f'.incbin "{name}"')

    for name, offset in sorted(labels, key=lambda label: label[1]):
        if not 0 <= offset <= len(weights):
            raise ValueError(f"weights label {name!r} at {offset} is outside the {len(weights)}-byte blob")
        if offset > at:
            piece(offset)
        at = max(at, offset)
        lines += [f".weak {name}", f".hidden {name}", f"{name}:"]
    if len(weights) > at or not lines:
        piece(len(weights))
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _plain_alias(directory: Path):
    """`directory` under a name of plain characters (a symbolic link in the system's temporary directory), for
    the files zig and lld write: zig writes its cache's paths into Makefile-style dependency files, which cannot
    hold a newline, and lld writes an output through a temporary file named by replacing every '%' of its path."""
    with tempfile.TemporaryDirectory(prefix=tempfiles.prefix("link")) as tmp:
        alias = Path(tmp) / "dir"
        alias.symlink_to(Path(directory).resolve(), target_is_directory=True)
        yield alias


def _runtime_key(target: Target) -> str:
    digest = hashlib.sha256()
    flags = [target.zig_target, *C_FLAGS, metadata.version("ziglang"), "prefix-maps-2", "baseline"]
    digest.update("\0".join(flags).encode())
    for path in sorted(data_dir("runtime_c").iterdir()):
        if path.suffix in (".c", ".h"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class RuntimeNotice:
    """What a build says while it builds the runtime for an architecture the first time: one line on stderr, and
    a bar over the steps on a terminal (progress.py)."""

    def __init__(self, target: Target, where: Path, steps: int):
        from tqdm import tqdm

        tqdm.write(f"fluidml-xc: building the runtime for {target.name} once (C runtime, then musl libc and compiler-rt "
                   f"by zig: up to a minute); cached in {where} and {zig_cache_dir()}", file=sys.stderr)
        self._bar = progress_bar(total=steps, desc=f"runtime for {target.name}", unit="step")

    def step(self, done: str, next_step: str = "") -> None:
        self._bar.update(1)
        self._bar.set_postfix_str(next_step or done)

    def close(self) -> None:
        self._bar.close()


_HELLO = "int main(void) { return 0; }\n"


def _runtime_entry(target: Target) -> tuple[Path, dict[str, Path]]:
    """The runtime's cache directory for the target and its object per source."""
    final = cache_dir() / "runtime" / f"{target.name}-{_runtime_key(target)}"
    return final, {name: final / (Path(name).stem + ".o") for name in LIBRARY_SOURCES + RUNNER_SOURCES}


def runtime_cached(target: Target) -> bool:
    """Whether runtime_objects(target) finds every object in the cache (builds nothing)."""
    return all(obj.is_file() for obj in _runtime_entry(target)[1].values())


def runtime_objects(target: Target) -> dict[str, Path]:
    """The runtime's objects for the target's baseline CPU, compiled once into the cache (atomic, safe in
    parallel); the first time, a program is linked too so zig builds and caches musl libc and compiler-rt."""
    final, objects = _runtime_entry(target)
    root = final.parent
    names = LIBRARY_SOURCES + RUNNER_SOURCES
    if all(obj.is_file() for obj in objects.values()):
        return objects
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    notice = RuntimeNotice(target, final, len(names) + 1)
    try:
        src = data_dir("runtime_c")
        with ThreadPoolExecutor(max_workers=min(len(names), os.cpu_count() or 1)) as pool:
            jobs = [(name, pool.submit(_compile, target, RUNTIME_CPU, src / name, [src], tmp / (Path(name).stem + ".o")))
                    for name in names]
            for name, job in jobs:
                job.result()
                notice.step(name, "musl libc and compiler-rt (zig)" if name == names[-1] else "")
        (tmp / "hello.c").write_text(_HELLO)
        _link(target, [tmp / "hello.c"], tmp / "hello", "building musl libc and compiler-rt")
        notice.step("libc")
        for extra in ("hello.c", "hello"):
            (tmp / extra).unlink()
        try:
            os.rename(tmp, final)
        except OSError:
            if not all(obj.is_file() for obj in objects.values()):
                raise
    finally:
        notice.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return objects


def _link(target: Target, inputs: Sequence[Path | str], out: Path, what: str) -> Path:
    # --strip-debug: zig's cached musl objects carry the directories they were first built in
    _zig("cc", [*_base_args(target, RUNTIME_CPU), "-O2", "-static", *inputs, "-lm", "-Wl,--strip-debug", "-o", out], what)
    return out


def glue_key(target: Target, glue_c: Path, include_dir: Path) -> str:
    """The cache key of the glue's object: its source and name, the headers beside it (model.h), the target, the
    flags, zig's version and our sources (the rest it includes is zig's libc)."""
    def digest(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    headers = [[h.name, digest(h)] for h in sorted(Path(include_dir).glob("*.h"))]
    text = json.dumps(["glue object", 1, package_digest(), Path(glue_c).name, digest(Path(glue_c)), headers, _base_args(target, RUNTIME_CPU),
                       list(C_FLAGS), _prefix_maps(), metadata.version("ziglang")])
    return hashlib.sha256(text.encode()).hexdigest()


def _glue_object(target: Target, glue_c: Path, include_dir: Path, out: Path, cache: KernelCache | None) -> Path:
    """The glue compiled into `out`, or its object from `cache` (the kernel cache, under glue_key)."""
    key = glue_key(target, glue_c, include_dir) if cache is not None else None
    code = cache.get(key) if key else None
    if code is not None:
        out.write_bytes(code)
        return out
    _compile(target, RUNTIME_CPU, glue_c, [include_dir], out)
    if key:
        cache.put(key, out.read_bytes())
    return out


def link_artifact(target: Target, model_obj: Path, prof_obj: Path | None, glue_c: Path,
                  include_dir: Path, out_dir: Path, api: CApi = CApi(), cache: KernelCache | None = None,
                  model_parts: Sequence[Path] = (), model_ready: Callable[[], object] = lambda: None) -> LinkResult:
    """Link `runner`, `runner_prof` (when prof_obj is given) and the library into out_dir: libmodel.a with the
    runtime inside, or for a named API libNAME.a (model + glue) and libfxc_runtime.a (the runtime, shared); the
    glue's object comes from `cache` when it holds one for the same source, headers, target and zig. `model_parts`:
    runtime objects only this model's ops call (the image decoder), linked and archived beside the model;
    `model_ready()` returns once model_obj is written (the build merges it while the glue compiles)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rt = runtime_objects(target)
    library_objs = [rt[name] for name in LIBRARY_SOURCES]
    # outputs through a plain-named alias of out_dir (_plain_alias)
    with tempfile.TemporaryDirectory(prefix=tempfiles.prefix("link")) as tmp, _plain_alias(out_dir) as plain:
        glue_o = _glue_object(target, Path(glue_c), Path(include_dir), Path(tmp) / (Path(glue_c).stem + ".o"), cache)
        runner_o = rt["runner.c"]
        if api.name:  # the runner calls the glue by its fxc_ names: map them to this API's (fxc_runtime.h)
            src = data_dir("runtime_c")
            runner_o = _compile(target, RUNTIME_CPU, src / "runner.c", [src], Path(tmp) / "runner.o",
                                [f"FXC_PREFIX={api.prefix}"])
        model_ready()
        library = plain / api.library
        library.unlink(missing_ok=True)
        parts = list(model_parts)
        archives = [(library, [model_obj, *parts, glue_o, *library_objs])]
        runtime_library = None
        if api.runtime_library:
            runtime_library = plain / api.runtime_library
            runtime_library.unlink(missing_ok=True)
            archives = [(library, [model_obj, *parts, glue_o]), (runtime_library, library_objs)]
        jobs = [(_link, [runner_o, rt["noprof.c"], glue_o, model_obj, *parts, *library_objs], plain / "runner",
                 "linking runner")]
        if prof_obj is not None:
            jobs.append((_link, [runner_o, rt["prof.c"], glue_o, prof_obj, *parts, *library_objs],
                         plain / "runner_prof", "linking runner_prof"))
        with ThreadPoolExecutor(max_workers=len(jobs) + len(archives)) as pool:
            futures = [pool.submit(fn, target, inputs, out, what) for fn, inputs, out, what in jobs]
            futures += [pool.submit(_zig, "ar", ["rcs", archive, *members], f"creating {archive.name}") for archive, members in archives]
            for future in futures:
                future.result()
    return LinkResult(runner=out_dir / "runner", runner_prof=out_dir / "runner_prof" if prof_obj is not None else None,
                      library=out_dir / api.library,
                      runtime_library=out_dir / api.runtime_library if api.runtime_library else None)


def compile_c_program(target: Target, cpu: str, sources: Sequence[Path], include_dirs: Sequence[Path],
                      libs: Sequence[Path | str], out: Path) -> Path:
    """Compile and statically link a C program (e.g. an application using model.h + libmodel.a).

    `libs` are archives/objects (paths) or linker flags such as "-lfoo"."""
    with contextlib.ExitStack() as stack:  # every path through a plain-named alias (_plain_alias)
        def plain(path: Path | str) -> Path:
            return stack.enter_context(_plain_alias(Path(path).parent)) / Path(path).name

        includes = [f"-I{stack.enter_context(_plain_alias(Path(d)))}" for d in include_dirs]
        files = [*map(plain, sources), *(lib if isinstance(lib, str) else plain(lib) for lib in libs)]
        _zig("cc", [*_base_args(target, cpu), "-O2", "-static", *includes, *files, "-lm", "-o", plain(out)],
             f"building {Path(out).name}")
    return Path(out)
