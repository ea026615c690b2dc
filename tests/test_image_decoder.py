"""Issue #29: ImageDecoder (docs/IMAGES.md). A model decoding JPEG/PNG/BMP/PNM/GIF bytes made by Pillow here, then
Resize and a small CNN, against ONNX Runtime on the decoded pixels (ONNX Runtime has no ImageDecoder) and the pixels
against Pillow; the JIT, an x86_64 artifact with a run-time byte length, the cross boards under qemu; bytes that
must fail the run (corrupt, truncated, huge declared sizes) through the JIT and the runner; the decoder under
AddressSanitizer + UBSan on mutated files; the build's one-line errors."""
from __future__ import annotations

import random
import subprocess

import numpy as np
import onnx
import pytest

pytest.importorskip("PIL", reason="Pillow makes the test images (pip install pillow)")

from image_models import (H, W, decoder_model, encode, hostile_images, ort_cnn, picture, pil_decode,  # noqa: E402
                          pipeline_model)
from modelrun import cli, one_line_error, require_emulator  # noqa: E402

from fluidml_xc.errors import RunCheckFailed  # noqa: E402
from fluidml_xc.run.backend import FxcBackend  # noqa: E402

JPEG_MAX_DIFF = 3
JPEG_MEAN_DIFF = 0.25
"""stb_image's JPEG decoder against libjpeg's (through Pillow), measured on 80 pictures of image_models.picture
(qualities 50-95, baseline and progressive, 4:4:4 and 4:2:0): values differ by at most 3 (0.01% of them; by 2: up to
3.7%), the mean difference stays under 0.2 (docs/IMAGES.md); PNG, BMP, PNM and GIF are exact."""
FORMATS = {"PNG": {}, "JPEG": {"quality": 90}, "BMP": {}, "PPM": {}, "GIF": {}}


def _images(seed: int = 0) -> dict[str, np.ndarray]:
    pic = picture(seed=seed)
    out = {fmt: encode(pic, fmt, **opts) for fmt, opts in FORMATS.items()}
    out["progressive JPEG"] = encode(pic, "JPEG", quality=80, progressive=True)
    return out


def _check_pixels(fmt: str, got: np.ndarray, data: np.ndarray, pixel_format: str = "RGB") -> None:
    want = pil_decode(data, pixel_format)
    assert got.shape == want.shape and got.dtype == np.uint8
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    assert diff.max() <= (JPEG_MAX_DIFF if "JPEG" in fmt else 0), (fmt, diff.max())
    assert diff.mean() <= JPEG_MEAN_DIFF, (fmt, diff.mean())


def _check_pipeline(fmt: str, data: np.ndarray, y: np.ndarray, image: np.ndarray) -> None:
    _check_pixels(fmt, image, data)
    np.testing.assert_allclose(y, ort_cnn(image), rtol=1e-4, atol=1e-5)
    if "JPEG" not in fmt:
        np.testing.assert_allclose(y, ort_cnn(pil_decode(data)), rtol=1e-4, atol=1e-5)


def test_pipeline_jit_against_onnxruntime():
    """ImageDecoder -> Cast, Transpose, Resize -> CNN in-process, every compiled format; the decoded image (declared
    [40, 48, 3], so a static tensor the CNN reads) against Pillow, the CNN output against ONNX Runtime."""
    rep = FxcBackend.prepare(pipeline_model())
    for fmt, data in _images().items():
        y, image = rep.run([data])
        _check_pipeline(fmt, data, y, image)


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_pixel_formats_jit(pixel_format):
    c = 1 if pixel_format == "Grayscale" else 3
    rep = FxcBackend.prepare(decoder_model(pixel_format, declared=(H, W, c)))
    for fmt, data in _images(seed=2).items():
        (image,) = rep.run([data])
        _check_pixels(fmt, image, data, pixel_format)


