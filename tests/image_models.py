"""Models and encoded images for the ImageDecoder tests (tests/test_image_decoder.py): images made by Pillow here,
a model ImageDecoder -> Cast -> Transpose -> Resize -> a small CNN, and its tail without the decoder for ONNX Runtime."""
from __future__ import annotations

import io

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

H, W = 40, 48
"""The decoded size the pipeline model declares."""
OPSET = 20


def picture(h: int = H, w: int = W, seed: int = 0) -> np.ndarray:
    """A smooth uint8 RGB picture with some noise (so JPEG has both flat areas and detail)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([128 + 100 * np.sin(x / 7.0 + seed), 128 + 100 * np.cos(y / 5.0), (x * 3 + y * 2) % 256], axis=-1)
    return np.clip(rgb + rng.normal(0, 12, rgb.shape), 0, 255).astype(np.uint8)


def encode(pixels: np.ndarray, fmt: str, **options) -> np.ndarray:
    """The picture encoded by Pillow as a uint8 1-D tensor (fmt: PNG, JPEG, BMP, PPM, GIF)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, **options)
    return np.frombuffer(buf.getvalue(), np.uint8).copy()


def pil_decode(data: np.ndarray, pixel_format: str = "RGB") -> np.ndarray:
    """ONNX's reference semantics (onnx.reference's ImageDecoder) through Pillow, converted to RGB first."""
    from PIL import Image

    img = Image.open(io.BytesIO(data.tobytes()))
    if pixel_format == "Grayscale":
        return np.asarray(img.convert("RGB").convert("L"))[..., None]
    rgb = np.asarray(img.convert("RGB"))
    return rgb[..., ::-1] if pixel_format == "BGR" else rgb


def decoder_model(pixel_format: str = "RGB", declared: tuple[int, ...] | None = None, length: int | str = "N",
                  name: str = "dec") -> onnx.ModelProto:
    """ImageDecoder alone; `declared`: the output's shape in the model (None: unknown dims)."""
    c = 1 if pixel_format == "Grayscale" else 3
    out_shape = list(declared) if declared else ["H", "W", c]
    node = helper.make_node("ImageDecoder", ["data"], ["image"], name=name, pixel_format=pixel_format)
    graph = helper.make_graph([node], "decode", [helper.make_tensor_value_info("data", TensorProto.UINT8, [length])],
                              [helper.make_tensor_value_info("image", TensorProto.UINT8, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    return model


def _cnn_nodes(seed: int = 3):
    rng = np.random.default_rng(seed)
    inits = {
        "axes": np.array([0], np.int64), "sizes": np.array([1, 3, 32, 32], np.int64),
        "scale": np.array(1 / 255, np.float32),
        "W": (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "B": rng.standard_normal(4).astype(np.float32),
        "G": rng.standard_normal((4, 5)).astype(np.float32), "C": rng.standard_normal(5).astype(np.float32),
    }
    nodes = [
        helper.make_node("Cast", ["image"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["f"], ["chw"], perm=[2, 0, 1]),
        helper.make_node("Unsqueeze", ["chw", "axes"], ["nchw"]),
        helper.make_node("Resize", ["nchw", "", "", "sizes"], ["r"], mode="linear"),
        helper.make_node("Mul", ["r", "scale"], ["x"]),
        helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["v"]),
        helper.make_node("Gemm", ["v", "G", "C"], ["y"]),
    ]
    return nodes, [numpy_helper.from_array(v, k) for k, v in inits.items()]


def pipeline_model(length: int | str = "N") -> onnx.ModelProto:
    """data -> ImageDecoder (RGB, declared [H, W, 3]) -> Cast, Transpose, Resize to 32x32, /255 -> Conv, Relu,
    MaxPool, GlobalAveragePool, Gemm -> y [1, 5]; the decoded image is an output too."""
    nodes, inits = _cnn_nodes()
    dec = helper.make_node("ImageDecoder", ["data"], ["image"], name="dec", pixel_format="RGB")
    graph = helper.make_graph([dec, *nodes], "pipeline",
                              [helper.make_tensor_value_info("data", TensorProto.UINT8, [length])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5]),
                               helper.make_tensor_value_info("image", TensorProto.UINT8, [H, W, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    return model


def cnn_model() -> onnx.ModelProto:
    """The pipeline without its decoder: the image is the input (ONNX Runtime has no ImageDecoder)."""
    nodes, inits = _cnn_nodes()
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("image", TensorProto.UINT8, [H, W, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    return model


def ort_cnn(image: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(cnn_model().SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"image": image})[0]


def hostile_images() -> dict[str, np.ndarray]:
    """Bytes that must fail the run cleanly: truncated, corrupt, not an image, huge declared dimensions."""
    pic = picture()
    jpeg, png, bmp = encode(pic, "JPEG", quality=90), encode(pic, "PNG"), encode(pic, "BMP")
    huge_png = bytearray(png.tobytes())
    huge_png[16:24] = (60000).to_bytes(4, "big") + (60000).to_bytes(4, "big")  # IHDR width, height (CRC now wrong)
    huge_bmp = bytearray(bmp.tobytes())
    huge_bmp[18:26] = (1 << 20).to_bytes(4, "little") + (1 << 20).to_bytes(4, "little")
    huge_jpeg = bytearray(jpeg.tobytes())
    sof = bytes(huge_jpeg).find(b"\xff\xc0")
    huge_jpeg[sof + 5:sof + 9] = (65000).to_bytes(2, "big") + (65000).to_bytes(2, "big")  # SOF0 height, width
    garbage = np.random.default_rng(1).integers(0, 256, 500).astype(np.uint8)
    return {
        "truncated JPEG": jpeg[: len(jpeg) * 2 // 3], "truncated PNG": png[: len(png) // 2],
        "truncated BMP": bmp[: len(bmp) // 2], "JPEG header only": jpeg[:200],
        "huge PNG": np.frombuffer(bytes(huge_png), np.uint8), "huge BMP": np.frombuffer(bytes(huge_bmp), np.uint8),
        "huge JPEG": np.frombuffer(bytes(huge_jpeg), np.uint8), "random bytes": garbage,
        "one byte": np.array([0xFF], np.uint8), "TIFF": encode(pic, "TIFF"),
    }
