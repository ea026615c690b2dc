/* ImageDecoder's run-time half: encoded bytes -> an HxWxC uint8 image, by stb_image (Debian's libstb-dev,
 * public domain / MIT; only its JPEG, PNG, BMP, PNM and GIF decoders are compiled). Untrusted input: the header's
 * dimensions are checked against the caller's bound before stb allocates anything, a JPEG without its end marker
 * (a truncated file, which stb would pad with grey) is refused, and every failure returns 1 with nothing written
 * past out[max_h * max_w * channels]. SIMD is off so every board decodes to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_ONLY_PNM
#define STBI_ONLY_GIF
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#define STBI_NO_SIMD
#define STBI_NO_FAILURE_STRINGS
#define STBI_MAX_DIMENSIONS (1 << 16)
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#if defined(__clang__) || defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <stb_image.h>
#if defined(__clang__) || defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

int fxc_image_decode(const uint8_t *data, int64_t len, uint8_t *out, int64_t max_h, int64_t max_w, int64_t channels,
                     int64_t bgr, int64_t exact, int64_t *dims);

static int jpeg_complete(const uint8_t *data, int64_t len) {
    if (len < 4 || data[0] != 0xFF || data[1] != 0xD8) return 1;
    for (int64_t i = len - 2; i >= 2; i--)
        if (data[i] == 0xFF && data[i + 1] == 0xD9) return 1;
    return 0;
}

/* Decode data[0, len) into out (row-major H x W x channels, channels 3: RGB, or BGR when bgr; 1: ITU-R 601-2 luma
 * of the RGB pixels, as PIL's convert("L")); dims gets {H, W, channels}. exact: the image must be max_h x max_w;
 * else at most that. Returns 0, or 1 (dims {0, 0, channels}) when the bytes are not an image of a compiled
 * format, are corrupt or truncated, or exceed the bound. */
int fxc_image_decode(const uint8_t *data, int64_t len, uint8_t *out, int64_t max_h, int64_t max_w, int64_t channels,
                     int64_t bgr, int64_t exact, int64_t *dims) {
    int w = 0, h = 0, comp = 0;
    dims[0] = 0;
    dims[1] = 0;
    dims[2] = channels;
    if (len <= 0 || len > INT32_MAX || (channels != 1 && channels != 3) || !jpeg_complete(data, len)) return 1;
    if (!stbi_info_from_memory(data, (int)len, &w, &h, &comp) || w <= 0 || h <= 0) return 1;
    if (exact ? (h != max_h || w != max_w) : (h > max_h || w > max_w)) return 1;
    int dw = 0, dh = 0;
    unsigned char *rgb = stbi_load_from_memory(data, (int)len, &dw, &dh, &comp, 3);
    if (rgb == NULL) return 1;
    if (dw != w || dh != h) {
        stbi_image_free(rgb);
        return 1;
    }
    size_t pixels = (size_t)w * (size_t)h;
    if (channels == 3 && !bgr) {
        memcpy(out, rgb, pixels * 3);
    } else if (channels == 3) {
        for (size_t i = 0; i < pixels; i++) {
            out[3 * i] = rgb[3 * i + 2];
            out[3 * i + 1] = rgb[3 * i + 1];
            out[3 * i + 2] = rgb[3 * i];
        }
    } else {
        for (size_t i = 0; i < pixels; i++)
            out[i] = (uint8_t)((rgb[3 * i] * 19595u + rgb[3 * i + 1] * 38470u + rgb[3 * i + 2] * 7471u + 0x8000u) >> 16);
    }
    stbi_image_free(rgb);
    dims[0] = h;
    dims[1] = w;
    return 0;
}