def test_bounded_output_jit():
    """Without a declared shape, --max-dim bounds height and width; the output has the image's actual dims."""
    from fluidml_xc.run.backend import compile_model

    model = decoder_model(length=None)
    for h, w in [(17, 30), (64, 5), (64, 64)]:
        data = encode(picture(h, w, seed=h), "PNG")
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = len(data)
        run = compile_model(model, None, max_dims={"dec": 64})
        (image,) = run({"data": data})
        assert image.shape == (h, w, 3) and np.array_equal(image, pil_decode(data))
    data = encode(picture(65, 8), "PNG")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = len(data)
    with pytest.raises(RunCheckFailed, match=r"at most 64x64 pixels.*--max-dim dec=N"):
        compile_model(model, None, max_dims={"dec": 64})({"data": data})


def test_hostile_bytes_fail_the_run_jit():
    """Truncated, corrupt, huge and unsupported files: the run fails naming the node, nothing else happens."""
    rep = FxcBackend.prepare(pipeline_model())
    for what, data in hostile_images().items():
        with pytest.raises(RunCheckFailed, match=r"ImageDecoder node 'dec': .* corrupt or truncated"):
            rep.run([data])
        assert what


def _build(tmp_path, model: onnx.ModelProto, *args: str, board: str = "x86_64"):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    out = tmp_path / f"art-{board}"
    proc = cli("build", str(path), "--board", board, "-o", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    return out


def _run(tmp_path, art, feeds: dict[str, np.ndarray]) -> tuple[subprocess.CompletedProcess, dict]:
    feed, out = tmp_path / "feed.npz", tmp_path / "out.npz"
    np.savez(feed, **feeds)
    out.unlink(missing_ok=True)
    proc = cli("run", str(art), "--inputs", str(feed), "--outputs", str(out))
    return proc, (dict(np.load(out)) if proc.returncode == 0 else {})


def test_pipeline_artifact_runtime_length(tmp_path):
    """One x86_64 build for any encoded length up to 16 KiB (--input-shape data=1..16384): every format's bytes
    through the runner, against Pillow and ONNX Runtime; hostile bytes exit with the node's one line."""
    art = _build(tmp_path, pipeline_model(), "--input-shape", "data=1..16384")
    for fmt, data in _images(seed=1).items():
        proc, outs = _run(tmp_path, art, {"data": data})
        assert proc.returncode == 0, proc.stderr
        _check_pipeline(fmt, data, outs["y"], outs["image"])
    for data in hostile_images().values():
        proc, _ = _run(tmp_path, art, {"data": data})
        assert "ImageDecoder node 'dec'" in one_line_error(proc)
        assert not (tmp_path / "out.npz").exists()
    np.savez(tmp_path / "png.npz", data=_images(seed=1)["PNG"])
    line = one_line_error(cli("verify", str(art), "--inputs", str(tmp_path / "png.npz")))
    assert "it has no ImageDecoder: --oracle spec" in line
    proc = cli("verify", str(art), "--inputs", str(tmp_path / "png.npz"), "--oracle", "spec")
    assert proc.returncode == 0, proc.stderr


def test_bounded_artifact_and_runner_exit(tmp_path):
    """--max-dim: a data-dependent output; an image above the bound: the runner prints the line and exits 3."""
    art = _build(tmp_path, decoder_model("BGR", length=None), "--input-shape", "data=1..20000", "--max-dim", "dec=48")
    data = encode(picture(33, 47, seed=4), "JPEG", quality=95)
    proc, outs = _run(tmp_path, art, {"data": data})
    assert proc.returncode == 0, proc.stderr
    _check_pixels("JPEG", outs["image"], data, "BGR")
    big = encode(picture(49, 20), "BMP")
    np.save(tmp_path / "big.npy", big)
    runner = subprocess.run([str(art / "runner"), "-i", str(tmp_path / "big.npy"), "-o", str(tmp_path / "o.npy")],
                            capture_output=True, text=True, timeout=120)
    assert runner.returncode == 3 and "at most 48x48 pixels" in runner.stderr and not (tmp_path / "o.npy").exists()


def test_build_errors(tmp_path):
    """No bound: one line naming --max-dim; a declared shape of the wrong channel count; no stb_image.h."""
    path = tmp_path / "m.onnx"
    onnx.save(decoder_model(length=100), path)
    line = one_line_error(cli("build", str(path), "-o", str(tmp_path / "a")))
    assert "--max-dim dec=N" in line and "declare the output's shape [H, W, 3]" in line
    onnx.save(decoder_model("Grayscale", declared=(8, 8, 3), length=100), path)
    assert "a Grayscale image is [H, W, 1]" in one_line_error(cli("build", str(path), "-o", str(tmp_path / "b")))
    onnx.save(decoder_model(declared=(8, 8, 3), length=100), path)
    proc = cli("build", str(path), "-o", str(tmp_path / "c"), pre="import fluidml_xc.emit.image_runtime as m; m.HEADER_DIRS = (); ",
               env={"FLUIDML_XC_STB_DIR": str(tmp_path)})
    assert "apt-get install libstb-dev" in one_line_error(proc)
    assert not (tmp_path / "c").exists()


def test_decoder_linked_only_when_used(tmp_path):
    """The decoder's object is in libmodel.a (and the runner) of a model with ImageDecoder only."""
    import sys

    from modelrun import save_relu_model

    def members(art):
        listing = subprocess.run([sys.executable, "-m", "ziglang", "ar", "t", str(art / "libmodel.a")], check=True,
                                 capture_output=True, text=True).stdout.split()
        return [m for m in listing if "-image-" in m]

    art = _build(tmp_path, decoder_model(declared=(H, W, 3), length=300))
    assert len(members(art)) == 1
    plain = tmp_path / "plain"
    assert cli("build", str(save_relu_model(tmp_path / "relu.onnx")), "-o", str(plain)).returncode == 0
    assert members(plain) == []


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7", "qemu-riscv64"])
def test_pipeline_cross_boards(tmp_path, board):
    """The decoder cross-compiled by zig for each board (no SIMD in stb: the same bytes as x86_64) under qemu."""
    require_emulator(board)
    art = _build(tmp_path, pipeline_model(), "--input-shape", "data=1..16384", board=board)
    here = FxcBackend.prepare(pipeline_model())
    for fmt, data in _images(seed=5).items():
        proc, outs = _run(tmp_path, art, {"data": data})
        assert proc.returncode == 0, proc.stderr
        _check_pipeline(fmt, data, outs["y"], outs["image"])
        assert np.array_equal(outs["image"], here.run([data])[1]), fmt
    proc, _ = _run(tmp_path, art, {"data": hostile_images()["truncated JPEG"]})
    assert "ImageDecoder node 'dec'" in one_line_error(proc)


# ------------------------------------------------------------------------- AddressSanitizer + UBSan

FUZZ_IMAGES = 400
DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
int fxc_image_decode(const uint8_t *, int64_t, uint8_t *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t *);
int main(int argc, char **argv) {
    int decoded = 0;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) return 2;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *data = malloc(n > 0 ? (size_t)n : 1);   /* exactly the file: a read past it is reported */
        if (fread(data, 1, (size_t)n, f) != (size_t)n) return 2;
        fclose(f);
        for (int64_t c = 1; c <= 3; c += 2) {
            uint8_t *out = malloc(64 * 64 * c);            /* exactly the bound: a write past it is reported */
            int64_t dims[3];
            int rc = fxc_image_decode(data, n, out, 64, 64, c, i & 1, 0, dims);
            if (rc == 0 && (dims[0] < 1 || dims[0] > 64 || dims[1] < 1 || dims[1] > 64 || dims[2] != c)) return 3;
            decoded += rc == 0;
            free(out);
        }
        free(data);
    }
    printf("%d\n", decoded);
    return 0;
}
"""


def _mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        if kind < 0.5 and buf:
            for _ in range(rng.randint(1, 8)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif kind < 0.7 and len(buf) > 2:
            del buf[rng.randrange(1, len(buf)):]
        elif kind < 0.85:
            at = rng.randrange(len(buf) + 1)
            buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif len(buf) > 24:  # a header field set to a large value
            at = rng.randrange(2, min(len(buf) - 4, 40))
            buf[at:at + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x00\x00\xff\xff", b"\x7f\xff\x00\x00", b"\x00\x00\x00\x00"])
    return bytes(buf)


def test_decoder_fuzz_under_asan_and_ubsan(request, tmp_path):
    """Mutated JPEG, progressive JPEG, PNG, BMP, PNM and GIF files (byte flips, truncations, insertions, large header
    fields) and the hostile set through fxc_image.c built with ASan + UBSan, output buffers exactly the bound."""
    from test_fuzz import SANITIZE, _sanitizer_report, sanitizer_cc

    from fluidml_xc.emit.image_runtime import DECODER_FLAGS, header_dir
    from fluidml_xc.resources import data_dir

    cc = sanitizer_cc(tmp_path)
    (tmp_path / "drv.c").write_text(DRIVER)
    exe = tmp_path / "drv"
    subprocess.run([*cc, *SANITIZE, *DECODER_FLAGS, "-std=c99", f"-I{header_dir()}", str(tmp_path / "drv.c"),
                    str(data_dir("runtime_c") / "image" / "fxc_image.c"), "-o", str(exe)], check=True, timeout=300)
    given = request.config.getoption("--fuzz-cases")
    count = int(given) if given else FUZZ_IMAGES
    rng = random.Random(int(request.config.getoption("--fuzz-seed") or 29))
    bases = [bytes(d) for d in [*_images(seed=3).values(), encode(picture(20, 70), "PNG"), encode(picture(9, 9), "GIF")]]
    files = []
    for i in range(count):
        path = tmp_path / f"case{i}.bin"
        path.write_bytes(_mutate(rng.choice(bases), rng))
        files.append(path)
    for k, data in enumerate([*bases, *(bytes(d) for d in hostile_images().values())]):
        files.append(tmp_path / f"fixed{k}.bin")
        files[-1].write_bytes(data)
    proc = subprocess.run([str(exe), *map(str, files)], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0 and not _sanitizer_report(proc.stderr), proc.stderr[-3000:]
    decoded = int(proc.stdout)
    assert 2 * len(bases) <= decoded < 2 * len(files)
    print(f"\nimage decoder fuzz: {len(files)} files, {decoded} of {2 * len(files)} decodes succeeded")


def test_runner_under_asan_and_ubsan(request, tmp_path):
    """The pipeline's runner (runtime, glue, model.o and the decoder) built with ASan + UBSan: valid images exit 0 with
    Pillow's pixels, hostile and mutated bytes exit 0 or 3 (the node's line), never a sanitizer report."""
    from test_fuzz import _sanitizer_report, sanitized_runner, sanitizer_cc

    from fluidml_xc.emit.image_runtime import DECODER_FLAGS, header_dir
    from fluidml_xc.resources import data_dir

    cc = sanitizer_cc(tmp_path)
    art = _build(tmp_path, pipeline_model(), "--input-shape", "data=1..16384")
    runner = sanitized_runner(art, tmp_path, cc, (*DECODER_FLAGS, f"-I{header_dir()}",
                                                   str(data_dir("runtime_c") / "image" / "fxc_image.c")))
    rng = random.Random(int(request.config.getoption("--fuzz-seed") or 29))
    images = _images(seed=6)
    cases = [(fmt, bytes(d), True) for fmt, d in images.items()]
    cases += [(what, bytes(d), False) for what, d in hostile_images().items()]
    cases += [("mutated", _mutate(bytes(rng.choice(list(images.values()))), rng), None) for _ in range(40)]
    for k, (what, data, valid) in enumerate(cases):
        feed, out = tmp_path / f"in{k}.npy", tmp_path / f"image{k}.npy"
        np.save(feed, np.frombuffer(data, np.uint8))
        proc = subprocess.run([str(runner), "-i", str(feed), "-o", str(tmp_path / f"y{k}.npy"), "-o", str(out)],
                              capture_output=True, text=True, timeout=300)
        assert not _sanitizer_report(proc.stderr), (what, proc.stderr[-3000:])
        assert proc.returncode in ((0,) if valid else (3,) if valid is False else (0, 3)), (what, proc.stderr)
        if valid:
            _check_pixels(what, np.load(out), np.frombuffer(data, np.uint8))
        elif proc.returncode == 3:
            assert "ImageDecoder node 'dec'" in proc.stderr and not out.exists(), what
